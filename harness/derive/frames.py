"""Results as tidy pandas tables, for notebooks and for ``bench export``.

    import harness
    run = harness.load_run("results/cpu_smoke/20261129-133555-0a3c1c")
    run.cells()        # one row per arm x workload x concurrency
    run.requests()     # one row per measured request
    run.categories()   # one row per arm x category x concurrency
    run.repeats()      # one row per repeat of each cell (the gates' window-level samples)
    run.ramp()         # one row per arm x workload x ramp stage (load.ramp), and the whole ramp

Every table is derived from the raw files (the same ``Summary`` that ``bench show`` prints);
column names carry their units (``_s``, ``_ms``, ``_pct``, ``tok_s``). Lists are spread into
columns (``acceptance_pos_0``, ...) so CSV and parquet hold plain values. Every table starts with
the run's identity (``run_id``, ``regime``, ``regime_fingerprint``, ``environment_fingerprint``), so
tables of several runs concatenate; ``cells`` ends with its window's verdict, on the row of the arm
it is about (``verdict``: pays, loses, equivalent, indistinguishable, unverified; empty on every
other row) and ``deploy`` (true on the row of the arm to deploy). ``export`` also writes
``columns.csv``, the data dictionary (table, column, unit, direction, definition) from the metric
registry (``harness.core.metrics``), and ``speculation_profile.json``: each speculative cell's
per-position acceptance in the harness's terms and in NVIDIA specdec_bench's (its acceptance
metric's ``Acceptance_Length_Histogram``, ``Conditional_Acceptance_Rate``, ``Average_AR``,
``Request_AR``), with whether K may be extrapolated down from it (``harness.derive.cost_model``).
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pandas as pd

from harness.config.engines import get_adapter
from harness.config.level import LoadLevel
from harness.core.columns import column_doc
from harness.core.formats import csv_cell
from harness.core.metrics import METRICS
from harness.core.probes.acceptance import (
    SpecCounters,
    acceptance_problems,
    length_histogram,
    mean_acceptance_length,
)
from harness.core.probes.copying import copied_ngrams, share_pct
from harness.core.probes.schedule import client_lag_s, queueing_s
from harness.core.probes.slo import meets
from harness.derive.analysis import RunAnalysis, load_analysis
from harness.derive.cost_model import CHAIN_METHODS, StepCost
from harness.derive.odd_requests import odd_kinds, tokens_per_step
from harness.derive.verdict import Outcome
from harness.results.model import RampStageMetrics, SpeedupEstimate, Summary
from harness.results.raw import RawRun
from harness.results.records import RequestRecord

ExportFormat = Literal["csv", "parquet", "jsonl"]
TABLES = ("cells", "requests", "categories", "repeats", "ramp")
IDENTITY = ["run_id", "regime", "regime_fingerprint", "environment_fingerprint"]  # Run.identity()
DICTIONARY = "columns.csv"
PROFILE = "speculation_profile.json"
PROFILE_VERSION = 1


def _frame(rows: Iterable[dict[str, Any]], columns: list[str] | None = None) -> pd.DataFrame:
    """A frame (with a fixed column order, also when there are no rows), a column of counts kept
    whole where some rows have none (pandas would make it float: K=4 written as 4.0)."""
    rows = list(rows)
    frame = pd.DataFrame(rows, columns=columns)
    counts = [
        name
        for name in frame.columns
        if (values := [r[name] for r in rows if r.get(name) is not None])
        and all(type(v) is int for v in values)
        and len(values) < len(rows)
    ]
    return frame.astype(dict.fromkeys(counts, "Int64"))


def _by_definition(row: dict[str, Any], baseline: bool) -> dict[str, Any]:
    """A baseline's row with the values it has by definition (``Metric.baseline_value``: tau 1)
    where it measured none, as every view shows them; any other row as it is."""
    if baseline:
        row.update({m.name: m.baseline_value for m in METRICS.values() if m.baseline_value and m.name in row})
    return row


def _request_tau(own: SpecCounters | None) -> float | None:
    return None if own is None else mean_acceptance_length(own.drafts, own.accepted_tokens)


@dataclass
class Run:
    """One run directory, loaded: the typed ``summary`` and its tables as DataFrames."""

    path: Path
    summary: Summary
    raw: RawRun
    analysis: RunAnalysis

    def identity(self) -> dict[str, Any]:
        """The columns every table starts with: which run, in which regime, on which machine."""
        return {
            "run_id": self.summary.run_id,
            "regime": self.summary.regime_name,
            "regime_fingerprint": self.summary.regime_fingerprint,
            "environment_fingerprint": self.raw.environment.get("fingerprint"),
        }

    def _verdicts(self) -> dict[tuple[str, str, Any], dict[str, Any]]:
        """Per cell, what ``bench show`` answers first of its window: the verdict on the row of the
        arm it is about, and which arm to deploy (the analysis's verdicts, computed once)."""
        found: dict[tuple[str, str, Any], dict[str, Any]] = {}
        for v in self.analysis.verdicts:
            for cell in self.summary.cells:
                if (cell.workload, cell.level) != (v.workload, v.level):
                    continue
                about = v.best is not None and v.best.arm == cell.arm and v.outcome != Outcome.NO_ARM
                found[(cell.arm, v.workload, v.level)] = {
                    "verdict": v.answer if about else None,
                    "deploy": v.deploy == cell.arm,
                }
        return found

    def cells(self) -> pd.DataFrame:
        """One row per (arm, workload, concurrency): every cell metric, per-position acceptance spread
        into ``acceptance_pos_<i>`` and exactness into ``identical_pct`` / ``near_tie_pct`` / ..."""
        rows, positions = [], max((len(c.per_position_acceptance) for c in self.summary.cells), default=0)
        verdicts = self._verdicts()
        for cell in self.summary.cells:
            row = self.identity() | _flat(
                cell.model_dump(
                    exclude={
                        "per_repeat",
                        "per_position_acceptance",
                        "conditional_acceptance",
                        "acceptance_checks",
                        "prompt_tau",  # per prompt: the requests() frame has request_tau
                        "requests_failed_by",  # per kind: the requests() frame has each error
                        "requests_odd_by",  # per kind: the requests() frame has each one's (odd)
                        "exactness",
                        "server_reported",
                    }
                ),
                cell.estimate,
            )
            for index in range(positions):
                for prefix, values in (
                    ("acceptance_pos", cell.per_position_acceptance),
                    ("conditional_pos", cell.conditional_acceptance),
                ):
                    row[f"{prefix}_{index}"] = values[index] if index < len(values) else None
            row["acceptance_checks"] = "; ".join(cell.acceptance_checks) or None  # None: both passed
            row["requests_odd"] = sum(cell.requests_odd_by.values())
            shares = cell.exactness.model_dump() if cell.exactness else {}
            row["exactness_compared"] = shares.get("compared", 0)
            for status in ("identical", "near_tie", "diverged", "unknown"):
                row[f"{status}_pct"] = shares.get(f"{status}_pct")
            # a metric the registry adds as a computed property of the cell, not a stored field
            row.update({m.name: m.value(cell) for m in METRICS.values() if m.name not in row and not m.field})
            _by_definition(row, cell.method == "baseline")
            row.update(verdicts.get((cell.arm, cell.workload, cell.level), {"verdict": None, "deploy": None}))
            row.update(_step_cost_columns(self.analysis.cost.cost_of(cell)))
            rows.append(row)
        if not rows:
            return pd.DataFrame(columns=[*IDENTITY, "arm", "workload", "concurrency"])
        # typed, so that a column with no value in this run keeps its type in parquet
        return _frame(rows).astype({"verdict": "string", "deploy": "boolean"})

    def repeats(self) -> pd.DataFrame:
        """One row per repeat of each cell: the window-level samples the gates test."""
        columns = [
            *IDENTITY,
            "arm",
            "workload",
            "category",
            "concurrency",
            "request_rate",
            "repeat",
            "duration_s",
            "output_tokens",
            "output_tok_s",
            "tau",
            "tokens_per_forward",
            "usd_per_mtok",
            "speedup",
            "slo_pct",
            "goodput_rps",
        ]
        return _frame(
            (
                _by_definition(
                    {
                        **self.identity(),
                        "arm": c.arm,
                        "workload": c.workload,
                        "category": c.category,
                        "concurrency": c.concurrency,
                        "request_rate": c.request_rate,
                        **r.model_dump(),
                    },
                    c.method == "baseline",
                )
                for c in self.summary.cells
                for r in c.per_repeat
            ),
            columns,
        )

    def requests(self) -> pd.DataFrame:
        """One row per measured request (warm-up and noise-floor passes excluded), in seconds and ms."""
        columns = [
            *IDENTITY,
            "arm",
            "method",
            "workload",
            "category",
            "prompt_format",
            "concurrency",
            "repeat",
            "prompt_id",
            "ok",
            "error",
            "finish_reason",
            "prompt_tokens",
            "output_tokens",
            "request_rate",
            "t_scheduled_s",
            "client_lag_ms",
            "queueing_ms",
            "t_send_s",
            "ttft_ms",
            "tpot_ms",
            "e2e_ms",
            "odd",
            "within_slo",
            "copy_share_pct",
            "context_share_pct",
            "request_tau",
        ]
        slo = self.summary.slo  # within_slo: None without targets
        categories = {c.workload: c.category for c in self.summary.cells}
        adapter = get_adapter(self.raw.regime.engine.name)
        methods = {a.name: a.method for a in self.raw.regime.arms}
        speculative = {a.name: a.num_speculative_tokens for a in self.raw.regime.arms}

        def ms(value: float | None) -> float | None:
            return None if value is None else value * 1000.0

        # each request's odd kind (derive.odd_requests), judged within its cell as the summary judges it
        odd: dict[int, str | None] = {}
        for name, arm in self.raw.arms.items():
            step = tokens_per_step(speculative[name])
            cells: dict[tuple[str, LoadLevel], list[RequestRecord]] = {}
            for s in arm.samples:
                cells.setdefault((s.workload, s.level), []).append(s)
            for records in cells.values():
                odd.update(zip(map(id, records), odd_kinds(records, step), strict=True))

        rows = (
            {
                **self.identity(),
                "arm": name,
                "method": methods[name],
                "workload": s.workload,
                "category": categories.get(s.workload),
                "prompt_format": s.prompt_format,
                "concurrency": s.concurrency,
                "repeat": s.repeat,
                "prompt_id": s.prompt_id,
                "ok": s.ok,
                "error": s.error,
                "finish_reason": s.finish_reason,
                "prompt_tokens": s.prompt_token_count,
                "output_tokens": s.output_tokens,
                "request_rate": s.request_rate,
                "t_scheduled_s": s.t_scheduled,
                "client_lag_ms": ms(client_lag_s(s)),
                "queueing_ms": ms(queueing_s(s)),
                "t_send_s": s.t_send,
                "ttft_ms": ms(s.ttft_s),
                "tpot_ms": ms(s.tpot_s),
                "e2e_ms": ms(s.e2e_s),
                "odd": odd.get(id(s)),
                "within_slo": None if slo is None else meets(s, slo),
                "copy_share_pct": share_pct([copied := copied_ngrams(s.prompt_token_ids, s.token_ids)]),
                "context_share_pct": share_pct([copied], "from_context"),
                "request_tau": _request_tau(adapter.request_counters(s)),
            }
            for name, arm in self.raw.arms.items()
            for s in arm.samples
        )
        return _frame(rows, columns)

    def categories(self) -> pd.DataFrame:
        """One row per (arm, category, concurrency), pooled over the category's workloads."""
        fields = (
            list(_flat(self.summary.categories[0].model_dump(), None))
            if self.summary.categories
            else ["arm", "category"]
        )
        columns, rows = [*IDENTITY, *fields], []
        for category in self.summary.categories:
            row = self.identity() | _flat(category.model_dump(), category.estimate)
            row["workloads"] = ",".join(row["workloads"])
            rows.append(_by_definition(row, category.arm == self.summary.baseline_arm))
        return _frame(rows, columns)

    def ramp(self) -> pd.DataFrame:
        """One row per (arm, workload, ramp stage) and per arm's whole ramp (``load.ramp``), pooled
        over the server start-ups; empty for a run without a ramp."""
        fields = [f for f in RampStageMetrics.model_fields if f != "startup_tok_s"]  # a list: per start-up
        rows = [
            self.identity() | _flat(m.model_dump(include=set(fields)), m.estimate) for m in self.summary.ramp
        ]
        return _frame(rows, [*IDENTITY, *_flat(dict.fromkeys(fields), None)])

    def table(self, name: str) -> pd.DataFrame:
        if name not in TABLES:
            raise ValueError(f"unknown table {name!r} (tables: {', '.join(TABLES)})")
        return getattr(self, name)()


def _step_cost_columns(cost: StepCost | None) -> dict[str, float | None]:
    """The cost model's reading of a speculative cell beside its ``step_ms`` (``harness.derive.
    cost_model``): its step cost relative to the baseline's and the tau where it would break even,
    each with its 95% interval; empty for the baseline and where no engine counted its steps."""
    found = {
        "step_cost": cost.cost if cost else None,
        "step_cost_low": cost.low if cost else None,
        "step_cost_high": cost.high if cost else None,
        "break_even_tau": cost.break_even_tau if cost else None,
        "break_even_tau_low": cost.break_even_low if cost else None,
        "break_even_tau_high": cost.break_even_high if cost else None,
    }
    return found


def _flat(row: dict[str, Any], estimate: SpeedupEstimate | None) -> dict[str, Any]:
    """A record's dump with its nested ``estimate`` spread in its place into the flat ``speedup_*``
    columns the export has always had (``SpeedupEstimate.columns``)."""
    out: dict[str, Any] = {}
    for key, value in row.items():
        out |= SpeedupEstimate.columns(estimate) if key == "estimate" else {key: value}
    return out


def load_run(path: str | Path) -> Run:
    """Load a run directory (any readable schema version) for analysis."""
    found = load_analysis(Path(path))  # the run's stored analysis while it is fresh
    return Run(path=Path(path), summary=found.analysis.summary, raw=found.raw, analysis=found.analysis)


def export(run: Run, out_dir: Path, fmt: ExportFormat = "csv") -> list[Path]:
    """Write every table of ``run`` into ``out_dir`` as ``<table>.<fmt>`` (``ramp`` only for a run
    with one), and the data dictionary of their columns as ``columns.csv``; returns the files."""
    frames = {name: run.table(name) for name in TABLES if name != "ramp" or run.summary.ramp}
    paths = [write_table(frame, out_dir / f"{name}.{fmt}", fmt) for name, frame in frames.items()]
    profile = _write_bytes(json.dumps(speculation_profile(run), indent=1).encode(), out_dir / PROFILE)
    return [*paths, profile, write_table(dictionary(frames), out_dir / DICTIONARY, "csv")]


def speculation_profile(run: Run) -> dict[str, Any]:
    """Per speculative cell with drafts: tau (per step, as the engine counts drafts), the marginal
    and conditional per-position rates, the two counter checks, whether K extrapolates down from it
    (a chain drafter) and specdec_bench's fields for the same numbers. ``Request_AR``: each prompt's
    tau where the engine reported it per request (vLLM 0.33+, SGLang), else absent."""
    cells = []
    for cell in run.summary.cells:
        if cell.tau is None or not cell.per_position_acceptance:
            continue
        marginal = cell.per_position_acceptance
        histogram = length_histogram(marginal, cell.drafts)
        conditional = cell.conditional_acceptance
        cells.append(
            {
                "arm": cell.arm,
                "method": cell.method,
                "num_speculative_tokens": cell.num_speculative_tokens,
                "drafter": cell.drafter,
                "workload": cell.workload,
                "load": cell.level.label(),
                "draft_counting": counting.semantics
                if (arm := run.summary.arm(cell.arm)) and (counting := arm.draft_counting)
                else None,
                "drafts": cell.drafts,
                "tau": cell.tau,
                "marginal_acceptance": marginal,
                "conditional_acceptance": conditional,
                "checks": {
                    "al_is_one_plus_sum_of_marginals_and_non_increasing": not acceptance_problems(
                        cell.tau, marginal
                    ),
                    "problems": acceptance_problems(cell.tau, marginal),
                },
                "extrapolable_down_in_k": cell.method in CHAIN_METHODS,
                "specdec_bench": {
                    "Average_AR": cell.tau,
                    "Acceptance_Length_Histogram": {str(k): v for k, v in histogram.items()},
                    # by emitted length: P(length >= k | length >= k - 1); length 1 is every step
                    "Conditional_Acceptance_Rate": {
                        "1": 1.0,
                        **{str(i + 2): rate for i, rate in enumerate(conditional) if rate is not None},
                    },
                    **({"Request_AR": cell.prompt_tau} if cell.prompt_tau else {}),
                },
            }
        )
    return {"profile_version": PROFILE_VERSION, **run.identity(), "cells": cells}


def dictionary(frames: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per (table, column): its unit, direction and definition, from the metric registry."""
    rows = [
        dict(
            zip(
                ("table", "column", "unit", "definition", "direction"),
                (name, column, *column_doc(column)),
                strict=True,
            )
        )
        for name, frame in frames.items()
        for column in frame.columns
    ]
    return _frame(rows, ["table", "column", "unit", "direction", "definition"])


def _write_bytes(body: bytes, path: Path) -> Path:
    """``body`` at ``path``, through a temporary file created new (never through a link someone
    placed there: a link at ``path`` itself is replaced, not followed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(body)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def write_table(frame: pd.DataFrame, path: Path, fmt: ExportFormat) -> Path:
    """``frame`` at ``path`` in ``fmt`` (``_write_bytes``)."""
    if fmt == "csv":
        body = frame.map(csv_cell).to_csv(index=False).encode()  # a text cell is never a formula
    elif fmt == "parquet":
        body = frame.to_parquet(index=False)
    else:
        body = frame.to_json(orient="records", lines=True).encode()
    return _write_bytes(body, path)
