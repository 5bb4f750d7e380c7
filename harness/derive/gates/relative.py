"""The gates between two runs: a rule's ``max_regression_pct`` against a baseline run (``--baseline``),
and the opening of both runs, refused where their conditions or machines differ (``open_views``).

A relative gate compares START-UP-level samples: one value per server start-up of the cell (a window
metric's mean over that start-up's repeats, a request or chunk metric's statistic over that
start-up's samples); prompt-level metrics stay one value per prompt. Two runs are two nights, and a
night's shared effect (the machine's hour, its image) is in every start-up of it: the change between
the runs' means of their start-ups (log scale) gets a t interval whose variance holds each run's
night term (from the history's earlier nights, or a calibration; 0 for an engine count) beside the
start-ups' spread within a run, Welch-Satterthwaite degrees of freedom (``relative_check``); without
a night term a change the start-ups alone would fail is "inconclusive" (pooling start-ups as
independent false-alarmed 12.0% at 2 start-ups and 27.2% at 4 in this project's replay). A
Mann-Whitney p-value is shown beside it. It fails when the change is worse than the tolerance AND
its interval excludes no change; it passes when the interval rules out a regression beyond the
tolerance, or is within it around a point within it; an interval wider than the limit that does
neither could not have seen a regression of that size: "inconclusive", never "pass"; one start-up
on a side is "inconclusive" too, unless the run has a machine calibration and the metric is
output_tok_s.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

from harness.config.checks import Gate, Gates
from harness.config.level import LoadLevel
from harness.core import stats
from harness.core.errors import UserError
from harness.core.formats import change_text
from harness.core.machine import machine_differences
from harness.core.metrics import METRICS
from harness.derive.gates.detectable import check_text, two_run_parts
from harness.derive.gates.limits import calibrated_spread
from harness.derive.samples import RunView
from harness.results.calibration import Calibration
from harness.results.gate import Check, Verdict

ONE_STARTUP = "one start-up per side cannot see the start-up spread (set load.server_starts >= 2)"
NIGHT_UNKNOWN = (
    "the night term is unknown (no earlier nights of this regime and machine in a --history, no "
    "machine calibration): the start-ups of one run share its night, so their spread alone cannot "
    "tell a regression from the night"
)


class RelativeResult(NamedTuple):
    """What ``relative_check`` decides: the verdict, the 95% (``confidence``) interval and point of
    the relative change current / reference - 1 (None where there is none), and why, in words."""

    verdict: Verdict  # "pass" | "fail" | "inconclusive"
    low: float | None
    high: float | None
    change: float | None
    reason: str  # "" for a pass or a regression; the inconclusive's cause otherwise


def _between_runs(
    values: list[float],
    reference: list[float],
    confidence: float,
    positive: bool,
    spread: tuple[float, int] | None,
    night: tuple[float, float] | None,
) -> stats.Interval | None:
    """The change between two runs' means of their start-ups (on the logs where positive), with a
    t interval whose variance holds each run's night: per run night_sd^2 + s_w^2 / n, s_w the
    start-ups' spread within a run (pooled over both, or ``spread`` where a side has one start-up),
    Welch-Satterthwaite's degrees of freedom. None: no within-run spread to use."""
    found = two_run_parts(values, reference, positive, spread, night)
    if found is None:
        return None
    sides, parts = found
    variance = sum(v for v, _ in parts)
    if not positive and stats.mean(sides[0]) == 0:
        raise ValueError("the baseline's mean is 0: no relative change")
    centre = stats.mean(sides[1]) - stats.mean(sides[0])
    half = stats.t_quantile(1 - (1 - confidence) / 2, stats.satterthwaite_df(parts)) * math.sqrt(variance)
    if positive:
        return stats.Interval(math.exp(centre) - 1, math.exp(centre - half) - 1, math.exp(centre + half) - 1)
    scale = abs(stats.mean(sides[0]))
    return stats.Interval(centre / scale, (centre - half) / scale, (centre + half) / scale)


