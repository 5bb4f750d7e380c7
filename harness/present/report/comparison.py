"""What the two-run comparison (``bench report A B``) shows, from the two runs' report contexts and
the two-run gate's changes (``harness.derive.gates.compare``): a verdict per cell first (changed /
not changed, with the gate's interval), then the regime rows that differ, then each cell's metrics
as rows (A, B, B / A), so no table is wider than a narrow window."""

from __future__ import annotations

from typing import Any

from harness.core.metrics import COMPARED, METRICS
from harness.derive.gates.compare import MetricChange, RunComparison


def _pct(value: float) -> str:
    return f"{100 * value:+.1f}%"


def _verdict_cell(change: MetricChange) -> dict[str, Any]:
    """One metric of one cell as the verdict table shows it: the verdict, B / A - 1, the interval."""
    if change.verdict == "not measured":
        return {"verdict": "–", "class": "", "change": None, "interval": None, "why": ""}
    if change.change is None or change.low is None or change.high is None:
        return {
            "verdict": "no interval",
            "class": "muted",
            "change": None,
            "interval": None,
            "why": change.message,
        }
    mark = "" if change.night_known else "*"
    return {
        "verdict": change.verdict + mark,
        "class": "changed" if change.verdict == "changed" else "",
        "change": _pct(change.change),
        "interval": f"[{100 * change.low:+.1f}, {100 * change.high:+.1f}]%",
        "why": "",
    }


def _regime_rows(a: dict[str, Any], b: dict[str, Any]) -> tuple[list[tuple[str, str, str]], int]:
    """The regime rows whose values differ between the runs, and how many are the same."""
    rows = [(key, va, vb) for (key, va), (_, vb) in zip(a["fingerprint"], b["fingerprint"], strict=False)]
    differ = [row for row in rows if row[1] != row[2]]
    return differ, len(rows) - len(differ)


def _metric_rows(row_a: Any, row_b: Any) -> list[dict[str, Any]]:
    """One cell's compared metrics as rows: A, B and B / A (none where neither run has it)."""
    rows = []
    for key in COMPARED:
        va, vb = getattr(row_a, key), getattr(row_b, key) if row_b else None
        if va is None and vb is None:
            continue
        ratio = vb / va if va and vb is not None else None
        rows.append(
            {"label": METRICS[key].label, "unit": METRICS[key].unit, "a": va, "b": vb, "ratio": ratio}
        )
    return rows


def comparison_context(a: dict[str, Any], b: dict[str, Any], changes: RunComparison) -> dict[str, Any]:
    """The page's parts: the verdict table, the differing regime rows, each cell's metric table."""
    verdicts = []
    for cell in changes.cells:
        verdicts.append(
            {
                "arm": cell.arm,
                "window": f"{cell.workload} @ {cell.level.label()}",
                "cells": [_verdict_cell(c) for c in cell.changes],
            }
        )
    notes = sorted({c.message for cell in changes.cells for c in cell.changes if c.verdict == "no interval"})
    night_unknown = any(not c.night_known for cell in changes.cells for c in cell.changes)
    differ, same = _regime_rows(a, b)
    pairs = []
    for row_a in a["summary"].cells:
        row_b = b["summary"].cell(row_a.arm, row_a.workload, row_a.level)
        pairs.append({"a": row_a, "b": row_b, "rows": _metric_rows(row_a, row_b)})
    return {
        "verdict_metrics": [METRICS[m] for m in changes.metrics],
        "verdicts": verdicts,
        "confidence_pct": f"{100 * changes.confidence:g}",
        "no_interval": notes,
        "night_unknown": night_unknown,
        "changed_count": sum(c.verdict == "changed" for cell in changes.cells for c in cell.changes),
        "judged_count": sum(c.verdict != "not measured" for cell in changes.cells for c in cell.changes),
        "regime_differ": differ,
        "regime_same": same,
        "pairs": pairs,
    }
