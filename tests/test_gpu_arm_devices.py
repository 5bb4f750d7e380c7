"""A dress rehearsal of a GPU night on a CPU machine: an 8-GPU node stood in for by a fake NVML.

Each arm's server runs on the GPUs the regime gives it (``hardware.devices``, else the first
tensor_parallel_size of those visible), launched with CUDA_VISIBLE_DEVICES set to exactly them;
power, energy and the neighbour check read those GPUs only, and the run names them. The regime's
GPU model is matched whole ("NVIDIA H200 NVL" is no "NVIDIA H200"), and a driver whose CUDA is
older than the pinned engine release's wheels need is refused before anything starts.

Nothing here has run on a real GPU: tests/test_gpu_power.py holds the real-NVML checks."""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
import time
import types
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from rich.console import Console

from harness.config.engines import get_adapter
from harness.config.engines.cuda import CUDA_NEEDED, cuda_older
from harness.config.engines.served import ServedConfig
from harness.config.regime import load_regime
from harness.core.errors import UserError
from harness.results import RequestRecord, RunDir, read_json, read_records
from harness.results.records import WindowRecord
from harness.run.calibration import CalibrationSource
from harness.run.client import WindowResult
from harness.run.plan import plan_regime, prepare_run
from harness.run.runner import Runner
from harness.run.sensors.devices import choose_gpus
from harness.run.sensors.environment import collect_environment
from harness.run.validation import check_environment, cuda_check, server_gpus

ROOT = Path(__file__).resolve().parent.parent
ARM_GPU = 3  # the one GPU of the node the arm's server is given
ARM_WATTS, IDLE_WATTS = 100.0, 600.0  # the seven others draw six times as much: summing them shows
FOREIGN_PID = 4242  # a process on the arm's GPU that the harness cannot attribute (another pid namespace)


class _NvmlError(Exception):
    def __init__(self, value: int = 3) -> None:
        super().__init__(value)
        self.value = value


def fake_nvml(
    names: list[str] | None = None, cuda: int = 13000, processes: dict[int, list[int]] | None = None
) -> types.ModuleType:
    """nvidia-ml-py as an 8-GPU node answers it: GPU ``ARM_GPU`` draws ``ARM_WATTS``, every other
    ``IDLE_WATTS``; each GPU's energy counter runs at its power; ``cuda``: the driver's highest CUDA
    as NVML encodes it (12040: 12.4); ``processes``: the compute processes per GPU."""
    names = names or ["NVIDIA H200"] * 8
    processes = processes or {}
    started = time.perf_counter()
    nvml = types.ModuleType("pynvml")
    nvml.NVMLError = _NvmlError
    nvml.NVML_CLOCK_SM, nvml.NVML_CLOCK_MEM, nvml.NVML_ERROR_NOT_FOUND = 1, 2, 6
    nvml.nvmlInit = nvml.nvmlShutdown = lambda: None
    nvml.nvmlDeviceGetCount = lambda: len(names)
    nvml.nvmlDeviceGetHandleByIndex = lambda index: index
    nvml.nvmlDeviceGetName = lambda handle: names[handle]
    nvml.nvmlDeviceGetUUID = lambda handle: f"GPU-0000000{handle}-fake"
    nvml.nvmlDeviceGetMemoryInfo = lambda handle: SimpleNamespace(total=141 * 2**30)
    nvml.nvmlDeviceGetEnforcedPowerLimit = lambda handle: 700_000
    nvml.nvmlDeviceGetMaxClockInfo = lambda handle, clock: 1980
    nvml.nvmlSystemGetCudaDriverVersion = lambda: cuda
    nvml.nvmlSystemGetDriverVersion = lambda: "580.65.06" if cuda >= 13000 else "550.54.15"  # R580: CUDA 13.0

    def watts(handle: int) -> float:
        return ARM_WATTS if handle == ARM_GPU else IDLE_WATTS

    nvml.nvmlDeviceGetPowerUsage = lambda handle: int(watts(handle) * 1000)  # mW
    nvml.nvmlDeviceGetTotalEnergyConsumption = lambda handle: int(
        watts(handle) * 1000 * (time.perf_counter() - started)  # mJ since the node "booted"
    )
    nvml.nvmlDeviceGetCurrentClocksThrottleReasons = lambda handle: 0
    nvml.nvmlDeviceGetComputeRunningProcesses = lambda handle: [
        SimpleNamespace(pid=pid, usedGpuMemory=2**30) for pid in processes.get(handle, [])
    ]

    def utilization(handle: int, since_us: int) -> list:
        if not processes.get(handle):
            raise _NvmlError(nvml.NVML_ERROR_NOT_FOUND)
        return [SimpleNamespace(pid=pid, timeStamp=since_us + 1, smUtil=80) for pid in processes[handle]]

    nvml.nvmlDeviceGetProcessUtilization = utilization
    return nvml