def relative_check(
    values: list[float],
    reference: list[float],
    tolerance_pct: float,
    higher_is_better: bool,
    confidence: float = 0.95,
    *,
    spread: tuple[float, int] | None = None,
    night: tuple[float, float] | None = None,
    unit: str = "start-up",
) -> RelativeResult:
    """A maximum-regression gate on plain samples (one value per ``unit``: a server start-up, or a
    prompt): the relative change of ``values`` against ``reference`` with a t interval on the log
    ratio (on the difference where a value is not positive). Fails when the change is worse than
    ``tolerance_pct`` and the interval excludes no change; passes when the interval rules out a
    regression beyond the tolerance, or its half-width is within the tolerance and the point is too;
    otherwise inconclusive: the interval's half-width exceeds the tolerance (it could not have seen
    a regression of that size), or the point is beyond the tolerance but the interval reaches no
    change.

    Start-ups: two runs are two nights, and the start-ups of one share its night's effect (the
    machine's hour, its image, its neighbours), which no count of start-ups averages away: pooling
    them as independent found 12.0% false alarms at 2 start-ups a run and 27.2% at 4 in this
    project's replay (more start-ups, more false alarms: pseudo-replication). So the unit is the
    run: its mean of start-ups, with the variance night_sd^2 + s_w^2 / n per run (``_between_runs``).
    ``night``: the sd of a run's shared effect on that scale and its df (from the history's nights or
    a machine calibration); None: unknown, and a change that would fail on the within-run spread
    alone is "inconclusive" (``NIGHT_UNKNOWN``), never a failure. With one value on a side the
    within-run spread is ``spread``'s (a calibration's), else inconclusive. Prompts (greedy
    exactness) are their own unit: a pooled two-sample t over them."""
    if not values or not reference:
        return RelativeResult("inconclusive", None, None, None, "no measurement on a side")
    positive = min([*values, *reference]) > 0
    startups = unit == "start-up"
    known = spread if positive else None
    if min(len(values), len(reference)) < 2 and (known is None or not startups):
        why = ONE_STARTUP if startups else f"one {unit} on a side gives no noise estimate"
        return RelativeResult("inconclusive", None, None, None, why)
    try:
        if startups:
            interval = _between_runs(values, reference, confidence, positive, known, night)
            assert interval is not None  # a side of one value has ``known`` here
        elif positive:
            interval = stats.log_ratio_interval(reference, values, confidence)
        else:
            interval = stats.difference_interval(reference, values, confidence)
    except ValueError as exc:  # a baseline of 0: no relative change to speak of
        return RelativeResult("inconclusive", None, None, None, str(exc))
    found = _decide(interval, tolerance_pct, higher_is_better)
    if found.verdict == "fail" and startups and night is None:
        return found._replace(verdict="inconclusive", reason=NIGHT_UNKNOWN)
    return found


def _decide(interval: stats.Interval, tolerance_pct: float, higher_is_better: bool) -> RelativeResult:
    """A relative change's verdict from its interval (``relative_check``)."""
    sign = -1.0 if higher_is_better else 1.0  # worse = positive
    worse = sign * interval.point
    worse_low, worse_high = sorted((sign * interval.low, sign * interval.high))
    tolerance = tolerance_pct / 100
    found = (interval.low, interval.high, interval.point)
    if worse > tolerance and worse_low > 0:
        return RelativeResult("fail", *found, "")
    if worse_high <= tolerance:  # the interval rules out a regression beyond the limit, however wide
        return RelativeResult("pass", *found, "")
    if (worse_high - worse_low) / 2 > tolerance:
        limit = (
            f"the change's interval {100 * interval.low:+.1f}..{100 * interval.high:+.1f}%, half-width "
            f"{100 * (worse_high - worse_low) / 2:.1f}% > limit {tolerance_pct:g}%"
        )
        return RelativeResult("inconclusive", *found, f"cannot detect a regression of this size ({limit})")
    if worse > tolerance:
        return RelativeResult("inconclusive", *found, "within noise")
    return RelativeResult("pass", *found, "")


UNTIMED_NIGHT_DF = 1e6  # a night term known to be 0 (its degrees of freedom: as good as exact)


