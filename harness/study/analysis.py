"""Where speculative decoding pays: pure functions over a study's cells.

A study is a set of points (concrete regimes differing in regime-level axes: dtype, TP, engine
mode, ...), each a run whose arms may include several draft depths K of one method (an arm-level
sweep). From their cells this module derives, with intervals from the repeats (from the server
start-ups where an arm's server started more than once: ``CellMetrics.independent_samples``):

- the speedup of every arm at every load level;
- the break-even concurrency: where the speedup crosses 1, interpolated on log2(concurrency);
- the best K per method family, workload and load level, and the K values it cannot be told from;
- the recommendation per workload and load level: the arm to deploy, or no speculation;
- the flips: where the recommendation, the best K or the sign of a speedup changes between two
  points that differ in one regime axis.

No I/O here: ``harness.study.collect`` builds the ``Observation``s from stored runs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from harness import pooling, stats
from harness.intervals import CONFIDENCE, RESAMPLES, Estimate, interval_from_repeats


@dataclass(frozen=True)
class Observation:
    """One arm on one workload at one load level, in one point of a study."""

    point: str  # the point's id
    axes: tuple[tuple[str, Any], ...]  # the point's regime-level axis values, (dotted path, value)
    arm: str
    family: str  # the arm before its arm-level sweep expanded it (its K variants share a family)
    method: str
    k: int | None
    workload: str
    concurrency: int
    speedup: float | None  # pooled over repeats
    # one per repeat against the baseline's same repeat; one per server start-up when there are several
    speedup_repeats: tuple[float, ...]
    tau: float | None
    output_tok_s: float | None
    usd_per_mtok: float | None
    baseline_usd_per_mtok: float | None
    identical_pct: float | None
    # the interval the point's own run stored (``harness.intervals``' policy: start-ups, repeats or,
    # with one window, the requests); None: none stored, then it is made from speedup_repeats
    speedup_low: float | None = None
    speedup_high: float | None = None


def estimate(observation: Observation) -> Estimate | None:
    """The speedup of one cell with its interval: the one its run stored, so a study and its
    runs always show the same interval; else (an observation not read from a run) the policy's
    interval over its repeats."""
    if observation.speedup is None:
        return None
    repeats = observation.speedup_repeats
    if observation.speedup_low is not None and observation.speedup_high is not None:
        interval: tuple[float, float] | None = (observation.speedup_low, observation.speedup_high)
    else:
        interval = interval_from_repeats(repeats)
    if interval is None:
        return Estimate(observation.speedup, None, None, len(repeats))
    return Estimate(observation.speedup, *interval, len(repeats))


# ---- break-even ------------------------------------------------------------------------------


@dataclass(frozen=True)
class BreakEven:
    """Where one arm's speedup crosses 1 as load grows, on one workload in one point."""

    point: str
    arm: str
    workload: str
    kind: Literal["crosses", "always_pays", "never_pays", "unmeasured"]
    concurrency: float | None = None  # the crossing, interpolated on log2(concurrency)
    low: float | None = None  # interval of the crossing over resampled repeats (None: open-ended)
    high: float | None = None
    direction: Literal["stops_paying", "starts_paying"] | None = None
    levels: tuple[int, ...] = ()

    def text(self) -> str:
        span = f"{min(self.levels)}-{max(self.levels)}" if self.levels else "-"
        if self.kind == "always_pays":
            return f"pays at every level measured ({span})"
        if self.kind == "never_pays":
            return f"never pays at the levels measured ({span})"
        if self.kind == "unmeasured":
            return "no speedup measured"
        verb = "stops paying" if self.direction == "stops_paying" else "starts paying"
        interval = ""
        if self.low is not None or self.high is not None:
            low = f"{self.low:.1f}" if self.low is not None else f"<{min(self.levels)}"
            high = f"{self.high:.1f}" if self.high is not None else f">{max(self.levels)}"
            interval = f" [{low}, {high}]"
        return f"{verb} at concurrency {self.concurrency:.1f}{interval} (interpolated on log2 concurrency)"


