"""The GPU path's dress rehearsal on CPU, end to end: ``bench run`` on the shipped GPU regimes
(regimes/h100_tp1_llama31_8b.yaml on vLLM 0.34.0, regimes/h200_tp1_qwen3_8b_sglang.yaml on SGLang
0.5.23), cut down to two arms and a few tokens, launched by the harness's REAL adapters on a node of
8 GPUs (a fake NVML: ``fake_nvml`` of tests/test_gpu_arm_devices.py) of which each arm's server uses
one.

The servers are stand-ins (tests/gpu_stand_ins/, first on the regime's engine.env.PYTHONPATH): the
harness runs ``vllm serve MODEL ...`` (as ``python -m vllm.entrypoints.cli.main serve``) and ``python -m
sglang.launch_server ...`` as on a GPU machine, and they answer with each engine's routes, counters,
start-up log and served configuration, read from the argv they were given, with a known acceptance
pattern. Nothing here ran on a GPU, nor on the real engines: it shows the harness's side of the GPU
path (launch, devices, counters, served-config checks, power, exactness, the views) works end to
end; what the engines themselves do on a GPU stays unmeasured (docs/gpu.md)."""

from __future__ import annotations

import io
import re
import sys
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.cli import main
from harness.config.engines import get_adapter
from harness.results import RunDir, RunTiming, Summary, read_json, read_records
from harness.results.records import WindowRecord
from harness.run.server import _LIVE_GROUPS  # the server groups this process started and has not stopped
from tests.gpu_stand_ins.stand_in_engine import (
    ACCEPTED_PER_STEP,
    DIVERGE_ENV,
    FAIL_LAUNCHES_ENV,
    LAUNCH_DIR_ENV,
    SERVED_K_ENV,
)
from tests.test_gpu_arm_devices import ARM_GPU, ARM_WATTS, IDLE_WATTS, fake_nvml

ROOT = Path(__file__).resolve().parent.parent
STAND_INS = ROOT / "tests" / "gpu_stand_ins"
K = 3  # the speculative arm's K in both regimes (eagle3_k3)
# whole cycles of the stand-ins' acceptance pattern after the prefill's token: no step is cut short
CYCLE_TOKENS = sum(min(a, K) + 1 for a in ACCEPTED_PER_STEP)
MAX_TOKENS = 1 + 2 * CYCLE_TOKENS
# tau = 1 + accepted / verify steps, each step accepting the pattern's drafts (at most K)
TAU = 1 + sum(min(a, K) for a in ACCEPTED_PER_STEP) / len(ACCEPTED_PER_STEP)
PER_POSITION = [sum(min(a, K) > p for a in ACCEPTED_PER_STEP) / len(ACCEPTED_PER_STEP) for p in range(K)]
NODE_WATTS = ARM_WATTS + 7 * IDLE_WATTS  # what summing the whole node would read
NEIGHBOUR_PID = 5555  # someone else's job on GPU 5

ENGINES = {
    "vllm": {
        "regime": "h100_tp1_llama31_8b.yaml",
        "version": "0.34.0",
        "gpu": "NVIDIA H100 80GB HBM3",
        "draft_counting": "every_step",
    },
    "sglang": {
        "regime": "h200_tp1_qwen3_8b_sglang.yaml",
        "version": "0.5.23",
        "gpu": "NVIDIA H200",
        "draft_counting": "verify_steps",
    },
}


