"""Regression gates: check a run against its regime's floors, ceilings and golden tau, and
against a baseline run, without failing on noise.

Every gate is evaluated per (arm, workload, load level) cell on SAMPLES, never on one number;
which samples and which statistic is the metric registry's (``harness.metrics``): one value per
repeat of the window (mean), per request pooled over repeats (the percentile itself), or per
prompt compared with the baseline (0/100, mean).

A floor or ceiling fails when the bootstrap interval of the statistic lies entirely beyond it; a
relative gate fails when the change against the baseline run is worse than the tolerance AND its
bootstrap interval excludes no change (a Mann-Whitney p-value is reported next to it). A point
beyond the limit whose interval still reaches it is "inconclusive": shown, never failing.
A failed or missing arm is a regression; an engine that never started is an infrastructure
error (exit 3), not a regression.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from harness import stats
from harness.environment import machine_differences
from harness.errors import UserError
from harness.metrics import METRICS, PROMPT_STATUS
from harness.regime import Gate, Gates, LoadLevel, Regime
from harness.results.files import read_json
from harness.results.raw import read_raw
from harness.results.records import ResultModel
from harness.summary import summarize

Verdict = str  # "pass" | "fail" | "inconclusive" | "skipped" | "error"


@dataclass
class Check:
    """One gate on one cell: what a JUnit test case and a terminal row show."""

    name: str
    gate: str  # where it comes from: "rules[0]", "golden_tau[1]", "arm"
    arm: str
    metric: str
    workload: str | None
    concurrency: int | None
    verdict: Verdict
    message: str
    value: float | None = None
    baseline_value: float | None = None
    low: float | None = (
        None  # interval of the value (absolute gates) or of the relative change (regression gates)
    )
    high: float | None = None
    p_value: float | None = None
    n: int = 0
    n_baseline: int = 0
    request_rate: float | None = None  # open-loop cells: the window's rate (concurrency is its cap)


class StoredGate(ResultModel):
    """``RUN_DIR/gate/checks.json``: the last ``bench gate`` of a run (the report shows its checks)."""

    baseline_run: str | None
    exit_code: int
    checks: list[Check]


GATE_FILE = Path("gate") / "checks.json"


def read_gate(run_dir: Path) -> StoredGate | None:
    """The run's stored gate verdicts, or None when ``bench gate`` has not run on it."""
    path = run_dir / GATE_FILE
    if not path.is_file():
        return None
    try:
        return StoredGate.model_validate(read_json(path))
    except ValidationError as exc:
        first = exc.errors()[0]
        raise UserError(f"{path}: {'.'.join(map(str, first['loc']))}: {first['msg']}") from None


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

    def cells(self, arm: str) -> list[tuple[str, LoadLevel]]:
        return [(c.workload, c.level) for c in self.summary.cells if c.arm == arm]

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
        values = [getattr(r, metric.sample_field) for r in records]
        return [v * metric.scale for v in values if v is not None]


def _statistic(name: str) -> stats.Statistic:
    return stats.STATISTICS[METRICS[name].statistic]


def _cell_name(workload: str, level: LoadLevel) -> str:
    load = level.concurrency if level.request_rate is None else f"{level.request_rate:g} req/s"
    return f"[{workload} @ {load}]"


def _check(name: str, where: str, arm: str, metric: str, workload: str, level: LoadLevel) -> Check:
    return Check(
        name, where, arm, metric, workload, level.concurrency, "pass", "", request_rate=level.request_rate
    )


def _covers(gate: Gate, workload: str, level: LoadLevel) -> bool:
    """A rule's narrowing: ``concurrency`` picks a closed-loop level, ``request_rate`` an open-loop one."""
    closed = level.request_rate is None
    return (
        gate.workload in (None, workload)
        and (gate.concurrency is None or (closed and level.concurrency == gate.concurrency))
        and (gate.request_rate is None or level.request_rate == gate.request_rate)
    )


def _arm_problem(view: RunView, arm: str) -> tuple[Verdict, str] | None:
    """A failed, interrupted or missing arm: a regression, except an engine that never started."""
    status = view.summary.arm(arm)
    if status is None:
        return "fail", f"arm {arm} is not in this run"
    if status.status == "ok":
        return None
    if status.status == "failed" and status.phase == "startup":
        return "error", f"infrastructure: the engine for {arm} did not start: {(status.error or '')[:300]}"
    return "fail", f"arm {arm} is {status.status}: {status.error or 'no results'}"[:400]