def _regime(tmp_path: Path, **hardware: Any) -> Path:
    """A one-arm GPU regime (the h200_tp1 regime's hardware and engine, a handful of prompts)."""
    data = {
        "name": "gpu_rehearsal",
        "hardware": {"kind": "gpu", "gpu_model": "NVIDIA H200", "gpu_count": 1, **hardware},
        "engine": {"name": "vllm", "version": "0.33.0"},
        "target": {"path": "Qwen/Qwen3-8B", "dtype": "bfloat16", "max_model_len": 4096},
        "tensor_parallel_size": 1,
        "sampling": {"temperature": 0, "seed": 0},
        "load": {"concurrency": [1], "num_prompts": 2, "max_output_tokens": 8, "warmup_requests": 0},
        "exactness": {"enabled": False},
        "verdict": {"covariate": "none"},  # no workload pass: a pool's time
        "power": {"sample_period_s": 0.05},
        "cost": {"usd_per_gpu_hour": 3.5},
        "workloads": [str(ROOT / "workloads" / "code_humaneval.yaml")],
        "arms": [{"name": "baseline", "method": "baseline"}],
    }
    path = tmp_path / "gpu_rehearsal.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


# ---- which GPUs a server gets


def test_the_server_gets_the_pinned_gpus_or_the_first_visible(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml())
    visible = [{"index": i, "name": "NVIDIA H200"} for i in range(8)]
    assert choose_gpus(visible, None, 2) == (visible[:2], [])
    assert choose_gpus(visible, [5, 3], 2) == ([visible[5], visible[3]], [])
    # a user's CUDA_VISIBLE_DEVICES: the harness picks within it, in its order
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "6,2")
    environment = collect_environment("vllm 0.33.0")
    assert [g["index"] for g in environment["gpus"]] == [6, 2]
    regime = load_regime(_regime(tmp_path))
    assert [g["index"] for g in server_gpus(regime, environment)] == [6]
    # a pin outside it is a mismatch naming what is visible; allowed through, the default is taken
    pinned = regime.model_copy(update={"hardware": regime.hardware.model_copy(update={"devices": [0]})})
    found = [str(m) for m in check_environment(pinned, environment)]
    assert found == [
        "hardware.devices: regime pins GPU(s) 0, found GPU(s) 0 not visible here "
        "(CUDA_VISIBLE_DEVICES=6,2); visible: 6, 2"
    ]
    assert [g["index"] for g in server_gpus(pinned, environment)] == [6]