def crossing(levels: Sequence[int], speedups: Sequence[float]) -> tuple[float, str] | None:
    """The first load level where ``speedups`` (in level order) cross 1, interpolated linearly in
    log2(level) between the two measured levels around it; None when they never cross."""
    points = list(zip(levels, speedups, strict=True))
    for (c0, s0), (c1, s1) in zip(points, points[1:], strict=False):  # neighbours
        if (s0 - 1.0) * (s1 - 1.0) < 0 or (s1 == 1.0 and s0 != 1.0):
            x0, x1 = math.log2(c0), math.log2(c1)
            x = x0 + (1.0 - s0) * (x1 - x0) / (s1 - s0)
            return 2.0**x, "stops_paying" if s0 > s1 else "starts_paying"
    return None


def break_even(observations: Sequence[Observation], seed: int = 0) -> BreakEven:
    """One arm on one workload in one point, over its load levels (``observations`` of one series)."""
    first = observations[0]
    series = sorted((o for o in observations if o.speedup is not None), key=lambda o: o.concurrency)
    levels = tuple(o.concurrency for o in series)
    base = {"point": first.point, "arm": first.arm, "workload": first.workload, "levels": levels}
    if not series:
        return BreakEven(kind="unmeasured", **base)
    found = crossing(levels, [o.speedup for o in series])  # type: ignore[misc]
    if found is None:
        kind = "always_pays" if all(o.speedup > 1.0 for o in series) else "never_pays"  # type: ignore[operator]
        return BreakEven(kind=kind, **base)
    low, high = _crossing_interval(series, seed)
    return BreakEven(kind="crosses", concurrency=found[0], low=low, high=high, direction=found[1], **base)  # type: ignore[arg-type]


def _crossing_interval(series: Sequence[Observation], seed: int) -> tuple[float | None, float | None]:
    """Percentile interval of the crossing when each level's repeats are resampled; a resample
    without a crossing makes that side open-ended (None)."""
    if any(len(o.speedup_repeats) < 2 for o in series):
        return None, None
    levels = [o.concurrency for o in series]

    def crossed(*repeats: list[float]) -> float | None:
        found = crossing(levels, [stats.mean(r) for r in repeats])
        return None if found is None else found[0]

    draws = stats.bootstrap([o.speedup_repeats for o in series], crossed, RESAMPLES, seed)
    tail = (1 - CONFIDENCE) / 2
    if not draws.values or draws.missing / RESAMPLES > tail:  # the crossing itself is uncertain: open-ended
        return (stats.quantile(draws.values, tail) if draws.values else None), None
    return draws.bounds(CONFIDENCE)


# ---- best K --------------------------------------------------------------------------------


@dataclass(frozen=True)
class BestK:
    point: str
    family: str
    method: str
    workload: str
    concurrency: int
    k: int
    speedup: Estimate
    tied: tuple[int, ...] | None  # K values indistinguishable from the best; None: too few repeats to say
    by_k: tuple[tuple[int, float], ...]  # every K measured, with its speedup

    def text(self) -> str:
        if self.tied is None:
            others = "1 repeat: cannot tell K values apart"
        elif self.tied:
            others = f"indistinguishable: K={', '.join(map(str, self.tied))}"
        else:
            others = "better than every other K"
        return f"K={self.k} ({self.speedup.text()}; {others})"


def _indistinguishable(best: Observation, other: Observation, seed: int) -> bool:
    """The bootstrap interval of the difference of mean speedups contains 0."""
    difference = stats.bootstrap(
        [best.speedup_repeats, other.speedup_repeats],
        lambda a, b: stats.mean(a) - stats.mean(b),
        RESAMPLES,
        seed,
    )
    low, high = difference.bounds(CONFIDENCE)
    return low <= 0.0 <= high