def _rehearsal_regime(engine: str, tmp_path: Path) -> Path:
    """The shipped GPU regime, as it is but for the load (2 prompts per workload, a few tokens, one
    level, one start-up, no warm-up), two arms (baseline, EAGLE-3 K=3), power sampled often enough for
    windows of a fraction of a second, and the stand-ins first on the servers' PYTHONPATH."""
    shipped = ROOT / "regimes" / ENGINES[engine]["regime"]
    data = yaml.safe_load(shipped.read_text())
    data["name"] = f"rehearsal_{engine}"
    data["workloads"] = [str((shipped.parent / w).resolve()) for w in data["workloads"]]
    data["load"] = {
        "concurrency": [1],
        "num_prompts": 2,
        "max_output_tokens": MAX_TOKENS,
        "warmup_requests": 0,
        "server_starts": 1,
    }
    data["arms"] = [arm for arm in data["arms"] if arm["name"] in ("baseline", "eagle3_k3")]
    assert [arm.get("num_speculative_tokens") for arm in data["arms"]] == [None, K]
    data["power"] = {"sample_period_s": 0.02}
    data["verdict"] = {**data.get("verdict", {}), "covariate": "none"}  # no workload pass: a pool's time
    data["engine"]["env"] = {"PYTHONPATH": str(STAND_INS)}
    if engine == "vllm":  # pinned to GPU 3; the SGLang run gets it from a user's CUDA_VISIBLE_DEVICES
        data["hardware"]["devices"] = [ARM_GPU]
    path = tmp_path / f"rehearsal_{engine}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


class _ServersOnTheirGpu(dict):
    """NVML's compute processes per GPU, as the node lists them: the servers the harness has running
    (each process group's leader: the stand-in itself) on the arm's GPU, someone else's job on GPU 5."""

    def __init__(self) -> None:
        super().__init__({5: [NEIGHBOUR_PID]})

    def get(self, device: int, default: Any = None) -> Any:
        return sorted(_LIVE_GROUPS) if device == ARM_GPU else super().get(device, default)

    def __getitem__(self, device: int) -> Any:
        return sorted(_LIVE_GROUPS) if device == ARM_GPU else super().__getitem__(device)


def _gpu_node(
    engine: str, monkeypatch: pytest.MonkeyPatch, gpu: str | None = None, processes: dict | None = None
) -> None:
    """This process as the GPU machine it stands in for: an 8-GPU NVML (GPU 3 at 100 W, the others at
    600 W, a driver with CUDA 13.0), the engine installed at the regime's release, a hub token (the
    Llama target is gated). SGLang's arm gets GPU 3 as the first of a user's CUDA_VISIBLE_DEVICES."""
    nvml = fake_nvml([gpu or ENGINES[engine]["gpu"]] * 8, processes=processes or _ServersOnTheirGpu())
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    version = f"{engine} {ENGINES[engine]['version']}"
    monkeypatch.setattr(get_adapter(engine), "installed_version", lambda: version)
    monkeypatch.setenv("HF_TOKEN", "hf_rehearsal_stand_in")
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.delenv("BENCH_EXECUTOR", raising=False)
    monkeypatch.delenv(SERVED_K_ENV, raising=False)
    if engine == "sglang":
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"{ARM_GPU},6")
    else:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def _bench_run(regime: Path, tmp_path: Path) -> tuple[int, RunDir]:
    """``bench run REGIME`` in this process; its exit code and run directory."""
    outcome = tmp_path / "outcome.json"
    results = tmp_path / "results"
    code = main(
        ["run", str(regime), "--results-dir", str(results), "--no-calibration", "--json", str(outcome)]
    )
    return code, RunDir(Path(read_json(outcome)["dir"]))


