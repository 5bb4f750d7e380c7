"""The vLLM release a regime pins decides what its arms may say: keys that release removed (named
with the release that removed them), keys it takes and ignores, its environment, suffix decoding
with or without arctic-inference, the drafter-only eager switch where its runner reads it, and a
compile cache per speculative configuration where vLLM's own cache key leaves K out. ``bench
validate --engine-version`` lists what an upgrade breaks. The tables are checked against each
release's own sources in tests/test_engine_contracts.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tomllib
import yaml

from harness.cli import main
from harness.config.engines import get_adapter
from harness.config.engines.vllm import COMPILE_CACHE_ENV, removed_in
from harness.config.engines.vllm_releases import SPECULATIVE_KEYS
from harness.config.regime import load_regime

ROOT = Path(__file__).resolve().parent.parent
DEEPSEEK = ROOT / "regimes" / "h200_tp8_deepseek_mtp.yaml"  # a suffix arm (arms[4]) on vLLM 0.34.0


def _regime_file(tmp_path: Path, source: Path, engine: dict | None = None, **arm_options: dict) -> Path:
    """``source`` with its engine section and arms' options updated, workloads resolved to the
    repository's, written beside the test."""
    data = yaml.safe_load(source.read_text())
    data["engine"] = {**data["engine"], **(engine or {})}
    for arm in data["arms"]:
        arm["options"] = {**arm.get("options", {}), **arm_options.get(arm["name"], {})}
    data["workloads"] = [str((source.parent / w).resolve()) for w in data["workloads"]]
    path = tmp_path / source.name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _validate(capsys, *args: str) -> tuple[int, str]:
    code = main(["validate", *args])
    out = capsys.readouterr()
    return code, " ".join((out.out + out.err).split())


def test_a_suffix_arm_on_0_34_takes_the_corpus_size_and_no_dead_keys(tmp_path: Path, capsys) -> None:
    path = _regime_file(tmp_path, DEEPSEEK, suffix_k16={"suffix_decoding_corpus_tokens": 0})
    code, out = _validate(capsys, str(path))
    assert code == 0, out
    assert '"suffix_decoding_corpus_tokens": 0' in out.replace('\\"', '"')
    dead = _regime_file(tmp_path, DEEPSEEK, suffix_k16={"suffix_decoding_min_token_prob": 0.1})
    code, out = _validate(capsys, str(dead))
    assert code != 0
    assert "arms[4].options.suffix_decoding_min_token_prob" in out
    assert "vLLM 0.34.0 takes it and ignores it: deprecated and has no effect in vLLM 0.34" in out


def test_a_key_0_34_removed_is_refused_naming_the_release(tmp_path: Path, capsys) -> None:
    assert removed_in("disable_padded_drafter_batch", "0.34.0") == "0.34"
    assert removed_in("disable_padded_drafter_batch", "0.33.0") is None
    path = _regime_file(tmp_path, DEEPSEEK, ngram_k4={"disable_padded_drafter_batch": True})
    code, out = _validate(capsys, str(path))
    assert code != 0
    assert f"{path.name}:" in out and "arms[3].options.disable_padded_drafter_batch" in out
    assert "removed in vLLM 0.34" in out and "forbids unknown keys" in out
    on_033 = _regime_file(
        tmp_path, DEEPSEEK, {"version": "0.33.0"}, ngram_k4={"disable_padded_drafter_batch": True}
    )
    assert _validate(capsys, str(on_033))[0] == 0  # 0.33 still takes it


@pytest.mark.parametrize("flag", ["--spec-method", "--spec-model=x", "--spec-tokens", "--spec-m"])
def test_the_speculative_shortcut_flags_are_managed(tmp_path: Path, capsys, flag: str) -> None:
    path = _regime_file(tmp_path, DEEPSEEK, {"extra_args": [flag, "ngram"]})
    code, out = _validate(capsys, str(path))
    assert code != 0 and "engine.extra_args[0]" in out and "speculation is each arm's" in out


def test_engine_version_lists_what_an_upgrade_breaks(tmp_path: Path, capsys) -> None:
    """An 0.33 regime with the keys 0.33 read: under 0.34.0 each is listed with its line."""
    old = {"suffix_decoding_max_spec_factor": 1.0, "suffix_decoding_min_token_prob": 0.1}
    path = _regime_file(
        tmp_path,
        DEEPSEEK,
        {"version": "0.33.0", "env": {"VLLM_USE_V2_MODEL_RUNNER": "0"}},
        suffix_k16=old,
        ngram_k4={"disable_padded_drafter_batch": True},
    )
    assert _validate(capsys, str(path))[0] == 0  # valid as pinned
    code, out = _validate(capsys, str(path), "--engine-version", "0.34.0")
    assert code == 2
    assert "4 thing(s) break under vllm 0.34.0 (pinned: 0.33.0)" in out
    for field in [
        "engine.env.VLLM_USE_V2_MODEL_RUNNER",
        "arms[3].options.disable_padded_drafter_batch",
        "arms[4].options.suffix_decoding_max_spec_factor",
        "arms[4].options.suffix_decoding_min_token_prob",
    ]:
        assert field in out
    code, out = _validate(capsys, str(DEEPSEEK), "--engine-version", "0.34.0")
    assert code == 0 and "nothing breaks under vllm 0.34.0" in out