def best_k(observations: Sequence[Observation], seed: int = 0) -> list[BestK]:
    """Per (point, family, workload, concurrency) with at least two K values: the fastest K."""
    groups: dict[tuple[str, str, str, int], list[Observation]] = {}
    for o in observations:
        if o.method != "baseline" and o.k is not None and o.speedup is not None:
            groups.setdefault((o.point, o.family, o.workload, o.concurrency), []).append(o)
    out = []
    for (point, family, workload, concurrency), members in groups.items():
        if len({o.k for o in members}) < 2:
            continue
        best = max(members, key=lambda o: o.speedup)  # type: ignore[arg-type, return-value]
        others = [o for o in members if o is not best]
        if len(best.speedup_repeats) < 2 or any(len(o.speedup_repeats) < 2 for o in others):
            tied = None
        else:
            tied = tuple(sorted(o.k for o in others if _indistinguishable(best, o, seed)))  # type: ignore[misc]
        out.append(
            BestK(
                point,
                family,
                best.method,
                workload,
                concurrency,
                best.k,
                estimate(best),  # type: ignore[arg-type]
                tied,
                tuple(sorted((o.k, o.speedup) for o in members)),
            )
        )  # type: ignore[misc]
    return out


# ---- recommendation ------------------------------------------------------------------------


@dataclass(frozen=True)
class Recommendation:
    """What to deploy for one workload at one load level in one point."""

    point: str
    workload: str
    concurrency: int
    arm: str | None  # None: no speculation (the baseline)
    best_arm: str | None  # the fastest speculative arm, recommended or not
    family: str | None  # best_arm's family (its method before K was swept)
    speedup: Estimate | None  # of best_arm
    usd_per_mtok_before: float | None
    usd_per_mtok_after: float | None
    identical_pct: float | None

    @property
    def saving_pct(self) -> float | None:
        return (
            None
            if self.arm is None
            else pooling.saving_pct(self.usd_per_mtok_before, self.usd_per_mtok_after)
        )

    def text(self) -> str:
        if self.best_arm is None:
            return "no speculative arm measured"
        if self.arm is None:
            return f"no speculation (best: {self.best_arm} {self.speedup.text()}, {self.speedup.verdict})"  # type: ignore[union-attr]
        saving = f", $/Mtok -{self.saving_pct:.0f}%" if self.saving_pct is not None else ""
        same = f", {self.identical_pct:.0f}% identical" if self.identical_pct is not None else ""
        return f"{self.arm} {self.speedup.text()}{saving}{same}"  # type: ignore[union-attr]


def recommend(observations: Sequence[Observation]) -> list[Recommendation]:
    """Per (point, workload, concurrency): the fastest speculative arm, recommended when its
    speedup interval lies above 1 (with one repeat: when its speedup is above 1, marked so)."""
    groups: dict[tuple[str, str, int], list[Observation]] = {}
    for o in observations:
        groups.setdefault((o.point, o.workload, o.concurrency), [])
        if o.method != "baseline" and o.speedup is not None:
            groups[(o.point, o.workload, o.concurrency)].append(o)
    out = []
    for (point, workload, concurrency), members in groups.items():
        if not members:
            out.append(Recommendation(point, workload, concurrency, None, None, None, None, None, None, None))
            continue
        best = max(members, key=lambda o: o.speedup)  # type: ignore[arg-type, return-value]
        speedup = estimate(best)
        deploy = speedup is not None and speedup.verdict == "pays"
        out.append(
            Recommendation(
                point,
                workload,
                concurrency,
                best.arm if deploy else None,
                best.arm,
                best.family,
                speedup,
                best.baseline_usd_per_mtok,
                best.usd_per_mtok,
                best.identical_pct,
            )
        )
    return out


# ---- flips ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Flip:
    """A decision that changes between two points differing in exactly one regime axis."""

    axis: str
    values: tuple[Any, Any]
    points: tuple[str, str]
    workload: str
    concurrency: int
    what: Literal["recommendation", "best_k", "sign"]
    subject: str  # the family (best_k), the arm (sign), or "" (recommendation)
    text: str


def _differ_in_one_axis(a: tuple[tuple[str, Any], ...], b: tuple[tuple[str, Any], ...]) -> str | None:
    da, db = dict(a), dict(b)
    differing = [axis for axis in da if da[axis] != db.get(axis)]
    return differing[0] if len(differing) == 1 and set(da) == set(db) else None


def _label(recommendation: Recommendation) -> str:
    return recommendation.arm or "no speculation"


