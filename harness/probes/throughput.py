"""Throughput and speedup.

output tok/s = total output tokens of successful requests / window wall time
speedup      = arm tok/s / baseline tok/s, same workload, same prompts, same concurrency

and the speedup's interval, from the repeats when a cell has several (from the server start-ups
when it has several: ``CellMetrics.independent_samples``), else from its requests.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from harness import stats


def output_tokens_per_s(total_output_tokens: int, duration_s: float) -> float | None:
    return total_output_tokens / duration_s if duration_s > 0 and total_output_tokens > 0 else None


def speedup(arm_tok_s: float | None, baseline_tok_s: float | None) -> float | None:
    if arm_tok_s is None or not baseline_tok_s:
        return None
    return arm_tok_s / baseline_tok_s


# Intervals of a speedup (95%, percentile bootstrap, seeded: the same samples give the same interval).
CONFIDENCE = 0.95
RESAMPLES = 2000
MIN_REQUEST_PAIRS = 5  # fewer prompts have too few distinct resamples for a percentile interval


def interval_from_repeats(speedups: Sequence[float], seed: int = 0) -> tuple[float, float] | None:
    """Of the mean of the per-repeat speedups (each repeat against the baseline's same repeat)."""
    if len(speedups) < 2:
        return None
    found = stats.bootstrap_statistic(list(speedups), stats.mean, RESAMPLES, CONFIDENCE, seed)
    return found.low, found.high


def interval_from_requests(
    pairs: Sequence[tuple[int, float, int, float]], point: float, seed: int = 0
) -> tuple[float, float] | None:
    """With one repeat: resample the prompts, each paired with the baseline's same prompt, as
    (arm tokens, arm E2E s, baseline tokens, baseline E2E s). The ratio of the resampled rates
    (tokens / request time, arm over baseline) around the full sample's ratio scales ``point``:
    how much the speedup moves with which prompts happened to be in the window."""
    usable = [p for p in pairs if p[1] > 0 and p[3] > 0]
    if len(usable) < MIN_REQUEST_PAIRS:
        return None

    def ratio(sample: Sequence[tuple[int, float, int, float]]) -> float | None:
        arm_s, base_s = sum(p[1] for p in sample), sum(p[3] for p in sample)
        base_tokens = sum(p[2] for p in sample)
        return (sum(p[0] for p in sample) / arm_s) / (base_tokens / base_s) if base_tokens else None

    full = ratio(usable)
    if not full:
        return None
    rng = random.Random(seed)
    draws = sorted(
        r / full
        for r in (ratio(rng.choices(usable, k=len(usable))) for _ in range(RESAMPLES))
        if r is not None
    )
    tail = (1 - CONFIDENCE) / 2
    return point * stats.quantile(draws, tail), point * stats.quantile(draws, 1 - tail)


@dataclass(frozen=True)
class Estimate:
    """A speedup with its 95% interval (``low``/``high`` None when neither the repeats nor the
    requests give one) and the verdict it supports: it pays only when the whole interval is above 1."""

    point: float
    low: float | None
    high: float | None
    n: int

    @property
    def verdict(self) -> Literal["pays", "loses", "indistinguishable", "unknown"]:
        if self.low is None or self.high is None:
            return "unknown" if self.point == 1.0 else ("pays" if self.point > 1.0 else "loses")
        if self.low > 1.0:
            return "pays"
        if self.high < 1.0:
            return "loses"
        return "indistinguishable"

    def text(self) -> str:
        interval = (
            f" [{self.low:.2f}, {self.high:.2f}]" if self.low is not None and self.high is not None else ""
        )
        return f"{self.point:.2f}x{interval}" + ("" if interval or self.n > 1 else " (1 repeat, no interval)")
