"""The nights a run is gated against: the history's earlier runs of the same regime fingerprint on
the same machine (never across either), from the latest accepted change on (``bench history
accept``), and per cell and metric each night's start-up samples.

A night is summarised by the geometric mean of its start-up samples (the arithmetic mean where a
value is not positive). Gating a run against the nights before it (``judge_series``) asks where a
new night's summary, or the mean of the last ``k`` nights' (``WINDOWS``), would fall if nothing
changed: a t prediction interval from the reference nights' summaries,

    centre +- t(1 - alpha/2, N - 1) x s x sqrt(1/k + 1/N)        (N nights, s their sd; log scale)

which holds the start-up spread, the window noise and the drift from night to night at once, as
the nights measured them, so no single lucky night is the reference. The reference is the last
``reference`` GOOD nights: a night that failed its own check (judged the same way against the good
nights before it), and every night of a failing mean of 3, is what is in question, not evidence
of normal, so a regression that persists keeps failing instead of becoming the band it is judged
by (until ``bench history accept`` takes it as the new normal). The mean of the last 3 nights sees a
persisting step with 1/sqrt(3) of a night's noise; it fails only when every one of those nights
lies on the worse side of the centre, so one bad night does not make the next two fail with it.
Pure: DataFrames and lists in.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from harness import stats
from harness.history.entry import HistoryRun
from harness.metrics import METRICS

DEFAULT_NIGHTS = 14  # the rolling reference: the last two weeks of good nightly runs
MIN_NIGHTS = 5  # fewer reference nights: no prediction interval worth the name (the gate says so)
# a night alone (a large step, at once) and the mean of tonight and the two nights before it (a step
# that persists, with 1/sqrt(3) of a night's noise)
WINDOWS = (1, 3)


@dataclass(frozen=True)
class Nights:
    """The comparable earlier nights of one run, and their samples."""

    run_ids: list[str]  # oldest first: every comparable night since the latest accepted change
    first: str | None  # when the oldest started, for the message
    last: str | None
    samples: pd.DataFrame  # the history's samples of those runs
    reference: int = DEFAULT_NIGHTS  # the good nights a check's reference holds at most
    accepted: str | None = None  # when the accepted change the nights start at started
    # (run id, workload, concurrency, request rate) of cells some arm measured beside a busy neighbour
    noisy: frozenset[tuple[str, str, int, float | None]] = frozenset()

    def values(
        self, arm: str, workload: str, concurrency: int, request_rate: float | None, metric: str
    ) -> list[list[float]]:
        """Per night (oldest first), that cell's start-up samples of ``metric`` (nights without any
        left out, and for a timed metric nights whose cell, this arm's or another's it is compared
        with, was measured beside a busy neighbour: not the engine's numbers alone)."""
        frame = self.samples
        timed = METRICS[metric].timed
        rate = None if request_rate is None or pd.isna(request_rate) else float(request_rate)
        mask = (
            (frame.arm == arm)
            & (frame.workload == workload)
            & (frame.concurrency == concurrency)
            & (frame.metric == metric)
            & (frame.request_rate.isna() if request_rate is None else frame.request_rate == request_rate)
        )
        chosen = frame[mask]
        kept = [r for r in self.run_ids if not (timed and (r, workload, concurrency, rate) in self.noisy)]
        return [
            list(chosen[chosen.run_id == run].sort_values("sample").value)
            for run in kept
            if (chosen.run_id == run).any()
        ]


def comparable_nights(
    runs: pd.DataFrame,
    samples: pd.DataFrame,
    run: HistoryRun,
    nights: int = DEFAULT_NIGHTS,
    accepted: pd.DataFrame | None = None,
    cells: pd.DataFrame | None = None,
) -> Nights:
    """Every run before ``run`` with its regime fingerprint and machine key, from the latest change
    accepted for them (``accepted``: the history's ``accepted`` rows) on; the gate's reference is the
    last ``nights`` good ones among them (``judge_series``)."""
    same = runs[
        (runs.regime_fingerprint == run.regime_fingerprint)
        & (runs.machine_key == run.machine_key)
        & (runs.run_id != run.run_id)
        & (runs.started_at < pd.Timestamp(run.started_at))
    ].sort_values(["started_at", "run_id"])
    since = accepted_since(accepted, run, same)
    if since is not None:
        same = same[same.started_at >= since]
    chosen = list(same.run_id)
    return Nights(
        chosen,
        str(same.started_at.min())[:16] if chosen else None,
        str(same.started_at.max())[:16] if chosen else None,
        samples[samples.run_id.isin(chosen)],
        nights,
        str(since)[:16] if since is not None else None,
        noisy_cells(cells, chosen),
    )


def noisy_cells(cells: pd.DataFrame | None, run_ids: list[str]) -> frozenset:
    """The (run, workload, concurrency, rate) cells of ``run_ids`` some arm measured beside a busy
    neighbour (``cells.noisy_neighbour``; unknown for runs added before schema 2)."""
    if cells is None or cells.empty or "noisy_neighbour" not in cells:
        return frozenset()
    flagged = cells[cells.run_id.isin(run_ids) & (cells.noisy_neighbour.fillna(False).astype(bool))]
    return frozenset(
        (r.run_id, r.workload, int(r.concurrency), None if pd.isna(r.request_rate) else float(r.request_rate))
        for r in flagged.itertuples()
    )


