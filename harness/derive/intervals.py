"""The one statistical model of a speedup, and what its interval supports (derive layer: pure).

Per (workload, load level), every arm's tok/s is measured once per server start-up, and the
start-ups go in rounds (one start-up of every arm per round). The model is the arms x rounds
additive model on the log of each start-up's mean tok/s (the mean over that start-up's repeats):

    log y[arm, round] = arm + round + error

It is the balanced REML mixed model with the start-up as the unit: what changes from one start-up
to the next is in the error, drift shared by a round's start-ups is in ``round`` and cancels, and
the residual variance is pooled over the arms. An arm's speedup is exp(arm - baseline) (the
geometric mean of its per-round speedups); its 95% interval is a t interval with (m - 1)(n - 1)
degrees of freedom (m arms with the baseline, n rounds): nominal coverage from two rounds on
(benchmarks/interval_coverage.py measures it).

- Repeats on one server never make an interval: they cannot see the start-up spread. With one
  round the model has no degrees of freedom, and the speedup is "unverified" - unless a machine
  calibration (``bench calibrate``: the residual spread of this regime on this machine, from 5+
  rounds) gives the spread; its variance is pooled with the run's own when both exist.
- Residuals are not pooled across workloads: a server start-up measures every workload, so their
  residuals are correlated and pooling them would claim degrees of freedom the data lack.
- An arm missing rounds (it failed on a later start-up) gets its own two-arm model with the
  baseline over the rounds both have.
- A run that adds rounds until its verdicts are decided (``load.server_starts: {min, max, decide:
  true}``) looks at its intervals once per round from ``min`` to ``max`` and stops on the first
  that decides: each look is another chance for a lucky interval to clear 1 (at a true 1.00x, 7%
  false "pays" from min 2 to max 6 with plain 95% intervals). Its intervals are repeated
  confidence intervals: each at one level fitted to the design's looks (``stats.repeated_level``:
  98.6% for 5 looks from 2 rounds, where Bonferroni's 1 - 0.05 / looks would take 99.0%), so that
  all of them, and so the one the run stopped on, cover together with 95% (``Estimate.looks``,
  ``Estimate.first_look``).
- The fastest of several arms is biased up: a claim about it is one about every candidate at once,
  each interval at the two-sided Dunnett (max-t) level for the candidates against the one baseline
  (``stats.many_to_one_level``: 96.8% for 2 arms at 2 degrees of freedom, where Bonferroni's
  97.5% ignores that the comparisons share the baseline and the variance estimate).

Outside that model, three things a user decides on (docs/statistics.md, "the workload"):

- **Prompts are a sample of the workload.** The same prompts go to every start-up, so their
  spread cancels from the residual: the model's interval is about these prompts. A delete-one-prompt
  jackknife of the cell's own estimator (each window's tok/s without the prompt, its tokens and its
  share of the requests' time taken out) gives the prompt-sampling variance, added to the start-ups'
  (``prompt_log_se``); the degrees of freedom combine the two terms' (prompts - 1 for the
  jackknife's: ``_combined_df``). The interval is then about the workload the prompts were drawn
  from. Where a covariate known before any arm speculates is measured for every prompt of the
  workload (``harness.derive.covariate``: the copy share of the baseline's greedy answers), the
  jackknife's pseudo-values are regressed on it (the survey statistician's regression estimator):
  the point moves by the slope times the sample's mean share less the workload's, and the prompt
  term keeps only the residual spread (prompts - 2 degrees of freedom; ``covariate_r2`` says how
  much it explained), corrected for sampling without replacement from the workload the pass measured
  whole (1 - prompts / its prompts).
- **Arms with unequal spread.** The pooled residual hides one noisy arm among quiet ones. Each arm's
  own paired differences with the baseline (n - 1 df) are tested against the residual variance of
  the model without it (an F test); where its own is the larger at p < 0.05 (``OWN_SPREAD_ALPHA``),
  its interval comes from its own differences (``own_spread``).
- **Few rounds.** With 2 or 3 rounds the residual has 1 to 4 degrees of freedom, and the t interval
  must allow a start-up spread many times the one measured (t(2)'s 95% quantile is 4.30). A
  weakly informative half-normal prior on the start-up spread (``verdict.startup_prior_sd``, 10% by
  default: twice what this project measured on CPUs, more than its GPUs' 3.5-6%) rules out a spread
  of many tens of %, and says nothing of a small one; the interval is then its posterior's, as a
  matched t (``stats.halfnormal_posterior_t``, source ``server_starts+prior``). It never stands in
  for a spread the run did not measure (one round stays unverified), and a run whose own spread
  exceeds the prior's scale gets the plain t (``_prior_applies``).
- **A calibration from another day.** A run's own residual is tested against its calibration's
  (an F test at ``CALIBRATION_ALPHA``); a run noisier than its calibration does not pool it
  (``calibration_refused``), and one older than ``CALIBRATION_MAX_AGE_H`` is not used at all
  (``harness.derive.summary``): one start-up then stays unverified.

Every view reads the interval this module computed and the summary stored (a record's ``speedup``
and its ``estimate``: ``harness.results.model.SpeedupEstimate``), so a run, a study, a gate and an
export always show the same interval for the same cell.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any, Literal, get_args

from harness.core import stats
from harness.core.formats import estimate_text
from harness.derive.covariate import FEWEST_PROMPTS, Covariates
from harness.results.model import SpeedupEstimate

CONFIDENCE = 0.95
# a speedup whose whole interval lies within this of 1 (on the log scale) is decided: "equivalent"
EQUIVALENCE_MARGIN = 0.03
FEW_DF = 4  # below this many degrees of freedom the t interval leans on normality: said so
# an arm's own paired spread replaces the pooled one where its own is the larger at p below this.
# Issue 69's simulation through the summary path (every arm equally spread, the default's measured
# components): at the 0.35 this was, the split fired on the winner in 37-45% of 2-round runs and
# then set the interval from t(1) = 12.7 (power 0.32 at a true 1.20x); at 0.05 it fires by chance
# 1 run in 20, and a truly 2x-noisier arm still covered 0.945 (docs/statistics.md)
OWN_SPREAD_ALPHA = 0.05
# a run's residual refuses its calibration where the run's is the larger at p below this
CALIBRATION_ALPHA = 0.5
# a calibration describes the day it was taken: shared VMs of one type measured 3.5% and 7.6% on
# different days, and a 3.5% calibration on a 7.6% day covered 0.66-0.71
CALIBRATION_MAX_AGE_H = 24.0
# the prompt-to-prompt spread of a speedup (log sd of one prompt's gain) this project measured: ngram
# on code_humaneval, run 20261206-042904-e78784, 0.19-0.21 at concurrency 1 (0.34-0.35 at 4); what
# bench validate assumes before a run has measured its own
REFERENCE_PROMPT_SPREAD = 0.2
# the share of that spread the covariate explains (``harness.derive.covariate``, the copy share of
# the baseline's answers) that bench validate assumes: the lower of this project's two measurements
# (ngram K=4 on code at concurrency 1: R^2 0.76 of the jackknife's pseudo-values on an AMD EPYC
# without avx_vnni, 0.95 with it; tests/fixtures/run_v15_slower_machine, run_v14_default), rounded
# down. Not measured for drafters other than prompt lookup: a run states its own
REFERENCE_COVARIATE_R2 = 0.7


def prompts_for(precision_pct: float, spread: float = REFERENCE_PROMPT_SPREAD) -> int:
    """The prompts per window whose sampling alone keeps a speedup's 95% interval within
    +-``precision_pct`` at a prompt-to-prompt spread of ``spread`` (normal quantile)."""
    z = stats.normal_quantile(1 - (1 - CONFIDENCE) / 2)
    return math.ceil((z * spread / math.log(1 + precision_pct / 100)) ** 2)


IntervalSource = Literal["server_starts", "server_starts+prior", "calibration", "server_starts+calibration"]
Verdict = Literal["pays", "loses", "equivalent", "indistinguishable", "unverified"]
DECIDED: frozenset[str] = frozenset({"pays", "loses", "equivalent"})
RoundTable = Mapping[str, Mapping[int, float]]  # arm -> round -> that start-up's mean tok/s


def design_level(
    looks: int = 1,
    candidates: int = 1,
    df: int = 0,
    first_look: int | None = None,
    model_arms: int = 0,
) -> float:
    """The confidence of each interval behind a simultaneous 95% claim, for ``candidates`` arms
    (the winner of several is a claim about all of them) over the ``looks`` a run's design could
    take before it stopped:

    - one look (a fixed number of rounds): 95% for one arm; for several, the two-sided Dunnett
      level at the intervals' ``df`` (``stats.many_to_one_level``: exact under the model);
    - looks from ``first_look`` rounds on (a run that adds rounds until decided): the level fitted
      to those looks (``stats.repeated_level``: the fewest degrees of freedom the design allows,
      so conservative for more arms or a calibration);
    - otherwise Bonferroni over looks x candidates, always valid: a summary from before version 12
      (which stored neither its first look nor its model), a first look at one round (an interval
      only from a calibration), no degrees of freedom, and several candidates that were not fitted
      in one model (``model_arms``, the arms of the winner's fit with the baseline, fewer than the
      candidates and the baseline: an arm that missed rounds got a model and a variance estimate of
      its own, and max-t's level rests on the candidates sharing one: with 2 candidates, one
      missing a round, max-t covered 93% jointly where Bonferroni covered 95%)."""
    candidates = max(candidates, 1)
    if looks <= 1 and candidates == 1:
        return CONFIDENCE
    shared = candidates == 1 or model_arms >= candidates + 1
    if looks <= 1 and df >= 1 and shared:
        return stats.many_to_one_level(candidates, df)
    if looks > 1 and first_look is not None and first_look >= 2 and shared:
        return stats.repeated_level(candidates, first_look, looks)
    return 1 - (1 - CONFIDENCE) / (looks * candidates)


@dataclass(frozen=True)
class Spread:
    """The start-up spread known from a machine calibration: the residual sd of log(start-up mean
    tok/s) in the arms x rounds model, with its degrees of freedom."""

    sd: float
    df: int
    label: str  # for the output: "this machine's calibration of 2026-12-01 (6 rounds)"


@dataclass(frozen=True)
class Estimate:
    """A speedup, its 95% interval, and the verdict it supports. ``log_se`` and ``df`` make the
    interval at any other confidence (a selection among several arms needs a stricter one).
    ``looks``: how many intervals the run's design could look at before it stopped (1: a fixed
    number of rounds), the first after ``first_look`` rounds (None: unknown, or one look); the
    interval is at ``level()``, so that the one stopped on covers 95%. ``model_arms``: the arms
    (with the baseline) of the fit it came from, whose residual variance it shares (0: unknown)."""

    point: float
    low: float | None = None
    high: float | None = None
    rounds: int = 1
    df: int = 0
    log_se: float | None = None
    source: IntervalSource | None = None
    looks: int = 1
    first_look: int | None = None
    model_arms: int = 0
    # the workload: the prompts the jackknife's term counts (0: none, the interval is about these
    # prompts) and that term's standard error on the log scale (inside ``log_se``)
    prompts: int = 0
    prompt_log_se: float | None = None
    own_spread: bool = False  # the start-up term from this arm's own paired differences
    calibration_refused: bool = False  # the run's residual disagreed with its calibration's
    # the covariate (``harness.derive.covariate``): the share of the prompts' spread it explained,
    # and how far it moved the log point (the sample's mean share to the workload's); None: not used
    covariate_r2: float | None = None
    covariate_shift: float | None = None

    def level(self, candidates: int = 1) -> float:
        """The confidence of each interval behind a 95% claim about this arm as one of
        ``candidates`` (``design_level``)."""
        return design_level(self.looks, candidates, self.df, self.first_look, self.model_arms)

    def bounds(self, confidence: float | None = None) -> tuple[float, float] | None:
        """The t interval at ``confidence`` (by default ``level()``); None without one."""
        confidence = self.level() if confidence is None else confidence
        if self.log_se is None or self.df < 1:
            return (self.low, self.high) if self.low is not None and self.high is not None else None
        half = stats.t_quantile(1 - (1 - confidence) / 2, self.df) * self.log_se
        centre = math.log(self.point)
        return math.exp(centre - half), math.exp(centre + half)

    def selected_from(self, candidates: int, windows: int = 1) -> Estimate:
        """This estimate as the winner of ``candidates`` arms: its interval corrected for the
        selection (the fastest of several arms is biased up; a 95% claim about it is one about
        every candidate at once: ``level(candidates)``); with ``windows`` > 1 (``verdict.familywise``)
        also held over that many windows at once (Bonferroni: each window's error / windows)."""
        if candidates <= 1 and windows <= 1:
            return self
        if self.log_se is None or self.log_se <= 0 or self.df < 1:  # nothing to widen it with
            if self.low is None or self.high is None:
                return self
            return replace(self, low=None, high=None, df=0, log_se=None, source=None)
        level = 1 - (1 - self.level(candidates)) / max(windows, 1)
        low, high = self.bounds(level)  # type: ignore[misc]
        return replace(self, low=low, high=high)

    def ratio_to(self, other: Estimate, confidence: float = CONFIDENCE) -> tuple[float, float] | None:
        """The interval of this speedup over ``other``'s, two estimates from independent runs (two
        points of a study): their log standard errors add, degrees of freedom as ``_combined_df``.
        None where either has no interval."""
        if self.log_se is None or other.log_se is None or self.df < 1 or other.df < 1:
            return None
        parts = [(self.log_se**2, float(self.df)), (other.log_se**2, float(other.df))]
        half = stats.t_quantile(1 - (1 - confidence) / 2, _combined_df(parts)) * math.sqrt(
            sum(v for v, _ in parts)
        )
        centre = math.log(self.point / other.point)
        return math.exp(centre - half), math.exp(centre + half)

    @property
    def verdict(self) -> Verdict:
        """pays / loses: the interval lies above / below 1; equivalent: within the equivalence
        margin of 1; indistinguishable: none of these; unverified: no interval."""
        if self.low is None or self.high is None:
            return "unverified"
        if self.low > 1.0:
            return "pays"
        if self.high < 1.0:
            return "loses"
        if math.log(self.high) <= EQUIVALENCE_MARGIN and math.log(self.low) >= -EQUIVALENCE_MARGIN:
            return "equivalent"
        return "indistinguishable"

    @property
    def prompt_half_pct(self) -> float | None:
        """The prompts' sampling alone, as a 95% half-width in % (normal quantile)."""
        if self.prompt_log_se is None:
            return None
        return 100 * math.expm1(stats.normal_quantile(1 - (1 - CONFIDENCE) / 2) * self.prompt_log_se)

    @property
    def covariate_moved_pct(self) -> float:
        """How far the covariate moved the point, in % (0: not used)."""
        return 100 * math.expm1(self.covariate_shift or 0.0)

    @property
    def decided(self) -> bool:
        return self.verdict in DECIDED

    @property
    def out_of_rounds(self) -> bool:
        """A run that added rounds until decided and used every round its design allowed."""
        last = (self.first_look or 0) + self.looks - 1
        return self.looks > 1 and self.first_look is not None and self.rounds >= last

    def stored(self) -> dict[str, Any]:
        """What a summary stores for it (a cell's, a category's or a ramp span's ``speedup`` and
        ``estimate``), which ``stored_estimate`` reads back."""
        return {
            "speedup": self.point,
            "estimate": SpeedupEstimate(
                low=self.low,
                high=self.high,
                source=self.source,
                rounds=self.rounds,
                df=self.df or None,
                log_se=self.log_se,
                looks=self.looks if self.looks > 1 else None,
                first_look=self.first_look if self.looks > 1 else None,
                model_arms=self.model_arms or None,
                prompts=self.prompts or None,
                prompt_log_se=self.prompt_log_se,
                own_spread=self.own_spread or None,
                calibration_refused=self.calibration_refused or None,
                covariate_r2=self.covariate_r2,
                covariate_shift=self.covariate_shift,
            ),
        }

    def text(self) -> str:
        return estimate_text(self.point, self.low, self.high, self.rounds)


def stored_estimate(
    point: float | None, stored: SpeedupEstimate | None, rounds: int | None = None
) -> Estimate | None:
    """The estimate a summary stored (a record's ``speedup`` and ``estimate``: ``Estimate.stored``),
    never re-computed: every view, the study and the gates show the interval the summary holds; a
    source of an older version is dropped. ``rounds``: where the stored count is absent (an older
    version)."""
    if point is None:
        return None
    found = stored or SpeedupEstimate()
    source = found.source if found.source in get_args(IntervalSource) else None
    return Estimate(
        point=point,
        low=found.low,
        high=found.high,
        rounds=found.rounds or rounds or 1,
        df=found.df or 0,
        log_se=found.log_se,
        source=source,  # type: ignore[arg-type]
        looks=found.looks or 1,
        first_look=found.first_look,
        model_arms=found.model_arms or 0,
        prompts=found.prompts or 0,  # version 13 on (absent in an older summary)
        prompt_log_se=found.prompt_log_se,
        own_spread=bool(found.own_spread),
        calibration_refused=bool(found.calibration_refused),
        covariate_r2=found.covariate_r2,
        covariate_shift=found.covariate_shift,
    )


@dataclass(frozen=True)
class Design:
    """What a cell's interval would need to reach a stated half-width: prompts per window and
    rounds of start-ups (from its own two variance terms, scaled)."""

    prompts: int
    rounds: int
    half_pct: float  # the half-width this run reached (%, on the log scale: exp(half) - 1)
    reachable: bool = True  # False: not within the rounds searched (prompts and rounds then 0)


def design_for(estimate: Estimate, precision_pct: float, most_rounds: int = 12) -> Design | None:
    """The prompts per window and rounds (from the run's own up to ``most_rounds``) whose 95%
    interval would reach +-``precision_pct`` with the fewest requests (rounds x prompts): the
    start-ups' term shrinks with rounds, the prompts' with prompts, each as 1/n (normal quantile:
    about). None without both terms; unreachable where no such design is within the rounds."""
    if estimate.log_se is None or estimate.prompt_log_se is None or not estimate.prompts:
        return None
    target = math.log(1 + precision_pct / 100) / stats.normal_quantile(1 - (1 - CONFIDENCE) / 2)
    prompt_v = estimate.prompt_log_se**2 * estimate.prompts  # per prompt
    startup_v = max(estimate.log_se**2 - estimate.prompt_log_se**2, 0.0) * estimate.rounds  # per round
    half = 100 * math.expm1(stats.t_quantile(1 - (1 - CONFIDENCE) / 2, max(estimate.df, 1)) * estimate.log_se)
    found = []
    for rounds in range(max(estimate.rounds, 2), most_rounds + 1):
        room = target**2 - startup_v / rounds
        if room > 0:
            prompts = max(estimate.prompts, math.ceil(prompt_v / room))
            found.append((rounds * prompts, rounds, prompts))
    if not found:
        return Design(0, 0, half, reachable=False)
    _, rounds, prompts = min(found)
    return Design(prompts, rounds, half)


def rounds_to_decide(estimate: Estimate, candidates: int = 1, most_rounds: int = 20) -> int | None:
    """The fewest rounds in all (more than it has) at which this estimate's interval would exclude
    1, were its point to hold, in a run continued to that many (``bench run --resume RUN --rounds
    N``: its looks from the run's first on, held over ``candidates`` arms, ``design_level``): the
    start-up term shrinks as 1/rounds, the prompts' stays (the same prompts). None: no interval to
    scale, a point at 1, or not within ``most_rounds`` (the prompts' sampling alone is too wide:
    more prompts, a new run)."""
    if estimate.log_se is None or estimate.df < 1 or estimate.point == 1.0:
        return None
    effect = abs(math.log(estimate.point))
    prompt_v = estimate.prompt_log_se**2 if estimate.prompt_log_se is not None else 0.0
    startup_v = max(estimate.log_se**2 - prompt_v, 0.0) * estimate.rounds  # per round
    arms = max(estimate.model_arms, 2)
    first = estimate.first_look or estimate.rounds
    for rounds in range(estimate.rounds + 1, most_rounds + 1):
        parts = [(startup_v / rounds, float((arms - 1) * (rounds - 1)))]
        if estimate.prompts > 1 and prompt_v > 0:
            # the regression estimator's residual has a degree of freedom less than the jackknife's
            fitted = 2 if estimate.covariate_r2 is not None else 1
            parts.append((prompt_v, float(max(estimate.prompts - fitted, 1))))
        df = _combined_df(parts)
        level = design_level(rounds - first + 1, candidates, df, first, arms)
        half = stats.t_quantile(1 - (1 - level) / 2, df) * math.sqrt(sum(v for v, _ in parts))
        if half < effect:
            return rounds
    return None


def _balanced(
    logs: Mapping[str, Mapping[int, float]], arms: list[str], rounds: list[int]
) -> tuple[float, int]:
    """Residual sum of squares and degrees of freedom of the additive model on a complete table."""
    m, n = len(arms), len(rounds)
    arm_mean = {a: sum(logs[a][r] for r in rounds) / n for a in arms}
    round_mean = {r: sum(logs[a][r] for a in arms) / m for r in rounds}
    grand = sum(arm_mean.values()) / m
    ss = sum((logs[a][r] - arm_mean[a] - round_mean[r] + grand) ** 2 for a in arms for r in rounds)
    return ss, (m - 1) * (n - 1)


@dataclass(frozen=True)
class WindowPrompts:
    """One measured window of an arm, as the prompt term reads it: its start-up, its length, and
    per prompt the output tokens its requests produced and the seconds they took."""

    server_start: int
    duration_s: float
    prompts: Mapping[str, tuple[int, float]]

    @cached_property
    def totals(self) -> tuple[int, float]:
        """Its output tokens and its requests' seconds, every prompt's: once, not once per prompt
        the jackknife leaves out."""
        return sum(t for t, _ in self.prompts.values()), sum(b for _, b in self.prompts.values())


PromptTable = Mapping[str, Sequence[WindowPrompts]]  # arm -> its windows in one cell


def _log_point(
    windows: Mapping[str, Sequence[WindowPrompts]],
    arm: str,
    baseline: str,
    rounds: list[int],
    left_out: str | None,
) -> float | None:
    """The cell's estimator on these windows (mean over rounds of the log ratio of the start-ups'
    mean tok/s), with ``left_out``'s tokens and its share of the requests' time taken out of every
    window: at concurrency c the window lasts about the requests' summed time over c, so a prompt's
    share of that sum is its share of the window."""

    def startup_mean(name: str, start: int) -> float | None:
        values = []
        for window in windows[name]:
            if window.server_start != start:
                continue
            tokens, busy = window.totals
            if left_out is not None and left_out in window.prompts:
                own_tokens, own_busy = window.prompts[left_out]
                tokens, kept = tokens - own_tokens, 1 - own_busy / busy if busy > 0 else 1.0
            else:
                kept = 1.0
            if tokens > 0 and window.duration_s * kept > 0:
                values.append(tokens / (window.duration_s * kept))
        return sum(values) / len(values) if values else None

    logs = []
    for start in rounds:
        mine, base = startup_mean(arm, start), startup_mean(baseline, start)
        if mine is None or base is None:
            return None
        logs.append(math.log(mine / base))
    return sum(logs) / len(logs)


@dataclass(frozen=True)
class PromptTerm:
    """The prompts' sampling part of a speedup's log variance, its degrees of freedom and prompts;
    with a covariate, how far it moved the log point (``shift``) and the share of the prompts'
    spread it explained (``r2``)."""

    variance: float
    prompts: int
    df: int
    shift: float | None = None
    r2: float | None = None


def prompt_variance(
    prompts: PromptTable,
    arm: str,
    baseline: str,
    rounds: list[int],
    covariate: Covariates | None = None,
) -> PromptTerm | None:
    """The prompt-sampling variance of the cell's log speedup: the delete-one-prompt jackknife of
    its own estimator over the prompts both arms answered (None with fewer than 2 prompts or
    windows that lack a round). It also holds each prompt's own window-to-window noise, already in
    the start-ups' term: conservative by that much. With a ``covariate`` for every such prompt, the
    regression estimator on the jackknife's pseudo-values (``_regressed``)."""
    if arm not in prompts or baseline not in prompts:
        return None
    answered = [set().union(*(w.prompts for w in prompts[name])) for name in (arm, baseline)]
    common = sorted(answered[0] & answered[1])
    if len(common) < 2:
        return None
    leave_one = [_log_point(prompts, arm, baseline, rounds, p) for p in common]
    whole = _log_point(prompts, arm, baseline, rounds, None)
    if any(v is None for v in leave_one) or whole is None:
        return None
    values = [v for v in leave_one if v is not None]
    count = len(values)
    # pseudo-values: each prompt's own contribution, whose mean is the estimate and whose variance
    # over count is the jackknife's (the same number as (n - 1) / n * the leave-one-outs' spread)
    pseudo = [count * whole - (count - 1) * v for v in values]
    if covariate is not None and count >= FEWEST_PROMPTS and all(p in covariate.values for p in common):
        regressed = _regressed(pseudo, [covariate.values[p] for p in common], covariate.mean, covariate.pool)
        if regressed is not None:
            return regressed
    centre = sum(pseudo) / count
    return PromptTerm(sum((v - centre) ** 2 for v in pseudo) / (count - 1) / count, count, count - 1)


def _regressed(pseudo: Sequence[float], shares: Sequence[float], mean: float, pool: int) -> PromptTerm | None:
    """The regression estimator: the pseudo-values' least-squares line on the prompts' covariate,
    read at the workload's mean covariate; its variance the residual's (prompts - 2 degrees of
    freedom) with the slope's own uncertainty at that distance, times the finite population
    correction 1 - prompts / ``pool``: the workload pass measured every one of the workload's
    ``pool`` prompts, so the interval is about exactly those (None where the covariate does not vary
    over the prompts)."""
    count = len(pseudo)
    x_bar, y_bar = sum(shares) / count, sum(pseudo) / count
    sxx = sum((x - x_bar) ** 2 for x in shares)
    syy = sum((y - y_bar) ** 2 for y in pseudo)
    if sxx <= 0 or syy <= 0:
        return None
    slope = sum((x - x_bar) * (y - y_bar) for x, y in zip(shares, pseudo, strict=True)) / sxx
    residual = syy - slope**2 * sxx
    sampled = max(0.0, 1 - count / pool) if pool else 1.0
    variance = sampled * residual / (count - 2) * (1 / count + (x_bar - mean) ** 2 / sxx)
    return PromptTerm(variance, count, count - 2, -slope * (x_bar - mean), 1 - residual / syy)


def _combined_df(parts: Sequence[tuple[float, float]], confidence: float = CONFIDENCE) -> int:
    """The degrees of freedom of a sum of variance terms ``(variance, df)``: the t whose quantile is
    the geometric mean of Welch-Satterthwaite's and Banerjee's (each term at its own t, in
    quadrature), rounded down. Satterthwaite's alone under-covered (0.91-0.92, 2 rounds and 64
    prompts: a start-up term with 2 df that came out small by chance raised the df to the prompts'
    exactly when the variance was short); Banerjee's alone over-covered (0.975-0.988);
    benchmarks/interval_coverage.py measures this one in every scenario (docs/statistics.md)."""
    total = sum(v for v, _ in parts)
    if total <= 0:
        return 0
    tail = 1 - (1 - confidence) / 2
    welch = max(1.0, stats.satterthwaite_df([(v, df) for v, df in parts if df > 0]))
    banerjee = math.sqrt(sum(stats.t_quantile(tail, df) ** 2 * v for v, df in parts if df > 0) / total)
    target = math.sqrt(stats.t_quantile(tail, welch) * banerjee)
    most = max(1, int(sum(df for _, df in parts)))
    df = 1
    while df < most and stats.t_quantile(tail, df + 1) >= target:
        df += 1
    return df


def _f_larger(variance: float, df: int, reference: float, reference_df: int, alpha: float) -> bool:
    """Is ``variance`` larger than ``reference`` at p < ``alpha`` (one-sided F test)?"""
    from scipy.special import fdtrc  # F's survival function, as scipy.stats.f.sf computes it

    if reference <= 0:
        return variance > 0
    return float(fdtrc(df, reference_df, variance / reference)) < alpha


# a residual variance below this is start-ups that agree to the last digit: copies, not a spread
_COPIES = 1e-20


def _prior_applies(prior_sd: float | None, variance: float) -> bool:
    """Whether the prior on the start-up spread is used for a residual ``variance`` (one start-up's):
    not for copies, and not where the run's own spread exceeds the prior's scale: a day that
    disagrees with the prior gets the plain t interval, so that the prior narrows only intervals
    whose data are compatible with it (at a spread three times the prior's scale it would otherwise
    hold the interval near the prior's: 0.85-0.89 coverage in the model)."""
    return prior_sd is not None and _COPIES < variance <= prior_sd**2


@dataclass(frozen=True)
class _StartupTerm:
    """The start-ups' part of a speedup's variance: the variance of its log point, the degrees of
    freedom, where they came from."""

    variance: float
    df: int
    source: IntervalSource
    own_spread: bool = False
    calibration_refused: bool = False


def _startup_term(
    logs: Mapping[str, Mapping[int, float]],
    arm: str,
    baseline: str,
    rounds: list[int],
    ss: float,
    df: int,
    spread: Spread | None,
    others: list[str],
    prior_sd: float | None = None,
) -> _StartupTerm | None:
    """The arms x rounds model's term; the arm's own paired differences where its spread is the
    larger (``others``: the model's other speculative arms, which it is tested against); the
    calibration pooled unless the run's residual is the larger; without a calibration, the run's own
    residual under a half-normal prior of scale ``prior_sd`` on the start-up spread
    (``stats.halfnormal_posterior_t``; None: the plain t)."""
    n = len(rounds)
    if df > 0 and others and n >= 2:
        differences = [logs[arm][r] - logs[baseline][r] for r in rounds]
        centre = sum(differences) / n
        own = sum((d - centre) ** 2 for d in differences) / (n - 1)
        rest_ss, rest_df = _balanced(logs, [baseline, *others], rounds)
        if own > 0 and _f_larger(own, n - 1, 2 * rest_ss / rest_df, rest_df, OWN_SPREAD_ALPHA):
            if _prior_applies(prior_sd, own / 2):  # sigma^2 of one start-up: half a difference's
                variance, own_df = stats.halfnormal_posterior_t(own * (n - 1) / 2, n - 1, 2 / n, prior_sd)
                return _StartupTerm(variance, own_df, "server_starts+prior", own_spread=True)
            return _StartupTerm(own / n, n - 1, "server_starts", own_spread=True)
    refused = False
    if spread is not None and df > 0:
        refused = _f_larger(ss / df, df, spread.sd**2, spread.df, CALIBRATION_ALPHA)
    if spread is not None and not refused:
        pooled_df = df + spread.df
        variance = (ss + spread.df * spread.sd**2) / pooled_df
        source: IntervalSource = "calibration" if df == 0 else "server_starts+calibration"
    elif df > 0 and _prior_applies(prior_sd, ss / df):
        term, term_df = stats.halfnormal_posterior_t(ss, df, 2 / n, prior_sd)
        return _StartupTerm(term, term_df, "server_starts+prior", calibration_refused=refused)
    elif df > 0:
        pooled_df, variance, source = df, ss / df, "server_starts"
    else:
        return None
    if variance <= 0:  # start-ups that agree to the last digit are copies, not a measured spread
        return None
    return _StartupTerm(2 * variance / n, pooled_df, source, calibration_refused=refused)


def _estimate(
    table: RoundTable,
    logs: Mapping[str, Mapping[int, float]],
    arm: str,
    baseline: str,
    rounds: list[int],
    ss: float,
    df: int,
    spread: Spread | None,
    design: tuple[int, int | None, int],
    others: list[str],
    prompts: PromptTable | None,
    prior_sd: float | None = None,
    covariate: Covariates | None = None,
) -> Estimate:
    looks, first_look, model_arms = design
    n = len(rounds)
    # exp(mean log ratio), as the product of the ratios: one round gives its ratio to the last digit
    point = math.prod(table[arm][r] / table[baseline][r] for r in rounds) ** (1 / n)
    bare = Estimate(point, rounds=n, looks=looks, first_look=first_look, model_arms=model_arms)
    term = _startup_term(logs, arm, baseline, rounds, ss, df, spread, others, prior_sd)
    if term is None:  # no start-up spread known: unverified, whatever the prompts say
        return bare
    if term.own_spread:  # its own two-arm model: a winner's correction cannot lean on a shared variance
        bare = replace(bare, model_arms=2)
    parts = [(term.variance, float(term.df))]
    sampled = prompt_variance(prompts, arm, baseline, rounds, covariate) if prompts else None
    if sampled is not None:
        parts.append((sampled.variance, float(sampled.df)))
    if sampled is not None and sampled.shift is not None:
        bare = replace(bare, point=point * math.exp(sampled.shift), covariate_shift=sampled.shift)
    found = replace(
        bare,
        df=_combined_df(parts) if sampled is not None else term.df,
        log_se=math.sqrt(sum(v for v, _ in parts)),
        source=term.source,
        prompts=sampled.prompts if sampled is not None else 0,
        prompt_log_se=math.sqrt(sampled.variance) if sampled is not None else None,
        own_spread=term.own_spread,
        calibration_refused=term.calibration_refused,
        covariate_r2=sampled.r2 if sampled is not None else None,
    )
    low, high = found.bounds()  # type: ignore[misc]
    return replace(found, low=low, high=high)


def cell_estimates(
    table: RoundTable,
    baseline: str,
    spread: Spread | None = None,
    looks: int = 1,
    first_look: int | None = None,
    prompts: PromptTable | None = None,
    prior_sd: float | None = None,
    covariate: Covariates | None = None,
) -> dict[str, Estimate]:
    """Every arm's speedup against ``baseline`` in one (workload, load level) from its table of
    per-round start-up mean tok/s (``arm -> round -> tok/s``; a non-positive or missing value is
    a start-up that measured nothing). The baseline itself is not in the result. ``looks``: the
    intervals the run's design may look at before it stops (``Load.looks``), the first after
    ``first_look`` rounds (``Load.first_look``). ``prompts``: each arm's windows prompt by prompt,
    for the prompt-sampling term (None: the interval is about these prompts). ``prior_sd``: the scale of
    the half-normal prior on the start-up spread (``verdict.startup_prior_sd``; None: none).
    ``covariate``: the workload's (``harness.derive.covariate``) for the regression estimator."""
    logs = {a: {r: math.log(v) for r, v in by_round.items() if v and v > 0} for a, by_round in table.items()}
    rounds = sorted(logs.get(baseline, {}))
    if not rounds:
        return {}
    others = [a for a in logs if a != baseline and logs[a]]
    complete = [a for a in others if set(rounds) <= set(logs[a])]
    found: dict[str, Estimate] = {}
    if complete:
        ss, df = _balanced(logs, [baseline, *complete], rounds)
        design = (looks, first_look, len(complete) + 1)
        for a in complete:
            rest = [o for o in complete if o != a]
            found[a] = _estimate(
                table, logs, a, baseline, rounds, ss, df, spread, design, rest, prompts, prior_sd, covariate
            )
    for arm in others:
        if arm in found:
            continue
        common = [r for r in rounds if r in logs[arm]]
        if not common:
            continue
        ss, df = _balanced(logs, [baseline, arm], common)
        design = (looks, first_look, 2)
        found[arm] = _estimate(
            table, logs, arm, baseline, common, ss, df, spread, design, [], prompts, prior_sd, covariate
        )
    return found


def arm_spread(tables: list[RoundTable]) -> tuple[float, int] | None:
    """The spread of one arm's log(start-up mean tok/s) across rounds (``(sd, df)``; None when no
    arm has two rounds): the round's drift included, which cancels from a speedup (one round, two
    arms) but not from a comparison of one arm across two runs (a relative gate). Each arm's
    variance over its rounds, averaged over arms and cells; the degrees of freedom are one cell's
    (the fewest): a start-up measures every cell, so the cells are not independent."""
    variances, dfs = [], []
    for table in tables:
        logs = [[math.log(v) for v in t.values() if v and v > 0] for t in table.values()]
        logs = [values for values in logs if len(values) >= 2]
        if not logs:
            continue
        for values in logs:
            centre = sum(values) / len(values)
            variances.append(sum((v - centre) ** 2 for v in values) / (len(values) - 1))
        dfs.append(sum(len(values) - 1 for values in logs))
    return (math.sqrt(sum(variances) / len(variances)), min(dfs)) if variances else None


def residual_spread(tables: list[RoundTable]) -> tuple[float, int] | None:
    """The start-up spread of a calibration: the residual sd of the arms x rounds model over its
    complete cells (``(sd, df)``; None when no cell has two arms and two rounds). The cells'
    variances are averaged, but the degrees of freedom are one cell's (the fewest): every cell of
    a start-up was measured on the same server, so their residuals are not independent."""
    variances, dfs = [], []
    for table in tables:
        logs = {a: {r: math.log(v) for r, v in t.items() if v and v > 0} for a, t in table.items()}
        arms = [a for a in logs if logs[a]]
        if len(arms) < 2:
            continue
        rounds = sorted(set.intersection(*(set(logs[a]) for a in arms)))
        if len(rounds) < 2:
            continue
        ss, df = _balanced(logs, arms, rounds)
        variances.append(ss / df)
        dfs.append(df)
    return (math.sqrt(sum(variances) / len(variances)), min(dfs)) if variances else None


# what the plan assumes of a machine before a run of the regime has measured it: the start-up spread
# this project measured (residual sd of log tok/s, 0.049 on its CPUs with 20 df; 3.5-6% on GPUs)
ASSUMED_STARTUP_SPREAD = 0.05


@dataclass(frozen=True)
class Outlook:
    """What a design is expected to decide, before it runs: an arm at ``effect`` (or 1/effect) is
    decided after ``expected_rounds`` rounds on average (a deciding design stops there), and by its
    last round with chance ``power``; ``cannot`` says why a design can never decide."""

    effect: float
    first: int  # rounds measured before the first look
    most: int  # rounds at most
    expected_rounds: float
    power: float
    cannot: str | None = None

    def minutes(self, round_minutes: float) -> tuple[float, float]:
        """(expected, at most) wall minutes at ``round_minutes`` a round."""
        return self.expected_rounds * round_minutes, self.most * round_minutes


def decision_outlook(
    arms: int,
    prompts: int,
    first: int,
    most: int,
    effect: float,
    spread: float = ASSUMED_STARTUP_SPREAD,
    prompt_spread: float = REFERENCE_PROMPT_SPREAD,
    prior_sd: float | None = None,
    calibration_df: int = 0,
    covariate_r2: float = 0.0,
    pool: int = 0,
) -> Outlook:
    """The outlook of a design of ``arms`` arms (the baseline included), ``prompts`` per window and
    rounds from ``first`` to ``most`` (a fixed design: ``first == most``), at a start-up spread and a
    prompt-to-prompt spread (log sd): at each look the interval's half-width is the t quantile of the
    look's level (``design_level``: the looks and the arms held at once) times the two terms' standard
    error (``_combined_df``'s degrees of freedom; the start-up term under the prior of scale
    ``prior_sd`` at a residual of its expected size, where given), and the chance it lies clear of 1
    is the normal's at the effect; a design stops at its first decided look. ``calibration_df``: a
    calibration of ``spread`` pooled in (its degrees of freedom; no prior then), which gives one
    round an interval; without one, a look at one round has none. ``covariate_r2``: the share of the
    prompt spread a covariate explains (the regression estimator: the rest, prompts - 2 degrees of
    freedom, sampled without replacement from the workload's ``pool`` prompts)."""
    if arms < 2:
        return Outlook(effect, first, most, float(first), 0.0, "no speculative arm to decide")
    if most < 2 and not calibration_df:
        why = "one start-up per arm: the start-up spread is not measured, every verdict unverified"
        return Outlook(effect, first, most, float(most), 0.0, why)
    looks = most - first + 1
    stop_by, expected = 0.0, float(first)
    for rounds in range(first, most + 1):
        residual_df = (arms - 1) * (rounds - 1)
        if residual_df + calibration_df == 0:  # one round, no calibration: no interval at this look
            continue
        startup = (2 * spread**2 / rounds, float(residual_df + calibration_df))
        if prior_sd is not None and not calibration_df:
            variance, df = stats.halfnormal_posterior_t(
                spread**2 * residual_df, residual_df, 2 / rounds, prior_sd
            )
            startup = (variance, float(df))
        parts = [startup, _prompt_part(prompts, prompt_spread, covariate_r2, pool)]
        df = _combined_df(parts)
        level = design_level(looks, arms - 1, df, first if looks > 1 else None, arms)
        quantile = stats.t_quantile(1 - (1 - level) / 2, df)
        z = math.log(effect) / math.sqrt(sum(v for v, _ in parts)) - quantile
        stop_by = max(stop_by, stats.normal_cdf(z))
        if rounds < most:
            expected += 1 - stop_by
    return Outlook(effect, first, most, expected, stop_by)


def _prompt_part(prompts: int, spread: float, covariate_r2: float, pool: int) -> tuple[float, float]:
    """The prompts' term of an outlook, ``(variance, df)``: the jackknife's, or with a covariate the
    regression estimator's (``_regressed``: the unexplained share, prompts - 2 df, the finite
    population correction over the workload's ``pool`` prompts)."""
    if covariate_r2 <= 0 or prompts < FEWEST_PROMPTS:
        return spread**2 / prompts, float(prompts - 1)
    sampled = max(0.0, 1 - prompts / pool) if pool else 1.0
    return sampled * (1 - covariate_r2) * spread**2 / prompts, float(prompts - 2)
