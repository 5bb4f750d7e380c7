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

Per statistic, a two-sided Mann-Whitney test (p-value) and Cliff's delta (effect size, -1..1).
Verdict per arm, at a Bonferroni-corrected level alpha / 3:

    shifted                     some statistic differs significantly AND |delta| >= min_effect
    consistent with lossless    no statistic differs significantly, with at least min_samples a side
    inconclusive                otherwise (too few samples, or significant but below min_effect)

The engine reports logprobs from the target's own logits (vLLM's default raw_logprobs), so the
same statistic means the same thing for every arm. The pass asks for 2 top logprobs: vLLM lists the
sampled token first, then the top-k, and its chat API keeps the first k entries, so the top-1 is
always among the two.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from harness.stats import mann_whitney_two_sided, median

if TYPE_CHECKING:  # a formula knows the record's shape, not the store
    from harness.results.records import RequestRecord

STATISTICS = ("mean_logprob", "output_tokens", "top1_share")


@dataclass(frozen=True)
class SequenceStats:
    mean_logprob: float | None
    output_tokens: float
    top1_share: float | None


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
    )


@dataclass(frozen=True)
class StatisticTest:
    statistic: str
    n_baseline: int
    n_arm: int
    baseline_median: float | None
    arm_median: float | None
    p_value: float | None
    delta: float | None  # Cliff's delta, arm vs baseline


def compare(baseline: Sequence[SequenceStats], arm: Sequence[SequenceStats]) -> list[StatisticTest]:
    tests = []
    for name in STATISTICS:
        a = [v for s in baseline if (v := getattr(s, name)) is not None]
        b = [v for s in arm if (v := getattr(s, name)) is not None]
        p, delta = mann_whitney_two_sided(b, a) if a and b else (None, None)
        tests.append(
            StatisticTest(name, len(a), len(b), median(a) if a else None, median(b) if b else None, p, delta)
        )
    return tests


def verdict(tests: Sequence[StatisticTest], alpha: float, min_effect: float, min_samples: int) -> str:
    level = alpha / len(STATISTICS)
    significant = [t for t in tests if t.p_value is not None and t.p_value < level]
    if any(abs(t.delta or 0.0) >= min_effect for t in significant):
        return "shifted"
    enough = all(min(t.n_baseline, t.n_arm) >= min_samples for t in tests)
    if not significant and enough:
        return "consistent with lossless"
    return "inconclusive"
