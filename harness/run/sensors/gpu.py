"""NVML's view of the processes on the GPUs, polled during a window (``harness.core.probes.gpu``
attributes the polls: the engine's GPUs and its neighbours there).

Between the window's start and stop a thread polls NVML once per ``period_s`` for each GPU's
compute processes (pid, memory) and their SM utilisation since the previous poll
(``nvmlDeviceGetProcessUtilization``: one sample per process that used the SMs), and names each
process from ``/proc`` at the poll, while it still runs.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from harness.core.probes.gpu import ProcessSample, window_gpu
from harness.run.sensors.cpu import process_group_pids, process_name
from harness.run.sensors.devices import handles_at
from harness.run.sensors.power import open_nvml

POLL_PERIOD_S = 1.0


class NvmlProcessReader:
    """The compute processes on ``devices`` (NVML indices: a server's own GPUs; None: every visible
    one) and their SM utilisation since the previous read. A sample names its GPU by NVML index."""

    def __init__(self, devices: list[int] | None = None) -> None:
        self._nvml, handles = open_nvml(devices)
        # every visible GPU by its NVML index (CUDA_VISIBLE_DEVICES=6,2 leaves 6 and 2, not 0 and 1)
        self._devices = [i for i, _ in handles_at(self._nvml, None)] if devices is None else list(devices)
        self._handles = handles

    def read(self, since_us: int) -> list[ProcessSample]:
        nvml, found = self._nvml, []
        for device, handle in zip(self._devices, self._handles, strict=True):
            sm = self._sm_pct(handle, since_us)
            for proc in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
                memory = proc.usedGpuMemory
                found.append(
                    ProcessSample(
                        device,
                        int(proc.pid),
                        None if memory is None else memory / 2**20,
                        None if sm is None else sm.get(int(proc.pid), 0.0),
                    )
                )
            # a process that used the SMs since the last poll but has already left the list
            listed = {s.pid for s in found if s.device == device}
            gone = {pid: pct for pid, pct in (sm or {}).items() if pid not in listed}
            found += [ProcessSample(device, pid, None, pct) for pid, pct in gone.items()]
        return found

    def _sm_pct(self, handle: Any, since_us: int) -> dict[int, float] | None:
        """pid -> SM utilisation (%) since ``since_us`` (NVML's CPU timestamp, microseconds); None
        where the device cannot report it per process."""
        nvml = self._nvml
        try:
            samples = nvml.nvmlDeviceGetProcessUtilization(handle, since_us)
        except nvml.NVMLError as exc:
            if getattr(nvml, "NVML_ERROR_NOT_FOUND", None) == getattr(exc, "value", None):
                return {}  # no process used the SMs since then
            return None
        pct: dict[int, float] = {}
        for sample in samples:
            pct[int(sample.pid)] = max(pct.get(int(sample.pid), 0.0), float(sample.smUtil))
        return pct

    def close(self) -> None:
        self._nvml.nvmlShutdown()


def open_process_reader(devices: list[int] | None = None) -> NvmlProcessReader | None:
    """NVML's process view of ``devices`` (see ``NvmlProcessReader``), or None where there is no NVML
    or no GPU (a CPU machine)."""
    try:
        return NvmlProcessReader(devices)
    except Exception:  # ImportError, NVMLError, RuntimeError: all mean "no GPU to watch"
        return None


# a stopped server's GPUs count as released once each holds at most what it held before the server
# started plus this (another tool's CUDA context, the driver's own)
RELEASE_SLACK_BYTES = 2**30
RELEASE_TIMEOUT_S = 60.0
RELEASE_POLL_S = 0.25


def memory_used(devices: list[int]) -> list[int] | None:
    """Each GPU's used memory (bytes) at the NVML indices ``devices``, now; None where NVML cannot
    say (no NVML or no GPU: a CPU machine)."""
    try:
        nvml, handles = open_nvml(devices)
    except Exception:  # ImportError, NVMLError, RuntimeError: all mean "no GPU to read"
        return None
    try:
        return [int(nvml.nvmlDeviceGetMemoryInfo(handle).used) for handle in handles]
    except Exception:
        return None
    finally:
        nvml.nvmlShutdown()


@dataclass(frozen=True)
class Release:
    """How a stopped server's GPUs let go of their memory: the seconds waited, and the GPUs (NVML
    index, GiB above what they held before the server started) still holding it at the bound."""

    waited_s: float
    held: list[tuple[int, float]]


def wait_released(
    devices: list[int],
    before: list[int],
    timeout_s: float = RELEASE_TIMEOUT_S,
    poll_s: float = RELEASE_POLL_S,
) -> Release:
    """Wait, at most ``timeout_s``, until every GPU of a stopped server holds no more memory than it
    did before the server started (``before``, from ``memory_used``) plus ``RELEASE_SLACK_BYTES``: a
    SIGKILLed worker's memory is freed by the driver some seconds after the process is gone, and the
    next server (vLLM: ``gpu_memory_utilization`` x the total, free at start-up) refuses to start
    below it."""
    started = time.monotonic()
    while True:
        used = memory_used(devices)
        if used is None:  # NVML went away: nothing to wait for
            return Release(time.monotonic() - started, [])
        held = [
            (device, (now - then) / 2**30)
            for device, now, then in zip(devices, used, before, strict=True)
            if now > then + RELEASE_SLACK_BYTES
        ]
        waited = time.monotonic() - started
        if not held or waited >= timeout_s:
            return Release(waited, held)
        time.sleep(poll_s)


def _named(samples: list[ProcessSample]) -> list[ProcessSample]:
    """The samples with each process's command name, read now: a process that leaves before the
    window ends keeps the name it had while it ran."""
    return [s if s.name is not None else dataclasses.replace(s, name=process_name(s.pid)) for s in samples]


@dataclass
class GpuWatch:
    """Polls a reader on a thread between ``start`` and ``stop``; ``stop`` returns the window's
    ``harness.results.WindowGpu`` fields."""

    reader: Any  # NvmlProcessReader or anything with read(since_us) -> list[ProcessSample]
    ours: set[int]  # the engine's pids (and the harness's own)
    period_s: float = POLL_PERIOD_S
    polls: list[list[ProcessSample]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        since = _now_us()
        while not self._stop.wait(self.period_s):
            since = self._poll(since)

    def _poll(self, since: int) -> int:
        now = _now_us()
        try:
            self.polls.append(_named(self.reader.read(since)))
        except Exception:  # a failed poll loses one sample, never the run
            pass
        return now

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if not self.polls:  # a window shorter than one period: one poll at its end
            self._poll(_now_us() - int(self.period_s * 1e6))
        return window_gpu(self.polls, self.ours)


def _now_us() -> int:
    return int(time.time() * 1e6)


def watch(reader: NvmlProcessReader | None, engine_pgid: int) -> GpuWatch | None:
    """A started watch over the engine's GPUs, or None without NVML."""
    if reader is None:
        return None
    gpu_watch = GpuWatch(reader, process_group_pids(engine_pgid) | {os.getpid()})
    gpu_watch.start()
    return gpu_watch
