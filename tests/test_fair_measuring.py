"""Every arm measured on equal terms (issue 72, item 3): each start-up warms every workload at every
load level it measures before its first window; a prefix-cache reset the engine refuses is asked
again, and a window it never emptied is marked and said in the verdict; a stopped server's GPUs are
waited for until their memory is freed before the next server starts.

The run here is ``bench run`` on the vLLM stand-in (tests/gpu_stand_ins/) launched by the real
adapter on a fake NVML node (tests/test_gpu_arm_devices.py's ``fake_nvml``) whose GPU keeps a stopped
server's memory for ``HOLD_S`` seconds, as a SIGKILLed worker's is freed by the driver some seconds
after the process is gone."""

from __future__ import annotations

import io
import sys
import time
from collections import Counter
from contextlib import redirect_stdout
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from harness.cli import main
from harness.config.engines import get_adapter
from harness.config.level import LoadLevel
from harness.config.load import Load
from harness.core.probes.prefix_cache import refused_every_time
from harness.results import RunDir, Summary, read_json, read_jsonl, read_records
from harness.results.records import WindowRecord
from harness.run import server as server_module
from harness.run import window as window_module
from harness.run.sensors import gpu
from harness.run.server import _LIVE_GROUPS
from harness.run.window import RESET_ATTEMPTS, reset_prefix_cache
from tests.test_gpu_arm_devices import ARM_GPU, fake_nvml

ROOT = Path(__file__).resolve().parent.parent
STAND_INS = ROOT / "tests" / "gpu_stand_ins"
GIB = 2**30
IDLE_USED, SERVER_USED = 1 * GIB, 60 * GIB  # a GPU's used memory alone, and with a server on it
HOLD_S = 1.5  # a stopped server's memory is freed this long after its process group is gone
RESET_FAILS = RESET_ATTEMPTS + 2  # each server refuses its first window's resets and two of the second's
LEVELS = [1, 4]


# ---- the warm-up's levels, as the plan states them


def test_the_warm_up_covers_every_level_up_to_a_batch_of_8() -> None:
    load = Load(concurrency=[1, 4, 16, 32], num_prompts=64, max_output_tokens=8, warmup_requests=2)
    assert load.warmup_levels() == [(LoadLevel(1), 2), (LoadLevel(4), 4), (LoadLevel(8), 8)]
    assert load.warmup_count(workloads=2) == 2 * (2 + 4 + 8)
    # an open-loop level is warmed at its in-flight cap (up to 8), a ramp's closed-loop stages too
    ramped = Load(
        concurrency=[1],
        request_rate=[2.0],
        max_concurrency=3,
        num_prompts=8,
        max_output_tokens=8,
        warmup_requests=1,
        ramp=[{"concurrency": 2, "duration_s": 1}, {"request_rate": 1.0, "duration_s": 1}],
    )
    assert ramped.warmup_levels() == [(LoadLevel(1), 1), (LoadLevel(3), 3), (LoadLevel(2), 2)]
    assert Load(concurrency=[4], num_prompts=8, max_output_tokens=8, warmup_requests=0).warmup_levels() == []


# ---- the prefix-cache reset, asked again while refused


def test_a_refused_reset_is_asked_again_then_given_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(window_module, "RESET_BACKOFF_S", 0.001)
    answers: list[bool] = []

    class Refusing:
        def __init__(self, refusals: int) -> None:
            self.refusals = refusals

        def reset_prefix_cache(self, base_url: str) -> bool:
            answers.append(self.refusals <= 0)
            self.refusals -= 1
            return answers[-1]

    assert reset_prefix_cache(Refusing(0), "http://x") == (True, 1)
    assert reset_prefix_cache(Refusing(2), "http://x") == (True, 3)
    answers.clear()
    assert reset_prefix_cache(Refusing(99), "http://x") == (False, RESET_ATTEMPTS)
    assert answers == [False] * RESET_ATTEMPTS

    class NoRoute:  # an endpoint without vLLM's dev mode: asking again would not help, nor count
        def reset_prefix_cache(self, base_url: str) -> bool | None:
            answers.append(None)
            return None

    answers.clear()
    assert reset_prefix_cache(NoRoute(), "http://x") == (False, 1) and answers == [None]
    assert not refused_every_time(False, 1) and refused_every_time(False, RESET_ATTEMPTS)


