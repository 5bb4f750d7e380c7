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

from harness.core import stats
from harness.core.metrics import METRICS
from harness.results.history.entry import HistoryRun

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
    accepted for them (``accepted``: the history's ``accepted`` rows) on, but a run whose own gate
    was inconclusive with a check's point beyond its limit (``runs.gate_outcome`` "inconclusive":
    ``night_outcome``; an accepted run is kept); the gate's reference is the
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
    if "gate_outcome" in same:  # a night with a suspected regression is no evidence of normal
        taken = set(accepted.run_id) if accepted is not None and not accepted.empty else set()
        same = same[(same.gate_outcome.fillna("") != "inconclusive") | same.run_id.isin(taken)]
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


# fewer reference nights: their lag-1 autocorrelation is not estimated (taken as 0)
MIN_AUTOCORRELATION_NIGHTS = 5
# where the nights' lag-1 autocorrelation is at least this, the gate's message says so
SAID_AUTOCORRELATION = 0.3


@dataclass(frozen=True)
class Prediction:
    """Where a night's summary should fall if nothing changed (log scale for positive metrics).
    ``autocorrelation``: the reference nights' lag-1 autocorrelation the band was widened for (0:
    none seen), ``effective``: the independent nights the reference is worth at it."""

    centre: float
    half: float  # the prediction interval's half-width
    nights: int
    positive: bool
    autocorrelation: float = 0.0
    effective: float = 0.0

    def change(self, summary: float) -> float:
        """The night against the nights' centre: relative (positive) or absolute."""
        return math.exp(summary - self.centre) - 1 if self.positive else summary - self.centre

    def bounds(self) -> tuple[float, float]:
        """The interval as changes against the centre (-x..+y)."""
        if self.positive:
            return math.exp(-self.half) - 1, math.exp(self.half) - 1
        return -self.half, self.half


def _ar1_terms(count: int, window: int, rho: float) -> tuple[float, float]:
    """Under AR(1) nights with lag-1 correlation ``rho`` and unit variance: the variance of the
    reference's mean (``count`` nights), and of the difference between the mean of the ``window``
    nights that follow and it."""
    if rho <= 0:
        return 1 / count, 1 / window + 1 / count
    ref, new = range(count), range(count, count + window)
    corr = [rho**lag for lag in range(count + window)]
    v_ref = sum(corr[abs(i - j)] for i in ref for j in ref) / count**2
    v_new = sum(corr[abs(i - j)] for i in new for j in new) / window**2
    shared = sum(corr[abs(i - j)] for i in new for j in ref) / (window * count)
    return v_ref, v_new + v_ref - 2 * shared


def prediction(
    summaries: Sequence[float], positive: bool, confidence: float, window: int = 1
) -> Prediction | None:
    """Where the mean of ``window`` new nights' summaries falls if nothing changed, from the
    reference nights' summaries (oldest first); None with fewer than 2. The one band of the gate
    and the trend page.

    A t prediction interval, centre +- t x s x sqrt(1/k + 1/N), made to hold for the nights
    nightly machines give (simulated in benchmarks/history_gate.py --simulate):

    - serially correlated nights (a slow drift: AR(1)): with the reference's lag-1 autocorrelation
      r (from ``MIN_AUTOCORRELATION_NIGHTS`` on; 0 where negative), s^2 is corrected for its bias,
      1/k + 1/N becomes the AR(1) variance of the k nights' mean less the reference's, and the t's
      degrees of freedom are the effective nights' less one. r is not corrected for its own
      downward bias: corrected and clipped at 0, independent nights got r > 0 half the time and
      the -10% step was found within 3 nights in 8-10 points fewer series;
    - heavy-tailed nights (a night effect like a t with 3 df, or a night in 15 shifted 8%): the
      night alone is held to the quantile of a t(3) of the same sd (``stats.heavy_tail_factor``:
      1.53 x at one check's 0.25%); the mean of 3 nights, which must also have every night on the
      worse side, keeps the t's (its tails are lighter, and it is what finds a persisting step).
      A robust scale (the MAD) would do the reverse: shifted nights in the reference are what
      widens the band for the next one."""
    count = len(summaries)
    if count < 2:
        return None
    centre = stats.mean(list(summaries))
    sd = math.sqrt(sum((s - centre) ** 2 for s in summaries) / (count - 1))
    found = stats.lag1_autocorrelation(list(summaries)) if count >= MIN_AUTOCORRELATION_NIGHTS else None
    rho = min(max(found or 0.0, 0.0), 0.9)
    v_ref, factor = _ar1_terms(count, window, rho)
    scale = sd * math.sqrt((count - 1) / (count * (1 - v_ref)))  # E[s^2] = sigma^2 (N - N v_ref) / (N - 1)
    effective = 1 / v_ref
    p = 1 - (1 - confidence) / 2
    quantile = stats.t_quantile(p, round(max(1.0, effective - 1), 2))
    if window == 1:
        quantile *= stats.heavy_tail_factor(round(p, 6))
    return Prediction(centre, quantile * scale * math.sqrt(factor), count, positive, rho, effective)


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
