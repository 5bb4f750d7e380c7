"""Does the history gate find what it should and only that? Replayed on nights built from real runs.

Two sources of nights, both from the CPU engine's own measurements:

- ``--history DB`` (a real series: ``bench run --history``): its first ``--first`` nights of one
  regime fingerprint and machine. A replayed night draws one real night's effect (per arm and cell,
  that night's mean log value minus the series' mean: the drift from night to night as the machine
  showed it, every cell of the night moved together) and, per arm, as many start-ups as the nights
  had, each a real start-up's deviation from its own night's mean (the whole vector over the arm's
  cells: a start-up moves every cell of its server together). Both carry start-up noise, so the
  replay is somewhat noisier than the series: conservative for detection.
- ``--source RUN`` (one stored run with two or more start-ups per arm): per arm and cell, the
  run's start-up residuals pooled over the cells and drawn independently per cell (one run cannot
  show how start-ups move cells together or how nights drift; ``--night-sd`` adds a night effect).

From night ``--step-night`` on, one arm's ``--step-metric`` is multiplied by ``1 + --step`` (-10% by
default; a step of a speculative arm's tok/s moves its speedup over the unchanged baseline with it).
The baseline's speedup (1 by definition) is not gated. Two gates judge
each night with the rule ``max_regression_pct: --limit`` on every arm, cell and metric:

- the history gate (``harness.derive.history.gate.history_check``, as ``bench gate --history`` runs it): every
  night from the 6th against all the nights before it (its reference: the last 14 good ones; the
  night alone and the mean of the last 3), each check at the Bonferroni-corrected confidence of a
  night (``gates.NIGHT_FALSE_ALARM`` over the checks and their windows);
- the two-run gate (``harness.derive.gates.relative.relative_check``, as ``bench gate --baseline``):
  against the night before (the last good run), at the regime's 95%, with its night term from the nights
  before that one (``gates._night_term``; none before the 3rd night: no failure then).

``--starts N`` draws N start-ups per arm a replayed night from the same real deviations: what a
regime with ``load.server_starts: N`` would buy on that machine (its night effects still carry the
noise of the real nights' fewer start-ups: conservative).

Printed: per gate, the share of nights before the step on which any check failed (false alarms per
night) and, over the series, how many nights after the step it took to fail a check of the
stepped arm (detection), with the source and the CPU it was measured on.

``--simulate`` runs simulated nights instead, at the shipped settings (``regimes/cpu_nightly.yaml``:
12 start-ups an arm a night, 7.6% start-up spread on the log scale, the speedup and tau gated at
5%, so 2 checks a night), with a night effect of ``--night-sd`` (2% by default: about the
start-up noise of a night's mean, 7.6% / sqrt(12)) drawn per scenario: normal, t with 3 df (scaled
to that sd), AR(1) with rho 0.6, and normal with one night in 15 shifted 8% the worse way. Per
scenario: the false alarms per night (target <= 1%) and the share of series where a -10% step is
found within 3 nights. It also simulates the gates beside it, each through the harness's own
function: a tok/s floor at 2/3/5 start-ups with the true mean on the floor (false fails, nominal
2.5%), and the two-run relative gate (limit 5%) at 2 and 4 start-ups a run with a night effect and
its night term from 5 earlier nights (false alarms must not rise with start-ups):

    .venv/bin/python benchmarks/history_gate.py --simulate [--runs 4000] [--series 400]

    .venv/bin/python benchmarks/history_gate.py --history results/nightly/history.duckdb --first 7
    .venv/bin/python benchmarks/history_gate.py --source results/cpu_policy/study-.../points/p0
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from harness.core.metrics import METRICS  # noqa: E402
from harness.derive.gates.relative import _night_term, relative_check  # noqa: E402
from harness.derive.history.gate import NIGHT_FALSE_ALARM, history_check  # noqa: E402
from harness.derive.history.reference import MIN_NIGHTS, WINDOWS  # noqa: E402
from harness.derive.samples import RunView  # noqa: E402
from harness.results.history.store import load_history  # noqa: E402

Cell = tuple[str, str, int, str]  # arm, workload, concurrency, metric
Vector = dict[Cell, float]  # log deviations, over one arm's cells (a start-up) or every cell (a night)


class Source:
    """What a replayed night is drawn from: per cell its centre (mean log), the night effects, and
    per arm the start-up deviations; ``starts`` start-ups per arm a night."""

    def __init__(self, means: dict[Cell, float], nights: list[Vector], startups: dict[str, list[Vector]],
                 starts: int, label: str, independent: bool = False):  # fmt: skip
        self.means, self.nights, self.startups, self.starts = means, nights, startups, starts
        self.label, self.independent = label, independent

    def spread(self) -> float:
        """The start-up deviations' sd on the log scale (every arm and cell pooled)."""
        values = [v for vectors in self.startups.values() for vector in vectors for v in vector.values()]
        return float(np.std(values, ddof=1))


