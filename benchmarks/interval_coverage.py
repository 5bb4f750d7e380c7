"""Do the harness's intervals cover what they claim? Measured, not argued.

``--simulate``: the harness's own estimators (``harness.derive.intervals.cell_estimates`` for a cell's
speedup and the winner's correction, ``harness.derive.study.analysis`` for best K and break-even,
``harness.derive.gates.relative.relative_check`` for a relative gate, ``harness.derive.rounds.Standing``
for a run that adds rounds until decided) on simulated runs whose truth is known.
A simulated run: every arm's server starts once per round; each start-up has its own effect
(log-normal, sd 3% or 6%: this project measured 3.5-6% per server), each round a drift shared by
its start-ups (sd 2%), each request its own jitter (sd 5%: windows of 16 prompts vary by 1-2%; 2
repeats per start-up), and prompts differ in how much they gain (per-prompt log-sd 0.2, fixed
across rounds: the same prompts every round, as the harness sends). One line per interval and setting:

    coverage  cell speedup  sd 3%  2 rounds  2 arms  truth 1.10  0.951  (2000 runs)

The default regime's design (its arms, prompts, rounds and prior, read from regimes/cpu_default.yaml)
runs through the same path with the stop rule a deciding design takes (``stopped_run``), in the
scenarios issue 69 asked for (a quiet day with the default's measured spreads, a day 1.6x noisier,
drift within a round, an arm twice as spread, a wider prompt spread): coverage, false "pays" at
1.00x and "pays" at 1.10, 1.15, 1.20 and 1.30x; then every shipped regime's outlook at those truths
(the normal approximation ``bench validate`` states).

``--regime R --runs N``: the same question on the real engine. N independent ``bench run``s of R
(each its own start-ups, run i on the i-th disjoint sample of the workload's prompts); per cell,
how often a run's interval covers the pooled estimate of the other runs (the geometric mean of
their speedups), and whether the verdicts agree wherever any run calls the cell decided. Prints
the run ids and the CPU model (lscpu) with the table.

    .venv/bin/python benchmarks/interval_coverage.py --simulate [--runs 2000] [--seed 0]
    .venv/bin/python benchmarks/interval_coverage.py --regime regimes/cpu_coverage.yaml --runs 6
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import statistics_tables  # noqa: E402
from simulated_runs import World, calibration_of, simulate_run  # noqa: E402

from harness.derive.intervals import (  # noqa: E402
    REFERENCE_COVARIATE_R2,
    Spread,
    cell_estimates,
    residual_spread,
)

DRIFT_SD = 0.02  # shared by a round's start-ups
REQUEST_SD = 0.05  # one request's time, within a window: windows then vary by 1-2%
REPEATS = 2
PROMPTS = 16
PROMPT_SD = 0.2


@dataclass(frozen=True)
class Setting:
    startup_sd: float
    rounds: int
    arms: int  # with the baseline
    truth: float  # every speculative arm's true speedup (arm 1's, where the others differ)

    def label(self) -> str:
        return (
            f"sd {100 * self.startup_sd:.0f}%  {self.rounds} rounds  {self.arms} arms  truth {self.truth:.2f}"
        )


def arm_times(rng: np.random.Generator, base_time: np.ndarray, truth: float) -> np.ndarray:
    """An arm's time per prompt: each prompt gains its own amount, scaled so that the window's
    speedup (the same tokens over the summed time, noise aside) is exactly ``truth``."""
    arm_time = base_time / np.exp(rng.normal(0.0, PROMPT_SD, len(base_time)))
    return arm_time * base_time.sum() / arm_time.sum() / truth


def simulate_tables(
    rng: np.random.Generator, startup_sd: float, rounds: int, truths: list[float], levels: int = 1
) -> list[dict[str, dict[int, float]]]:
    """One simulated run: per load level, ``arm -> round -> start-up mean tok/s``. Arm 0 (``a0``)
    is the baseline; ``truths[i]`` is arm i+1's true speedup at every level."""
    return simulate_curve(rng, startup_sd, rounds, [truths] * levels)


def simulate_curve(
    rng: np.random.Generator,
    startup_sd: float,
    rounds: int,
    by_level: list[list[float]],
    prompts: np.ndarray | None = None,
) -> list[dict[str, dict[int, float]]]:
    """As ``simulate_tables``, with each level's own true speedups (``by_level[level][arm - 1]``).
    A start-up's effect and a round's drift are shared by every level it measures, as on a real
    server. ``prompts``: each prompt's baseline time, to send the same prompts in two runs (a gate
    compares a night with an earlier one on the same prompts); by default drawn per level."""
    arms = len(by_level[0]) + 1
    startup = rng.normal(0.0, startup_sd, (arms, rounds))
    drift = rng.normal(0.0, DRIFT_SD, rounds)
    tables = []
    for truths in by_level:
        table: dict[str, dict[int, float]] = {}
        # the prompts differ in length and difficulty
        base_time = rng.lognormal(0.0, 0.5, PROMPTS) if prompts is None else prompts
        times = [base_time] + [arm_times(rng, base_time, t) for t in truths]
        for a in range(arms):
            # each request's time jitters on its own; the window's tok/s is its tokens (the same for
            # every arm) over its summed time, on a server whose start-up and round set its pace
            jitter = np.exp(rng.normal(0.0, REQUEST_SD, (rounds, REPEATS, PROMPTS)))
            seconds = (times[a] * jitter).sum(axis=2) * np.exp(-(startup[a] + drift))[:, None]
            table[f"a{a}"] = {r: float(np.mean(PROMPTS * 100 / seconds[r])) for r in range(rounds)}
        tables.append(table)
    return tables


def cell_lines(settings: list[Setting], runs: int, seed: int) -> Iterator[tuple[str, float]]:
    """Coverage of a cell's speedup interval, its false "pays" at a true 1.00x, and the winner's
    (the fastest of the speculative arms, corrected for the selection) false "pays"."""
    for setting in settings:
        rng = np.random.default_rng([seed, int(1000 * setting.startup_sd), setting.rounds, setting.arms])
        covered = pays = winner_pays = 0
        for _ in range(runs):
            (table,) = simulate_tables(
                rng, setting.startup_sd, setting.rounds, [setting.truth] * (setting.arms - 1)
            )
            found = cell_estimates(table, "a0")
            first = found["a1"]
            covered += first.low is not None and first.low <= setting.truth <= first.high  # type: ignore[operator]
            pays += first.verdict == "pays"
            best = max(found.values(), key=lambda e: e.point)
            winner_pays += best.selected_from(len(found)).verdict == "pays"
        yield f"coverage  cell speedup          {setting.label()}", covered / runs
        if setting.truth == 1.0:
            yield f"false pays  cell speedup        {setting.label()}", pays / runs
            if setting.arms > 2:
                yield f"false pays  winner, corrected   {setting.label()}", winner_pays / runs


