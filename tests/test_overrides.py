"""A regime changed from the command line (harness.core.overrides): ``--set PATH=VALUE`` and the load
flags are set in the file's data before validation, refused with the flag named where they are
wrong, recorded by the run with where each came from, and fingerprinted as run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.config.regime import load_regime
from harness.core.errors import UserError
from harness.core.overrides import flag_overrides, parse_set

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ROOT / "regimes" / "cpu_default.yaml"


def test_set_and_the_flags_change_the_regime_as_the_file_would() -> None:
    written = load_regime(DEFAULT)
    changed = load_regime(
        DEFAULT,
        [
            parse_set("load.concurrency=[2]"),
            parse_set("arms.ngram_k4.num_speculative_tokens=3"),
            parse_set("arms[1].options.prompt_lookup_max=3"),
            parse_set("engine.env.OMP_NUM_THREADS='2'"),
            *flag_overrides(num_prompts=4),
        ],
    )
    assert changed.load.concurrency == [2] and changed.load.num_prompts == 4
    assert next(a for a in changed.arms if a.name == "ngram_k4").num_speculative_tokens == 3
    assert changed.arms[1].options["prompt_lookup_max"] == 3
    assert changed.engine.env["OMP_NUM_THREADS"] == "2"
    assert changed.fingerprint() != written.fingerprint()  # the regime as run is what is fingerprinted
    # --concurrency gives the levels to measure: no open-loop level unless --request-rate is given too
    levels = load_regime(DEFAULT, flag_overrides(concurrency="1,8", request_rate="0.5"))
    assert levels.load.concurrency == [1, 8] and levels.load.request_rate == [0.5]
    only = load_regime(DEFAULT, flag_overrides(request_rate="2"))
    assert only.load.concurrency == [] and only.load.request_rate == [2.0]
    arms = load_regime(DEFAULT, flag_overrides(arms="ngram_k4"))
    assert [a.name for a in arms.arms] == ["baseline", "ngram_k4"]  # the baseline always runs


@pytest.mark.parametrize(
    ("overrides", "said"),
    [
        (
            [parse_set("load.concurency=[2]")],
            "--set load.concurency=[2]: load.concurency: unknown key 'concurency'; "
            "did you mean 'concurrency'?",
        ),
        (
            [parse_set("load.concurrency=[x]")],
            "--set load.concurrency=[x]: load.concurrency[0]: Input should be a valid integer",
        ),
        (
            [parse_set("load.concurrency=[0]")],
            "--set load.concurrency=[0]: load.concurrency[0]: every concurrency level must be >= 1",
        ),
        (
            [parse_set("arms.ngram_k9.num_speculative_tokens=3")],
            "arms has no item named 'ngram_k9'; did you mean 'ngram_k4'?",
        ),
        ([parse_set("arms[7].num_speculative_tokens=3")], "arms has 2 items, no [7]"),
        ([parse_set("load.num_prompts.x=1")], "load.num_prompts is a value, not a section"),
        (flag_overrides(num_prompts=0), "--num-prompts 0: load.num_prompts: Input should be greater than 0"),
        (
            flag_overrides(arms="ngrm_k4"),
            "--arms ngrm_k4: no arm 'ngrm_k4' (arms: baseline, ngram_k4); did you mean 'ngram_k4'?",
        ),
    ],
)
def test_a_bad_override_names_the_flag_and_what_was_expected(overrides, said: str) -> None:
    with pytest.raises(UserError) as refused:
        load_regime(DEFAULT, overrides)
    assert said in str(refused.value)
    assert "cpu_default.yaml:" not in str(refused.value)  # no line of the file: the file was right


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("load.concurrency", "expected PATH=VALUE"),
        ("=3", "expected PATH=VALUE"),
        ("load.concurrency=[1", "the value is not YAML"),
    ],
)
def test_a_malformed_set_is_refused(text: str, said: str) -> None:
    with pytest.raises(UserError, match=said):
        parse_set(text)
    with pytest.raises(UserError, match="expected ints separated by commas"):
        flag_overrides(concurrency="1,x")


def test_bench_validate_takes_the_overrides_and_says_them() -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "validate",
            str(DEFAULT),
            "--set",
            "load.concurrency=[2]",
            "--num-prompts",
            "4",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "COLUMNS": "300"},
    )
    said = " ".join(out.stdout.split())
    assert out.returncode == 0, out.stdout + out.stderr
    fingerprint = load_regime(DEFAULT, [parse_set("load.concurrency=[2]"), *flag_overrides(num_prompts=4)])
    assert f"fingerprint {fingerprint.fingerprint()}" in said
    assert "set on the command line: --num-prompts 4; --set load.concurrency=[2]" in said
    bad = subprocess.run(
        [sys.executable, "-m", "harness.cli", "validate", str(DEFAULT), "--set", "load.concurrency=[0]"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert bad.returncode == 2 and "Traceback" not in bad.stdout + bad.stderr


def test_a_run_records_its_overrides_and_runs_the_regime_as_set(tmp_path: Path, monkeypatch) -> None:
    from tests.test_run_plan import stand_in_run

    overrides = [parse_set("load.concurrency=[3]"), *flag_overrides(num_prompts=3)]
    run, summary, printed, _, _ = stand_in_run(tmp_path, monkeypatch, overrides=overrides)
    record = json.loads((run.root / "regime.json").read_text())
    assert record["overrides"] == [
        {"path": "load.concurrency", "value": [3], "given": "--set load.concurrency=[3]"},
        {"path": "load.num_prompts", "value": 3, "given": "--num-prompts 3"},
    ]
    assert record["regime"]["load"]["concurrency"] == [3] and record["regime"]["load"]["num_prompts"] == 3
    assert {cell.concurrency for cell in summary.cells} == {3}
    assert summary.overrides == ["--set load.concurrency=[3]", "--num-prompts 3"]
    assert "set on the command line: --set load.concurrency=[3]; --num-prompts 3" in " ".join(printed.split())


def test_what_a_review_found_holds() -> None:
    """An env value as YAML reads it (a number) is text; --arms keeps the gates of the arms it runs
    and needs one besides the baseline; a secret-named value is never echoed; an error the file's
    field gives against an override says the override."""
    env = load_regime(DEFAULT, [parse_set("engine.env.OMP_NUM_THREADS=2"), parse_set("engine.env.X=true")])
    assert env.engine.env["OMP_NUM_THREADS"] == "2" and env.engine.env["X"] == "true"
    kept = load_regime(ROOT / "regimes" / "cpu_smoke.yaml", flag_overrides(arms="self_draft_k3"))
    assert {rule.arm for rule in kept.gates.rules} <= {"*", "baseline", "self_draft_k3"}
    with pytest.raises(UserError, match="name at least one arm besides the baseline"):
        load_regime(DEFAULT, flag_overrides(arms="baseline"))
    with pytest.raises(UserError) as refused:
        load_regime(DEFAULT, [parse_set("engine.env.HF_TOKEN=[1]")])
    assert "--set engine.env.HF_TOKEN=<redacted>" in str(refused.value) and "[1]" not in str(refused.value)
    with pytest.raises(UserError, match=r"with --set arms.baseline.method=ngram from the command line"):
        load_regime(DEFAULT, [parse_set("arms.baseline.method=ngram")])
    from harness.run.plan import plan_regime

    nowhere = [parse_set("workloads[0]=../workloads/nosuch.yaml")]  # found after validation, by the plan
    with pytest.raises(
        UserError, match=r"\(with --set workloads\[0\]=../workloads/nosuch.yaml from the command"
    ):
        plan_regime(DEFAULT, overrides=nowhere)
    with pytest.raises(UserError, match="expected ARM=URL"):
        flag_overrides(endpoints=["ngram_k4.options=http://h:1"])


def test_a_secret_inside_a_mapping_or_a_list_is_redacted_in_every_record() -> None:
    """Issue 70, item 7: --set's mapping form (engine.env={KEY: value}) and a list (a flag and its
    value) hide the secret as the dotted form does; the record's text is built from the redacted
    value, what runs keeps it."""
    from harness.core.overrides import describe, record, shown

    secret, token = "sekrit-value-42", "hf_" + "A" * 30
    overrides = [
        parse_set(f"engine.env={{MY_API_KEY: {secret}, OMP_NUM_THREADS: '2'}}"),
        parse_set(f"engine.extra_args=[--api-key, {secret}, --max-num-seqs, '8']"),
        parse_set(f"arms.ngram_k4.options={{nested: [{{hf_token: {secret}}}], url: 'https://u:{secret}@h'}}"),
        parse_set(f"engine.env.HF_HOME='{token}'"),  # a value of a credential's shape, under any name
    ]
    kept = record(overrides)
    said = describe(overrides) + " ".join(shown(o) for o in overrides) + " ".join(map(str, kept))
    assert secret not in said and token not in said and "<redacted>" in said
    assert kept[0]["value"] == {"MY_API_KEY": "<redacted>", "OMP_NUM_THREADS": "2"}
    assert kept[0]["given"] == "--set engine.env={MY_API_KEY: <redacted>, OMP_NUM_THREADS: '2'}"
    assert kept[1]["value"] == ["--api-key", "<redacted>", "--max-num-seqs", "8"]
    assert kept[2]["value"] == {"nested": [{"hf_token": "<redacted>"}], "url": "https://<redacted>@h"}
    assert overrides[0].value["MY_API_KEY"] == secret  # the server is given it
    assert parse_set("load.concurrency=[1, 8]").given == "--set load.concurrency=[1, 8]"  # as typed
    with pytest.raises(UserError) as refused:  # a message about the override says it redacted too
        load_regime(DEFAULT, [parse_set(f"engine.env.X.Y={{MY_API_KEY: {secret}}}")])
    assert secret not in str(refused.value)