def from_run(run_dir: Path, metrics: list[str]) -> Source:
    """Per (arm, workload, concurrency, metric): the mean log of the run's start-up samples; the
    residuals (each start-up's log value minus its cell's mean), pooled and drawn per cell."""
    view = RunView(run_dir)
    means, residuals, starts = {}, [], 0
    for metric in metrics:
        for cell in view.summary.cells:
            if cell.request_rate is not None:
                continue
            values = view.startup_samples(cell.arm, cell.workload, cell.level, metric)
            if len(values) < 2 or min(values) <= 0:
                continue
            logs = [math.log(v) for v in values]
            centre = sum(logs) / len(logs)
            means[(cell.arm, cell.workload, cell.concurrency, metric)] = centre
            residuals += [v - centre for v in logs]
            starts = max(starts, len(values))
    if not means:
        raise SystemExit(
            f"{run_dir}: no cell with 2 or more start-ups of {metrics} (load.server_starts >= 2)"
        )
    pooled = {"*": [{("*", "", 0, ""): r} for r in residuals]}
    return Source(means, [], pooled, starts, f"{run_dir} (one run)", independent=True)


def from_history(path: Path, first: int, metrics: list[str]) -> Source:
    """The first ``first`` nights of the history's longest series (one fingerprint and machine)."""
    history = load_history(path)
    runs, samples = history.runs(), history.samples()
    if runs.empty:
        raise SystemExit(f"{path}: no runs")
    key = runs.groupby(["regime_fingerprint", "machine_key"]).size().idxmax()
    chosen = runs[(runs.regime_fingerprint == key[0]) & (runs.machine_key == key[1])]
    chosen = chosen.sort_values(["started_at", "run_id"]).run_id.tolist()[:first]
    cells_frame = history.cells()
    noisy = set(cells_frame[cells_frame.noisy_neighbour.fillna(False).astype(bool)].run_id)
    left_out = [r for r in chosen if r in noisy]  # measured beside a busy neighbour: not the engine's
    chosen = [r for r in chosen if r not in noisy]
    if len(chosen) < 3:
        raise SystemExit(f"{path}: {len(chosen)} nights of one fingerprint and machine; 3 or more are needed")
    rows = samples[samples.run_id.isin(chosen) & samples.metric.isin(metrics) & samples.request_rate.isna()]
    rows = rows[rows.value > 0]
    logs: dict[Cell, dict[str, list[float]]] = {}
    for row in rows.itertuples():
        cell = (row.arm, row.workload, int(row.concurrency), row.metric)
        logs.setdefault(cell, {}).setdefault(row.run_id, []).append(math.log(row.value))
    cells = {c: by_night for c, by_night in logs.items() if len(by_night) == len(chosen)}
    # the baseline's speedup is 1 by definition: nothing a rule gates (a constant tau is gated, and passes)
    cells = {
        c: by_night
        for c, by_night in cells.items()
        if not (c[3] == "speedup" and all(v == 0 for n in by_night.values() for v in n))
    }
    if not cells:
        raise SystemExit(f"{path}: no cell of {metrics} measured on each of the {len(chosen)} nights")
    night_means = {c: {r: float(np.mean(v)) for r, v in by_night.items()} for c, by_night in cells.items()}
    means = {c: float(np.mean(list(m.values()))) for c, m in night_means.items()}
    nights = [{c: night_means[c][r] - means[c] for c in cells} for r in chosen]
    startups: dict[str, list[Vector]] = {}
    starts = min(len(v) for by_night in cells.values() for v in by_night.values())
    for run in chosen:
        for arm in sorted({c[0] for c in cells}):
            mine = [c for c in cells if c[0] == arm]
            for j in range(starts):
                startups.setdefault(arm, []).append({c: cells[c][run][j] - night_means[c][run] for c in mine})
    said = f"; left out, beside a busy neighbour: {', '.join(left_out)}" if left_out else ""
    return Source(means, nights, startups, starts, f"{path} (nights {', '.join(chosen)}{said})")


