"""Derive the summary (the mini-lab table's numbers) from a run directory's raw files.

Raw samples are the truth; this module can be re-run on any run directory and gives the same
``Summary``. The formulas are the probes'; this module only pools samples into cells (arm x
workload x concurrency, over repeats) and categories (over a category's workloads).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from harness.config.arms import Arm
from harness.config.engines import get_adapter
from harness.config.load import Slo
from harness.core.metrics import PER_REQUEST
from harness.core.probes import distribution
from harness.core.probes.acceptance import (
    SpecCounters,
    acceptance,
    acceptance_problems,
    accepted_past_stop,
    conditional_rates,
    mean_acceptance_length,
    request_sum_problem,
    streamed_steps,
    tokens_per_forward,
)
from harness.core.probes.copying import copied_ngrams, share_pct
from harness.core.probes.cost import energy_usd_per_mtok, usd_per_mtok
from harness.core.probes.cpu import BUSY_CLIENT_CORES, NOISY_OTHERS_CORES, NOISY_STEAL
from harness.core.probes.gpu import NOISY_GPU_SM_PCT
from harness.core.probes.power import combine_power, summarize_power
from harness.core.probes.prefix_cache import PrefixCacheCounts, hit_pct, refused_every_time
from harness.core.probes.schedule import achieved_rate_rps, behind_schedule, lag_p90_s, queueing_s
from harness.core.probes.slo import attainment_pct, goodput_rps
from harness.core.probes.throughput import (
    mean_in_flight,
    output_tokens_per_s,
    requests_per_s,
    speedup,
    step_ms,
)
from harness.core.secrets import redact_url
from harness.core.stats import mean, quantile
from harness.derive import pooling
from harness.derive.covariate import Covariates, CovariateState, covariates
from harness.derive.exactness import cell_exactness, exactness
from harness.derive.intervals import Estimate, PromptTable, Spread, WindowPrompts, cell_estimates
from harness.derive.odd_requests import odd_counts, tokens_per_step
from harness.derive.pace import compare_pace
from harness.derive.ramp import ramp_metrics
from harness.results.files import RunDir
from harness.results.model import (
    ArmSummary,
    CategoryMetrics,
    CellMetrics,
    DecodeFloorInputs,
    DistributionArm,
    DistributionSection,
    DistributionTest,
    PaceComparison,
    RepeatMetrics,
    Summary,
)
from harness.results.raw import RawRun, read_raw
from harness.results.records import (
    PowerGpu,
    RampWindowRecord,
    RequestRecord,
    WindowGpu,
    WindowRecord,
    failure_kind,
)

# per key (a window, or a category at a level): the arms' start-up tok/s and their windows prompt
# by prompt, to every arm's estimate
ModelEstimates = Callable[
    [dict[Any, dict[str, dict[int, float]]], Mapping[Any, PromptTable]], dict[tuple[Any, str], Estimate]
]
PromptTables = dict[Any, dict[str, list[WindowPrompts]]]


# A window where more than this share of its requests failed is not summed (not in a cell's tokens,
# time, latencies or counters, nor in its speedup's start-ups): a failed request held its slot for
# part of the window's time and counted no tokens, so the window's tok/s is the failures' as much as
# the arm's. Its requests still count in requests_errored (the failed_requests caveat says the rule).
MAX_FAILED_SHARE = 0.10


def summed_windows(windows: list[WindowRecord], records: list[RequestRecord]) -> list[WindowRecord]:
    """The windows of one cell that are summed: at most ``MAX_FAILED_SHARE`` of their requests failed."""
    kept = []
    for window in windows:
        mine = [r for r in records if r.repeat == window.repeat]
        if sum(1 for r in mine if not r.ok) <= MAX_FAILED_SHARE * len(mine):
            kept.append(window)
    return kept


def _ms_quantile(values: list[float], q: float) -> float | None:
    return quantile(values, q) * 1000.0 if values else None


def _slo_metrics(records: list[RequestRecord], duration_s: float, slo: Slo | None) -> dict[str, float | None]:
    if slo is None:
        return {}
    return {"slo_pct": attainment_pct(records, slo), "goodput_rps": goodput_rps(records, slo, duration_s)}


def _repeats(
    windows: list[WindowRecord],
    records: list[RequestRecord],
    price_per_hour: float,
    slo: Slo | None,
    engine: str,
) -> tuple[SpecCounters, list[RepeatMetrics], list[dict[str, Any]]]:
    """Each repeat's own window-level numbers (the gates' samples), the summed counters (read the
    way ``engine`` reports them), and each repeat's power figures."""
    counters, per_repeat, power = SpecCounters(), [], []
    ok = [r for r in records if r.ok]
    for window in windows:
        mine = [r for r in ok if r.repeat == window.repeat]
        # counters that broke in the window (a restart or reset: the runner measures such a start-up
        # again; an older run may hold one) count nothing: not summed, no tau, no steps
        trusted = _counters_trusted(window)
        delta = get_adapter(engine).window_counters(window, mine) if trusted else SpecCounters()
        counters = counters.plus(delta)
        tokens = sum(r.output_tokens for r in mine)
        tok_s = output_tokens_per_s(tokens, window.duration_s)
        in_flight = [r for r in records if r.repeat == window.repeat]
        steps = window.counter_delta().engine_steps if trusted else None  # the server's own count
        per_repeat.append(
            RepeatMetrics(
                repeat=window.repeat,
                server_start=window.server_start,
                duration_s=window.duration_s,
                output_tokens=tokens,
                output_tok_s=tok_s,
                tau=acceptance(delta).tau,
                tokens_per_forward=tokens_per_forward(
                    tokens, len(mine), delta.accepted_tokens, sum(streamed_steps(r.chunks) for r in mine)
                ),
                usd_per_mtok=usd_per_mtok(price_per_hour, tok_s),
                mean_in_flight=mean_in_flight(in_flight, window.duration_s),
                engine_step_count=steps if steps is not None and steps > 0 else None,
                **_slo_metrics(in_flight, window.duration_s, slo),
            )
        )
        power.append(summarize_power(window.power.samples if window.power else None, tokens))
    return counters, per_repeat, power


