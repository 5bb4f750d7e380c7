"""`bench show RUN_DIR`: print a stored run's analysis (derived again where it is stale), or a study's."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from harness.commands.common import EXIT_OK, METRICS_PAGE, kind_of
from harness.commands.report import print_note
from harness.commands.terminal import print_results, print_study

NAME = "show"
SUMMARY = "re-derive and print the mini-lab tables, verdict and findings of a stored run (or a study)"
DESCRIPTION = f"""
Print a stored run: the mini-lab tables, the verdict per workload and load level, the findings
paragraph, exactness and caveats, from the run's analysis.json while it is fresh and matches what the
raw files give, else derived again from the raw files (a run of another harness version, one whose
raw files changed; one edited, or past its size limit: then said on stderr). Given a study,
print its recommendation, break-even loads, best K and flips, and refresh its analysis.md.

--minilab prints only the lab's compact table in Markdown, for a design doc: per arm and workload
the speedup with its 95% interval, the window's verdict word (on the row of the arm it is about),
tau, tok/s, TPOT, $/Mtok and how many outputs stayed identical to the baseline's.

Every metric's unit and definition: {METRICS_PAGE} (the registry, harness.core.metrics).
"""
EXAMPLES = """
bench show results/cpu_default/20261201-093000-a1b2c3
bench show . --minilab --concurrency 4 > table.md      # from inside a run directory
bench show results/cpu_study/study-20261201-093000-a1b2c3
"""
INTERRUPTED = "nothing was changed"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run_dir", type=Path, help="a run directory, results/<regime>/<run-id> (or a study directory)"
    )
    parser.add_argument(
        "--minilab",
        action="store_true",
        help="print only the compact table (one row per arm; speedup [95%%], verdict, tau, tok/s, TPOT, "
        "$/Mtok, identical per workload, side by side) as Markdown",
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        help="the load level of the --minilab table (default: the lowest measured)",
    )
    parser.add_argument(
        "--peers",
        action="store_true",
        help="print only each window as vllm bench serve and AIPerf report it: request, output and total "
        "token throughput, token totals, duration, acceptance length and rate, drafts, and TTFT, TTST, "
        "TPOT, ITL and E2E as mean/median/p99 (the report and the export add min, max, std, p90)",
    )


def run(args: argparse.Namespace, console: Console) -> int:
    from harness.derive.analysis import load_analysis

    if kind_of(args.run_dir) == "study":
        from harness.derive.study.collect import load_study
        from harness.present.study.analysis_md import write_analysis

        results = load_study(args.run_dir)
        write_analysis(results)  # derived: refreshed on every show
        return print_study(results, console)
    # resolved for --minilab: the run id is the directory's name, and `.` has none
    run = load_analysis(args.run_dir.resolve() if args.minilab else args.run_dir)
    # why the stored analysis.json was not used, lines that cannot be checked: stderr, so a piped
    # table stays clean
    print_note(run)
    if args.peers:
        from harness.present.peers import peers_tables

        for table in peers_tables(run.analysis.summary):
            console.print(table)
        return EXIT_OK
    if args.minilab:
        from harness.present.table import lab_markdown

        print(lab_markdown(run.analysis, args.concurrency), end="")  # plain: for pasting, no wrapping
        return EXIT_OK
    return print_results(run.analysis, console, str(args.run_dir))