def stepped_metrics(step_metric: str) -> tuple[str, ...]:
    """What a step of ``step_metric`` moves: a throughput step of a speculative arm moves its
    speedup too (the same night's baseline, which it is divided by, did not change)."""
    return (step_metric, "speedup") if step_metric == "output_tok_s" else (step_metric,)


def night(rng: np.random.Generator, source: Source, night_sd: float, stepped: str | None, step: float,
          step_metric: str) -> dict[Cell, list[float]]:  # fmt: skip
    """One replayed night: per cell, ``source.starts`` start-up values."""
    shared = rng.normal(0, night_sd) if night_sd else 0.0
    effect = source.nights[rng.integers(len(source.nights))] if source.nights else {}
    draws: dict[str, list[Vector]] = {}
    if not source.independent:
        for arm, pool in source.startups.items():
            draws[arm] = [pool[i] for i in rng.integers(len(pool), size=source.starts)]
    pooled = source.startups.get("*", [])
    out = {}
    for cell, centre in source.means.items():
        if source.independent:
            deviations = [pooled[i][("*", "", 0, "")] for i in rng.integers(len(pooled), size=source.starts)]
        else:
            deviations = [vector[cell] for vector in draws[cell[0]]]
        factor = (1 + step) if cell[0] == stepped and cell[3] in stepped_metrics(step_metric) else 1.0
        base = centre + shared + effect.get(cell, 0.0)
        out[cell] = [math.exp(base + d) * factor for d in deviations]
    return out


def replay(args: argparse.Namespace, source: Source) -> dict:
    rng = np.random.default_rng(args.seed)
    arms = sorted({cell[0] for cell in source.means})
    stepped = args.arm or arms[-1]
    checks = len(source.means)
    better = {metric: METRICS[metric].higher_is_better for metric in args.metric}
    confidence = 1 - 2 * NIGHT_FALSE_ALARM / (checks * len(WINDOWS))
    alarms = {"history": 0, "two-run": 0}
    judged = {"history": 0, "two-run": 0}
    detection: dict[str, list[int | None]] = {"history": [], "two-run": []}
    still: list[bool] = []  # the history gate still failing the stepped arm on the series' last night
    for _ in range(args.series):
        nights = [
            night(
                rng,
                source,
                args.night_sd,
                stepped if i >= args.step_night else None,
                args.step,
                args.step_metric,
            )  # fmt: skip
            for i in range(args.nights)
        ]
        found: dict[str, int | None] = {"history": None, "two-run": None}
        last = False
        for index in range(1, args.nights):
            verdicts: dict[str, dict[Cell, str]] = {"history": {}, "two-run": {}}
            for cell in source.means:
                tonight = nights[index][cell]
                if index >= MIN_NIGHTS:
                    earlier = [n[cell] for n in nights[:index]]
                    verdicts["history"][cell] = history_check(
                        tonight, earlier, args.limit, better[cell[3]], confidence
                    ).verdict
                # its night term from the nights before the reference night (None before 2 of them)
                term, _ = _night_term(cell[3], True, [n[cell] for n in nights[: index - 1]], None)
                verdicts["two-run"][cell] = relative_check(
                    tonight, nights[index - 1][cell], args.limit, better[cell[3]], night=term
                ).verdict
            for gate, cells in verdicts.items():
                if not cells:
                    continue
                failed = [cell for cell, verdict in cells.items() if verdict == "fail"]
                hit = any(cell[0] == stepped for cell in failed)
                if index < args.step_night:
                    judged[gate] += 1
                    alarms[gate] += bool(failed)
                elif found[gate] is None and hit:
                    found[gate] = index - args.step_night + 1
                if gate == "history" and index == args.nights - 1:
                    last = hit
        for gate in detection:
            detection[gate].append(found[gate])
        still.append(last)
    return {"stepped": stepped, "checks": checks, "alarms": alarms, "judged": judged, "detection": detection,
            "still": still}  # fmt: skip


# ---- simulated nights and gates (``--simulate``) -----------------------------------------------

SHIPPED_STARTS, SHIPPED_SPREAD, SHIPPED_CHECKS = 12, 0.076, 2  # regimes/cpu_nightly.yaml
SCENARIOS = ("normal", "t(3)", "AR(1) rho 0.6", "1 night in 15 shifted 8%")