def test_devices_are_checked_when_the_regime_is_read(tmp_path: Path) -> None:
    with pytest.raises(
        UserError, match=r"hardware\.devices.*2 GPU\(s\) for a server of tensor_parallel_size 1"
    ):
        load_regime(_regime(tmp_path, devices=[0, 1]))
    with pytest.raises(UserError, match=r"hardware\.devices\[1\].*GPU 2 is listed twice"):
        load_regime(_regime(tmp_path, devices=[2, 2], gpu_count=2))
    # where a server runs is not what it runs: the fingerprint holds
    assert (
        load_regime(_regime(tmp_path, devices=[3])).fingerprint()
        == load_regime(_regime(tmp_path)).fingerprint()
    )
    data = yaml.safe_load(_regime(tmp_path).read_text())
    data["engine"]["env"] = {"CUDA_VISIBLE_DEVICES": "3"}
    (tmp_path / "env.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(UserError, match=r"engine\.env\.CUDA_VISIBLE_DEVICES.*pin the GPUs there"):
        load_regime(tmp_path / "env.yaml")


# ---- the dress rehearsal: one arm on GPU 3 of 8


class _Adapter:
    """vLLM's adapter (its launch command as it is), its HTTP side answered without an engine."""

    acceptance_source = "per_request"

    def __getattr__(self, name: str) -> Any:
        from harness.config.engines import get_adapter

        return getattr(get_adapter("vllm"), name)

    def served_config(self, base_url: str, log_path: Path | None = None) -> ServedConfig:
        return ServedConfig()

    def reset_prefix_cache(self, base_url: str) -> bool | None:
        return None  # no reset route: asked once, not again

    def read_prefix_cache(self, base_url: str) -> None:
        return None

    def read_spec_counters(self, base_url: str) -> None:
        return None

    def server_figures(self, base_url: str) -> None:
        return None


def _rehearsal_runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine_pid: int) -> Runner:
    """The runner of the rehearsal regime pinned to GPU ``ARM_GPU``, its plan from the fake node's
    environment, the server and the client stood in for: each window 'streams' for 0.4 s."""
    monkeypatch.setattr(get_adapter("vllm"), "installed_version", lambda: "vllm 0.33.0")
    plan = plan_regime(_regime(tmp_path, devices=[ARM_GPU]))
    # what bench run prepares (the machine against the regime, refusals included), then no engine
    prepared = prepare_run(plan, Console(quiet=True), calibration=CalibrationSource(enabled=False))
    assert prepared.mismatches == () and [g["index"] for g in prepared.gpus] == [ARM_GPU]
    ready = replace(prepared, adapter=_Adapter())
    runner = Runner(ready, tmp_path / "results", Console(quiet=True))
    launched: list[dict[str, str]] = []

    @contextmanager
    def ready_server(run: RunDir, arm: Any, start: int) -> Iterator[tuple[Any, float]]:
        server = runner._server(run, arm, start)  # built as a real start-up builds it, never started
        launched.append(server.extra_env)
        for private in {server.uds.parent if server.uds else None, server.private_dir} - {None}:
            shutil.rmtree(private, ignore_errors=True)  # made for a start-up that never comes
        process = SimpleNamespace(pid=engine_pid)
        fake = SimpleNamespace(
            process=process, base_url="http://fake", log_path=server.log_path, served_model=None
        )
        yield SimpleNamespace(**vars(fake), exit_code=lambda: None), 1.0

    def send(
        server: Any, workload: Any, prompts: list, level: Any, label: str, keep: Any, repeat: int = 0, **_
    ):
        start = time.perf_counter()
        time.sleep(0.4)
        records = []
        for prompt in prompts:
            record = RequestRecord.from_json(
                {
                    "workload": workload.name,
                    "prompt_id": prompt.prompt_id,
                    "concurrency": level.concurrency,
                    "prompt_format": workload.definition.prompt_format,
                    "repeat": repeat,
                    "t_send": start,
                    "t_first_token": start + 0.1,
                    "t_done": start + 0.4,
                    "token_ids": list(range(8)),
                }
            )
            keep(record)
            records.append(record)
        return WindowResult(records=records, duration_s=time.perf_counter() - start)

    monkeypatch.setattr(runner, "_ready_server", ready_server)
    monkeypatch.setattr(runner, "_send", send)
    runner.launched = launched  # type: ignore[attr-defined]
    return runner