def calibration_lines(startup_sds: list[float], runs: int, seed: int) -> Iterator[tuple[str, float]]:
    """One start-up per arm with a calibration of this machine (6 rounds of the same regime, made
    beforehand): the interval then rests on the calibration's spread."""
    for sd in startup_sds:
        rng = np.random.default_rng([seed, int(1000 * sd), 99])
        covered = 0
        for _ in range(runs):
            calibration = simulate_tables(rng, sd, 6, [1.0], levels=2)
            spread_sd, df = residual_spread(calibration)  # type: ignore[misc]
            (table,) = simulate_tables(rng, sd, 1, [1.10])
            found = cell_estimates(table, "a0", Spread(spread_sd, df, "simulated"))["a1"]
            covered += found.low <= 1.10 <= found.high  # type: ignore[operator]
        yield (
            f"coverage  cell speedup, 1 start-up + calibration  sd {100 * sd:.0f}%  truth 1.10",
            covered / runs,
        )


def run_simulation(runs: int, seed: int, quick: bool = False) -> list[tuple[Any, ...]]:
    sds = [0.03] if quick else [0.03, 0.06]
    rounds = [2, 3] if quick else [2, 3, 5]
    arm_counts = [2, 7]
    truths = [1.0, 1.10]
    settings = [Setting(sd, n, m, t) for sd in sds for n in rounds for m in arm_counts for t in truths]
    lines = list(cell_lines(settings, runs, seed))
    lines += list(calibration_lines(sds, runs, seed))
    for extra in EXTRA_LINES:
        lines += list(extra(sds, rounds, runs, seed))
    return lines


def best_k_lines(sds: list[float], rounds: list[int], runs: int, seed: int) -> Iterator[tuple[str, float]]:
    """Best K (Hsu's MCB, ``harness.derive.study.analysis.best_set``) when three K values are truly equal
    (1.10x each: the least favourable case, where MCB's 95% is exact): how often the set of K values
    that cannot be told from the best keeps K=1's arm (each is a true best), and how often it
    claims one K "better than every other"."""
    from harness.derive.study.analysis import best_set

    for sd in sds:
        for n in rounds:
            rng = np.random.default_rng([seed, int(1000 * sd), n, 3])
            kept = singleton = 0
            for _ in range(runs):
                (table,) = simulate_tables(rng, sd, n, [1.10, 1.10, 1.10])
                found = cell_estimates(table, "a0")
                arms = ["a1", "a2", "a3"]
                chosen = best_set(
                    [math.log(found[a].point) for a in arms], found["a1"].log_se, found["a1"].df
                )  # type: ignore[arg-type]
                kept += chosen[0]
                singleton += sum(chosen) == 1
            label = f"sd {100 * sd:.0f}%  {n} rounds  3 equal K"
            yield f"coverage  best-K set            {label}", kept / runs
            yield f"false better-than-every-other-K {label}", singleton / runs


# a speedup curve over concurrency 1, 4, 16 that crosses 1 at concurrency 6 (log speedup linear in
# log2 concurrency, the scale the harness interpolates on)
LEVELS = [1, 4, 16]
CROSSING = 6.0
SLOPE = -math.log(1.3) / math.log2(CROSSING)
CURVE = [math.exp(math.log(1.3) + SLOPE * math.log2(c)) for c in LEVELS]


def break_even_lines(
    sds: list[float], rounds: list[int], runs: int, seed: int
) -> Iterator[tuple[str, float]]:
    """The break-even set (``harness.derive.study.analysis.crossing_set``: test inversion, levels paired by
    round) for a curve 1.30x / 1.06x / 0.87x at concurrency 1 / 4 / 16, crossing at 6: how often it
    holds the true crossing (no set counts as a miss)."""
    from harness.derive.study.analysis import crossing_set

    for sd in sds:
        for n in rounds:
            rng = np.random.default_rng([seed, int(1000 * sd), n, 4])
            covered = 0
            for _ in range(runs):
                tables = simulate_curve(rng, sd, n, [[t] for t in CURVE])
                per_round = [[t["a1"][r] / t["a0"][r] for t in tables] for r in range(n)]
                found = crossing_set(LEVELS, per_round)
                if found is not None:
                    low, high = found
                    covered += (low is None or low <= CROSSING) and (high is None or high >= CROSSING)
            yield (
                f"coverage  break-even set        sd {100 * sd:.0f}%  {n} rounds  crossing at {CROSSING:g}",
                covered / runs,
            )


def gate_lines(sds: list[float], rounds: list[int], runs: int, seed: int) -> Iterator[tuple[str, float]]:
    """A relative tok/s gate (``harness.derive.gates.relative.relative_check``, limit 5%) between two
    runs of the same regime with no real change, each with its own start-ups: how often its interval of the
    change holds 0, and how often it fails."""
    from harness.derive.gates.relative import relative_check

    for sd in sds:
        for n in rounds:
            rng = np.random.default_rng([seed, int(1000 * sd), n, 5])
            covered = failed = 0
            for _ in range(runs):
                prompts = rng.lognormal(0.0, 0.5, PROMPTS)  # the same prompts both nights
                (night,) = simulate_curve(rng, sd, n, [[1.0]], prompts)
                (reference,) = simulate_curve(rng, sd, n, [[1.0]], prompts)
                found = relative_check(list(night["a1"].values()), list(reference["a1"].values()), 5.0, True)
                covered += found.low is not None and found.low <= 0.0 <= found.high  # type: ignore[operator]
                failed += found.verdict == "fail"
            label = f"sd {100 * sd:.0f}%  {n} start-ups a side  no change"
            yield f"coverage  relative gate         {label}", covered / runs
            yield f"false fail  relative gate       {label}", failed / runs