def night_effects(rng: np.random.Generator, scenario: str, count: int, sd: float) -> np.ndarray:
    """``count`` nights' shared effects (log scale) of one series, with sd ``sd`` (the shifted
    scenario: normal nights plus a -8% shift on one night in 15, the worse way)."""
    if scenario == "t(3)":
        return rng.standard_t(3, count) * sd / math.sqrt(3)  # a t(3)'s variance is 3
    if scenario.startswith("AR(1)"):
        rho, out = 0.6, np.empty(count)
        level = rng.normal(0, sd)
        for i in range(count):
            out[i] = level
            level = rho * level + rng.normal(0, sd * math.sqrt(1 - rho**2))
        return out
    base = rng.normal(0, sd, count)
    if scenario.startswith("1 night in 15"):
        return base + np.where(rng.random(count) < 1 / 15, math.log(0.92), 0.0)
    return base


def simulate_history(
    scenario: str, series: int, seed: int = 0, night_sd: float = 0.02, starts: int = SHIPPED_STARTS,
    spread: float = SHIPPED_SPREAD, nights: int = 26, step_night: int = 20, step: float = -0.10,
) -> tuple[float, int, float]:  # fmt: skip
    """The history gate (``gates.history_check``, a 5% limit, at a night's confidence for
    ``SHIPPED_CHECKS`` checks) on simulated series: every night from the 6th judged against all the
    nights before it. Returns (false alarms per night before the step, nights judged, share of
    series where the step was found within 3 nights)."""
    rng = np.random.default_rng([seed, SCENARIOS.index(scenario)])
    confidence = 1 - 2 * NIGHT_FALSE_ALARM / (SHIPPED_CHECKS * len(WINDOWS))
    alarms = judged = found = 0
    for _ in range(series):
        effects = night_effects(rng, scenario, nights, night_sd)
        values = [
            list(
                np.exp(
                    effects[i] + rng.normal(0, spread, starts) + (math.log1p(step) if i >= step_night else 0)
                )
            )
            for i in range(nights)
        ]
        hit = False
        for i in range(MIN_NIGHTS, min(nights, step_night + 3)):
            verdict = history_check(values[i], values[:i], 5.0, True, confidence).verdict
            if i < step_night:
                judged += 1
                alarms += verdict == "fail"
            else:
                hit = hit or verdict == "fail"
        found += hit
    return alarms / judged, judged, found / series


def simulate_floor(startups: int, runs: int, seed: int = 0, spread: float = SHIPPED_SPREAD) -> float:
    """A tok/s floor (``gates._absolute``, the regime's 95%) on a run of ``startups`` start-ups whose
    true mean is the floor: how often it fails (nominal 2.5%, one-sided)."""
    from harness.config.checks import Gates
    from harness.derive.gates.limits import _absolute
    from harness.results.gate import Check

    gates, rng, fails = Gates.model_validate({}), np.random.default_rng([seed, startups, 11]), 0
    for _ in range(runs):
        values = list(100.0 * np.exp(rng.normal(0, spread, startups)))
        check = Check("floor", "rules[0]", "a", "output_tok_s", "w", 1, "pass", "")
        fails += _absolute(check, values, gates, 100.0, None, startups).verdict == "fail"
    return fails / runs


def simulate_two_run(
    startups: int, runs: int, seed: int = 0, night_sd: float = 0.03, spread: float = 0.05, earlier: int = 5
) -> tuple[float, float]:
    """The two-run gate (``gates.relative_check``, limit 5%, 95%) between two nights with no change,
    each with its night effect and ``startups`` start-ups: the false alarms with its night term from
    ``earlier`` nights before (``gates._night_term``, as ``bench gate --baseline`` with a short
    history), and with the start-ups pooled as independent (the gate before: no night term, a
    failure on the start-ups' spread alone)."""
    from harness.core.stats import log_ratio_interval
    from harness.derive.gates.relative import _decide, _night_term, relative_check

    rng = np.random.default_rng([seed, startups, 12])
    with_night = pooled = 0

    def night() -> list[float]:
        return list(100.0 * np.exp(rng.normal(0, night_sd) + rng.normal(0, spread, startups)))

    for _ in range(runs):
        before = [night() for _ in range(earlier)]
        tonight, reference = night(), night()
        term, _ = _night_term("output_tok_s", True, before, None)
        with_night += relative_check(tonight, reference, 5.0, True, night=term).verdict == "fail"
        pooled += _decide(log_ratio_interval(reference, tonight), 5.0, True).verdict == "fail"
    return with_night / runs, pooled / runs