def _counters_trusted(window: WindowRecord) -> bool:
    """Whether a window's counter scrapes count the window: none broke as it ran, and none is lower
    after it than before (a file written before the runner checked)."""
    if window.counters_broken:
        return False
    if window.counters_before is None or window.counters_after is None:
        return True
    after = SpecCounters.from_json(window.counters_after)
    return not after.fallen(SpecCounters.from_json(window.counters_before))


def _engine_steps(repeats: list[RepeatMetrics]) -> float | None:
    """The cell's engine steps: None unless every window counted them (a part is not the whole)."""
    counts = [r.engine_step_count for r in repeats]
    return sum(c for c in counts if c is not None) if counts and None not in counts else None


def cell_metrics(
    arm: Arm,
    drafter: str | None,
    windows: list[WindowRecord],
    records: list[RequestRecord],
    price_per_hour: float,
    usd_per_kwh: float | None,
    min_repeats: int | None = None,
    slo: Slo | None = None,
    schedule_tolerance_s: float = 0.05,
    *,
    engine: str,
) -> CellMetrics:
    """One (arm, workload, concurrency) cell from its raw records and windows, pooled over the
    cell's repeats: tokens and time add up, counters add up, latencies are pooled per request. Only
    the summed windows (``summed_windows``) and their requests enter the figures; every request
    counts in requests_total, _ok and _errored."""
    summed = summed_windows(windows, records)
    counted = [r for r in records if r.repeat in {w.repeat for w in summed}]  # the summed windows' requests
    ok = [r for r in counted if r.ok]
    output_tokens = sum(r.output_tokens for r in ok)
    duration = sum(w.duration_s for w in summed)
    tok_s = output_tokens_per_s(output_tokens, duration)
    counters, per_repeat, power = _repeats(summed, counted, price_per_hour, slo, engine)
    acc = acceptance(counters)
    steps = sum(streamed_steps(r.chunks) for r in ok)
    own = _request_acceptance(ok, engine)
    copies = [copied_ngrams(r.prompt_token_ids, r.token_ids) for r in ok]
    power_stats = combine_power(power, output_tokens)
    engine_steps = _engine_steps(per_repeat)
    answered = sum(1 for r in records if r.ok)
    first = windows[0]
    return CellMetrics(
        arm=arm.name,
        method=arm.method,
        num_speculative_tokens=arm.num_speculative_tokens,
        drafter=drafter,
        workload=first.workload,
        category=first.category,
        prompt_format=first.prompt_format,
        concurrency=first.concurrency,
        **_open_loop(first.request_rate, counted, schedule_tolerance_s),
        repeats=len(windows),
        requests_total=len(records),
        requests_ok=answered,
        requests_errored=len(records) - answered,
        requests_failed_by=_failed_by(records),
        requests_odd_by=odd_counts(records, tokens_per_step(arm.num_speculative_tokens)),  # every window's
        output_tokens=output_tokens,
        duration_s=duration,
        output_tok_s=tok_s,
        request_rps=requests_per_s(len(ok), duration),
        input_tokens=(prompt := _prompt_tokens(ok)),
        total_tok_s=output_tokens_per_s(output_tokens + prompt, duration) if prompt is not None else None,
        # the request and chunk percentiles as the registry defines them (the gates' too): TTFT and E2E
        # from when a request was due (open loop: its wait for a max_concurrency slot inside, no
        # coordinated omission), ITL every chunk gap of every request (vLLM's pooling); the open-loop
        # figures (the send-based TTFT beside it) exist only where the load was open loop
        **_request_metrics(ok, open_loop=bool(first.request_rate)),
        acceptance_source=first.acceptance_source,
        server_reported=windows[-1].server_reported,  # the engine's own figure after the cell's last window
        tau=acc.tau,
        tokens_per_forward=tokens_per_forward(output_tokens, len(ok), counters.accepted_tokens, steps),
        acceptance_rate=acc.acceptance_rate,
        per_position_acceptance=acc.per_position,
        conditional_acceptance=conditional_rates(acc.per_position),
        acceptance_checks=acceptance_problems(acc.tau, acc.per_position)
        + _request_sum_checks(counters, own, first.acceptance_source),
        accepted_past_stop=accepted_past_stop(output_tokens, len(ok), counters.accepted_tokens, steps),
        prompt_tau=_prompt_tau(ok, own),
        copy_share_pct=share_pct(copies),
        context_share_pct=share_pct(copies, "from_context"),
        output_ngrams=sum(c.total for c in copies),
        turn=first.turn,
        prompt_tokens_mean=_prompt_tokens_mean(ok),
        prefix_cache_hit_pct=hit_pct([PrefixCacheCounts(**w.prefix_cache) for w in summed if w.prefix_cache]),
        drafts=acc.drafts,
        draft_tokens=acc.draft_tokens,
        accepted_tokens=acc.accepted_tokens,
        engine_step_count=engine_steps,
        step_ms=step_ms(duration, engine_steps),
        usd_per_mtok=usd_per_mtok(price_per_hour, tok_s),
        mean_in_flight=mean_in_flight(counted, duration),
        # a failed request missed its targets: the SLO counts every window's requests, over their time
        **_slo_metrics(records, sum(w.duration_s for w in windows), slo),
        power_source=first.power.source if first.power else None,
        power_note=first.power.note if first.power else "not recorded",
        mean_w=power_stats["mean_w"],
        peak_w=power_stats["peak_w"],
        energy_j=power_stats["energy_j"],
        j_per_token=power_stats["j_per_token"],
        throttled=power_stats["throttled"],
        energy_usd_per_mtok=energy_usd_per_mtok(power_stats["j_per_token"], usd_per_kwh),
        per_repeat=per_repeat,
        speedup=None,
        exactness=None,
        **_precision(windows, min_repeats),
        **(_cpu(summed) | _gpu(summed)),  # a GPU neighbour sets noisy_neighbour, never clears it
    )


