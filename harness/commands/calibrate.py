"""`bench calibrate REGIME`: measure this machine's start-up spread for a regime and store it, so a
run with one start-up per arm gets an interval (``harness.run.calibration``)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape

from harness.commands.common import EXIT_ENGINE, EXIT_OK

if TYPE_CHECKING:
    from harness.results import RunDir, Summary
    from harness.results.calibration import Calibration

NAME = "calibrate"
SUMMARY = "measure this machine's start-up spread for a regime, so one start-up per arm gets an interval"
DESCRIPTION = """
A speedup's interval needs the spread from one server start-up to the next, which a run with one
start-up per arm cannot measure. This command measures it once per regime and machine: it runs the
regime as a calibration (the same engine, target, arms, workloads and load levels; every arm's
server started --rounds times in rounds, each window once, on a small window; no exactness check),
an ordinary run under RESULTS_DIR/<regime>-calibration/<run-id>/, and stores the arms x rounds
model's residual spread as <regime>-<fingerprint>-<machine>.json in the calibration store.

bench run then finds it by the regime's fingerprint and this machine's (engine, torch, CPU, GPUs
and drivers) and says "Intervals from this machine's calibration of <date> ...". A calibration is
never used for another regime fingerprint or machine; re-calibrate after changing either.
"""
EXAMPLES = """
bench calibrate regimes/cpu_default.yaml
bench calibrate regimes/h200_tp8.yaml --rounds 8 --num-prompts 16
bench calibrate regimes/cpu_default.yaml --store calibrations/  # bench run --calibration-store calibrations/
"""
INTERRUPTED = "servers stopped; nothing was stored in the calibration store (the partial run stays readable)"


def _rounds(text: str) -> int:
    from harness.run.calibration import MIN_ROUNDS

    value = _positive(text)
    if value < MIN_ROUNDS:
        raise argparse.ArgumentTypeError(
            f"{value}: a calibration needs at least {MIN_ROUNDS} rounds (start-ups of every arm)"
        )
    return value


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value}: expected a number >= 1")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "regime", type=Path, help="regime YAML file to calibrate, e.g. regimes/cpu_default.yaml"
    )
    parser.add_argument(
        "--rounds",
        type=_rounds,
        default=6,
        metavar="N",
        help="start-ups of every arm's server, in rounds (default 6, at least 5)",
    )
    parser.add_argument(
        "--num-prompts",
        type=_positive,
        metavar="P",
        help="prompts per window (default: the regime's, at most 8)",
    )
    parser.add_argument(
        "--max-output-tokens",
        type=_positive,
        metavar="T",
        help="max_tokens of every request (default: the regime's, at most 32)",
    )
    parser.add_argument(
        "--store",
        type=Path,
        metavar="DIR",
        help="the calibration store to write to (default: $XDG_CACHE_HOME/spec-bench/calibrations, "
        "~/.cache when unset; BENCH_CACHE_DIR/calibrations when that is set)",
    )
    parser.add_argument(
        "--results-dir",
        type=Path,
        default=Path("results"),
        help="where the calibration's run is stored (default: results)",
    )
    parser.add_argument(
        "--allow-mismatch",
        action="store_true",
        help="calibrate even when the machine does not match the regime's pins (recorded in the run)",
    )


def calibrate(
    regime_path: Path,
    results_dir: Path,
    console: Console,
    *,
    rounds: int = 6,
    num_prompts: int | None = None,
    max_output_tokens: int | None = None,
    store: Path | None = None,
    allow_mismatch: bool = False,
) -> tuple[RunDir, Summary, Calibration, Path]:
    """Run the calibration regime of ``regime_path`` as a normal run, measure its spread and store
    it: the run, its summary, the calibration and the file it went to."""
    from harness.config.regime import load_regime
    from harness.results import read_json
    from harness.run.calibration import (
        CalibrationSource,
        calibration_regime,
        measure_calibration,
        write_calibration,
    )
    from harness.run.plan import plan_regime, prepare_run
    from harness.run.runner import Runner

    regime = load_regime(regime_path)
    calibrating = calibration_regime(regime, rounds, num_prompts, max_output_tokens)
    window = calibrating.load
    console.print(
        f"Calibrating [bold]{escape(regime.name)}[/] (fingerprint {regime.fingerprint()}) on this machine: "
        f"{rounds} rounds of {len(regime.arms)} arms' start-ups, {window.num_prompts} prompts per window, "
        f"max {window.max_output_tokens} output tokens",
        soft_wrap=True,
    )
    plan = plan_regime(regime_path, calibrating)
    ready = prepare_run(plan, console, allow_mismatch, calibration=CalibrationSource(enabled=False))
    run, summary = Runner(ready, results_dir, console).run()
    calibration = measure_calibration(summary, regime, read_json(run.root / "environment.json"))
    return run, summary, calibration, write_calibration(calibration, store)


def run(args: argparse.Namespace, console: Console) -> int:
    from harness.run.calibration import calibration_text, one_start_up_interval

    run_dir, summary, calibration, path = calibrate(
        args.regime,
        args.results_dir,
        console,
        rounds=args.rounds,
        num_prompts=args.num_prompts,
        max_output_tokens=args.max_output_tokens,
        store=args.store,
        allow_mismatch=args.allow_mismatch,
    )
    failed = [a.name for a in summary.arms if a.status != "ok"]
    if failed:
        console.print(
            f"[yellow]arms that did not complete every start-up:[/] {', '.join(failed)} (the spread is "
            "from the start-ups that did; bench show the run)",
            soft_wrap=True,
        )
    console.print(f"Calibration run: {run_dir.root}", markup=False)
    console.print(f"[bold]{escape(calibration_text(calibration))}[/]", soft_wrap=True)
    found = one_start_up_interval(calibration)
    console.print(
        f"A run of this regime with one start-up per arm now gets a t interval with {found.df} degrees of "
        f"freedom, [{found.low:.3f}, {found.high:.3f}] around an observed 1.00x: a speedup measured above "
        f"{found.high:.2f}x or below {found.low:.2f}x is decided from one start-up (a run with more "
        "start-ups pools its own spread with this one).",
        soft_wrap=True,
    )
    where = f" --calibration-store {args.store}" if args.store is not None else ""
    console.print(f"Stored: {path}  (bench run {args.regime}{where} uses it)", soft_wrap=True, markup=False)
    return EXIT_ENGINE if failed else EXIT_OK