def simulate(args: argparse.Namespace) -> int:
    """``--simulate``: the lines the module's docstring describes."""
    label = (
        f"{SHIPPED_STARTS} start-ups a night, start-up spread {100 * SHIPPED_SPREAD:g}%, night effect sd "
        f"{100 * args.night_sd:g}%, limit 5%, {SHIPPED_CHECKS} checks a night, -10% step"
    )
    print(f"simulated history gate: {label}")
    for scenario in SCENARIOS:
        rate, judged, found = simulate_history(scenario, args.series, args.seed, args.night_sd)
        print(f"false alarm  history  {scenario:26s}  {rate:.4f}  ({judged} nights)")
        print(f"found within 3 nights  history  {scenario:26s}  {found:.3f}  ({args.series} series)")
    for startups in (2, 3, 5):
        rate = simulate_floor(startups, args.runs, args.seed)
        print(f"false fail  floor  {startups} start-ups  {rate:.3f}  ({args.runs} runs)")
    for startups in (2, 4):
        night, pooled = simulate_two_run(startups, args.runs, args.seed)
        print(f"false alarm  two-run night term  {startups} start-ups  {night:.3f}  ({args.runs} runs)")
        print(
            f"false alarm  two-run pooled start-ups  {startups} start-ups  {pooled:.3f}  ({args.runs} runs)"
        )
    return 0


def cpu_model() -> str:
    from harness.run.sensors.environment import collect_cpu

    return collect_cpu()["cpu_model"] or "?"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    given = parser.add_mutually_exclusive_group(required=True)
    given.add_argument("--simulate", action="store_true", help="simulated nights and gates (no data)")
    given.add_argument("--history", type=Path, help="a history database holding a real series of nights")
    given.add_argument("--source", type=Path, help="a run directory with server_starts >= 2")
    parser.add_argument("--first", type=int, default=1000, help="with --history: its first N nights only")
    parser.add_argument("--metric", action="append", help="gated metrics (repeatable; default output_tok_s)")
    parser.add_argument("--step-metric", default="output_tok_s", help="the metric the step changes")
    parser.add_argument(
        "--starts",
        type=int,
        help="start-ups per arm a replayed night, drawn from the real ones (default: as the nights had)",
    )
    parser.add_argument("--nights", type=int, default=40)
    parser.add_argument("--step-night", type=int, default=20)
    parser.add_argument("--step", type=float, default=-0.10, help="the injected change (-0.10: 10%% slower)")
    parser.add_argument("--arm", help="the arm the step hits (default: the last arm by name)")
    parser.add_argument("--limit", type=float, default=5.0, help="the rule's max_regression_pct")
    parser.add_argument(
        "--night-sd", type=float, help="night effect (log sd): with --source 0, with --simulate 0.02"
    )
    parser.add_argument("--series", type=int, help="series of nights (default 200; --simulate 400)")
    parser.add_argument("--runs", type=int, default=4000, help="--simulate: runs a floor or two-run setting")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.simulate:
        args.night_sd = 0.02 if args.night_sd is None else args.night_sd
        args.series = args.series or 400
        return simulate(args)
    args.night_sd = args.night_sd or 0.0
    args.series = args.series or 200
    args.metric = args.metric or ["output_tok_s"]
    if args.history is not None:
        source = from_history(args.history, args.first, args.metric)
    else:
        source = from_run(args.source, args.metric)
    if args.starts:  # what more (or fewer) start-ups a night would buy, from the same real deviations
        source.starts = args.starts
    found = replay(args, source)
    drift = (
        f"; night effects from {len(source.nights)} real nights"
        if source.nights
        else f"; night sd {100 * args.night_sd:g}%"
    )
    print(f"source {source.label}; CPU: {cpu_model()}")
    print(
        f"{len(source.means)} cells x metrics, {source.starts} start-ups per arm a night, start-up "
        f"deviation sd {100 * source.spread():.1f}% on the log scale{drift}"
    )
    print(
        f"{args.series} series x {args.nights} nights, metrics {', '.join(args.metric)}, limit "
        f"{args.limit:g}%, step {100 * args.step:+g}% on {found['stepped']}'s {args.step_metric} from "
        f"night {args.step_night}, {found['checks']} checks a night"
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
    still = sum(found["still"]) / len(found["still"])
    print(
        f"  history gate still failing the stepped arm on night {args.nights}: {100 * still:.0f}% of series"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
