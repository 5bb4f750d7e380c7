"""Cells the engine ran otherwise than the regime reads: from how each arm's server said it ran its
steps (``ArmStatus.runtime``, ``harness.config.engines.served.ServedRuntime``), the cells a verdict
must not be read as the method's own figure, each a caveat that names the cliff and the fix:

- ``uncaptured``: a step of concurrency x (K + 1) tokens above the largest captured CUDA graph runs
  uncaptured (vLLM keeps a decode size only while it fits, ``config/vllm.py``): the cell measures the
  fallback, not the method;
- ``running_cap``: more requests in flight than the engine runs at once: the rest queue (SGLang caps
  speculation at 48 unless ``--max-running-requests`` is set; the baseline is not capped);
- ``async_speculation``: async scheduling with MTP or DFlash above concurrency 1 on a vLLM release
  where #46669 (garbage outputs) is open.
"""

from __future__ import annotations

import re

from harness.derive.verdict import Caveat, caveat
from harness.results.model import Summary

# vLLM #46669 (open as of 0.34.0, 2026-12-07): MTP and DFlash outputs go wrong with async scheduling
# above concurrency 1; releases after the newest one read are not judged
ASYNC_DEFECT_METHODS = ("mtp", "dflash")
ASYNC_DEFECT_THROUGH = (0, 34)


def step_tokens(concurrency: int, k: int | None) -> int:
    """Tokens one decode step verifies at full load: concurrency x (K + 1)."""
    return concurrency * ((k or 0) + 1)


def _loads(summary: Summary, arm: str) -> list[tuple[str, int]]:
    """Where the arm ran at a known number in flight, by name: its closed-loop cells and its ramp's
    closed-loop stages (a ramp holds the concurrency a fixed window could not: h200_tp8's 64)."""
    cells = [
        (f"{c.workload} @{c.concurrency}", c.concurrency)
        for c in summary.cells_of(arm)
        if c.request_rate is None
    ]
    stages = [
        (f"{r.workload} ramp {r.label}", r.concurrency)
        for r in summary.ramp
        if r.arm == arm and r.stage is not None and r.concurrency is not None
    ]
    return cells + stages


def runtime_caveats(summary: Summary) -> list[Caveat]:
    found: list[Caveat] = []
    for arm in summary.arms:
        runtime = arm.runtime
        if runtime is None:
            continue
        loads, k = _loads(summary, arm.name), arm.num_speculative_tokens
        ceiling = runtime.capture_ceiling
        above = [(name, n) for name, n in loads if ceiling is not None and step_tokens(n, k) > ceiling]
        if above:
            found.append(
                caveat(
                    "uncaptured",
                    arm.name,
                    cells=", ".join(f"{name} ({step_tokens(n, k)} tokens)" for name, n in above),
                    ceiling=ceiling,
                    needed=max(step_tokens(n, k) for _, n in above),
                )
            )
        queued = sorted({n for _, n in loads if runtime.running_cap is not None and n > runtime.running_cap})
        if queued:
            found.append(
                caveat(
                    "running_cap",
                    arm.name,
                    levels=", ".join(f"@{n}" for n in queued),
                    cap=runtime.running_cap,
                    source=runtime.running_cap_source or "the engine",
                )
            )
        release = tuple(int(p) for p in re.findall(r"\d+", runtime.release or "")[:2])
        levels = sorted({n for _, n in loads if n > 1})
        if (
            runtime.async_scheduling
            and arm.method in ASYNC_DEFECT_METHODS
            and release
            and release <= ASYNC_DEFECT_THROUGH
            and levels
        ):
            found.append(
                caveat(
                    "async_speculation",
                    arm.name,
                    levels=", ".join(f"@{n}" for n in levels),
                    release=runtime.release,
                )
            )
    return found
