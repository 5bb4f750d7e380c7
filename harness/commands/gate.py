"""`bench gate RUN_DIR [--baseline OTHER]`: the regime's gates on a stored run; exit 1 on a regression."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from harness.commands.common import metric_definitions, require_run
from harness.commands.terminal import print_unread
from harness.errors import UserError
from harness.metrics import GATED

NAME = "gate"
SUMMARY = "check a run against its regime's gates (and a baseline run); exit 1 on a regression"
DESCRIPTION = f"""
Evaluate the gates of the run's regime (gates: floors, ceilings, golden tau, and with --baseline the
maximum regression against an earlier run) per arm, workload and concurrency, on the stored
per-request and per-repeat samples. A regression is called only when it exceeds the tolerance AND
the bootstrap interval of the change excludes zero.

Writes a JUnit XML file (one test case per gate and cell) and a Markdown summary (also appended to
$GITHUB_STEP_SUMMARY when set) into the output folder, and the verdicts into RUN_DIR/gate/checks.json
for the report.

Metrics a gate may name (harness.metrics):

{metric_definitions(GATED)}

Exit codes: 0 pass, 1 regression, 2 usage or configuration error, 3 infrastructure failure (an
engine did not start).
"""
EXAMPLES = """
bench gate results/cpu_smoke/20261201-093000-a1b2c3
bench gate RUN_DIR --baseline LAST_GOOD_RUN_DIR -o ci/gate/          # nightly CI
bench gate RUN_DIR --gates regimes/cpu_smoke.yaml --junit junit.xml  # gates tuned after the run
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
    from harness.gate_report import GateFiles, outcome_line, verdict_table, write_gate
    from harness.gates import evaluate, exit_code, open_views

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
    if args.gates is not None:
        from harness.regime import load_regime

        view.use_gates_from(load_regime(args.gates), str(args.gates))
    if not view.regime.gates.rules and not view.regime.gates.golden_tau:
        raise UserError(
            f"{args.run_dir}: its regime '{view.regime.name}' has no gates (add a gates: section)"
        )
    for arm in view.changed_arms:
        console.print(
            f"[yellow]arm {arm} is configured differently from the baseline run's[/]", highlight=False
        )
    checks = evaluate(view, baseline)
    code = exit_code(checks)
    console.print(verdict_table(checks))
    files = GateFiles.of(args.run_dir, args.output, args.junit, args.markdown)
    write_gate(checks, code, view, args.run_dir, args.baseline, files)
    console.print(outcome_line(code, files))
    return code
