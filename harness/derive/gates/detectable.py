"""What a relative gate can see: the smallest regression a ``max_regression_pct`` rule fails with 80%
probability (its detectable change), from the standard error of the change it compares.

A relative check fails when the change is worse than the tolerance AND its interval excludes no
change (``relative._decide``). On the log scale, with SE the standard error of the log change and t
its interval's quantile, a true regression d fails with probability about
P(N(d, SE) > max(tol, t SE)), so the change failed with probability ``power`` is

    d = max(tol, t SE) + z_power SE        (z_0.80 = 0.8416)

(``detectable_change``; tol is the tolerance on the same log scale). SE comes from the check's own
start-ups in ``bench gate`` (``of_samples``), and at ``bench validate`` from the regime's design and
an assumed start-up spread (``design_se``, ``design_lines``). A timed metric without a night term
never fails a two-run comparison (``relative.NIGHT_UNKNOWN``): it has no detectable change.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from harness.core import stats
from harness.derive.intervals import ASSUMED_STARTUP_SPREAD

POWER = 0.80
NO_NIGHT = "none without a night term (a --history of 2+ nights or a machine calibration)"
# what ``bench validate`` assumes of a timed metric's night term, to say what a history could give:
# the night effect sd of this project's simulations (docs/gates.md, docs/history.md: 2-3%) from 4
# earlier nights (from 5 the history gate takes over)
ASSUMED_NIGHT_SD = 0.03
ASSUMED_NIGHTS = 4
SPREAD_SAID = (
    f"start-up spread {100 * ASSUMED_STARTUP_SPREAD:.0f}% assumed (this project's measured spread of "
    "log tok/s: 4.9% on its CPUs, 3.5-6% on its GPUs; taken for every metric, conservative for an "
    "engine count)"
)
MOST_STARTS = 100  # the most start-ups a side ``starts_needed`` tries


def detectable_change(
    se: float,
    df: float,
    tolerance_pct: float,
    higher_is_better: bool = True,
    confidence: float = 0.95,
    power: float = POWER,
    log: bool = True,
) -> float:
    """The true regression (a fraction, 0.12 = 12% worse) that a relative check with standard error
    ``se`` (of the log change; of the relative difference where ``log`` is False) and ``df`` degrees
    of freedom fails with probability ``power``: max(tol, t se) + z_power se, tol the tolerance on
    that scale, back on the relative scale in the metric's direction."""
    t = stats.t_quantile(1 - (1 - confidence) / 2, df)
    z = stats.normal_quantile(power)
    tolerance = tolerance_pct / 100
    if not log:
        return max(tolerance, t * se) + z * se
    threshold = -math.log(1 - tolerance) if higher_is_better else math.log1p(tolerance)
    worse = max(threshold, t * se) + z * se
    return -math.expm1(-worse) if higher_is_better else math.expm1(worse)


def half_width(se: float, df: float, confidence: float = 0.95) -> float:
    """The interval's half-width on the log scale: above the tolerance, a quiet night is inconclusive."""
    return stats.t_quantile(1 - (1 - confidence) / 2, df) * se


def design_se(
    spread: float, starts: int, night: tuple[float, float] | None = (0.0, 1e6)
) -> tuple[float, float]:
    """The standard error of the log change between two runs of ``starts`` start-ups each, and its
    Welch-Satterthwaite df: 2 night_sd^2 + 2 spread^2 / starts (as ``relative._between_runs``)."""
    parts = [(2 * spread**2 / starts, 2.0 * (starts - 1))]
    if night is not None:
        parts.append((2 * night[0] ** 2, float(night[1])))
    return math.sqrt(sum(v for v, _ in parts)), stats.satterthwaite_df(parts)


def two_run_parts(
    values: Sequence[float],
    reference: Sequence[float],
    positive: bool,
    spread: tuple[float, int] | None,
    night: tuple[float, float] | None,
) -> tuple[list[list[float]], list[tuple[float, float]]] | None:
    """Both runs' start-ups on the gate's scale (the logs where ``positive``), reference first, and
    the variance of the change between their means in parts with their degrees of freedom (for
    Welch-Satterthwaite): the start-ups' spread within a run over their counts (pooled over both
    runs, or ``spread``'s where a side has one start-up), and each run's night term, 2 night_sd^2.
    None: no within-run spread to use. The one variance of a two-run check: its interval
    (``relative``) and its detectable change (``of_samples``) both read it."""
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
    return sides, parts


def of_samples(
    values: Sequence[float],
    reference: Sequence[float],
    spread: tuple[float, int] | None,
    night: tuple[float, float] | None,
) -> tuple[float, float] | None:
    """A start-up check's own standard error and df (the variance ``relative._between_runs`` gives
    its interval), on the logs where every value is positive, else on the difference relative to
    the reference's mean; None where there is none (one start-up and no spread, a zero baseline)."""
    positive = min([*values, *reference]) > 0
    found = two_run_parts(values, reference, positive, spread, night)
    if found is None:
        return None
    sides, parts = found
    se = math.sqrt(sum(v for v, _ in parts))
    if not positive:
        scale = abs(stats.mean(sides[0]))
        if scale == 0:
            return None
        se /= scale
    return se, stats.satterthwaite_df(parts)


