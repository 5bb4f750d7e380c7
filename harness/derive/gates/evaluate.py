"""Every gate of a run's regime on every cell it covers (``evaluate``), and the exit code they give.

Every gate is evaluated per (arm, workload, load level) cell on SAMPLES, never on one number;
which samples and which statistic is the metric registry's (``harness.core.metrics``, read through
``harness.derive.samples.RunView``). A floor or ceiling is the run's own (``limits``); a maximum
regression is judged against the nights before in a history when there are enough of them
(``harness.derive.history.gate``), else against a baseline run (``relative``). "Inconclusive" (not
cleared, not failed) is an outcome of its own, exit 4, never a pass. A failed or missing arm is a
regression; an engine that never started is an infrastructure error (exit 3), not a regression.
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.config.checks import Gate, Gates
from harness.config.level import LoadLevel
from harness.config.regime import Regime
from harness.core.formats import inert
from harness.core.metrics import METRICS
from harness.derive.gates.limits import limit_check, speedup_limit
from harness.derive.gates.relative import against_baseline
from harness.derive.history.gate import HistoryGate, against_nights
from harness.derive.history.reference import MIN_NIGHTS
from harness.derive.intervals import stored_estimate
from harness.derive.samples import RunView
from harness.results.gate import (
    EXIT_INCONCLUSIVE,
    EXIT_INFRASTRUCTURE,
    EXIT_PASS,
    EXIT_REGRESSION,
    OUTCOMES,
    UNDERPOWERED,
    Check,
    InconclusivePolicy,
    Verdict,
)


def _cell_name(workload: str, level: LoadLevel) -> str:
    load = level.concurrency if level.request_rate is None else f"{level.request_rate:g} req/s"
    return f"[{workload} @ {load}]"


def _check(name: str, where: str, arm: str, metric: str, workload: str, level: LoadLevel) -> Check:
    return Check(
        name, where, arm, metric, workload, level.concurrency, "pass", "", request_rate=level.request_rate
    )


def _arm_problem(view: RunView, arm: str) -> tuple[Verdict, str] | None:
    """A failed, interrupted or missing arm: a regression, except an engine that never started."""
    status = view.summary.arm(arm)
    if status is None:
        return "fail", f"arm {arm} is not in this run"
    if status.status == "ok":
        return None
    if status.status == "failed" and status.phase == "startup":
        return (
            "error",
            f"infrastructure: the engine for {arm} did not start: {inert((status.error or '')[:300])}",
        )
    return "fail", inert(f"arm {arm} is {status.status}: {status.error or 'no results'}"[:400])


def _rule_checks(
    view: RunView, baseline: RunView | None, index: int, arm: str, history: HistoryGate | None = None
) -> list[Check]:
    """One rule of ``gates.rules`` on one arm's cells."""
    gates = view.regime.gates
    gate, where = gates.rules[index], f"rules[{index}]"
    cells = view.cells(arm, gate)
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
        name = f"{arm} {gate.metric} {kind} {_cell_name(workload, level)}"
        check = _check(name, where, arm, gate.metric, workload, level)
        if gate.max_regression_pct is None and gate.metric == "speedup":
            found = view.summary.cell(arm, workload, level)
            estimate = (
                stored_estimate(found.speedup, found.estimate, rounds=found.server_starts)
                if found is not None
                else None
            )
            checks.append(speedup_limit(check, estimate, gates.confidence, gate.min, gate.max))
        elif gate.max_regression_pct is None:
            checks.append(limit_check(view, arm, (workload, level), gate.metric, check, (gate.min, gate.max)))
        elif history is not None and history.enough:
            checks.append(against_nights(view, history, arm, (workload, level), gate, check))
        elif baseline is None:
            why = "no --baseline run given" + (
                f" and {len(history.nights.run_ids)} comparable nights in the history (under {MIN_NIGHTS})"
                if history is not None
                else ""
            )
            check.verdict, check.message = "skipped", f"relative gate: {why}"
            check.n = len(view.samples(arm, workload, level, gate.metric))
            checks.append(check)
        else:
            # too few nights for the history gate still say how far a night moves
            nights = (
                history.nights.values(arm, workload, level.concurrency, level.request_rate, gate.metric)
                if history is not None
                else []
            )
            checks.append(against_baseline(view, baseline, arm, (workload, level), gate, check, nights))
    return checks


