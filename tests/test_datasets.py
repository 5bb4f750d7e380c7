"""Workloads from the command line (harness.config.datasets, issue 73 item 5): ``--dataset random
--input-len N --output-len M`` and ``--dataset FILE.jsonl`` replace the regime's workloads, are
recorded and fingerprinted like ``--set``, and ``bench validate`` prints the plan with them. No
engine starts: the random prompts come from the CPU default's converted tokenizer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.commands.common import read_regime
from harness.config.datasets import dataset_overrides
from harness.config.regime import load_regime
from harness.core.overrides import parse_set, record
from harness.run.datasets import target_tokenizer
from harness.run.plan import plan_regime

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ROOT / "regimes" / "cpu_default.yaml"


def _plan(*overrides):  # type: ignore[no-untyped-def]
    regime = read_regime(DEFAULT, overrides)
    return plan_regime(DEFAULT, regime, overrides)


def test_validate_prints_the_random_workload_and_the_override(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["validate", str(DEFAULT), "--dataset", "random", "--input-len", "128", "--output-len", "64"])
    out = " ".join(capsys.readouterr().out.split())  # the terminal wraps
    assert code == 0
    assert "workloads random-in128 (raw)" in out and "max 64 output tokens" in out
    assert "set on the command line: --dataset random --input-len 128 --output-len 64" in out
    assert f"fingerprint {load_regime(DEFAULT).fingerprint()}" not in out  # the regime as run


def test_random_prompts_are_exactly_n_target_tokens_and_follow_the_seed() -> None:
    overrides = dataset_overrides("random", 128, 64)
    plan = _plan(*overrides)
    regime = plan.regime
    assert regime.workloads[0].model_dump() == {"dataset": "random", "input_len": 128}
    assert regime.load.max_output_tokens == 64 and regime.load.ignore_eos  # as vLLM's random dataset
    assert regime.fingerprint() != load_regime(DEFAULT).fingerprint()
    [workload] = plan.workloads
    tokenizer = target_tokenizer(regime, DEFAULT)
    assert len(workload.prompts) == regime.load.num_prompts
    assert {len(tokenizer.encode(p.text, add_special_tokens=True).ids) for p in workload.prompts} == {128}
    assert len({p.text for p in workload.prompts}) == len(workload.prompts)
    # recorded as any override (regime.json's overrides), the prompts' hash as any workload's
    assert [o["given"] for o in record(plan.overrides)] == [
        "--dataset random --input-len 128 --output-len 64"
    ] * 3
    again = _plan(*overrides).workloads[0]
    assert again.content_sha256 == workload.content_sha256 and again.prompts == workload.prompts
    other = _plan(*overrides, parse_set("sampling.seed=1")).workloads[0]
    assert other.content_sha256 != workload.content_sha256
    assert {p.text for p in other.prompts}.isdisjoint(p.text for p in workload.prompts)


def test_a_jsonl_file_replaces_the_workloads(tmp_path: Path) -> None:
    file = tmp_path / "my prompts.jsonl"
    rows = [{"prompt": f"def f{i}(x):"} for i in range(3)] + [
        {"id": "chat", "messages": [{"role": "user", "content": "Hello"}]}
    ]
    file.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    overrides = [*dataset_overrides(str(file), None, 16), parse_set("load.num_prompts=4")]
    plan = _plan(*overrides)
    [workload] = plan.workloads
    assert workload.name == "my_prompts" and workload.definition.prompt_format == "chat"
    assert sorted(p.prompt_id for p in workload.prompts) == ["chat", "line-1", "line-2", "line-3"]
    assert plan.regime.load.max_output_tokens == 16 and not plan.regime.load.ignore_eos
    assert plan.regime.workloads == [str(file.resolve())]


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (
            ["--dataset", "random", "--input-len", "-3"],
            "--input-len -3: expected a positive number of tokens",
        ),
        (
            ["--dataset", "random", "--input-len", "8", "--output-len", "0"],
            "--output-len 0: expected a positive",
        ),
        (["--dataset", "missing.jsonl"], "--dataset missing.jsonl: no such file"),
        (["--dataset", "prompts.csv"], "expected 'random' or a .jsonl file"),
        (["--input-len", "128"], "--input-len goes with --dataset"),
        (["--dataset", "random"], "give the prompt length"),
        (["--dataset", "random", "--input-len", "2000"], "do not fit target.max_model_len 1024"),
    ],
)
def test_bad_dataset_flags_are_one_clear_error(
    flags: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["validate", str(DEFAULT), *flags]) == 2
    err = " ".join(capsys.readouterr().out.split())
    assert said in err and "Traceback" not in err


def test_a_hub_target_not_on_this_machine_is_said_at_validate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    target = "--set=target={path: Someone/Not-Here-7B, dtype: float32, max_model_len: 1024}"
    assert main(["validate", str(DEFAULT), "--dataset", "random", "--input-len", "128", target]) == 2
    said = " ".join(capsys.readouterr().out.split())
    assert (
        "Someone/Not-Here-7B is not in this machine's hub cache" in said
        and "huggingface-cli download" in said
    )