def test_power_energy_and_neighbours_come_from_the_arms_own_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    engine = subprocess.Popen(["sleep", "30"], start_new_session=True)  # its own process group, as a server
    try:
        # the arm's GPU holds a process of another pid namespace (nothing attributable: every process
        # seen is recorded); GPU 5 holds someone else's job, which is not the arm's business
        processes = {ARM_GPU: [FOREIGN_PID], 5: [5555]}
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(processes=processes))
        runner = _rehearsal_runner(tmp_path, monkeypatch, engine.pid)
        run, summary = runner.run()
    finally:
        engine.kill()
        engine.wait()
    # the server was launched on GPU 3 alone, in NVML's (PCI bus) order, and launch.json says so
    devices = [
        {k: env.get(k) for k in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")} for env in runner.launched
    ]
    assert devices == [{"CUDA_VISIBLE_DEVICES": str(ARM_GPU), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}]
    launch = read_json(run.arm_dir("baseline") / "launch.json")
    assert launch["env"]["CUDA_VISIBLE_DEVICES"] == str(ARM_GPU)
    # the raw window: GPU 3's watts only (all eight would read 4300 W), named, and only its processes
    (window,) = read_records(run.windows("baseline"), WindowRecord)
    assert window.power is not None and window.power.source == "nvml"
    assert {s[1] for s in window.power.samples} == {ARM_WATTS}
    assert [(g.index, g.name, g.uuid) for g in window.power.gpus or []] == [
        (ARM_GPU, "NVIDIA H200", "GPU-00000003-fake")
    ]
    assert window.gpu is not None and {o.device for o in window.gpu.others} == {ARM_GPU}
    # derived: the mean power and energy of one GPU at 100 W over the window
    cell = summary.cells[0]
    assert cell.mean_w == pytest.approx(ARM_WATTS, rel=0.1)
    assert cell.energy_j == pytest.approx(ARM_WATTS * window.duration_s, rel=0.35)
    environment = read_json(run.root / "environment.json")
    assert [g["index"] for g in environment["server_gpus"]] == [ARM_GPU]
    assert environment["cuda_check"] == "vllm 0.33.0 needs CUDA 13.0; the driver supports CUDA 13.0"
    # presented: bench show and the report name the GPU where the power figures are
    from harness.commands.terminal import print_results
    from harness.derive.analysis import load_analysis
    from harness.present.report import report_context

    loaded = load_analysis(run.root)
    out = io.StringIO()
    print_results(loaded.analysis, Console(file=out, width=120))
    shown = " ".join(out.getvalue().split())
    assert "NVML on the servers' own GPUs only, GPU 3 (NVIDIA H200, GPU-00000003-fake)" in shown
    assert (
        report_context(loaded)["power_note"] == "measured with nvml on GPU 3 (NVIDIA H200, GPU-00000003-fake)"
    )


# ---- identity: the GPU model, whole


def _environment(names: list[str], cuda: int = 13000, monkeypatch: pytest.MonkeyPatch | None = None) -> dict:
    assert monkeypatch is not None
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(names, cuda))
    return collect_environment("vllm 0.33.0")


def test_an_h200_nvl_is_no_h200_unless_accepted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nvl = _environment(["NVIDIA H200 NVL"] * 8, monkeypatch=monkeypatch)
    regime = load_regime(_regime(tmp_path))
    assert [str(m) for m in check_environment(regime, nvl)] == [
        "hardware.gpu_model: regime pins NVIDIA H200, found NVIDIA H200 NVL"
    ]
    accepted = load_regime(_regime(tmp_path, gpu_models_accepted=["NVIDIA H200 NVL"]))
    assert check_environment(accepted, nvl) == []
    assert accepted.fingerprint() != regime.fingerprint()  # accepting another part is another regime
    # whole names, case and spacing aside
    spaced = _environment(["nvidia  h200"] * 8, monkeypatch=monkeypatch)
    assert check_environment(regime, spaced) == []
    # only the servers' GPUs are compared: a node with an odd GPU beside the arm's
    mixed = _environment(["NVIDIA H200"] + ["NVIDIA H100 80GB HBM3"] * 7, monkeypatch=monkeypatch)
    assert check_environment(regime, mixed) == []
    assert [m.field for m in check_environment(load_regime(_regime(tmp_path, devices=[1])), mixed)] == [
        "hardware.gpu_model"
    ]


# ---- the driver's CUDA against the engine's


