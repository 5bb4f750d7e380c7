"""A run's cells in the files the peers' tools read (``bench export --format vllm|aiperf``).

- vLLM: one folder per arm and window holding ``summary.json``, a list of one run dict with
  ``vllm bench serve --save-result``'s keys plus the swept parameters (``arm``, ``method``,
  ``num_speculative_tokens``, ``workload``), the shape ``vllm bench sweep serve`` writes and
  ``bench sweep plot`` / ``plot_pareto`` collect (every ``**/summary.json`` under a folder). Keys
  and units are vLLM 0.32.0's: ``vllm/benchmarks/serve.py`` (the result dict; ``process_one_metric``'s
  ``mean_/median_/std_/p<N>_<metric>_ms``; ``spec_decode_*``, its acceptance rate in %) and
  ``vllm/benchmarks/sweep/serve.py`` (``run_comb`` writes the list, ``_update_run_data`` adds the
  parameters).
- AIPerf: one run directory per arm and window, as ``aiperf profile`` writes one and ``aiperf
  plot`` and its loader (``aiperf.plot.core.data_loader.DataLoader``, AIPerf 0.13.0) read it:
  ``profile_export.jsonl`` (a ``MetricRecordInfo`` per request: metadata and each metric's value
  and unit) and ``profile_export_aiperf.json`` (schema 1.4, ``JsonExportData``: each record metric
  a block of count, sum, avg, min, max, std and p1 ... p99; each derived metric unit + avg), and at
  the folder's root ``.aiperf-plot-config.yaml``, the plots ``aiperf plot`` draws (one curve per arm
  and workload, the load levels along it; no GPU telemetry needed). Tags and units are AIPerf's
  (``aiperf/metrics/types/``): its ``inter_token_latency`` is per output token (the harness's
  TPOT), its ``inter_chunk_latency`` per streamed chunk (the harness's ITL, vLLM's).

vLLM's numbers are the summary's cells, renamed (and the acceptance rate scaled to %): none is
computed here. AIPerf's distributions are the cell's requests' (``harness.derive.peer_requests``,
in AIPerf's definitions), its derived figures the cell's. A key whose figure was not measured is
left out, never filled; the folder's README says which.
Open-loop cells (vLLM): the peers time TTFT and E2E from the send, the harness from when the
request was due, so only the send-based TTFT percentiles the summary keeps are written and E2E is
left out.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from harness.derive.peer_requests import CellRequests, Distribution, RequestValues
from harness.results import write_json_atomic, write_text_atomic
from harness.results.model import CellMetrics, Summary

VLLM_VERSION = "0.32.0"
VLLM_FORMAT = f"vllm bench serve --save-result / bench sweep summary.json (vLLM {VLLM_VERSION})"
AIPERF_VERSION = "0.13.0"
AIPERF_SCHEMA = "1.4"  # JsonExportData.SCHEMA_VERSION in AIPerf 0.13.0
AIPERF_FORMAT = f"AIPerf {AIPERF_VERSION} run directory (profile_export_aiperf.json schema {AIPERF_SCHEMA})"
AIPERF_FILE = "profile_export_aiperf.json"
AIPERF_RECORDS = "profile_export.jsonl"
AIPERF_PLOT_CONFIG = ".aiperf-plot-config.yaml"  # aiperf plot reads it from the folder it is given
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
# counts vLLM writes as int (serve.py int()s them); the summary pools some as floats
VLLM_COUNTS = {"spec_decode_num_drafts", "spec_decode_draft_tokens", "spec_decode_accepted_tokens"}

# AIPerf record metric (a distribution over the cell's requests) -> (RequestValues field, unit)
AIPERF_RECORD_METRICS = {
    "time_to_first_token": ("ttft_ms", "ms"),
    "time_to_second_token": ("ttst_ms", "ms"),  # AIPerf's: the first two chunks' gap
    "inter_token_latency": ("tpot_ms", "ms"),  # AIPerf's ITL: (latency - TTFT) / (OSL - 1), per request
    "inter_chunk_latency": ("chunk_gaps_ms", "ms"),
    "request_latency": ("e2e_ms", "ms"),
    "output_token_throughput_per_user": ("tok_s_per_user", "tokens/sec/user"),
    "input_sequence_length": ("input_tokens", "tokens"),
    "output_sequence_length": ("output_tokens", "tokens"),
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
# what the AIPerf folder leaves out, and why (its README)
AIPERF_ABSENT = (
    "start_time, end_time: the harness times requests on a monotonic clock from each window's start, "
    "not the wall clock; request_start_ns / request_end_ns in profile_export.jsonl are nanoseconds "
    "from the start of the request's window (each repeat of a cell starts again at 0; bench_repeat "
    "says which)",
    "gpu telemetry, server metrics, timeslices: not recorded in AIPerf's form (the run's own "
    "windows.jsonl holds its power and GPU readings)",
    "input_config: only the model, and per phase its concurrency, request count and rate; AIPerf's "
    "other settings (endpoint, dataset, tokenizer) have no counterpart in a bench regime",
    "failed requests: in error_request_count, and in profile_export.jsonl where they have an end "
    "time; the distributions pool the successful requests only (AIPerf's latency percentiles also "
    "count failed requests)",
    "input_sequence_length: only where the engine reported each request's prompt tokens",
    "time_to_second_token: only for requests streamed in two or more chunks",
)
# the plots `aiperf plot` draws from the folder: its defaults need GPU telemetry (per-GPU
# throughput) and group by model (every arm serves the same one); these group by arm and workload
AIPERF_PLOTS = """\
# bench export --format aiperf: the plots `aiperf plot` draws from this folder (AIPerf 0.13.0's
# format: aiperf/plot/default_plot_config.yaml). One curve per arm and workload (experiment_group),
# the load levels along it.
visualization:
  multi_run_defaults:
    - pareto_throughput_vs_latency
    - pareto_throughput_vs_interactivity
    - ttft_vs_throughput
  single_run_defaults:
    - ttft_over_time
    - itl_over_time
    - latency_over_time
  multi_run_plots:
    pareto_throughput_vs_latency:
      type: pareto
      x: {metric: request_latency, stat: avg}
      y: {metric: output_token_throughput, stat: avg}
      labels: [concurrency]
      groups: [experiment_group]
      title: "Pareto Curve: Output Token Throughput vs Latency"
    pareto_throughput_vs_interactivity:
      type: pareto
      x: {metric: output_token_throughput_per_user, stat: avg}
      y: {metric: output_token_throughput, stat: avg}
      labels: [concurrency]
      groups: [experiment_group]
      title: "Pareto Curve: Output Token Throughput vs Interactivity"
    ttft_vs_throughput:
      type: scatter_line
      x: {metric: time_to_first_token, stat: avg}
      y: {metric: request_throughput, stat: avg}
      labels: [concurrency]
      groups: [experiment_group]
      title: "TTFT vs Throughput"
  single_run_plots:
    ttft_over_time:
      type: scatter
      x: request_number
      y: time_to_first_token
      title: "TTFT Per Request Over Time"
    itl_over_time:
      type: scatter
      x: request_number
      y: inter_token_latency
      title: "Inter-Token Latency Per Request Over Time"
    latency_over_time:
      type: scatter_with_percentiles
      x: timestamp
      y: request_latency
      title: "Request Latency Over Time with Percentiles"