def _absolute(
    check: Check, values: list[float], gates: Gates, low_bound: float | None, high_bound: float | None
) -> Check:
    """A floor and/or ceiling on one cell's statistic: failed only when its interval is beyond."""
    check.n = len(values)
    metric = check.metric
    if not values:
        check.verdict, check.message = "fail", "no measurement for this cell"
        return check
    interval = stats.bootstrap_statistic(
        values, _statistic(metric), gates.bootstrap_resamples, gates.confidence
    )
    check.value, check.low, check.high = interval.point, interval.low, interval.high
    below = low_bound is not None and interval.point < low_bound
    above = high_bound is not None and interval.point > high_bound
    if not (below or above):
        check.message = f"{interval.point:.4g} within limits"
        return check
    clearly = (below and interval.high < low_bound) or (above and interval.low > high_bound)
    side = f"below {low_bound:g}" if below else f"above {high_bound:g}"
    spread = f"interval {interval.low:.4g}..{interval.high:.4g}, n={len(values)}"
    if clearly:
        check.verdict = "fail"
        check.message = f"{interval.point:.4g} is {side} ({spread})" + (
            "; n=1: a single measurement, no noise estimate (set load.repeats)" if len(values) == 1 else ""
        )
    else:
        check.verdict, check.message = (
            "inconclusive",
            f"{interval.point:.4g} is {side} but not beyond the noise ({spread})",
        )
    return check


def _relative(
    check: Check, values: list[float], reference: list[float], gates: Gates, tolerance_pct: float
) -> Check:
    """A maximum regression against the baseline run: failed only when beyond the tolerance AND
    the interval of the change excludes no change."""
    check.n, check.n_baseline = len(values), len(reference)
    metric = check.metric
    if not values:
        check.verdict, check.message = "fail", "no measurement for this cell"
        return check
    if not reference:
        check.verdict, check.message = "skipped", "the baseline run has no measurement for this cell"
        return check
    statistic = _statistic(metric)
    change = stats.bootstrap_relative_change(
        reference, values, statistic, gates.bootstrap_resamples, gates.confidence
    )
    higher_is_better = METRICS[metric].higher_is_better
    sign = -1.0 if higher_is_better else 1.0  # worse = positive
    worse = sign * change.point
    worse_low, worse_high = sorted((sign * change.low, sign * change.high))
    check.value, check.baseline_value = statistic(values), statistic(reference)
    check.low, check.high = worse_low, worse_high
    first, second = (reference, values) if higher_is_better else (values, reference)
    check.p_value = stats.mann_whitney_greater(first, second)[1]
    described = (
        f"{check.value:.4g} vs {check.baseline_value:.4g}: {100 * worse:+.1f}% worse (interval "
        f"{100 * worse_low:+.1f}..{100 * worse_high:+.1f}%, Mann-Whitney p={check.p_value:.3g}, "
        f"n={len(values)}/{len(reference)}; limit {tolerance_pct:g}%)"
    )
    if worse * 100 <= tolerance_pct:
        check.message = described
    elif min(len(values), len(reference)) < 2:
        check.verdict = "inconclusive"
        check.message = (
            "one measurement per side cannot be told from noise (set load.repeats >= 2): " + described
        )
    elif worse_low > 0:
        check.verdict, check.message = "fail", "regression: " + described
    else:
        check.verdict, check.message = "inconclusive", "within noise: " + described
    return check


def _rule_checks(view: RunView, baseline: RunView | None, index: int, arm: str) -> list[Check]:
    """One rule of ``gates.rules`` on one arm's cells."""
    gates = view.regime.gates
    gate, where = gates.rules[index], f"rules[{index}]"
    cells = [(w, level) for (w, level) in view.cells(arm) if _covers(gate, w, level)]
    if not cells:
        return [
            Check(
                f"{arm} {gate.metric} {where}",
                where,
                arm,
                gate.metric,
                gate.workload,
                gate.concurrency,
                "fail",
                "no measurement for the gate's workload/load level",
            )
        ]
    checks = []
    if gate.max_regression_pct is not None:
        kind = f"regression <= {gate.max_regression_pct:g}%"
    else:
        kind = f">= {gate.min:g}" if gate.min is not None else f"<= {gate.max:g}"
    for workload, level in cells:
        values = view.samples(arm, workload, level, gate.metric)
        name = f"{arm} {gate.metric} {kind} {_cell_name(workload, level)}"
        check = _check(name, where, arm, gate.metric, workload, level)
        if gate.max_regression_pct is None:
            checks.append(_absolute(check, values, gates, gate.min, gate.max))
        elif baseline is None:
            check.verdict, check.message, check.n = (
                "skipped",
                "relative gate: no --baseline run given",
                len(values),
            )
            checks.append(check)
        else:
            reference = baseline.samples(arm, workload, level, gate.metric)
            check = _relative(check, values, reference, gates, gate.max_regression_pct)
            reason = _not_the_engines_alone(view, baseline, arm, workload, level)
            # a timed metric's change may be the neighbour's (or a lagging client's), not the engine's;
            # tau and token comparisons are the engine's own counts whoever else ran
            if check.verdict == "fail" and reason and METRICS[gate.metric].timed:
                check.verdict, check.message = "inconclusive", f"{reason}: {check.message}"
            checks.append(check)
    return checks


