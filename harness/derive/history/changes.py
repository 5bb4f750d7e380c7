"""Change points in the nightly history: where a series (regime fingerprint x machine x arm x cell x
metric, one value per night) stepped, found by Apache Otava's E-Divisive means (the Hunter
algorithm: Fleming et al., ICPE 2023; ``otava.analysis.compute_change_points``), not by anything
written here.

A night's value is the geometric mean of its start-up samples (the arithmetic mean where a value
is not positive), as the history gate summarises it. For each change point: the night it appeared,
the step (the mean after against the mean before, between the neighbouring change points) with a
95% t interval on the log ratio of the two segments (``stats.log_ratio_interval``; the difference's
where a value is not positive), Otava's p-value, and what else changed that night against the night
before (engine version, patches, the harness's commit, the engine's). Pure: DataFrames in.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

from harness.core import stats
from harness.derive.history.reference import night_summary

MAX_PVALUE = 0.001  # Otava's default significance (and its E-Divisive permutations' floor is 1/100)
WINDOW = 30  # Otava's sliding window: a step is judged against at most this many nights around it
MIN_NIGHTS = 6  # fewer nights in a series: no change point is looked for
# what is compared with the night before, to say what else changed that night
CONTEXT = ("engine_version", "engine_patches", "harness_commit", "engine_commit")
SERIES = ["regime_fingerprint", "machine_key", "arm", "workload", "concurrency", "request_rate", "metric"]


@dataclass(frozen=True)
class SeriesKey:
    """What one series of nights is: never mixed across regimes, machines, arms, cells or metrics."""

    regime: str
    regime_fingerprint: str
    machine_key: str
    arm: str
    workload: str
    concurrency: int
    request_rate: float | None
    metric: str

    @classmethod
    def of(cls, row: Any, regime: str) -> SeriesKey:
        """The key of a row of the history's samples."""
        rate = None if pd.isna(row.request_rate) else float(row.request_rate)
        return cls(
            regime, str(row.regime_fingerprint), str(row.machine_key), str(row.arm), str(row.workload),
            int(row.concurrency), rate, str(row.metric),
        )  # fmt: skip

    @property
    def cell(self) -> str:
        load = f"@{self.concurrency}" if self.request_rate is None else f"@{self.request_rate:g}req/s"
        return f"{self.workload} {load}"

    def where(self) -> str:
        return f"{self.arm} {self.cell} {self.metric}"


@dataclass(frozen=True)
class ChangePoint:
    series: SeriesKey
    run_id: str  # the first night after the step
    started_at: str
    before: float  # the segment's mean night value before the step
    after: float
    change: float  # after / before - 1 (after - before where a value is not positive)
    low: float  # 95% interval of the change
    high: float
    pvalue: float  # Otava's
    nights_before: int
    nights_after: int
    what_changed: list[str]  # "engine_version: vllm 0.32.0 -> 0.33.0", ... ([]: nothing recorded changed)

    def where(self) -> str:
        return self.series.where()


def _what_changed(runs: pd.DataFrame, before: str, after: str) -> list[str]:
    rows = runs.set_index("run_id")
    out = []
    for field in CONTEXT:
        a, b = rows.at[before, field], rows.at[after, field]
        if field == "engine_patches":
            a, b = ", ".join(json.loads(a)) or "none", ", ".join(json.loads(b)) or "none"
        if pd.notna(a) and pd.notna(b) and a != b:
            out.append(f"{field}: {a} -> {b}")
    if "env" in rows:  # the engine-relevant variables set outside the regime (recorded from schema 2)
        a, b = rows.at[before, "env"], rows.at[after, "env"]
        if isinstance(a, str) and isinstance(b, str):
            old, new = json.loads(a), json.loads(b)
            out += [
                f"env {name}: {old.get(name, 'unset')} -> {new.get(name, 'unset')}"
                for name in sorted(set(old) | set(new))
                if old.get(name) != new.get(name)
            ]
    return out


def _step(before: list[float], after: list[float]) -> tuple[float, float, float]:
    """The change from ``before`` to ``after`` with its 95% interval (t on the log ratio)."""
    if min(*before, *after) > 0 and len(before) + len(after) > 2:
        found = stats.log_ratio_interval(before, after)
    else:
        found = stats.difference_interval(before, after)
    return found.point, found.low, found.high


def series_changes(nights: pd.DataFrame, runs: pd.DataFrame) -> list[ChangePoint]:
    """One series' change points (``nights``: its rows of the history's samples, one series)."""
    from otava.analysis import compute_change_points  # imported on use: only this module needs it

    order = nights.groupby("run_id").started_at.min().sort_values()
    run_ids = list(order.index)
    if len(run_ids) < MIN_NIGHTS:
        return []
    positive = bool((nights.value > 0).all())
    values = [night_summary(list(nights[nights.run_id == r].value), positive) for r in run_ids]
    series = [math.exp(v) if positive else v for v in values]  # the night's geometric (or plain) mean
    found, _ = compute_change_points(series, window_len=WINDOW, max_pvalue=MAX_PVALUE)
    key = SeriesKey.of(nights.iloc[0], str(runs.set_index("run_id").at[run_ids[0], "regime"]))
    edges = [0, *(cp.index for cp in found), len(series)]
    out = []
    for number, point in enumerate(found, start=1):
        before, after = series[edges[number - 1] : point.index], series[point.index : edges[number + 1]]
        change, low, high = _step(before, after)
        out.append(
            ChangePoint(
                series=key,
                run_id=run_ids[point.index],
                started_at=str(order.iloc[point.index])[:16],
                before=stats.mean(before),
                after=stats.mean(after),
                change=change,
                low=low,
                high=high,
                pvalue=float(point.stats.pvalue),
                nights_before=len(before),
                nights_after=len(after),
                what_changed=_what_changed(runs, run_ids[point.index - 1], run_ids[point.index]),
            )
        )
    return out


def change_points(
    samples: pd.DataFrame, runs: pd.DataFrame, metrics: list[str] | None = None
) -> list[ChangePoint]:
    """Every series' change points, oldest first (``metrics``: only those)."""
    chosen = samples if metrics is None else samples[samples.metric.isin(metrics)]
    out: list[ChangePoint] = []
    for _, nights in chosen.groupby(SERIES, dropna=False, sort=True):
        out += series_changes(nights, runs)
    return sorted(out, key=lambda c: (c.started_at, c.where()))
