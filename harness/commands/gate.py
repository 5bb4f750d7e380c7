"""`bench gate RUN_DIR [--baseline OTHER]`: the regime's gates on a stored run; exit 1 on a regression."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape

from harness.commands.common import METRICS_PAGE, require_run
from harness.commands.terminal import print_unread
from harness.core.errors import UserError
from harness.core.formats import inert
from harness.core.metrics import GATED

if TYPE_CHECKING:
    from harness.config.regime import Regime
    from harness.derive.history.gate import HistoryGate
    from harness.derive.samples import RunView
    from harness.present.gate_report import Confirmation
    from harness.results.gate import Check

NAME = "gate"
SUMMARY = "check a run against its regime's gates (and a baseline run); exit 1 regression, 4 inconclusive"
DESCRIPTION = f"""
Evaluate the gates of the run's regime (gates: floors, ceilings, golden tau, and with --baseline the
maximum regression against an earlier run) per arm, workload and concurrency, on the stored
per-request and per-repeat samples. A regression is called only when it exceeds the tolerance AND
the interval of the change excludes zero. A relative gate compares one value per server start-up
(load.server_starts >= 2 on both runs, or a machine calibration for output_tok_s); a check whose
interval is wider than its limit is inconclusive, never a pass. The baseline cannot be the run
itself. A rule for arm "*" checks every speculative arm, and the baseline too for its own timed
figures (tok/s, TTFT, TPOT, ITL, E2E, $/Mtok, SLO): an engine regression shows there first.

Three outcomes, each with its exit code: pass (every check cleared, or skipped: a relative rule with
nothing to compare with), regression (a check failed), inconclusive (a check neither cleared nor
failed: the change was beyond the limit but within the noise, or the noise too wide to see the
limit). Inconclusive is never a pass: it exits 4, and JUnit writes each such check as skipped with
the reason, so a dashboard does not count it as passed. --inconclusive pass|fail counts them as
that instead, said in every output and recorded in RUN_DIR/gate/checks.json.

With --history FILE (a history database: bench history), the relative rules compare the run with
the nights before it instead: the last --nights GOOD runs of the same regime fingerprint on the
same machine (never another's; a night that failed its own gate is not a reference, so a
regression that persists keeps failing until `bench history accept` takes it as the new normal),
through a prediction interval of where a night with no change falls, for the night alone and for
the mean of the last 3 nights (a step that persists, with less noise), each check's confidence
corrected for the night's number of checks (a night with nothing changed fails at most 1% of the
time), plus the rule's tolerance; with fewer than 5 such nights it says so and uses --baseline.

With --confirm, a gate that would fail or be inconclusive first re-runs the arms of those checks
(with the baseline arm) on fresh server start-ups into a new run directory beside the run, gates
that run against the same baseline, and fails only the checks that fail in both; a check that was
inconclusive takes the confirmation run's verdict (its fresh start-ups decide what the first could
not).

Writes a JUnit XML file (one test case per gate and cell) and a Markdown summary (also appended to
$GITHUB_STEP_SUMMARY when set) into the output folder, and the verdicts into RUN_DIR/gate/checks.json
for the report.