def _prompt_tokens(ok: list[RequestRecord]) -> int | None:
    """The successful requests' prompt tokens as the engine counted them; None unless it counted all."""
    counts = [r.prompt_token_count for r in ok]
    return None if not counts or any(c is None for c in counts) else sum(counts)  # type: ignore[misc]


def _prompt_tokens_mean(ok: list[RequestRecord]) -> float | None:
    counts = [r.prompt_token_count for r in ok if r.prompt_token_count is not None]
    return mean(counts) if counts else None


def _request_acceptance(ok: list[RequestRecord], engine: str) -> list[SpecCounters] | None:
    """Each request's own acceptance, in the records' order; None unless every request has it."""
    adapter = get_adapter(engine)
    own = [adapter.request_counters(r) for r in ok]
    return None if not own or any(c is None for c in own) else own  # type: ignore[return-value]


def _request_sum_checks(counters: SpecCounters, own: list[SpecCounters] | None, source: str) -> list[str]:
    """Server counters against the requests' own acceptance summed (where both exist)."""
    if own is None or source != "server_counters" or counters.drafts <= 0:
        return []
    total = SpecCounters()
    for request in own:
        total = total.plus(request)
    problem = request_sum_problem(counters, total)
    return [] if problem is None else [problem]


def _prompt_tau(ok: list[RequestRecord], own: list[SpecCounters] | None) -> dict[str, float] | None:
    """tau per prompt over the cell's repeats, from the requests' own acceptance."""
    if own is None:
        return None
    by_prompt: dict[str, SpecCounters] = {}
    for record, counters in zip(ok, own, strict=True):
        by_prompt[record.prompt_id] = by_prompt.get(record.prompt_id, SpecCounters()).plus(counters)
    taus = {p: mean_acceptance_length(c.drafts, c.accepted_tokens) for p, c in sorted(by_prompt.items())}
    return {p: t for p, t in taus.items() if t is not None} or None


