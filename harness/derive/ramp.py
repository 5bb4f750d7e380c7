"""A run's ramps (``load.ramp``), per arm, workload and stage, pooled over the server start-ups.

Each start-up of each arm ran the ramp once per workload, on the same clock and the same prompts,
so a stage's tok/s is measured once per start-up per arm, exactly like a cell's: the stage's
speedup and its interval come from the same arms x rounds model (``harness.derive.intervals``) over the
start-ups' tok/s in that stage, and so does the whole ramp's (tokens streamed from the start of the
first stage to the end of the last, over that time). The formulas of one window are
``probes.ramp``'s; tau and drafted tokens per draft come from the counter deltas between the reads
at the stages' ends, summed over the start-ups.

Pure: the raw run in, ``RampStageMetrics`` out (the summary stores them).
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.config.engines import ACTIVE_STEPS, get_adapter
from harness.config.load import RampStage
from harness.core import stats
from harness.core.probes import ramp as formulas
from harness.core.probes.acceptance import SpecCounters, mean_acceptance_length
from harness.core.probes.throughput import output_tokens_per_s
from harness.derive.intervals import Spread, cell_estimates
from harness.results.model import RampStageMetrics
from harness.results.raw import RawArm, RawRun
from harness.results.records import RampWindowRecord, RequestRecord


def _ms_p(values: list[float], q: float) -> float | None:
    return 1000 * stats.quantile(values, q) if values else None


def _counters(windows: Sequence[RampWindowRecord], stage: int | None) -> SpecCounters | None:
    """The counter delta over a stage (or the whole ramp), summed over the windows; None where a
    window's reads are missing (counted per request, or a read failed)."""
    total = SpecCounters()
    for window in windows:
        if stage is None:
            first, last = (
                window.counters[0] if window.counters else None,
                window.counters[-1] if window.counters else None,
            )
            if first is None or last is None or len(window.counters) != len(window.stages) + 1:
                return None
            delta = SpecCounters.from_json(last).minus(SpecCounters.from_json(first))
        else:
            found = window.stage_counters(stage)
            if found is None:
                return None
            delta = found
        total = total.plus(delta)
    return total


def _request_counters(engine: str, records: list[RequestRecord]) -> SpecCounters | None:
    """An engine without counters (SGLang): the sum of each request's own acceptance details."""
    adapter = get_adapter(engine)
    found = [c for r in records if r.ok and (c := adapter.request_counters(r)) is not None]
    total = SpecCounters()
    for counters in found:
        total = total.plus(counters)
    return total if found else None


def _engine_steps(windows: list[RampWindowRecord], stage: int) -> list[float]:
    """The engine's active speculative steps as the stage ended (an engine that adapts them reports
    them with its server figures: SGLang), per window that read them."""
    out = []
    for window in windows:
        reported = window.stage_reported[stage] if stage < len(window.stage_reported) else None
        value = (reported or {}).get(ACTIVE_STEPS)
        if isinstance(value, int | float):
            out.append(float(value))
    return out


def _span_metrics(
    arm: str,
    workload: str,
    stage: tuple[int, RampStage] | None,
    bounds: tuple[float, float],
    windows: list[tuple[RampWindowRecord, list[RequestRecord]]],
    speculative: bool,
    engine: str,
) -> RampStageMetrics:
    start, end = bounds
    tok_s = [
        output_tokens_per_s(formulas.tokens_between(records, start, end), end - start) or 0.0
        for _, records in windows
    ]
    in_flight = [formulas.in_flight_between(records, start, end) for _, records in windows]
    inside = [t for _, records in windows for t in formulas.tpot_inside(records, start, end)]
    across = [t for _, records in windows for t in formulas.tpot_across(records, start)] if start > 0 else []
    sent = [r for _, records in windows for r in records if start <= r.t_send < end]
    delta = _counters([w for w, _ in windows], stage[0] if stage else None) if speculative else None
    if speculative and delta is None and windows and windows[0][0].acceptance_source == "per_request":
        delta = _request_counters(engine, sent)  # SGLang: the requests sent in the span count
    steps = _engine_steps([w for w, _ in windows], stage[0]) if stage else []
    return RampStageMetrics(
        arm=arm,
        workload=workload,
        stage=stage[0] if stage else None,
        label=stage[1].label() if stage else "ramp",
        concurrency=stage[1].concurrency if stage else None,
        request_rate=stage[1].request_rate if stage else None,
        start_s=start,
        end_s=end,
        start_ups=len(windows),
        output_tok_s=stats.mean(tok_s) if tok_s else None,
        startup_tok_s=tok_s,
        mean_in_flight=stats.mean([v for v in in_flight if v is not None])
        if any(v is not None for v in in_flight)
        else None,
        requests_sent=len(sent),
        requests_errored=sum(1 for r in sent if not r.ok),
        tpot_ms_p50_inside=_ms_p(inside, 0.5),
        tpot_ms_p90_inside=_ms_p(inside, 0.9),
        tpot_ms_p90_across=_ms_p(across, 0.9),
        requests_across=len(across),
        tau=mean_acceptance_length(delta.drafts, delta.accepted_tokens) if delta is not None else None,
        engine_steps=stats.mean(steps) if steps else None,
        drafted_per_draft=(delta.draft_tokens / delta.drafts if delta.drafts > 0 else 0.0)
        if delta is not None
        else None,
    )


def _arm_ramp(raw: RawRun, arm: RawArm, workload: str) -> list[RampStageMetrics]:
    windows = sorted((w for w in arm.ramp_windows if w.workload == workload), key=lambda w: w.server_start)
    if not windows:
        return []
    paired = [(w, [r for r in arm.ramp if r.workload == workload and r.repeat == w.repeat]) for w in windows]
    method = next(a.method for a in raw.regime.arms if a.name == arm.name)
    speculative, engine = method != "baseline", raw.regime.engine.name
    bounds = windows[0].stage_bounds()
    out = [
        _span_metrics(arm.name, workload, (index, stage), bounds[index], paired, speculative, engine)
        for index, stage in enumerate(windows[0].stages)
    ]
    whole = (0.0, bounds[-1][1])
    out.append(_span_metrics(arm.name, workload, None, whole, paired, speculative, engine))
    return out


def ramp_metrics(
    raw: RawRun, spread: Spread | None = None, looks: int = 1, first_look: int | None = None
) -> list[RampStageMetrics]:
    """Every arm's ramp metrics per workload and stage (and whole), with speedups against the
    baseline from the arms x rounds model; [] for a run without a ramp."""
    workloads = list(dict.fromkeys(w.workload for arm in raw.arms.values() for w in arm.ramp_windows))
    found = [m for workload in workloads for arm in raw.arms.values() for m in _arm_ramp(raw, arm, workload)]
    baseline = raw.baseline_arm
    estimates = {}
    for key in dict.fromkeys((m.workload, m.stage) for m in found):
        table = {m.arm: dict(enumerate(m.startup_tok_s)) for m in found if (m.workload, m.stage) == key}
        for arm, estimate in cell_estimates(table, baseline, spread, looks, first_look).items():
            estimates[(arm, *key)] = estimate
    out = []
    for metrics in found:
        estimate = estimates.get((metrics.arm, metrics.workload, metrics.stage))
        if metrics.arm == baseline:
            metrics = metrics.model_copy(update={"speedup": 1.0 if metrics.output_tok_s else None})
        elif estimate is not None:
            metrics = metrics.model_copy(update=estimate.stored())
        out.append(metrics)
    return out