@pytest.fixture(scope="module", params=sorted(ENGINES))
def rehearsal(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One rehearsal run per engine, read by the tests below."""
    engine = request.param
    tmp_path = tmp_path_factory.mktemp(f"rehearsal_{engine}")
    printed, shown = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as monkeypatch:
        _gpu_node(engine, monkeypatch)
        with redirect_stdout(printed):
            code, run = _bench_run(_rehearsal_regime(engine, tmp_path), tmp_path)
        with redirect_stdout(shown):
            show_code = main(["show", str(run.root)])
    return {
        "engine": engine,
        "code": code,
        "run": run,
        "summary": Summary.model_validate(read_json(run.summary)),  # what the run stored
        "show": " ".join(shown.getvalue().split()),
        "show_code": show_code,
        "printed": printed.getvalue(),
    }


def test_every_arm_runs_as_the_regime_says(rehearsal: dict[str, Any]) -> None:
    run, engine = rehearsal["run"], rehearsal["engine"]
    assert rehearsal["code"] == 0, rehearsal["printed"][-4000:]
    for arm in ("baseline", "eagle3_k3"):
        status = run.read_status(arm)
        assert (status.status, status.mismatches, status.error) == ("ok", [], None), arm
        assert status.draft_counting is not None
        assert status.draft_counting.semantics == ENGINES[engine]["draft_counting"]
    assert rehearsal["summary"].mismatches == []
    # every request answered, to its last token
    for cell in rehearsal["summary"].cells:
        assert (cell.requests_ok, cell.requests_errored) == (2, 0)
        assert cell.output_tokens == 2 * MAX_TOKENS


def test_tau_is_what_the_servers_counted(rehearsal: dict[str, Any]) -> None:
    """tau and per-position acceptance from the engine's own counts (vLLM: /metrics counters around
    the window; SGLang: each response's spec_tokens_details), equal to the stand-ins' pattern, and
    the requests' own acceptance (vLLM's per-request metrics) agreeing with the counters."""
    cells = {(c.arm, c.workload): c for c in rehearsal["summary"].cells}
    workloads = {w for _, w in cells}
    assert workloads == {"code_humaneval", "chat_mtbench"}
    for workload in workloads:
        spec = cells[("eagle3_k3", workload)]
        assert spec.tau == pytest.approx(TAU) and TAU == 2.5
        assert spec.per_position_acceptance == pytest.approx(PER_POSITION)
        assert spec.acceptance_checks == []
        assert spec.prompt_tau is not None and len(spec.prompt_tau) == 2
        assert spec.prompt_tau == pytest.approx(dict.fromkeys(spec.prompt_tau, TAU))
        assert spec.drafts == 2 * 2 * len(ACCEPTED_PER_STEP)  # 2 prompts x 2 cycles of steps
        assert spec.draft_tokens == K * spec.drafts
        assert cells[("baseline", workload)].tau in (None, 1.0)


def test_outputs_are_identical_to_the_baseline(rehearsal: dict[str, Any]) -> None:
    exactness = rehearsal["summary"].exactness
    assert exactness.applicable
    block = exactness.arms["eagle3_k3"]
    assert (block.compared, block.identical_pct) == (4, 100.0)
    assert exactness.noise_floor is not None and exactness.noise_floor.identical_pct == 100.0


def test_each_server_ran_on_the_one_chosen_gpu(rehearsal: dict[str, Any]) -> None:
    run, engine = rehearsal["run"], rehearsal["engine"]
    environment = read_json(run.root / "environment.json")
    assert [g["index"] for g in environment["server_gpus"]] == [ARM_GPU]
    version = ENGINES[engine]["version"]
    assert environment["cuda_check"] == f"{engine} {version} needs CUDA 13.0; the driver supports CUDA 13.0"
    for arm in ("baseline", "eagle3_k3"):
        launch = read_json(run.arm_dir(arm) / "launch.json")
        assert launch["env"]["CUDA_VISIBLE_DEVICES"] == str(ARM_GPU)
        assert launch["env"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
        # what the server process itself was given (its own log line), not only what was recorded
        log = run.server_log(arm, 0).read_text()
        assert f"CUDA_VISIBLE_DEVICES={ARM_GPU} CUDA_DEVICE_ORDER=PCI_BUS_ID" in log


def test_power_energy_and_neighbours_come_from_that_gpu_only(rehearsal: dict[str, Any]) -> None:
    run = rehearsal["run"]
    for arm in ("baseline", "eagle3_k3"):
        for window in read_records(run.windows(arm), WindowRecord):
            # NVML finds the server on its GPU, and no one else's process there
            assert window.gpu is not None and window.gpu.attributed
            assert (window.gpu.engine_devices, window.gpu.others) == ([ARM_GPU], [])
            assert window.power is not None and window.power.source == "nvml"
            assert len(window.power.samples) >= 2
            assert {s[1] for s in window.power.samples} == {ARM_WATTS}  # all eight: NODE_WATTS
            assert [g.index for g in window.power.gpus or []] == [ARM_GPU]
    for cell in rehearsal["summary"].cells:
        assert cell.power_source == "nvml"
        assert cell.peak_w == ARM_WATTS
        assert cell.mean_w == pytest.approx(ARM_WATTS, rel=0.2)
        assert cell.mean_w < NODE_WATTS / 10


def test_bench_show_names_the_gpu(rehearsal: dict[str, Any]) -> None:
    gpu = ENGINES[rehearsal["engine"]]["gpu"]
    assert rehearsal["show_code"] == 0
    assert f"GPU {ARM_GPU} ({gpu}, GPU-0000000{ARM_GPU}-fake)" in rehearsal["show"]


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_a_server_with_another_k_is_a_served_config_mismatch(
    engine: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The stand-in serves K=2 where the arm launched K=3 (and says so, as the engine would: vLLM in
    its start-up log, SGLang in /server_info): the arm stops as a regime mismatch, nothing measured."""
    _gpu_node(engine, monkeypatch)
    monkeypatch.setenv(SERVED_K_ENV, "2")
    code, run = _bench_run(_rehearsal_regime(engine, tmp_path), tmp_path)
    out = capsys.readouterr()
    assert code != 0
    expected = "arms[1].num_speculative_tokens: regime pins 3, found server reports 2"
    assert expected in " ".join((out.out + out.err).split())
    status = run.read_status("eagle3_k3")
    assert (status.status, status.error, status.mismatches) == ("failed", "regime mismatch", [expected])
    assert not run.windows("eagle3_k3").exists()
    assert run.read_status("baseline").mismatches == []  # the baseline speculates with nothing either way


