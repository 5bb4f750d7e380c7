"""`bench study-point STUDY POINT --run-dir DIR`: one point of a study, as an executor's job runs it."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

NAME = "study-point"
SUMMARY = "run one point of a study into its run directory (what an executor's job runs)"
DESCRIPTION = """
Run one point of a study directory: the point's concrete regime, exactly as bench run runs a
regime, into RUN_DIR (relative to the study directory), recording where it ran in placement.json.
Executors start it; run it by hand only to debug a point.
"""
EXAMPLES = """
bench study-point results/cpu_study/study-20261201-093000-a1b2c3 p0 --run-dir points/p0
bench study-point results/cpu_study/study-20261201-093000-a1b2c3 p0 --run-dir points/p0 --resume
"""
INTERRUPTED = (
    "servers stopped; the point's partial run stays readable; bench run --resume STUDY continues the study"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("study_dir", type=Path, help="the study directory (holds study.json)")
    parser.add_argument("point", help="the point's id, e.g. p0")
    parser.add_argument("--run-dir", required=True, help="the attempt's run directory, e.g. points/p0")
    parser.add_argument(
        "--resume", action="store_true", help="continue RUN_DIR in place, as bench run --resume"
    )
    # the executors' job command lines (harness.run.study.jobs) say --continue: still accepted
    parser.add_argument("--continue", dest="resume", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--allow-mismatch", action="store_true", help="as for bench run")


def run(args: argparse.Namespace, console: Console) -> int:
    from harness.run.study.jobs import run_point

    return run_point(args.study_dir, args.point, args.run_dir, args.resume, console, args.allow_mismatch)
