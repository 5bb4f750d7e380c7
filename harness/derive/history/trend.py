"""The history's series as the trend page draws them (``bench history report``): per regime
fingerprint, machine, arm, cell and metric, one point per night with its interval, the band a
night with no change falls in (``reference.prediction`` over the last 14 nights, at the level
``bench gate --history`` holds one check to), the change points (``changes``), and the open
regressions: series whose latest change point went the worse way for the metric. Pure:
DataFrames in.

A night's speedup is the one its run stored (the arms x rounds model's estimate and interval, as
its ``bench show`` printed it: the history's ``cells``), never recomputed here; other metrics have
no stored interval, so theirs is a 95% t interval over the night's start-up samples."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from harness.core import stats
from harness.core.metrics import METRICS
from harness.derive.history.changes import SERIES, ChangePoint, SeriesKey, change_points
from harness.derive.history.gate import NIGHT_FALSE_ALARM
from harness.derive.history.reference import DEFAULT_NIGHTS, MIN_NIGHTS, night_summary, prediction

# the level of the band: ``bench gate --history`` fails a night alone at 1 - 2 x 1% / (checks x 2
# windows) two-sided, so one check's band is 99%; a night with more checks is held to a wider one
BAND_CONFIDENCE = 1 - NIGHT_FALSE_ALARM

DEFAULT_METRICS = ("output_tok_s", "speedup", "tau", "tpot_ms_p50")


@dataclass(frozen=True)
class Night:
    run_id: str
    started_at: str
    value: float  # the night's geometric (or plain) mean over its start-ups; a speedup: the stored one
    low: float | None  # its 95% interval (a speedup: the stored one; None without)
    high: float | None


@dataclass(frozen=True)
class Series:
    key: SeriesKey
    nights: list[Night]
    band: tuple[float, float] | None  # where tonight's value falls if nothing changed, at BAND_CONFIDENCE
    changes: list[ChangePoint] = field(default_factory=list)

    def open_regression(self) -> ChangePoint | None:
        """The latest change point, when it made the metric worse."""
        if not self.changes:
            return None
        latest = self.changes[-1]
        better = METRICS[self.key.metric].higher_is_better
        return latest if (latest.change < 0) == better else None


def _night(run_id: str, started: str, values: list[float]) -> Night:
    positive = min(values) > 0
    centre = night_summary(values, positive)
    if len(values) < 2:
        value = math.exp(centre) if positive else centre
        return Night(run_id, started, value, None, None)
    scale = [math.log(v) for v in values] if positive else values
    sd = math.sqrt(sum((v - centre) ** 2 for v in scale) / (len(scale) - 1))
    half = stats.t_quantile(0.975, len(scale) - 1) * sd / math.sqrt(len(scale))
    back = math.exp if positive else (lambda v: v)
    return Night(run_id, started, back(centre), back(centre - half), back(centre + half))


def _stored(run_id: str, started: str, cell: pd.DataFrame) -> Night | None:
    """A night's speedup as its run stored it (the history's cells)."""
    if cell.empty or pd.isna(cell.speedup.iloc[0]):
        return None
    row = cell.iloc[0]
    low, high = row.speedup_low, row.speedup_high
    bounds = (None, None) if pd.isna(low) or pd.isna(high) else (float(low), float(high))
    return Night(run_id, started, float(row.speedup), *bounds)


def _band(values: list[list[float]]) -> tuple[float, float] | None:
    """Where a night with no change falls at ``BAND_CONFIDENCE`` (the gate's level for one check),
    from the last ``DEFAULT_NIGHTS`` nights (all of them: the page shows the series as it is; the
    gate's own reference leaves failed nights out). None below ``MIN_NIGHTS`` nights, where the gate
    itself draws none: two nights' t interval is wide enough to flatten the series into a line."""
    nights = [v for v in values[-DEFAULT_NIGHTS:] if v]
    if len(nights) < MIN_NIGHTS:
        return None
    positive = min((x for v in nights for x in v), default=0) > 0
    found = prediction([night_summary(v, positive) for v in nights], positive, BAND_CONFIDENCE)
    if found is None:
        return None
    if found.positive:
        return math.exp(found.centre - found.half), math.exp(found.centre + found.half)
    return found.centre - found.half, found.centre + found.half


def trend_series(
    samples: pd.DataFrame, runs: pd.DataFrame, cells: pd.DataFrame, metrics: list[str] | None = None
) -> list[Series]:
    """Every series of ``metrics`` (default: ``DEFAULT_METRICS``) with its nights, band and changes;
    a speedup's nights from ``cells`` (the history's stored estimates), where a run stored one."""
    wanted = list(metrics or DEFAULT_METRICS)
    chosen = samples[samples.metric.isin(wanted)]
    # the baseline's speedup is itself against itself, 1.0 every night: no series to watch
    chosen = chosen[~((chosen.metric == "speedup") & (chosen.method == "baseline"))]
    points = change_points(chosen, runs)
    regimes = runs.set_index("run_id").regime
    out = []
    for _, rows in chosen.groupby(SERIES, dropna=False, sort=True):
        order = rows.groupby("run_id").started_at.min().sort_values()
        per_night = [list(rows[rows.run_id == r].sort_values("sample").value) for r in order.index]
        key = SeriesKey.of(rows.iloc[0], str(regimes.get(order.index[0], "")))
        nights = []
        for run_id, values in zip(order.index, per_night, strict=True):
            started = str(order[run_id])[:16]
            stored = _stored(run_id, started, _cell(cells, run_id, key)) if key.metric == "speedup" else None
            nights.append(stored or _night(run_id, started, values))
        out.append(Series(key, nights, _band(per_night), [p for p in points if p.series == key]))
    order_of = {m: i for i, m in enumerate(wanted)}
    return sorted(
        out,
        key=lambda s: (
            s.key.regime_fingerprint,
            s.key.machine_key,
            s.key.arm,
            order_of.get(s.key.metric, 99),
            s.key.cell,
        ),
    )


def _cell(cells: pd.DataFrame, run_id: str, key: SeriesKey) -> pd.DataFrame:
    """The history's stored row of one run's cell."""
    if cells.empty:
        return cells
    rate = cells.request_rate.isna() if key.request_rate is None else cells.request_rate == key.request_rate
    return cells[
        (cells.run_id == run_id)
        & (cells.arm == key.arm)
        & (cells.workload == key.workload)
        & (cells.concurrency == key.concurrency)
        & rate
    ]
