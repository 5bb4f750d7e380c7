"""A run's cells in the files the peers' tools read (``bench export --format vllm|aiperf``).

- vLLM: one folder per arm and window holding ``summary.json``, a list of one run dict with
  ``vllm bench serve --save-result``'s keys plus the swept parameters (``arm``, ``method``,
  ``num_speculative_tokens``, ``workload``), the shape ``vllm bench sweep serve`` writes and
  ``bench sweep plot`` / ``plot_pareto`` collect (every ``**/summary.json`` under a folder). Keys
  and units are vLLM 0.32.0's: ``vllm/benchmarks/serve.py`` (the result dict; ``process_one_metric``'s
  ``mean_/median_/std_/p<N>_<metric>_ms``; ``spec_decode_*``, its acceptance rate in %) and
  ``vllm/benchmarks/sweep/serve.py`` (``run_comb`` writes the list, ``_update_run_data`` adds the
  parameters).
- AIPerf: one ``profile_export_aiperf.json`` per arm and window, schema 1.5 (AIPerf's
  ``docs/reference/json-export-schema.md``: each metric a block of ``unit`` and ``avg``/``min``/
  ``max``/``p50``/``p90``/``p99``/``std``; tags and units from ``src/aiperf/metrics/types/``).
  AIPerf's ``inter_token_latency`` is per output token (the harness's TPOT), its
  ``inter_chunk_latency`` per streamed chunk (the harness's ITL, vLLM's).

Every number is a cell field of the run's summary, renamed (and the acceptance rate scaled to %):
none is computed here. A key whose figure the summary does not hold is left out, never filled.
Open-loop cells: the peers time TTFT and E2E from the send, the harness from when the request was
due, so there only the send-based TTFT percentiles the summary keeps are written and E2E is left out.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from harness.results import write_json_atomic, write_text_atomic
from harness.results.model import CellMetrics, Summary

VLLM_VERSION = "0.32.0"
VLLM_FORMAT = f"vllm bench serve --save-result / bench sweep summary.json (vLLM {VLLM_VERSION})"
AIPERF_SCHEMA = "1.5"
AIPERF_FORMAT = f"AIPerf profile_export_aiperf.json (schema {AIPERF_SCHEMA})"
AIPERF_FILE = "profile_export_aiperf.json"
VLLM_FILE = "summary.json"
README = "README.txt"

# --save-result key -> the cell's field (vLLM's own names for the summary's numbers)
VLLM_KEYS = {
    "duration": "duration_s",
    "completed": "requests_ok",
    "failed": "requests_errored",
    "num_prompts": "requests_total",
    "total_input_tokens": "input_tokens",
    "total_output_tokens": "output_tokens",
    "request_throughput": "request_rps",
    "output_throughput": "output_tok_s",
    "total_token_throughput": "total_tok_s",
    "request_goodput": "goodput_rps",
}
# vLLM's latency name -> the cell's field prefix; vLLM's statistic word -> the cell's suffix
LATENCIES = {"ttft": "ttft_ms", "tpot": "tpot_ms", "itl": "itl_ms", "e2el": "e2e_ms"}
VLLM_STATISTICS = {"mean": "mean", "median": "p50", "std": "std", "p90": "p90", "p99": "p99"}
# spec_decode_* (vLLM writes them only where the server drafted): key -> (field, scale)
VLLM_SPEC = {
    "spec_decode_acceptance_rate": ("acceptance_rate", 100.0),  # vLLM's is in %, the cell's a fraction
    "spec_decode_acceptance_length": ("tau", 1.0),  # 1 + accepted / drafts: tau
    "spec_decode_num_drafts": ("drafts", 1.0),
    "spec_decode_draft_tokens": ("draft_tokens", 1.0),
    "spec_decode_accepted_tokens": ("accepted_tokens", 1.0),
}

# AIPerf tag -> (the cell's field prefix) for its record metrics (distributions)
AIPERF_LATENCIES = {
    "time_to_first_token": "ttft_ms",
    "time_to_second_token": "ttst_ms",
    "inter_token_latency": "tpot_ms",  # AIPerf's ITL: (latency - TTFT) / (OSL - 1), per request
    "inter_chunk_latency": "itl_ms",
    "request_latency": "e2e_ms",
}
AIPERF_STATISTICS = {
    "avg": "mean",
    "min": "min",
    "max": "max",
    "p50": "p50",
    "p90": "p90",
    "p99": "p99",
    "std": "std",
}
# AIPerf tag -> (the cell's field, unit, scale) for its derived and aggregate metrics (one value)
AIPERF_SCALARS = {
    "request_throughput": ("request_rps", "requests/sec", 1.0),
    "request_count": ("requests_ok", "requests", 1.0),
    "benchmark_duration": ("duration_s", "sec", 1.0),
    "output_token_throughput": ("output_tok_s", "tokens/sec", 1.0),
    "total_token_throughput": ("total_tok_s", "tokens/sec", 1.0),
    "total_output_tokens": ("output_tokens", "tokens", 1.0),
    "total_isl": ("input_tokens", "tokens", 1.0),
    "goodput": ("goodput_rps", "requests/sec", 1.0),
}
AIPERF_SPEC = {
    "spec_decode_token_weighted_acceptance_length": ("tau", "ratio", 1.0),  # 1 + sum(accepted) / sum(steps)
    "spec_decode_overall_draft_acceptance_rate": ("acceptance_rate", "%", 100.0),
    "total_spec_decode_steps": ("drafts", "count", 1.0),
    "total_draft_tokens": ("draft_tokens", "tokens", 1.0),
    "total_accepted_draft_tokens": ("accepted_tokens", "tokens", 1.0),
}


def _value(cell: CellMetrics, field: str, scale: float = 1.0) -> Any:
    # getattr with a default: a summary from before a field existed has no such attribute (the
    # mapping's names are checked against CellMetrics by tests/test_export_formats.py)
    value = getattr(cell, field, None)
    return value * scale if isinstance(value, int | float) and scale != 1.0 else value


def _latency_field(cell: CellMetrics, prefix: str, statistic: str) -> str | None:
    """The cell's field for a peer's latency statistic; None where the summary has no counterpart:
    open loop, the peers time TTFT and E2E from the send (the ``_sent`` TTFT percentiles)."""
    if cell.request_rate is None or prefix not in ("ttft_ms", "e2e_ms"):
        return f"{prefix}_{statistic}"
    return f"{prefix}_{statistic}_sent" if prefix == "ttft_ms" else None


def _drafted(cell: CellMetrics) -> bool:
    return cell.draft_tokens > 0


def _safe(name: str) -> str:
    """A path part from a regime's name: nothing that climbs or separates."""
    return re.sub(r"[^A-Za-z0-9_.=+-]", "_", name).replace("..", "__")