def _open_loop(rate: float | None, records: list[RequestRecord], tolerance_s: float) -> dict[str, Any]:
    """An open-loop cell's schedule keeping (probes.schedule), pooled over its repeats: the achieved
    rate is each repeat's, averaged (repeats restart the schedule)."""
    if rate is None:
        return {}
    repeats = sorted({r.repeat for r in records})
    rates = [
        x for k in repeats if (x := achieved_rate_rps([r for r in records if r.repeat == k])) is not None
    ]
    queueing = [q for r in records if (q := queueing_s(r)) is not None]
    lag = lag_p90_s(records)
    return {
        "request_rate": rate,
        "achieved_rate_rps": sum(rates) / len(rates) if rates else None,
        "schedule_lag_ms_p90": None if lag is None else lag * 1000.0,
        "queueing_ms_p50": _ms_quantile(queueing, 0.5),
        "behind_schedule": behind_schedule(records, tolerance_s),
    }


def _cpu(windows: list[WindowRecord]) -> dict[str, Any]:
    """CPU by whom, pooled over the cell's windows (per second of window time, in cores)."""
    measured = [w for w in windows if w.cpu is not None]
    duration = sum(w.duration_s for w in measured)
    if not measured or duration <= 0:
        return {}

    def cores(name: str) -> float:
        return sum(getattr(w.cpu, name) for w in measured) / duration

    others, steal, client = cores("others_s"), cores("steal_s") / measured[0].cpu.cores, cores("client_s")  # type: ignore[union-attr]
    return {
        "client_cpu_cores": client,
        "engine_cpu_cores": cores("engine_s"),
        "others_cpu_cores": others,
        "steal_share": steal,
        "noisy_neighbour": others > NOISY_OTHERS_CORES or steal > NOISY_STEAL,
        "client_busy": client > BUSY_CLIENT_CORES,
    }


def _gpu(windows: list[WindowRecord]) -> dict[str, Any]:
    """Other processes on the engine's GPUs, the most of any of the cell's windows. A window flags
    the cell when the others' SM utilisation passes probes.gpu's threshold or, where NVML cannot
    say per process, when any other compute process shared the engine's GPUs."""
    watched = [w.gpu for w in windows if w.gpu is not None and w.gpu.attributed]
    if not watched:
        return {}

    def others_sm(g: WindowGpu) -> float:
        return sum(o.sm_pct or 0.0 for o in g.others)

    sm = [others_sm(g) for g in watched if g.utilization_supported]
    # where NVML cannot say per process, any other compute process on the engine's GPUs counts
    busy = any(others_sm(g) > NOISY_GPU_SM_PCT if g.utilization_supported else g.others for g in watched)
    flagged = {"noisy_neighbour": True} if busy else {}  # merged over _cpu's: never clears its flag
    return {
        "gpu_others_sm_pct": max(sm) if sm else None,
        "gpu_other_processes": max(len(g.others) for g in watched),
        **flagged,
    }


def _precision(windows: list[WindowRecord], min_repeats: int | None) -> dict[str, Any]:
    """Adaptive repeats: the precision the cell's last repeat reached, and what the repeats beyond
    the minimum cost in engine seconds."""
    last = windows[-1].precision
    if last is None or min_repeats is None:
        return {}
    extra = sum(w.duration_s for w in windows if w.repeat >= min_repeats)
    return {
        "precision_metric": last.metric,
        "rel_half_width": last.rel_half_width,
        "precision_target": last.target,
        "extra_repeat_s": extra,
    }


def _window_prompts(windows: list[WindowRecord], records: list[RequestRecord]) -> list[WindowPrompts]:
    """Each window of one arm's cell, prompt by prompt: the tokens its answered requests produced
    and the seconds they took (send to last token), the prompt term's data."""
    found = []
    for window in windows:
        prompts: dict[str, tuple[int, float]] = {}
        for r in records:
            if r.repeat == window.repeat and r.ok and r.t_done is not None:
                tokens, busy = prompts.get(r.prompt_id, (0, 0.0))
                prompts[r.prompt_id] = (tokens + r.output_tokens, busy + r.t_done - r.t_send)
        found.append(WindowPrompts(window.server_start, window.duration_s, prompts))
    return found


