"""The nights a run is gated against: the history's earlier runs of the same regime fingerprint on
the same machine (never across either), the last ``nights`` of them, and per cell and metric each
night's start-up samples.

A night is summarised by the geometric mean of its start-up samples (the arithmetic mean where a
value is not positive). Gating a run against the nights before it (``history_check``) asks where a
new night's summary would fall if nothing changed: a t prediction interval from the earlier
nights' summaries,

    centre +- t(1 - alpha/2, N - 1) x s x sqrt(1 + 1/N)        (N nights, s their sd; log scale)

which holds the start-up spread, the window noise and the drift from night to night at once, as
the nights measured them, so no single lucky night is the reference. Pure: DataFrames in.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from harness import stats
from harness.history.entry import HistoryRun

DEFAULT_NIGHTS = 14  # the rolling window: the last two weeks of nightly runs
MIN_NIGHTS = 5  # fewer comparable nights: no prediction interval worth the name (the gate says so)


@dataclass(frozen=True)
class Nights:
    """The comparable earlier nights of one run, and their samples."""

    run_ids: list[str]  # oldest first
    first: str | None  # when the oldest started, for the message
    last: str | None
    samples: pd.DataFrame  # the history's samples of those runs

    def values(
        self, arm: str, workload: str, concurrency: int, request_rate: float | None, metric: str
    ) -> list[list[float]]:
        """Per night (oldest first), that cell's start-up samples of ``metric`` (nights without any
        left out)."""
        frame = self.samples
        mask = (
            (frame.arm == arm)
            & (frame.workload == workload)
            & (frame.concurrency == concurrency)
            & (frame.metric == metric)
            & (frame.request_rate.isna() if request_rate is None else frame.request_rate == request_rate)
        )
        chosen = frame[mask]
        return [
            list(chosen[chosen.run_id == run].sort_values("sample").value)
            for run in self.run_ids
            if (chosen.run_id == run).any()
        ]


def comparable_nights(
    runs: pd.DataFrame, samples: pd.DataFrame, run: HistoryRun, nights: int = DEFAULT_NIGHTS
) -> Nights:
    """The last ``nights`` runs before ``run`` with its regime fingerprint and machine key."""
    same = runs[
        (runs.regime_fingerprint == run.regime_fingerprint)
        & (runs.machine_key == run.machine_key)
        & (runs.run_id != run.run_id)
        & (runs.started_at < pd.Timestamp(run.started_at))
    ].sort_values(["started_at", "run_id"])
    chosen = list(same.run_id)[-nights:]
    kept = same[same.run_id.isin(chosen)]
    return Nights(
        chosen,
        str(kept.started_at.min())[:16] if chosen else None,
        str(kept.started_at.max())[:16] if chosen else None,
        samples[samples.run_id.isin(chosen)],
    )


def night_summary(values: Sequence[float], positive: bool) -> float:
    """A night's value on the scale the interval is built on: the mean log (positive metrics)."""
    return stats.mean([math.log(v) for v in values]) if positive else stats.mean(list(values))


@dataclass(frozen=True)
class Prediction:
    """Where a night's summary should fall if nothing changed (log scale for positive metrics)."""

    centre: float
    half: float  # the prediction interval's half-width
    nights: int
    positive: bool

    def change(self, summary: float) -> float:
        """The night against the nights' centre: relative (positive) or absolute."""
        return math.exp(summary - self.centre) - 1 if self.positive else summary - self.centre

    def bounds(self) -> tuple[float, float]:
        """The interval as changes against the centre (-x..+y)."""
        if self.positive:
            return math.exp(-self.half) - 1, math.exp(self.half) - 1
        return -self.half, self.half


def prediction(nights: Sequence[Sequence[float]], confidence: float) -> Prediction | None:
    """The prediction interval from the earlier nights' summaries; None with fewer than 2."""
    nights = [n for n in nights if n]
    if len(nights) < 2:
        return None
    positive = min(v for n in nights for v in n) > 0
    summaries = [night_summary(n, positive) for n in nights]
    count = len(summaries)
    centre = stats.mean(summaries)
    sd = math.sqrt(sum((s - centre) ** 2 for s in summaries) / (count - 1))
    half = stats.t_quantile(1 - (1 - confidence) / 2, count - 1) * sd * math.sqrt(1 + 1 / count)
    return Prediction(centre, half, count, positive)