def window_label(cell: CellMetrics) -> str:
    rate = f"-request_rate={cell.request_rate:g}" if cell.request_rate is not None else ""
    return f"workload={cell.workload}-max_concurrency={cell.concurrency}{rate}"


def vllm_record(summary: Summary, cell: CellMetrics) -> dict[str, Any]:
    """One arm and window as ``vllm bench serve --save-result`` writes a run, with the parameters
    ``bench sweep serve`` adds and the harness's speedup beside them (keys vLLM does not have)."""
    record: dict[str, Any] = {
        "format": VLLM_FORMAT,
        "bench_run_id": summary.run_id,
        "bench_regime": summary.regime_name,
        "label": cell.arm,
        # the parameters swept: the arm (its method and K) and the window
        "arm": cell.arm,
        "method": cell.method,
        "num_speculative_tokens": cell.num_speculative_tokens,
        "workload": cell.workload,
        "category": cell.category,
        # closed loop: every request at once, at most max_concurrency in flight (vLLM's "inf")
        "request_rate": "inf" if cell.request_rate is None else cell.request_rate,
        "max_concurrency": cell.concurrency,
        "repeats": cell.repeats,
    }
    for key, field in VLLM_KEYS.items():
        record[key] = _value(cell, field)
    for name, prefix in LATENCIES.items():
        for word, statistic in VLLM_STATISTICS.items():
            field = _latency_field(cell, prefix, statistic)
            record[f"{word}_{name}_ms"] = None if field is None else _value(cell, field)
    if _drafted(cell):
        for key, (field, scale) in VLLM_SPEC.items():
            record[key] = _value(cell, field, scale)
        record["spec_decode_per_position_acceptance_rates"] = list(cell.per_position_acceptance)
    record["speedup"] = cell.speedup
    record["speedup_low"] = cell.estimate.low if cell.estimate else None
    record["speedup_high"] = cell.estimate.high if cell.estimate else None
    return {key: value for key, value in record.items() if value is not None}


