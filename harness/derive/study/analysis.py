"""Where speculative decoding pays: pure functions over a study's cells.

A study is a set of points (concrete regimes differing in regime-level axes: dtype, TP, engine
mode, ...), each a run whose arms may include several draft depths K of one method (an arm-level
sweep). Every cell's speedup and interval is the one its run stored (``harness.derive.intervals``: the
arms x rounds model on log start-up tok/s); from those and each cell's per-round speedups this
module derives:

- the break-even concurrency: where the speedup crosses 1, interpolated on log2(concurrency), with
  a confidence set that pairs the load levels by round (a test inversion, Fieller-type);
- the best K per method family, workload and load level, and the K values that cannot be told from
  it (Hsu's multiple comparisons with the best: the baseline cancels in a difference of two arms);
- the recommendation per workload and load level: the fastest arm, deployed only when it pays
  after correcting for the number of arms it was picked from;
- the flips: where a decided recommendation, a decided best K or the sign of a speedup changes
  between two points that differ in one regime axis.

No I/O here: ``harness.derive.study.collect`` builds the ``Observation``s from stored runs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from harness.core import stats
from harness.core.formats import interval_text
from harness.derive import pooling
from harness.derive.intervals import CONFIDENCE, Estimate, stored_estimate
from harness.results.model import SpeedupEstimate


@dataclass(frozen=True)
class Observation:
    """One arm on one workload at one load level, in one point of a study."""

    point: str  # the point's id
    axes: tuple[tuple[str, Any], ...]  # the point's regime-level axis values, (dotted path, value)
    arm: str
    family: str  # the arm before its arm-level sweep expanded it (its K variants share a family)
    method: str
    k: int | None  # a scheduled arm's: its largest
    workload: str
    concurrency: int
    speedup: float | None  # the arms x rounds model's point (the geometric mean of round_speedups)
    tau: float | None
    output_tok_s: float | None
    usd_per_mtok: float | None
    baseline_usd_per_mtok: float | None
    identical_pct: float | None
    # per round (server start-up): the arm's start-up mean tok/s over the baseline's same start-up;
    # what pairs load levels (break-even) and arms (best K) by round
    round_speedups: tuple[tuple[int, float], ...] = ()
    # the interval the point's own run stored (harness.derive.intervals); None: unverified
    stored: SpeedupEstimate | None = None
    scheduled: bool = False  # the arm runs a K per batch size (k_schedule): not one K of its family
    # its acceptance is forced (synthetic verification: a calibration arm, lossy): measured, shown,
    # never a choice (no best K, recommendation, flip or policy is made of it)
    lossy: bool = False
    # its outputs were not lossless in this window (``harness.derive.verdict.divergence``: greedy
    # outputs that left the baseline's beyond near ties more often than its own noise floor, or a
    # shifted distribution): measured, shown, never a choice either, as its run's verdict never
    # deploys it
    diverged: bool = False

    def estimate(self) -> Estimate | None:
        """Its speedup with the interval its run stored (never resampled): a study and its runs
        always show the same interval."""
        return stored_estimate(self.speedup, self.stored, rounds=len(self.round_speedups))


def estimate(observation: Observation) -> Estimate | None:
    """``Observation.estimate``, as a function for the study's own rules."""
    return observation.estimate()


def _has_interval(found: Estimate | None) -> bool:
    return found is not None and found.log_se is not None and found.log_se > 0 and found.df >= 1


def _no_interval(found: Estimate) -> str:
    return "1 start-up per arm: start-up spread not measured" if found.rounds <= 1 else "no interval"


# ---- break-even ------------------------------------------------------------------------------

BREAK_EVEN_GRID = 400  # points on log2(concurrency) over the measured range the set is tested on


