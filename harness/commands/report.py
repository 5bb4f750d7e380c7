"""`bench report RUN_DIR [--baseline OTHER]`: one self-contained HTML page of a run, of two runs
side by side, or of a study."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from harness.commands.common import EXIT_OK, kind_of
from harness.commands.terminal import print_unread
from harness.core.errors import UserError

if TYPE_CHECKING:
    from harness.derive.analysis import AnalyzedRun

NAME = "report"
SUMMARY = "render a run (or two runs side by side) into one self-contained HTML file"
DESCRIPTION = """
Render stored results into one HTML file that needs nothing from the network: the regime and
environment, the mini-lab tables, figures, greedy-exactness detail and metric definitions.

With a baseline run, put the two side by side: each speculative cell's verdict in both runs with
its interval and whether the decision changed, each metric's change read better or worse in its
direction, and the ratio of each metric, the run over its baseline: `bench report RUN_DIR
--baseline BASE_DIR` (as in `bench gate RUN_DIR --baseline BASE_DIR`), or the older positional
form `bench report A B`, which shows B / A (refused across regimes or machines unless --force).
Given a study, write a folder: index.html and one page per point.
"""
EXAMPLES = """
bench report results/cpu_default/20261201-093000-a1b2c3
bench report results/cpu_default/20261201-093000-a1b2c3 -o smoke.html
bench report RUN_DIR --baseline BASE_DIR        # RUN / BASE; same as: bench report BASE_DIR RUN_DIR
bench report results/cpu_study/study-20261201-093000-a1b2c3 -o reports/study/
"""
INTERRUPTED = "no report was written"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run_dir", type=Path, help="a run directory, results/<regime>/<run-id> (or a study directory)"
    )
    parser.add_argument(
        "other_run_dir", type=Path, nargs="?", help="a second run B, shown as B / A with RUN_DIR as A"
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        metavar="BASE_DIR",
        help="the run to compare RUN_DIR with: ratios are RUN_DIR / BASE_DIR (as in bench gate --baseline)",
    )
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        metavar="PATH",
        help="the file this command writes (default: reports/<regime>-<run-id>.html; two runs: "
        "reports/compare-<A>-vs-<B>.html); for a study, the folder it writes (default: "
        "reports/<regime>-<study-id>/, with index.html and one page per point)",
    )
    parser.add_argument(
        "--force", action="store_true", help="compare runs even when their regimes or machines differ"
    )


def run(args: argparse.Namespace, console: Console) -> int:
    from harness.results import write_text_atomic

    if args.baseline is not None and args.other_run_dir is not None:
        raise UserError("give the second run once: as --baseline BASE_DIR or as the second argument")
    # resolved: the run id and the default file name are the directories' names, and `.` has none
    run_dir = args.run_dir.resolve()
    other = args.other_run_dir.resolve() if args.other_run_dir is not None else None
    if args.baseline is not None:  # the baseline is A, the run is B: ratios run / baseline
        run_dir, other = args.baseline.resolve(), run_dir
    if kind_of(run_dir) == "study":
        if other is not None:
            raise UserError(f"{run_dir} is a study: its page already compares its points; report one study")
        from harness.results.study.record import StudyDir

        regime = StudyDir(run_dir).read().name  # the study regime's name, wherever the folder is
        out_dir = args.output or Path("reports") / f"{regime}-{run_dir.name}"
        console.print(f"Report: {study_page(run_dir, out_dir)}", markup=False)
        return EXIT_OK
    html, default = _render(run_dir, other, args.force, console)
    output = args.output or default
    write_text_atomic(output, html)
    console.print(f"Report: {output}", markup=False)
    return EXIT_OK


def study_page(study_dir: Path, out_dir: Path) -> Path:
    """A study's page and its points' reports under ``out_dir``, each point's run analysed once."""
    from harness.derive.analysis import load_analysis
    from harness.derive.study.collect import load_study
    from harness.present.study.report import render_study

    study = load_study(study_dir)
    runs = {point: load_analysis(path) for point, path in study.run_dirs.items()}
    for point, run in runs.items():
        print_note(run, point)
    return render_study(study, runs, out_dir)


def print_note(run: AnalyzedRun, label: str | None = None) -> None:
    """Why a run's stored analysis.json was not used, where that is news, and whether its raw lines
    could not be checked (written before they were counted): a line each on stderr."""
    from harness.core.formats import inert
    from harness.results.raw import unchecked_note

    for note in filter(None, (run.note, unchecked_note(run.root))):
        print(inert(f"{label}: {note}" if label else note), file=sys.stderr)


def _render(run_dir: Path, other: Path | None, force: bool, console: Console) -> tuple[str, Path]:
    """The page and its default file: one run, or two side by side."""
    from harness.derive.analysis import load_analysis
    from harness.present.report import render_comparison, render_report

    run = load_analysis(run_dir)
    print_note(run)
    if other is None:
        print_unread(run.analysis.summary, console)
        # named after the regime the run measured (its regime.json), not the folder it is kept in
        return render_report(run), Path("reports") / f"{run.raw.regime.name}-{run_dir.name}.html"
    from harness.derive.gates.compare import compare_runs

    base = load_analysis(other)
    print_note(base)
    # B (the second run) against A as `bench gate B --baseline A` computes it
    html = render_comparison(run, base, force, compare_runs(run.root, base.root))
    return html, Path("reports") / f"compare-{run_dir.name}-vs-{other.name}.html"