def prompt_tables(raw: RawRun) -> tuple[PromptTables, PromptTables]:
    """Per (workload, level) and per (category, level): each arm's windows prompt by prompt. A
    category's window at one (start-up, repeat) is its workloads' windows together, as its tok/s
    is (``category_startup_tok_s``), its prompts named by workload."""
    cells: PromptTables = {}
    categories: dict[Any, dict[str, dict[tuple[int, int], tuple[float, dict[str, tuple[int, float]]]]]] = {}
    for name, arm in raw.arms.items():
        by_cell: dict[tuple[str, Any], list[WindowRecord]] = {}
        for window in arm.windows:
            by_cell.setdefault((window.workload, window.level), []).append(window)
        for (workload, level), windows in by_cell.items():
            records = [r for r in arm.samples if (r.workload, r.level) == (workload, level)]
            summed = summed_windows(windows, records)
            measured = _window_prompts(summed, records)
            cells.setdefault((workload, level), {})[name] = measured
            merged = categories.setdefault((windows[0].category, level), {}).setdefault(name, {})
            for window, prompts in zip(summed, measured, strict=True):
                duration, pooled = merged.get((window.server_start, window.repeat), (0.0, {}))
                named = {f"{workload}/{p}": v for p, v in prompts.prompts.items()}
                merged[(window.server_start, window.repeat)] = (duration + window.duration_s, pooled | named)
    pooled_tables: PromptTables = {
        key: {
            name: [
                WindowPrompts(start, duration, prompts)
                for (start, _), (duration, prompts) in sorted(w.items())
            ]
            for name, w in arms.items()
        }
        for key, arms in categories.items()
    }
    return cells, pooled_tables


def _arm_cells(raw: RawRun, arm: Arm) -> list[CellMetrics]:
    regime, drafter = raw.regime, raw.record.drafters.get(arm.name)
    label = drafter["label"] if drafter else None
    cells: dict[tuple[str, int], list[WindowRecord]] = {}
    for window in raw.arms[arm.name].windows:  # a cell's repeats, in the order measured
        cells.setdefault((window.workload, window.level), []).append(window)
    samples = raw.arms[arm.name].samples
    return [
        cell_metrics(
            arm,
            label,
            windows,
            [s for s in samples if (s.workload, s.level) == key],
            raw.record.price_per_hour,
            regime.cost.usd_per_kwh,
            None if isinstance(regime.load.repeats, int) else regime.load.repeats.min,
            regime.slo,
            regime.load.schedule_tolerance_s,
            engine=regime.engine.name,
        )
        for key, windows in cells.items()
    ]


def _model_estimates(
    tables: dict[Any, dict[str, dict[int, float]]],
    prompts: Mapping[Any, PromptTable],
    baseline: str,
    spread: Spread | None,
    looks: int,
    unpaired: Collection[str],
    first_look: int | None,
    prior_sd: float | None = None,
    covariates: Mapping[str, Covariates] | None = None,
) -> dict[tuple[Any, str], Estimate]:
    """Per key (a window, or a category at a level) and arm: the arms x rounds model's estimate
    (``harness.derive.intervals``) over its table of per-start-up mean tok/s. An ``unpaired`` arm
    (``RunTiming.unpaired_arms``: its start-ups ran in other rounds than the baseline's) keeps its
    point but no interval: the model's pairing by round does not hold for it. ``covariates``: per
    workload, its covariate (a window's key names its workload; a category's pools several and
    keeps the jackknife alone)."""
    found = {}
    for key, table in tables.items():
        covariate = (covariates or {}).get(key[0])
        found_here = cell_estimates(
            table, baseline, spread, looks, first_look, prompts.get(key), prior_sd, covariate
        )
        for arm, estimate in found_here.items():
            if arm in unpaired:
                estimate = replace(estimate, low=None, high=None, df=0, log_se=None, source=None)
            found[(key, arm)] = estimate
    return found


