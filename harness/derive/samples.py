"""A run as its gates read it (``RunView``): its regime, summary cells, arm statuses, and per cell the
samples a metric is judged on, as the metric registry says where they come from (``harness.core.
metrics``): a window metric's repeats or start-up means, a request or chunk metric's values with the
start-ups they came from, a prompt metric's prompts. The history keeps the same start-up samples of a
run (``harness.derive.history.collect``), so a night is judged on what the nights before it kept."""

from __future__ import annotations

from typing import Any

from harness.config.checks import Gate
from harness.config.level import LoadLevel
from harness.config.regime import Regime
from harness.core import stats
from harness.core.errors import UserError
from harness.core.metrics import METRICS, PROMPT_STATUS, Metric
from harness.derive.summary import summarize
from harness.results.raw import read_raw
from harness.results.records import RequestRecord


class RunView:
    """What the gates read from one run directory: its regime, summary cells, arm statuses, samples."""

    def __init__(self, run_dir: Any):
        self.raw = read_raw(run_dir)
        self.record = self.raw.record
        self.regime = self.raw.regime
        self.summary = summarize(self.raw)  # derived afresh from the raw files
        self.changed_arms: list[str] = []  # arms configured differently in the baseline run
        self.machine_differences: list[str] = []  # vs the baseline run's machine (gated with --force)

    def use_gates_from(self, other: Regime, source: str) -> None:
        """Apply another regime file's gates to this run; every arm they name must be in the run."""
        names = {arm.name for arm in self.regime.arms}
        for index, gate in enumerate(other.gates.rules):
            if gate.arm != "*" and gate.arm not in names:
                raise UserError(
                    f"{source}: gates.rules[{index}].arm: the run has no arm '{gate.arm}' (arms: "
                    f"{', '.join(sorted(names))})"
                )
        self.regime = self.regime.model_copy(update={"gates": other.gates})

    def cells(self, arm: str, rule: Gate | None = None) -> list[tuple[str, LoadLevel]]:
        """The arm's (workload, load level) cells, or those a gate rule covers (``_covers``)."""
        return [
            (c.workload, c.level)
            for c in self.summary.cells
            if c.arm == arm and (rule is None or _covers(rule, c.workload, c.level))
        ]

    def samples(self, arm: str, workload: str, level: LoadLevel, name: str) -> list[float]:
        """The gate samples of one metric in one cell, as the registry says where they come from."""
        cell = self.summary.cell(arm, workload, level)
        if cell is None:
            return []
        metric = METRICS[name]
        if metric.samples == "repeat":
            return cell.independent_samples(name)  # one per server start-up when there are several
        if metric.samples == "prompt":
            block = self.summary.exactness.block(arm, self.summary.baseline_arm)
            status = PROMPT_STATUS[name]
            return [
                100.0 if e.status == status else 0.0
                for e in (block.prompts if block else [])
                if (e.workload, e.level) == (workload, level)
            ]
        records = [
            r for r in self.raw.arms[arm].samples if r.ok and (r.workload, r.level) == (workload, level)
        ]
        return [v for r in records for v in _record_samples(metric, r)]

    def startup_samples(self, arm: str, workload: str, level: LoadLevel, name: str) -> list[float]:
        """A relative gate's samples: one value per server start-up of the cell (a window metric's
        mean over the start-up's repeats; a request or chunk metric's statistic over the start-up's
        samples), or one per prompt for a prompt-level metric."""
        cell = self.summary.cell(arm, workload, level)
        if cell is None:
            return []
        metric = METRICS[name]
        if metric.samples == "prompt":
            return self.samples(arm, workload, level, name)
        if metric.samples == "repeat":
            values = cell.independent_samples(name)  # one per start-up when there are several
            return values if cell.server_starts > 1 or not values else [stats.mean(values)]
        return [statistic_of(name)(v) for v in self.startup_requests(arm, workload, level, name)]

    def startup_requests(self, arm: str, workload: str, level: LoadLevel, name: str) -> list[list[float]]:
        """A request or chunk metric's values per server start-up of the cell (oldest first): the
        clusters its gate resamples (requests of one start-up share what it gave)."""
        metric = METRICS[name]
        per_start: dict[int, list[float]] = {}
        repeats = self.regime.load.max_repeats()
        for r in self.raw.arms[arm].samples:
            if r.ok and (r.workload, r.level) == (workload, level) and (values := _record_samples(metric, r)):
                per_start.setdefault(r.repeat // repeats, []).extend(values)
        return [v for _, v in sorted(per_start.items())]

    def startups(self, arm: str, workload: str, level: LoadLevel) -> int:
        cell = self.summary.cell(arm, workload, level)
        return cell.server_starts if cell is not None else 0


def statistic_of(name: str) -> stats.Statistic:
    """The statistic a metric's gate judges (the registry's: mean, p50, p90, p99)."""
    return stats.STATISTICS[METRICS[name].statistic]


# sources whose samples a request record carries: one per request, or one per streamed chunk
PER_RECORD = ("request", "chunk")


def _record_samples(metric: Metric, record: RequestRecord) -> list[float]:
    """A request or chunk metric's samples in one record, in the metric's unit: the request's value
    (none where undefined), or one per streamed chunk after the first."""
    return [v * metric.scale for v in metric.record_values(record)]


def _covers(gate: Gate, workload: str, level: LoadLevel) -> bool:
    """A rule's narrowing: ``concurrency`` picks a closed-loop level, ``request_rate`` an open-loop one."""
    closed = level.request_rate is None
    return (
        gate.workload in (None, workload)
        and (gate.concurrency is None or (closed and level.concurrency == gate.concurrency))
        and (gate.request_rate is None or level.request_rate == gate.request_rate)
    )