def _not_the_engines_alone(
    view: RunView, baseline: RunView, arm: str, workload: str, level: LoadLevel
) -> str | None:
    """Why a cell's timed numbers may not be the engine's alone, in either run: a busy neighbour, or
    a client that fell behind its arrival schedule."""
    runs = (("this run", view), ("the baseline run", baseline))
    cells = [(name, v.summary.cell(arm, workload, level)) for name, v in runs]
    noisy = [name for name, cell in cells if cell and cell.noisy_neighbour]
    behind = [name for name, cell in cells if cell and cell.behind_schedule]
    if noisy:
        return f"measured beside a busy neighbour in {' and '.join(noisy)}"
    if behind:
        return f"the client fell behind its arrival schedule in {' and '.join(behind)}"
    return None


def _golden_checks(view: RunView, index: int, arm: str) -> list[Check]:
    """One ``gates.golden_tau`` entry on one arm's cells of its workload."""
    gates = view.regime.gates
    golden, where = gates.golden_tau[index], f"golden_tau[{index}]"
    checks = []
    for workload, level in view.cells(arm):
        if workload != golden.workload:
            continue
        name = f"{arm} tau = {golden.tau:g} +- {golden.tolerance:g} (golden) {_cell_name(workload, level)}"
        check = _check(name, where, arm, "tau", workload, level)
        values = view.samples(arm, workload, level, "tau")
        checks.append(
            _absolute(check, values, gates, golden.tau - golden.tolerance, golden.tau + golden.tolerance)
        )
    return checks


def evaluate(view: RunView, baseline: RunView | None = None) -> list[Check]:
    """Every gate of the run's regime on every cell it covers; a broken arm is one check of its own."""
    regime, gates = view.regime, view.regime.gates
    speculative = [a.name for a in regime.arms if a.method != "baseline"]
    checks: list[Check] = []
    reported: set[str] = set()

    def arm_ok(arm: str, metric: str) -> bool:
        problem = _arm_problem(view, arm)
        if problem is None:
            return True
        if arm not in reported:  # one test case per broken arm, however many gates name it
            reported.add(arm)
            checks.append(Check(f"{arm} ran", "arm", arm, metric, None, None, *problem))
        return False

    for index, gate in enumerate(gates.rules):
        for arm in speculative if gate.arm == "*" else [gate.arm]:
            if arm_ok(arm, gate.metric):
                checks += _rule_checks(view, baseline, index, arm)
    target = regime.target_reference()
    for index, golden in enumerate(gates.golden_tau):
        if golden.target != target:
            continue
        for arm in regime.arms:
            if (arm.method, arm.num_speculative_tokens) != (golden.method, golden.num_speculative_tokens):
                continue
            if arm_ok(arm.name, "tau"):
                checks += _golden_checks(view, index, arm.name)
    return checks


def open_views(run_dir: Any, baseline_dir: Any | None, force: bool = False) -> tuple[RunView, RunView | None]:
    """Both runs, refusing a comparison of runs made under different conditions, or on different
    machines unless forced (then the differences are kept for the banner)."""
    view = RunView(run_dir)
    if baseline_dir is None:
        return view, None
    baseline = RunView(baseline_dir)
    mine = view.regime.conditions_fingerprint(view.record["workloads"])
    theirs = baseline.regime.conditions_fingerprint(baseline.record["workloads"])
    if mine != theirs:
        raise UserError(
            f"{run_dir} and {baseline_dir} were measured under different conditions (regime fingerprints "
            f"without the arms: {mine} vs {theirs}: hardware, engine, target, load, sampling or prompts "
            "differ); gating one against the other would compare different regimes"
        )
    differences = machine_differences(view.raw.environment, baseline.raw.environment)
    if differences and not force:
        raise UserError(
            f"{run_dir} and {baseline_dir} were measured on different machines (this run vs the baseline: "
            f"{'; '.join(differences)}); "
            "the machine alone moves the numbers. Pass --force to gate across machines anyway (the "
            "result says so)"
        )
    view.machine_differences = differences
    view.changed_arms = [
        a.name
        for a in view.regime.arms
        for b in baseline.regime.arms
        if a.name == b.name and a.model_dump() != b.model_dump()
    ]
    return view, baseline


def exit_code(checks: Sequence[Check]) -> int:
    """3 infrastructure error, 1 regression, 0 pass (inconclusive and skipped gates pass)."""
    verdicts = {c.verdict for c in checks}
    if "error" in verdicts:
        return 3
    if "fail" in verdicts:
        return 1
    return 0