def aiperf_export(summary: Summary, cell: CellMetrics) -> dict[str, Any]:
    """One arm and window as AIPerf's ``profile_export_aiperf.json``: a block per metric, only the
    statistics the summary holds; the harness's identity under ``run_info`` and ``source``."""
    out: dict[str, Any] = {
        "schema_version": AIPERF_SCHEMA,
        "benchmark_id": f"{summary.run_id}/{cell.arm}/{window_label(cell)}",
        "source": {"format": AIPERF_FORMAT, "exported_by": "bench export --format aiperf"},
        "run_info": {
            "benchmark_id": f"{summary.run_id}/{cell.arm}/{window_label(cell)}",
            "run_label": window_label(cell),
            "variation_label": cell.arm,
            "variation_values": {
                "arm": cell.arm,
                "method": cell.method,
                "num_speculative_tokens": cell.num_speculative_tokens,
                "workload": cell.workload,
                "concurrency": cell.concurrency,
                "request_rate": cell.request_rate,
            },
        },
    }
    for tag, prefix in AIPERF_LATENCIES.items():
        block = {
            stat: value
            for stat, statistic in AIPERF_STATISTICS.items()
            if (field := _latency_field(cell, prefix, statistic))
            and (value := _value(cell, field)) is not None
        }
        if block:
            out[tag] = {"unit": "ms", **block}
    scalars = {**AIPERF_SCALARS, **(AIPERF_SPEC if _drafted(cell) else {})}
    for tag, (field, unit, scale) in scalars.items():
        if (value := _value(cell, field, scale)) is not None:
            out[tag] = {"unit": unit, "avg": value}
    if cell.requests_errored:  # AIPerf writes it only where requests failed
        out["error_request_count"] = {"unit": "requests", "avg": cell.requests_errored}
    return out


def _readme(summary: Summary, what: str) -> str:
    return (
        f"{what}\nfrom bench run {summary.run_id} (regime {summary.regime_name}), by `bench export`.\n"
        "Each number is the run's summary cell (arm x workload x load level, pooled over its repeats\n"
        "and server start-ups); a key the summary has no figure for is left out. Units and names as\n"
        "in docs/results.md (Peers' formats).\n"
    )


def write_vllm(summary: Summary, out_dir: Path) -> list[Path]:
    """A folder ``vllm bench sweep plot`` reads: per arm and window
    ``SERVE-arm=<arm>-BENCH-<window>/summary.json``, and a README naming the format."""
    paths = []
    for cell in summary.cells:
        folder = out_dir / _safe(f"SERVE-arm={cell.arm}-BENCH-{window_label(cell)}")
        path = folder / VLLM_FILE
        write_json_atomic(path, [vllm_record(summary, cell)])
        paths.append(path)
    readme = out_dir / README
    write_text_atomic(readme, _readme(summary, f"Format: {VLLM_FORMAT}."))
    return [*paths, readme]


def write_aiperf(summary: Summary, out_dir: Path) -> list[Path]:
    """Per arm and window ``<arm>-<window>/profile_export_aiperf.json``."""
    paths = []
    for cell in summary.cells:
        path = out_dir / _safe(f"{cell.arm}-{window_label(cell)}") / AIPERF_FILE
        write_json_atomic(path, aiperf_export(summary, cell))
        paths.append(path)
    readme = out_dir / README
    write_text_atomic(readme, _readme(summary, f"Format: {AIPERF_FORMAT}."))
    return [*paths, readme]