def calibrated_gate_lines(
    sds: list[float], rounds: list[int], runs: int, seed: int, arm: bool = True
) -> Iterator[tuple[str, float]]:
    """A relative tok/s gate (limit 5%) between two runs of one start-up each, no real change, on a
    machine with a calibration (6 rounds beforehand): the spread it uses is the calibration's of one
    arm across rounds (``intervals.arm_spread``, the round's drift included); ``arm=False`` uses the
    residual sd instead (``residual_spread``, the drift taken out), what a version-1 calibration had."""
    from harness.derive.gates.relative import relative_check
    from harness.derive.intervals import arm_spread

    spread_of = arm_spread if arm else residual_spread
    for sd in sds:
        rng = np.random.default_rng([seed, int(1000 * sd), 7])
        covered = failed = 0
        for _ in range(runs):
            calibration = simulate_tables(rng, sd, 6, [1.0], levels=2)
            spread = spread_of(calibration)
            prompts = rng.lognormal(0.0, 0.5, PROMPTS)
            (night,) = simulate_curve(rng, sd, 1, [[1.0]], prompts)
            (reference,) = simulate_curve(rng, sd, 1, [[1.0]], prompts)
            found = relative_check(
                list(night["a1"].values()), list(reference["a1"].values()), 5.0, True, spread=spread
            )
            covered += found.low is not None and found.low <= 0.0 <= found.high  # type: ignore[operator]
            failed += found.verdict == "fail"
        label = f"sd {100 * sd:.0f}%  1 start-up a side + calibration ({'one arm' if arm else 'residual'} sd)"
        yield f"coverage  relative gate         {label}", covered / runs
        yield f"false fail  relative gate       {label}", failed / runs


DECIDE_MIN, DECIDE_MAX = 2, 6  # load.server_starts: {min: 2, max: 6, decide: true}


@dataclass(frozen=True)
class Deciding:
    startup_sd: float
    arms: int  # with the baseline
    truth: float

    def label(self) -> str:
        return (
            f"sd {100 * self.startup_sd:.0f}%  decide {DECIDE_MIN}-{DECIDE_MAX} rounds  {self.arms} arms  "
            f"truth {self.truth:.2f}"
        )


def decide_lines(
    settings: list[Deciding], runs: int, seed: int, looks: int | None = None
) -> Iterator[tuple[str, float]]:
    """A run that adds rounds until decided (``load.server_starts: {min: 2, max: 6, decide:
    true}``): after each round from ``min`` on, the harness's own stop rule (``rounds.Standing``:
    every speculative cell decided, and the window's fastest arm after the selection correction)
    on the intervals it would store, with ``looks`` (default the
    design's, ``Load.looks``: 5) corrected for. At the round it stops on: the coverage of arm 1's
    interval, its false "pays" and the winner's (corrected for the selection) at a true 1.00x, the
    share that pays at 1.10x, and the rounds it used on average."""
    from harness.derive.rounds import Standing

    looks = DECIDE_MAX - DECIDE_MIN + 1 if looks is None else looks
    for setting in settings:
        rng = np.random.default_rng([seed, int(1000 * setting.startup_sd), setting.arms, 6])
        covered = pays = winner_pays = rounds_used = 0
        for _ in range(runs):
            (table,) = simulate_tables(
                rng, setting.startup_sd, DECIDE_MAX, [setting.truth] * (setting.arms - 1)
            )
            for n in range(DECIDE_MIN, DECIDE_MAX + 1):
                so_far = {arm: {r: v for r, v in got.items() if r < n} for arm, got in table.items()}
                first_look = DECIDE_MIN if looks > 1 else None
                found = cell_estimates(so_far, "a0", looks=looks, first_look=first_look)
                fastest = max(found.values(), key=lambda e: e.point).selected_from(len(found))
                if Standing(found, {"window": fastest} if len(found) > 1 else {}).all_decided:
                    break
            first = found["a1"]
            covered += first.low is not None and first.low <= setting.truth <= first.high  # type: ignore[operator]
            pays += first.verdict == "pays"
            winner_pays += fastest.verdict == "pays"
            rounds_used += n
        yield f"coverage  cell speedup, decide  {setting.label()}", covered / runs
        if setting.truth == 1.0:
            yield f"false pays  cell, decide        {setting.label()}", pays / runs
            if setting.arms > 2:
                yield f"false pays  winner, decide      {setting.label()}", winner_pays / runs
        else:
            yield f"pays  cell, decide              {setting.label()}", pays / runs
        yield f"rounds used  decide             {setting.label()}", rounds_used / runs


def deciding_lines(sds: list[float], rounds: list[int], runs: int, seed: int) -> Iterator[tuple[str, float]]:
    settings = [Deciding(sd, arms, truth) for sd in sds for arms in (2, 3) for truth in (1.0, 1.10)]
    return decide_lines(settings, runs, seed)


def decide_best_k_lines(
    sds: list[float], rounds: list[int], runs: int, seed: int
) -> Iterator[tuple[str, float]]:
    """Best K in a run that adds rounds until decided (min 2, max 6): three truly equal K values,
    the set at each look at the level the harness stores (``Estimate.level``, fitted to the looks
    of one arm against the baseline, not to MCB's statistic): how often the set keeps K=1's arm at
    every look, and how often any look claims one K "better than every other" (a run that stopped
    there would say so)."""
    from harness.derive.study.analysis import best_set

    looks = DECIDE_MAX - DECIDE_MIN + 1
    for sd in sds:
        rng = np.random.default_rng([seed, int(1000 * sd), 8])
        kept = singleton = 0
        for _ in range(runs):
            (table,) = simulate_tables(rng, sd, DECIDE_MAX, [1.10, 1.10, 1.10])
            every, any_single = True, False
            for n in range(DECIDE_MIN, DECIDE_MAX + 1):
                so_far = {arm: {r: v for r, v in got.items() if r < n} for arm, got in table.items()}
                found = cell_estimates(so_far, "a0", looks=looks, first_look=DECIDE_MIN)
                arms = ["a1", "a2", "a3"]
                one = found["a1"]
                chosen = best_set([math.log(found[a].point) for a in arms], one.log_se, one.df, one.level())  # type: ignore[arg-type]
                every &= chosen[0]
                any_single |= sum(chosen) == 1
            kept += every
            singleton += any_single
        label = f"sd {100 * sd:.0f}%  decide {DECIDE_MIN}-{DECIDE_MAX} rounds  3 equal K"
        yield f"coverage  best-K set, every look {label}", kept / runs
        yield f"false better-than-every-other-K, any look {label}", singleton / runs