def _with_speedups(
    cells: list[CellMetrics], baseline: str, estimates: ModelEstimates, prompts: PromptTables
) -> list[CellMetrics]:
    """Per (workload, load level): every arm's speedup and interval from the arms x rounds model
    over its start-ups' mean tok/s; and per repeat, against the baseline's same repeat (with
    adaptive repeats an arm may run more repeats than the baseline did: those pair with the
    baseline's pooled tok/s), which the gates and studies read."""
    groups = pooling.grouped(cells, lambda cell: (cell.workload, cell.level))
    found = estimates(
        {key: {c.arm: c.startup_tok_s() for c in members} for key, members in groups.items()}, prompts
    )
    base = {(c.workload, c.level): c for c in cells if c.arm == baseline}
    out = []
    for cell in cells:
        reference = base.get((cell.workload, cell.level))
        base_repeats = {r.repeat: r.output_tok_s for r in reference.per_repeat} if reference else {}
        pooled = reference.output_tok_s if reference else None
        per_repeat = [
            r.model_copy(update={"speedup": speedup(r.output_tok_s, base_repeats.get(r.repeat, pooled))})
            for r in cell.per_repeat
        ]
        update: dict[str, Any] = {"per_repeat": per_repeat, "speedup": None}
        estimate = found.get(((cell.workload, cell.level), cell.arm))
        if cell.arm == baseline:
            update["speedup"] = speedup(cell.output_tok_s, cell.output_tok_s)
        elif estimate is not None:
            update |= estimate.stored()
        out.append(cell.model_copy(update=update))
    return out


def _request_metrics(ok: list[RequestRecord], open_loop: bool) -> dict[str, float | None]:
    """Every request and chunk metric of a cell (``PER_REQUEST``) over its answered requests, each
    field's samples read once for the metrics that share it; the open-loop figures only where the
    load was open loop."""
    pooled: dict[str, list[float]] = {}
    found: dict[str, float | None] = {}
    for metric in PER_REQUEST:
        if metric.shown == "open_loop" and not open_loop:
            found[metric.name] = None
            continue
        key = f"{metric.sample_field}/{metric.samples}"
        if key not in pooled:
            pooled[key] = metric.pooled(ok)
        found[metric.name] = metric.of_records(ok, pooled[key])
    return found


def _failed_by(records: list[RequestRecord]) -> dict[str, int]:
    """The failed requests by kind (``records.failure_kind``), most first."""
    kinds = Counter(failure_kind(r.failure) for r in records if r.failure is not None)
    return dict(kinds.most_common())


def _others_tokens(windows: list[WindowRecord], records: list[RequestRecord]) -> float | None:
    """What an endpoint generated for others during the arm's windows; None when any window could
    not tell. The run side took the window's own tokens from its requests' token ids, so a request
    that streamed text without ids (a failed one) left its tokens in the others' count: they are
    taken back out by the engine's own count of them (usage), and where it gave none the window
    cannot tell, never blaming another client for the window's own tokens."""
    seen = []
    for window in windows:
        mine = [
            r
            for r in records
            if (r.workload, r.level, r.repeat) == (window.workload, window.level, window.repeat)
        ]
        uncounted = [r.usage_completion_tokens for r in mine if r.text and not r.token_ids]
        if window.others_tokens is None or None in uncounted:
            return None
        seen.append(max(0.0, window.others_tokens - sum(n for n in uncounted if n is not None)))
    return sum(seen) if seen else None


def _cache_reset_failed(windows: list[WindowRecord] | list[RampWindowRecord]) -> int:
    """The windows whose prefix-cache reset was asked for and refused every time."""
    return sum(1 for w in windows if refused_every_time(w.prefix_cache_reset, w.prefix_cache_reset_attempts))


def _arm_summary(raw: RawRun, arm: Arm) -> ArmSummary:
    drafter = raw.record.drafters.get(arm.name)
    status = raw.arms[arm.name].status
    return ArmSummary(
        name=arm.name,
        method=arm.method,
        num_speculative_tokens=arm.num_speculative_tokens,
        drafter=drafter,
        k_schedule=[tuple(r) for r in arm.k_schedule] if isinstance(arm.k_schedule, list) else None,
        k_schedule_source=arm.k_schedule_source,
        published=list(arm.published),
        endpoint=redact_url(arm.endpoint) if arm.endpoint else None,
        others_tokens=_others_tokens(raw.arms[arm.name].windows, raw.arms[arm.name].samples)
        if arm.endpoint
        else None,
        cache_reset_failed=_cache_reset_failed(raw.arms[arm.name].windows)
        + _cache_reset_failed(raw.arms[arm.name].ramp_windows),
        metrics_other_models=sorted({m for w in raw.arms[arm.name].windows for m in w.other_models}),
        **get_adapter(raw.regime.engine.name).sampling_settings(arm),
        **status.model_dump(),
    )


