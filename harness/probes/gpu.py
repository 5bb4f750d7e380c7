"""Who else used the engine's GPUs during a window (NVML), the GPU-side twin of ``probes.cpu``.

A kernel from another process on the same GPU takes SMs and memory bandwidth from the engine: its
window measures the neighbour too. Between the window's start and stop a thread polls NVML once
per ``period_s`` for each GPU's compute processes (pid, memory) and their SM utilisation since the
previous poll (``nvmlDeviceGetProcessUtilization``: one sample per process that used the SMs).

Attribution: the engine's processes are its process group's pids (``probes.cpu``). The engine's
GPUs are those where one of them appears; every other process there is a neighbour. Where none of
the engine's pids appears (the engine runs in another pid namespace than the harness, e.g. a
container started apart, or on a machine whose engine does not use the GPU) nothing can be
attributed: the window records the processes seen, ``attributed: false``, and flags nothing.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from harness.power import open_nvml
from harness.probes.cpu import PROC, process_group_pids

# A window is measured "beside a busy GPU neighbour" above this summed SM utilisation of other
# processes (percent of the device's time, mean over the window).
NOISY_GPU_SM_PCT = 5.0
POLL_PERIOD_S = 1.0


@dataclass(frozen=True)
class ProcessSample:
    """One process on one GPU at one poll."""

    device: int
    pid: int
    memory_mib: float | None  # None where NVML does not say (e.g. some MIG or WDDM setups)
    sm_pct: float | None  # SM utilisation since the previous poll; None: NVML cannot say here


class NvmlProcessReader:
    """The compute processes on every GPU and their SM utilisation since the previous read."""

    def __init__(self) -> None:
        self._nvml, self._handles = open_nvml()

    def read(self, since_us: int) -> list[ProcessSample]:
        nvml, found = self._nvml, []
        for device, handle in enumerate(self._handles):
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


def open_process_reader() -> NvmlProcessReader | None:
    """NVML's process view, or None where there is no NVML or no GPU (a CPU machine)."""
    try:
        return NvmlProcessReader()
    except Exception:  # ImportError, NVMLError, RuntimeError: all mean "no GPU to watch"
        return None


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
            self.polls.append(self.reader.read(since))
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


def window_gpu(polls: list[list[ProcessSample]], ours: set[int]) -> dict[str, Any]:
    """The window's neighbours from its polls: per other process, its largest memory and its mean
    SM utilisation over the polls (0 in a poll it was absent from)."""
    seen = [s for poll in polls for s in poll]
    engine_devices = sorted({s.device for s in seen if s.pid in ours})
    attributed = bool(engine_devices)
    watched = [s for s in seen if s.pid not in ours and (not attributed or s.device in engine_devices)]
    utilization = bool(seen) and all(s.sm_pct is not None for s in seen)
    others = []
    for device, pid in sorted({(s.device, s.pid) for s in watched}):
        mine = [s for s in watched if (s.device, s.pid) == (device, pid)]
        memory = [s.memory_mib for s in mine if s.memory_mib is not None]
        others.append(
            {
                "device": device,
                "pid": pid,
                "name": _process_name(pid),
                "memory_mib": max(memory) if memory else None,
                "sm_pct": sum(s.sm_pct or 0.0 for s in mine) / len(polls) if utilization else None,
            }
        )
    return {
        "polls": len(polls),
        "engine_devices": engine_devices,
        "attributed": attributed,
        "utilization_supported": utilization,
        "others": others,
    }


def _process_name(pid: int) -> str | None:
    """The command name where this machine can see the process (the same pid namespace)."""
    try:
        return (PROC / str(pid) / "comm").read_text().strip() or None
    except OSError:
        return None


def watch(reader: NvmlProcessReader | None, engine_pgid: int) -> GpuWatch | None:
    """A started watch over the engine's GPUs, or None without NVML."""
    if reader is None:
        return None
    gpu_watch = GpuWatch(reader, process_group_pids(engine_pgid) | {os.getpid()})
    gpu_watch.start()
    return gpu_watch