def _choice(recommendation: Recommendation) -> str | None:
    """What a recommendation flip compares: the method family to deploy, or none; a different K
    of the same family is a best-K question (and may be a tie), not a different recommendation."""
    return recommendation.family if recommendation.arm is not None else None


def flips(observations: Sequence[Observation], seed: int = 0) -> list[Flip]:
    """Every place where the recommendation, the best K of a family or the sign of an arm's
    speedup changes between two points that differ in one regime axis, as sentences."""
    axes = {o.point: o.axes for o in observations}
    points = list(axes)
    recs = {(r.point, r.workload, r.concurrency): r for r in recommend(observations)}
    bests = {(b.point, b.family, b.workload, b.concurrency): b for b in best_k(observations, seed)}
    speed = {(o.point, o.arm, o.workload, o.concurrency): o for o in observations if o.method != "baseline"}
    out: list[Flip] = []
    for i, p in enumerate(points):
        for q in points[i + 1 :]:
            axis = _differ_in_one_axis(axes[p], axes[q])
            if axis is None:
                continue
            pair = (dict(axes[p])[axis], dict(axes[q])[axis])
            where = (axis, pair, (p, q))
            out += _recommendation_flips(recs, where)
            out += _best_k_flips(bests, where)
            out += _sign_flips(speed, where)
    return out


def _recommendation_flips(recs: dict, where: tuple) -> list[Flip]:
    axis, (va, vb), (p, q) = where
    out = []
    for (point, workload, concurrency), a in recs.items():
        b = recs.get((q, workload, concurrency))
        if point != p or b is None or _choice(a) == _choice(b):
            continue
        if a.best_arm is None or b.best_arm is None:
            continue  # a point without a speculative arm measured (its job failed): nothing to flip
        text = (
            f"{workload} @ {concurrency}: the recommendation flips from {_label(a)} "
            f"({a.best_arm} {a.speedup.text() if a.speedup else '-'}) at {axis}={va} to {_label(b)} "
            f"({b.best_arm} {b.speedup.text() if b.speedup else '-'}) at {axis}={vb}"
        )
        out.append(Flip(axis, (va, vb), (p, q), workload, concurrency, "recommendation", "", text))
    return out


def _best_k_flips(bests: dict, where: tuple) -> list[Flip]:
    axis, (va, vb), (p, q) = where
    out = []
    for (point, family, workload, concurrency), a in bests.items():
        b = bests.get((q, family, workload, concurrency))
        if point != p or b is None or a.k == b.k:
            continue
        if (a.tied is not None and b.k in a.tied) or (b.tied is not None and a.k in b.tied):
            continue  # the two best K values cannot be told apart: not a flip
        text = (
            f"{workload} @ {concurrency}: {family}'s best K flips from K={a.k} ({a.speedup.text()}) at "
            f"{axis}={va} to K={b.k} ({b.speedup.text()}) at {axis}={vb}"
        )
        out.append(Flip(axis, (va, vb), (p, q), workload, concurrency, "best_k", family, text))
    return out


def _sign_flips(speed: dict, where: tuple) -> list[Flip]:
    axis, (va, vb), (p, q) = where
    out = []
    for (point, arm, workload, concurrency), a in speed.items():
        b = speed.get((q, arm, workload, concurrency))
        if point != p or b is None or a.speedup is None or b.speedup is None:
            continue
        ea, eb = estimate(a), estimate(b)
        # a sign flip is a gain on one side and a loss on the other, each beyond its own noise
        if {ea.verdict, eb.verdict} != {"pays", "loses"}:  # type: ignore[union-attr]
            continue
        verb_a, verb_b = ("gains" if e.verdict == "pays" else "loses" for e in (ea, eb))  # type: ignore[union-attr]
        text = (
            f"{workload} @ {concurrency}: {arm} {verb_a} at {axis}={va} ({ea.text()}) and {verb_b} at "  # type: ignore[union-attr]
            f"{axis}={vb} ({eb.text()})"  # type: ignore[union-attr]
        )
        out.append(Flip(axis, (va, vb), (p, q), workload, concurrency, "sign", arm, text))
    return out