# ---- the GPUs' memory after a server stops


def _memory_node(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The fake node with memory: GPU ``ARM_GPU`` holds ``SERVER_USED`` while a server group this
    process started runs, and for ``HOLD_S`` after the last one stopped; ``IDLE_USED`` otherwise."""
    nvml = fake_nvml(["NVIDIA H100 80GB HBM3"] * 8)
    state: dict[str, Any] = {"stopped_at": None, "at_start": []}

    def used(handle: int) -> int:
        stopped = state["stopped_at"]
        held = _LIVE_GROUPS or (stopped is not None and time.monotonic() - stopped < HOLD_S)
        return SERVER_USED if handle == ARM_GPU and held else IDLE_USED

    nvml.nvmlDeviceGetMemoryInfo = lambda handle: SimpleNamespace(total=80 * GIB, used=used(handle))
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    kill_group = server_module.kill_group

    def killed(pgid: int, grace_s: float = 20.0) -> None:
        kill_group(pgid, grace_s)
        state["stopped_at"] = time.monotonic()

    monkeypatch.setattr(server_module, "kill_group", killed)
    start = server_module.Server.start

    def started(self: server_module.Server) -> None:
        state["at_start"].append(used(ARM_GPU))  # what the next server would find on its GPU
        start(self)

    monkeypatch.setattr(server_module.Server, "start", started)
    state["used"] = used
    return state


def test_waiting_for_the_memory_is_bounded_and_says_what_is_held(monkeypatch: pytest.MonkeyPatch) -> None:
    state = _memory_node(monkeypatch)
    assert gpu.memory_used([ARM_GPU, 0]) == [IDLE_USED, IDLE_USED]
    state["stopped_at"] = time.monotonic()
    release = gpu.wait_released([ARM_GPU, 0], [IDLE_USED, IDLE_USED], poll_s=0.05)
    assert release.held == [] and HOLD_S - 0.1 <= release.waited_s < HOLD_S + 1.0
    state["stopped_at"] = time.monotonic()  # held longer than the bound: said, GPU by GPU
    release = gpu.wait_released([ARM_GPU, 0], [IDLE_USED, IDLE_USED], timeout_s=0.3, poll_s=0.05)
    assert release.held == [(ARM_GPU, pytest.approx(59.0))] and release.waited_s < HOLD_S
    # no NVML (a CPU machine): nothing to read, nothing to wait for
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert gpu.memory_used([0]) is None


# ---- a run on the stand-in: all three together


def _regime(tmp_path: Path) -> Path:
    """The shipped H100 regime cut down: baseline and ngram K=4 on GPU ``ARM_GPU``, both workloads at
    concurrency 1 and 4, one warm-up request, the stand-in refusing its first ``RESET_FAILS`` resets."""
    shipped = ROOT / "regimes" / "h100_tp1_llama31_8b.yaml"
    data = yaml.safe_load(shipped.read_text())
    data["name"] = "fair_measuring"
    data["workloads"] = [str((shipped.parent / w).resolve()) for w in data["workloads"]]
    data["load"] = {
        "concurrency": LEVELS,
        "num_prompts": 4,
        "max_output_tokens": 8,
        "warmup_requests": 1,
        "server_starts": 1,
    }
    data["arms"] = [arm for arm in data["arms"] if arm["name"] in ("baseline", "ngram_k4")]
    data.pop("gates", None)
    data["power"] = {"sample_period_s": 0.05}
    data["verdict"] = {**data.get("verdict", {}), "covariate": "none"}  # no workload pass: a pool's time
    data["engine"]["env"] = {"PYTHONPATH": str(STAND_INS), "STAND_IN_RESET_FAILS": str(RESET_FAILS)}
    data["hardware"]["devices"] = [ARM_GPU]
    path = tmp_path / "fair_measuring.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def stand_in_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp_path = tmp_path_factory.mktemp("fair")
    printed = io.StringIO()
    with pytest.MonkeyPatch.context() as monkeypatch:
        state = _memory_node(monkeypatch)
        monkeypatch.setattr(get_adapter("vllm"), "installed_version", lambda: "vllm 0.34.0")
        monkeypatch.setenv("HF_TOKEN", "hf_rehearsal_stand_in")
        monkeypatch.setenv("COLUMNS", "200")
        monkeypatch.delenv("BENCH_EXECUTOR", raising=False)
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        outcome = tmp_path / "outcome.json"
        args = [str(_regime(tmp_path)), "--results-dir", str(tmp_path / "results"), "--no-calibration"]
        with redirect_stdout(printed):
            code = main(["run", *args, "--json", str(outcome)])
        run = RunDir(Path(read_json(outcome)["dir"]))
    return {"code": code, "run": run, "printed": " ".join(printed.getvalue().split()), "state": state}


def test_every_workload_and_level_is_warmed_before_measuring(stand_in_run: dict[str, Any]) -> None:
    run, printed = stand_in_run["run"], stand_in_run["printed"]
    assert stand_in_run["code"] == 0, printed[-4000:]
    # the plan says it
    assert (
        "10 warm-up requests per server start-up (not measured; per workload 1 at concurrency 1, "
        "4 at concurrency 4, before the first window)"
    ) in printed
    for arm in ("baseline", "ngram_k4"):
        warmed = Counter((r["workload"], r["concurrency"]) for r in read_jsonl(run.warmup(arm)))
        assert warmed == {
            ("code_humaneval", 1): 1,
            ("code_humaneval", 4): 4,
            ("chat_mtbench", 1): 1,
            ("chat_mtbench", 4): 4,
        }
    timing = read_json(run.root / "timing.json")["invocations"][0]
    assert timing["warmup_s"] > 0


def test_a_refused_reset_is_retried_and_a_window_it_never_emptied_is_said(
    stand_in_run: dict[str, Any],
) -> None:
    run, printed = stand_in_run["run"], stand_in_run["printed"]
    for arm in ("baseline", "ngram_k4"):
        windows = read_records(run.windows(arm), WindowRecord)
        resets = [(w.prefix_cache_reset, w.prefix_cache_reset_attempts) for w in windows]
        # the first window: refused every time; the second: emptied at the third attempt
        assert resets == [(False, RESET_ATTEMPTS), (True, 3)] + [(True, 1)] * (len(windows) - 2)
    summary = Summary.model_validate(read_json(run.summary))
    assert {a.name: a.cache_reset_failed for a in summary.arms} == {"baseline": 1, "ngram_k4": 1}
    analysis = read_json(run.root / "analysis.json") if (run.root / "analysis.json").is_file() else None
    words = "the engine refused to empty its prefix cache before 1 of its windows, every time it was asked"
    shown = io.StringIO()
    with redirect_stdout(shown):
        assert main(["show", str(run.root)]) == 0
    assert words in " ".join(shown.getvalue().split()), (analysis, printed[-3000:])


def test_the_next_server_starts_once_the_gpu_has_let_go(stand_in_run: dict[str, Any]) -> None:
    run, printed, state = stand_in_run["run"], stand_in_run["printed"], stand_in_run["state"]
    # each server found its GPU as empty as before the first: none started on a dead one's memory
    assert state["at_start"] == [IDLE_USED, IDLE_USED]
    assert "GPU memory released" in printed and "after the server stopped" in printed
    timing = read_json(run.root / "timing.json")["invocations"][0]
    assert 2 * (HOLD_S - 0.3) <= timing["gpu_release_s"] < 2 * (HOLD_S + 2)