"""
NS = 1_000_000_000


def _value(cell: CellMetrics, field: str, scale: float = 1.0) -> Any:
    # getattr with a default: a summary from before a field existed has no such attribute (the
    # mapping's names are checked against CellMetrics by tests/test_export_formats.py)
    value = getattr(cell, field, None)
    return value * scale if isinstance(value, int | float) and scale != 1.0 else value


def _count(value: Any) -> Any:
    """A count as vLLM writes it, an int; one the summary holds as a whole float too (a
    fractional one is no count to round: it is written as it is)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


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
            value = _value(cell, field, scale)
            record[key] = _count(value) if key in VLLM_COUNTS else value
        record["spec_decode_per_position_acceptance_rates"] = list(cell.per_position_acceptance)
    record["speedup"] = cell.speedup
    record["speedup_low"] = cell.estimate.low if cell.estimate else None
    record["speedup_high"] = cell.estimate.high if cell.estimate else None
    return {key: value for key, value in record.items() if value is not None}


def aiperf_block(unit: str, distribution: Distribution) -> dict[str, Any]:
    """A record metric's block (AIPerf's ``JsonMetricResult``): its statistics over the requests."""
    return {
        "unit": unit,
        "avg": distribution.mean,
        **{f"p{p}": value for p, value in sorted(distribution.percentiles.items())},
        "min": distribution.min,
        "max": distribution.max,
        "std": distribution.std,
        "count": distribution.count,
        "sum": distribution.sum,
    }


def _variation(cell: CellMetrics) -> str:
    """The curve a cell is a point of: its arm on its workload (AIPerf's variation label)."""
    return f"{cell.arm} {cell.workload}"