Metrics a gate may name: {", ".join(GATED)} (each one's unit and definition: {METRICS_PAGE}).

With --history, the outcome is recorded with the run in the history (a run that is there): a night
that was inconclusive is never one of the nights a later gate is measured against.

Exit codes: 0 pass, 1 regression, 2 usage or configuration error, 3 infrastructure failure (an
engine did not start), 4 inconclusive (no check failed, some could not be cleared; --inconclusive
pass|fail chooses otherwise).
"""
EXAMPLES = """
bench gate results/cpu_default/20261201-093000-a1b2c3
bench gate RUN_DIR --baseline LAST_GOOD_RUN_DIR -o ci/gate/          # nightly CI
bench gate RUN_DIR --gates regimes/cpu_default.yaml --junit junit.xml  # gates tuned after the run
bench gate RUN_DIR --baseline LAST_GOOD_RUN_DIR --confirm           # re-measure before "regression"
bench gate RUN_DIR --history results/history.duckdb --baseline LAST_GOOD_RUN_DIR  # nightly, vs the nights
bench gate RUN_DIR --baseline OTHER --inconclusive fail             # a pre-merge check: undecided is red
"""
INTERRUPTED = "the gate's files are written whole or not at all; run it again"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", type=Path, help="the run to check, results/<regime>/<run-id>")
    parser.add_argument(
        "--baseline",
        type=Path,
        metavar="OTHER_RUN_DIR",
        help="an earlier run of the same regime conditions (e.g. the last good nightly run)",
    )
    parser.add_argument(
        "--history",
        type=Path,
        metavar="FILE",
        help="gate the relative rules against the nights before this run in a history file (bench history): "
        "the last --nights good runs of the same regime fingerprint on the same machine, never others; "
        "with fewer than 5 of them, against --baseline instead (said so)",
    )
    parser.add_argument(
        "--nights",
        type=int,
        default=14,
        metavar="N",
        help="with --history: how many of the latest good comparable nights make the reference (default: 14)",
    )
    parser.add_argument(
        "--gates",
        type=Path,
        metavar="REGIME",
        help="take the gates from this regime file instead of the ones stored with the run (to apply gates "
        "tuned after the run was made)",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="gate against a baseline run measured on a different machine (CPU, GPUs, driver, engine "
        "build); refused otherwise, since the machine alone moves the numbers",
    )
    parser.add_argument(
        "--confirm",
        action="store_true",
        help="when the gate would fail, re-run the failing arms and the baseline arm on fresh server "
        "start-ups (load.server_starts start-ups of each of those arms, as the run's regime.json says, "
        "each measuring every window; nothing runs when the gate passes) into RUN_DIR-confirm beside the "
        "run, gate that run against the same --baseline, and fail only the checks that fail in both",
    )
    parser.add_argument(
        "--inconclusive",
        choices=("pass", "fail"),
        help="count an inconclusive check (not cleared, not failed) as a pass (exit 0) or a regression (exit "
        "1) instead of its own outcome (default: exit 4, never a pass); said in every output and recorded",
    )
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        metavar="DIR",
        help="the folder this command writes junit.xml and summary.md to (default: RUN_DIR/gate)",
    )
    parser.add_argument(
        "--junit", type=Path, metavar="FILE", help="JUnit XML output file (default: OUTPUT/junit.xml)"
    )
    parser.add_argument(
        "--markdown",
        type=Path,
        metavar="FILE",
        help="Markdown summary output file (default: OUTPUT/summary.md)",
    )


def run(args: argparse.Namespace, console: Console) -> int:
    from harness.derive.gates.evaluate import evaluate, exit_code
    from harness.derive.gates.relative import open_views
    from harness.present.gate_report import GateFiles, outcome_line, verdict_table, write_gate
    from harness.results.gate import EXIT_INCONCLUSIVE, EXIT_REGRESSION
    from harness.results.raw import unchecked_note

    for directory in filter(None, (args.run_dir, args.baseline)):
        require_run(directory, "gate")
    view, baseline = open_views(args.run_dir, args.baseline, args.force)
    if view.machine_differences:
        console.print(
            "[yellow]gating against a run from a different machine (--force; this run vs the baseline):[/] "
            + escape("; ".join(view.machine_differences)),
            highlight=False,
            soft_wrap=True,
        )
    for opened in filter(None, (view, baseline)):
        print_unread(opened.summary, console)
        if note := unchecked_note(opened.raw.run.root):  # on stderr, as bench show says it
            print(inert(note), file=sys.stderr)
    if args.gates is not None:
        from harness.config.regime import load_regime

        view.use_gates_from(load_regime(args.gates), str(args.gates))
    if not view.regime.gates.rules and not view.regime.gates.golden_tau:
        raise UserError(
            f"{args.run_dir}: its regime '{view.regime.name}' has no gates (add a gates: section)"
        )
    for arm in view.changed_arms:
        console.print(
            f"[yellow]arm {arm} is configured differently from the baseline run's[/]", highlight=False
        )
    history = _history(args, view, console) if args.history is not None else None
    policy = args.inconclusive or "inconclusive"
    checks = evaluate(view, baseline, history)
    code = exit_code(checks, policy)
    console.print(verdict_table(checks))
    files = GateFiles.of(args.run_dir, args.output, args.junit, args.markdown)
    confirmation = None
    if args.confirm and exit_code(checks) in (EXIT_REGRESSION, EXIT_INCONCLUSIVE):
        checks, confirmation = _confirm(args, view, checks, console, history)
        code = exit_code(checks, policy)
        console.print(verdict_table(checks))
    write_gate(checks, code, view, args.run_dir, args.baseline, files, confirmation, policy)
    if args.history is not None:
        _record_outcome(args.history, view, args.run_dir, checks, console)
    console.print(outcome_line(code, files, checks, policy), highlight=False, soft_wrap=True)
    return code


def _record_outcome(path: Path, view: RunView, run_dir: Path, checks: list[Check], console: Console) -> None:
    """The gate's outcome kept with the run in the history (``night_outcome``: its checks as they
    are, whatever --inconclusive chose), so that a night with a suspected regression is never a
    later night's reference (``comparable_nights``); a run the history lacks is said, not added."""
    from harness.derive.gates.evaluate import night_outcome
    from harness.derive.history.collect import history_run
    from harness.results.history.store import open_history

    run = history_run(view, run_dir)
    with open_history(path) as history:
        recorded = history.record_gate(run, night_outcome(checks, view.regime.gates))
    if not recorded:
        console.print(
            f"[yellow]{escape(run.run_id)} is not in {escape(str(path))}:[/] its gate outcome is not "
            "recorded there (bench history add RUN_DIR, or bench run --history, adds it)",
            highlight=False,
            soft_wrap=True,
        )