def accepted_since(
    accepted: pd.DataFrame | None, run: HistoryRun, earlier: pd.DataFrame
) -> pd.Timestamp | None:
    """When the latest change accepted for ``run``'s fingerprint and machine (before it) started."""
    if accepted is None or accepted.empty:
        return None
    mine = accepted[
        (accepted.regime_fingerprint == run.regime_fingerprint)
        & (accepted.machine_key == run.machine_key)
        & (accepted.started_at < pd.Timestamp(run.started_at))
    ]
    return None if mine.empty else mine.started_at.max()


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


def prediction(
    summaries: Sequence[float], positive: bool, confidence: float, window: int = 1
) -> Prediction | None:
    """Where the mean of ``window`` new nights' summaries falls if nothing changed, from the
    reference nights' summaries; None with fewer than 2."""
    count = len(summaries)
    if count < 2:
        return None
    centre = stats.mean(list(summaries))
    sd = math.sqrt(sum((s - centre) ** 2 for s in summaries) / (count - 1))
    half = stats.t_quantile(1 - (1 - confidence) / 2, count - 1) * sd * math.sqrt(1 / window + 1 / count)
    return Prediction(centre, half, count, positive)


@dataclass(frozen=True)
class WindowCheck:
    """Tonight's summary (``window`` 1) or the mean of the last ``window`` nights' against the good
    nights before them."""

    window: int
    prediction: Prediction
    change: float  # against the reference's centre: relative (positive metrics) or absolute
    edge: float  # the band's edge on the worse side, as a change (positive: worse)
    failed: bool


@dataclass(frozen=True)
class Judgement:
    """Tonight's window checks (those with ``MIN_NIGHTS`` reference nights or more) and which earlier
    nights were good (the reference could draw on them)."""

    checks: list[WindowCheck]
    good: list[bool]  # per earlier night, oldest first

    @property
    def failed(self) -> WindowCheck | None:
        """The first failing check (the night alone before the mean of 3), None when none fails."""
        return next((c for c in self.checks if c.failed), None)

    @property
    def tonight(self) -> WindowCheck | None:
        """The night alone (what the band and the change of a pass describe)."""
        return next((c for c in self.checks if c.window == 1), None)


def _checks(
    summaries: list[float],
    good: list[int],
    index: int,
    positive: bool,
    limit: float,
    higher_is_better: bool,
    confidence: float,
    reference: int,
    windows: Sequence[int] = WINDOWS,
    minimum: int = MIN_NIGHTS,
) -> list[WindowCheck]:
    """Night ``index``'s window checks against the last ``reference`` good nights before each window
    (a window with fewer than ``minimum`` of them is not checked)."""
    out = []
    for window in windows:
        start = index - window + 1
        if start < 0:
            continue
        before = [summaries[g] for g in good if g < start][-reference:]
        if len(before) < minimum:
            continue
        found = prediction(before, positive, confidence, window)
        assert found is not None
        nights = summaries[start : index + 1]
        sign = -1.0 if higher_is_better else 1.0  # worse is positive
        change = found.change(stats.mean(nights))
        low, high = found.bounds()
        edge = -low if higher_is_better else high
        worse = sign * change
        every = all(sign * (n - found.centre) > 0 for n in nights)  # each night on the worse side
        out.append(WindowCheck(window, found, change, edge, worse > edge and worse > limit and every))
    return out


def judge_series(
    nights: Sequence[Sequence[float]],
    tonight: Sequence[float],
    limit: float,
    higher_is_better: bool,
    confidence: float,
    reference: int = DEFAULT_NIGHTS,
) -> Judgement | None:
    """Tonight's values (start-up samples) against the earlier ``nights`` (oldest first; nights
    without a value left out): each earlier night is judged in turn against the good nights before
    it (the first ``MIN_NIGHTS`` are good unjudged), then tonight. ``limit``: the largest change
    that is not a regression (relative, 0.05 for 5%; absolute for a metric that may be 0). None
    when fewer than 2 nights have values or a value is 0 where logs are taken."""
    earlier = [list(n) for n in nights if n]
    if len(earlier) < 2 or not tonight:
        return None
    positive = min(v for n in earlier for v in n) > 0
    if positive and min(tonight) <= 0:
        return None  # a 0 tonight where the nights had none: no log scale to compare on
    summaries = [night_summary(n, positive) for n in [*earlier, list(tonight)]]
    good: list[int] = []
    for index in range(len(earlier)):
        checks = _checks(summaries, good, index, positive, limit, higher_is_better, confidence, reference)
        failed = [c.window for c in checks if c.failed]
        if failed:  # every night of a failing mean is in question (of a failing night alone, itself)
            window = 1 if 1 in failed else max(failed)
            good = [g for g in good if g <= index - window]
        else:
            good.append(index)
    if len(good) < 2:
        return None
    tonight_at = len(earlier)
    checks = _checks(summaries, good, tonight_at, positive, limit, higher_is_better, confidence, reference)
    if not checks:  # fewer than MIN_NIGHTS good nights: the night alone against what there is
        checks = _checks(
            summaries, good, tonight_at, positive, limit, higher_is_better, confidence, reference, (1,), 2
        )
    return Judgement(checks, [i in good for i in range(len(earlier))])