# ---- out of the model, through the real pipeline (benchmarks/simulated_runs.py) ---------------


@dataclass(frozen=True)
class Scenario:
    """An out-of-model world (``simulated_runs.World``) under a name the lines carry, and a
    calibration's own spread where the run uses one (from another day: ``calibration_sd``)."""

    name: str
    world: World
    calibration_sd: float | None = None

    def label(self) -> str:
        w = self.world
        spread = f"  a1 spread x{w.factor(1):g}" if w.factor(1) != 1 else ""
        calibrated = (
            f"  calibrated at sd {100 * self.calibration_sd:.1f}%" if self.calibration_sd is not None else ""
        )
        return (
            f"{self.name}  {w.prompts} prompts  sd {100 * w.startup_sd:.0f}%{spread}{calibrated}  "
            f"{w.rounds} rounds  {w.arms} arms  truth {w.truth:.2f}"
        )


def pipeline_lines(scenarios: list[Scenario], runs: int, seed: int) -> Iterator[tuple[str, float]]:
    """Each scenario's runs as raw records, derived by the harness's own ``summarize`` and
    ``window_verdicts``: how often arm a1's interval covers the WORKLOAD's speedup; at a true 1.00x,
    how often a1 and the window's winner (its decision, corrected for the pick) say "pays"."""
    from harness.derive.summary import summarize
    from harness.derive.verdict import estimate_of, window_verdicts

    for index, scenario in enumerate(scenarios):
        rng = np.random.default_rng([seed, index, 11])
        world = scenario.world
        covered = pays = winner_pays = 0
        for _ in range(runs):
            calibration = None
            if scenario.calibration_sd is not None:  # made on another day, with its own spread
                calibration = calibration_of(rng, replace(world, startup_sd=scenario.calibration_sd))
            summary = summarize(simulate_run(rng, world, calibration))
            first = estimate_of(summary.cell("a1", "w0", 1))  # type: ignore[arg-type]
            assert first is not None
            covered += first.low is not None and first.low <= world.truth <= first.high  # type: ignore[operator]
            pays += first.verdict == "pays"
            winner_pays += window_verdicts(summary)[0].outcome == "pays"
        label = scenario.label()
        yield f"coverage  workload speedup      {label}", covered / runs
        if world.truth == 1.0:
            yield f"false pays  workload speedup    {label}", pays / runs
            if world.arms > 2:
                yield f"false pays  winner, workload    {label}", winner_pays / runs


def windows_lines(runs: int, seed: int, windows: int = 9) -> Iterator[tuple[str, float]]:
    """Many windows, every arm truly 1.00x (3 arms, 2 rounds): how often some window's winner says
    "pays" in a run, each window at 95% alone and with ``verdict.familywise``; and the false "pays"
    the verdict says to expect (``IntervalBasis.chance_pays``) on average."""
    from harness.derive.analysis import analyze
    from harness.derive.summary import summarize

    for familywise in (False, True):
        rng = np.random.default_rng([seed, windows, 12])
        world = World(windows=windows, familywise=familywise)
        anywhere = expected = 0.0
        for _ in range(runs):
            analysis = analyze(summarize(simulate_run(rng, world)))
            anywhere += any(v.outcome == "pays" for v in analysis.verdicts)
            expected += analysis.basis.chance_pays
        held = "familywise" if familywise else "each window alone"
        label = f"many windows  {windows} windows  sd 5%  2 rounds  3 arms  truth 1.00  {held}"
        yield f"false pays  any window's winner {label}", anywhere / runs
        yield f"stated false pays expected     {label}", expected / runs


# ---- a shipped regime's design, through the real pipeline and its stop rule (issue 69) -----------

# the default's variance components, measured on its real runs on a 2-core AMD EPYC with AVX-512 BF16
# (issue 69): start-up residual sd 0.049 (20 df pooled over five runs), prompt-by-arm sd 0.18 at
# concurrency 1; the machine's drift between start-up slots -2.6% in the worst run; a prompt's
# baseline time log sd 0.09-0.11 (tests/fixtures/run_v14_default: 30 prompts x 20 tokens, so the
# prompts weigh about alike in the window's tok/s; the simulation's generic 0.5 weighs them unequally
# and costs the design 3-4 points of power the outlook does not model)
#
# Issue 81: the default's runs read their prompts through the covariate (the copy share of the
# baseline's answers, the workload's mean from its pass over HumanEval's 164 prompts): the world's
# copy share explains REFERENCE_COVARIATE_R2 of the prompts' log gains, below this project's measured
# 0.72-0.94 (ngram K=4 on code at concurrency 1, per-prompt log gains over 4 start-ups)
DEFAULT_WORLD = World(
    arms=2,
    rounds=6,
    prompts=20,
    startup_sd=0.049,
    prompt_sd=0.18,
    repeats=1,
    base_time_sd=0.1,
    covariate_r2=REFERENCE_COVARIATE_R2,
)
DESIGN_TRUTHS = (1.0, 1.10, 1.15, 1.20, 1.30)


@dataclass(frozen=True)
class RunDesign:
    """A design as a regime states it: its arms, prompts and rounds (``first`` to ``most``: a fixed
    design when they are equal), under the prior ``prior_sd`` on the start-up spread."""

    name: str
    arms: int
    prompts: int
    first: int
    most: int
    prior_sd: float | None = 0.1

    def server_starts(self) -> object:
        from harness.config.load import DecidedStarts

        return self.most if self.first == self.most else DecidedStarts(min=self.first, max=self.most)


DESIGN_SCENARIOS = {
    "quiet": {},
    "noisier day (sd x1.6)": {"startup_sd": 0.049 * 1.6},
    "drift -2.6% a slot": {"slot_drift": 0.026},
    "arm 2x the spread": {"spread": (2.0,)},
    "prompt spread 0.31": {"prompt_sd": 0.31},
    "prompts' times log sd 0.5": {"base_time_sd": 0.5},
}


