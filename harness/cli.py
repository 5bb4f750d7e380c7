"""The ``bench`` command. The only place that turns errors into messages and exit codes.

Exit codes: 0 success; 2 bad input (regime, workload, missing package); 3 engine/infrastructure
failure (an arm's server would not start or died; results are still written); 130 interrupted.
"""

from __future__ import annotations

import argparse
import functools
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape

from harness import __version__
from harness.errors import EngineError, UserError

if TYPE_CHECKING:
    from harness.results import Summary

EXIT_OK, EXIT_USAGE, EXIT_ENGINE, EXIT_INTERRUPTED = 0, 2, 3, 130


def _add_run(commands: Any) -> None:
    run = commands.add_parser(
        "run",
        help="launch every arm of a regime, measure, store results, print the mini-lab table",
        description="Launch each arm's server in turn, warm it up, measure every workload at every "
        "concurrency level, store raw samples and a summary under RESULTS_DIR/<regime>/<run-id>/, and print "
        "the mini-lab table. A regime with a sweep: section is a study: every point runs into "
        "RESULTS_DIR/<regime>/study-<id>/points/<point>/ and the recommendation, break-even loads, best K "
        "and flips are printed at the end.",
    )
    run.add_argument(
        "regime", type=Path, nargs="?", help="regime YAML file, e.g. regimes/cpu_smoke.yaml (or a study)"
    )
    run.add_argument(
        "--results-dir", type=Path, default=Path("results"), help="where runs are stored (default: results)"
    )
    run.add_argument(
        "--resume",
        type=Path,
        metavar="RUN_DIR",
        help="continue an interrupted or partly failed run from its first arm without complete results "
        "(uses the regime stored in the run; earlier files of an incomplete arm are kept as "
        "arms/<arm>.attempt-N); given a study directory, continue the study: finished points are kept",
    )
    run.add_argument(
        "--allow-mismatch",
        action="store_true",
        help="run even when the machine or the started engine does not match the regime's pins; every "
        "mismatch is recorded in the results and shown by the report",
    )
    run.add_argument(
        "--json",
        type=Path,
        metavar="FILE",
        dest="json_out",
        help="write {kind, dir, exit_code} to FILE for scripts and CI: dir as soon as the run (or study) "
        "directory exists, exit_code when the command ends (null dir: nothing was created)",
    )
    _add_executor_flags(run)


def _add_executor_flags(parser: Any) -> None:
    group = parser.add_argument_group(
        "study executors",
        "how a study's points run (a study only): each point is one job on one node",
    )
    group.add_argument(
        "--executor",
        choices=["local", "slurm", "ray"],
        help="local (default): on this node, points on disjoint GPU sets side by side (CPU points one "
        "at a time); slurm: one submitit job per point; ray: one Ray task per point. --resume uses the "
        "study's own executor unless given",
    )
    group.add_argument(
        "--gpus",
        type=int,
        metavar="N",
        help="GPUs of the node (local; the Ray instance the command starts): default, every GPU visible",
    )
    group.add_argument(
        "--gpus-per-point",
        type=int,
        metavar="N",
        help="GPUs each point gets (default: its tensor_parallel_size; CPU points none): e.g. 8 to keep "
        "each point alone on an 8-GPU node",
    )
    group.add_argument("--partition", help="Slurm partition (slurm)")
    group.add_argument("--account", help="Slurm account (slurm)")
    group.add_argument(
        "--time-limit",
        type=int,
        metavar="MIN",
        help="each point's time limit in minutes (default: per arm its start-up timeout plus 2 min per "
        "measured window)",
    )
    group.add_argument(
        "--slurm-cluster",
        choices=["slurm", "local", "debug"],
        help="submitit's cluster (slurm): local and debug run the jobs on this machine without Slurm",
    )
    group.add_argument("--ray-address", help="an existing Ray cluster (ray); default: start one on this node")


def _add_study_point(commands: Any) -> None:
    point = commands.add_parser(
        "study-point",
        help="run one point of a study into its run directory (what an executor's job runs)",
        description="Run one point of a study directory: the point's concrete regime, exactly as bench run "
        "runs a regime, into RUN_DIR (relative to the study directory), recording where it ran in "
        "placement.json. Executors start it; run it by hand only to debug a point.",
    )
    point.add_argument("study_dir", type=Path, help="the study directory (holds study.json)")
    point.add_argument("point", help="the point's id, e.g. p0")
    point.add_argument("--run-dir", required=True, help="the attempt's run directory, e.g. points/p0")
    point.add_argument("--continue", dest="resume", action="store_true", help="continue RUN_DIR in place")
    point.add_argument("--allow-mismatch", action="store_true", help="as for bench run")


