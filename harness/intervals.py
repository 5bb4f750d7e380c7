"""The interval policy of a speedup: the one place that says which samples an interval comes from,
at what confidence, and what it then supports (derive layer: pure, no I/O).

A cell's 95% interval (percentile bootstrap, seeded: the same samples give the same interval):

1. from its independent samples when it has two or more: one per server start-up when the arm's
   server started more than once (the mean of that start-up's repeats), else one per repeat
   (``CellMetrics.independent_samples``), each against the baseline's same repeat;
2. else, with one window, from its requests: prompts resampled in pairs with the baseline's same
   prompt (at least ``MIN_REQUEST_PAIRS`` of them);
3. else none: the verdict then says "unknown"/"1 repeat, no interval".

The run's summary stores the interval with its source; every view and the study read that stored
interval (they never resample again), so a run and a study of it always agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from harness import stats

CONFIDENCE = 0.95
RESAMPLES = 2000
MIN_REQUEST_PAIRS = 5  # fewer prompts have too few distinct resamples for a percentile interval

IntervalSource = Literal["server_starts", "repeats", "requests"]
RequestPair = tuple[int, float, int, float]  # (arm tokens, arm E2E s, baseline tokens, baseline E2E s)


def interval_from_repeats(speedups: Sequence[float], seed: int = 0) -> tuple[float, float] | None:
    """Of the mean of the per-repeat speedups (each repeat against the baseline's same repeat)."""
    if len(speedups) < 2:
        return None
    found = stats.bootstrap_statistic(list(speedups), stats.mean, RESAMPLES, CONFIDENCE, seed)
    return found.low, found.high


def interval_from_requests(
    pairs: Sequence[RequestPair], point: float, seed: int = 0
) -> tuple[float, float] | None:
    """With one repeat: resample the prompts, each paired with the baseline's same prompt. The
    ratio of the resampled rates (tokens / request time, arm over baseline) around the full
    sample's ratio scales ``point``: how much the speedup moves with which prompts happened to be
    in the window."""
    usable = [p for p in pairs if p[1] > 0 and p[3] > 0]
    if len(usable) < MIN_REQUEST_PAIRS:
        return None

    def ratio(sample: Sequence[RequestPair]) -> float | None:
        arm_s, base_s = sum(p[1] for p in sample), sum(p[3] for p in sample)
        base_tokens = sum(p[2] for p in sample)
        return (sum(p[0] for p in sample) / arm_s) / (base_tokens / base_s) if base_tokens else None

    full = ratio(usable)
    if not full:
        return None

    def relative(sample: Sequence[RequestPair]) -> float | None:
        drawn = ratio(sample)
        return None if drawn is None else drawn / full

    low, high = stats.bootstrap([usable], relative, RESAMPLES, seed).bounds(CONFIDENCE)
    return point * low, point * high


@dataclass(frozen=True)
class SpeedupInterval:
    low: float
    high: float
    source: IntervalSource


def speedup_interval(
    point: float, independent: Sequence[float], server_starts: int, request_pairs: Sequence[RequestPair]
) -> SpeedupInterval | None:
    """The policy above: ``independent`` are the cell's per-start-up (``server_starts`` > 1) or
    per-repeat speedups, ``request_pairs`` its requests paired with the baseline's."""
    found = interval_from_repeats(independent)
    if found is not None:
        return SpeedupInterval(*found, "server_starts" if server_starts > 1 else "repeats")
    found = interval_from_requests(request_pairs, point)
    return SpeedupInterval(*found, "requests") if found is not None else None


@dataclass(frozen=True)
class Estimate:
    """A speedup with its 95% interval (``low``/``high`` None when the policy gives none) and the
    verdict it supports: it pays only when the whole interval is above 1."""

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