def check_text(
    values: Sequence[float],
    reference: Sequence[float],
    tolerance_pct: float,
    higher_is_better: bool,
    confidence: float,
    spread: tuple[float, int] | None,
    night: tuple[float, float] | None,
) -> str:
    """What ``bench gate`` adds to a start-up check's message: "detects X% with 80% (n/n start-ups)"."""
    counts = f"{len(values)}/{len(reference)} start-ups"
    if night is None:
        return f"detects {NO_NIGHT}"
    found = of_samples(values, reference, spread, night)
    if found is None:
        return f"detectable change unknown ({counts})"
    positive = min([*values, *reference]) > 0
    change = detectable_change(*found, tolerance_pct, higher_is_better, confidence, log=positive)
    return f"detects {100 * change:.1f}% with {100 * POWER:.0f}% ({counts})"


def starts_needed(
    tolerance_pct: float, spread: float, night: tuple[float, float] | None, confidence: float = 0.95
) -> int | None:
    """The fewest start-ups a side (2 or more, up to ``MOST_STARTS``) whose interval's half-width is
    within the tolerance (log scale); None where no count reaches it (the night term alone is wider)."""
    tolerance = math.log1p(tolerance_pct / 100)
    for starts in range(2, MOST_STARTS + 1):
        if half_width(*design_se(spread, starts, night), confidence) <= tolerance:
            return starts
    return None


def design_lines(regime: Any) -> list[tuple[str, bool]]:
    """``bench validate``'s lines on the regime's relative rules, each with whether it is flagged (its
    tolerance below what the design resolves: the interval's half-width at the design exceeds it, so
    a quiet night is inconclusive and only a regression of the detectable change fails)."""
    from harness.core.metrics import METRICS

    rules = [g for g in regime.gates.rules if g.max_regression_pct is not None]
    if not rules:
        return []
    load = regime.load
    starts = load.max_server_starts()
    design = f"{starts} start-ups a side" + (" (the deciding design's max)" if load.decides() else "")
    confidence = regime.gates.confidence
    lines: list[tuple[str, bool]] = [
        (
            "Relative gates (--baseline RUN; from 5 nights in a --history the history gate decides "
            f"instead) at "
            f"{design}, {SPREAD_SAID}; detectable = failed with 80%:",
            False,
        )
    ]
    for gate in rules:
        metric = METRICS[gate.metric]
        tol = gate.max_regression_pct
        narrowed = (("workload", gate.workload), ("concurrency", gate.concurrency))
        where = "".join(f" {k}={v}" for k, v in narrowed if v is not None)
        name = f"  {gate.arm} {gate.metric}{where} (limit {tol:g}%)"
        if metric.samples == "prompt":
            lines.append((f"{name}: per prompt; its detectable change depends on the prompts' spread", False))
            continue
        timed = metric.timed
        night = (ASSUMED_NIGHT_SD, float(ASSUMED_NIGHTS - 1)) if timed else (0.0, 1e6)
        if starts < 2:
            lines.append((f"{name}: one start-up a side sees no spread (set load.server_starts >= 2)", True))
            continue
        se, df = design_se(ASSUMED_STARTUP_SPREAD, starts, night)
        change = detectable_change(se, df, tol, metric.higher_is_better, confidence)
        half = half_width(se, df, confidence)
        wide = half > math.log1p(tol / 100)
        if timed:
            said = (
                f"{name}: never fails a two-run comparison without a --history of 2+ nights or a machine "
                f"calibration (a timed metric: its night term is unknown here); with a night term of sd "
                f"{100 * ASSUMED_NIGHT_SD:.0f}% from {ASSUMED_NIGHTS} earlier nights (assumed) it detects "
                f"{100 * change:.1f}%"
                + (
                    f" (its interval's half-width there, {100 * math.expm1(half):.1f}%, "
                    "exceeds the limit: a quiet night is inconclusive)"
                    if wide
                    else ""
                )
            )
            lines.append((said, False))
            continue
        said = f"{name}: detects {100 * change:.1f}% (no night term: an engine count)"
        if wide:
            needed = starts_needed(tol, ASSUMED_STARTUP_SPREAD, night, confidence)
            said += (
                f"; the limit is below what {starts} start-ups resolve (interval half-width "
                f"{100 * math.expm1(half):.1f}%): a quiet night is inconclusive; "
                + (
                    f"{needed} start-ups a side would resolve it"
                    if needed is not None
                    else f"no count up to {MOST_STARTS} start-ups a side resolves it"
                )
            )
        lines.append((said, wide))
    return lines