@dataclass(frozen=True)
class BreakEven:
    """Where one arm's speedup crosses 1 as load grows, on one workload in one point."""

    point: str
    arm: str
    workload: str
    kind: Literal["crosses", "always_pays", "never_pays", "undecided", "unmeasured"]
    concurrency: float | None = None  # the point estimates' crossing, interpolated on log2(concurrency)
    # the hull of the crossing's 95% confidence set; None on a side where the set reaches the edge
    # of the measured range (open-ended: the data cannot place it there)
    low: float | None = None
    high: float | None = None
    has_set: bool = False  # a confidence set was computed (2+ rounds common to every level)
    direction: Literal["stops_paying", "starts_paying"] | None = None
    bracket: tuple[int, int] | None = None  # the measured levels around the point crossing
    levels: tuple[int, ...] = ()
    rounds: int = 0  # rounds measured at every level: the pairs the set is made of

    def text(self) -> str:
        span = f"{min(self.levels)}-{max(self.levels)}" if self.levels else "-"
        if self.kind == "always_pays":
            return f"pays at every level measured ({span}): every level's interval lies above 1"
        if self.kind == "never_pays":
            return f"never pays at the levels measured ({span}): every level's interval lies below 1"
        if self.kind == "undecided":
            return f"does not cross at the levels measured ({span}), but not every level is decided"
        if self.kind == "unmeasured":
            return "no speedup measured"
        verb = "stops paying" if self.direction == "stops_paying" else "starts paying"
        bounds = ""
        if self.rounds < 2:
            how = "unverified: " + (
                "1 start-up per level" if self.rounds == 1 else "fewer than 2 start-ups common to every level"
            )
        elif not self.has_set:
            how = "but the rounds' 95% set is empty: the point crossing is not significant"
        else:
            low = f"{self.low:.1f}" if self.low is not None else f"{min(self.levels)} or less"
            high = f"{self.high:.1f}" if self.high is not None else f"{max(self.levels)} or more"
            bounds, how = f" [{low}, {high}]", f"95%, levels paired by {self.rounds} rounds"
        between = f"between the measured {self.bracket[0]} and {self.bracket[1]}, " if self.bracket else ""
        where = f"{between}interpolated on log2 concurrency; {how}"
        return f"{verb} at concurrency {self.concurrency:.1f}{bounds} ({where})"


def crossing(levels: Sequence[int], speedups: Sequence[float]) -> tuple[float, str, tuple[int, int]] | None:
    """The first load level where ``speedups`` (in level order) cross 1, interpolated linearly in
    log2(level) on the log of the speedup (the scale of the model and of ``crossing_set``, so the
    point crossing always lies in its set) between the two measured levels around it, which are
    returned with it; None when they never cross."""
    points = list(zip(levels, speedups, strict=True))
    for (c0, s0), (c1, s1) in zip(points, points[1:], strict=False):  # neighbours
        if (s0 - 1.0) * (s1 - 1.0) < 0 or (s1 == 1.0 and s0 != 1.0):
            x0, x1, l0, l1 = math.log2(c0), math.log2(c1), math.log(s0), math.log(s1)
            x = x0 - l0 * (x1 - x0) / (l1 - l0)
            return 2.0**x, "stops_paying" if s0 > s1 else "starts_paying", (c0, c1)
    return None


def crossing_set(
    levels: Sequence[int], rounds: Sequence[Sequence[float]], confidence: float = CONFIDENCE
) -> tuple[float | None, float | None] | None:
    """The confidence set of the load where the speedup crosses 1, by test inversion (Fieller-type)
    with the levels paired by round: ``levels`` increasing, ``rounds[r][i]`` round r's speedup at
    level i. At x on log2(concurrency), t its position between the two measured levels around it,
    each round's log speedup interpolated there is z_r(x) = (1-t) log s[r][i] + t log s[r][i+1];
    x is in the set iff the paired t test of mean z(x) = 0 does not reject. A round's drift shared
    by the levels of one start-up cancels in its own z, so the set has the rounds' actual spread.

    Returns the set's hull as (low, high) concurrency, each None where the set reaches that edge
    of the measured range (open-ended); None when there is no set: fewer than 2 rounds or 2
    levels, or (with them) the set is empty: the data exclude a crossing within the range."""
    n = len(rounds)
    if n < 2 or len(levels) < 2:
        return None
    xs = [math.log2(c) for c in levels]
    if any(b <= a for a, b in zip(xs, xs[1:], strict=False)) or any(len(row) != len(xs) for row in rounds):
        raise ValueError("crossing_set needs increasing levels and one speedup per level in every round")
    logs = [[math.log(s) for s in row] for row in rounds]

    def z(x: float) -> list[float]:
        i = max(j for j in range(len(xs) - 1) if xs[j] <= x) if x > xs[0] else 0
        t = (x - xs[i]) / (xs[i + 1] - xs[i])
        return [(1 - t) * row[i] + t * row[i + 1] for row in logs]

    step = (xs[-1] - xs[0]) / (BREAK_EVEN_GRID - 1)
    grid = [xs[0] + j * step for j in range(BREAK_EVEN_GRID - 1)] + [xs[-1]]
    # each segment's root of mean z joins the grid, so a set narrower than a grid step is not missed
    means = [stats.mean([row[i] for row in logs]) for i in range(len(xs))]
    for i in range(len(xs) - 1):
        if means[i] * means[i + 1] < 0:
            grid.append(xs[i] - means[i] * (xs[i + 1] - xs[i]) / (means[i + 1] - means[i]))
    q = stats.t_quantile(1 - (1 - confidence) / 2, n - 1)

    def inside(x: float) -> bool:
        values = z(x)
        centre = stats.mean(values)
        sd = math.sqrt(sum((v - centre) ** 2 for v in values) / (n - 1))
        return abs(centre) <= q * sd / math.sqrt(n) + 1e-12  # the tolerance keeps an exact root in

    grid.sort()
    kept = [i for i, x in enumerate(grid) if inside(x)]
    if not kept:
        return None

    def edge(out: float, within: float) -> float:
        """The set's boundary between a grid point outside it and one inside, by bisection: the
        hull is then exact, not a grid step narrow."""
        for _ in range(40):
            middle = (out + within) / 2
            out, within = (out, middle) if inside(middle) else (middle, within)
        return within

    first, last = kept[0], kept[-1]
    low = None if first == 0 else 2.0 ** edge(grid[first - 1], grid[first])
    high = None if last == len(grid) - 1 else 2.0 ** edge(grid[last + 1], grid[last])
    return low, high


