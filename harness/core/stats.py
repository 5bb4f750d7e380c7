"""The statistics every derived number uses: pure functions on plain lists of samples.

- t and normal quantiles, and the one-sided Dunnett quantile of Hsu's comparisons with the best
  (``t_quantile``, ``best_of_quantile``): the speedup's model (``harness.derive.intervals``), best K and
  break-even (``harness.derive.study.analysis``);
- the confidence of each interval behind a simultaneous 95% claim: over several arms against one
  baseline (``many_to_one_level``, two-sided Dunnett) and over the looks of a run that adds rounds
  until decided (``repeated_level``, fitted by seeded simulation): the winner's correction and the
  deciding design (``harness.derive.intervals.design_level``);
- t intervals of a relative change between two samples, on the log ratio or the difference
  (``log_ratio_interval``, ``difference_interval``): the relative gates;
- a percentile bootstrap of one statistic (mean, median, p90 or p99), seeded so the same samples give
  the same verdict (``bootstrap``, the one resampling loop): an absolute gate's interval, and the
  precision of adaptive repeats;
- the Mann-Whitney U test (exact for small samples without ties, normal approximation with tie
  and continuity corrections otherwise), shown beside a gate's interval, and Cliff's delta
  stratified by prompt: the distribution check of sampled runs.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache, partial
from typing import Any, TypeVar

from harness.core.cache import kept_number

Statistic = Callable[[Sequence[float]], float]


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile, q in [0, 1], by linear interpolation between closest ranks (numpy's
    default). The one quantile of the harness: summaries, gates and figures all use it."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def median(values: Sequence[float]) -> float:
    return quantile(values, 0.5)


def p90(values: Sequence[float]) -> float:
    return quantile(values, 0.9)


def p99(values: Sequence[float]) -> float:
    return quantile(values, 0.99)


def population_std(values: Sequence[float]) -> float:
    """The standard deviation with n in the denominator: ``vllm bench serve``'s ``std_*_ms`` (numpy's
    ``std``) and AIPerf's ``std``, for their block (an interval uses the sample's, n - 1)."""
    centre = mean(values)
    return math.sqrt(sum((v - centre) ** 2 for v in values) / len(values))


# The statistic a metric reports (``harness.core.metrics.Metric.statistic``) as a function.
STATISTICS: dict[str, Statistic] = {
    "mean": mean,
    "p50": median,
    "p90": p90,
    "p99": p99,
    "min": min,
    "max": max,
    "std": population_std,
}


@dataclass(frozen=True)
class Interval:
    point: float
    low: float
    high: float


Draw = TypeVar("Draw")


@dataclass(frozen=True)
class Draws:
    """The statistic over bootstrap resamples, sorted; ``missing`` counts the resamples where it
    was undefined (the statistic returned None)."""

    values: tuple[float, ...]
    missing: int
    resamples: int

    def bounds(self, confidence: float = 0.95) -> tuple[float, float]:
        """The percentile interval: the draws' (1 - confidence) / 2 and 1 - that quantiles."""
        tail = (1 - confidence) / 2
        return quantile(self.values, tail), quantile(self.values, 1 - tail)


def bootstrap(
    samples: Sequence[Sequence[Draw]],
    statistic: Callable[..., float | None],
    resamples: int = 2000,
    seed: int = 0,
) -> Draws:
    """The one resampling loop of the harness: ``resamples`` times, every sample is resampled with
    replacement (independently, in the order given, from one generator seeded with ``seed``: the
    same samples always give the same draws) and ``statistic(*resampled)`` is recorded."""
    rng = random.Random(seed)
    values, missing = [], 0
    for _ in range(resamples):
        drawn = statistic(*[rng.choices(sample, k=len(sample)) for sample in samples])
        if drawn is None:
            missing += 1
        else:
            values.append(drawn)
    return Draws(tuple(sorted(values)), missing, resamples)