def test_the_cuda_table_and_its_comparison() -> None:
    assert CUDA_NEEDED[("vllm", "0.33.0")] == CUDA_NEEDED[("sglang", "0.5.23")] == "13.0"
    assert cuda_older("12.4", "13.0") and not cuda_older("13.0", "13.0") and not cuda_older("12.10", "12.9")


def test_an_unknown_release_is_not_checked_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = _environment(["NVIDIA H200"] * 8, cuda=12040, monkeypatch=monkeypatch)
    data = yaml.safe_load(_regime(tmp_path).read_text())
    data["engine"]["version"] = "0.99.0"
    (tmp_path / "new.yaml").write_text(yaml.safe_dump(data))
    regime = load_regime(tmp_path / "new.yaml")
    assert cuda_check(regime, old) == ([], "vllm 0.99.0: its CUDA need is not known here, not checked")
    assert [m.field for m in check_environment(regime, old)] == [
        "engine.version"
    ]  # the pin vs installed only


def test_a_too_old_driver_is_refused_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from harness.cli import main

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("BENCH_EXECUTOR", raising=False)
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(cuda=12040))
    monkeypatch.setattr(get_adapter("vllm"), "installed_version", lambda: "vllm 0.33.0")
    started: list[Any] = []

    def no_server(server: Any) -> None:
        started.append(server.argv)
        raise AssertionError("a server was started")

    monkeypatch.setattr("harness.run.server.Server.start", no_server)
    monkeypatch.setenv("COLUMNS", "200")
    regime, results = _regime(tmp_path), tmp_path / "results"
    expected = (
        "engine.version: regime pins 0.33.0 (vllm's wheels need a driver supporting CUDA 13.0 or newer), "
        "found a driver supporting CUDA 12.4 at most (driver 550.54.15)"
    )
    assert main(["run", str(regime), "--results-dir", str(results)]) != 0
    out = capsys.readouterr()
    assert expected in " ".join((out.out + out.err).split())
    assert "nothing was started" in out.out + out.err
    assert started == [] and not results.exists()
    # bench validate shows the same line, with the GPU each server would get
    assert main(["validate", str(regime)]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert expected in shown and "each server runs on GPU 0 (NVIDIA H200, GPU-00000000-fake)" in shown
    assert "CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=0" in shown


def test_without_chosen_gpus_the_process_view_names_the_visible_ones_by_nvml_index(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A reader opened on every visible GPU (no GPU chosen) labels them by NVML index, as the
    chosen path does: CUDA_VISIBLE_DEVICES=6,2 leaves GPUs 6 and 2, not 0 and 1."""
    from harness.run.sensors.gpu import NvmlProcessReader

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "6,2")
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml())
    assert NvmlProcessReader(None)._devices == [6, 2]
    assert NvmlProcessReader([3])._devices == [3]


@pytest.mark.parametrize("without", [0, 1], ids=["first-gpu", "second-gpu"])
def test_a_gpu_without_an_energy_counter_loses_only_the_energy(
    without: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A TP=2 arm on a VM or MIG slice where one GPU has no energy counter: its watts are still the
    two GPUs' sum and the sample is kept; only the energy, which a part of the GPUs cannot give, is
    absent (it once raised on the next GPU, and the sampler lost every sample of the arm)."""
    from harness.run.sensors.power import NvmlReader

    nvml = fake_nvml()
    counted = nvml.nvmlDeviceGetTotalEnergyConsumption

    def energy(handle: int) -> int:
        if handle == without:
            raise nvml.NVMLError(3)  # NVML_ERROR_NOT_SUPPORTED
        return counted(handle)

    nvml.nvmlDeviceGetTotalEnergyConsumption = energy
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    reading = NvmlReader([0, 1]).read()
    assert reading.watts == pytest.approx(2 * IDLE_WATTS)
    assert reading.energy_j is None
    whole = NvmlReader([2, 3]).read()
    assert whole.energy_j is not None and whole.watts == pytest.approx(IDLE_WATTS + ARM_WATTS)
