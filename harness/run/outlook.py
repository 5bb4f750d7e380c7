"""What a design is expected to take to decide, before it runs (issue 69): rounds and minutes at a
round's pace (an earlier run's, else stated assumptions) and the start-up spread (a calibration's,
else the project's measured 5%)."""

from __future__ import annotations

from pathlib import Path

from harness.config.regime import Regime
from harness.derive.intervals import ASSUMED_STARTUP_SPREAD, REFERENCE_PROMPT_SPREAD, decision_outlook

# a round's pace before any run of the regime measured one: a CPU eager start-up of the default's
# model takes 18-26 s here and a token 0.021 s a sequence at concurrency 1 (run 20261207-062347);
# on GPUs, torch.compile and graph capture take 15-40 s at TP 1 and ~3 minutes at TP 8 for a 70B
# (vLLM #10460, #19824), a token ~8 ms a sequence (an 8B at batch 1 on an H100): stated, not measured
ASSUMED_STARTUP_S = {("cpu", True): 20.0, ("cpu", False): 120.0, ("gpu", True): 60.0, ("gpu", False): 120.0}
ASSUMED_TOKEN_S = {"cpu": 0.021, "gpu": 0.008}


def assumed_round_minutes(regime: Regime) -> float:
    """The wall minutes of one round (every arm started once, every window measured) at the stated
    assumptions (``ASSUMED_STARTUP_S``, ``ASSUMED_TOKEN_S``; 20 s more a start-up per TP rank)."""
    kind, load = regime.hardware.kind, regime.load
    startup = ASSUMED_STARTUP_S[(kind, regime.engine.enforce_eager)] + 20.0 * (
        regime.tensor_parallel_size - 1
    )
    window = sum(
        load.num_prompts
        / min(level.concurrency, load.num_prompts)
        * load.max_output_tokens
        * ASSUMED_TOKEN_S[kind]
        for level in load.levels()
    )
    per_start = startup + 5.0 + window * len(regime.workloads) * load.max_repeats() + load.ramp_duration_s()
    return len(regime.arms) * per_start / 60


def earlier_round_minutes(results_dir: Path, regime: Regime) -> tuple[float, str] | None:
    """The wall minutes a round took in the newest earlier run of this regime (by name, with as many
    arms) under ``results_dir``, and its run id; None: no such run recorded its rounds."""
    from harness.results.model import RunTiming

    folder = results_dir / regime.name
    runs = (
        sorted((p for p in folder.glob("*/timing.json") if p.is_file()), reverse=True)
        if folder.is_dir()
        else []
    )
    for path in runs:
        try:
            timing = RunTiming.model_validate_json(path.read_text())
        except (OSError, ValueError):
            continue  # a run being written, or of another version: the next
        complete = [r for r in timing.rounds if len(r.done) == len(r.order) == len(regime.arms)]
        minutes = timing.minutes_per_round(len(complete)) if timing.invocations else None
        if minutes is not None:
            return minutes, path.parent.name
    return None


def outlook_text(
    regime: Regime, pace: tuple[float, str] | None = None, spread: tuple[float, int, str] | None = None
) -> str:
    """What the design is expected to take to decide an arm at ``load.server_starts.effect`` (1.20x
    for a fixed design): rounds and minutes (``intervals.decision_outlook``), at ``pace`` (minutes a
    round, and where it is from: an earlier run; else ``assumed_round_minutes``) and ``spread`` (the
    start-up spread, its degrees of freedom and where it is from: a calibration, pooled; else the
    project's measured 5%)."""
    load = regime.load
    starts = load.server_starts
    effect = 1.2 if isinstance(starts, int) else starts.effect
    arms = sum(1 for a in regime.arms if a.method != "baseline") + 1
    assumed = (
        ASSUMED_STARTUP_SPREAD,
        0,
        "assumed: this project's measured 5%; bench calibrate measures this machine's",
    )
    sd, calibration_df, sd_from = spread or assumed
    minutes, pace_from = pace or (
        assumed_round_minutes(regime),
        "assumed; an earlier run of this regime replaces it",
    )
    most = load.max_server_starts()
    budget = load.budget_minutes()
    if budget is not None and load.decides():  # the rounds the budget lets begin (min are always run)
        most = max(load.min_server_starts(), min(most, int(budget // minutes)))
    found = decision_outlook(
        arms,
        load.num_prompts,
        load.min_server_starts(),
        most,
        effect,
        sd,
        prior_sd=regime.verdict.startup_prior_sd,
        calibration_df=calibration_df,
    )
    if found.cannot is not None:
        return (
            f"Outlook: this design cannot decide ({found.cannot}): set load.server_starts to "
            "{min: 2, max: 4} (rounds until decided), or bench calibrate this machine"
        )
    expected, at_most = found.minutes(minutes)
    bound = f", the budget {budget:g} min" if budget is not None else ""
    if load.decides():
        head = (
            f"an arm at {effect:.2f}x (load.server_starts.effect) is decided in about "
            f"{found.expected_rounds:.1f} rounds (about {expected:.0f} min), by round {found.most} "
            f"{100 * found.power:.0f}% of the time; at most {found.most} rounds ({at_most:.0f} min{bound})"
        )
    else:
        head = (
            f"{found.most} rounds (about {at_most:.0f} min) decide an arm at {effect:.2f}x "
            f"{100 * found.power:.0f}% of the time"
        )
    return (
        f"Outlook: {head}; at {minutes:.1f} min a round ({pace_from}), start-up spread {100 * sd:.1f}% "
        f"({sd_from}), prompt spread {100 * REFERENCE_PROMPT_SPREAD:.0f}% (this project's, ngram on code)."
    )