def test_eager_speculation_where_the_runner_reads_it(tmp_path: Path, capsys) -> None:
    """The drafter-only switch (the drafter's CUDA graphs off) reaches the arms that draft with a
    model where the V1 runner reads it (0.32; 0.33 with VLLM_USE_V2_MODEL_RUNNER=0), and is refused
    on 0.34 and on 0.33's Model Runner V2 naming the release, and where no arm drafts with a model."""
    on_032 = _regime_file(tmp_path, DEEPSEEK, {"version": "0.32.0", "eager_speculation": True})
    code, out = _validate(capsys, str(on_032))
    assert code == 0, out
    launched = out.replace('\\"', '"')
    assert launched.count('"enforce_eager": true') == 2  # mtp_k1 and mtp_k3: not ngram, not suffix
    for version, env, refused in [("0.34.0", {}, True), ("0.33.0", {}, True)] + [
        ("0.33.0", {"VLLM_USE_V2_MODEL_RUNNER": "0"}, False)
    ]:
        gpu = _regime_file(tmp_path, DEEPSEEK, {"version": version, "eager_speculation": True, "env": env})
        code, out = _validate(capsys, str(gpu))
        assert (code != 0) is refused, out
        if refused:
            assert f"engine.eager_speculation: vLLM {version} would ignore it for arm mtp_k1" in out
            assert "Model Runner V2" in out
    cpu = _regime_file(tmp_path, ROOT / "regimes" / "cpu_default.yaml", {"eager_speculation": True})
    code, out = _validate(capsys, str(cpu))
    assert code != 0 and "no arm drafts with a model" in out
    option = _regime_file(tmp_path, DEEPSEEK, ngram_k4={"enforce_eager": True})
    code, out = _validate(capsys, str(option))
    assert code != 0 and "arms[3].options.enforce_eager: vLLM 0.34.0 takes it and ignores it" in out
    option = _regime_file(tmp_path, DEEPSEEK, {"version": "0.32.0"}, ngram_k4={"enforce_eager": True})
    code, out = _validate(capsys, str(option))
    assert code != 0 and "ngram has no drafter model" in out


def test_a_release_newer_than_the_tables_keeps_what_they_say(tmp_path: Path, capsys) -> None:
    """--engine-version 0.35.0 (not read by this harness): held to 0.34's table, a key 0.34 removed
    is still removed; an option only some methods take stops a start-up with the others."""
    old = _regime_file(
        tmp_path, DEEPSEEK, {"version": "0.33.0"}, ngram_k4={"disable_padded_drafter_batch": True}
    )
    code, out = _validate(capsys, str(old), "--engine-version", "0.35.0")
    assert code == 2 and "arms[3].options.disable_padded_drafter_batch: removed in vLLM 0.34" in out
    specific = _regime_file(tmp_path, DEEPSEEK, ngram_k4={"draft_lm_head_quantization": "fp8"})
    code, out = _validate(capsys, str(specific))
    assert code != 0 and "only eagle3, mtp take it: with ngram the start-up stops" in out
    mtp = _regime_file(tmp_path, DEEPSEEK, mtp_k1={"draft_lm_head_quantization": "fp8"})
    assert _validate(capsys, str(mtp))[0] == 0


def test_v1_runner_switch_is_an_error_on_0_34(tmp_path: Path, capsys) -> None:
    path = _regime_file(
        tmp_path, DEEPSEEK, {"env": {"VLLM_USE_V2_MODEL_RUNNER": "0", "VLLM_MARLIN_INPUT_DTYPE": "int8"}}
    )
    code, out = _validate(capsys, str(path))
    assert code != 0 and "engine.env.VLLM_USE_V2_MODEL_RUNNER" in out and "no V1 model runner" in out
    code, out = _validate(capsys, str(path), "--engine-version", "0.34.0")  # every problem, not the first
    assert "engine.env.VLLM_MARLIN_INPUT_DTYPE: removed in vLLM 0.34.0" in out
    one = _regime_file(tmp_path, DEEPSEEK, {"env": {"VLLM_USE_V2_MODEL_RUNNER": "1"}})
    assert _validate(capsys, str(one))[0] == 0  # redundant, not refused