def summarize(run: RunDir | Path | RawRun) -> Summary:
    """The summary of a run directory, from its raw files only."""
    raw = run if isinstance(run, RawRun) else read_raw(run)
    baseline = raw.baseline_arm
    cells = [c for arm in raw.regime.arms for c in _arm_cells(raw, arm)]
    calibration = raw.calibration
    spread = Spread(calibration.sd, calibration.df, calibration.label()) if calibration else None
    # a run that adds rounds until decided: its intervals are corrected for the looks it could take
    looks, first_look = raw.regime.load.looks(), raw.regime.load.first_look()
    unpaired = raw.timing.unpaired_arms(baseline) if raw.timing else []
    prior_sd = raw.regime.verdict.startup_prior_sd

    def estimates(
        tables: dict[Any, dict[str, dict[int, float]]], prompts: Mapping[Any, PromptTable]
    ) -> dict[tuple[Any, str], Estimate]:
        return _model_estimates(tables, prompts, baseline, spread, looks, unpaired, first_look, prior_sd)

    covariate = _covariates(raw)

    def cell_estimates_with_covariate(
        tables: dict[Any, dict[str, dict[int, float]]], prompts: Mapping[Any, PromptTable]
    ) -> dict[tuple[Any, str], Estimate]:
        return _model_estimates(
            tables, prompts, baseline, spread, looks, unpaired, first_look, prior_sd, covariate.by_workload
        )

    cell_prompts, category_prompts = prompt_tables(raw)
    cells = _with_speedups(cells, baseline, cell_estimates_with_covariate, cell_prompts)
    section = exactness(raw)
    cells = [c.model_copy(update={"exactness": cell_exactness(c, section, baseline)}) for c in cells]
    return Summary(
        run_id=raw.run.root.name,
        regime_name=raw.regime.name,
        regime_fingerprint=raw.record.fingerprint,
        baseline_arm=baseline,
        mismatches=raw.record.mismatches,
        lossy_settings=raw.record.lossy_settings,
        known_defects=raw.record.known_defects,
        engine_patches=raw.record.engine_patches,
        overrides=list(dict.fromkeys(o["given"] for o in raw.record.overrides)),
        arms=[_arm_summary(raw, arm) for arm in raw.regime.arms],
        cells=cells,
        categories=category_rows(cells, baseline, estimates, category_prompts),
        exactness=section,
        unread_lines=raw.unread.notes,
        timing=raw.timing,
        slo=raw.regime.slo,
        verdict=raw.regime.verdict,
        distribution=distribution_section(raw),
        calibration=calibration.label() if calibration else None,
        ramp=ramp_metrics(raw, spread, looks, first_look),
        power_gpus=_power_gpus(raw),
        decode_floor=_decode_floor(raw),
        pace=_pace(raw, [c for c in cells if c.arm == baseline]),
        covariates=covariate.uses(),
    )


def _covariates(raw: RawRun) -> CovariateState:
    """Each workload's covariate from the baseline's workload pass (``harness.derive.covariate``),
    or why it has none (the run side's reason where it made no pass: not greedy, an endpoint, ...;
    a regime that asks for none keeps the jackknife alone)."""
    base = raw.arms[raw.baseline_arm]
    workloads = list(dict.fromkeys(w.workload for w in base.windows))
    if raw.regime.verdict.covariate == "none":
        return CovariateState({}, dict.fromkeys(workloads, "verdict.covariate: none"))
    record = raw.workload_pass_record
    why = record.reason if record is not None and record.status == "skipped" else None
    pools = {part.workload: part.prompts for part in record.workloads} if record is not None else None
    return covariates(base.workload_pass, base.samples, workloads, pools, why)


def _pace(raw: RawRun, baseline: list[CellMetrics]) -> PaceComparison | None:
    """The baseline's pace against the regime's reference (``derive.pace``); None where the
    baseline is an endpoint (its machine is not the one environment.json describes)."""
    if raw.regime.baseline_arm.endpoint is not None:
        return None
    return compare_pace(raw.regime.reference, baseline, raw.environment)


def _decode_floor(raw: RawRun) -> DecodeFloorInputs | None:
    """environment.json's ``decode_floor`` (a run before version 14, or an endpoint's, has none)."""
    recorded = raw.environment.get("decode_floor")
    if not isinstance(recorded, dict):
        return None
    try:
        return DecodeFloorInputs.model_validate(recorded)
    except ValidationError:
        return None  # a record this harness cannot read is no floor, not a failed summary