def stopped_run(rng: np.random.Generator, world: World, design: RunDesign) -> tuple[Any, int]:
    """One run of ``design`` in ``world``: its speculative arm's estimate where the run stopped (the
    first decided look, else the last) and the rounds it took, as the runner's summaries say."""
    from simulated_runs import first_rounds

    from harness.config.checks import VerdictSettings
    from harness.derive.summary import summarize
    from harness.derive.verdict import estimate_of

    raw = simulate_run(rng, replace(world, arms=design.arms, rounds=design.most, prompts=design.prompts))
    raw = replace(
        raw,
        regime=raw.regime.model_copy(update={"verdict": VerdictSettings(startup_prior_sd=design.prior_sd)}),
    )
    for rounds in range(design.first, design.most + 1):
        summary = summarize(first_rounds(raw, rounds, design.server_starts()))
        found = estimate_of(summary.cell("a1", "w0", 1))  # type: ignore[arg-type]
        if found is not None and (found.decided or rounds == design.most):
            return found, rounds
    raise AssertionError("unreachable")


def design_lines(
    design: RunDesign, runs: int, seed: int, scenarios: dict[str, dict[str, Any]] | None = None
) -> Iterator[tuple[str, float]]:
    """Per scenario: coverage of the workload's speedup by the interval the run stopped on (truth
    1.00x and 1.20x pooled), false "pays" at 1.00x, "pays" at each true speedup, and the mean rounds
    at 1.20x."""
    for index, (name, change) in enumerate((scenarios or DESIGN_SCENARIOS).items()):
        world = replace(DEFAULT_WORLD, **change)
        covered = counted = 0
        for t, truth in enumerate(DESIGN_TRUTHS):
            rng = np.random.default_rng([seed, index, t, 69])
            pays = rounds_used = 0
            for _ in range(runs):
                found, rounds = stopped_run(rng, replace(world, truth=truth), design)
                pays += found.verdict == "pays"
                rounds_used += rounds
                if truth in (1.0, 1.20):
                    counted += 1
                    covered += found.low is not None and found.low <= truth <= found.high
            label = f"{design.name}  {name}  truth {truth:.2f}"
            yield f"{'false pays' if truth == 1.0 else 'pays'}  design  {label}", pays / runs
            if truth == 1.20:
                yield f"mean rounds  design  {label}", rounds_used / runs
        yield f"coverage  design  {design.name}  {name}", covered / counted


def shipped_design(path: Path) -> RunDesign:
    """A shipped regime's design as ``RunDesign`` (its arms, prompts, rounds and prior)."""
    from harness.config.regime import load_regime

    regime = load_regime(path)
    load = regime.load
    arms = sum(1 for a in regime.arms if a.method != "baseline") + 1
    first = load.min_server_starts()
    return RunDesign(
        path.stem, arms, load.num_prompts, first, load.max_server_starts(), regime.verdict.startup_prior_sd
    )