# ---- h200_tp8 itself: the user's command at TP=8, every arm, DFlash included ---------------------

TP8 = ROOT / "regimes" / "h200_tp8.yaml"
STARTUP_S = 0.3  # each stand-in's start-up (a GPU's minutes, scaled down)


class _ServersOnEveryGpu(dict):
    """NVML's compute processes: the running servers on all eight GPUs (TP=8 takes the node)."""

    def get(self, device: int, default: Any = None) -> Any:
        return sorted(_LIVE_GROUPS)

    def __getitem__(self, device: int) -> Any:
        return sorted(_LIVE_GROUPS)


def _tp8_regime(tmp_path: Path) -> Path:
    """regimes/h200_tp8.yaml as shipped (its five arms, TP 8, its engine flags: remote code and the
    capture ceiling) but for the load: two prompts a workload, a few tokens, concurrency 1 and its
    ramp's 64 in flight for a second, one start-up; the stand-ins first on the path, each refusing
    its first prefix-cache reset and taking a moment to start."""
    data = yaml.safe_load(TP8.read_text())
    data["name"] = "rehearsal_h200_tp8"
    data["workloads"] = [str((TP8.parent / w).resolve()) for w in data["workloads"]]
    data["load"] = {
        "concurrency": [1],
        "num_prompts": 2,
        "max_output_tokens": MAX_TOKENS,
        "warmup_requests": 0,
        "server_starts": 1,
        "ramp": [{"concurrency": 64, "duration_s": 1.0}],
    }
    data["power"] = {"sample_period_s": 0.02}
    data["verdict"] = {**data.get("verdict", {}), "covariate": "none"}  # no workload pass: a pool's time
    data["engine"]["env"] = {
        "PYTHONPATH": str(STAND_INS),
        "STAND_IN_RESET_FAILS": "1",
        "STAND_IN_STARTUP_S": str(STARTUP_S),
    }
    path = tmp_path / "rehearsal_h200_tp8.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def tp8(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp_path = tmp_path_factory.mktemp("rehearsal_tp8")
    printed = io.StringIO()
    with pytest.MonkeyPatch.context() as monkeypatch:
        _gpu_node("vllm", monkeypatch, gpu="NVIDIA H200", processes=_ServersOnEveryGpu())
        with redirect_stdout(printed):
            code, run = _bench_run(_tp8_regime(tmp_path), tmp_path)
    from harness.derive.analysis import load_analysis

    analysis = load_analysis(run.root).analysis  # the run as bench show derives it
    return {"code": code, "run": run, "printed": printed.getvalue(), "analysis": analysis}