def _night_term(
    metric: str, positive: bool, nights: Sequence[Sequence[float]], calibration: Calibration | None
) -> tuple[tuple[float, float] | None, str]:
    """The sd of a run's night effect (on the gate's scale) with its df, and where it came from:
    the earlier nights of this regime and machine in the history (the one-way random-effects
    variance of their start-up samples: ``stats.between_variance``), else a version-2 machine
    calibration for tok/s (its one-arm spread across rounds, drift included, less its residual
    spread: what a round's shared effect adds), else 0 for a metric that is not timed (an engine
    count: the registry's ``timed``, the same reason a busy neighbour does not make its change
    inconclusive); (None, "") where none of these holds."""
    to = math.log if positive else (lambda v: v)
    usable = [list(n) for n in nights if n and (not positive or min(n) > 0)]
    found = stats.between_variance([[to(v) for v in n] for n in usable])
    if found is not None:
        variance, df = found
        return (math.sqrt(variance), df), (
            f"night term from {len(usable)} earlier nights in the history (sd {_pct(variance, positive)})"
        )
    spread = calibrated_spread(calibration, metric)
    if spread is not None and positive and calibration is not None:
        variance = max(0.0, spread[0] ** 2 - calibration.sd**2)
        return (math.sqrt(variance), spread[1]), (
            f"night term from {calibration.label()} (sd {_pct(variance, positive)})"
        )
    if not METRICS[metric].timed:  # an engine's count: the machine's night does not move it (registry)
        return (
            0.0,
            UNTIMED_NIGHT_DF,
        ), "no night term: an engine count, which the machine's night does not move"
    return None, ""


def _pct(variance: float, positive: bool) -> str:
    return f"{100 * math.sqrt(variance):.1f}%" if positive else f"{math.sqrt(variance):.3g}"


def _relative(
    check: Check,
    values: list[float],
    reference: list[float],
    gates: Gates,
    tolerance_pct: float,
    calibration: Calibration | None = None,
    nights: Sequence[Sequence[float]] = (),
) -> Check:
    """A maximum regression against the baseline run on start-up-level samples (``relative_check``),
    with each run's night effect in the variance (``_night_term``: from ``nights``, the history's
    earlier nights, or the calibration)."""
    check.n, check.n_baseline = len(values), len(reference)
    metric = METRICS[check.metric]
    if not values:
        check.verdict, check.message = "fail", "no measurement for this cell"
        return check
    if not reference:
        check.verdict, check.message = "skipped", "the baseline run has no measurement for this cell"
        return check
    unit = "prompt" if metric.samples == "prompt" else "start-up"
    positive = min([*values, *reference]) > 0
    one_startup = unit == "start-up" and min(len(values), len(reference)) < 2
    # one start-up on a side: a calibration's residual spread of log tok/s on this machine stands in
    # for the start-up spread it cannot show (its night term is added apart, below)
    spread = (
        (calibration.sd, calibration.df)
        if one_startup and calibration is not None and calibrated_spread(calibration, metric.name)
        else None
    )
    night, night_said = (
        _night_term(metric.name, positive, nights, calibration) if unit == "start-up" else (None, "")
    )
    result = relative_check(
        values, reference, tolerance_pct, metric.higher_is_better, gates.confidence,
        spread=spread, night=night, unit=unit,
    )  # fmt: skip
    centre = _geometric_mean if positive else stats.mean  # the ratio of these is the change shown
    check.value, check.baseline_value = centre(values), centre(reference)
    first, second = (reference, values) if metric.higher_is_better else (values, reference)
    check.p_value = stats.mann_whitney_greater(first, second)[1]
    counts = f"n={len(values)}/{len(reference)} {unit}s"
    if result.change is None:
        check.verdict = "inconclusive"
        check.message = f"{result.reason}: {check.value:.4g} vs {check.baseline_value:.4g} ({counts})"
        return check
    sign = -1.0 if metric.higher_is_better else 1.0
    check.low, check.high = sorted((sign * result.low, sign * result.high))  # type: ignore[operator]
    source = f"; spread from {calibration.label()}" if spread is not None and calibration else ""
    if unit == "start-up":
        source += f"; {night_said}" if night is not None else "; night term unknown: within-run spread only"
        source += "; " + check_text(
            values, reference, tolerance_pct, metric.higher_is_better, gates.confidence, spread, night
        )  # the smallest regression it fails with 80% (issue 78, item 2)
    change = change_text(result.change, metric.higher_is_better)
    described = (
        f"{check.value:.4g} vs {check.baseline_value:.4g}: {change} "
        f"(interval {100 * result.low:+.1f}..{100 * result.high:+.1f}%, Mann-Whitney p={check.p_value:.3g}, "
        f"{counts}; limit {tolerance_pct:g}%{source})"
    )
    check.verdict = result.verdict
    prefix = {"fail": "regression: ", "pass": ""}.get(result.verdict, f"{result.reason}: ")
    check.message = prefix + described
    return check


