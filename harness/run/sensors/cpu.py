"""CPU snapshots from Linux ``/proc`` around a window: the machine's busy and steal time, the
engine's process group's and this process's CPU seconds. ``harness.core.probes.cpu`` turns two of them
into the window's CPU accounting (who used the CPU: the engine, the client, everyone else)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from harness.core.probes.cpu import CpuSnapshot

PROC = Path("/proc")
TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _machine() -> tuple[float, float]:
    fields = (PROC / "stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[:8])
    return (user + nice + system + irq + softirq) / TICK, steal / TICK


def _group_members(pgid: int) -> list[tuple[int, list[str]]]:
    """(pid, /proc/PID/stat fields after "pid (comm) ") of every live process in the group."""
    members = []
    for entry in PROC.iterdir():
        if not entry.name.isdecimal():
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


def process_name(pid: int) -> str | None:
    """The command name where this machine can see the process (the same pid namespace)."""
    try:
        return (PROC / str(pid) / "comm").read_text().strip() or None
    except OSError:
        return None


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
    return CpuSnapshot(busy, steal, engine, time.process_time(), os.cpu_count() or 1)