def test_h200_tp8_runs_end_to_end_at_tp8_with_dflash(tp8: dict[str, Any]) -> None:
    run = tp8["run"]
    assert tp8["code"] == 0, tp8["printed"][-4000:]
    arms = ("baseline", "ngram_k4", "eagle3_k3", "dflash_k9", "draft_llama32_1b_k4")
    for arm in arms:
        status = run.read_status(arm)
        assert (status.status, status.mismatches, status.error) == ("ok", [], None), arm
        launch = read_json(run.arm_dir(arm) / "launch.json")
        argv = " ".join(launch["argv"])
        assert "-m vllm.entrypoints.cli.main serve meta-llama/Llama-3.1-8B-Instruct" in argv  # vllm serve
        assert "--tensor-parallel-size 8" in argv and "--trust-remote-code" in argv
        assert launch["env"]["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
        # what the server said it ran: the raised ceiling, async scheduling on (0.34's default)
        runtime = status.runtime
        assert runtime is not None and runtime.capture_ceiling == 640 and runtime.release == "0.34.0"
        assert runtime.async_scheduling is True
        assert status.startup_s is not None and status.startup_s >= STARTUP_S
    ramp = [r for r in tp8["analysis"].summary.ramp if r.arm == "dflash_k9" and r.stage == 0]
    assert {r.concurrency for r in ramp} == {64} and all(r.requests_sent > 0 for r in ramp)


def test_power_is_summed_over_the_arms_eight_gpus(tp8: dict[str, Any]) -> None:
    for cell in tp8["analysis"].summary.cells:
        assert cell.power_source == "nvml"
        assert cell.mean_w == pytest.approx(NODE_WATTS, rel=0.05)  # GPU 3's 100 W and seven 600 W
    for window in read_records(tp8["run"].windows("dflash_k9"), WindowRecord):
        assert [g.index for g in window.power.gpus or []] == list(range(8))


def test_the_refused_prefix_cache_reset_is_asked_again_and_recorded(tp8: dict[str, Any]) -> None:
    for arm in ("baseline", "dflash_k9"):
        first, *others = read_records(tp8["run"].windows(arm), WindowRecord)
        assert (first.prefix_cache_reset, first.prefix_cache_reset_attempts) == (True, 2)
        assert all(w.prefix_cache_reset_attempts == 1 for w in others)
    assert "cache_reset_failed" not in {c.code for c in tp8["analysis"].caveats}  # the retry got it


def test_the_dflash_cell_at_64_is_flagged_only_past_the_ceiling(tp8: dict[str, Any]) -> None:
    """h200_tp8 raises the ceiling to 640 (DFlash K=9 x 64 in flight): nothing runs uncaptured. The
    same run read as if the servers had captured vLLM's default 512 flags that one cell, by name;
    and async scheduling with DFlash above concurrency 1 on 0.34 names vLLM #46669."""
    from harness.derive.engine_runtime import runtime_caveats
    from harness.present.verdict_text import caveat_text

    caveats = tp8["analysis"].caveats
    assert "uncaptured" not in {c.code for c in caveats}
    (async_defect,) = [c for c in caveats if c.code == "async_speculation"]
    assert async_defect.arm == "dflash_k9" and "#46669" in caveat_text(async_defect)
    summary = tp8["analysis"].summary
    default = [
        a.model_copy(update={"runtime": a.runtime.model_copy(update={"cudagraph_capture_sizes": [512]})})
        for a in summary.arms
    ]
    found = [
        c for c in runtime_caveats(summary.model_copy(update={"arms": default})) if c.code == "uncaptured"
    ]
    assert [(c.arm, c["needed"]) for c in found] == [("dflash_k9", 640)]
    assert "ramp @64 (640 tokens)" in found[0]["cells"]


# ---- h200_tp8 under fire: servers that do not start (issue 78, item 5) ---------------------------


def _tp8_fault_regime(tmp_path: Path, fails: str, server_starts: int = 3) -> Path:
    """``_tp8_regime`` cut to the baseline and DFlash (no ramp), ``server_starts`` rounds, the
    stand-ins failing the launches ``fails`` names (``STAND_IN_FAIL_LAUNCHES``), counted over the run
    and its resume under ``tmp_path/launches``."""
    path = _tp8_regime(tmp_path)
    data = yaml.safe_load(path.read_text())
    data["arms"] = [arm for arm in data["arms"] if arm["name"] in ("baseline", "dflash_k9")]
    data["load"]["server_starts"] = server_starts
    del data["load"]["ramp"]
    data["engine"]["env"][FAIL_LAUNCHES_ENV] = fails
    data["engine"]["env"][LAUNCH_DIR_ENV] = str(tmp_path / "launches")
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _launches(tmp_path: Path) -> dict[str, int]:
    """How many times each method's stand-in was launched (``stand_in_engine.launches``)."""
    folder = tmp_path / "launches"
    return {p.stem: len(p.read_text().splitlines()) for p in sorted(folder.glob("*.launches"))}


def _said(capsys: pytest.CaptureFixture[str]) -> str:
    out = capsys.readouterr()
    return " ".join((out.out + out.err).split())


def test_a_baseline_that_fails_its_start_up_twice_stops_the_night(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The baseline's first start-up fails, and again when started once more: the run stops there
    (DFlash never started: nothing could be compared with it), exit 3, saying what it did not spend;
    ``bench run --resume`` continues it once the fault is gone (here: the stand-in's next launch)."""
    _gpu_node("vllm", monkeypatch, gpu="NVIDIA H200", processes=_ServersOnEveryGpu())
    code, run = _bench_run(_tp8_fault_regime(tmp_path, "baseline:1,2"), tmp_path)
    said = _said(capsys)
    assert code == 3, said[-3000:]
    assert _launches(tmp_path) == {"baseline": 2}  # within one start-up (and its retry): nothing else
    status = run.read_status("baseline")
    assert (status.status, status.phase) == ("failed", "startup")
    assert [n.split(" (")[0] for n in status.remeasured] == ["start-up 1: the server did not start"]
    first = run.root / "arms" / "baseline.attempt-1" / run.server_log("baseline", 0).name
    assert "NCCL error" in first.read_text()  # the first failure's log kept
    assert "NCCL error" in run.server_log("baseline", 0).read_text()  # and the retry's
    assert "starting it once more" in said
    assert not (run.arm_dir("dflash_k9") / "launch.json").exists()
    assert "the baseline (baseline) failed on start-up 1 twice" in said
    # 3 rounds x 2 arms but the baseline's first, at the night plan's pace and 8 x $3.50 an hour
    assert re.search(r"Not spent: 5 start-ups not begun, about \d+ min and \$\d+\.\d\d at \$28\.00/h", said)
    assert f"bench run --resume {run.root} continues it" in said
    assert read_json(tmp_path / "outcome.json")["exit_code"] == 3

    resumed = main(["run", "--resume", str(run.root)])
    said = _said(capsys)
    assert resumed == 0, said[-3000:]
    assert _launches(tmp_path) == {"baseline": 5, "dflash": 3}
    for arm in ("baseline", "dflash_k9"):
        assert run.read_status(arm).status == "ok"
        starts = sorted({w.server_start for w in read_records(run.windows(arm), WindowRecord)})
        assert starts == [0, 1, 2], arm
    rounds = RunTiming.model_validate(read_json(run.root / "timing.json")).rounds
    assert [sorted(r.done) for r in rounds] == [["baseline", "dflash_k9"]] * 3  # paired, round by round


def test_a_baseline_failing_once_goes_on_and_dflash_failing_its_third_keeps_two_rounds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """One night, two faults (one run, for the suite's time). The baseline's first start-up fails
    once: it is started again, fresh, and the night goes on (the failed attempt's log kept aside).
    DFlash's third start-up fails, and again when started once more: its two complete rounds stay
    in its verdicts (fewer rounds, said), its later start-ups are not run, the baseline's third is."""
    from harness.derive.analysis import load_analysis
    from harness.present.verdict_text import caveat_text

    _gpu_node("vllm", monkeypatch, gpu="NVIDIA H200", processes=_ServersOnEveryGpu())
    code, run = _bench_run(_tp8_fault_regime(tmp_path, "baseline:1;dflash:3,4"), tmp_path)
    said = _said(capsys)
    assert code == 3, said[-3000:]  # an arm failed
    assert _launches(tmp_path) == {"baseline": 4, "dflash": 4}
    assert "arm baseline: start-up 1: the server did not start" in said and "starting it once more" in said
    baseline = run.read_status("baseline")
    assert baseline.status == "ok" and len(baseline.startups_s) == 3
    assert [n.split(" (")[0] for n in baseline.remeasured] == ["start-up 1: the server did not start"]
    assert "NCCL error" in (run.root / "arms" / "baseline.attempt-1" / "server.log").read_text()
    assert "NCCL error" not in run.server_log("baseline", 0).read_text()
    status = run.read_status("dflash_k9")
    assert (status.status, len(status.startups_s)) == ("failed", 2)
    analysis = load_analysis(run.root).analysis
    assert analysis.verdicts
    for verdict in analysis.verdicts:
        assert verdict.best is not None and verdict.best.arm == "dflash_k9"
        assert (verdict.best.server_starts, verdict.baseline.server_starts) == (2, 3)
        assert verdict.estimate is not None and verdict.estimate.rounds == 2
        (fewer,) = [c for c in verdict.caveats if c.code == "fewer_rounds"]
        assert caveat_text(fewer).startswith(
            "dflash_k9: 2 of the baseline's 3 rounds (it failed on start-up 3)"
        )
    codes = {c.code: c for c in analysis.caveats}
    assert "arm_not_ok" not in codes and codes["arm_failed_late"]["failed"] == 3


def test_dflash_that_diverges_above_concurrency_1_is_not_lossless_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """vLLM #46669 in miniature (``STAND_IN_DIVERGE_ABOVE``): DFlash's outputs are garbled whenever
    more than one request is in flight. At concurrency 1 it stays lossless; at 4 every window's
    verdict says it is not lossless there, with the counts, and it is never the arm to deploy
    (issue 78, items 4 and 7)."""
    from harness.derive.analysis import load_analysis
    from harness.present.verdict_text import verdict_line

    _gpu_node("vllm", monkeypatch, gpu="NVIDIA H200", processes=_ServersOnEveryGpu())
    path = _tp8_fault_regime(tmp_path, "", server_starts=1)  # one start-up: exactness needs no more
    data = yaml.safe_load(path.read_text())
    data["load"]["concurrency"] = [1, 4]
    data["load"]["num_prompts"] = 4
    data["engine"]["env"][DIVERGE_ENV] = "dflash:1"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    code, run = _bench_run(path, tmp_path)
    said = _said(capsys)
    assert code == 0, said[-3000:]
    verdicts = {v.level.concurrency: v for v in load_analysis(run.root).analysis.verdicts}
    assert set(verdicts) == {1, 4}
    for verdict in verdicts.values():
        assert verdict.deploy != "dflash_k9" or verdict.level.concurrency == 1
    assert not any(
        d.arm == "dflash_k9" for v in verdicts.values() if v.concurrency == 1 for d in v.not_lossless
    )
    for verdict in (v for v in verdicts.values() if v.concurrency == 4):
        (lossy,) = verdict.not_lossless
        assert lossy.arm == "dflash_k9" and lossy.diverged > 0 and lossy.floor == 0
        assert "dflash_k9 is not lossless here" in verdict_line(
            verdict
        ) or "pays, but is not lossless" in verdict_line(verdict)
    assert "not lossless here" in said
