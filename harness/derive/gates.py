"""Regression gates: check a run against its regime's floors, ceilings and golden tau, and
against a baseline run, without failing on noise.

Every gate is evaluated per (arm, workload, load level) cell on SAMPLES, never on one number;
which samples and which statistic is the metric registry's (``harness.core.metrics``).

The server start-up is the unit of evidence. A floor or ceiling fails when its interval lies
entirely beyond it (``_limit_interval``): a window metric's start-up means get a t interval on their
logs (n - 1 df: the percentile bootstrap it replaced false-failed 23.6% / 11.8% / 7.4% at 2 / 3 / 5
start-ups with the true mean on the floor, nominal 2.5%); a request metric (TTFT, TPOT, E2E
percentiles), and a chunk metric (ITL) alike, resamples whole start-ups, pooling their requests'
samples (``stats.cluster_bootstrap_interval``), never its requests across start-ups as if
independent; below 2 start-ups a point beyond is "inconclusive", unless a machine calibration
gives tok/s its one-start-up spread. Prompt metrics resample their prompts, and tau of one
start-up its repeats (an engine count). A speedup's floor or ceiling reads the cell's one estimate
instead (``harness.derive.intervals``: the arms x rounds model's point, and its t interval at the gate's
confidence), the number every view shows for the cell.

A relative gate (``max_regression_pct``, against a baseline run) compares START-UP-level samples:
one value per server start-up of the cell (a window metric's mean over that start-up's repeats, a
request or chunk metric's statistic over that start-up's samples); prompt-level metrics stay one
value per prompt. Two runs are two nights, and a night's shared effect (the machine's hour, its image) is in
every start-up of it: the change between the runs' means of their start-ups (log scale) gets a
t interval whose variance holds each run's night term (from the history's earlier nights, or a
calibration; 0 for an engine count) beside the start-ups' spread within a run, Welch-Satterthwaite
degrees of freedom (``relative_check``); without a night term a change the start-ups alone would
fail is "inconclusive" (pooling start-ups as independent false-alarmed 12.0% at 2 start-ups and
27.2% at 4 in this project's replay). A Mann-Whitney p-value is shown beside it. It fails when the
change is worse than the tolerance AND its interval excludes no change; it passes when the interval
rules out a regression beyond the tolerance, or is within it around a point within it; an interval
wider than the limit that does neither could not have seen a regression of that size:
"inconclusive", never "pass"; one start-up on a side is "inconclusive" too, unless the run has a
machine calibration and the metric is output_tok_s.
"Inconclusive" is shown, never failing. A failed or missing arm is a regression; an engine that
never started is an infrastructure error (exit 3), not a regression. ``--confirm`` re-runs the
failing arms on fresh start-ups: a check fails only if it fails in both runs (``confirm``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import ValidationError

from harness.config.checks import Gate, Gates
from harness.config.level import LoadLevel
from harness.config.regime import Regime
from harness.core import stats
from harness.core.errors import UserError
from harness.core.formats import inert, interval_text
from harness.core.machine import machine_differences
from harness.core.metrics import METRICS, PROMPT_STATUS, Metric
from harness.derive.history.reference import (
    DEFAULT_NIGHTS,
    MIN_NIGHTS,
    SAID_AUTOCORRELATION,
    WINDOWS,
    Nights,
    judge_series,
)
from harness.derive.intervals import Estimate, stored_estimate
from harness.derive.summary import summarize
from harness.results.calibration import Calibration
from harness.results.files import read_json
from harness.results.raw import read_raw
from harness.results.records import RequestRecord, ResultModel

Verdict = str  # "pass" | "fail" | "inconclusive" | "skipped" | "error"


@dataclass
class Check:
    """One gate on one cell: what a JUnit test case and a terminal row show."""

    name: str
    gate: str  # where it comes from: "rules[0]", "golden_tau[1]", "arm"
    arm: str
    metric: str
    workload: str | None
    concurrency: int | None
    verdict: Verdict
    message: str
    value: float | None = None
    baseline_value: float | None = None
    low: float | None = (
        None  # interval of the value (absolute gates) or of the relative change (regression gates)
    )
    high: float | None = None
    p_value: float | None = None
    n: int = 0
    n_baseline: int = 0
    request_rate: float | None = None  # open-loop cells: the window's rate (concurrency is its cap)


class StoredGate(ResultModel):
    """``RUN_DIR/gate/checks.json``: the last ``bench gate`` of a run (the report shows its checks)."""

    baseline_run: str | None
    exit_code: int
    checks: list[Check]
    # ``bench gate --confirm``: the run that re-measured the failing arms on fresh start-ups, and its
    # own checks against the same baseline (``checks`` then holds the combined verdicts)
    confirmation_run: str | None = None
    confirmation_checks: list[Check] = []


GATE_FILE = Path("gate") / "checks.json"


def read_gate(run_dir: Path) -> StoredGate | None:
    """The run's stored gate verdicts, or None when ``bench gate`` has not run on it."""
    path = run_dir / GATE_FILE
    if not path.is_file():
        return None
    try:
        return StoredGate.model_validate(read_json(path))
    except ValidationError as exc:
        first = exc.errors()[0]
        raise UserError(f"{path}: {'.'.join(map(str, first['loc']))}: {first['msg']}") from None


