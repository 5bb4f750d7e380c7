"""What a regime allows speculation (derive layer: pure): the cost of a speculative step, the
acceptance a drafter must reach to pay, and a speedup predicted from a drafter's acceptance.

The seed's formula, speedup ~ tokens per step / relative step cost, split into its two measured
factors (docs/cost-model.md):

- **Step cost.** A window's time over the engine's own count of its steps (vLLM's tokens-per-step
  histogram: ``SpecCounters.engine_steps``) is its mean step; the arm's step over the baseline's at
  the same window is the relative step cost ``c``, measured directly, never inferred from the
  speedup. Its interval is the speedup's model (``harness.derive.intervals``: arms x rounds on the log of
  each start-up's mean steps per second), so a one-start-up run's cost is unverified, as its speedup
  is. It is about these prompts: steps are counted per window, not per prompt.
- **Yield.** The arm's output tokens per engine step over the baseline's in the same window, ``Y``:
  the speedup is ``Y / c``, exactly, per window. A request's step yields ``1 + p (tau - 1)`` tokens
  (``p``: the share of its steps in which the drafter proposed; 1 for a model drafter; ngram's
  steps with no match draft nothing); ``Y`` is that times the batch's occupancy ``o``, measured as
  their ratio: 1 at concurrency 1 but for the prefill steps, below 1 where accepted drafts make the
  requests of a batch finish unevenly and its steps run part-empty.
- **Break-even acceptance.** The step pays where ``Y > c``: the drafter must reach
  ``tau* = 1 + (c / o - 1) / p`` at this load. Named apart from a study's break-even *concurrency*.
- **Cost over K.** Per method (and drafter) and window, ``c(K) = a + b K`` by weighted least
  squares over the K values run (scipy's ``curve_fit``, each point weighted by its own interval),
  the covariance scaled up where the points scatter more than their intervals allow.
- **Prediction.** A chain drafter's (ngram, a draft model, EAGLE-3, MTP) first K' < K positions
  are what it would propose at K', so the marginal per-position acceptance measured at K gives
  tau at every K' below it: ``1 + sum of the first K' marginals``. The share of tokens decoded
  where the drafter proposed is held at the measured arm's (``token_share``: the share of steps
  falls as K grows, the share of tokens is the text's); with ``c(K')`` from the fit, the predicted
  speedup is ``o / ((1 - s) + s / tau) / c(K')``, ``o`` and ``s`` the measured arm's.
  Never up in K (positions never measured), never for a block drafter (DFlash drafts K tokens at
  once: each K needs its own measurement). Where K' was run, the prediction is checked against
  it: the fit leaves that arm out, and the measured speedup must fall within the two intervals'
  combined spread at 95%.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from harness.config.level import LoadLevel
from harness.config.methods import names
from harness.core import stats
from harness.derive.intervals import CONFIDENCE, Estimate, cell_estimates
from harness.results.model import CellMetrics, SpeedupEstimate, Summary

# drafters whose proposal at K' < K is the first K' tokens of their proposal at K
CHAIN_METHODS = frozenset(names("chain"))
# the measured tau against the break-even interval; never "pays" or "loses", which are the verdict's:
# the step cost's interval is about these prompts, the verdict's speedup about the workload
Outcome = Literal["clears it", "falls short", "too close to tell", "unverified"]


@dataclass(frozen=True)
class StepCost:
    """One speculative cell's step against the baseline's in the same window."""

    arm: str
    method: str
    k: int | None
    drafter: str | None
    workload: str
    level: LoadLevel
    step_ms: float  # the arm's mean engine step
    baseline_step_ms: float
    cost: float  # relative step cost: the geometric mean over rounds of arm step / baseline step
    low: float | None  # its 95% interval; None: unverified (one round)
    high: float | None
    log_se: float | None
    df: int
    tau: float | None  # as the engine counts drafts (its draft_counting)
    tokens_per_step: float | None  # per request step (probes.acceptance.TOKENS_PER_FORWARD)
    proposing_share: float | None  # of request steps where the drafter proposed (1: every step)
    # output tokens per engine step over the baseline's (the speedup is yield / cost), and that over
    # tokens_per_step: how full the batch's steps ran against the baseline's
    yield_per_step: float
    occupancy: float | None
    break_even_tau: float | None  # 1 + (cost / occupancy - 1) / share: where the step would break even
    break_even_low: float | None
    break_even_high: float | None
    outcome: Outcome  # the measured tau against the break-even interval
    # its acceptance was forced (synthetic verification, ``forced``): its own line over K, and
    # nothing is predicted from it
    forced: bool = False

    @property
    def label(self) -> str:
        return f"{self.arm} {self.workload} {self.level.short()}"


@dataclass(frozen=True)
class CostLine:
    """c(K) = intercept + slope K for one method and drafter in one window (weighted least
    squares over its arms' costs); ``cov``: (var a, cov ab, var b), already scaled for lack of fit."""

    method: str
    drafter: str | None
    workload: str
    level: LoadLevel
    ks: tuple[int, ...]
    intercept: float
    slope: float
    cov: tuple[float, float, float] | None  # None: some point had no interval
    df: int  # of the points' intervals (the least of them)

    def at(self, k: int) -> tuple[float, float | None]:
        """c at ``k`` and its standard error (None: unverified)."""
        cost = self.intercept + self.slope * k
        if self.cov is None:
            return cost, None
        var_a, cov_ab, var_b = self.cov
        return cost, math.sqrt(max(0.0, var_a + 2 * k * cov_ab + k * k * var_b))


@dataclass(frozen=True)
class Prediction:
    """A speedup at K, predicted from ``source``'s per-position acceptance and the cost line; where
    K was run, beside what was measured."""

    source: str  # the arm whose acceptance it comes from (a larger K)
    method: str
    k: int
    workload: str
    level: LoadLevel
    tau: float
    tokens_per_step: float
    cost: float
    speedup: float
    low: float | None  # 95%; None: the cost line is unverified
    high: float | None
    log_se: float | None
    df: int
    leave_one_out: bool  # the cost line left the measured arm out (a check), or used every arm
    measured_arm: str | None = None
    measured_speedup: float | None = None
    measured_low: float | None = None
    measured_high: float | None = None
    measured_tau: float | None = None
    inside: bool | None = None  # the measured speedup is consistent with the prediction (None: untested)


@dataclass(frozen=True)
class CostModel:
    """A run's step costs, the cost lines over K and the predictions (empty where no engine counted
    its steps)."""

    costs: tuple[StepCost, ...] = ()
    lines: tuple[CostLine, ...] = ()
    predictions: tuple[Prediction, ...] = ()

    def cost_of(self, cell: CellMetrics) -> StepCost | None:
        return next(
            (c for c in self.costs if (c.arm, c.workload, c.level) == (cell.arm, cell.workload, cell.level)),
            None,
        )

    def checks(self) -> tuple[Prediction, ...]:
        return tuple(p for p in self.predictions if p.inside is not None)


def proposing_share(cell: CellMetrics) -> float | None:
    """Drafts per request step: 1 where the drafter proposes at every step (or the engine counts
    every step a draft), less for ngram steps that found no match. Request steps: decoded tokens
    less the accepted drafts, as ``TOKENS_PER_FORWARD`` counts them."""
    steps = (cell.output_tokens - cell.requests_ok) - cell.accepted_tokens
    if steps <= 0 or cell.drafts <= 0:
        return None
    return min(1.0, cell.drafts / steps)


def break_even_tau(cost: float, share: float, occupancy: float = 1.0) -> float:
    """The tau at which ``occupancy (1 + share (tau - 1))`` tokens per step pay for a step costing
    ``cost``; 1 where any acceptance pays (tau is never below 1)."""
    return max(1.0, 1.0 + (cost / occupancy - 1.0) / share)


def token_share(share: float, tau: float) -> float:
    """Of a request's tokens, the share decoded in steps where the drafter proposed: with a share
    ``share`` of its steps proposing and emitting ``tau`` tokens each (the others 1), ``share tau /
    (1 + share (tau - 1))``. A property of the text (its copied stretches, for ngram) more than of K:
    a longer acceptance crosses a copied stretch in fewer steps, so the share of *steps* falls as K
    grows (0.35 at K = 1 to 0.23 at K = 8 on the recorded CPU run) while this one holds."""
    return share * tau / (1.0 + share * (tau - 1.0))


def tokens_per_request_step(share_of_tokens: float, tau: float) -> float:
    """Tokens per request step when ``share_of_tokens`` of them come ``tau`` to a step and the rest
    one to a step: the inverse of ``token_share``, 1 + p (tau - 1) at the share of steps p."""
    return 1.0 / ((1.0 - share_of_tokens) + share_of_tokens / tau)


def yield_per_step(cell: CellMetrics, base: CellMetrics) -> float | None:
    """Output tokens per engine step, the arm's over the baseline's."""
    if not (cell.engine_step_count and base.engine_step_count and base.output_tokens):
        return None
    return (cell.output_tokens / cell.engine_step_count) / (base.output_tokens / base.engine_step_count)


def _outcome(tau: float | None, low: float | None, high: float | None) -> Outcome:
    if tau is None or low is None or high is None:
        return "unverified"
    if tau > high:
        return "clears it"
    if tau < low:
        return "falls short"
    return "too close to tell"


def _cost(cell: CellMetrics, base: CellMetrics, estimate: Estimate, acceptance_forced: bool) -> StepCost:
    """The step-rate ratio's estimate turned into a cost (its reciprocal) and a break-even tau."""
    cost = 1.0 / estimate.point
    low, high = (1.0 / estimate.high, 1.0 / estimate.low) if estimate.low and estimate.high else (None, None)
    share, produced = proposing_share(cell), yield_per_step(cell, base)
    # o is Y over the model's own tokens per request step, 1 + p (tau - 1), so that o (1 + p (tau - 1))
    # is Y exactly at the measured tau and tau > tau* means Y > c. Not over tokens_per_forward: that
    # counts the streamed steps and leaves out the drafts accepted past a request's stop, which tau
    # and p count (ACCEPTED_PAST_STOP); with them the break-even and the predictions read high.
    per_step = 1.0 + share * (cell.tau - 1.0) if share and cell.tau is not None else None
    occupancy = produced / per_step if produced and per_step else None
    be = be_low = be_high = None
    if share and occupancy:
        be = break_even_tau(cost, share, occupancy)
        if low is not None and high is not None:
            be_low, be_high = break_even_tau(low, share, occupancy), break_even_tau(high, share, occupancy)
    assert cell.step_ms is not None and base.step_ms is not None and produced is not None
    return StepCost(
        arm=cell.arm,
        method=cell.method,
        k=cell.num_speculative_tokens,
        drafter=cell.drafter,
        workload=cell.workload,
        level=cell.level,
        step_ms=cell.step_ms,
        baseline_step_ms=base.step_ms,
        cost=cost,
        low=low,
        high=high,
        log_se=estimate.log_se,
        df=estimate.df,
        tau=cell.tau,
        tokens_per_step=cell.tokens_per_forward,
        proposing_share=share,
        yield_per_step=produced,
        occupancy=occupancy,
        break_even_tau=be,
        break_even_low=be_low,
        break_even_high=be_high,
        outcome=_outcome(cell.tau, be_low, be_high),
        forced=acceptance_forced,
    )


def step_costs(summary: Summary) -> list[StepCost]:
    """Every speculative cell's relative step cost, per window, from its start-ups' step rates."""
    found = []
    for workload, level in summary.window_keys():
        base = summary.cell(summary.baseline_arm, workload, level)
        if base is None or base.step_ms is None or not base.output_tokens:
            continue  # no baseline tokens (every request failed): no yield to set a cost against
        cells = [c for c in summary.cells if (c.workload, c.level) == (workload, level) and c.step_ms]
        table = {c.arm: c.startup_step_rate() for c in cells}
        estimates = cell_estimates(table, summary.baseline_arm)
        for cell in cells:
            estimate = estimates.get(cell.arm)
            if cell.arm != summary.baseline_arm and estimate is not None:
                found.append(_cost(cell, base, estimate, forced(summary, cell.arm)))
    return found


def _fit(points: Sequence[StepCost]) -> tuple[float, float, tuple[float, float, float] | None, bool]:
    """c = a + b K over the points, each weighted by its own interval where all have one; the last:
    the covariance was scaled by the residuals (its degrees of freedom are then the fit's, n - 2)."""
    from scipy.optimize import curve_fit

    ks = [float(p.k or 0) for p in points]
    cs = [p.cost for p in points]
    ses = [p.cost * p.log_se if p.log_se else None for p in points]
    if len(points) == 2:  # the line through both: no residual to fit against
        (k0, k1), (c0, c1) = ks, cs
        slope = (c1 - c0) / (k1 - k0)
        intercept = c0 - slope * k0
        if None in ses:
            return intercept, slope, None, False
        s0, s1 = ses  # a linear map of two independent points
        d = k1 - k0
        var_b = (s0**2 + s1**2) / d**2
        var_a = (k1 / d) ** 2 * s0**2 + (k0 / d) ** 2 * s1**2
        cov_ab = -(k1 * s0**2 + k0 * s1**2) / d**2
        return intercept, slope, (var_a, cov_ab, var_b), False
    weighted = None not in ses
    (a, b), pcov = curve_fit(
        lambda k, a, b: a + b * k,
        ks,
        cs,
        sigma=ses if weighted else None,
        absolute_sigma=weighted,
    )
    if not weighted:
        return float(a), float(b), None, False
    residual = sum(((c - a - b * k) / s) ** 2 for k, c, s in zip(ks, cs, ses, strict=True))  # type: ignore[operator]
    scale = max(1.0, residual / (len(points) - 2))  # points scattered beyond their intervals: wider
    var_a, cov_ab, var_b = (float(v) * scale for v in (pcov[0][0], pcov[0][1], pcov[1][1]))
    return float(a), float(b), (var_a, cov_ab, var_b), scale > 1.0


def cost_line(points: Sequence[StepCost]) -> CostLine | None:
    """The line over K of one method's costs in one window; None below two distinct K values."""
    points = [p for p in points if p.k]
    if len({p.k for p in points}) < 2:
        return None
    intercept, slope, cov, scaled = _fit(points)
    df = min(p.df for p in points)
    first = points[0]
    return CostLine(
        method=first.method,
        drafter=first.drafter,
        workload=first.workload,
        level=first.level,
        ks=tuple(sorted(p.k for p in points if p.k)),
        intercept=intercept,
        slope=slope,
        cov=cov,
        df=min(df, len(points) - 2) if scaled else df,  # a scale from the residuals has n - 2
    )


def _family(cost: StepCost) -> tuple[str, str | None, str, LoadLevel, bool]:
    """The arms one line over K is fitted through: a forced acceptance is never mixed with a real one."""
    return cost.method, cost.drafter, cost.workload, cost.level, cost.forced


def _predict(
    source: CellMetrics, top: StepCost, k: int, line: CostLine, leave_one_out: bool
) -> Prediction | None:
    """``top``'s acceptance cut to ``k`` positions, at its occupancy and its share of tokens decoded
    where the drafter proposed (``token_share``)."""
    marginal = source.per_position_acceptance[:k]
    cost, cost_se = line.at(k)
    if len(marginal) < k or cost <= 0 or not top.proposing_share or not top.occupancy or top.tau is None:
        return None
    tau = 1.0 + sum(marginal)
    per_step = tokens_per_request_step(token_share(top.proposing_share, top.tau), tau)
    speedup = top.occupancy * per_step / cost
    log_se = cost_se / cost if cost_se is not None else None
    # the t interval on the log scale, as every speedup's (intervals.Estimate.bounds)
    bounds = Estimate(speedup, df=line.df, log_se=log_se).bounds(CONFIDENCE) if log_se is not None else None
    low, high = bounds if bounds is not None else (None, None)
    return Prediction(
        source=source.arm,
        method=source.method,
        k=k,
        workload=source.workload,
        level=source.level,
        tau=tau,
        tokens_per_step=per_step,
        cost=cost,
        speedup=speedup,
        low=low,
        high=high,
        log_se=log_se,
        df=line.df,
        leave_one_out=leave_one_out,
    )


def _checked(prediction: Prediction, cell: CellMetrics) -> Prediction:
    """Beside the arm that ran at its K: consistent where the log difference lies within the two
    standard errors' combined 95% t interval (the smaller of their degrees of freedom)."""
    inside, stored = None, cell.estimate or SpeedupEstimate()
    if prediction.log_se is not None and stored.log_se and cell.speedup and stored.df:
        se = math.hypot(prediction.log_se, stored.log_se)
        df = min(prediction.df, stored.df)
        t = abs(math.log(cell.speedup / prediction.speedup)) / se
        inside = t <= stats.t_quantile(1 - (1 - CONFIDENCE) / 2, df)
    return replace(
        prediction,
        measured_arm=cell.arm,
        measured_speedup=cell.speedup,
        measured_low=stored.low,
        measured_high=stored.high,
        measured_tau=cell.tau,
        inside=inside,
    )


def forced(summary: Summary, arm: str) -> bool:
    """The arm's acceptance was forced (synthetic verification): it measures a step's cost at a
    chosen acceptance, never a drafter's, so nothing is predicted from it or said of its K."""
    from harness.config.engines.vllm import LOSSY_REJECTION  # on use: adapters are imported lazily

    found = summary.arm(arm)
    return found is not None and found.verification in LOSSY_REJECTION


def predictions(summary: Summary, costs: Sequence[StepCost]) -> list[Prediction]:
    """Per chain method, drafter and window: from its arm with the largest K, the speedup at every
    K below it; each K that ran is checked against a cost line fitted without it."""
    families: dict[tuple[str, str | None, str, LoadLevel, bool], list[StepCost]] = {}
    for cost in costs:
        if cost.method in CHAIN_METHODS and cost.k and not cost.forced:
            families.setdefault(_family(cost), []).append(cost)
    found = []
    for members in families.values():
        top = max(members, key=lambda c: c.k or 0)
        source = summary.cell(top.arm, top.workload, top.level)
        if source is None or not source.per_position_acceptance:
            continue
        every = cost_line(members)
        for k in range(1, top.k or 0):
            ran = next((c for c in members if c.k == k), None)
            line = cost_line([c for c in members if c.k != k]) if ran else every
            if line is None:
                continue
            prediction = _predict(source, top, k, line, leave_one_out=ran is not None)
            if prediction is None:
                continue
            cell = summary.cell(ran.arm, ran.workload, ran.level) if ran else None
            found.append(_checked(prediction, cell) if cell is not None else prediction)
    return found


def cost_model(summary: Summary) -> CostModel:
    costs = step_costs(summary)
    families: dict[tuple[str, str | None, str, LoadLevel, bool], list[StepCost]] = {}
    for cost in costs:
        families.setdefault(_family(cost), []).append(cost)
    lines = [line for members in families.values() if (line := cost_line(members)) is not None]
    return CostModel(tuple(costs), tuple(lines), tuple(predictions(summary, costs)))