def bootstrap_statistic(
    sample: Sequence[float],
    statistic: Statistic = mean,
    resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> Interval:
    """stat(sample) with a percentile bootstrap interval (for absolute floors and ceilings)."""
    if not sample:
        raise ValueError("the sample needs at least one value")
    draws = bootstrap([sample], statistic, resamples, seed)
    return Interval(statistic(sample), *draws.bounds(confidence))


def relative_half_width(
    values: Sequence[float], resamples: int = 2000, confidence: float = 0.95
) -> float | None:
    """Half the width of the bootstrap interval of the mean, as a fraction of the mean (None: fewer
    than two values, or a zero mean): how precisely repeats pin a window's number down."""
    if len(values) < 2:
        return None
    interval = bootstrap_statistic(values, mean, resamples, confidence)
    return (interval.high - interval.low) / 2 / abs(interval.point) if interval.point else None


@lru_cache(maxsize=256)
def _u_counts(n1: int, n2: int) -> tuple[int, ...]:
    """Number of orderings of n1 + n2 distinct values giving each U (U = 0..n1*n2), by recursion on
    which sample holds the largest value."""
    if n1 == 0 or n2 == 0:
        return (1,)
    with_first = _u_counts(n1 - 1, n2)  # largest value in sample 1: it beats all n2 of sample 2
    with_second = _u_counts(n1, n2 - 1)
    counts = [0] * (n1 * n2 + 1)
    for u, c in enumerate(with_first):
        counts[u + n2] += c
    for u, c in enumerate(with_second):
        counts[u] += c
    return tuple(counts)


def mann_whitney_greater(first: Sequence[float], second: Sequence[float]) -> tuple[float, float]:
    """U statistic of ``first`` and the one-sided p-value of "first tends to be greater than second"."""
    n1, n2 = len(first), len(second)
    if n1 == 0 or n2 == 0:
        raise ValueError("both samples need at least one value")
    u = sum(1.0 if x > y else 0.5 if x == y else 0.0 for x in first for y in second)
    has_ties = len(set(first) | set(second)) < n1 + n2
    if not has_ties and n1 * n2 <= 400:
        counts = _u_counts(n1, n2)
        total = sum(counts)
        return u, sum(counts[int(u) :]) / total
    mu = n1 * n2 / 2
    pooled = sorted(list(first) + list(second))
    tie_term = sum(t**3 - t for t in (pooled.count(v) for v in set(pooled)))
    n = n1 + n2
    variance = n1 * n2 / 12 * ((n + 1) - tie_term / (n * (n - 1)))
    if variance <= 0:
        return u, 1.0  # every value equal: no evidence either way
    z = (u - mu - 0.5) / math.sqrt(variance)
    return u, 0.5 * math.erfc(z / math.sqrt(2))


def ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks, ties sharing their average rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for k in range(start, end + 1):
            out[order[k]] = (start + end) / 2 + 1
        start = end + 1
    return out


def rank_correlation(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Spearman's rho (Pearson's correlation of the ranks); None when either side is constant."""
    rx, ry = ranks(xs), ranks(ys)
    mx, my = mean(rx), mean(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    vx, vy = sum((a - mx) ** 2 for a in rx), sum((b - my) ** 2 for b in ry)
    return cov / math.sqrt(vx * vy) if vx and vy else None


def mann_whitney_two_sided(first: Sequence[float], second: Sequence[float]) -> tuple[float, float]:
    """(two-sided p-value, Cliff's delta) of "the two samples come from one distribution". Cliff's
    delta = P(first > second) - P(first < second), from -1 to 1: the effect size beside the p-value
    (|delta| 0.15 small, 0.33 medium, 0.47 large, by Romano et al.'s thresholds)."""
    u, p_greater = mann_whitney_greater(first, second)
    _, p_less = mann_whitney_greater(second, first)
    delta = 2 * u / (len(first) * len(second)) - 1
    return min(1.0, 2 * min(p_greater, p_less)), delta


@lru_cache(maxsize=4096)
def t_quantile(p: float, df: float) -> float:
    """The p-quantile of Student's t with ``df`` degrees of freedom (scipy's; cached: the history
    gate asks for the same few quantiles at every night of every series). scipy.special's function,
    which ``scipy.stats.t.ppf`` calls: scipy.stats takes 0.6 s to import, in every bench command."""
    from scipy.special import stdtrit

    return float(stdtrit(df, p))


def _many_to_one_quantile(others: int, df: int, confidence: float, two_sided: bool) -> float:
    """The Dunnett critical value h for ``others`` comparisons with one control, t statistics
    (Z_j - Z_0) / (sqrt(2) S) with Z iid N(0, 1) and S^2 ~ chi2(df) / df shared: P(max_j of the
    statistics (two-sided: of their absolute values) <= h) = confidence. Given Z_0 and S the
    comparisons are independent, so the probability is a quadrature over Z_0 (a fine grid) and S
    (midpoints of 1,000 equal-probability bins) of a product; then a root find: deterministic,
    within ~1e-3 of Dunnett's tables."""
    if others < 1:
        raise ValueError("need at least one comparison")
    single = 1 - (1 - confidence) / 2 if two_sided else confidence
    if others == 1:
        return t_quantile(single, df)
    import scipy

    # a second of quadrature a design, the same for one scipy: kept on disk for the next process (each
    # bench show / report / gate of a run with several arms asks for it), and used only between the one
    # comparison's t quantile and Bonferroni's over the comparisons, where the quadrature can put it
    bonferroni = 1 - (1 - confidence) / (2 * others if two_sided else others)
    key = f"dunnett v1 scipy {scipy.__version__}: {others} {df} {confidence!r} {two_sided}"
    within = (t_quantile(single, df) - DUNNETT_SLACK, t_quantile(bonferroni, df) + DUNNETT_SLACK)
    return kept_number(
        "quantiles", key, partial(_dunnett_quantile, others, df, confidence, two_sided), within=within
    )


# how far outside its bounds the quadrature's quantile may lie (it is within ~1e-3 of Dunnett's tables)
DUNNETT_SLACK = 0.01


def _dunnett_quantile(others: int, df: int, confidence: float, two_sided: bool) -> float:
    """``_many_to_one_quantile`` by quadrature and a root find (its docstring says how)."""
    import numpy as np
    from scipy import optimize, special
    from scipy.stats import chi

    z = np.linspace(-8.5, 8.5, 341)
    weight = np.exp(-(z**2) / 2) / math.sqrt(2 * math.pi) * (z[1] - z[0])
    bins = 1000
    s = chi.ppf((np.arange(bins) + 0.5) / bins, df) / math.sqrt(df)

    def coverage(h: float) -> float:
        reach = h * math.sqrt(2) * s[:, None]
        inside = special.ndtr(z[None, :] + reach)
        if two_sided:
            inside = inside - special.ndtr(z[None, :] - reach)
        return float((weight * inside**others).sum(axis=1).mean())

    return float(optimize.brentq(lambda h: coverage(h) - confidence, 0.0, 500.0, xtol=1e-6))


@lru_cache(maxsize=256)
def best_of_quantile(others: int, df: int, confidence: float = 0.95) -> float:
    """Hsu's multiple comparisons with the best: the one-sided Dunnett critical value h for
    ``others`` comparisons of equicorrelated (rho 1/2) t statistics with ``df`` degrees of freedom,
    P(max_j (Z_j - Z_0) / (sqrt(2) S) <= h) = confidence, Z iid N(0, 1), S^2 ~ chi2(df) / df."""
    return _many_to_one_quantile(others, df, confidence, two_sided=False)


@lru_cache(maxsize=256)
def many_to_one_level(others: int, df: int, confidence: float = 0.95) -> float:
    """The confidence of each of ``others`` t intervals against one shared control (a baseline)
    with ``df`` degrees of freedom such that all of them cover together with ``confidence``: the
    two-sided Dunnett critical value (max-t), as a per-interval level. Exact under the arms x rounds
    model, where Bonferroni's 1 - (1 - confidence) / others is conservative (the comparisons share
    the baseline and the variance estimate): 0.967 instead of 0.975 for 2 arms at 2 degrees of freedom."""
    if others <= 1:
        return confidence
    h = _many_to_one_quantile(others, df, confidence, two_sided=True)
    from scipy.special import stdtr  # t's cdf: scipy.stats.t.sf(h, df) is stdtr(df, -h)

    return float(1 - 2 * stdtr(df, -h))


# Simulated runs behind ``repeated_level``: a Monte Carlo standard error of ~0.0007 on the 95%.
REPEATED_SIMULATIONS = 100_000
# bump when the simulation changes, so a level kept on disk (core.cache) is not reused
REPEATED_LEVEL_VERSION = 1


@lru_cache(maxsize=64)
def repeated_level(
    others: int,
    first_rounds: int,
    looks: int,
    confidence: float = 0.95,
    arms: int | None = None,
    calibration_df: int = 0,
) -> float:
    """The confidence of each interval of a run that looks at its intervals after ``first_rounds``
    rounds of start-ups and after each of the next ``looks - 1`` rounds (and may stop at any look),
    such that all of them, over every look and every one of ``others`` arms against one baseline,
    cover together with ``confidence``: repeated confidence intervals at one nominal level for
    every look (Pocock's kind of boundary, Jennison & Turnbull ch. 9), fitted to these looks.

    Under the arms x rounds model (``arms`` with the baseline, by default ``others + 1``; a
    calibration's ``calibration_df`` pooled into the variance), the looks' t statistics, each with
    its own degrees of freedom, have a joint law free of the truth and the spread: the level is the
    1 - confidence quantile of the smallest two-sided p-value over the looks and arms, from
    ``REPEATED_SIMULATIONS`` seeded simulated runs, aimed two Monte Carlo errors inside the nominal
    rate (deterministic: the same design always gets the same level from one numpy's stream).
    Bonferroni over the looks ignores that the looks share their first rounds: 0.990 for 5 looks
    from 2 rounds where the fitted level is ~0.986. More arms or a calibration give more degrees of
    freedom at every look and a level no stricter, within the simulation's error
    (tests/test_intervals.py), so the default, the fewest, is the conservative one. The candidates
    must share one fit (``intervals.design_level`` checks it)."""
    import numpy as np

    arms = others + 1 if arms is None else arms
    if others < 1 or looks < 1 or arms < others + 1 or (first_rounds < 2 and not calibration_df):
        raise ValueError("the model needs the baseline, the compared arms, a look and degrees of freedom")
    # a second to simulate, the same for one design and one numpy: kept on disk for the next process
    key = (
        f"repeated_level v{REPEATED_LEVEL_VERSION} numpy {np.__version__} {REPEATED_SIMULATIONS} runs: "
        f"{others} {first_rounds} {looks} {confidence!r} {arms} {calibration_df}"
    )
    return kept_number(
        "levels",
        key,
        partial(_simulated_level, others, first_rounds, looks, confidence, arms, calibration_df),
        within=repeated_level_bounds(others, looks, confidence),
    )


# how far above its Bonferroni bound the simulated level may lie (a conservative level, if kept there):
# it is aimed two Monte Carlo errors (~0.0007 each) inside the nominal rate, which for one look and
# one arm is above the exact level
REPEATED_LEVEL_SLACK = 0.005


def repeated_level_bounds(others: int, looks: int, confidence: float) -> tuple[float, float]:
    """Where ``repeated_level`` can lie: no lower than the nominal level (one look, one arm) and no
    higher than Bonferroni's over every look and arm (which ignores that they share rounds), with
    the simulation's slack. A kept level outside is not the simulation's (core.cache refuses it)."""
    return confidence, 1 - (1 - confidence) / (looks * others) + REPEATED_LEVEL_SLACK


def _simulated_level(
    others: int, first_rounds: int, looks: int, confidence: float, arms: int, calibration_df: int
) -> float:
    """``repeated_level`` by simulation (its docstring says how)."""
    import numpy as np
    from scipy import special

    last = first_rounds + looks - 1
    rng = np.random.default_rng([first_rounds, looks, others, arms, calibration_df])
    smallest: list[np.ndarray] = []
    chunk = 20_000
    for _ in range(max(1, REPEATED_SIMULATIONS // chunk)):
        errors = rng.standard_normal((chunk, arms, last))
        calibration = rng.chisquare(calibration_df, chunk) if calibration_df else 0.0
        least = np.ones(chunk)
        for n in range(first_rounds, last + 1):
            seen = errors[:, :, :n]
            arm_mean = seen.mean(axis=2, keepdims=True)
            round_mean = seen.mean(axis=1, keepdims=True)
            residual = seen - arm_mean - round_mean + arm_mean.mean(axis=1, keepdims=True)
            df = (arms - 1) * (n - 1) + calibration_df
            variance = ((residual**2).sum(axis=(1, 2)) + calibration) / df
            difference = arm_mean[:, 1 : others + 1, 0] - arm_mean[:, :1, 0]
            t = np.abs(difference) / np.sqrt(2 * variance / n)[:, None]
            least = np.minimum(least, 2 * special.stdtr(df, -t).min(axis=1))
        smallest.append(least)
    # the simulated quantile is off by a Monte Carlo error (~0.0007 at 100,000 runs): aim two of
    # them inside the nominal rate, so that the level errs on the strict side
    runs = sum(len(s) for s in smallest)
    alpha = 1 - confidence
    target = alpha - 2 * math.sqrt(alpha * confidence / runs)
    return float(1 - np.quantile(np.concatenate(smallest), target))


def log_ratio_interval(
    baseline: Sequence[float],
    current: Sequence[float],
    confidence: float = 0.95,
    *,
    sd: float | None = None,
    df: int | None = None,
) -> Interval:
    """The relative change current / baseline - 1 of two samples of a positive quantity (one value
    per server start-up), with a t interval on the log ratio of their geometric means: pooled
    two-sample t with n1 + n2 - 2 degrees of freedom, or, given ``sd`` (of one log value) and its
    ``df`` known from elsewhere (a machine calibration), that spread with those degrees of
    freedom. The log scale because a start-up moves a rate by a factor, not by an amount."""
    if not baseline or not current:
        raise ValueError("both samples need at least one value")
    if min(*baseline, *current) <= 0:
        raise ValueError("the log ratio needs positive values")
    logs_b, logs_c = [math.log(v) for v in baseline], [math.log(v) for v in current]
    n1, n2 = len(logs_b), len(logs_c)
    centre = mean(logs_c) - mean(logs_b)
    if sd is None:
        df = n1 + n2 - 2
        if df < 1:
            raise ValueError("a pooled t interval needs three values or more")
        ss = sum((v - mean(logs_b)) ** 2 for v in logs_b) + sum((v - mean(logs_c)) ** 2 for v in logs_c)
        sd = math.sqrt(ss / df)
    elif df is None or df < 1:
        raise ValueError("a known spread needs its degrees of freedom")
    half = t_quantile(1 - (1 - confidence) / 2, df) * sd * math.sqrt(1 / n1 + 1 / n2)
    return Interval(math.exp(centre) - 1, math.exp(centre - half) - 1, math.exp(centre + half) - 1)


def difference_interval(
    baseline: Sequence[float], current: Sequence[float], confidence: float = 0.95
) -> Interval:
    """(mean(current) - mean(baseline)) / |mean(baseline)| with a pooled two-sample t interval of
    the difference, scaled alike: the relative change of a quantity that may be zero (a share of
    prompts, an SLO attainment), where the log ratio is undefined."""
    n1, n2 = len(baseline), len(current)
    if n1 + n2 - 2 < 1 or not n1 or not n2:
        raise ValueError("a pooled t interval needs three values or more")
    mb, mc = mean(baseline), mean(current)
    if mb == 0:
        raise ValueError("the baseline's mean is 0: no relative change")
    df = n1 + n2 - 2
    ss = sum((v - mb) ** 2 for v in baseline) + sum((v - mc) ** 2 for v in current)
    half = t_quantile(1 - (1 - confidence) / 2, df) * math.sqrt(ss / df * (1 / n1 + 1 / n2))
    scale = abs(mb)
    return Interval((mc - mb) / scale, (mc - mb - half) / scale, (mc - mb + half) / scale)


@dataclass(frozen=True)
class DeltaEstimate:
    """Cliff's delta with its estimated variance: ``delta`` = P(first > second) - P(first < second)."""

    delta: float
    variance: float
    first_n: int  # values that entered it (strata with fewer than two a side are left out)
    second_n: int
    strata: int

    @property
    def se(self) -> float:
        return math.sqrt(self.variance)


def _cliffs_delta_parts(first: Sequence[float], second: Sequence[float]) -> tuple[float, float, float]:
    """(delta, Cliff's unbiased variance, Cliff's floor) of one pair of samples, both of size >= 2.

    The variance is Cliff's (1993) unbiased estimator of a dominance statistic's variance,
        [m^2 sum_i (d_i. - d)^2 + n^2 sum_j (d_.j - d)^2 - sum_ij (d_ij - d)^2] / (n m (n-1) (m-1)),
    d_ij = sign(x_i - y_j), n = |first|, m = |second|, row and column means d_i. and d_.j; it can
    fall below zero, so Cliff (1996) bounds it below by (1 - d^2) / (nm - 1). The dominance counts
    come from sorted copies (bisect), not from the n x m matrix: O((n + m) log(n + m))."""
    from bisect import bisect_left, bisect_right

    n, m = len(first), len(second)
    xs, ys = sorted(first), sorted(second)
    rows, ties = [], 0
    for x in first:
        below, not_above = bisect_left(ys, x), bisect_right(ys, x)
        rows.append((below - (m - not_above)) / m)
        ties += not_above - below
    columns = [((n - bisect_right(xs, y)) - bisect_left(xs, y)) / n for y in second]
    delta = sum(rows) / n
    cells = (n * m - ties) - n * m * delta**2  # sum_ij (d_ij - d)^2: d_ij^2 is 1 off the ties
    spread = m**2 * sum((r - delta) ** 2 for r in rows) + n**2 * sum((c - delta) ** 2 for c in columns)
    return delta, (spread - cells) / (n * m * (n - 1) * (m - 1)), (1 - delta**2) / (n * m - 1)


def stratified_cliffs_delta(
    strata: Sequence[tuple[Sequence[float], Sequence[float]]],
) -> DeltaEstimate | None:
    """Cliff's delta of first against second within each stratum (first, second), combined with weights
    n_k m_k / sum n_k m_k (each stratum counts by its pairs: the pooled delta with the pairs across
    strata left out), and its variance sum_k w_k^2 s_k^2 from Cliff's unbiased estimator within each
    stratum: only within-stratum differences enter, so a difference between strata (prompts) is never
    read as a difference between the samples. The combined variance is bounded below by the same
    combination of Cliff's floors, sum_k w_k^2 (1 - d_k^2) / (n_k m_k - 1), so a sample of ties does
    not read as certainty. A stratum with fewer than two values on a side has no within-stratum
    variance and is left out; None when no stratum is left."""
    kept = [(a, b) for a, b in strata if len(a) >= 2 and len(b) >= 2]
    if not kept:
        return None
    pairs = sum(len(a) * len(b) for a, b in kept)
    delta = variance = floor = 0.0
    for a, b in kept:
        weight = len(a) * len(b) / pairs
        d, s2, low = _cliffs_delta_parts(a, b)
        delta += weight * d
        variance += weight**2 * s2
        floor += weight**2 * low
    return DeltaEstimate(
        delta=delta,
        variance=max(variance, floor),
        first_n=sum(len(a) for a, _ in kept),
        second_n=sum(len(b) for _, b in kept),
        strata=len(kept),
    )


def normal_quantile(p: float) -> float:
    """The p-quantile of the standard normal."""
    from statistics import NormalDist

    return NormalDist().inv_cdf(p)


def normal_cdf(z: float) -> float:
    """P(Z <= z) for a standard normal Z."""
    return 0.5 * math.erfc(-z / math.sqrt(2))


def normal_two_sided_p(z: float) -> float:
    """P(|Z| >= |z|) for a standard normal Z."""
    return math.erfc(abs(z) / math.sqrt(2))


# ---- gates on the start-up as the unit (issue 60, item 4) ---------------------------------------


def satterthwaite_df(parts: Sequence[tuple[float, float]]) -> float:
    """Welch-Satterthwaite's degrees of freedom of a sum of variance estimates ``(variance, df)``:
    (sum v)^2 / sum(v^2 / df); a part with no variance adds nothing, and none at all gives the
    largest df given (the sum is then known exactly)."""
    total = sum(v for v, _ in parts)
    weighted = sum(v**2 / df for v, df in parts if v > 0)
    return total**2 / weighted if weighted > 0 else max(df for _, df in parts)


def mean_interval(
    values: Sequence[float],
    confidence: float = 0.95,
    *,
    log: bool = True,
    sd: float | None = None,
    df: float = 0,
) -> Interval:
    """The mean of ``values`` (one per server start-up) with a t interval: on the logs (the
    geometric mean; a start-up moves a rate by a factor) or on the values themselves (a quantity
    that may be 0), with n - 1 degrees of freedom, or, given ``sd`` (of one value on that scale)
    and its ``df`` from elsewhere (a machine calibration), that spread with those."""
    if not values:
        raise ValueError("the sample needs at least one value")
    if log and min(values) <= 0:
        raise ValueError("a mean on the log scale needs positive values")
    scale = [math.log(v) for v in values] if log else list(values)
    n, centre = len(scale), mean(scale)
    if sd is None:
        df = n - 1
        if df < 1:
            raise ValueError("a t interval needs two values or more")
        sd = math.sqrt(sum((v - centre) ** 2 for v in scale) / df)
    elif df < 1:
        raise ValueError("a known spread needs its degrees of freedom")
    half = t_quantile(1 - (1 - confidence) / 2, df) * sd / math.sqrt(n)
    back: Callable[[float], float] = math.exp if log else (lambda v: v)
    return Interval(back(centre), back(centre - half), back(centre + half))


def cluster_bootstrap_interval(
    clusters: Sequence[Sequence[float]],
    statistic: Statistic,
    resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
    log: bool = True,
) -> Interval:
    """statistic(all values pooled) with an interval that resamples whole CLUSTERS (server
    start-ups: draw as many as there are, with replacement, pool their values, take the statistic),
    never the values across clusters as if independent: the requests of one start-up share what
    that start-up gave. With few clusters a percentile interval is far too narrow (2 start-ups
    give 4 distinct draws: the interval is the two start-ups' range, beyond a floor a quarter of
    the time at a true mean on it), so the draws give a standard error, scaled by sqrt(k / (k - 1))
    (the bootstrap's variance of a mean of k clusters is (k - 1) / k of the unbiased one), and
    the interval is t with k - 1 degrees of freedom, on the log scale where the values are positive."""
    k = len(clusters)
    if k < 2 or any(not c for c in clusters):
        raise ValueError("a cluster bootstrap needs two non-empty clusters or more")
    positive = log and min(min(c) for c in clusters) > 0
    to = math.log if positive else (lambda v: v)
    pooled = [v for c in clusters for v in c]
    draws = bootstrap([list(clusters)], lambda drawn: to(statistic([v for c in drawn for v in c])),
                      resamples, seed)  # fmt: skip
    centre = to(statistic(pooled))
    spread = math.sqrt(sum((d - mean(draws.values)) ** 2 for d in draws.values) / (len(draws.values) - 1))
    half = t_quantile(1 - (1 - confidence) / 2, k - 1) * spread * math.sqrt(k / (k - 1))
    back: Callable[[float], float] = math.exp if positive else (lambda v: v)
    return Interval(back(centre), back(centre - half), back(centre + half))


def between_variance(groups: Sequence[Sequence[float]]) -> tuple[float, int] | None:
    """The variance of a group's shared effect (a night's, over the start-ups it ran), by the
    method of moments of the one-way random-effects model: the variance of the groups' means less
    the part their own values' spread puts there (mean of s_i^2 / n_i), floored at 0; with the
    groups' count less one as degrees of freedom. A group of one value has no spread of its own
    and counts whole (conservative). None with fewer than two groups."""
    kept = [list(g) for g in groups if g]
    if len(kept) < 2:
        return None
    means = [mean(g) for g in kept]
    centre = mean(means)
    of_means = sum((m - centre) ** 2 for m in means) / (len(means) - 1)
    within = [
        sum((v - m) ** 2 for v in g) / (len(g) - 1) / len(g)
        for g, m in zip(kept, means, strict=True)
        if len(g) > 1
    ]
    return max(0.0, of_means - (mean(within) if within else 0.0)), len(kept) - 1


def lag1_autocorrelation(values: Sequence[float]) -> float | None:
    """The lag-1 sample autocorrelation of a series (in its order): sum of (x_t - mean)(x_t+1 -
    mean) over sum of (x_t - mean)^2; None with fewer than 3 values or no spread. Biased low by
    about (1 + 4 rho) / n in short series."""
    if len(values) < 3:
        return None
    centre = mean(values)
    spread = sum((v - centre) ** 2 for v in values)
    if spread <= 0:
        return None
    return sum((a - centre) * (b - centre) for a, b in zip(values[:-1], values[1:], strict=True)) / spread


@lru_cache(maxsize=256)
def heavy_tail_factor(p: float, df: int = 3) -> float:
    """The p-quantile of a t with ``df`` degrees of freedom scaled to unit variance, over the
    normal's: how much farther out a heavy-tailed value of the same sd lies (t(3) at 0.9975: 1.53)."""
    from scipy.special import ndtri

    return float(t_quantile(p, df) / math.sqrt(df / (df - 2)) / ndtri(p))


# ---- a weakly informative prior on the start-up spread (issue 69) -------------------------------


def _mixture_tail(x: float, scales: Any, weights: Any) -> float:
    from scipy.special import ndtr

    return float(2 * (weights * ndtr(-x / scales)).sum())


@lru_cache(maxsize=4096)  # a summary asks again for the same cell's term (its verdict, rival, outlook)
def halfnormal_posterior_t(ss: float, df: int, factor: float, prior_sd: float) -> tuple[float, int]:
    """The error of an estimate whose variance is ``factor`` x sigma^2, where ``ss / sigma^2`` is
    chi-squared with ``df`` degrees of freedom (the arms x rounds model's residual) and sigma has a
    half-normal prior of scale ``prior_sd`` (weakly informative: flat near 0, so it says nothing of
    a small spread, and it rules out spreads many times ``prior_sd``, which a t with 1 or 2 degrees
    of freedom must allow: t(2)'s 95% quantile is 4.30, the normal's 1.96; Gelman 2006 on a few
    groups' variance). Its marginal is a scale mixture of normals over sigma's posterior, computed
    on a grid, and returned as the Student t that matches its 95% and 99% two-sided quantiles:
    ``(variance, df)``, df rounded down (wider at every level between). ``df`` >= 1: a prior never
    stands in for a spread the run did not measure."""
    import numpy as np
    from scipy.optimize import brentq

    if df < 1 or ss <= 0 or factor <= 0 or prior_sd <= 0:
        raise ValueError("the prior needs a measured residual (df >= 1, ss > 0) and positive scales")
    # sigma's posterior on a log grid wide enough for the likelihood and the prior
    centre = math.sqrt(ss / df)
    low, high = min(centre, prior_sd) / 1e3, max(centre, prior_sd) * 1e2
    sigma = np.exp(np.linspace(math.log(low), math.log(high), 4000))
    # the likelihood of the residual, the half-normal prior, the log grid's d(sigma) = sigma d(log sigma)
    log_post = -df * np.log(sigma) - ss / (2 * sigma**2) - sigma**2 / (2 * prior_sd**2) + np.log(sigma)
    weights = np.exp(log_post - log_post.max())
    weights /= weights.sum()
    scales = sigma * math.sqrt(factor)
    top = float(scales.max()) * 10

    def quantile(alpha: float) -> float:
        return brentq(lambda x: _mixture_tail(x, scales, weights) - alpha, 0.0, top)

    q95, q99 = quantile(0.05), quantile(0.01)
    ratio = q99 / q95
    found = 1  # the most degrees of freedom whose tails are no lighter than the mixture's
    while found < 1000 and t_quantile(0.995, found + 1) / t_quantile(0.975, found + 1) >= ratio:
        found += 1
    return (q95 / t_quantile(0.975, found)) ** 2, found
