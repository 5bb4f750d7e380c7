"""A run's ramp (``load.ramp``) as a table: per workload, each stage and the whole ramp, every arm's
tok/s, speedup with its interval, what the engine drafted, and TPOT inside each stage against TPOT
of the requests that crossed into it; then a scheduled arm's standing on the ramp and the largest
spike at a boundary. The terminal and the HTML report read the same sections."""

from __future__ import annotations

from typing import Any

from harness.core.formats import estimate_text
from harness.derive.analysis import RunAnalysis
from harness.present.schedule_text import level_verdict, ramp_line
from harness.present.table import section_tables
from harness.present.width import FitTable
from harness.results.model import RampStageMetrics, SpeedupEstimate, Summary

HEADER = [
    "stage",
    "seconds",
    "arm",
    "in flight",
    "tok/s",
    "speedup",
    "tau",
    "drafted per draft",
    "TPOT p90 inside ms",
    "TPOT p90 across ms",
]


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _speedup_text(metrics: RampStageMetrics, baseline: str) -> str:
    if metrics.arm == baseline:
        return "1.00x" if metrics.speedup else "-"
    if metrics.speedup is None:
        return "-"
    stored = metrics.estimate or SpeedupEstimate()
    return estimate_text(metrics.speedup, stored.low, stored.high, stored.rounds or 1)


def _drafted(metrics: RampStageMetrics) -> str:
    """From the counters; else the engine's active steps as the stage ended (an adaptive mode's K)."""
    if metrics.drafted_per_draft is None and metrics.engine_steps is not None:
        return f"{metrics.engine_steps:g} (engine's steps)"
    return _fmt(metrics.drafted_per_draft, ".2f")


def _row(metrics: RampStageMetrics, baseline: str) -> list[str]:
    across = (
        f"{metrics.tpot_ms_p90_across:.0f} ({metrics.requests_across})"
        if metrics.tpot_ms_p90_across is not None
        else "-"
    )
    return [
        "whole ramp" if metrics.stage is None else f"{metrics.stage + 1}: {metrics.label}",
        f"{metrics.start_s:g}-{metrics.end_s:g}",
        metrics.arm,
        _fmt(metrics.mean_in_flight, ".1f"),
        _fmt(metrics.output_tok_s, ".1f"),
        _speedup_text(metrics, baseline),
        _fmt(metrics.tau, ".2f"),
        _drafted(metrics),
        _fmt(metrics.tpot_ms_p90_inside, ".0f"),
        across,
    ]


def spike_line(ramp: list[RampStageMetrics], workload: str) -> str | None:
    """The largest rise of TPOT p90 at a boundary (requests that crossed into a stage against those
    wholly inside it), over the arms."""
    found = [
        (m.tpot_ms_p90_across / m.tpot_ms_p90_inside, m)
        for m in ramp
        if m.workload == workload and m.stage is not None and m.tpot_ms_p90_across and m.tpot_ms_p90_inside
    ]
    if not found:
        return None
    rise, worst = max(found, key=lambda pair: pair[0])
    return (
        f"Largest TPOT change at a boundary ({workload}): {worst.arm} into stage {worst.stage + 1} "  # type: ignore[operator]
        f"({worst.label} at {worst.start_s:g} s): p90 {worst.tpot_ms_p90_across:.0f} ms for the "
        f"{worst.requests_across} requests that crossed it against {worst.tpot_ms_p90_inside:.0f} ms "
        f"inside the stage ({rise:.2f}x)."
    )


def ramp_sections(summary: Summary) -> list[dict[str, Any]]:
    """Per workload with a ramp: a title, the header, the rows (stage by stage, then the whole
    ramp; the arms in the regime's order) and the conclusions."""
    if not summary.ramp:
        return []
    order = {arm.name: index for index, arm in enumerate(summary.arms)}
    out = []
    for workload in dict.fromkeys(m.workload for m in summary.ramp):
        mine = [m for m in summary.ramp if m.workload == workload]
        mine.sort(key=lambda m: (m.stage is None, m.stage or 0, order.get(m.arm, 0)))
        starts = max(m.start_ups for m in mine)
        lines = [spike] if (spike := spike_line(mine, workload)) is not None else []
        out.append(
            {
                "title": f"Ramp, {workload}: one continuous window per server start-up ({starts} start-ups "
                "per arm); tok/s counts the tokens streamed inside each stage; speedup from the arms x "
                "rounds model (95%); TPOT across: the requests in flight as the stage began (count)",
                "header": HEADER,
                "rows": [_row(m, summary.baseline_arm) for m in mine],
                "lines": lines,
            }
        )
    return out


def ramp_schedule_sections(analysis: RunAnalysis) -> list[dict[str, Any]]:
    """A scheduled arm on the ramp, stage by stage and whole: the K its schedule gives the stage's
    batch size, what the engine drafted, its speedup and its ratio to every static arm of its
    method (same start-ups, the baseline cancels), and the verdict against the best of them."""
    out = []
    for check in analysis.ramp_checks:
        statics = sorted({s for _, level in check.spans for s in level.against})
        rows = [
            [
                label,
                str(level.scheduled_k) if level.scheduled_k >= 0 else "-",
                _fmt(level.drafted_per_draft, ".2f"),
                level.speedup.text() if level.speedup is not None else "-",
                *(level.against[s].text() if s in level.against else "-" for s in statics),
                level_verdict(level),
            ]
            for label, level in check.spans
        ]
        out.append(
            {
                "title": f"{check.arm} on the ramp, {check.workload}: per stage and whole, against each "
                "static K (same start-ups, 95%, the baseline cancels)",
                "header": ["stage", "K scheduled", "drafted per draft", "speedup"]
                + [f"vs {s}" for s in statics]
                + ["verdict"],
                "rows": rows,
                "lines": [ramp_line(check)],
            }
        )
    return out


def ramp_tables(analysis: RunAnalysis) -> list[FitTable | str]:
    """``ramp_sections`` and ``ramp_schedule_sections`` for the terminal."""
    return section_tables(
        ramp_sections(analysis.summary), key_text=(True, True, True), prose_last=False
    ) + section_tables(ramp_schedule_sections(analysis), key_text=(True,), prose_last=True)