def _geometric_mean(values: list[float]) -> float:
    return math.exp(stats.mean([math.log(v) for v in values]))


def against_baseline(
    view: RunView, baseline: RunView, arm: str, cell: tuple[str, LoadLevel], gate: Gate, check: Check,
    nights: Sequence[Sequence[float]],
) -> Check:  # fmt: skip
    """A rule's maximum regression against the baseline run on one cell (``_relative``), with each
    run's night term from ``nights`` (too few for the history gate still say how far a night moves)."""
    workload, level = cell
    values = view.startup_samples(arm, workload, level, gate.metric)
    reference = baseline.startup_samples(arm, workload, level, gate.metric)
    tolerance = gate.max_regression_pct or 0.0
    check = _relative(check, values, reference, view.regime.gates, tolerance, view.raw.calibration, nights)
    reason = _not_the_engines_alone(view, baseline, arm, workload, level)
    # a timed metric's change may be the neighbour's (or a lagging client's), not the engine's;
    # tau and token comparisons are the engine's own counts whoever else ran
    if check.verdict == "fail" and reason and METRICS[gate.metric].timed:
        check.verdict, check.message = "inconclusive", f"{reason}: {check.message}"
    return check


def _not_the_engines_alone(
    view: RunView, baseline: RunView, arm: str, workload: str, level: LoadLevel
) -> str | None:
    """Why a cell's timed numbers may not be the engine's alone, in either run: a busy neighbour, or
    a client that fell behind its arrival schedule."""
    runs = (("this run", view), ("the baseline run", baseline))
    cells = [(name, v.summary.cell(arm, workload, level)) for name, v in runs]
    noisy = [name for name, cell in cells if cell and cell.noisy_neighbour]
    behind = [name for name, cell in cells if cell and cell.behind_schedule]
    if noisy:
        return f"measured beside a busy neighbour in {' and '.join(noisy)}"
    if behind:
        return f"the client fell behind its arrival schedule in {' and '.join(behind)}"
    return None


def open_views(run_dir: Any, baseline_dir: Any | None, force: bool = False) -> tuple[RunView, RunView | None]:
    """Both runs, refusing a comparison of runs made under different conditions, or on different
    machines unless forced (then the differences are kept for the banner)."""
    view = RunView(run_dir)
    if baseline_dir is None:
        return view, None
    baseline = RunView(baseline_dir)
    if _same_run(view, baseline):
        raise UserError(
            f"{baseline_dir}: the baseline is the run itself ({run_dir}, run id {run_identity(view)}); a run "
            "gated against itself passes whatever it measured. Give an earlier run as --baseline"
        )
    mine = view.regime.conditions_fingerprint(view.record.prompts())
    theirs = baseline.regime.conditions_fingerprint(baseline.record.prompts())
    if mine != theirs:
        raise UserError(
            f"{run_dir} and {baseline_dir} were measured under different conditions (regime fingerprints "
            f"without the arms: {mine} vs {theirs}: hardware, engine, target, load, sampling or prompts "
            "differ); gating one against the other would compare different regimes"
        )
    differences = machine_differences(view.raw.environment, baseline.raw.environment)
    if differences and not force:
        raise UserError(
            f"{run_dir} and {baseline_dir} were measured on different machines (this run vs the baseline: "
            f"{'; '.join(differences)}); "
            "the machine alone moves the numbers. Pass --force to gate across machines anyway (the "
            "result says so)"
        )
    view.machine_differences = differences
    view.changed_arms = [
        a.name
        for a in view.regime.arms
        for b in baseline.regime.arms
        if a.name == b.name and a.model_dump() != b.model_dump()
    ]
    return view, baseline


def run_identity(view: RunView) -> str:
    """A run's id: its directory's name (a study's point: the study's and the point's)."""
    root = view.raw.run.root
    return f"{root.parent.parent.name}/{root.name}" if root.parent.name == "points" else root.name


def _same_run(view: RunView, other: RunView) -> bool:
    """The same directory, or a copy of it (the same run id elsewhere)."""
    return view.raw.run.root.resolve() == other.raw.run.root.resolve() or run_identity(view) == run_identity(
        other
    )