def default_design_lines(
    sds: list[float], rounds: list[int], runs: int, seed: int
) -> Iterator[tuple[Any, ...]]:
    """The default regime's design through the pipeline in every scenario (a quarter of ``runs`` a
    cell); then each shipped regime's outlook (``intervals.decision_outlook``, the normal
    approximation the plan states) at the design truths."""
    from harness.derive.intervals import decision_outlook

    quarter = max(runs // 4, 100)
    design = shipped_design(HERE.parent / "regimes" / "cpu_default.yaml")
    yield from power_lines(design, runs, seed, quarter)
    # an outlook's line is the normal approximation, no simulated runs; the outlook's check at ``runs``
    # (it is held to 2 points)
    for lines, count in (
        (design_lines(design, quarter, seed), quarter),
        (compared_lines(quarter, seed), quarter),
        (stop_rule_lines(quarter, seed), quarter),
        (outlook_lines([*outlook_designs(), replace(design, name=UNEQUAL_TIMES)], runs, seed), runs),
        (continuation_lines(design, quarter, seed), quarter),
    ):
        yield from ((label, value, 0 if "(outlook)" in label else count) for label, value in lines)
    for path in sorted((HERE.parent / "regimes").glob("*.yaml")):
        try:
            found = shipped_design(path)
        except Exception:  # noqa: BLE001 - a regime that needs a study's results first (policy_verify)
            continue
        shape = f"{found.arms} arms  {found.prompts} prompts  rounds {found.first}-{found.most}"
        for truth in DESIGN_TRUTHS[1:]:
            o = decision_outlook(
                found.arms, found.prompts, found.first, found.most, truth, prior_sd=found.prior_sd,
                covariate_r2=REFERENCE_COVARIATE_R2, pool=DEFAULT_WORLD.pool,
            )  # fmt: skip
            yield f"pays (outlook)  {found.name}  {shape}  truth {truth:.2f}", o.power, 0


# the prompt-to-prompt spreads a user may meet (0.18-0.21 measured at concurrency 1, 0.29-0.35 at 4)
PROMPT_SPREADS = (0.18, 0.20, 0.25, 0.30)


def power_lines(design: RunDesign, runs: int, seed: int, quarter: int) -> Iterator[tuple[str, float, int]]:
    """The design's "pays" at each prompt spread and true speedup (the default's measured world
    otherwise), beside the outlook the plan line states for it (``intervals.decision_outlook`` at
    the world's start-up and prompt spreads). The 1.00x and 1.20x columns, which the README and the
    regime quote, at ``runs`` (a Monte Carlo error of 0.008 at 0.85 with 2,000), the others at
    ``quarter``."""
    from harness.derive.intervals import decision_outlook

    for s, spread in enumerate(PROMPT_SPREADS):
        world = replace(DEFAULT_WORLD, prompt_sd=spread)
        for t, truth in enumerate(DESIGN_TRUTHS):
            rng = np.random.default_rng([seed, s, t, 80])
            count = runs if truth in (1.0, 1.2) else quarter
            pays = sum(
                stopped_run(rng, replace(world, truth=truth), design)[0].verdict == "pays"
                for _ in range(count)
            )
            label = f"{design.name}  prompt spread {spread:.2f}  truth {truth:.2f}"
            yield f"pays  power  {label}", pays / count, count
            if truth != 1.0:
                o = decision_outlook(
                    design.arms, design.prompts, design.first, design.most, truth,
                    world.startup_sd, spread, prior_sd=design.prior_sd, **_outlook_covariate(world),
                )  # fmt: skip
                yield f"pays (outlook)  power  {label}", o.power, 0


def _outlook_covariate(world: World) -> dict[str, Any]:
    """The outlook's covariate terms for a world: the share it assumes explained (the harness's
    stated REFERENCE_COVARIATE_R2, not the world's truth) over the workload's prompts; none without."""
    if world.covariate_r2 is None:
        return {}
    return {"covariate_r2": REFERENCE_COVARIATE_R2, "pool": world.pool}


def outlook_designs() -> list[RunDesign]:
    """The default's design and the same arms and prompts adding rounds from 2 to 6 until decided:
    the outlook against the simulation at a fixed and at a deciding design."""
    default = shipped_design(HERE.parent / "regimes" / "cpu_default.yaml")
    return [default, replace(default, name="cpu_default rounds 2-6 decide", first=2, most=6)]


# the outlook weighs every prompt alike; a world whose prompts' times spread 5x the default's measured
# (log sd 0.5, what the simulation drew for every run before issue 80) weighs them unequally in the
# window's tok/s, with fewer effective prompts: where the outlook is known to say too much
UNEQUAL_TIMES = "cpu_default, prompts' times log sd 0.5"
OUTLOOK_WORLDS: dict[str, dict[str, Any]] = {UNEQUAL_TIMES: {"base_time_sd": 0.5}}


def outlook_lines(
    designs: list[RunDesign], runs: int, seed: int, truth: float = 1.2
) -> Iterator[tuple[str, float]]:
    """Per design: the share of simulated runs (the default's measured world, or the design's own in
    ``OUTLOOK_WORLDS``) that say "pays" at ``truth``, their mean rounds, and what the plan's outlook
    states for both."""
    from harness.derive.intervals import decision_outlook

    for d, design in enumerate(designs):
        world = replace(DEFAULT_WORLD, truth=truth, **OUTLOOK_WORLDS.get(design.name, {}))
        rng = np.random.default_rng([seed, d, 81])
        pays = rounds_used = 0
        for _ in range(runs):
            found, rounds = stopped_run(rng, world, design)
            pays += found.verdict == "pays"
            rounds_used += rounds
        o = decision_outlook(
            design.arms, design.prompts, design.first, design.most, truth,
            world.startup_sd, world.prompt_sd, prior_sd=design.prior_sd, **_outlook_covariate(world),
        )  # fmt: skip
        label = f"{design.name}  truth {truth:.2f}"
        yield f"pays  outlook check  {label}", pays / runs
        yield f"pays (outlook)  outlook check  {label}", o.power
        yield f"mean rounds  outlook check  {label}", rounds_used / runs
        yield f"mean rounds (outlook)  outlook check  {label}", o.expected_rounds


# the default's candidate designs (issue 81): each with and without the covariate, at the prompt
# spreads the designs are chosen for (power >= 0.85 at 1.20x up to 0.30)
COMPARED_SPREADS = (0.25, 0.30)


def compared_designs() -> list[RunDesign]:
    default = shipped_design(HERE.parent / "regimes" / "cpu_default.yaml")
    return [
        replace(default, name="30 prompts x 4 rounds", prompts=30, first=4, most=4),
        replace(default, name="20 prompts x 4 rounds", prompts=20, first=4, most=4),
        replace(default, name="30 prompts x 3 rounds", prompts=30, first=3, most=3),
        replace(default, name="30 prompts, rounds 2-6 until decided", prompts=30, first=2, most=6),
        replace(default, name="20 prompts, rounds 2-6 until decided", prompts=20, first=2, most=6),
    ]


def compared_lines(runs: int, seed: int) -> Iterator[tuple[str, float]]:
    """Each candidate design of the default, with the covariate (the default world's) and with the
    jackknife alone, at each compared prompt spread: false "pays" at 1.00x, "pays" at 1.20x, the mean
    rounds at 1.20x and the coverage (the two truths pooled)."""
    for d, design in enumerate(compared_designs()):
        for c, covariate in enumerate((REFERENCE_COVARIATE_R2, None)):
            model = "covariate" if covariate is not None else "jackknife alone"
            for s, spread in enumerate(COMPARED_SPREADS):
                world = replace(DEFAULT_WORLD, prompt_sd=spread, covariate_r2=covariate)
                covered = 0
                label = f"{design.name}  {model}  prompt spread {spread:.2f}"
                for truth in (1.0, 1.2):
                    rng = np.random.default_rng([seed, d, c, s, int(100 * truth), 83])
                    pays = rounds_used = 0
                    for _ in range(runs):
                        found, rounds = stopped_run(rng, replace(world, truth=truth), design)
                        pays += found.verdict == "pays"
                        rounds_used += rounds
                        covered += found.low is not None and found.low <= truth <= found.high
                    kind = "false pays" if truth == 1.0 else "pays"
                    yield f"{kind}  compared  {label}  truth {truth:.2f}", pays / runs
                    if truth == 1.2:
                        yield f"mean rounds  compared  {label}  truth 1.20", rounds_used / runs
                yield f"coverage  compared  {label}", covered / (2 * runs)


# a GPU regime's deciding design (h200_tp1_qwen3_8b's shape: 3 speculative arms, 64 prompts, rounds
# 2-4 until decided) with one arm that pays and two near 1.00x, which never decide on their own
STOP_RULE_DESIGN = RunDesign("4 arms, 64 prompts, rounds 2-4", 4, 64, 2, 4)
STOP_RULE_WORLDS = {
    "one arm at 1.20x, two at 1.00x": (1.2, 1.0, 1.0),
    "every arm at 1.00x": (1.0, 1.0, 1.0),
}


def stop_rule_lines(runs: int, seed: int) -> Iterator[tuple[str, float]]:
    """The stop rule of a deciding design with several arms (``rounds.Standing``, from the runner's
    summary after each round): stop when each window's answer is settled (issue 81), against waiting
    for every arm's own interval (before it): the mean rounds, how often the window's answer deploys
    an arm, and (one arm at 1.20x) how often it is that arm. GPU-like spreads: start-ups 5%, prompts
    0.2, the covariate at the default world's share."""
    from simulated_runs import first_rounds

    from harness.derive.rounds import standing
    from harness.derive.summary import summarize
    from harness.derive.verdict import window_verdicts

    design = STOP_RULE_DESIGN
    for w, (name, truths) in enumerate(STOP_RULE_WORLDS.items()):
        world = replace(
            DEFAULT_WORLD, arms=design.arms, prompts=design.prompts, rounds=design.most,
            startup_sd=0.05, prompt_sd=0.2, truths=truths,
        )  # fmt: skip
        rng = np.random.default_rng([seed, w, 84])
        used = {"settled": 0, "every arm": 0}
        deploys = {"settled": 0, "every arm": 0}
        right = {"settled": 0, "every arm": 0}
        for _ in range(runs):
            raw = simulate_run(rng, world)
            stopped: dict[str, int] = {}
            for rounds in range(design.first, design.most + 1):
                summary = summarize(first_rounds(raw, rounds, design.server_starts()))
                now = standing(summary)
                verdict = window_verdicts(summary)[0]
                rules = {
                    "settled": now.all_decided,
                    "every arm": replace(now, settled=frozenset()).all_decided,
                }
                for rule, done in rules.items():
                    if rule not in stopped and (done or rounds == design.most):
                        stopped[rule] = rounds
                        used[rule] += rounds
                        deployed = verdict.deploy != verdict.baseline.arm
                        deploys[rule] += deployed
                        right[rule] += deployed and verdict.deploy == "a1"
                if len(stopped) == len(rules):
                    break
        for rule in used:
            label = f"{design.name}  {name}  stop when {rule} decided"
            yield f"mean rounds  stop rule  {label}", used[rule] / runs
            yield f"deploys an arm  stop rule  {label}", deploys[rule] / runs
            if truths[0] != 1.0:
                yield f"deploys a1  stop rule  {label}", right[rule] / runs


CONTINUE_TO = 8  # the rounds an undecided default run is continued to (bench run --resume --rounds 8)


def continuation_lines(design: RunDesign, runs: int, seed: int) -> Iterator[tuple[str, float]]:
    """The default's design, and where its verdict is undecided, the run continued to
    ``CONTINUE_TO`` rounds (``bench run --resume RUN --rounds 8``: looks from its first on,
    ``{min: first, max: 8, decide: true}``), stopping at the first decided look. At a true 1.00x:
    false "pays" at the first look alone and over the whole procedure (stop if decided, else
    continue). At each truth: the share undecided at the first look, how many of those the verdict
    said "more rounds alone would not decide" (``WindowVerdict.to_decide`` None) and how many of
    those, and of the others, the continuation decided."""
    from simulated_runs import first_rounds

    from harness.config.checks import VerdictSettings
    from harness.config.load import DecidedStarts
    from harness.derive.summary import summarize
    from harness.derive.verdict import estimate_of, window_verdicts

    continued = DecidedStarts(min=design.first, max=CONTINUE_TO)
    for t, truth in enumerate((1.0, 1.1, 1.2)):
        rng = np.random.default_rng([seed, t, 82])
        world = replace(
            DEFAULT_WORLD, truth=truth, arms=design.arms, prompts=design.prompts, rounds=CONTINUE_TO
        )
        first_pays = pays = undecided = hopeless = hopeless_decided = hopeful_decided = 0
        for _ in range(runs):
            raw = simulate_run(rng, world)
            verdict = VerdictSettings(startup_prior_sd=design.prior_sd)
            raw = replace(raw, regime=raw.regime.model_copy(update={"verdict": verdict}))
            summary = summarize(first_rounds(raw, design.first, design.server_starts()))
            found = estimate_of(summary.cell("a1", "w0", 1))  # type: ignore[arg-type]
            assert found is not None
            first_pays += found.verdict == "pays"
            if found.decided:
                pays += found.verdict == "pays"
                continue
            undecided += 1
            stuck = window_verdicts(summary)[0].to_decide is None
            hopeless += stuck
            for rounds in range(design.first + 1, CONTINUE_TO + 1):
                found = estimate_of(summarize(first_rounds(raw, rounds, continued)).cell("a1", "w0", 1))  # type: ignore[arg-type]
                if found is not None and found.decided:
                    break
            assert found is not None
            pays += found.verdict == "pays"
            hopeless_decided += stuck and found.decided
            hopeful_decided += not stuck and found.decided
        label = f"{design.name}  to {CONTINUE_TO} rounds  truth {truth:.2f}"
        if truth == 1.0:
            yield f"false pays  first look alone  {label}", first_pays / runs
            yield f"false pays  continued if undecided  {label}", pays / runs
        else:
            yield f"pays  first look alone  {label}", first_pays / runs
            yield f"pays  continued if undecided  {label}", pays / runs
        yield f"undecided  first look  {label}", undecided / runs
        yield f"said more rounds would not decide  {label}", hopeless / max(undecided, 1)
        yield f"of those, decided when continued  {label}", hopeless_decided / max(hopeless, 1)
        yield (
            f"of the others, decided when continued  {label}",
            hopeful_decided / max(undecided - hopeless, 1),
        )


def pipeline_scenarios(quick: bool = False) -> list[Scenario]:
    prompts = [
        Scenario("prompts", World(prompts=n, rounds=r, truth=t))
        for n in (16, 64)
        for r in (2, 3)
        for t in (1.0, 1.10)
    ]
    unequal = [Scenario("unequal spread", World(spread=(x,), arms=m)) for x in (2.0, 3.0) for m in (3, 5)]
    calibrated = [
        Scenario("calibration other day", World(), calibration_sd=0.025),
        Scenario("calibration same day", World(), calibration_sd=0.05),
    ]
    if quick:
        return [prompts[0], unequal[1], calibrated[0]]
    return prompts + unequal + calibrated


def scenario_lines(sds: list[float], rounds: list[int], runs: int, seed: int) -> Iterator[tuple[Any, ...]]:
    """The out-of-model scenarios, each line with the runs it took (a run through the summary costs
    about 25 ms, a 9-window one 9 times that: half and an eighth of ``runs``)."""
    pipeline, windows = max(runs // 2, 100), max(runs // 8, 50)
    yield from (
        (label, value, pipeline) for label, value in pipeline_lines(pipeline_scenarios(), pipeline, seed)
    )
    yield from ((label, value, windows) for label, value in windows_lines(windows, seed))


EXTRA_LINES: list[Callable[[list[float], list[int], int, int], Iterator[tuple[str, float]]]] = [
    best_k_lines,
    break_even_lines,
    gate_lines,
    calibrated_gate_lines,
    deciding_lines,
    decide_best_k_lines,
    scenario_lines,
    default_design_lines,
]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument(
        "--simulate", action="store_true", help="the estimators on simulated runs with known truth"
    )
    mode.add_argument("--regime", type=Path, help="a regime to run --runs times on the real engine")
    parser.add_argument(
        "--runs", type=int, default=2000, help="simulated runs per setting, or real runs (>= 6)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--results-dir", type=Path, default=Path("results/coverage"), help="where the real runs go (--regime)"
    )
    parser.add_argument(
        "--reuse", action="store_true", help="read the runs already in --results-dir (--regime)"
    )
    parser.add_argument(
        "--same-prompts",
        action="store_true",
        help="every run on the regime's own prompts (default: run i on the i-th disjoint sample of them)",
    )
    parser.add_argument(
        "--markdown",
        type=Path,
        default=statistics_tables.PAGE,
        help="with --simulate: the generated page it writes (default docs/generated/statistics-tables.md)",
    )
    args = parser.parse_args()
    if args.simulate:
        started, digest = time.monotonic(), statistics_tables.code_digest()  # the code the numbers come from
        found = run_simulation(args.runs, args.seed)
        for label, value, *runs in found:
            count = runs[0] if runs else args.runs
            print(f"{label}  {value:.3f}  ({f'{count} runs' if count else 'normal approximation'})")
        shape = {
            "truths": DESIGN_TRUTHS,
            "scenarios": list(DESIGN_SCENARIOS),
            "spreads": PROMPT_SPREADS,
            "designs": [d.name for d in outlook_designs()] + [UNEQUAL_TIMES],
            "continue_to": CONTINUE_TO,
        }
        took = time.monotonic() - started
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(
            statistics_tables.page(found, args.runs, args.seed, took, cpu_model(), shape, digest)
        )
        print(f"wrote {args.markdown} ({took / 60:.1f} min)")
        return 0
    return real_coverage(args.regime, args.runs, args.results_dir, args.reuse, not args.same_prompts)


def subset_regime(regime: Path, index: int, folder: Path) -> Path:
    """``regime`` with each workload's prompts the ``index``-th disjoint sample (``Workload.subset``):
    the regime and its workloads copied into ``folder``."""
    import yaml

    data = yaml.safe_load(regime.read_text())
    folder.mkdir(parents=True, exist_ok=True)
    workloads = []
    for entry in data["workloads"]:
        source = (regime.parent / entry).resolve()
        workload = yaml.safe_load(source.read_text())
        target = folder / f"{source.stem}-subset{index}.yaml"
        target.write_text(yaml.safe_dump({**workload, "subset": index}, sort_keys=False))
        workloads.append(str(target.resolve()))
    target = folder / f"{regime.stem}-subset{index}.yaml"
    target.write_text(yaml.safe_dump({**data, "workloads": workloads}, sort_keys=False))
    return target


def real_coverage(regime: Path, runs: int, results_dir: Path, reuse: bool, disjoint: bool = True) -> int:
    """N independent runs of ``regime`` (each ``bench run`` in its own process: its own start-ups),
    each on its own disjoint sample of the workload's prompts (``disjoint``: the verdict is about the
    workload, so another sample of it must agree), then per cell: how often a run's interval covers
    the geometric mean of the other runs' speedups, and whether the runs' decided verdicts agree.
    With ``reuse``, the runs already under ``results_dir`` are read instead (the table again from
    stored raw files)."""
    import subprocess

    from harness.derive.summary import summarize
    from harness.derive.verdict import estimate_of

    if runs < 2:
        raise SystemExit("--runs: at least 2 real runs (6 or more to say anything)")
    results_dir.mkdir(parents=True, exist_ok=True)
    if not reuse:
        for index in range(runs):
            regime_file = subset_regime(regime, index, results_dir / "subsets") if disjoint else regime
            print(f"run {index + 1}/{runs}: bench run {regime_file} --results-dir {results_dir}", flush=True)
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "harness.cli",
                    "run",
                    str(regime_file),
                    "--results-dir",
                    str(results_dir),
                ],
                cwd=HERE.parent,
                check=False,
            )
            if done.returncode not in (0, 1):  # 1: a verdict that loses is still a run
                print(f"run {index + 1} exited {done.returncode}: stopping", file=sys.stderr)
                return done.returncode
    found = [(d, summarize(d)) for d in sorted(p.parent for p in results_dir.glob("*/*/regime.json"))]
    # complete runs only (a run still going, or interrupted, is not one of the N), and not one the
    # harness calls provisional: measured beside a busy neighbour, it is not a sample of the engine
    complete = [(d, s) for d, s in found if all(a.status == "ok" for a in s.arms)]
    provisional = [d for d, s in complete if any(c.noisy_neighbour for c in s.cells)]
    complete = [(d, s) for d, s in complete if d not in provisional]
    run_dirs, summaries = [d for d, _ in complete], [s for _, s in complete]
    print(f"\n{len(summaries)} runs of {regime} on {cpu_model()}:")
    print("  " + ", ".join(d.name for d in run_dirs))
    if provisional:
        names = ", ".join(d.name for d in provisional)
        print(f"  left out, measured beside a busy neighbour (the verdict's PROVISIONAL): {names}")
    cells = sorted(
        {(c.arm, c.workload, c.level) for s in summaries for c in s.cells if c.arm != s.baseline_arm}
    )
    print("\n| cell | speedups (each run) | covered by its own interval | decided verdicts | agree |")
    print("|---|---|---|---|---|")
    covered_total = counted = 0
    for arm, workload, level in cells:
        estimates = [e for s in summaries if (c := s.cell(arm, workload, level)) and (e := estimate_of(c))]
        covered = 0
        for i, e in enumerate(estimates):
            others = [o.point for j, o in enumerate(estimates) if j != i]
            target = math.exp(sum(math.log(p) for p in others) / len(others))
            covered += e.low is not None and e.low <= target <= e.high  # type: ignore[operator]
        decided = sorted({e.verdict for e in estimates if e.decided})
        points = ", ".join(f"{e.point:.3f}" for e in estimates)
        verdicts = (
            ", ".join(f"{sum(e.verdict == v for e in estimates)} {v}" for v in decided) or "none decided"
        )
        print(
            f"| {arm} {workload} {level.short()} | {points} | {covered}/{len(estimates)} | {verdicts} | "
            f"{'yes' if len(decided) <= 1 else 'NO'} |"
        )
        covered_total, counted = covered_total + covered, counted + len(estimates)
    print(
        f"\ncoverage of the other runs' pooled speedup: {covered_total}/{counted} = "
        f"{covered_total / max(counted, 1):.2f} (the target is itself an estimate from "
        f"{len(summaries) - 1} runs, so the expected share is a little below 0.95)"
    )
    return 0


def cpu_model() -> str:
    from harness.run.sensors.environment import describe_cpu

    return describe_cpu()


if __name__ == "__main__":
    raise SystemExit(main())
