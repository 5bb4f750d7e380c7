"""`bench history add|import|show`: every run kept in one DuckDB file, for nightly regression work."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from harness.commands.common import EXIT_OK, EXIT_USAGE, kind_of, subcommand
from harness.core.errors import UserError
from harness.core.formats import inert

NAME = "history"
SUMMARY = "keep runs in a history database (DuckDB): add, import, show, accept, change points, trend page"
DESCRIPTION = """
The nightly history: one DuckDB file (default results/history.duckdb) holding every run added to
it, each with its regime fingerprint, the machine it ran on, the engine and its patches, the
harness's commit and when it started, and per arm and cell the start-up-level samples of every
gateable metric and the cell's speedup with its interval and verdict.

add: append runs or studies (a study adds each of its points); a run already in the history is
not added again (keyed by run id and by its raw samples: a copy of a run's directory under another
name is "already there (as RUN)"). import: add every run and study found under a folder. show:
one line per run in the history. accept: take a change a run shows as the new normal (the
history gate's nights for its fingerprint and machine start at that run). changes: the change
points of every series (regime fingerprint x machine x arm x cell x metric, one value per night:
the geometric mean of its start-ups) by Apache Otava's E-Divisive means, each with its night, the
step with its 95% interval, and what else changed that night (engine version, patches, commits).
report: the trend page, one self-contained HTML file: per arm and metric the nights with their
intervals, the band a night with no change falls in, the change points marked, and the open
regressions.

Read it from Python with harness.load_history(PATH): .runs(), .samples(), .cells() as DataFrames.
"""
EXAMPLES = """
bench history add results/cpu_default/20261201-093000-a1b2c3
bench history add results/cpu_policy/study-20261202-073003-5ab544 --history nightly.duckdb
bench history import results/
bench history show --history nightly.duckdb
bench history accept 20261203-020000-d4e5f6 --reason "vLLM 0.33: slower, accepted"
bench history changes --metric output_tok_s
bench history report --history nightly.duckdb -o trend.html
"""
INTERRUPTED = "each run is added whole or not at all; run it again to add the rest"


# Each action's description and examples (its own --help)
ACTIONS = {
    "add": (
        "append runs or studies (each study point) to the history",
        """Append run directories, or studies (each of their points), to the history file: per run its
        identity (regime fingerprint, machine, engine and patches, commits, time) and per cell the
        start-up-level samples of every gateable metric with the verdict. A run already in the file
        is not added again (keyed by run id, and by a digest of its raw samples: a copy of a run
        directory under another name is said "already there (as RUN)"); an unfinished run is said,
        not added.""",
        """bench history add results/cpu_default/20261201-093000-a1b2c3
        bench history add results/cpu_policy/study-20261202-073003-5ab544 --history nightly.duckdb""",
    ),
    "import": (
        "add every run and study found under a folder",
        """Search a folder (a results tree) for run and study directories and add each to the history
        (runs already there are kept as they are): backfilling the history from stored results.""",
        "bench history import results/",
    ),
    "show": (
        "one line per run in the history",
        """One line per run in the history file, oldest first: when it started, its run id, regime and
        fingerprint, the machine key, the engine and how many cells it holds.""",
        "bench history show --history nightly.duckdb",
    ),
    "accept": (
        "take the change a run shows as the new normal for the history gate",
        """A regression the gate found and the team decided to keep (an engine upgrade's cost, a new
        machine image) would otherwise fail every night after it: the history gate's reference is
        the good nights, and a night that failed is not one. Accepting a run makes the nights of its
        regime fingerprint and machine start at it: the gate falls back to --baseline until 5 nights
        have been measured since, then gates against them. Kept in the history with the reason.""",
        """bench history accept 20261203-020000-d4e5f6 --reason "vLLM 0.33: slower, accepted"
        bench history accept 20261203-020000-d4e5f6 --history nightly.duckdb --reason 'new host'""",
    ),
    "changes": (
        "change points per series (arm x cell x metric, one value per night; Apache Otava's E-Divisive)",
        """Per series (regime fingerprint x machine x arm x cell x metric, one value per night: the
        geometric mean of its start-ups), the nights where it stepped, by Apache Otava's E-Divisive
        means (p < 0.001, 6 nights or more): each with the step and its 95% interval, Otava's p-value
        and what else changed that night (engine version, patches, commits).""",
        """bench history changes
        bench history changes --metric output_tok_s --metric tau""",
    ),
    "report": (
        "the trend page: one self-contained HTML file of every series, change points marked",
        """The trend page, one self-contained HTML file (no scripts, nothing fetched): the open
        regressions first, then per regime fingerprint and machine, per arm and metric, the nights
        with their intervals, the band a night with no change falls in, and the change points.""",
        """bench history report -o trend.html
        bench history report --history nightly.duckdb --metric tpot_ms_p90""",
    ),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    subs = {
        name: subcommand(actions, name, summary=summary, description=text, examples=examples)
        for name, (summary, text, examples) in ACTIONS.items()
    }
    subs["add"].add_argument(
        "paths", type=Path, nargs="+", metavar="RUN|STUDY", help="run or study directories"
    )
    subs["add"].add_argument(
        "--engine-commit", metavar="SHA", help="the engine's git commit, recorded with each run added"
    )
    subs["accept"].add_argument(
        "run_id", metavar="RUN_ID", help="a run id in the history (bench history show)"
    )
    subs["accept"].add_argument("--reason", required=True, help="why the change is kept (stored with it)")
    subs["import"].add_argument("folder", type=Path, metavar="DIR", help="a results folder (searched below)")
    subs["report"].add_argument(
        "-o", "--output", type=Path, metavar="FILE", help="default: the history file's folder/history.html"
    )
    for name in ("changes", "report"):
        subs[name].add_argument(
            "--metric",
            action="append",
            metavar="NAME",
            help="only this metric (repeatable; default: every one for changes; output_tok_s, speedup, "
            "tau, tpot_ms_p50 for report)",
        )
    for sub in subs.values():
        sub.add_argument(
            "--history",
            type=Path,
            default=Path("results") / "history.duckdb",
            metavar="FILE",
            help="the history file (default: results/history.duckdb; created when adding)",
        )


def _run_dirs(path: Path) -> list[tuple[Path, str | None]]:
    """The run directories a path names: itself, or a study's points (with the study's name)."""
    if kind_of(path) == "run":
        return [(path, None)]
    from harness.results.study.record import StudyDir

    study = StudyDir(path)
    return [(study.point_run(point).root, path.name) for point in study.read().points]


def found_under(folder: Path) -> list[Path]:
    """Every run and study directory under ``folder`` (a study's points are its own, not searched)."""
    if not folder.is_dir():
        raise UserError(f"{folder}: not a folder")
    studies = sorted(p.parent for p in folder.rglob("study.json"))
    runs = sorted(
        p.parent
        for p in folder.rglob("regime.json")
        if not any(study in p.parents for study in studies) and ".attempt-" not in p.parent.name
    )
    return studies + runs


def add_to_history(paths: list[Path], history_path: Path, engine_commit: str | None, console: Console) -> int:
    """Append run and study directories (each study point) to the history, each run once: a run id
    it holds, or a copy of a run it holds (the same raw samples under another name, said with the
    run id it is there as), adds nothing. A run that cannot be read (a corrupt line) is said and not
    added, the others are; exit 2 then."""
    from harness.derive.history.collect import IncompleteRun, content_digest, history_entry
    from harness.results.history.store import open_history
    from harness.results.raw import unchecked_note

    runs = [found for path in paths for found in _run_dirs(path)]
    entries, notes, unreadable = [], [], 0
    unchecked: dict[int, str | None] = {}  # per entry: its raw lines written before they were counted
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    # read every run first: the history file is held (other writers wait) only while it is written
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("reading runs", total=len(runs))
        for run_dir, study in runs:
            try:
                entry = history_entry(run_dir, engine_commit, study)
            except IncompleteRun as exc:
                notes.append(f"[yellow]not added:[/] {_text(str(exc))}")  # an unfinished run: said
            except UserError as exc:  # a corrupt file: said with its line, the other runs go on
                notes.append(f"[red]not added:[/] {_text(str(exc))}")
                unreadable += 1
            else:
                entries.append(entry)
                unchecked[id(entry)] = unchecked_note(run_dir)
            bar.advance(task)
    added = kept = 0
    with open_history(history_path) as history:
        history.fill_digests(content_digest)  # an older file's runs: a copy of one is no new night
        for entry in entries:
            run = entry.run
            stored = history.stored_as(run)
            if stored is None and history.add(entry):
                added += 1
                said = [*entry.unread_lines, *filter(None, [unchecked[id(entry)]])]
                notes += [f"[yellow]{_text(run.run_id)} added;[/] {_text(n)}" for n in said]
                continue
            kept += 1
            if stored is not None and stored != run.run_id:  # a copy: said, with what it is a copy of
                notes.append(f"{_text(run.source)}: already there (as {_text(stored)})")
    for note in notes:
        console.print(note, highlight=False, soft_wrap=True)
    console.print(
        f"{history_path}: {added} run(s) added, {kept} already there"
        + (f", {unreadable} not readable" if unreadable else ""),
        highlight=False,
        markup=False,
        soft_wrap=True,
    )
    return EXIT_USAGE if unreadable else EXIT_OK


def _text(value: object) -> str:
    """Text a run, a server or a user wrote (a run id, a regime name, a version, a reason), as rich
    markup that prints it as it is: control characters as visible escapes (an ESC[2J or an OSC title
    in it would clear or retitle the terminal), square brackets as text; "-" for none (a null the
    history's frame holds as NaN)."""
    if value is None or (isinstance(value, float) and value != value):
        return "-"
    return escape(inert(str(value)))


def _show(history_path: Path, console: Console) -> int:
    from harness.present.width import Column, FitTable
    from harness.results.history.store import open_history

    with open_history(history_path, read_only=True) as history:
        runs, cells, accepted = history.runs(), history.cells(), history.accepted()
    reasons = dict(zip(accepted.run_id, accepted.reason, strict=True))
    # every value whole (the run id is what `bench history accept` takes): a table too wide for the
    # terminal is stacked, the night and the run repeated on each part
    table = FitTable(
        f"{escape(str(history_path))}: {len(runs)} run(s)",
        keys=[Column("started", text=True), Column("run", text=True)],
        columns=[
            *(Column(h, text=True) for h in ("regime", "fingerprint", "machine", "engine")),
            Column("cells"),
            Column("accepted", wraps=True),
        ],
    )
    counts = cells.groupby("run_id").size() if len(cells) else {}
    for row in runs.itertuples():
        table.add_row(
            str(row.started_at)[:16],
            _text(row.run_id),
            _text(row.regime),
            _text(row.regime_fingerprint),
            _text(row.machine_key),
            _text(row.engine_version),
            str(int(counts.get(row.run_id, 0)) if len(cells) else 0),
            _text(reasons.get(row.run_id, "")),  # stored inert (History.accept); an older file's may not be
        )
    console.print(table)
    return EXIT_OK


def _accept(history_path: Path, run_id: str, reason: str, console: Console) -> int:
    from harness.results.history.store import open_history

    if not history_path.is_file():
        raise UserError(f"{history_path}: no history file (bench history add RUN creates it)")
    with open_history(history_path) as history:
        added = history.accept(run_id, reason)
    said = "accepted" if added else "already accepted"
    console.print(
        f"{history_path}: {inert(run_id)} {said}: the history gate's nights for its regime fingerprint and "
        "machine start at it",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )
    return EXIT_OK


def _changes(history_path: Path, metrics: list[str] | None, console: Console) -> int:
    from harness.derive.history.changes import MAX_PVALUE, MIN_NIGHTS, change_points
    from harness.present.width import Column, FitTable
    from harness.results.history.store import open_history

    with open_history(history_path, read_only=True) as history:
        found = change_points(history.samples(), history.runs(), metrics)
    if not found:
        console.print(
            f"{history_path}: no change point (series of {MIN_NIGHTS} nights or more, p < {MAX_PVALUE:g})",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
        return EXIT_OK
    table = FitTable(
        f"{escape(str(history_path))}: {len(found)} change point(s), Apache Otava E-Divisive, "
        f"p < {MAX_PVALUE:g}",
        keys=[Column("night", text=True), Column("run", text=True)],
        columns=[
            Column("series", text=True),
            *(Column(h) for h in ("before", "after", "change [95%]", "p")),
            Column("what else changed", wraps=True),
        ],
    )
    for point in found:
        table.add_row(
            point.started_at,
            _text(point.run_id),
            _text(point.where()),
            f"{point.before:.4g} ({point.nights_before})",
            f"{point.after:.4g} ({point.nights_after})",
            f"{100 * point.change:+.1f}% [{100 * point.low:+.1f}, {100 * point.high:+.1f}]",
            f"{point.pvalue:.2g}",
            _text("; ".join(point.what_changed) or "nothing recorded"),
        )
    console.print(table)
    return EXIT_OK


def trend_page(history_path: Path, metrics: list[str] | None = None) -> str:
    """The trend page of a history: its series derived once, then rendered."""
    from harness.derive.history.trend import trend_series
    from harness.present.report.history import render_history
    from harness.results.history.store import open_history

    with open_history(history_path, read_only=True) as history:
        runs, samples, cells = history.runs(), history.samples(), history.cells()
    return render_history(history_path, runs, trend_series(samples, runs, cells, metrics))


def _report(history_path: Path, output: Path | None, metrics: list[str] | None, console: Console) -> int:
    from harness.core.metrics import METRICS
    from harness.results.files import write_text_atomic

    for name in metrics or []:
        if name not in METRICS:
            raise UserError(f"--metric {name}: not a metric (metrics: {', '.join(sorted(METRICS))})")
    page = output or history_path.parent / "history.html"
    write_text_atomic(page, trend_page(history_path, metrics))
    console.print(f"wrote {page}", highlight=False, markup=False, soft_wrap=True)
    return EXIT_OK


def run(args: argparse.Namespace, console: Console) -> int:
    if args.action == "add":
        return add_to_history(args.paths, args.history, args.engine_commit, console)
    if args.action == "import":
        return add_to_history(found_under(args.folder), args.history, None, console)
    if args.action == "accept":
        return _accept(args.history, args.run_id, args.reason, console)
    if args.action == "changes":
        return _changes(args.history, args.metric, console)
    if args.action == "report":
        return _report(args.history, args.output, args.metric, console)
    return _show(args.history, console)