def aiperf_export(
    summary: Summary, cell: CellMetrics, requests: CellRequests, model: str | None = None
) -> dict[str, Any]:
    """One arm and window as AIPerf's ``profile_export_aiperf.json``: a block per record metric
    over the cell's requests, the cell's derived figures; the harness's identity under ``source``,
    ``run_info`` and ``metadata``; ``input_config`` with what a regime has of AIPerf's."""
    benchmark_id = f"{summary.run_id}/{cell.arm}/{window_label(cell)}"
    phase: dict[str, Any] = {
        "name": "profiling",
        "concurrency": cell.concurrency,
        "requests": cell.requests_total,
    }
    if cell.request_rate is not None:
        phase["rate"] = cell.request_rate
    out: dict[str, Any] = {
        "schema_version": AIPERF_SCHEMA,
        "aiperf_version": AIPERF_VERSION,  # the format's release; written by bench export (source)
        "benchmark_id": benchmark_id,
        "source": {"format": AIPERF_FORMAT, "exported_by": "bench export --format aiperf"},
        # the loader's experiment group: one curve per arm and workload
        "metadata": {"variation_label": _variation(cell)},
        "run_info": {
            "benchmark_id": benchmark_id,
            "run_label": window_label(cell),
            "variation_label": _variation(cell),
            "variation_values": {
                "arm": cell.arm,
                "method": cell.method,
                "num_speculative_tokens": cell.num_speculative_tokens,
                "workload": cell.workload,
                "concurrency": cell.concurrency,
                "request_rate": cell.request_rate,
            },
        },
        "input_config": {
            **({"models": {"items": [{"name": model}]}} if model else {}),
            "phases": [phase],
        },
    }
    for tag, (field, unit) in AIPERF_RECORD_METRICS.items():
        if (distribution := requests.distributions.get(field)) is not None:
            out[tag] = aiperf_block(unit, distribution)
    scalars = {**AIPERF_SCALARS, **(AIPERF_SPEC if _drafted(cell) else {})}
    for tag, (field, unit, scale) in scalars.items():
        if (value := _value(cell, field, scale)) is not None:
            out[tag] = {"unit": unit, "avg": value}
    if cell.requests_errored:  # AIPerf writes it only where requests failed
        out["error_request_count"] = {"unit": "requests", "avg": cell.requests_errored}
    return out


def aiperf_record(index: int, request: RequestValues) -> dict[str, Any]:
    """One request as a line of AIPerf's ``profile_export.jsonl`` (its ``MetricRecordInfo``)."""
    metrics: dict[str, Any] = {}
    if request.error is None:  # a failed request's latencies are no measurement of an answer
        for tag, (field, unit) in AIPERF_RECORD_METRICS.items():
            value = getattr(request, field)
            if isinstance(value, tuple):
                value = list(value)
            if value is not None and value != []:
                metrics[tag] = {"value": value, "unit": unit}
    return {
        "metadata": {
            "session_num": index,
            "conversation_id": request.prompt_id,
            "request_start_ns": round(request.start_s * NS),
            "request_end_ns": round(request.end_s * NS),
            "worker_id": "bench",  # the harness's client sent it, not an AIPerf worker
            "record_processor_id": "bench export",
            "benchmark_phase": "profiling",
            "bench_repeat": request.repeat,
        },
        "metrics": metrics,
        "error": None if request.error is None else {"message": request.error},
    }


def _readme(summary: Summary, what: str, absent: tuple[str, ...] = ()) -> str:
    lines = [
        what,
        f"from bench run {summary.run_id} (regime {summary.regime_name}), by `bench export`.",
        "Each number is the run's (arm x workload x load level, pooled over its repeats and server",
        "start-ups); a key the run has no figure for is left out. Units and names as in",
        "docs/results.md (Peers' formats).",
    ]
    if absent:
        lines += ["", "Left out, and why:", *(f"- {line}" for line in absent)]
    return "\n".join(lines) + "\n"


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


def write_aiperf(
    summary: Summary, requests: list[CellRequests], out_dir: Path, model: str | None = None
) -> list[Path]:
    """Per arm and window a run directory ``<arm>-<window>/`` as ``aiperf plot`` finds one
    (``profile_export_aiperf.json`` and ``profile_export.jsonl``), the plots it draws
    (``.aiperf-plot-config.yaml``) and a README saying what is left out. ``requests``: the
    summary's cells' requests, in the cells' order (``harness.derive.peer_requests.cell_requests``)."""
    paths = []
    for cell, cell_requests in zip(summary.cells, requests, strict=True):
        folder = out_dir / _safe(f"{cell.arm}-{window_label(cell)}")
        path = folder / AIPERF_FILE
        write_json_atomic(path, aiperf_export(summary, cell, cell_requests, model))
        records = folder / AIPERF_RECORDS
        lines = (json.dumps(aiperf_record(i, r)) for i, r in enumerate(cell_requests.requests))
        write_text_atomic(records, "".join(f"{line}\n" for line in lines))
        paths += [path, records]
    config = out_dir / AIPERF_PLOT_CONFIG
    write_text_atomic(config, AIPERF_PLOTS)
    readme = out_dir / README
    write_text_atomic(readme, _readme(summary, f"Format: {AIPERF_FORMAT}.", AIPERF_ABSENT))
    return [*paths, config, readme]
