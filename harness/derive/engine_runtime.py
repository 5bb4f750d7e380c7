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
from harness.results.model import CellMetrics, Summary

# vLLM #46669 (open as of 0.34.0, 2026-12-07): MTP and DFlash outputs go wrong with async scheduling
# above concurrency 1; releases after the newest one read are not judged
ASYNC_DEFECT_METHODS = ("mtp", "dflash")
ASYNC_DEFECT_THROUGH = (0, 34)


def step_tokens(cell: CellMetrics) -> int:
    """Tokens one decode step of the cell verifies at full load: concurrency x (K + 1)."""
    return cell.concurrency * ((cell.num_speculative_tokens or 0) + 1)


def runtime_caveats(summary: Summary) -> list[Caveat]:
    found: list[Caveat] = []
    for arm in summary.arms:
        runtime = arm.runtime
        if runtime is None:
            continue
        cells = [c for c in summary.cells_of(arm.name) if c.request_rate is None]  # closed loop: a known load
        ceiling = runtime.capture_ceiling
        if ceiling is not None:
            above = [c for c in cells if step_tokens(c) > ceiling]
            if above:
                needed = max(step_tokens(c) for c in above)
                found.append(
                    caveat(
                        "uncaptured",
                        arm.name,
                        cells=", ".join(
                            f"{c.workload} @{c.concurrency} ({step_tokens(c)} tokens)" for c in above
                        ),
                        ceiling=ceiling,
                        needed=needed,
                    )
                )
        if runtime.running_cap is not None:
            queued = [c for c in cells if c.concurrency > runtime.running_cap]
            if queued:
                found.append(
                    caveat(
                        "running_cap",
                        arm.name,
                        levels=", ".join(sorted({f"@{c.concurrency}" for c in queued})),
                        cap=runtime.running_cap,
                        source=runtime.running_cap_source or "the engine",
                    )
                )
        release = tuple(int(p) for p in re.findall(r"\d+", runtime.release or "")[:2])
        if (
            runtime.async_scheduling
            and arm.method in ASYNC_DEFECT_METHODS
            and release
            and release <= ASYNC_DEFECT_THROUGH
        ):
            levels = sorted({c.concurrency for c in cells if c.concurrency > 1})
            if levels:
                found.append(
                    caveat(
                        "async_speculation",
                        arm.name,
                        levels=", ".join(f"@{n}" for n in levels),
                        release=runtime.release,
                    )
                )
    return found
