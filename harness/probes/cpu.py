"""Who used the CPU during a window: the engine, the harness's client, and everyone else.

A speedup measured while another process ate a core is the neighbour's number, not the engine's;
on a 2-core machine the client's own CPU is taken from the engine too. Around each window the
runner takes two snapshots (Linux ``/proc``; nothing elsewhere) and stores the differences:

- ``engine_s``: CPU seconds of the engine server's process group (every worker it started);
- ``client_s``: CPU seconds of the harness process (its client, progress display, scrapes);
- ``others_s``: the machine's busy CPU seconds (``/proc/stat``: user, nice, system, irq, softirq)
  minus those two: every other process on the machine;
- ``steal_s``: time the hypervisor gave this VM's CPUs to other guests (``/proc/stat`` steal).

Shares are per second of the window, in cores (1.0 = one core busy all the time).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

# A window is measured "beside a busy neighbour" above these shares (cores / fraction of the time).
NOISY_OTHERS_CORES = 0.25
NOISY_STEAL = 0.05
# The harness's client "used most of a core": its numbers may be the client's, not the engine's.
BUSY_CLIENT_CORES = 0.5


@dataclass(frozen=True)
class CpuSnapshot:
    busy_s: float  # the machine's busy CPU seconds since boot, all cores
    steal_s: float
    engine_s: float
    client_s: float


def _machine() -> tuple[float, float]:
    fields = (PROC / "stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[:8])
    return (user + nice + system + irq + softirq) / TICK, steal / TICK


def _group_members(pgid: int) -> list[tuple[int, list[str]]]:
    """(pid, /proc/PID/stat fields after "pid (comm) ") of every live process in the group."""
    members = []
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # gone between listing and reading
        fields = stat[stat.rindex(")") + 2 :].split()  # state is fields[0]
        if int(fields[2]) == pgid:  # pgrp
            members.append((int(entry.name), fields))
    return members


def process_group_pids(pgid: int) -> set[int]:
    """The pids of the group's live processes (the engine server and every worker it started)."""
    return {pid for pid, _ in _group_members(pgid)} if (PROC / "stat").is_file() else set()


def _process_group_s(pgid: int) -> float:
    """utime + stime of every live process in the group (a process that exited mid-window loses
    its share: the engine's workers live as long as the server)."""
    return sum(int(fields[11]) + int(fields[12]) for _, fields in _group_members(pgid)) / TICK


def snapshot(engine_pgid: int | None) -> CpuSnapshot | None:
    """None where there is no ``/proc`` (the window then records no CPU accounting)."""
    if not (PROC / "stat").is_file():
        return None
    busy, steal = _machine()
    engine = _process_group_s(engine_pgid) if engine_pgid else 0.0
    return CpuSnapshot(busy, steal, engine, time.process_time())


def window_cpu(before: CpuSnapshot | None, after: CpuSnapshot | None) -> dict[str, float] | None:
    """The window's CPU seconds by whom (``harness.results.WindowCpu``)."""
    if before is None or after is None:
        return None
    engine = after.engine_s - before.engine_s
    client = after.client_s - before.client_s
    busy = after.busy_s - before.busy_s
    return {
        "engine_s": engine,
        "client_s": client,
        # tick-granular counters disagree by a tick or two: never a negative neighbour
        "others_s": max(0.0, busy - engine - client),
        "steal_s": after.steal_s - before.steal_s,
        "cores": float(os.cpu_count() or 1),
    }
