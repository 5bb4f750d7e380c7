"""What `bench run` and `bench show` print of a run or a study (the tables themselves are
harness.present.table's and harness.present.study.tables'), and the notes every reading command
prints first."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape

from harness.commands.common import EXIT_ENGINE, EXIT_OK
from harness.core.formats import inert

if TYPE_CHECKING:
    from harness.derive.analysis import RunAnalysis
    from harness.derive.study.collect import StudyResults
    from harness.results import Summary

# Printed under every run's tables; the registry's own definitions: harness.core.metrics.METRICS.
LEGEND = (
    "tau = 1 + accepted/drafts from the engine's counters over each window; TPOT = (E2E - TTFT)/(tokens "
    "- 1) per request; same % = prompts whose greedy token ids equal the baseline's (for the baseline: "
    "its own second pass)."
)


def said(text: str) -> str:
    """Text of a stored run for the terminal: rich's markup escaped, control characters inert
    (``formats.inert``). A run stored before issue 70 keeps what servers reported raw (a version or
    a model id with an erase or a title sequence, inside a mismatch or a caveat), and what users
    typed (an override) raw: every line of a run is printed through this."""
    return escape(inert(text))


def print_unread(summary: Summary, console: Console) -> None:
    for note in summary.unread_lines:
        console.print(f"[yellow]raw data not read:[/] {said(note)}", soft_wrap=True)


def print_overrides(summary: Summary, console: Console) -> None:
    if summary.overrides:  # the tables are of the regime as run, not as its file says
        console.print(f"Set on the command line: {said('; '.join(summary.overrides))}", highlight=False)


def print_results(
    analysis: RunAnalysis, console: Console, run_dir: str | None = None, report: bool = True
) -> int:
    """A run's tables, categories, drafters, exactness and notes, then the answer last (the verdict
    per window, the command that would decide an undecided one, with ``run_dir``, and the report's
    unless ``report`` is False: `bench run` says it last, as its "next:" line); exit 3 when an arm
    failed."""
    from harness.present.ramp_table import ramp_tables
    from harness.present.table import (
        answer_lines,
        category_table,
        drafter_lines,
        exactness_table,
        failed_arms,
        minilab_tables,
        schedule_tables,
    )
    from harness.present.verdict_text import continue_lines

    summary = analysis.summary
    print_overrides(summary, console)
    for table in minilab_tables(analysis):
        console.print(table)
    for item in [*schedule_tables(analysis), *ramp_tables(analysis)]:  # a schedule's proof; the ramp
        if isinstance(item, str):
            console.print(said(item), highlight=False, soft_wrap=True)
        else:
            console.print(item)
    categories = category_table(analysis)
    if categories is not None:
        console.print(categories)
    for line in drafter_lines(summary):
        console.print(said(line), highlight=False, soft_wrap=True)
    exact = exactness_table(summary)
    if exact is not None:
        console.print(exact)
    print_unread(summary, console)
    _print_notes(summary, console)
    for line in answer_lines(analysis):  # the detail, then the answer: last, where the eye lands
        console.print(said(line), highlight=False, soft_wrap=True)
    failed = failed_arms(summary)
    for arm in failed:
        console.print(f"[red]arm {said(arm.name)}: {arm.status}[/] {said(arm.error or '')}", soft_wrap=True)
    if run_dir is not None:
        for line in continue_lines(analysis, run_dir):
            console.print(said(line), highlight=False, soft_wrap=True)
        if report:
            console.print(f"Report: bench report {said(run_dir)}", highlight=False, soft_wrap=True)
    return EXIT_ENGINE if failed else EXIT_OK


def _print_notes(summary: Summary, console: Console) -> None:
    """The notes under the tables: precision, whose power, where the time went, the legend."""
    from harness.present.table import SPEEDUP_NOTE, power_line, precision_line, timing_line

    precision = precision_line(summary.cells)
    if precision:
        console.print(precision, highlight=False)
    power = power_line(summary)  # whose power the tables' W and J/token columns are
    if power:
        console.print(said(power), highlight=False, soft_wrap=True)
    timing = timing_line(summary)
    if timing:
        console.print(timing, highlight=False, soft_wrap=True)
    console.print(f"{SPEEDUP_NOTE}; {LEGEND}", highlight=False)


def print_study(results: StudyResults, console: Console) -> int:
    """A study's tables and its arms without results (failed or interrupted); exit 3 when there is
    one or a point is missing."""
    from harness.present.study.analysis_md import ANALYSIS_FILE
    from harness.present.study.tables import terminal_tables

    for summary in results.summaries.values():
        print_unread(summary, console)
    for item in terminal_tables(results):
        console.print(said(item), highlight=False, soft_wrap=True) if isinstance(
            item, str
        ) else console.print(item)
    failed = [
        f"{point}: arm {arm.name}: {arm.status}"  # failed, or interrupted (a resume continues it)
        for point, s in results.summaries.items()
        for arm in s.arms
        if arm.status != "ok"
    ]
    for entry in failed:
        console.print(f"[red]{said(entry)}[/]", highlight=False)
    analysis = results.root / ANALYSIS_FILE
    console.print(
        said(
            f"Study: {results.root}"
            + (f" (tables for design docs: {analysis})" if analysis.is_file() else "")
        ),
        highlight=False,
    )
    return EXIT_ENGINE if failed or results.missing else EXIT_OK
