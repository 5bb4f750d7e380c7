"""The nightly gate: a rule's ``max_regression_pct`` judged against the nights before the run in the
history (``bench gate --history``), not against one run: the night's summary of its start-up
samples, and the mean of the last 3 nights', against the prediction interval the good nights before
them give (``harness.derive.history.reference``), each check's confidence corrected for the night's
number of checks (``history_gate``), so a night with nothing changed fails at most
``NIGHT_FALSE_ALARM`` of the time. ``harness.derive.gates.evaluate`` asks it for each relative rule's
cells when there are enough nights (``HistoryGate.enough``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from harness.config.checks import Gate
from harness.config.level import LoadLevel
from harness.core.formats import change_text
from harness.core.metrics import METRICS
from harness.derive.history.reference import (
    DEFAULT_NIGHTS,
    MIN_NIGHTS,
    SAID_AUTOCORRELATION,
    WINDOWS,
    Nights,
    judge_series,
    night_summary,
)
from harness.derive.samples import RunView
from harness.results.gate import Check, Verdict

# A night with nothing changed fails a gate against the history at most this often (one-sided),
# whatever the number of its checks (Bonferroni over them): nightly CI runs every night, so the
# false alarms that matter are per night, not per cell
NIGHT_FALSE_ALARM = 0.01


@dataclass(frozen=True)
class HistoryGate:
    """The nights a run's relative gates compare with (``--history``), and the confidence of each
    check's two-sided prediction interval: a night as a whole fails on noise at most
    ``NIGHT_FALSE_ALARM`` of the time (one-sided, Bonferroni over the night's checks, each judged
    alone and as the mean of the last 3 nights: ``reference.WINDOWS``)."""

    nights: Nights
    confidence: float

    @property
    def enough(self) -> bool:
        return len(self.nights.run_ids) >= MIN_NIGHTS


class HistoryResult(NamedTuple):
    """What ``history_check`` decides: as the two-run gate's ``RelativeResult`` (the band and change
    of the window that failed, else of the night alone), with the reference it was judged against."""

    verdict: Verdict
    low: float | None
    high: float | None
    change: float | None
    reason: str
    centre: float | None = None  # the reference nights' centre, on the metric's own scale
    nights: int = 0  # reference nights
    window: int = 1  # nights in the judged mean
    autocorrelation: float = 0.0  # the reference nights' lag-1 autocorrelation the band allowed for
    effective: float = 0.0  # the independent nights the reference is worth at it


def history_check(
    values: list[float],
    nights: Sequence[Sequence[float]],
    tolerance_pct: float,
    higher_is_better: bool,
    confidence: float = 0.95,
    reference: int = DEFAULT_NIGHTS,
) -> HistoryResult:
    """A maximum-regression gate against the nights before (``harness.derive.history.reference``): the
    night's summary of its start-up samples, and the mean of the last 3 nights', against the
    prediction interval the good nights before them give (``low``/``high``: the night's band, as
    changes against their centre). Fails when a window lies beyond its band on the worse side AND
    its change is worse than ``tolerance_pct``; when every window's band is wider than the tolerance
    it could not see a regression of that size below its edge: "inconclusive" then, unless it
    fails; otherwise a pass."""
    positive = min([v for n in nights for v in n] or [0]) > 0
    if positive and values and min(values) <= 0:
        return HistoryResult("inconclusive", None, None, None, "a value of 0 where the nights had none")
    judged = judge_series(nights, values, tolerance_pct / 100, higher_is_better, confidence, reference)
    if judged is None or judged.tonight is None:
        return HistoryResult("inconclusive", None, None, None, "fewer than 2 earlier nights with this cell")
    shown = judged.failed or judged.tonight
    low, high = shown.prediction.bounds()
    found = shown.prediction
    centre = math.exp(found.centre) if found.positive else found.centre

    def result(verdict: Verdict, reason: str) -> HistoryResult:
        return HistoryResult(verdict, low, high, shown.change, reason, centre, found.nights, shown.window,
                             found.autocorrelation, found.effective)  # fmt: skip

    if judged.failed is not None:
        return result("fail", "")
    if min(c.edge for c in judged.checks) > tolerance_pct / 100:
        band = f"band {100 * low:+.1f}..{100 * high:+.1f}% from {found.nights} nights"
        band += f", limit {tolerance_pct:g}%"
        return result("inconclusive", f"the nights vary more than the limit ({band})")
    return result("pass", "")


def _back(result: HistoryResult, positive: bool) -> float:
    """The judged window's mean on the metric's scale, from the centre and the change."""
    assert result.centre is not None and result.change is not None
    return result.centre * (1 + result.change) if positive else result.centre + result.change


def _historic(
    check: Check,
    values: list[float],
    nights: list[list[float]],
    tolerance_pct: float,
    confidence: float,
    reference: int = DEFAULT_NIGHTS,
) -> Check:
    """A maximum regression against the nights before (``history_check``), as a check."""
    metric = METRICS[check.metric]
    check.n, check.n_baseline = len(values), len(nights)
    if not values:
        check.verdict, check.message = "fail", "no measurement for this cell"
        return check
    result = history_check(values, nights, tolerance_pct, metric.higher_is_better, confidence, reference)
    positive = min([*values, *(v for n in nights for v in n)] or [0]) > 0
    summary = night_summary(values, positive)  # the geometric mean's log where positive
    check.value = math.exp(summary) if positive else summary
    check.baseline_value = result.centre
    if result.change is None:
        check.verdict, check.message = "inconclusive", f"{result.reason} ({len(nights)} nights)"
        return check
    sign = -1.0 if metric.higher_is_better else 1.0
    check.low, check.high = sorted((sign * result.low, sign * result.high))  # type: ignore[operator]
    what = "tonight" if result.window == 1 else f"the last {result.window} nights' mean"
    described = (
        f"{what} {check.value if result.window == 1 else _back(result, positive):.4g} vs the good nights' "
        f"{check.baseline_value:.4g}: {change_text(result.change, metric.higher_is_better)} (with no change "
        f"it falls within {100 * result.low:+.1f}..{100 * result.high:+.1f}% at {100 * confidence:.2f}%, "
        "from the last "
        f"{result.nights} good nights of {len(nights)} of this fingerprint and machine; "
        f"limit {tolerance_pct:g}%)"
    )
    if result.autocorrelation >= SAID_AUTOCORRELATION:  # a slow drift: fewer nights' worth of evidence
        described += (
            f"; the nights drift together (lag-1 autocorrelation {result.autocorrelation:.2f}): the band "
            f"counts them as {result.effective:.1f} independent nights"
        )
    check.verdict = result.verdict
    check.message = {"fail": "regression: ", "pass": ""}.get(result.verdict, f"{result.reason}: ") + described
    return check


def against_nights(
    view: RunView, history: HistoryGate, arm: str, cell: tuple[str, LoadLevel], gate: Gate, check: Check
) -> Check:
    """A rule's maximum regression against the nights before on one cell (``_historic``)."""
    workload, level = cell
    values = view.startup_samples(arm, workload, level, gate.metric)
    nights = history.nights.values(arm, workload, level.concurrency, level.request_rate, gate.metric)
    check = _historic(
        check, values, nights, gate.max_regression_pct or 0.0, history.confidence, history.nights.reference
    )
    cpu = view.summary.cell(arm, workload, level)
    # a timed metric's change may be the neighbour's, not the engine's (as against a baseline run)
    if check.verdict == "fail" and cpu is not None and cpu.noisy_neighbour and METRICS[gate.metric].timed:
        check.verdict, check.message = "inconclusive", f"measured beside a busy neighbour: {check.message}"
    return check


def history_gate(view: RunView, nights: Nights) -> HistoryGate:
    """The nights, with each check's confidence corrected for the night's relative checks."""
    gates = (
        view.regime.gates
    )  # its confidence is the bootstrap's; a night's false alarms are NIGHT_FALSE_ALARM
    speculative = [a.name for a in view.regime.arms if a.method != "baseline"]
    count = sum(
        1
        for gate in gates.rules
        if gate.max_regression_pct is not None
        for arm in (speculative if gate.arm == "*" else [gate.arm])
        for _ in view.cells(arm, gate)
    )
    return HistoryGate(nights, 1 - 2 * NIGHT_FALSE_ALARM / max(1, count * len(WINDOWS)))