def test_each_compiled_speculative_configuration_gets_its_own_compile_cache(monkeypatch) -> None:
    """vLLM's compile cache key leaves out K (vLLM #53366): two K of one method must not share it;
    each root sits where vLLM would put its own (VLLM_CACHE_ROOT, else $XDG_CACHE_HOME/vllm)."""
    monkeypatch.delenv(COMPILE_CACHE_ENV, raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    regime = load_regime(ROOT / "regimes" / "h200_tp8.yaml")
    assert not regime.engine.enforce_eager
    adapter = get_adapter("vllm")
    roots = {}
    for arm in regime.arms:
        spec = adapter.launch_spec(regime, arm, "m", 8000, "python", draft_model=None)
        roots[arm.name] = spec.env.get(COMPILE_CACHE_ENV)
    assert roots["baseline"] is None  # the engine's own key holds it
    speculative = [root for name, root in roots.items() if name != "baseline"]
    assert all(r and r.startswith("~/.cache/vllm/spec-bench-arms/") for r in speculative)
    assert len(set(speculative)) == len(speculative)
    ngram = next(a for a in regime.arms if a.method == "ngram")
    other_k = ngram.model_copy(update={"num_speculative_tokens": 2})
    assert (
        adapter.launch_spec(regime, other_k, "m", 8000, "python").env[COMPILE_CACHE_ENV] != roots[ngram.name]
    )
    own = regime.model_copy(
        update={"engine": regime.engine.model_copy(update={"env": {COMPILE_CACHE_ENV: "/scratch/vllm/"}})}
    )
    assert (
        adapter.launch_spec(own, ngram, "m", 8000, "python")
        .env[COMPILE_CACHE_ENV]
        .startswith("/scratch/vllm/spec-bench-arms/")
    )
    monkeypatch.setenv("XDG_CACHE_HOME", "/xdg")
    assert (
        adapter.launch_spec(regime, ngram, "m", 8000, "python")
        .env[COMPILE_CACHE_ENV]
        .startswith("/xdg/vllm/spec-bench-arms/")
    )
    monkeypatch.setenv(COMPILE_CACHE_ENV, "/exported")
    assert (
        adapter.launch_spec(regime, ngram, "m", 8000, "python")
        .env[COMPILE_CACHE_ENV]
        .startswith("/exported/spec-bench-arms/")
    )
    eager = regime.model_copy(update={"engine": regime.engine.model_copy(update={"enforce_eager": True})})
    assert COMPILE_CACHE_ENV not in adapter.launch_spec(eager, ngram, "m", 8000, "python").env


def test_the_vllm_extra_is_the_release_the_gpu_regimes_pin() -> None:
    """pip install -e '.[vllm]' must not resolve to a newer release than the regimes are checked
    against."""
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["vllm"]
    pins = {
        load_regime(p).engine.version
        for p in (ROOT / "regimes").glob("h[12]00_*.yaml")
        if load_regime(p).engine.name == "vllm"
    }
    assert pins == {"0.34.0"}
    assert "vllm==0.34.0" in extra and not [r for r in extra if r.startswith("vllm") and "==" not in r]
    assert json.loads(json.dumps(extra))  # a plain list of requirements


def test_an_unpinned_regime_is_held_to_the_installed_release(tmp_path: Path) -> None:
    """No pin: the release checks use the installed engine's (0.34 here: its dead keys refused,
    suffix without arctic-inference)."""
    from harness.run.validation import check_environment

    regime = load_regime(DEEPSEEK)
    unpinned = regime.model_copy(update={"engine": regime.engine.model_copy(update={"version": None})})
    on_034 = {"engine_version": "vllm 0.34.0", "arctic_inference": None}
    assert not [m for m in check_environment(unpinned, on_034) if "arctic" in m.actual]
    on_033 = {"engine_version": "vllm 0.33.0", "arctic_inference": None}
    assert [m.field for m in check_environment(unpinned, on_033) if "arctic" in m.actual] == [
        "arms[4].method"
    ]
    dead = unpinned.model_copy(
        update={
            "arms": [
                a.model_copy(update={"options": {**a.options, "suffix_decoding_min_token_prob": 0.1}})
                if a.method == "suffix"
                else a
                for a in unpinned.arms
            ]
        }
    )
    fields = [*SPECULATIVE_KEYS["0.34"], "method", "model", "num_speculative_tokens"]
    installed = {"version": "0.34.0", "fields": fields, "methods": ["suffix", "mtp", "ngram"], "sampling": {}}
    found = get_adapter("vllm").option_problems(dead, installed)
    assert [(loc[-1], "ignores it" in m) for loc, m in found] == [("suffix_decoding_min_token_prob", True)]


def test_a_variable_exported_where_bench_runs_is_checked_too() -> None:
    """Every server inherits bench's environment: VLLM_USE_V2_MODEL_RUNNER=0 exported (0.33's advice)
    would stop every 0.34 start-up; it is a mismatch before anything starts."""
    from harness.run.validation import check_environment

    regime = load_regime(DEEPSEEK)
    record = {"engine_version": "vllm 0.34.0", "env": {"VLLM_USE_V2_MODEL_RUNNER": "0"}}
    (found,) = [m for m in check_environment(regime, record) if m.field.startswith("environment.")]
    assert found.field == "environment.VLLM_USE_V2_MODEL_RUNNER" and "no V1 model runner" in found.actual
    fine = {"engine_version": "vllm 0.34.0", "env": {"VLLM_USE_V2_MODEL_RUNNER": "1"}}
    assert not [m for m in check_environment(regime, fine) if m.field.startswith("environment.")]
    on_033 = regime.model_copy(update={"engine": regime.engine.model_copy(update={"version": "0.33.0"})})
    assert not [m for m in check_environment(on_033, record) if m.field.startswith("environment.")]
