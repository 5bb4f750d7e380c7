"""Is sampling at temperature > 0 still lossless? A distribution check, not a token diff.

At temperature > 0, "lossless" means the speculative arm samples from the same distribution as the
target alone, not that it emits the same tokens. Each arm answers every prompt N times with seeds
seed, seed + 1, ... (an unmeasured pass after its windows, asking for the sampled tokens'
logprobs), and three per-sequence statistics that a lossy acceptance shifts are compared with the
baseline's:

    mean logprob      the mean log probability of the sampled tokens under the target (accepting
                      drafts the target would rarely sample lowers it)
    output length     tokens generated (a lossy rule changes where answers stop)
    top-1 share       the share of sampled tokens that were the target's most likely token

Per statistic, Cliff's delta (arm against baseline, -1..1) is computed within each prompt and
combined, each prompt weighted by its pairs (harness.core.stats.stratified_cliffs_delta): prompts differ
far more from one another than a lossy rule shifts one prompt's answers, so only within-prompt
comparisons count (an arm that lost some of one prompt's samples is not "shifted" by the mix of
prompts). Its variance is Cliff's unbiased estimator within each prompt, summed: chosen over a
bootstrap within prompts because with the default 6 samples a side a within-prompt bootstrap
underestimates the variance by about a sixth, and because it is deterministic and scales as
1 / samples, which gives the samples that would decide an open verdict in closed form. The
interval is the normal one, delta +- z se (an approximation: it wants a dozen prompts or more).

Verdict per arm, Bonferroni over the three statistics (each at alpha / 3):

    shifted                     some statistic differs significantly (two-sided, at alpha / 3) AND
                                |delta| >= min_effect
    consistent with lossless    an equivalence test (TOST at alpha / 3, i.e. the 1 - 2 alpha / 3
                                interval) puts every statistic's delta inside (-margin, margin), with
                                at least min_samples a side
    inconclusive: about N more samples per side would decide it
                                otherwise; N is where the interval's half-width, shrinking as
                                1 / sqrt(samples), would fit inside the margin around the observed
                                delta (or min_samples is reached)
    inconclusive: cannot decide at this margin
                                an observed |delta| already at or beyond the margin, not significant:
                                no sample size shows equivalence there (nor one over MAX_SCALE times
                                the samples there are, for a delta just inside it)
    inconclusive: too few samples per prompt
                                a statistic without any prompt answered twice on both sides

The samples of two arms share their seeds; they are treated as independent (speculation consumes
the random stream differently). Positive correlation would only make the interval wider than it
needs to be.

The engine reports logprobs from the target's own logits (vLLM's default raw_logprobs), so the
same statistic means the same thing for every arm. The pass asks for 2 top logprobs: vLLM lists the
sampled token first, then the top-k, and its chat API keeps the first k entries, so the top-1 is
always among the two.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from harness.core.stats import median, normal_quantile, normal_two_sided_p, stratified_cliffs_delta

if TYPE_CHECKING:  # a formula knows the record's shape, not the store
    from harness.results.records import RequestRecord

STATISTICS = ("mean_logprob", "output_tokens", "top1_share")

CONSISTENT = "consistent with lossless"
SHIFTED = "shifted"
INCONCLUSIVE = "inconclusive"
OUTCOMES = (CONSISTENT, SHIFTED, INCONCLUSIVE)

# An observed delta just inside the margin asks for samples without bound (the room left shrinks to
# zero): beyond a hundred times the samples there are, the margin is the problem, not the samples.
MAX_SCALE = 100.0


@dataclass(frozen=True)
class SequenceStats:
    mean_logprob: float | None
    output_tokens: float
    top1_share: float | None
    stratum: tuple[str, ...] = ()  # (workload, prompt id): samples are compared within it


def sequence_stats(sample: RequestRecord) -> SequenceStats:
    """The three statistics of one sampled answer, from its token ids and the top logprobs the engine
    returned per position (the sampled token's own logprob is among them, as vLLM returns it)."""
    sampled, top1 = [], []
    for token, position in zip(sample.token_ids, sample.top_logprobs, strict=False):
        if not position:
            continue
        by_id = dict(position)
        if token in by_id:
            sampled.append(by_id[token])
        best = max(position, key=lambda entry: entry[1])[0]
        top1.append(1.0 if best == token else 0.0)
    return SequenceStats(
        mean_logprob=sum(sampled) / len(sampled) if sampled else None,
        output_tokens=float(sample.output_tokens),
        top1_share=sum(top1) / len(top1) if top1 else None,
        stratum=(sample.workload, sample.prompt_id),
    )


@dataclass(frozen=True)
class StatisticTest:
    statistic: str
    n_baseline: int  # values compared: those of prompts with two or more on both sides
    n_arm: int
    baseline_median: float | None
    arm_median: float | None
    p_value: float | None  # two-sided, of the stratified delta; None: no prompt to compare
    delta: float | None  # Cliff's delta, arm vs baseline, within prompts, combined
    low: float | None  # its 1 - 2 alpha / 3 interval: the equivalence test's
    high: float | None
    prompts: int  # prompts compared
    # samples per side at which the interval's half-width would fit inside the margin around the
    # observed delta; None: |delta| already at or beyond the margin, or no interval
    needed_per_side: int | None

    @property
    def side(self) -> float:
        """Samples per side, as the variance sees them (the two sides' mean)."""
        return (self.n_baseline + self.n_arm) / 2

    def equivalent(self, margin: float) -> bool:
        return self.low is not None and self.high is not None and -margin < self.low and self.high < margin


def _strata(samples: Sequence[SequenceStats], name: str) -> dict[tuple[str, ...], list[float]]:
    by: dict[tuple[str, ...], list[float]] = {}
    for sample in samples:
        if (value := getattr(sample, name)) is not None:
            by.setdefault(sample.stratum, []).append(value)
    return by


def confidence(alpha: float) -> float:
    """The equivalence interval's confidence: TOST at alpha / 3 per statistic (Bonferroni over the
    three), one-sided each way, is the 1 - 2 alpha / 3 interval inside the margin."""
    return 1 - 2 * alpha / len(STATISTICS)


def tost_z(alpha: float) -> float:
    """The equivalence interval's critical value."""
    return normal_quantile(1 - (1 - confidence(alpha)) / 2)


def compare(
    baseline: Sequence[SequenceStats], arm: Sequence[SequenceStats], alpha: float, margin: float
) -> list[StatisticTest]:
    """Each statistic's stratified Cliff's delta (arm against baseline), its two-sided p-value, its
    equivalence interval at ``alpha`` and the samples per side that would fit it inside ``margin``."""
    z = tost_z(alpha)
    tests = []
    for name in STATISTICS:
        mine, theirs = _strata(arm, name), _strata(baseline, name)
        shared = [k for k in theirs if len(theirs[k]) >= 2 and len(mine.get(k, ())) >= 2]
        estimate = stratified_cliffs_delta([(mine[k], theirs[k]) for k in shared])
        a = [v for k in shared for v in theirs[k]]
        b = [v for k in shared for v in mine[k]]
        if estimate is None:
            tests.append(StatisticTest(name, 0, 0, None, None, None, None, None, None, 0, None))
            continue
        d, se = estimate.delta, estimate.se
        p = normal_two_sided_p(d / se) if se > 0 else float(d == 0)
        side = (len(a) + len(b)) / 2
        room = margin - abs(d)
        # the half-width z se shrinks as 1 / sqrt(samples): it fits room at side (z se / room)^2
        needed = math.ceil(side * (z * se / room) ** 2) if room > 0 else None
        tests.append(
            StatisticTest(
                statistic=name,
                n_baseline=len(a),
                n_arm=len(b),
                baseline_median=median(a),
                arm_median=median(b),
                p_value=p,
                delta=d,
                low=max(-1.0, d - z * se),
                high=min(1.0, d + z * se),
                prompts=estimate.strata,
                needed_per_side=needed,
            )
        )
    return tests


@dataclass(frozen=True)
class Decision:
    outcome: str  # one of OUTCOMES
    reason: str | None = None  # inconclusive: why, when no sample size is named
    more_per_side: int | None = None  # inconclusive: samples per side to add that would decide it
    scale: float | None = None  # ... as the factor the samples grow by (samples_per_prompt x scale)

    def text(self) -> str:
        """The verdict as the terminal and the report print it (short: it sits inside a sentence)."""
        if self.outcome != INCONCLUSIVE:
            return self.outcome
        if self.more_per_side is not None:
            return f"{INCONCLUSIVE}: about {self.more_per_side} more samples per side would decide it"
        return f"{INCONCLUSIVE}: {self.reason}"

    def samples_per_prompt(self, current: int) -> int | None:
        """The regime's samples_per_prompt that would decide it; None: no sample size would."""
        return None if self.scale is None else math.ceil(current * self.scale)


def verdict(
    tests: Sequence[StatisticTest], alpha: float, margin: float, min_effect: float, min_samples: int
) -> Decision:
    """One arm's verdict from its three statistics (the rules in the module's docstring)."""
    level = alpha / len(STATISTICS)
    significant = [t for t in tests if t.p_value is not None and t.p_value < level]
    if any(abs(t.delta or 0.0) >= min_effect for t in significant):
        return Decision(SHIFTED)
    if any(t.delta is None for t in tests):
        return Decision(INCONCLUSIVE, reason="too few samples per prompt")
    open_tests = [t for t in tests if not t.equivalent(margin)]
    short = [t for t in tests if min(t.n_baseline, t.n_arm) < min_samples]
    if not open_tests and not short:
        return Decision(CONSISTENT)
    # the statistic that needs the most decides; min_samples is a floor on every side
    targets = [(t.side, t.needed_per_side) for t in open_tests]
    targets += [(float(min(t.n_baseline, t.n_arm)), min_samples) for t in short]
    scale = max(math.inf if target is None else target / now for now, target in targets)
    if scale > MAX_SCALE:
        return Decision(INCONCLUSIVE, reason="cannot decide at this margin")
    more = max(max(1, math.ceil(target - now)) for now, target in targets if target is not None)
    return Decision(INCONCLUSIVE, more_per_side=more, scale=max(scale, 1.0))