class RunView:
    """What the gates read from one run directory: its regime, summary cells, arm statuses, samples."""

    def __init__(self, run_dir: Any):
        self.raw = read_raw(run_dir)
        self.record = self.raw.record
        self.regime = self.raw.regime
        self.summary = summarize(self.raw)  # derived afresh from the raw files
        self.changed_arms: list[str] = []  # arms configured differently in the baseline run
        self.machine_differences: list[str] = []  # vs the baseline run's machine (gated with --force)

    def use_gates_from(self, other: Regime, source: str) -> None:
        """Apply another regime file's gates to this run; every arm they name must be in the run."""
        names = {arm.name for arm in self.regime.arms}
        for index, gate in enumerate(other.gates.rules):
            if gate.arm != "*" and gate.arm not in names:
                raise UserError(
                    f"{source}: gates.rules[{index}].arm: the run has no arm '{gate.arm}' (arms: "
                    f"{', '.join(sorted(names))})"
                )
        self.regime = self.regime.model_copy(update={"gates": other.gates})

    def cells(self, arm: str) -> list[tuple[str, LoadLevel]]:
        return [(c.workload, c.level) for c in self.summary.cells if c.arm == arm]

    def samples(self, arm: str, workload: str, level: LoadLevel, name: str) -> list[float]:
        """The gate samples of one metric in one cell, as the registry says where they come from."""
        cell = self.summary.cell(arm, workload, level)
        if cell is None:
            return []
        metric = METRICS[name]
        if metric.samples == "repeat":
            return cell.independent_samples(name)  # one per server start-up when there are several
        if metric.samples == "prompt":
            block = self.summary.exactness.block(arm, self.summary.baseline_arm)
            status = PROMPT_STATUS[name]
            return [
                100.0 if e.status == status else 0.0
                for e in (block.prompts if block else [])
                if (e.workload, e.level) == (workload, level)
            ]
        records = [
            r for r in self.raw.arms[arm].samples if r.ok and (r.workload, r.level) == (workload, level)
        ]
        return [v for r in records for v in _record_samples(metric, r)]

    def startup_samples(self, arm: str, workload: str, level: LoadLevel, name: str) -> list[float]:
        """A relative gate's samples: one value per server start-up of the cell (a window metric's
        mean over the start-up's repeats; a request or chunk metric's statistic over the start-up's
        samples), or one per prompt for a prompt-level metric."""
        cell = self.summary.cell(arm, workload, level)
        if cell is None:
            return []
        metric = METRICS[name]
        if metric.samples == "prompt":
            return self.samples(arm, workload, level, name)
        if metric.samples == "repeat":
            values = cell.independent_samples(name)  # one per start-up when there are several
            return values if cell.server_starts > 1 or not values else [stats.mean(values)]
        return [_statistic(name)(v) for v in self.startup_requests(arm, workload, level, name)]

    def startup_requests(self, arm: str, workload: str, level: LoadLevel, name: str) -> list[list[float]]:
        """A request or chunk metric's values per server start-up of the cell (oldest first): the
        clusters its gate resamples (requests of one start-up share what it gave)."""
        metric = METRICS[name]
        per_start: dict[int, list[float]] = {}
        repeats = self.regime.load.max_repeats()
        for r in self.raw.arms[arm].samples:
            if r.ok and (r.workload, r.level) == (workload, level) and (values := _record_samples(metric, r)):
                per_start.setdefault(r.repeat // repeats, []).extend(values)
        return [v for _, v in sorted(per_start.items())]

    def startups(self, arm: str, workload: str, level: LoadLevel) -> int:
        cell = self.summary.cell(arm, workload, level)
        return cell.server_starts if cell is not None else 0


def _statistic(name: str) -> stats.Statistic:
    return stats.STATISTICS[METRICS[name].statistic]


# sources whose samples a request record carries: one per request, or one per streamed chunk
PER_RECORD = ("request", "chunk")


def _record_samples(metric: Metric, record: RequestRecord) -> list[float]:
    """A request or chunk metric's samples in one record, in the metric's unit: the request's value
    (none where undefined), or one per streamed chunk after the first."""
    value = getattr(record, metric.sample_field)  # type: ignore[arg-type]
    values = value if metric.samples == "chunk" else [] if value is None else [value]
    return [v * metric.scale for v in values]


def _cell_name(workload: str, level: LoadLevel) -> str:
    load = level.concurrency if level.request_rate is None else f"{level.request_rate:g} req/s"
    return f"[{workload} @ {load}]"


def _check(name: str, where: str, arm: str, metric: str, workload: str, level: LoadLevel) -> Check:
    return Check(
        name, where, arm, metric, workload, level.concurrency, "pass", "", request_rate=level.request_rate
    )


def _covers(gate: Gate, workload: str, level: LoadLevel) -> bool:
    """A rule's narrowing: ``concurrency`` picks a closed-loop level, ``request_rate`` an open-loop one."""
    closed = level.request_rate is None
    return (
        gate.workload in (None, workload)
        and (gate.concurrency is None or (closed and level.concurrency == gate.concurrency))
        and (gate.request_rate is None or level.request_rate == gate.request_rate)
    )


def _arm_problem(view: RunView, arm: str) -> tuple[Verdict, str] | None:
    """A failed, interrupted or missing arm: a regression, except an engine that never started."""
    status = view.summary.arm(arm)
    if status is None:
        return "fail", f"arm {arm} is not in this run"
    if status.status == "ok":
        return None
    if status.status == "failed" and status.phase == "startup":
        return (
            "error",
            f"infrastructure: the engine for {arm} did not start: {inert((status.error or '')[:300])}",
        )
    return "fail", inert(f"arm {arm} is {status.status}: {status.error or 'no results'}"[:400])


ONE_STARTUP_LIMIT = "one start-up: no interval can see the start-up spread (set load.server_starts >= 2{})"


def _calibrated_spread(calibration: Calibration | None, metric: str) -> tuple[float, int] | None:
    """One start-up's spread of log tok/s across rounds, the round's drift included, from a
    version-2 machine calibration: what stands in for the start-up spread a run of one start-up
    cannot show (``intervals.arm_spread``). tok/s only: it is what a calibration measures."""
    if calibration is None or not calibration.arm_sd or not calibration.arm_df or metric != "output_tok_s":
        return None
    return calibration.arm_sd, calibration.arm_df


def _limit_interval(
    check: Check, values: list[float], gates: Gates, startups: int, clusters: list[list[float]] | None,
    spread: tuple[float, int] | None,
) -> tuple[stats.Interval | None, float, str]:  # fmt: skip
    """The interval an absolute gate judges (None: only a point), its point, and what it rests on.
    The server start-up is the unit: a window metric's start-up means get a t interval on their
    logs (n - 1 df), a request metric's start-ups are resampled whole (``stats.cluster_bootstrap_
    interval``); one start-up has none (unless a calibration gives tok/s its spread). A prompt
    metric's prompts, and an engine count (tau) of one start-up, keep the bootstrap over their values:
    greedy prompts are the unit, and a count of one server at least shows its repeats' noise."""
    metric = METRICS[check.metric]
    statistic = _statistic(check.metric)
    if metric.samples == "prompt" or (metric.samples == "repeat" and startups <= 1 and not metric.timed):
        found = stats.bootstrap_statistic(values, statistic, gates.bootstrap_resamples, gates.confidence)
        basis = f"interval {found.low:.4g}..{found.high:.4g}, n={len(values)}"
        if len(values) == 1:
            basis += "; n=1: a single measurement, no noise estimate (set load.repeats)"
        elif startups == 1:
            basis += (
                "; one start-up: the interval cannot see the start-up spread (set load.server_starts >= 2)"
            )
        return found, found.point, basis
    positive = min(values) > 0
    level = f"{100 * gates.confidence:g}% interval"
    if startups >= 2 and metric.samples in PER_RECORD and clusters and len(clusters) >= 2:
        found = stats.cluster_bootstrap_interval(
            clusters, statistic, gates.bootstrap_resamples, gates.confidence
        )
        return (
            found,
            found.point,
            f"{level} {found.low:.4g}..{found.high:.4g}, {len(clusters)} start-ups resampled",
        )
    if startups >= 2 and metric.samples == "repeat" and len(values) >= 2:
        found = stats.mean_interval(values, gates.confidence, log=positive)
        return (
            found,
            found.point,
            f"{level} {found.low:.4g}..{found.high:.4g}, t over {len(values)} start-ups",
        )
    point = statistic(values)
    if spread is not None and positive and metric.samples == "repeat":
        found = stats.mean_interval([point], gates.confidence, sd=spread[0], df=spread[1])
        return (
            found,
            point,
            f"{level} {found.low:.4g}..{found.high:.4g}, one start-up, spread from the calibration",
        )
    why = " or calibrate this machine" if metric.name == "output_tok_s" else ""
    if metric.samples in PER_RECORD:
        why += "; its requests share that server's start-up, so resampling them cannot"
    return None, point, ONE_STARTUP_LIMIT.format(why)


def _absolute(
    check: Check,
    values: list[float],
    gates: Gates,
    low_bound: float | None,
    high_bound: float | None,
    startups: int = 0,
    *,
    clusters: list[list[float]] | None = None,
    spread: tuple[float, int] | None = None,
) -> Check:
    """A floor and/or ceiling on one cell's statistic: failed only when its interval is beyond
    (``_limit_interval``); a point beyond with no interval, or an interval reaching the limit, is
    inconclusive. ``values``: a window metric's start-up means (its repeats with one start-up), a
    request metric's requests pooled (``clusters``: per start-up), a prompt metric's prompts;
    ``startups``: the cell's server start-ups; ``spread``: a calibration's (``_calibrated_spread``)."""
    check.n = len(values)
    if not values:
        check.verdict, check.message = "fail", "no measurement for this cell"
        return check
    interval, point, basis = _limit_interval(check, values, gates, startups, clusters, spread)
    check.value = point
    if interval is not None:
        check.low, check.high = interval.low, interval.high
    below = low_bound is not None and point < low_bound
    above = high_bound is not None and point > high_bound
    if not (below or above):
        check.message = f"{point:.4g} within limits"
        return check
    side = f"below {low_bound:g}" if below else f"above {high_bound:g}"
    if interval is None:
        check.verdict, check.message = "inconclusive", f"{point:.4g} is {side}, unverified: {basis}"
        return check
    clearly = (below and interval.high < low_bound) or (above and interval.low > high_bound)  # type: ignore[operator]
    if clearly:
        check.verdict, check.message = "fail", f"{point:.4g} is {side} ({basis})"
    else:
        check.verdict, check.message = (
            "inconclusive",
            f"{point:.4g} is {side} but not beyond the noise ({basis})",
        )
    return check


def _speedup_limit(
    check: Check,
    estimate: Estimate | None,
    confidence: float,
    low_bound: float | None,
    high_bound: float | None,
) -> Check:
    """A floor and/or ceiling on a cell's speedup, from its stored estimate: failed only when its
    interval at ``confidence`` lies beyond; without an interval (one start-up per arm and no
    calibration) a point beyond is inconclusive."""
    if estimate is None:
        check.verdict, check.message = "fail", "no speedup measured for this cell"
        return check
    check.n, check.value = estimate.rounds, estimate.point
    bounds = estimate.bounds(confidence) if estimate.low is not None else None
    if bounds is not None:
        check.low, check.high = bounds
    below = low_bound is not None and estimate.point < low_bound
    above = high_bound is not None and estimate.point > high_bound
    if not (below or above):
        check.message = f"{estimate.point:.4g} within limits"
        return check
    side = f"below {low_bound:g}" if below else f"above {high_bound:g}"
    if bounds is None:
        check.verdict = "inconclusive"
        check.message = f"{estimate.point:.4g} is {side}, unverified (set load.server_starts >= 2)"
        return check
    low, high = bounds
    clearly = (below and high < low_bound) or (above and low > high_bound)  # type: ignore[operator]
    spread = f"{100 * confidence:g}% interval {interval_text(low, high)}, {estimate.rounds} rounds"
    check.verdict = "fail" if clearly else "inconclusive"
    check.message = (
        f"{estimate.point:.4g} is {side}" + ("" if clearly else " but not beyond the noise") + f" ({spread})"
    )
    return check


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
    to = math.log if positive else (lambda v: v)
    sides = [[to(v) for v in reference], [to(v) for v in values]]
    counts = [len(side) for side in sides]
    if min(counts) >= 2:
        df_w = sum(n - 1 for n in counts)
        within = sum(sum((v - stats.mean(side)) ** 2 for v in side) for side in sides) / df_w
    elif spread is not None:
        within, df_w = spread[0] ** 2, spread[1]
    else:
        return None
    parts = [(within * (1 / counts[0] + 1 / counts[1]), float(df_w))]
    if night is not None:
        parts.append((2 * night[0] ** 2, float(night[1])))
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
        limit = f"interval {100 * worse_low:+.1f}..{100 * worse_high:+.1f}% worse, limit {tolerance_pct:g}%"
        return RelativeResult("inconclusive", *found, f"cannot detect a regression of this size ({limit})")
    if worse > tolerance:
        return RelativeResult("inconclusive", *found, "within noise")
    return RelativeResult("pass", *found, "")


class HistoryResult(NamedTuple):
    """What ``history_check`` decides: as ``RelativeResult`` (the band and change of the window that
    failed, else of the night alone), with the reference it was judged against."""

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
    check.value = (_geometric_mean if positive else stats.mean)(values)
    check.baseline_value = result.centre
    if result.change is None:
        check.verdict, check.message = "inconclusive", f"{result.reason} ({len(nights)} nights)"
        return check
    sign = -1.0 if metric.higher_is_better else 1.0
    check.low, check.high = sorted((sign * result.low, sign * result.high))  # type: ignore[operator]
    what = "tonight" if result.window == 1 else f"the last {result.window} nights' mean"
    described = (
        f"{what} {check.value if result.window == 1 else _back(result, positive):.4g} vs the good nights' "
        f"{check.baseline_value:.4g}: {100 * sign * result.change:+.1f}% worse (with no change it falls "
        f"within {100 * check.low:+.1f}..{100 * check.high:+.1f}% at {100 * confidence:.2f}%, from the last "
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
    spread = _calibrated_spread(calibration, metric)
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
        if one_startup and calibration is not None and _calibrated_spread(calibration, metric.name)
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
    worse = sign * result.change
    check.low, check.high = sorted((sign * result.low, sign * result.high))  # type: ignore[operator]
    source = f"; spread from {calibration.label()}" if spread is not None and calibration else ""
    if unit == "start-up":
        source += f"; {night_said}" if night is not None else "; night term unknown: within-run spread only"
    described = (
        f"{check.value:.4g} vs {check.baseline_value:.4g}: {100 * worse:+.1f}% worse (interval "
        f"{100 * check.low:+.1f}..{100 * check.high:+.1f}%, Mann-Whitney p={check.p_value:.3g}, "
        f"{counts}; limit {tolerance_pct:g}%{source})"
    )
    check.verdict = result.verdict
    prefix = {"fail": "regression: ", "pass": ""}.get(result.verdict, f"{result.reason}: ")
    check.message = prefix + described
    return check


def _geometric_mean(values: list[float]) -> float:
    return math.exp(stats.mean([math.log(v) for v in values]))


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


def _relative_history(
    view: RunView, history: HistoryGate, arm: str, cell: tuple[str, LoadLevel], gate: Gate, check: Check
) -> Check:
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


def _rule_checks(
    view: RunView, baseline: RunView | None, index: int, arm: str, history: HistoryGate | None = None
) -> list[Check]:
    """One rule of ``gates.rules`` on one arm's cells."""
    gates = view.regime.gates
    gate, where = gates.rules[index], f"rules[{index}]"
    cells = [(w, level) for (w, level) in view.cells(arm) if _covers(gate, w, level)]
    if not cells:
        return [
            Check(
                f"{arm} {gate.metric} {where}",
                where,
                arm,
                gate.metric,
                gate.workload,
                gate.concurrency,
                "fail",
                "no measurement for the gate's workload/load level",
            )
        ]
    checks = []
    if gate.max_regression_pct is not None:
        kind = f"regression <= {gate.max_regression_pct:g}%"
    else:
        kind = f">= {gate.min:g}" if gate.min is not None else f"<= {gate.max:g}"
    for workload, level in cells:
        values = view.samples(arm, workload, level, gate.metric)
        name = f"{arm} {gate.metric} {kind} {_cell_name(workload, level)}"
        check = _check(name, where, arm, gate.metric, workload, level)
        if gate.max_regression_pct is None and gate.metric == "speedup":
            found = view.summary.cell(arm, workload, level)
            estimate = stored_estimate(found, rounds=found.server_starts) if found is not None else None
            checks.append(_speedup_limit(check, estimate, gates.confidence, gate.min, gate.max))
        elif gate.max_regression_pct is None:
            checks.append(
                _limit_check(view, arm, (workload, level), gate.metric, check, (gate.min, gate.max))
            )
        elif history is not None and history.enough:
            checks.append(_relative_history(view, history, arm, (workload, level), gate, check))
        elif baseline is None:
            why = "no --baseline run given" + (
                f" and {len(history.nights.run_ids)} comparable nights in the history (under {MIN_NIGHTS})"
                if history is not None
                else ""
            )
            check.verdict, check.message, check.n = "skipped", f"relative gate: {why}", len(values)
            checks.append(check)
        else:
            values = view.startup_samples(arm, workload, level, gate.metric)
            reference = baseline.startup_samples(arm, workload, level, gate.metric)
            # too few nights for the history gate still say how far a night moves
            nights = (
                history.nights.values(arm, workload, level.concurrency, level.request_rate, gate.metric)
                if history is not None
                else []
            )
            check = _relative(
                check, values, reference, gates, gate.max_regression_pct, view.raw.calibration, nights
            )
            reason = _not_the_engines_alone(view, baseline, arm, workload, level)
            # a timed metric's change may be the neighbour's (or a lagging client's), not the engine's;
            # tau and token comparisons are the engine's own counts whoever else ran
            if check.verdict == "fail" and reason and METRICS[gate.metric].timed:
                check.verdict, check.message = "inconclusive", f"{reason}: {check.message}"
            checks.append(check)
    return checks


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


def _limit_check(
    view: RunView, arm: str, cell: tuple[str, LoadLevel], metric: str, check: Check,
    bounds: tuple[float | None, float | None],
) -> Check:  # fmt: skip
    """A floor and/or ceiling (``_absolute``) on the samples its metric is judged on: a window
    metric's start-up means (its repeats with one start-up), a request or chunk metric's samples
    with their start-ups, a prompt metric's prompts."""
    workload, level = cell
    startups = view.startups(arm, workload, level)
    kind = METRICS[metric].samples
    if kind == "repeat" and startups >= 2:
        values = view.startup_samples(arm, workload, level, metric)
    else:
        values = view.samples(arm, workload, level, metric)
    clusters = view.startup_requests(arm, workload, level, metric) if kind in PER_RECORD else None
    spread = _calibrated_spread(view.raw.calibration, metric)
    return _absolute(check, values, view.regime.gates, *bounds, startups, clusters=clusters, spread=spread)


def _golden_checks(view: RunView, index: int, arm: str) -> list[Check]:
    """One ``gates.golden_tau`` entry on one arm's cells of its workload."""
    gates = view.regime.gates
    golden, where = gates.golden_tau[index], f"golden_tau[{index}]"
    counted = view.summary.arm(arm)
    counting = counted.draft_counting.semantics if counted and counted.draft_counting else None
    if golden.draft_counting is not None and counting != golden.draft_counting:
        message = (
            f"the golden tau was counted as {golden.draft_counting}; {arm}'s engine counted drafts as "
            f"{counting or 'not recorded'}: not comparable (probes.acceptance.DRAFT_COUNTING)"
        )
        return [Check(f"{arm} tau (golden, {golden.workload})", where, arm, "tau", golden.workload, None,
                      "inconclusive", message)]  # fmt: skip
    checks = []
    for workload, level in view.cells(arm):
        if workload != golden.workload:
            continue
        name = f"{arm} tau = {golden.tau:g} +- {golden.tolerance:g} (golden) {_cell_name(workload, level)}"
        check = _check(name, where, arm, "tau", workload, level)
        bounds = golden.tau - golden.tolerance, golden.tau + golden.tolerance
        checks.append(_limit_check(view, arm, (workload, level), "tau", check, bounds))
    return checks


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
        for workload, level in view.cells(arm)
        if _covers(gate, workload, level)
    )
    return HistoryGate(nights, 1 - 2 * NIGHT_FALSE_ALARM / max(1, count * len(WINDOWS)))


def evaluate(
    view: RunView, baseline: RunView | None = None, history: HistoryGate | None = None
) -> list[Check]:
    """Every gate of the run's regime on every cell it covers; a broken arm is one check of its own.
    Relative gates compare with the history's nights when there are enough of them, else with
    ``baseline``."""
    regime, gates = view.regime, view.regime.gates
    speculative = [a.name for a in regime.arms if a.method != "baseline"]
    checks: list[Check] = []
    reported: set[str] = set()

    def arm_ok(arm: str, metric: str) -> bool:
        problem = _arm_problem(view, arm)
        if problem is None:
            return True
        if arm not in reported:  # one test case per broken arm, however many gates name it
            reported.add(arm)
            checks.append(Check(f"{arm} ran", "arm", arm, metric, None, None, *problem))
        return False

    for index, gate in enumerate(gates.rules):
        for arm in speculative if gate.arm == "*" else [gate.arm]:
            if arm_ok(arm, gate.metric):
                checks += _rule_checks(view, baseline, index, arm, history)
    target = regime.target_reference()
    for index, golden in enumerate(gates.golden_tau):
        if golden.target != target:
            continue
        for arm in regime.arms:
            if (arm.method, arm.num_speculative_tokens) != (golden.method, golden.num_speculative_tokens):
                continue
            if arm_ok(arm.name, "tau"):
                checks += _golden_checks(view, index, arm.name)
    return checks


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
    mine = view.regime.conditions_fingerprint(view.record["workloads"])
    theirs = baseline.regime.conditions_fingerprint(baseline.record["workloads"])
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


def arms_to_confirm(checks: Sequence[Check], regime: Regime) -> list[str]:
    """The arms a confirmation run measures again, in the regime's order: the baseline arm (the
    speedup and exactness of the others are against it) and every arm with a failing check."""
    failing = {c.arm for c in checks if c.verdict == "fail"}
    baseline = regime.baseline_arm.name
    return [a.name for a in regime.arms if a.name == baseline or a.name in failing]


def confirmation_regime(regime: Regime, arms: Sequence[str]) -> Regime:
    """The run's regime restricted to ``arms``, with the gates that still name an arm of it: what
    ``bench gate --confirm`` runs on fresh start-ups (the conditions, hence the fingerprint the
    baseline is compared on, are unchanged)."""
    kept = set(arms)
    rules = [g for g in regime.gates.rules if g.arm == "*" or g.arm in kept]
    dumped = regime.model_dump(mode="json")
    dumped["arms"] = [a for a in dumped["arms"] if a["name"] in kept]
    dumped["gates"] = {**dumped["gates"], "rules": [g.model_dump(mode="json") for g in rules]}
    return Regime.model_validate(dumped)


def confirm(first: Sequence[Check], second: Sequence[Check], confirmation_run: str) -> list[Check]:
    """The verdicts after a confirmation run: a check fails only if it fails in both runs (a failure
    the fresh start-ups do not repeat is inconclusive: one run's start-ups may have been unlucky);
    an arm that broke in the confirmation keeps its failure, or is an infrastructure error when
    its engine did not start. Every other check is the first run's."""
    by_name = {c.name: c for c in second}
    broken = {c.arm: c for c in second if c.gate == "arm"}
    combined = []
    for check in first:
        if check.verdict != "fail":
            combined.append(check)
            continue
        again = by_name.get(check.name) or broken.get(check.arm)
        where = f"the confirmation run {confirmation_run}"
        if again is None and check.gate == "arm":  # broke in this run, ran in the confirmation
            failing = [c for c in second if c.arm == check.arm and c.verdict == "fail"]
            verdict, why = (
                ("fail", f"confirmed: {len(failing)} of its checks fail in {where}")
                if failing
                else ("inconclusive", f"not confirmed: it ran in {where} and no check of it failed there")
            )
        elif again is None:
            verdict, why = "inconclusive", f"not confirmed: {where} has no such check"
        elif again.verdict == "fail":
            verdict, why = "fail", f"confirmed by {where} ({again.message})"
        elif again.verdict == "error":
            verdict, why = "error", f"{where} could not measure it: {again.message}"
        else:
            verdict, why = "inconclusive", f"not confirmed by {where} ({again.verdict}: {again.message})"
        combined.append(replace(check, verdict=verdict, message=f"{check.message}; {why}"))
    return combined


def exit_code(checks: Sequence[Check]) -> int:
    """3 infrastructure error, 1 regression, 0 pass (inconclusive and skipped gates pass)."""
    verdicts = {c.verdict for c in checks}
    if "error" in verdicts:
        return 3
    if "fail" in verdicts:
        return 1
    return 0