def _add_validate(commands: Any) -> None:
    validate = commands.add_parser(
        "validate",
        help="check a regime file and print each arm's exact launch command; starts nothing",
    )
    validate.add_argument("regime", type=Path, help="regime YAML file")
    validate.add_argument(
        "--engine-requirement",
        action="store_true",
        help="print only the pip requirement of the engine release the regime pins (e.g. vllm==0.33.0), "
        'for installing exactly that: pip install "$(bench validate REGIME --engine-requirement)"',
    )
    _add_executor_flags(validate)


def _add_show(commands: Any) -> None:
    show = commands.add_parser(
        "show",
        help="re-derive and print the mini-lab tables, verdict and findings of a stored run (or a study)",
        description="Re-derive the summary of a stored run from its raw files and print it: the mini-lab "
        "tables, the verdict per workload and load level, the findings paragraph, exactness and caveats. "
        "--minilab prints only the lab's compact table in Markdown, for a design doc.",
    )
    show.add_argument("run_dir", type=Path, help="a run directory, results/<regime>/<run-id>")
    show.add_argument(
        "--minilab",
        action="store_true",
        help="print only the compact table (one row per arm; tau, tok/s, TPOT, $/Mtok, identical per "
        "workload, side by side) as Markdown",
    )
    show.add_argument(
        "--concurrency",
        type=int,
        help="the load level of the --minilab table (default: the lowest measured)",
    )


def _add_report(commands: Any) -> None:
    report = commands.add_parser(
        "report",
        help="render a run (or two runs side by side) into one self-contained HTML file",
        description="Render stored results into one HTML file that needs nothing from the network: the "
        "regime and environment, the mini-lab tables, figures, greedy-exactness detail and metric "
        "definitions. With two runs, put them side by side with the ratio B/A of each metric (refused "
        "across regimes unless --force).",
    )
    report.add_argument("run_dir", type=Path, help="a run directory, results/<regime>/<run-id>")
    report.add_argument("other_run_dir", type=Path, nargs="?", help="a second run to compare with the first")
    report.add_argument(
        "-o",
        "--output",
        type=Path,
        help="output file (default: reports/<regime>-<run-id>.html); for a study, a directory (default: "
        "reports/<regime>-<study-id>/, with index.html and one page per point)",
    )
    report.add_argument("--force", action="store_true", help="compare runs even when their regimes differ")


def _add_gate(commands: Any) -> None:
    gate = commands.add_parser(
        "gate",
        help="check a run against its regime's gates (and a baseline run); exit 1 on a regression",
        description="Evaluate the gates of the run's regime (gates: floors, ceilings, golden tau, and with "
        "--baseline the maximum regression against an earlier run) per arm, workload and concurrency, on "
        "the stored per-request and per-repeat samples. A regression is called only when it exceeds the "
        "tolerance AND the bootstrap interval of the change excludes zero. Writes a JUnit XML file (one "
        "test case per gate and cell) and a Markdown summary (also appended to $GITHUB_STEP_SUMMARY when "
        "set). Exit codes: 0 pass, 1 regression, 2 usage or configuration error, 3 infrastructure failure "
        "(an engine did not start).",
    )
    gate.add_argument("run_dir", type=Path, help="the run to check, results/<regime>/<run-id>")
    gate.add_argument(
        "--baseline",
        type=Path,
        metavar="RUN_DIR",
        help="an earlier run of the same regime conditions (e.g. the last good nightly run)",
    )
    gate.add_argument(
        "--gates",
        type=Path,
        metavar="REGIME",
        help="take the gates from this regime file instead of the ones stored with the run (to apply gates "
        "tuned after the run was made)",
    )
    gate.add_argument(
        "--force",
        action="store_true",
        help="gate against a baseline run measured on a different machine (CPU, GPUs, driver, engine "
        "build); refused otherwise, since the machine alone moves the numbers",
    )
    gate.add_argument("--junit", type=Path, help="JUnit XML output (default: RUN_DIR/gate/junit.xml)")
    gate.add_argument(
        "--markdown", type=Path, help="Markdown summary output (default: RUN_DIR/gate/summary.md)"
    )


