"""Other processes on the engine's GPUs: attribution from NVML's process view (probes.gpu), the
reader's handling of NVML's answers and the watch thread (sensors.gpu), and the texts that name a
GPU neighbour.
NVML itself is replaced by a stand-in module here (no GPU on CI); tests/test_gpu_power.py runs the
real NVML path on a GPU machine."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import types
from types import SimpleNamespace

import pytest

from harness.core.probes.gpu import ProcessSample, window_gpu
from harness.run.sensors import gpu
from harness.run.sensors.cpu import process_name


def test_neighbours_are_the_other_processes_on_the_engines_gpus() -> None:
    engine, neighbour, elsewhere = 100, 200, 300
    polls = [
        [ProcessSample(0, engine, 8000.0, 60.0), ProcessSample(0, neighbour, 500.0, 30.0)],
        [ProcessSample(0, engine, 8100.0, 70.0), ProcessSample(0, neighbour, 700.0, 0.0)],
        [ProcessSample(0, engine, 8100.0, 65.0), ProcessSample(1, elsewhere, 100.0, 90.0)],
    ]
    used = window_gpu(polls, {engine})
    assert used["attributed"] and used["engine_devices"] == [0] and used["utilization_supported"]
    # GPU 1 is not the engine's: its process is nobody's business; the neighbour was in 2 of 3 polls
    assert [(o["device"], o["pid"]) for o in used["others"]] == [(0, neighbour)]
    assert used["others"][0]["sm_pct"] == pytest.approx(10.0) and used["others"][0]["memory_mib"] == 700.0
    assert used["polls"] == 3


def test_without_the_engines_pids_nothing_is_attributed() -> None:
    """An engine in another pid namespace: NVML's pids are not ours; record, never flag."""
    polls = [[ProcessSample(0, 7, 8000.0, None), ProcessSample(1, 8, 10.0, None)]]
    used = window_gpu(polls, {100})
    assert not used["attributed"] and used["engine_devices"] == []
    assert not used["utilization_supported"] and [o["sm_pct"] for o in used["others"]] == [None, None]
    assert window_gpu([], {100})["others"] == []


def test_the_names_are_the_ones_recorded_at_the_polls() -> None:
    """The formula reads names from the samples only (never /proc): this process is alive and
    named here, yet a sample without a name stays unnamed; the latest recorded name wins."""
    polls = [
        [ProcessSample(0, 100, 10.0, 1.0), ProcessSample(0, 200, 10.0, 1.0, "old")],
        [ProcessSample(0, 200, 10.0, 1.0, "python"), ProcessSample(0, os.getpid(), 10.0, 1.0)],
    ]
    others = {o["pid"]: o["name"] for o in window_gpu(polls, {100})["others"]}
    assert others == {200: "python", os.getpid(): None}


def test_a_neighbour_that_leaves_keeps_the_name_it_had_at_the_poll() -> None:
    neighbour = subprocess.Popen(["sleep", "30"])
    deadline = time.monotonic() + 10
    while process_name(neighbour.pid) != "sleep":  # forked, not yet exec'd: still this test's name
        assert time.monotonic() < deadline, process_name(neighbour.pid)
        time.sleep(0.01)

    class Reader:
        def read(self, since_us: int) -> list[ProcessSample]:
            return [ProcessSample(0, 1, 10.0, 50.0), ProcessSample(0, neighbour.pid, 10.0, 20.0)]

    watch = gpu.GpuWatch(Reader(), ours={1}, period_s=60)
    watch._poll(0)  # a poll while it runs (no thread: the window's stop adds no poll of its own)
    neighbour.kill()
    neighbour.wait()
    assert [(o["pid"], o["name"]) for o in watch.stop()["others"]] == [(neighbour.pid, "sleep")]


class _NvmlError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value


