"""The peers' block: each window as ``vllm bench serve`` and AIPerf report a run, in their words,
beside the harness's own tables (``bench show --peers``; the report's section of the same name).
Every number is a field of the cell (the registry's ``shown="peers"`` entries and the counters
tau comes from); nothing is computed here. The speedup stays the harness's one estimate with its
interval (the other tables): a ratio of these throughputs is not it."""

from __future__ import annotations

from harness.core.metrics import METRICS, PEER_LATENCIES
from harness.present.width import Column, FitTable
from harness.results.model import CellMetrics, Summary

# the statistics a terminal cell shows, as "mean/median/p99" (vLLM's three); the report and the
# export carry all seven (core.metrics.PEER_STATISTICS)
TERMINAL_STATISTICS = ("mean", "p50", "p99")


def latency_text(cell: CellMetrics, prefix: str, statistics: tuple[str, ...] = TERMINAL_STATISTICS) -> str:
    """One latency's statistics in one cell, ``mean/median/p99`` in ms (``-`` where not measured)."""
    return "/".join(METRICS[f"{prefix}_{s}"].format(METRICS[f"{prefix}_{s}"].value(cell)) for s in statistics)


def _number(value: float | int | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def acceptance_rate_pct(cell: CellMetrics) -> float | None:
    """vLLM's "Acceptance rate (%)": the cell's acceptance rate, in percent."""
    return None if cell.acceptance_rate is None else cell.acceptance_rate * 100.0


def peers_tables(summary: Summary) -> list[FitTable]:
    """Per window, two tables that fit 100 columns: throughput and speculation in vLLM's words, and
    the latencies as mean/median/p99 in ms."""
    tables = []
    for workload, level in summary.window_keys():
        rows = [c for c in summary.cells if (c.workload, c.level) == (workload, level)]
        counts = FitTable(
            f"{workload} @ {level.label()}, as vllm bench serve reports it: throughput and speculation "
            "(accept length: vLLM's acceptance length, the harness's tau)",
            keys=[Column("arm", text=True)],
            columns=[
                Column("req/s"),
                Column("output\ntok/s"),
                Column("total\ntok/s"),
                Column("input\ntokens"),
                Column("output\ntokens"),
                Column("secs"),
                Column("accept\nlength"),
                Column("accept\nrate %"),
                Column("drafts"),
                Column("draft\ntokens"),
                Column("accepted\ntokens"),
            ],
        )
        latencies = FitTable(
            f"{workload} @ {level.label()}: latency in ms, mean/median/p99 (the report and the export "
            "add min, max, std and p90)",
            keys=[Column("arm", text=True)],
            columns=[Column(label) for _, label, *_ in PEER_LATENCIES],
        )
        for cell in rows:
            counts.add_row(
                cell.arm,
                _number(cell.request_rps, ".2f"),
                _number(cell.output_tok_s, ".1f"),
                _number(cell.total_tok_s, ".1f"),
                _number(cell.input_tokens, "d"),
                _number(cell.output_tokens, "d"),
                _number(cell.duration_s, ".1f"),
                _number(cell.tau, ".2f"),
                _number(acceptance_rate_pct(cell), ".1f"),
                _number(cell.drafts, ".0f"),
                _number(cell.draft_tokens, ".0f"),
                _number(cell.accepted_tokens, ".0f"),
            )
            latencies.add_row(cell.arm, *(latency_text(cell, prefix) for prefix, *_ in PEER_LATENCIES))
        tables += [counts, latencies]
    return tables


def peers_context(summary: Summary) -> list[dict]:
    """The report's section: per window, the throughput-and-speculation row of each arm and every
    latency's seven statistics (``PEER_STATISTICS``), formatted as the registry formats them."""
    from harness.core.metrics import PEER_STATISTICS

    windows = []
    for workload, level in summary.window_keys():
        rows = [c for c in summary.cells if (c.workload, c.level) == (workload, level)]
        windows.append(
            {
                "title": f"{workload} at {level.label()}",
                "counts": [
                    [
                        cell.arm,
                        _number(cell.request_rps, ".2f"),
                        _number(cell.output_tok_s, ".1f"),
                        _number(cell.total_tok_s, ".1f"),
                        _number(cell.input_tokens, "d"),
                        _number(cell.output_tokens, "d"),
                        _number(cell.duration_s, ".1f"),
                        _number(cell.tau, ".2f"),
                        _number(acceptance_rate_pct(cell), ".1f"),
                        _number(cell.drafts, ".0f"),
                        _number(cell.draft_tokens, ".0f"),
                        _number(cell.accepted_tokens, ".0f"),
                    ]
                    for cell in rows
                ],
                "latencies": [
                    [cell.arm, label, *latency_text(cell, prefix, PEER_STATISTICS).split("/")]
                    for cell in rows
                    for prefix, label, *_ in PEER_LATENCIES
                ],
            }
        )
    return windows
