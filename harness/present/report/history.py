"""`bench history report`: the nightly history as one self-contained HTML page (no scripts, nothing
fetched): per regime fingerprint and machine, per arm and metric, the nights with their intervals,
the band a night with no change falls in, the change points marked and annotated with what else
changed that night, and the table of open regressions."""

from __future__ import annotations

from itertools import groupby
from pathlib import Path
from typing import Any

import pandas as pd

from harness.core.metrics import METRICS
from harness.derive.history.changes import MAX_PVALUE
from harness.derive.history.reference import DEFAULT_NIGHTS, MIN_NIGHTS
from harness.derive.history.trend import BAND_CONFIDENCE, Series
from harness.present.report import figures, template_environment


def history_context(path: Path, runs: pd.DataFrame, series: list[Series]) -> dict[str, Any]:
    groups = []
    for (fingerprint, machine), members in groupby(
        series, key=lambda s: (s.key.regime_fingerprint, s.key.machine_key)
    ):
        members = list(members)
        panels = []
        for (arm, metric), lines in groupby(members, key=lambda s: (s.key.arm, s.key.metric)):
            lines = list(lines)
            label = METRICS[metric].label if metric in METRICS else metric
            panels.append(
                {
                    "arm": arm,
                    "metric": metric,
                    "figure": figures.trend_figure(lines, f"{arm}: {label}", DEFAULT_NIGHTS, BAND_CONFIDENCE),
                    "changes": [c for line in lines for c in line.changes],
                    # why a panel has no band: the gate needs MIN_NIGHTS nights before it draws one
                    "no_band": None
                    if any(line.band is not None for line in lines)
                    else f"no band yet: {max(len(line.nights) for line in lines)} night(s); the history gate "
                    f"draws one (and judges a night) from {MIN_NIGHTS}",
                }
            )
        groups.append(
            {
                "regime": members[0].key.regime,
                "fingerprint": fingerprint,
                "machine": machine,
                "panels": panels,
            }
        )
    open_regressions = [(s, point) for s in series if (point := s.open_regression()) is not None]
    return {
        "path": str(path),
        "runs": len(runs),
        "first": str(runs.started_at.min())[:16] if len(runs) else None,
        "last": str(runs.started_at.max())[:16] if len(runs) else None,
        "groups": groups,
        "open_regressions": open_regressions,
        "max_pvalue": MAX_PVALUE,
        "band_nights": DEFAULT_NIGHTS,
        "band_confidence": BAND_CONFIDENCE,
        "metrics": [METRICS[m] for m in dict.fromkeys(s.key.metric for s in series) if m in METRICS],
    }


def render_history(path: Path, runs: pd.DataFrame, series: list[Series]) -> str:
    """The trend page of the history at ``path``: its ``runs`` and the ``series`` derive made of them
    (``history.trend.trend_series``)."""
    return (
        template_environment().get_template("history.html.j2").render(**history_context(path, runs, series))
    )