def _paired_rounds(series: Sequence[Observation]) -> list[list[float]]:
    """Each round measured at every level of ``series``: its speedup per level, in level order."""
    by_level = [dict(o.round_speedups) for o in series]
    common = set.intersection(*(set(found) for found in by_level)) if by_level else set()
    return [[found[r] for found in by_level] for r in sorted(common)]


def break_even(observations: Sequence[Observation]) -> BreakEven:
    """One arm on one workload in one point, over its load levels (``observations`` of one series)."""
    first = observations[0]
    series = sorted((o for o in observations if o.speedup is not None), key=lambda o: o.concurrency)
    levels = tuple(o.concurrency for o in series)
    rounds = _paired_rounds(series)
    base = {"point": first.point, "arm": first.arm, "workload": first.workload, "levels": levels}
    if not series:
        return BreakEven(kind="unmeasured", **base)
    found = crossing(levels, [o.speedup for o in series])  # type: ignore[misc]
    if found is None:
        # "always"/"never" are claims about every level: each level's own interval must say so
        verdicts = {estimate(o).verdict for o in series}  # type: ignore[union-attr]
        kind = (
            "always_pays" if verdicts == {"pays"} else "never_pays" if verdicts == {"loses"} else "undecided"
        )
        return BreakEven(kind=kind, rounds=len(rounds), **base)  # type: ignore[arg-type]
    concurrency, direction, bracket = found
    # a point whose run added rounds until decided: the set at its intervals' level (Estimate.level)
    level = min(found.level() for o in series if (found := estimate(o)) is not None)
    interval = crossing_set(levels, rounds, level)
    low, high = interval if interval is not None else (None, None)
    return BreakEven(
        kind="crosses",
        concurrency=concurrency,
        low=low,
        high=high,
        has_set=interval is not None,
        direction=direction,  # type: ignore[arg-type]
        bracket=bracket,
        rounds=len(rounds),
        **base,
    )


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
    # K values that cannot be told from the best (Hsu's MCB, 95%); (): the best is better than
    # every other K; None: no interval, cannot tell
    tied: tuple[int, ...] | None
    by_k: tuple[tuple[int, float], ...]  # every K measured, with its speedup

    def text(self) -> str:
        if self.tied is None:
            others = f"cannot tell K values apart: {_no_interval(self.speedup)}"
        elif self.tied:
            others = f"cannot be told from the best: K={', '.join(map(str, self.tied))}"
        else:
            others = "better than every other K"
        return f"K={self.k} ({self.speedup.text()}; {others}; 95%, multiple comparisons with the best)"


def best_set(means: Sequence[float], log_se: float, df: int, confidence: float = CONFIDENCE) -> list[bool]:
    """Hsu's multiple comparisons with the best (constrained MCB): which of k arms cannot be told
    from the best, given each arm's mean log effect and the common standard error of a difference
    of two of them. Arm i is in the set iff mean_i - max_{j != i} mean_j > -h log_se, h the
    one-sided Dunnett critical value for k - 1 comparisons (``stats.best_of_quantile``)."""
    h = stats.best_of_quantile(len(means) - 1, df, confidence)
    found = []
    for i, mean in enumerate(means):
        rival = max(m for j, m in enumerate(means) if j != i)
        found.append(mean - rival > -h * log_se)
    return found


