"""Who else used the engine's GPUs during a window, the GPU-side twin of ``probes.cpu``.

A kernel from another process on the same GPU takes SMs and memory bandwidth from the engine: its
window measures the neighbour too. ``harness.run.sensors.gpu`` polls NVML during the window for each
GPU's compute processes (pid, name, memory) and their SM utilisation since the previous poll; this
module attributes the polls.

Attribution: the engine's processes are its process group's pids. The engine's GPUs are those
where one of them appears; every other process there is a neighbour. Where none of the engine's
pids appears (the engine runs in another pid namespace than the harness, e.g. a container started
apart, or on a machine whose engine does not use the GPU) nothing can be attributed: the window
records the processes seen, ``attributed: false``, and flags nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# A window is measured "beside a busy GPU neighbour" above this summed SM utilisation of other
# processes (percent of the device's time, mean over the window).
NOISY_GPU_SM_PCT = 5.0


@dataclass(frozen=True)
class ProcessSample:
    """One process on one GPU at one poll."""

    device: int
    pid: int
    memory_mib: float | None  # None where NVML does not say (e.g. some MIG or WDDM setups)
    sm_pct: float | None  # SM utilisation since the previous poll; None: NVML cannot say here
    name: str | None = None  # its command name at the poll; None where this machine cannot see it


def window_gpu(polls: list[list[ProcessSample]], ours: set[int]) -> dict[str, Any]:
    """The window's neighbours from its polls: per other process, its largest memory, its mean
    SM utilisation over the polls (0 in a poll it was absent from) and its latest known name."""
    seen = [s for poll in polls for s in poll]
    engine_devices = sorted({s.device for s in seen if s.pid in ours})
    attributed = bool(engine_devices)
    watched = [s for s in seen if s.pid not in ours and (not attributed or s.device in engine_devices)]
    utilization = bool(seen) and all(s.sm_pct is not None for s in seen)
    others = []
    for device, pid in sorted({(s.device, s.pid) for s in watched}):
        mine = [s for s in watched if (s.device, s.pid) == (device, pid)]
        memory = [s.memory_mib for s in mine if s.memory_mib is not None]
        names = [s.name for s in mine if s.name is not None]
        others.append(
            {
                "device": device,
                "pid": pid,
                "name": names[-1] if names else None,
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