def _history(args: argparse.Namespace, view: RunView, console: Console) -> HistoryGate:
    """The nights this run's relative gates compare with, said in one line (or why it falls back)."""
    from harness.derive.history.collect import history_run
    from harness.derive.history.gate import history_gate
    from harness.derive.history.reference import MIN_NIGHTS, comparable_nights
    from harness.results.history.store import open_history

    if args.nights < 2:
        raise UserError(f"--nights {args.nights}: a prediction interval needs 2 nights or more")
    run = history_run(view, args.run_dir)  # the view already read: no samples collected twice
    with open_history(args.history, read_only=True) as history:
        nights = comparable_nights(
            history.runs(), history.samples(), run, args.nights, history.accepted(), history.cells()
        )
    found = len(nights.run_ids)
    since = f", since the change accepted at {nights.accepted}" if nights.accepted else ""
    if found >= MIN_NIGHTS:
        console.print(
            f"relative gates against the last {args.nights} good nights of {found} earlier ones in "
            f"{args.history}{since} (regime fingerprint {run.regime_fingerprint}, machine "
            f"{run.machine_key}, {nights.first} to {nights.last}); each night alone and the last 3 together",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
    else:
        fallback = "against --baseline" if args.baseline else "skipped (no --baseline)"
        console.print(
            f"[yellow]{found} earlier nights of this fingerprint and machine in {escape(str(args.history))}"
            f"{escape(since)}, fewer than {MIN_NIGHTS}:[/] relative gates {fallback}",
            highlight=False,
            soft_wrap=True,
        )
    return history_gate(view, nights)


def _confirm(
    args: argparse.Namespace,
    view: RunView,
    checks: list[Check],
    console: Console,
    history: HistoryGate | None,
) -> tuple[list[Check], Confirmation]:
    """Re-measure the arms of the failing and inconclusive checks on fresh start-ups, gate that run
    against the same baseline, keep a failure only where both runs fail and give an inconclusive
    check the confirmation's verdict; the confirmation run gets its own gate files."""
    from harness.derive.gates.confirm import arms_to_confirm, confirm, confirmation_regime
    from harness.derive.gates.evaluate import evaluate, exit_code
    from harness.derive.gates.relative import open_views
    from harness.present.gate_report import Confirmation, GateFiles, verdict_table, write_gate

    arms = arms_to_confirm(checks, view.regime)
    console.print(
        f"[yellow]confirming on fresh server start-ups:[/] {', '.join(arms)} "
        f"({view.regime.load.server_starts} start-up(s) each)",
        highlight=False,
    )
    regime = confirmation_regime(view.raw.regime, arms)
    run_dir = confirmation_run(view, regime, args.run_dir, console)
    again, baseline = open_views(run_dir, args.baseline, args.force)
    again.regime = again.regime.model_copy(update={"gates": confirmation_regime(view.regime, arms).gates})
    second = evaluate(again, baseline, history)  # the same reference nights as the run's
    second_code = exit_code(second)
    console.print(f"confirmation run {run_dir}:", markup=False)
    console.print(verdict_table(second))
    own = GateFiles.of(run_dir, None, None, None)
    write_gate(second, second_code, again, run_dir, args.baseline, own)
    combined = confirm(checks, second, run_dir.name)
    return combined, Confirmation(run_dir, second, second_code)


def confirmation_run(view: RunView, regime: Regime, run_dir: Path, console: Console) -> Path:
    """Run ``regime`` (the run's own, restricted to some arms) as ``bench run`` would, from the
    regime file the run recorded, into ``RUN_DIR-confirm`` (``-confirm-2``, ... when taken) beside
    the run; the prompts must still be the ones the run measured."""
    from harness.config.regime import recorded_source, stored_regime
    from harness.run.plan import changed_workload, plan_regime, prepare_run
    from harness.run.runner import Runner

    record = view.record
    source = recorded_source(record.source_path, run_dir)
    plan = plan_regime(source, stored_regime(regime.model_dump(mode="json"), source))  # its secrets back
    changed = changed_workload(record, plan)
    if changed is not None:
        raise UserError(
            f"{run_dir}: workload '{changed}' is not the one this run measured (its prompts "
            "changed); a confirmation would measure other prompts. Run the regime again instead."
        )
    ready = prepare_run(plan, console)
    root, index = run_dir.parent / f"{run_dir.name}-confirm", 1
    while root.exists():
        index += 1
        root = run_dir.parent / f"{run_dir.name}-confirm-{index}"
    run, _ = Runner(ready, run_dir.parent, console).run(run_root=root)
    return run.root