def best_k(observations: Sequence[Observation]) -> list[BestK]:
    """Per (point, family, workload, concurrency) with at least two K values: the fastest K, and
    the K values that cannot be told from it. The arms' speedups share the baseline's start-ups,
    so in the difference log(s_k) - log(s_j) the baseline cancels and the comparison is paired by
    round; in the balanced arms x rounds model its standard error is the cell's log_se for any two
    arms (s sqrt(2/n)), with the cell's degrees of freedom. Where the arms' stored errors differ
    (an arm that missed a round got its own two-arm model) the largest and the fewest degrees of
    freedom are taken: conservative."""
    groups: dict[tuple[str, str, str, int], list[Observation]] = {}
    for o in observations:
        if o.method != "baseline" and o.k is not None and o.speedup is not None and not o.scheduled:
            groups.setdefault((o.point, o.family, o.workload, o.concurrency), []).append(o)
    out = []
    for (point, family, workload, concurrency), members in groups.items():
        if len({o.k for o in members}) < 2:
            continue
        estimates = [estimate(o) for o in members]
        best = max(range(len(members)), key=lambda i: members[i].speedup)  # type: ignore[arg-type, return-value]
        tied: tuple[int, ...] | None = None
        if all(_has_interval(e) for e in estimates):
            log_se = max(e.log_se for e in estimates)  # type: ignore[union-attr, type-var]
            df = min(e.df for e in estimates)  # type: ignore[union-attr]
            level = min(e.level() for e in estimates)  # type: ignore[union-attr]
            kept = best_set([math.log(o.speedup) for o in members], log_se, df, level)  # type: ignore[arg-type]
            tied = tuple(sorted(o.k for i, o in enumerate(members) if kept[i] and i != best))  # type: ignore[misc]
        out.append(
            BestK(
                point,
                family,
                members[best].method,
                workload,
                concurrency,
                members[best].k,  # type: ignore[arg-type]
                estimates[best],  # type: ignore[arg-type]
                tied,
                tuple(sorted((o.k, o.speedup) for o in members)),  # type: ignore[misc]
            )
        )
    return out


# ---- recommendation ------------------------------------------------------------------------


def corrected(found: Estimate, candidates: int) -> Estimate:
    """``found`` as the winner of ``candidates`` arms (``Estimate.selected_from``:
    without a standard error to widen the interval with, a winner among several is unverified)."""
    return found.selected_from(candidates)


@dataclass(frozen=True)
class Recommendation:
    """What to deploy for one workload at one load level in one point."""

    point: str
    workload: str
    concurrency: int
    arm: str | None  # None: no speculation (the baseline)
    best_arm: str | None  # the fastest speculative arm, recommended or not
    family: str | None  # best_arm's family (its method before K was swept)
    speedup: Estimate | None  # of best_arm, as its run measured it
    usd_per_mtok_before: float | None
    usd_per_mtok_after: float | None
    identical_pct: float | None
    candidates: int = 0  # the speculative arms best_arm was picked from

    @property
    def selected(self) -> Estimate | None:
        """best_arm's speedup corrected for being the fastest of ``candidates``: what decides."""
        return None if self.speedup is None else corrected(self.speedup, self.candidates)

    @property
    def decided(self) -> bool:
        """Deploy (pays after correction) or no speculation because the best arm loses or is
        equivalent to the baseline (after correction): a flip needs both sides decided."""
        return self.arm is not None or (
            self.selected is not None and self.selected.verdict in ("loses", "equivalent")
        )

    @property
    def saving_pct(self) -> float | None:
        return (
            None
            if self.arm is None
            else pooling.saving_pct(self.usd_per_mtok_before, self.usd_per_mtok_after)
        )

    def status(self) -> str:
        """Why it is deployed or not, short: the table's cell."""
        found = self.selected
        if found is None:
            return "-"
        if self.arm is not None:
            return (
                "pays" if self.candidates <= 1 else f"pays after correcting for {self.candidates} candidates"
            )
        if found.verdict == "unverified":
            return "unverified, not deployed"
        if self.speedup.verdict == "pays":  # type: ignore[union-attr]
            return f"faster, but not after correcting for the {self.candidates} arms it was picked from"
        return found.verdict

    def _why(self) -> str:
        found = self.selected
        bounds = (
            f": {interval_text(found.low, found.high)}"
            if self.candidates > 1 and found is not None and found.low is not None and found.high is not None
            else ""
        )
        return f"{self.status()}{bounds}"

    def text(self) -> str:
        if self.best_arm is None:
            return "no speculative arm measured"
        if self.arm is None:
            return f"no speculation (best: {self.best_arm} {self.speedup.text()}; {self._why()})"  # type: ignore[union-attr]
        saving = f", $/Mtok -{self.saving_pct:.0f}%" if self.saving_pct is not None else ""
        same = f", {self.identical_pct:.0f}% identical" if self.identical_pct is not None else ""
        return f"{self.arm} {self.speedup.text()} ({self._why()}){saving}{same}"  # type: ignore[union-attr]