def _fake_pynvml(processes: dict[int, list[tuple[int, int | None]]], utilization: dict) -> types.ModuleType:
    """A stand-in for nvidia-ml-py with the calls sensors.gpu makes, answering as NVML does:
    ``NOT_FOUND`` when no process used the SMs since the timestamp, ``NOT_SUPPORTED`` where the
    device cannot say per process."""
    nvml = types.ModuleType("pynvml")
    nvml.NVMLError = _NvmlError
    nvml.NVML_ERROR_NOT_SUPPORTED, nvml.NVML_ERROR_NOT_FOUND = 3, 6
    nvml.nvmlInit = nvml.nvmlShutdown = lambda: None
    nvml.nvmlDeviceGetCount = lambda: len(processes)
    nvml.nvmlDeviceGetHandleByIndex = lambda index: index
    nvml.nvmlDeviceGetUUID = lambda handle: f"GPU-{handle:08d}"

    def running(handle: int) -> list:
        return [SimpleNamespace(pid=pid, usedGpuMemory=memory) for pid, memory in processes[handle]]

    def samples(handle: int, since_us: int) -> list:
        found = utilization[handle]
        if isinstance(found, int):
            raise _NvmlError(found)
        return [SimpleNamespace(pid=pid, timeStamp=since_us + 1, smUtil=sm) for pid, sm in found]

    nvml.nvmlDeviceGetComputeRunningProcesses = running
    nvml.nvmlDeviceGetProcessUtilization = samples
    return nvml


def test_the_reader_turns_nvmls_answers_into_samples(monkeypatch) -> None:
    processes = {0: [(100, 2**30), (200, None)], 1: [(300, 2**20)], 2: []}
    # GPU 0: per-process samples, one from a process that has left the list since; GPU 1: nobody
    # used the SMs (NOT_FOUND); GPU 2: the device cannot say (NOT_SUPPORTED)
    utilization = {0: [(100, 55), (100, 60), (999, 12)], 1: 6, 2: 3}
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(processes, utilization))
    reader = gpu.open_process_reader()
    assert reader is not None
    found = reader.read(since_us=0)
    reader.close()
    assert found == [
        ProcessSample(0, 100, 1024.0, 60.0),  # the higher of a process's samples
        ProcessSample(0, 200, None, 0.0),  # listed, no SM sample: 0%, memory unknown
        ProcessSample(0, 999, None, 12.0),  # used the SMs, gone by the time of the listing
        ProcessSample(1, 300, 1.0, 0.0),
    ]
    processes[2].append((400, 2**20))
    assert reader.read(0)[-1] == ProcessSample(2, 400, 1.0, None)


def test_no_nvml_means_nothing_to_watch(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails, as on a CPU machine
    assert gpu.open_process_reader() is None
    assert gpu.watch(None, engine_pgid=1) is None


def test_the_watch_polls_until_stopped() -> None:
    class Reader:
        def __init__(self) -> None:
            self.since: list[int] = []

        def read(self, since_us: int) -> list[ProcessSample]:
            self.since.append(since_us)
            if len(self.since) == 2:
                raise RuntimeError("a failed poll loses one sample, never the window")
            return [ProcessSample(0, 1, 10.0, 50.0), ProcessSample(0, 2, 10.0, 20.0)]

    reader = Reader()
    watch = gpu.GpuWatch(reader, ours={1}, period_s=0.01)
    watch.start()
    time.sleep(0.1)
    used = watch.stop()
    assert len(reader.since) >= 3 and reader.since == sorted(reader.since)  # each poll: since the last
    assert used["polls"] == len(reader.since) - 1 and used["others"][0]["sm_pct"] == pytest.approx(20.0)
    # a window shorter than one period still gets one poll, at its end
    short = gpu.GpuWatch(Reader(), ours={1}, period_s=60)
    short.start()
    assert short.stop()["polls"] == 1


def test_the_texts_name_a_gpu_neighbour() -> None:
    from pathlib import Path

    from harness.derive.samples import RunView
    from harness.derive.verdict import neighbour
    from harness.present.table import cpu_line
    from harness.present.verdict_text import neighbour_text
    from harness.results import CellMetrics, RunDir

    summary = RunView(RunDir(Path(__file__).parent / "fixtures" / "run_v3_smoke")).summary  # a real run
    cell: CellMetrics = summary.cells[-1]
    gpu = {"gpu_other_processes": 2, "gpu_others_sm_pct": 37.4, "noisy_neighbour": True}
    busy = cell.model_copy(update=gpu)
    assert neighbour_text(neighbour(busy)).endswith("; 2 other process(es) on its GPUs using 37% of the SMs")
    line = cpu_line(summary.model_copy(update={"cells": [*summary.cells[:-1], busy]}))
    assert "Other processes on the engine's GPUs: at most 2, using at most 37% of the SMs." in line
    assert f"Flagged (busy neighbour or busy client): {busy.arm} {busy.workload} @{busy.concurrency}." in line
