"""What the two-run comparison (``bench report A B``) shows, from the two runs' analyses and report
contexts and the two-run gate's changes (``harness.derive.gates.compare``): each speculative cell's
verdict in A and in B with its interval, and whether the decision changed; then each metric's change
(changed / not changed with the gate's interval, and better or worse in the metric's direction); the
regime rows that differ; each cell's metrics as rows (A, B, B / A), so no table is wider than a
narrow window."""

from __future__ import annotations

from typing import Any

from harness.core.formats import speedup_text
from harness.core.metrics import COMPARED, METRICS
from harness.derive.analysis import RunAnalysis
from harness.derive.gates.compare import MetricChange, RunComparison
from harness.derive.verdict import Outcome
from harness.present.report.outcomes import OUTCOME_CLASS
from harness.present.verdict_text import OUTCOME_WORDS


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
    # a change read in the metric's direction: a fall in tok/s and a rise in TTFT are both worse
    direction = ""
    if change.verdict == "changed":
        direction = "better" if (change.change > 0) == METRICS[change.metric].higher_is_better else "worse"
    return {
        "verdict": change.verdict + (f" ({direction})" if direction else "") + mark,
        "class": {"better": "gain", "worse": "loss"}.get(direction, ""),
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


def _decision(analysis: RunAnalysis, cell: Any) -> dict[str, Any]:
    """A speculative cell's verdict in one run, as its window's verdict reads it (``analysis.outcome``),
    in the verdict's words, with its speedup and interval."""
    estimate, outcome = analysis.estimate(cell), analysis.outcome(cell)
    if estimate is None or outcome is None:
        return {"outcome": None, "words": "not measured", "speedup": "–", "class": ""}
    return {
        "outcome": Outcome(outcome),
        "words": OUTCOME_WORDS[Outcome(outcome)],
        "speedup": speedup_text(estimate.point, estimate.low, estimate.high),
        "class": OUTCOME_CLASS.get(Outcome(outcome), ""),
    }


def _decisions(first: RunAnalysis, second: RunAnalysis) -> list[dict[str, Any]]:
    """Each speculative cell of A: its verdict and interval in A and in B, and whether the decision
    changed (another outcome; a cell B did not measure says so)."""
    rows = []
    for cell in first.summary.cells:
        if cell.arm == first.summary.baseline_arm:
            continue  # the reference every speedup is measured against: no verdict of its own
        other = second.summary.cell(cell.arm, cell.workload, cell.level)
        a = _decision(first, cell)
        b = _decision(second, other) if other is not None else _decision(second, cell) | {"words": "not run"}
        changed = a["outcome"] != b["outcome"]
        rows.append(
            {
                "arm": cell.arm,
                "window": f"{cell.workload} @ {cell.level.label()}",
                "a": a,
                "b": b,
                "changed": f"changed: {a['words']} → {b['words']}" if changed else "same decision",
                "class": "changed" if changed else "",
            }
        )
    return rows


def comparison_context(
    a: dict[str, Any], b: dict[str, Any], changes: RunComparison, first: RunAnalysis, second: RunAnalysis
) -> dict[str, Any]:
    """The page's parts: the decisions in A and B, the change table, the differing regime rows, each
    cell's metric table."""
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
    decisions = _decisions(first, second)
    return {
        "decisions": decisions,
        "decisions_changed": sum(d["class"] == "changed" for d in decisions),
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