def recommend(observations: Sequence[Observation]) -> list[Recommendation]:
    """Per (point, workload, concurrency): the fastest speculative arm whose speedup pays held over
    the number of speculative arms measured there (the verdict's decision over all the arms:
    ``harness.derive.verdict``), deployed; where none pays, the fastest, not deployed. With no interval an
    arm is unverified and never deployed."""
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
        ordered = sorted(members, key=lambda o: o.speedup, reverse=True)  # type: ignore[arg-type, return-value]
        paying = [
            o
            for o in ordered
            if (e := estimate(o)) is not None and corrected(e, len(members)).verdict == "pays"
        ]
        best = paying[0] if paying else ordered[0]
        speedup = estimate(best)
        deploy = bool(paying)
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
                len(members),
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


def flips(observations: Sequence[Observation]) -> list[Flip]:
    """Every place where a decision changes between two points that differ in one regime axis, as
    sentences: only decisions the data support on both sides (a change between two undecided
    answers is noise, not a flip). The recommendation: deploy (pays after correcting for the
    candidates) or no speculation (the best arm loses or is equivalent, after correcting) on each
    side; the best K: a best-K set that is just the best on each side; the sign: pays on one side
    and loses on the other."""
    axes = {o.point: o.axes for o in observations}
    points = list(axes)
    recs = {(r.point, r.workload, r.concurrency): r for r in recommend(observations)}
    bests = {(b.point, b.family, b.workload, b.concurrency): b for b in best_k(observations)}
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


def _differ(a: Estimate | None, b: Estimate | None) -> bool:
    """Whether two points' speedups are told apart: the 95% interval of their ratio excludes 1
    (``Estimate.ratio_to``). Both sides decided is not enough: the two points may be one truth."""
    if a is None or b is None:
        return False
    ratio = a.ratio_to(b)
    return ratio is not None and (ratio[0] > 1.0 or ratio[1] < 1.0)


def _recommendation_flips(recs: dict, where: tuple) -> list[Flip]:
    axis, (va, vb), (p, q) = where
    out = []
    for (point, workload, concurrency), a in recs.items():
        b = recs.get((q, workload, concurrency))
        if point != p or b is None or _choice(a) == _choice(b):
            continue
        if a.best_arm is None or b.best_arm is None:
            continue  # a point without a speculative arm measured (its job failed): nothing to flip
        if not (a.decided and b.decided):
            continue  # an undecided side could be either answer: not a flip
        if not _differ(a.speedup, b.speedup):
            continue  # "pays" at 1.04x and "within 3%" at 1.02x can both be true of one 1.03x
        text = (
            f"{workload} @ {concurrency}: the recommendation flips from {_label(a)} "
            f"({a.best_arm} {a.speedup.text()}; {a.status()}) at {axis}={va} to {_label(b)} "
            f"({b.best_arm} {b.speedup.text()}; {b.status()}) at {axis}={vb}"
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
        if a.tied != () or b.tied != ():
            continue  # a side whose best K is not better than every other K (or cannot tell): not a flip
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
        if not _differ(ea, eb):
            continue
        verb_a, verb_b = ("gains" if e.verdict == "pays" else "loses" for e in (ea, eb))  # type: ignore[union-attr]
        text = (
            f"{workload} @ {concurrency}: {arm} {verb_a} at {axis}={va} ({ea.text()}) and {verb_b} at "  # type: ignore[union-attr]
            f"{axis}={vb} ({eb.text()})"  # type: ignore[union-attr]
        )
        out.append(Flip(axis, (va, vb), (p, q), workload, concurrency, "sign", arm, text))
    return out