def _power_gpus(raw: RawRun) -> list[PowerGpu] | None:
    """Every GPU a window's power was read on, in the order first read (one set per run: the
    regime's servers all get the same GPUs)."""
    powers = [w.power for arm in raw.arms.values() for w in arm.windows if w.power]
    found = [gpu for power in powers for gpu in power.gpus or []]
    return list(dict.fromkeys(found)) or None


def distribution_section(raw: RawRun) -> DistributionSection | None:
    """Temperature > 0: each speculative arm's seeded samples against the baseline's, prompt by prompt
    (harness.core.probes.distribution); None for greedy runs or when the check is off."""
    regime = raw.regime
    if not regime.distribution_applies():
        return None
    settings = regime.distribution_check
    margin = settings.equivalence_margin
    reference = [distribution.sequence_stats(s) for s in raw.arms[raw.baseline_arm].distribution if s.ok]
    arms = {}
    for name, arm in raw.arms.items():
        mine = [distribution.sequence_stats(s) for s in arm.distribution if s.ok]
        if name == raw.baseline_arm or not mine or not reference:
            continue
        tests = distribution.compare(reference, mine, settings.alpha, margin)
        decision = distribution.verdict(
            tests, settings.alpha, margin, settings.min_effect, settings.min_samples
        )
        arms[name] = DistributionArm(
            verdict=decision.text(),
            tests=[DistributionTest(**vars(t)) for t in tests],
            more_samples_per_side=decision.more_per_side,
            samples_per_prompt_needed=decision.samples_per_prompt(settings.samples_per_prompt),
        )
    return DistributionSection(
        samples_per_prompt=settings.samples_per_prompt,
        alpha=settings.alpha,
        min_effect=settings.min_effect,
        min_samples=settings.min_samples,
        margin=margin,
        arms=arms,
    )


def category_startup_tok_s(members: list[CellMetrics]) -> dict[int, float]:
    """A category's tok/s per server start-up: per repeat its workloads' tokens over their time,
    the mean over the start-up's repeats (for one workload: ``CellMetrics.startup_tok_s``)."""
    by_repeat: dict[tuple[int, int], list[float]] = {}
    for member in members:
        for r in member.per_repeat:
            pooled = by_repeat.setdefault((r.server_start, r.repeat), [0.0, 0.0])
            pooled[0] += r.output_tokens
            pooled[1] += r.duration_s
    found: dict[int, list[float]] = {}
    for (start, _), (tokens, duration) in sorted(by_repeat.items()):
        tok_s = output_tokens_per_s(int(tokens), duration)
        if tok_s is not None:
            found.setdefault(start, []).append(tok_s)
    return {start: sum(v) / len(v) for start, v in found.items()}


def category_rows(
    cells: list[CellMetrics], baseline: str, estimates: ModelEstimates, prompts: PromptTables
) -> list[CategoryMetrics]:
    """Per (arm, category, concurrency), pooled over the workloads of that category: tokens and
    time add up, tau from the summed draft counts, exactness over all their prompts; the speedup
    from the arms x rounds model over the category's per-start-up tok/s, as a cell's."""
    rows = []
    groups = pooling.grouped(cells, lambda cell: (cell.arm, cell.category, cell.level))
    tables: dict[Any, dict[str, dict[int, float]]] = {}
    for (arm, category, level), members in groups.items():
        tables.setdefault((category, level), {})[arm] = category_startup_tok_s(members)
    found = estimates(tables, prompts)
    for (arm, category, level), members in groups.items():
        identical, pairs = pooling.identical_pct(
            (e.identical_pct, e.compared) for m in members if (e := m.exactness)
        )
        estimate = found.get(((category, level), arm))
        stored: dict[str, Any] = {"speedup": None} if estimate is None else estimate.stored()
        if arm == baseline:
            stored = {"speedup": 1.0}
        rows.append(
            CategoryMetrics(
                arm=arm,
                method=members[0].method,
                num_speculative_tokens=members[0].num_speculative_tokens,
                category=category,
                concurrency=level.concurrency,
                request_rate=level.request_rate,
                workloads=[m.workload for m in members],
                output_tok_s=output_tokens_per_s(
                    sum(m.output_tokens for m in members), sum(m.duration_s for m in members)
                ),
                tau=pooling.tau(members),
                drafts=sum(m.drafts for m in members),
                accepted_tokens=sum(m.accepted_tokens for m in members),
                identical_pct=identical,
                exactness_pairs=pairs,
                copy_share_pct=pooling.share_pct(members, "copy_share_pct"),
                context_share_pct=pooling.share_pct(members, "context_share_pct"),
                **stored,
            )
        )
    return rows