def _add_export(commands: Any) -> None:
    export = commands.add_parser(
        "export",
        help="write a run's results as tables (cells, requests, categories, repeats) for pandas",
        description="Derive a run's tables from its raw files, exactly as `bench show` and "
        "`harness.load_run(RUN).cells()` see them, and write one file per table: cells (arm x workload x "
        "concurrency), requests (one row per measured request), categories (arm x category x concurrency) "
        "and repeats (one row per repeat of each cell). Column names carry their units.",
    )
    export.add_argument("run_dir", type=Path, help="a run directory, results/<regime>/<run-id>")
    export.add_argument(
        "--format", choices=("csv", "parquet", "jsonl"), default="csv", help="file format (default: csv)"
    )
    export.add_argument(
        "-o", "--output-dir", type=Path, help="where to write the tables (default: RUN_DIR/export)"
    )


def _add_drafter(commands: Any) -> None:
    drafter = commands.add_parser(
        "drafter",
        help="build the drafters a regime trains itself (self-distilled EAGLE-3 / DFlash heads)",
    )
    drafter_commands = drafter.add_subparsers(dest="drafter_command", required=True, metavar="ACTION")
    drafter_build = drafter_commands.add_parser(
        "build",
        help="self-distil the regime's trained drafters now (bench run would build them on first use)",
        description="For every arm whose draft_model is `trained:` (or only --arm / --method): the target "
        "answers the training prompts on the real engine (greedy), its hidden states are captured at the "
        "method's layers, and speculators' trainer fits the head; the checkpoint and a "
        "drafter_manifest.json (target identity, data split and hashes, steps, validation accuracy per "
        "position, library versions) are cached. The prompts the regime measures are held out. Interrupted "
        "builds resume where they stopped. The CPU regime's EAGLE-3 takes about 45 minutes on 2 cores.",
    )
    drafter_build.add_argument(
        "regime", type=Path, help="regime YAML file, e.g. regimes/cpu_trained_drafters.yaml"
    )
    drafter_build.add_argument("--arm", help="only this arm's drafter")
    drafter_build.add_argument("--method", choices=("eagle3", "dflash"), help="only the arms of this method")
    drafter_build.add_argument(
        "--continue-epochs",
        type=int,
        metavar="N",
        help="train each chosen arm's finished drafter N epochs more: its weights, a fresh warm-up + decay "
        "schedule, the first loss checked against where it ended; built and cached as a drafter of its own "
        "(the arm keeps its drafter; the output says how to measure the continuation)",
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bench",
        description="Benchmark speculative decoding (baseline, ngram, draft model, EAGLE-3, DFlash) in an "
        "exact regime on a real engine.",
        epilog="Quick start on a CPU-only machine: scripts/setup-cpu.sh, then .venv/bin/bench run "
        "regimes/cpu_smoke.yaml",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    adders = (
        _add_run,
        _add_validate,
        _add_show,
        _add_report,
        _add_gate,
        _add_export,
        _add_drafter,
        _add_study_point,
    )
    for add in adders:
        add(commands)
    return parser


def _cmd_validate(args: argparse.Namespace, console: Console) -> int:
    from harness.plan import plan_regime
    from harness.regime import load_regime

    regime = load_regime(args.regime)
    if args.engine_requirement:
        print(regime.engine_requirement(args.regime))  # plain: a script reads it
        return EXIT_OK
    if regime.sweep is not None:
        return _validate_study(args.regime, regime, _executor_options(args), console)
    plan = plan_regime(args.regime, regime)
    console.print(
        f"[green]{args.regime}: valid[/] (regime '{regime.name}', fingerprint {regime.fingerprint()})"
    )
    _print_plan(plan, console)
    return EXIT_OK


def _executor_options(args: argparse.Namespace, base: Any = None) -> Any:
    """The executor flags over ``base`` (a resumed study's own options); None when none was given."""
    from harness.study.record import ExecutorOptions

    flags = {
        "name": args.executor,
        "gpus": args.gpus,
        "gpus_per_point": args.gpus_per_point,
        "partition": args.partition,
        "account": args.account,
        "time_limit_min": args.time_limit,
        "slurm_cluster": args.slurm_cluster,
        "ray_address": args.ray_address,
    }
    given = {k: v for k, v in flags.items() if v is not None}
    for name in ("gpus", "gpus_per_point", "time_limit_min"):
        if given.get(name, 1) < (0 if name == "gpus" else 1):
            raise UserError(f"--{name.replace('_min', '').replace('_', '-')} must be positive")
    if not given:
        return base
    return (base or ExecutorOptions()).model_copy(update=given)


def _validate_study(path: Path, regime: Any, options: Any, console: Console) -> int:
    from harness.study.placement import plan_lines
    from harness.study.record import ExecutorOptions
    from harness.study.run import placement
    from harness.study.sweep import plan_study

    options = options or ExecutorOptions()
    study, plans = plan_study(path, regime)
    sweep = regime.sweep
    axes = [f"{p} in {v}" for p, v in sweep.regime.items()]
    axes += [f"{arm}.{f} in {v}" for arm, fields in sweep.arms.items() for f, v in fields.items()]
    console.print(
        f"[green]{path}: valid study[/] (regime '{regime.name}'): {len(study.points)} points, "
        f"{study.server_starts()} server start-ups (load.server_starts per arm per point; on this "
        "project's 2-core CPU machines a start-up took ~25 s in eager mode and ~2 min compiled). Axes: "
        + "; ".join(axes),
        highlight=False,
    )
    for point, plan in zip(study.points, plans, strict=True):
        console.rule(f"{point.id}: {point.label()} (fingerprint {point.regime.fingerprint()})")
        _print_plan(plan, console)
    ids = [p.id for p in study.points]
    node = "this node"
    try:
        wanted, slots, devices = placement(ids, plans, options)
    except UserError:
        if options.gpus is not None or regime.hardware.kind != "gpu":
            raise
        # validating a GPU study away from its node: plan for the node the regime pins
        options = options.model_copy(update={"gpus": regime.hardware.gpu_count})
        wanted, slots, devices = placement(ids, plans, options)
        node = "a node as hardware.gpu_count pins it (this machine has fewer GPUs)"
    console.rule(f"executor {options.name}")
    if slots is not None:
        gpus = f"{len(devices)} GPUs ({','.join(devices)})" if devices else "no GPU (CPU-only)"
        console.print(f"Placement on {node}, {gpus}: each point waits for the ones listed", highlight=False)
        for line in plan_lines(slots, wanted, devices):
            console.print(f"  {line}", highlight=False)
    else:
        for demand in wanted:
            console.print(
                f"  {demand.point}: one job, 1 node, {demand.gpus} GPUs, time limit {demand.minutes} min",
                highlight=False,
            )
    return EXIT_OK


def _print_plan(plan: Any, console: Console) -> None:
    """What `bench validate` shows of one concrete regime: the plan, this machine against it, commands."""
    from harness.environment import collect_environment
    from harness.plan import describe_plan

    model = plan.resolve_models(build=False)
    console.print(describe_plan(plan), highlight=False)
    preflight = plan.preflight(collect_environment(plan.adapter.installed_version()))
    for problem in preflight.lossy:
        console.print(f"[yellow]lossy acceptance setting:[/] {escape(problem)}", soft_wrap=True)
    if preflight.mismatches:
        console.print(
            "This machine does not match the regime (`bench run` would stop; --allow-mismatch to run anyway):"
        )
        for mismatch in preflight.mismatches:
            console.print(f"  [yellow]{escape(mismatch)}[/]", soft_wrap=True)
    else:
        console.print("This machine matches the regime's pins.")
    fits = plan.drafter_fits(model)
    for command in plan.arm_commands(model):
        arm = command.arm
        console.print(
            f"\n[bold]{arm.name}[/] ({arm.method}, K={arm.num_speculative_tokens or '-'}{command.drafter}):",
            highlight=False,
        )
        console.print(f"  {command.command}", highlight=False, soft_wrap=True)
        fit = fits.get(arm.name)
        if fit is not None:
            _print_fit(fit, console)


def _print_fit(fit: Any, console: Console) -> None:
    """An arm's drafter against the arm and the target (harness.drafters.fit)."""
    if fit.unchecked:
        console.print(f"  [yellow]drafter fit not checked:[/] {escape(fit.unchecked)}", soft_wrap=True)
    for problem in fit.problems:
        console.print(f"  [red]drafter does not fit:[/] {escape(problem)}", soft_wrap=True)
    if fit.checked:
        console.print(f"  drafter fit: {escape('; '.join(fit.checked))}", highlight=False, soft_wrap=True)


def _print_unread(summary: Summary, console: Console) -> None:
    for note in summary.unread_lines:
        console.print(f"[yellow]raw data not read:[/] {escape(note)}", soft_wrap=True)


def _print_results(summary: Summary, console: Console) -> int:
    from harness.table import (
        answer_lines,
        category_table,
        drafter_lines,
        exactness_table,
        failed_arms,
        minilab_tables,
        precision_line,
        timing_line,
    )

    for table in minilab_tables(summary):
        console.print(table)
    for line in answer_lines(summary):  # the answer first, right after the tables
        console.print(escape(line), highlight=False, soft_wrap=True)
    categories = category_table(summary)
    if categories is not None:
        console.print(categories)
    for line in drafter_lines(summary):
        console.print(escape(line), highlight=False, soft_wrap=True)
    exact = exactness_table(summary)
    if exact is not None:
        console.print(exact)
    _print_unread(summary, console)
    precision = precision_line(summary.cells)
    if precision:
        console.print(precision, highlight=False)
    timing = timing_line(summary)
    if timing:
        console.print(timing, highlight=False, soft_wrap=True)
    failed = failed_arms(summary)
    for arm in failed:
        console.print(f"[red]arm {arm.name}: {arm.status}[/] {escape(arm.error or '')}", soft_wrap=True)
    console.print(
        "tau = 1 + accepted/drafts from the engine's counters over each window; speedup = arm tok/s / "
        "baseline tok/s on the same prompts and concurrency; TPOT = (E2E - TTFT)/(tokens - 1) per request; "
        "same % = prompts whose greedy token ids equal the baseline's (for the baseline: its own second "
        "pass)."
    )
    return EXIT_ENGINE if failed else EXIT_OK


def _write_outcome(
    path: Path, kind: str | None, directory: Path | None, exit_code: int | None = None
) -> None:
    """``bench run --json FILE``: where the run went and how the command ended, for scripts (the
    nightly workflow reads the run directory from here instead of diffing directory listings)."""
    from harness.results import write_json_atomic

    where = str(directory.resolve()) if directory else None
    write_json_atomic(path, {"kind": kind, "dir": where, "exit_code": exit_code})


def _finish_outcome(path: Path, exit_code: int) -> None:
    """The command's exit code into the ``--json`` file, next to the directory it announced."""
    from harness.results import read_json

    record = read_json(path) if path.is_file() else {}
    directory = Path(record["dir"]) if record.get("dir") else None
    _write_outcome(path, record.get("kind"), directory, exit_code)


def _cmd_run(args: argparse.Namespace, console: Console) -> int:
    from harness.regime import load_regime
    from harness.runner import resume_run, run_regime
    from harness.study.record import is_study_dir
    from harness.study.run import resume_study, run_study

    if (args.regime is None) == (args.resume is None):
        raise UserError("give a regime file to start a run, or --resume RUN_DIR to continue one (not both)")
    if args.resume is not None:
        study = is_study_dir(args.resume)
    else:
        study = load_regime(args.regime).sweep is not None
    announce = None  # tells --json the run (or study) directory the moment it exists
    if args.json_out is not None:
        announce = functools.partial(_write_outcome, args.json_out, "study" if study else "run")
        announce(args.resume)

    if not study and _executor_options(args) is not None:
        raise UserError("--executor and its options apply to a study (a regime with a sweep: section)")
    if args.resume is not None and study:
        from harness.study.record import StudyDir

        options = _executor_options(args, StudyDir(args.resume).read().executor)
        directory, results = resume_study(args.resume, console, options, args.allow_mismatch)
        return _print_study(results, console)
    if study:
        from harness.study.record import ExecutorOptions

        options = _executor_options(args) or ExecutorOptions()
        directory, results = run_study(
            args.regime, args.results_dir, console, options, args.allow_mismatch, announce
        )
        return _print_study(results, console)
    if args.resume is not None:
        run, summary = resume_run(args.resume, console, args.allow_mismatch)
    else:
        run, summary = run_regime(args.regime, args.results_dir, console, args.allow_mismatch, announce)
    code = _print_results(summary, console)
    console.print(f"Results: {run.root}")
    return code


def _print_study(results: Any, console: Console) -> int:
    from harness.study.run import ANALYSIS_FILE
    from harness.study.tables import terminal_tables

    for summary in results.summaries.values():
        _print_unread(summary, console)
    for item in terminal_tables(results):
        console.print(item, highlight=False, soft_wrap=True) if isinstance(item, str) else console.print(item)
    failed = [
        f"{point}: {arm.name}"
        for point, s in results.summaries.items()
        for arm in s.arms
        if arm.status != "ok"
    ]
    for entry in failed:
        console.print(f"[red]failed arm {escape(entry)}[/]", highlight=False)
    analysis = results.root / ANALYSIS_FILE
    console.print(
        f"Study: {results.root}" + (f" (tables for design docs: {analysis})" if analysis.is_file() else "")
    )
    return EXIT_ENGINE if failed or results.missing else EXIT_OK


def _cmd_show(args: argparse.Namespace, console: Console) -> int:
    from harness.study.collect import load_study
    from harness.study.record import is_study_dir
    from harness.summary import summarize

    if is_study_dir(args.run_dir):
        from harness.study.run import write_analysis

        results = load_study(args.run_dir)
        write_analysis(results)  # derived: refreshed on every show
        return _print_study(results, console)
    summary = summarize(args.run_dir)
    if args.minilab:
        from harness.table import lab_markdown

        print(lab_markdown(summary, args.concurrency), end="")  # plain: for pasting, no wrapping
        return EXIT_OK
    return _print_results(summary, console)


def _cmd_report(args: argparse.Namespace, console: Console) -> int:
    from harness.report import render_comparison, render_context, report_context
    from harness.results import write_text_atomic
    from harness.study.record import is_study_dir

    if is_study_dir(args.run_dir):
        from harness.study.report import render_study

        if args.other_run_dir is not None:
            raise UserError(
                f"{args.run_dir} is a study: its page already compares its points; report one study"
            )
        out_dir = args.output or Path("reports") / f"{args.run_dir.parent.name}-{args.run_dir.name}"
        console.print(f"Report: {render_study(args.run_dir, out_dir)}")
        return EXIT_OK
    if args.other_run_dir is None:
        context = report_context(args.run_dir)
        _print_unread(context["summary"], console)
        html = render_context(context)
        default = Path("reports") / f"{args.run_dir.parent.name}-{args.run_dir.name}.html"
    else:
        html = render_comparison(args.run_dir, args.other_run_dir, args.force)
        default = Path("reports") / f"compare-{args.run_dir.name}-vs-{args.other_run_dir.name}.html"
    output = args.output or default
    write_text_atomic(output, html)
    console.print(f"Report: {output}")
    return EXIT_OK


def _cmd_export(args: argparse.Namespace, console: Console) -> int:
    from harness.results.frames import export, load_run, write_table
    from harness.study.record import is_study_dir

    out_dir = args.output_dir or args.run_dir / "export"
    if is_study_dir(args.run_dir):
        from harness.study.collect import load_study

        path = write_table(
            load_study(args.run_dir).cells(), out_dir / f"study_cells.{args.format}", args.format
        )
        console.print(
            f"wrote {path} (every point's cells, with the point and its axis values)", highlight=False
        )
        return EXIT_OK
    run = load_run(args.run_dir)
    _print_unread(run.summary, console)
    for path in export(run, out_dir, args.format):
        console.print(f"wrote {path}", highlight=False)
    return EXIT_OK


def _cmd_gate(args: argparse.Namespace, console: Console) -> int:
    import os

    from harness.gate_report import junit_xml, markdown, verdict_table
    from harness.gates import GATE_FILE, StoredGate, evaluate, exit_code, open_views
    from harness.regime import load_regime
    from harness.results import write_json_atomic, write_text_atomic

    for directory in filter(None, (args.run_dir, args.baseline)):
        if (directory / "study.json").is_file():
            raise UserError(
                f"{directory} is a study: gate one of its points (e.g. {directory / 'points' / 'p0'})"
            )
        if not (directory / "regime.json").is_file():
            raise UserError(f"{directory}: not a run directory (no regime.json)")
    view, baseline = open_views(args.run_dir, args.baseline, args.force)
    if view.machine_differences:
        console.print(
            "[yellow]gating against a run from a different machine (--force; this run vs the baseline):[/] "
            + escape("; ".join(view.machine_differences)),
            highlight=False,
            soft_wrap=True,
        )
    for opened in filter(None, (view, baseline)):
        _print_unread(opened.summary, console)
    if args.gates is not None:
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
    title = f"{view.regime.name} run {args.run_dir.name}" + (
        f" vs {args.baseline.name}" if args.baseline else ""
    )
    summary_md = markdown(checks, title, code)
    if view.machine_differences:
        summary_md += "\n**Forced across machines:** " + "; ".join(view.machine_differences) + "\n"
    junit = args.junit or args.run_dir / "gate" / "junit.xml"
    md = args.markdown or args.run_dir / "gate" / "summary.md"
    write_text_atomic(junit, junit_xml(checks, view.regime.name).decode())
    write_text_atomic(md, summary_md)
    stored = StoredGate(
        baseline_run=str(args.baseline) if args.baseline else None, exit_code=code, checks=checks
    )
    write_json_atomic(args.run_dir / GATE_FILE, stored.model_dump(mode="json"))
    if os.environ.get("GITHUB_STEP_SUMMARY"):
        with open(os.environ["GITHUB_STEP_SUMMARY"], "a") as step_summary:
            step_summary.write(summary_md)
    outcome = {0: "[green]pass[/]", 1: "[red]REGRESSION[/]", 3: "[red]INFRASTRUCTURE FAILURE[/]"}[code]
    console.print(f"gate: {outcome} (exit {code}); JUnit {junit}, Markdown {md}")
    return code


def _cmd_drafter(args: argparse.Namespace, console: Console) -> int:
    from harness.plan import plan_regime

    if args.continue_epochs is not None and args.continue_epochs < 1:
        raise UserError(
            f"--continue-epochs: expected a positive number of epochs, got {args.continue_epochs}"
        )
    plan = plan_regime(args.regime)
    built = plan.build_trained_drafters(console, args.arm, args.method, args.continue_epochs)
    for arm, drafter, cached in built:
        if cached:
            console.print(f"{arm.name}: already built: {drafter.path}")
        else:
            for epoch in (drafter.provenance.get("manifest") or {}).get("validation", []):
                accuracy = " / ".join(f"{a:.3f}" for a in epoch["accuracy_per_position"])
                console.print(
                    f"  epoch {epoch['epoch']}: validation accuracy per position {accuracy}", highlight=False
                )
        if args.continue_epochs is not None:
            trained = arm.draft_model.trained  # type: ignore[union-attr]
            console.print(
                f"{arm.name}: to measure the continuation, set the arm's draft_model.trained.warm_start: "
                f"{trained.warm_start} and epochs: {trained.epochs} (or draft_model: {drafter.path})",
                soft_wrap=True,
                highlight=False,
            )
    return EXIT_OK


def _cmd_study_point(args: argparse.Namespace, console: Console) -> int:
    from harness.study.jobs import run_point

    return run_point(args.study_dir, args.point, args.run_dir, args.resume, console, args.allow_mismatch)


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    # Piped output (CI logs, files) would otherwise be cut to 80 columns and truncate the table.
    console = __import__("harness.terminal").terminal.console()  # COLUMNS when piped (harness.terminal)
    # SIGTERM/SIGHUP unwind like Ctrl-C, so every server context manager stops its process group.
    # Ctrl-C itself too: left to asyncio.run, SIGINT only cancels the window's main task, and a task
    # that completes anyway (its last request done, the HTTP session closing) swallows the interrupt.
    signal.signal(signal.SIGINT, _raise_interrupt)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    signal.signal(signal.SIGHUP, _raise_interrupt)
    from harness.server import kill_all_started

    handlers = {
        "run": _cmd_run,
        "validate": _cmd_validate,
        "show": _cmd_show,
        "report": _cmd_report,
        "gate": _cmd_gate,
        "export": _cmd_export,
        "drafter": _cmd_drafter,
        "study-point": _cmd_study_point,
    }
    try:
        code = handlers[args.command](args, console)
    except UserError as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        code = EXIT_USAGE
    except EngineError as exc:
        console.print(f"[red]engine failure:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        code = EXIT_ENGINE
    except KeyboardInterrupt:
        message = (
            "the drafter build resumes where it stopped when run again"
            if args.command == "drafter"
            else "the partial run stays readable; bench run --resume DIR continues it (a run or a study)"
        )
        console.print(f"[yellow]interrupted[/]: servers stopped; {message}")
        code = EXIT_INTERRUPTED
    finally:
        kill_all_started()
    if getattr(args, "json_out", None) is not None:
        _finish_outcome(args.json_out, code)
    return code


if __name__ == "__main__":
    sys.exit(main())