def _golden_checks(view: RunView, index: int, arm: str) -> list[Check]:
    """One ``gates.golden_tau`` entry on one arm's cells of its workload."""
    gates = view.regime.gates
    golden, where = gates.golden_tau[index], f"golden_tau[{index}]"
    counted = view.summary.arm(arm)
    counting = counted.draft_counting.semantics if counted and counted.draft_counting else None
    if golden.draft_counting is not None and counting != golden.draft_counting:
        message = (
            f"the golden tau was counted as {golden.draft_counting}; {arm}'s engine counted drafts as "
            f"{counting or 'not recorded'}: not comparable (probes.acceptance.DRAFT_COUNTING)"
        )
        return [Check(f"{arm} tau (golden, {golden.workload})", where, arm, "tau", golden.workload, None,
                      "inconclusive", message)]  # fmt: skip
    checks = []
    for workload, level in view.cells(arm):
        if workload != golden.workload:
            continue
        name = f"{arm} tau = {golden.tau:g} +- {golden.tolerance:g} (golden) {_cell_name(workload, level)}"
        check = _check(name, where, arm, "tau", workload, level)
        bounds = golden.tau - golden.tolerance, golden.tau + golden.tolerance
        checks.append(limit_check(view, arm, (workload, level), "tau", check, bounds))
    return checks


def gated_arms(regime: Regime, gate: Gate) -> list[str]:
    """The arms one rule checks: the arm it names; for ``"*"`` every speculative arm, and the
    baseline too where the metric is its own timed figure (``Metric.of_baseline``): the engine
    regression a nightly exists to catch shows there first."""
    if gate.arm != "*":
        return [gate.arm]
    baseline = METRICS[gate.metric].of_baseline
    return [a.name for a in regime.arms if a.method != "baseline" or baseline]


def evaluate(
    view: RunView, baseline: RunView | None = None, history: HistoryGate | None = None
) -> list[Check]:
    """Every gate of the run's regime on every cell it covers; a broken arm is one check of its own.
    Relative gates compare with the history's nights when there are enough of them, else with
    ``baseline``."""
    regime, gates = view.regime, view.regime.gates
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
        for arm in gated_arms(regime, gate):
            if arm_ok(arm, gate.metric):
                checks += _rule_checks(view, baseline, index, arm, history)
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


def exit_code(checks: Sequence[Check], inconclusive: InconclusivePolicy = "inconclusive") -> int:
    """3 infrastructure error, 1 regression, 4 inconclusive (a check neither cleared nor failed;
    ``inconclusive`` "pass" or "fail" counts it as that instead), 0 pass: every check cleared, or
    skipped (a relative rule with nothing to compare with, said in its row)."""
    verdicts = {c.verdict for c in checks}
    if "error" in verdicts:
        return EXIT_INFRASTRUCTURE
    if "fail" in verdicts:
        return EXIT_REGRESSION
    if "inconclusive" in verdicts:
        return {"inconclusive": EXIT_INCONCLUSIVE, "fail": EXIT_REGRESSION, "pass": EXIT_PASS}[inconclusive]
    return EXIT_PASS


def night_outcome(checks: Sequence[Check], gates: Gates) -> str:
    """What a night's gate says of it as a later night's reference (``runs.gate_outcome``): its
    checks' outcome as they are (``--inconclusive`` aside), an inconclusive one told apart.
    "inconclusive": some check it could not clear had its point beyond the limit (a suspected
    regression, never a reference: a regression the noise hid must not become the normal it is
    judged by). "underpowered": every such check had its point within the limit, and only the
    noise (too few start-ups or nights) kept it from being cleared: the night stays a reference,
    judged like every night by the history's own check (``judge_series``). Keeping these out
    too would keep a young history young: in this project's rehearsal over simulated nights at
    cpu_nightly's design (tests/test_nightly_workflow.py), every quiet night from the third on was
    inconclusive on a band from 2 earlier nights (a night term on 1 degree of freedom), and the
    history never reached the 5 nights its own gate needs."""
    code = exit_code(checks)
    inconclusive = [c for c in checks if c.verdict == "inconclusive"]
    if code == EXIT_INCONCLUSIVE and not any(_suspect(c, gates) for c in inconclusive):
        return UNDERPOWERED
    return OUTCOMES[code]


def _suspect(check: Check, gates: Gates) -> bool:
    """An inconclusive check whose point lies beyond its limit: a relative rule's change worse than
    its tolerance; a floor, ceiling or golden tau (inconclusive only with the point beyond it), or a
    check without a point, always."""
    index = check.gate.removeprefix("rules[").removesuffix("]")
    rule = gates.rules[int(index)] if check.gate.startswith("rules[") and index.isdigit() else None
    if rule is None or rule.max_regression_pct is None or check.value is None or not check.baseline_value:
        return True
    change = check.value / check.baseline_value - 1
    worse = -change if METRICS[check.metric].higher_is_better else change
    return worse > rule.max_regression_pct / 100
