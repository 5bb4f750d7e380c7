"""A run's own gates on one cell: a floor and/or ceiling on a metric's statistic (a rule's ``min`` and
``max``, a golden tau's band), and on a speedup, from the cell's estimate.

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
"""

from __future__ import annotations

from harness.config.checks import Gates
from harness.config.level import LoadLevel
from harness.core import stats
from harness.core.formats import interval_text
from harness.core.metrics import METRICS
from harness.derive.intervals import Estimate
from harness.derive.samples import PER_RECORD, RunView, statistic_of
from harness.results.calibration import Calibration
from harness.results.gate import Check

ONE_STARTUP_LIMIT = "one start-up: no interval can see the start-up spread (set load.server_starts >= 2{})"


def calibrated_spread(calibration: Calibration | None, metric: str) -> tuple[float, int] | None:
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
    statistic = statistic_of(check.metric)
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
    ``startups``: the cell's server start-ups; ``spread``: a calibration's (``calibrated_spread``)."""
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


def speedup_limit(
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


def limit_check(
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
    spread = calibrated_spread(view.raw.calibration, metric)
    return _absolute(check, values, view.regime.gates, *bounds, startups, clusters=clusters, spread=spread)
