"""The two-run comparison's verdict per cell (``bench report A B``): for each cell both runs measured
and each headline metric (and every metric a relative gate rule of the regime names), the change
B / A - 1 with the interval ``bench gate B --baseline A`` computes (``relative._relative``: start-up
samples, each run's night term where one is known, a calibration's spread for one start-up), and
whether that interval excludes no change. Nothing here is recomputed: the gate's own check is run
with A as the baseline, and its interval read back in the metric's direction."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from harness.config.level import LoadLevel
from harness.core.metrics import METRICS
from harness.derive.gates.relative import _relative
from harness.derive.samples import RunView
from harness.results.gate import Check

# what a reviewer asks of two runs first: throughput, the per-token and first-token latency, tau
VERDICT_METRICS = ("output_tok_s", "tpot_ms_p50", "ttft_ms_p50", "tau")

Changed = Literal["changed", "not changed", "no interval", "not measured"]


@dataclass(frozen=True)
class MetricChange:
    """One metric of one cell: B / A - 1 and the two-run gate's 95% interval of it (None where the
    gate has none: ``message`` says why), and the verdict the interval gives."""

    metric: str
    verdict: Changed
    change: float | None
    low: float | None
    high: float | None
    night_known: bool  # False: the interval holds the start-ups' spread within each run only
    message: str  # the gate's words ("" where neither run measured it)


@dataclass(frozen=True)
class CellChange:
    arm: str
    workload: str
    level: LoadLevel
    changes: tuple[MetricChange, ...]


@dataclass(frozen=True)
class RunComparison:
    """Every cell of run A that run B measured too, each with its changes in ``metrics``' order."""

    metrics: tuple[str, ...]
    cells: tuple[CellChange, ...]
    confidence: float


def _metrics(view: RunView) -> tuple[str, ...]:
    """The headline metrics, then any other metric a relative gate rule of the regime names."""
    ruled = [r.metric for r in view.regime.gates.rules if r.max_regression_pct is not None]
    return tuple(dict.fromkeys([*VERDICT_METRICS, *ruled]))


def metric_change(
    view: RunView, baseline: RunView, arm: str, cell: tuple[str, LoadLevel], metric: str
) -> MetricChange:
    """One cell's change in ``metric`` of ``view`` (B) against ``baseline`` (A), as the two-run gate
    computes it (``relative._relative``; its verdict's tolerance plays no part in the interval)."""
    workload, level = cell
    values = view.startup_samples(arm, workload, level, metric)
    reference = baseline.startup_samples(arm, workload, level, metric)
    if not values and not reference:
        return MetricChange(metric, "not measured", None, None, None, True, "")
    check = Check(metric, "comparison", arm, metric, workload, level.concurrency, "pass", "",
                  request_rate=level.request_rate)  # fmt: skip
    check = _relative(check, values, reference, view.regime.gates, 0.0, view.raw.calibration)
    night_known = "night term unknown" not in check.message
    if check.low is None or check.high is None or not check.baseline_value or check.value is None:
        return MetricChange(metric, "no interval", None, None, None, night_known, check.message)
    # the gate keeps the interval in the "worse" direction (positive = worse): back to B / A - 1
    low, high = (-check.high, -check.low) if METRICS[metric].higher_is_better else (check.low, check.high)
    if min(values + reference) > 0:
        change = check.value / check.baseline_value - 1
    else:
        change = (check.value - check.baseline_value) / abs(check.baseline_value)
    verdict: Changed = "changed" if low > 0 or high < 0 else "not changed"
    return MetricChange(metric, verdict, change, low, high, night_known, check.message)


def compare_runs(first: Path, second: Path) -> RunComparison:
    """Run B (``second``) against run A (``first``) as ``bench gate B --baseline A`` would: every
    cell of A that B measured, each metric's change with the gate's interval."""
    reference, view = RunView(first), RunView(second)
    metrics = _metrics(reference)
    cells = []
    for cell in reference.summary.cells:
        if view.summary.cell(cell.arm, cell.workload, cell.level) is None:
            continue
        changes = tuple(
            metric_change(view, reference, cell.arm, (cell.workload, cell.level), m) for m in metrics
        )
        cells.append(CellChange(cell.arm, cell.workload, cell.level, changes))
    return RunComparison(metrics, tuple(cells), view.regime.gates.confidence)
