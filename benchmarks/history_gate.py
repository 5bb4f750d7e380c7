"""Does the history gate find what it should and only that? Replayed on nights built from a real run.

A stored run of the CPU engine with two or more server start-ups per arm gives, per arm and cell,
the start-up samples of a metric (tok/s by default) and, from their spread around each arm's mean,
the start-up residuals on the log scale. A replayed series of nights: each night draws, per arm and
cell, as many start-ups as the run had, each the cell's mean times a residual resampled from the
run's own (every cell's residuals pooled: a start-up moves every cell of its server), times a
night effect shared by the night's start-ups (log-normal, ``--night-sd``, 0 by default: one run
cannot show how nights drift; give the spread a real series showed). From night ``--step-night``
on, one arm's values are multiplied by ``1 + --step`` (-10% by default).

Two gates judge each night with the rule ``max_regression_pct: --limit`` on every arm and cell:

- the history gate (``harness.gates.history_check``, as ``bench gate --history`` runs it): against
  the last 14 nights before it (from night 5 on), each check at the Bonferroni-corrected confidence
  of a night (``gates.NIGHT_FALSE_ALARM``);
- the two-run gate (``harness.gates.relative_check``, as ``bench gate --baseline``): against the
  night before (the last good run), at the regime's 95%.

Printed: per gate, the share of nights before the step on which any check failed (false alarms per
night) and, over the series, how many nights after the step it took to fail a check of the
stepped arm (detection), with the source run and the CPU it was measured on.

    .venv/bin/python benchmarks/history_gate.py --source results/cpu_policy/study-.../points/p0
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from harness.gates import NIGHT_FALSE_ALARM, RunView, history_check, relative_check  # noqa: E402
from harness.history.reference import DEFAULT_NIGHTS, MIN_NIGHTS  # noqa: E402
from harness.metrics import METRICS  # noqa: E402

Cell = tuple[str, str, int]  # arm, workload, concurrency


def source_cells(run_dir: Path, metric: str) -> tuple[dict[Cell, float], list[float], int]:
    """Per (arm, workload, concurrency): the mean log of the run's start-up samples; the pooled
    residuals (each start-up's log value minus its cell's mean); the start-ups per cell."""
    view = RunView(run_dir)
    means, residuals, starts = {}, [], 0
    for cell in view.summary.cells:
        if cell.request_rate is not None:
            continue
        values = view.startup_samples(cell.arm, cell.workload, cell.level, metric)
        if len(values) < 2 or min(values) <= 0:
            continue
        logs = [math.log(v) for v in values]
        centre = sum(logs) / len(logs)
        means[(cell.arm, cell.workload, cell.concurrency)] = centre
        residuals += [v - centre for v in logs]
        starts = max(starts, len(values))
    if not means:
        raise SystemExit(f"{run_dir}: no cell with 2 or more start-ups of {metric} (load.server_starts >= 2)")
    return means, residuals, starts


def night(rng: np.random.Generator, means: dict[Cell, float], residuals: np.ndarray, starts: int,
          night_sd: float, stepped: str | None, step: float) -> dict[Cell, list[float]]:  # fmt: skip
    """One replayed night: per cell, ``starts`` start-up values."""
    shared = rng.normal(0, night_sd) if night_sd else 0.0
    out = {}
    for cell, centre in means.items():
        draws = rng.choice(residuals, size=starts, replace=True)
        factor = (1 + step) if cell[0] == stepped else 1.0
        out[cell] = [math.exp(centre + shared + d) * factor for d in draws]
    return out


def replay(args: argparse.Namespace, means: dict[Cell, float], residuals: list[float], starts: int) -> dict:
    rng = np.random.default_rng(args.seed)
    pool = np.array(residuals)
    arms = sorted({cell[0] for cell in means})
    stepped = args.arm or arms[-1]
    checks = len(means)
    better = METRICS[args.metric].higher_is_better
    confidence = 1 - 2 * NIGHT_FALSE_ALARM / checks
    alarms = {"history": 0, "two-run": 0}
    judged = {"history": 0, "two-run": 0}
    detection: dict[str, list[int | None]] = {"history": [], "two-run": []}
    for _ in range(args.series):
        nights = [
            night(
                rng, means, pool, starts, args.night_sd, stepped if i >= args.step_night else None, args.step
            )
            for i in range(args.nights)
        ]
        found: dict[str, int | None] = {"history": None, "two-run": None}
        for index in range(1, args.nights):
            before = nights[max(0, index - DEFAULT_NIGHTS) : index]
            verdicts = {"history": {}, "two-run": {}}
            for cell in means:
                tonight = nights[index][cell]
                if index >= MIN_NIGHTS:
                    history = history_check(
                        tonight, [n[cell] for n in before], args.limit, better, confidence
                    )
                    verdicts["history"][cell] = history.verdict
                verdicts["two-run"][cell] = relative_check(
                    tonight, nights[index - 1][cell], args.limit, better
                ).verdict
            for gate, cells in verdicts.items():
                if not cells:
                    continue
                failed = [cell for cell, verdict in cells.items() if verdict == "fail"]
                if index < args.step_night:
                    judged[gate] += 1
                    alarms[gate] += bool(failed)
                elif found[gate] is None and any(cell[0] == stepped for cell in failed):
                    found[gate] = index - args.step_night + 1
        for gate in detection:
            detection[gate].append(found[gate])
    return {"stepped": stepped, "checks": checks, "alarms": alarms, "judged": judged, "detection": detection}


def cpu_model() -> str:
    found = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    return next(
        (line.split(":", 1)[1].strip() for line in found.splitlines() if line.startswith("Model name")), "?"
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--source", type=Path, required=True, help="a run directory with server_starts >= 2")
    parser.add_argument("--metric", default="output_tok_s")
    parser.add_argument("--nights", type=int, default=40)
    parser.add_argument("--step-night", type=int, default=20)
    parser.add_argument("--step", type=float, default=-0.10, help="the injected change (-0.10: 10%% slower)")
    parser.add_argument("--arm", help="the arm the step hits (default: the last arm by name)")
    parser.add_argument("--limit", type=float, default=5.0, help="the rule's max_regression_pct")
    parser.add_argument("--night-sd", type=float, default=0.0, help="night-to-night drift (log sd)")
    parser.add_argument("--series", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    means, residuals, starts = source_cells(args.source, args.metric)
    spread = float(np.std(residuals, ddof=1))
    found = replay(args, means, residuals, starts)
    print(
        f"source {args.source} ({len(means)} cells with {starts} start-ups each; start-up residual sd "
        f"{100 * spread:.1f}% on the log scale); CPU: {cpu_model()}"
    )
    print(
        f"{args.series} series x {args.nights} nights, {args.metric}, limit {args.limit:g}%, night sd "
        f"{100 * args.night_sd:g}%, step {100 * args.step:+g}% on {found['stepped']} from night "
        f"{args.step_night}, {found['checks']} checks a night"
    )
    for gate in ("history", "two-run"):
        judged, alarms = found["judged"][gate], found["alarms"][gate]
        after = found["detection"][gate]
        within3 = sum(1 for n in after if n is not None and n <= 3) / len(after)
        never = sum(1 for n in after if n is None)
        print(
            f"  {gate:8s} gate: false alarms on {alarms}/{judged} nights before the step "
            f"({100 * alarms / max(1, judged):.1f}%); the step found within 3 nights in {100 * within3:.0f}% "
            f"of series, not by night {args.nights} in {never}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
