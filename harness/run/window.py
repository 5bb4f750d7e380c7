"""One measured window: its requests sent between the sensors' readings, written as a ``WindowRecord``.

Each sensor is one small object: ``before`` as the window starts, ``after`` as it ends, which returns
its part of the record's fields. Two kinds: this machine's samplers run through the window (power,
GPU processes, CPU seconds) and are stopped even when it fails; the server's readings are taken
around it (prefix cache, speculative counters, generated tokens, figures, an endpoint's deployment),
after the window proved the engine alive. Readings start in list order and end in reverse, so the
innermost (the last to start) ends first, as nested ``with`` blocks would. The ramp (``load.ramp``),
one continuous window of stages, shares the CPU sensor and the counters' break. A conversation's
turns are windows one after another (``converse``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from rich.console import Console
from rich.markup import escape

from harness.config.arms import Arm
from harness.config.engines import SERVED_MODEL_NAME, EngineAdapter
from harness.config.level import LoadLevel
from harness.config.workloads import LoadedWorkload, Prompt, next_turn
from harness.core.arrivals import arrival_offsets, ramp_dues
from harness.core.errors import EngineError
from harness.core.probes.acceptance import SpecCounters, counter_breaks
from harness.core.probes.cpu import CpuSnapshot, window_cpu
from harness.core.probes.prefix_cache import RESET_ATTEMPTS
from harness.core.probes.throughput import output_tokens_per_s
from harness.results import PowerGpu, RequestRecord, RunDir, WindowPower, WindowRecord, append_jsonl
from harness.results.records import RampWindowRecord
from harness.run import engine_http as http
from harness.run.client import RampResult, WindowResult
from harness.run.deployment import deployment_change, served_now
from harness.run.plan import RunPlan
from harness.run.sensors import cpu, gpu
from harness.run.sensors.power import PowerReader, PowerSampler
from harness.run.server import ExternalServer, Server

# the counters after a window are read again until two reads agree, SETTLE_INTERVAL_S apart, at most
# SETTLE_READS more times (vLLM publishes a step's counters shortly after streaming its tokens)
SETTLE_READS = 20
SETTLE_INTERVAL_S = 0.1

# a refused prefix-cache reset is asked again (probes.prefix_cache.RESET_ATTEMPTS times in all),
# RESET_BACKOFF_S apart and doubling: at most 1.5 s a window
RESET_BACKOFF_S = 0.1


def reset_prefix_cache(adapter: EngineAdapter, base_url: str) -> tuple[bool, int]:
    """Empty the engine's prefix cache, asking again while it refuses: (emptied, the attempts made).
    Still refused after ``RESET_ATTEMPTS``, the window runs on whatever the cache holds, and its
    record says so (``prefix_cache_reset`` false after ``prefix_cache_reset_attempts``)."""
    for attempt in range(1, RESET_ATTEMPTS + 1):
        emptied = adapter.reset_prefix_cache(base_url)
        if emptied is None:  # the server has no reset (no route: an endpoint without dev mode)
            return False, attempt
        if emptied:
            return True, attempt
        if attempt < RESET_ATTEMPTS:
            time.sleep(RESET_BACKOFF_S * 2 ** (attempt - 1))
    return False, RESET_ATTEMPTS


# the precision the adaptive repeats reached after a window, from its repeat and its tok/s
Precision = Callable[[int, float | None], dict[str, Any]]


class CountersBroken(EngineError):
    """A window whose counter scrapes are no count of it (``counter_breaks``): its start-up is
    measured again once, or the arm fails with this reason."""


class Sampler(Protocol):
    """A sensor of this machine running through the window."""

    def before(self) -> None: ...

    def after(self) -> dict[str, Any]: ...


class Reading(Protocol):
    """A reading of the server around the window; ``after`` sees the window's records."""

    def before(self) -> None: ...

    def after(self, records: list[RequestRecord]) -> dict[str, Any]: ...


class PowerUse:
    """The power (and energy) samples over the window, and the GPUs they summed."""

    def __init__(self, reader: PowerReader | None, note: str, period_s: float, gpus: list[dict[str, Any]]):
        self.reader, self.note, self.period_s, self.gpus = reader, note, period_s, gpus
        self.sampler: PowerSampler | None = None

    def before(self) -> None:
        if self.reader is not None:
            self.sampler = PowerSampler(self.reader, self.period_s)
            self.sampler.start()

    def after(self) -> dict[str, Any]:
        readings = self.sampler.stop() if self.sampler else []
        power = WindowPower(
            source=self.reader.source if self.reader else None,
            note=self.note,
            samples=[(r.t, r.watts, r.energy_j, r.throttled) for r in readings],
            gpus=self._gpus(),
        )
        return {"power": power}

    def _gpus(self) -> list[PowerGpu] | None:
        """The GPUs an NVML power reading summed: the servers' own; None where it read every visible
        one (no GPU chosen) or power came from elsewhere."""
        if self.reader is None or self.reader.source != "nvml" or not self.gpus:
            return None
        return [PowerGpu(index=g["index"], name=g.get("name"), uuid=g.get("uuid")) for g in self.gpus]


class GpuProcesses:
    """The processes on the engine's GPUs over the window (none for a server not started here)."""

    def __init__(self, reader: gpu.NvmlProcessReader | None, pid: int | None):
        self.reader, self.pid = reader, pid
        self.watch: gpu.GpuWatch | None = None

    def before(self) -> None:
        self.watch = gpu.watch(self.reader, self.pid) if self.pid is not None else None

    def after(self) -> dict[str, Any]:
        return {"gpu": self.watch.stop() if self.watch else None}


class CpuSeconds:
    """The window's CPU seconds by whom: the engine's process group, the client, the rest."""

    def __init__(self, pid: int | None):
        self.pid = pid
        self.start: CpuSnapshot | None = None

    def before(self) -> None:
        self.start = cpu.snapshot(self.pid) if self.pid is not None else None

    def after(self) -> dict[str, Any]:
        return {"cpu": window_cpu(self.start, cpu.snapshot(self.pid) if self.pid is not None else None)}


class PrefixCache:
    """The prefix cache emptied as the window starts (unless ``keeps``: a later turn of a
    conversation keeps the turns before, as a production server would; an endpoint's is its own),
    and its hits and queries over the window."""

    def __init__(self, adapter: EngineAdapter, base_url: str, keeps: bool):
        self.adapter, self.base_url, self.keeps = adapter, base_url, keeps
        self.reset, self.attempts, self.start = False, 0, None

    def before(self) -> None:
        if not self.keeps:
            self.reset, self.attempts = reset_prefix_cache(self.adapter, self.base_url)
        self.start = self.adapter.read_prefix_cache(self.base_url)

    def after(self, records: list[RequestRecord]) -> dict[str, Any]:
        end = self.adapter.read_prefix_cache(self.base_url) if self.start is not None else None
        cache = end.minus(self.start).to_json() if end and self.start else None
        return {
            "prefix_cache_reset": self.reset,
            "prefix_cache_reset_attempts": self.attempts,
            "prefix_cache": cache,
        }


class SpecCounterReads:
    """The engine's speculative counters scraped around the window (None: it counts per request),
    the one after read until two reads agree: the engine publishes a step's counters a little after
    it streams the step's tokens, so a scrape right after the last chunk can miss the last step (then
    tau and the per-position counts disagree)."""

    def __init__(self, adapter: EngineAdapter, base_url: str):
        self.adapter, self.base_url = adapter, base_url
        self.start: SpecCounters | None = None
        self.end: SpecCounters | None = None

    def before(self) -> None:
        self.start = self.adapter.read_spec_counters(self.base_url)

    def after(self, records: list[RequestRecord]) -> dict[str, Any]:
        self.end = self._settled() if self.start is not None else None
        return {
            # where tau comes from: counter scrapes around the window, or each request's own details
            "acceptance_source": self.adapter.acceptance_source,
            "counters_before": self.start.to_json() if self.start is not None else None,
            "counters_after": self.end.to_json() if self.end is not None else None,
        }

    def _settled(self) -> SpecCounters | None:
        last = self.adapter.read_spec_counters(self.base_url)
        for _ in range(SETTLE_READS):
            time.sleep(SETTLE_INTERVAL_S)
            now = self.adapter.read_spec_counters(self.base_url)
            if now == last:
                break
            last = now
        return last


class GeneratedTokens:
    """The server's output tokens, all requests together (the metrics' counter), around the window:
    every server's, so a restart shows in it too. With the speculative counters it says whether the
    scrapes are a count of this window (``counter_breaks``); for an endpoint, what its other tenants
    generated meanwhile."""

    def __init__(self, adapter: EngineAdapter, server: Server | ExternalServer, spec: SpecCounterReads):
        self.adapter, self.server, self.spec = adapter, server, spec
        self.start: float | None = None

    def before(self) -> None:
        self.start = self._read()

    def after(self, records: list[RequestRecord]) -> dict[str, Any]:
        own = sum(len(r.token_ids) for r in records)  # a failed request's tokens count too
        now = self._settled(self.start + own) if self.start is not None else None
        broken = counter_breaks(self.spec.start, self.spec.end, self.start, now, own)
        # an endpoint's other tenants: what it generated beyond the window (unknown across a break)
        external = self.server.process is None
        others = now - self.start - own if external and now is not None and self.start is not None else None
        return {"counters_broken": broken, "others_tokens": None if broken else others}

    def _read(self) -> float | None:
        return http.read_total(
            self.server.base_url, self.adapter.metrics_path, self.adapter.generation_counter
        )

    def _settled(self, least: float) -> float | None:
        """Read again (as the counters settle) while below ``least``, the count before plus the
        window's own: a late publish is not a reset."""
        now = self._read()
        for _ in range(SETTLE_READS):
            if now is None or now >= least:
                break
            time.sleep(SETTLE_INTERVAL_S)
            now = self._read()
        return now


class ServerFigures:
    """What the engine itself reports as the window ends (``EngineAdapter.server_figures``)."""

    def __init__(self, adapter: EngineAdapter, base_url: str):
        self.adapter, self.base_url = adapter, base_url

    def before(self) -> None:
        pass

    def after(self, records: list[RequestRecord]) -> dict[str, Any]:
        return {"server_reported": self.adapter.server_figures(self.base_url)}


class Deployment:
    """What an endpoint serves as the window ends (``deployment.served_now``), against what it
    served as the run began (``began``; None for a server the harness started: it serves "target")."""

    def __init__(self, adapter: EngineAdapter, server: Server | ExternalServer, began: dict[str, Any] | None):
        self.adapter, self.server, self.began = adapter, server, began
        self.now: dict[str, Any] | None = None

    def before(self) -> None:
        pass

    def after(self, records: list[RequestRecord]) -> dict[str, Any]:
        self.now = served_now(self.adapter, self.server) if self.began is not None else None
        return {"served_model": self.now.get("model") if self.now else None}

    def change(self, when: str) -> str | None:
        """Why the arm stops, if the window ended on another deployment."""
        if self.began is None or self.now is None:
            return None
        return deployment_change(self.began, self.server.base_url, self.now, when)


def began_on(plan: RunPlan, arm: Arm, server: Server | ExternalServer) -> dict[str, Any] | None:
    """The deployment an endpoint served as the run began; None for a server the harness started."""
    return plan.served_endpoints.get(arm.name) if server.process is None else None


@dataclass(frozen=True)
class Window:
    """One measured window of an arm's server: ``prompts`` of a workload (at its turn) at a load
    level, ``repeat`` counted over every start-up, ``start`` the server's start-up; the conversations
    that ``ended`` at an earlier turn (``{conversation id: that turn}``) are its failed requests."""

    run: RunDir
    arm: Arm
    server: Server
    workload: LoadedWorkload
    level: LoadLevel
    repeat: int
    start: int
    prompts: list[Prompt]
    ended: dict[str, int]
    label: str
    schedule: list[float] | None  # the requests' due times (open loop), or None (closed loop)

    def keep(self, record: RequestRecord) -> None:
        """A request on disk the moment it ends: a crash loses nothing."""
        append_jsonl(self.run.samples(self.arm.name), record.to_json())

    def not_sent(self, conversation: str, turn: int) -> RequestRecord:
        """A conversation that ended at ``turn``, as a failed request of this window: the cell
        counts what it could not send."""
        workload, level = self.workload, self.level
        return RequestRecord(
            workload=workload.name,
            prompt_id=conversation,
            concurrency=level.concurrency,
            prompt_format=workload.definition.prompt_format,
            repeat=self.repeat,
            request_rate=level.request_rate,
            error=f"not sent: the conversation ended at turn {turn} (its request failed)",
        )


def window_label(
    plan: RunPlan, workload: LoadedWorkload, level: LoadLevel, repeat: int, start: int, adaptive: bool
) -> str:
    """What the progress bar and the errors call a window."""
    load = plan.load
    most, starts = load.max_repeats(), load.max_server_starts()
    within = repeat - load.repeat_index(start, 0)
    label = f"{workload.name} @ {level.label()}" + (
        f" (repeat {within + 1}/{most}{' at most' if adaptive else ''})" if most > 1 else ""
    )
    if starts > 1:
        label += f" (start-up {start + 1}/{starts}{' at most' if load.decides() else ''})"
    return label


# one turn of a workload sent as a window: (the workload at that turn, its prompts, the conversations
# ended before it with the turn each ended at) -> the window's records (``converse``)
TurnSender = Callable[[LoadedWorkload, list[Prompt], dict[str, int]], list[RequestRecord]]


def converse(console: Console, workload: LoadedWorkload, send: TurnSender) -> None:
    """A workload's turns in order, each ``send`` (a window) of that turn's prompts: a single-turn
    workload's prompts once; a conversation's first turns, then each later turn built from the
    model's own answers to the turn before (``next_turn``). A conversation whose request failed
    ends there (said on the terminal): its later turns have nothing to carry, and each is sent
    the conversations ended so far (``{conversation id: the turn it ended at}``) to record."""
    prompts, ended = workload.prompts, {}
    for turn in range(1, workload.turns + 1):
        records = send(workload.at_turn(turn), prompts, dict(ended))
        if turn == workload.turns:
            return
        answers = {r.prompt_id: r.text for r in records if r.ok}
        now = [p.conversation_id for p in prompts if p.prompt_id not in answers]
        if now:
            console.print(
                f"[yellow]{escape(workload.name)}: {len(now)} conversation(s) end at turn {turn}[/] "
                f"(their request failed: {escape(', '.join(now[:3]))})",
                highlight=False,
            )
        ended |= dict.fromkeys(now, turn)
        prompts = [next_turn(p, answers[p.prompt_id]) for p in prompts if p.prompt_id in answers]
        if not prompts:
            return


def turn_schedule(
    plan: RunPlan, workload: LoadedWorkload, level: LoadLevel, repeat: int, prompts: list[Prompt]
) -> list[float] | None:
    """The due times of a turn's ``prompts``: the window's schedule for all of the workload's
    conversations, each keeping its own due time when others ended before this turn."""
    schedule = _schedule(plan, workload, level, repeat)
    if schedule is None or len(prompts) == len(workload.prompts):
        return schedule
    position = {p.prompt_id: i for i, p in enumerate(workload.prompts)}
    return [schedule[position[p.conversation_id]] for p in prompts]


def _schedule(plan: RunPlan, workload: LoadedWorkload, level: LoadLevel, repeat: int) -> list[float] | None:
    """An open-loop window's due times: from the regime's seed and the window's identity, so every
    arm (and the baseline's reference pass) gets the same schedule; None for closed loop."""
    if level.request_rate is None:
        return None
    load = plan.load
    stream = f"{workload.name}/{level.request_rate}/{repeat}"
    return arrival_offsets(
        len(workload.prompts), level.request_rate, load.arrival, load.burstiness, plan.sampling.seed, stream
    )


def _open_loop(plan: RunPlan, level: LoadLevel, schedule: list[float] | None) -> dict[str, Any]:
    """The window record's open-loop fields (none for a closed-loop window)."""
    if level.request_rate is None:
        return {}
    load = plan.load
    arrival = f"gamma (burstiness {load.burstiness:g})" if load.arrival == "gamma" else load.arrival
    return {"request_rate": level.request_rate, "arrival": arrival, "schedule": schedule}


def measure_window(
    window: Window,
    plan: RunPlan,
    samplers: list[Sampler],
    send: Callable[[Window], WindowResult],
    check_alive: Callable[[WindowResult], None],
    precision: Precision | None = None,
) -> tuple[dict[str, Any] | None, list[RequestRecord]]:
    """The window sent between its sensors' readings and written; returns the precision reached
    after it (adaptive repeats) and its records. Once it is recorded (so that it shows what was
    served), a changed deployment, broken counters or a baseline that drafted end the start-up."""
    for conversation, turn in window.ended.items():
        window.keep(window.not_sent(conversation, turn))
    adapter, server = plan.adapter, window.server
    serves(server)
    spec = SpecCounterReads(adapter, server.base_url)
    deployment = Deployment(adapter, server, began_on(plan, window.arm, server))
    keeps = (window.workload.turn or 1) > 1 or server.process is None
    readings: list[Reading] = [
        deployment,
        ServerFigures(adapter, server.base_url),
        PrefixCache(adapter, server.base_url, keeps),
        GeneratedTokens(adapter, server, spec),
        spec,
    ]
    for sensor in [*readings, *samplers]:
        sensor.before()
    try:
        result = send(window)
    finally:
        fields = {k: v for sampler in reversed(samplers) for k, v in sampler.after().items()}
    check_alive(result)
    for reading in reversed(readings):
        fields |= reading.after(result.records)
    tokens = sum(len(r.token_ids) for r in result.records if r.ok)
    reached = precision(window.repeat, output_tokens_per_s(tokens, result.duration_s)) if precision else None
    workload, level = window.workload, window.level
    record = WindowRecord(
        workload=workload.name,
        category=workload.definition.category,
        prompt_format=workload.definition.prompt_format,
        concurrency=level.concurrency,
        repeat=window.repeat,
        server_start=window.start,
        **_open_loop(plan, level, window.schedule),
        duration_s=result.duration_s,
        turn=workload.turn,
        precision=reached,
        other_models=http.other_models(server.base_url),
        **fields,
    )
    append_jsonl(window.run.windows(window.arm.name), record.model_dump(mode="json"))
    if changed := deployment.change(f"during {window.label}"):
        raise EngineError(changed)
    if record.counters_broken:
        raise _broken(window.label, record.counters_broken)
    check_no_drafts(adapter, window.arm, record, result.records, window.label)
    return reached, result.records


def serves(server: Server | ExternalServer) -> None:
    """Read the server's counters for the model it serves (an endpoint's from /v1/models; a started
    one serves the harness's own name): another model's samples on its /metrics count nothing."""
    http.register_served_model(server.base_url, server.served_model or SERVED_MODEL_NAME)


def never_drafted(
    adapter: EngineAdapter,
    arm: Arm,
    windows: list[WindowRecord],
    records: list[RequestRecord],
    other_models: list[str],
) -> str | None:
    """Why a speculative arm's existing server (an endpoint) is no speculative one, if it is not:
    not one draft over all of the arm's windows, in its counters or (an engine that counts per
    request) its requests' own, windows whose counters broke left out. Over the whole arm, not a
    window: vLLM's ngram drafts only where it finds a match (its V1 runner counts only the steps that
    proposed), so a window of a few short answers can hold none. Counters absent and counters at
    zero are one answer: vLLM registers them only when it speculates, so an absent one never drafted,
    and a registered one still at zero after every window drafted nothing either. A server the
    harness started is launched with the arm's speculative config, which the served check reads back
    from its log (``validation.check_served``): only an endpoint's counters are all there is to say
    it speculates. ``other_models``: the models whose samples its /metrics carried besides the one
    it serves (their drafts are not its own)."""
    if arm.method == "baseline" or arm.endpoint is None:
        return None
    ok = [r for r in records if r.ok]
    drafted, tokens = False, 0
    for window in windows:
        if window.counters_broken:
            continue
        key = (window.workload, window.concurrency, window.request_rate, window.repeat)
        mine = [r for r in ok if (r.workload, r.concurrency, r.request_rate, r.repeat) == key]
        tokens += sum(r.output_tokens for r in mine)
        delta = adapter.window_counters(window, mine)
        drafted = drafted or delta.drafts > 0 or delta.draft_tokens > 0
    if drafted or tokens == 0:  # nothing generated: the arm's requests failed, and it says so
        return None
    elsewhere = (
        f"; its /metrics count drafts for {', '.join(repr(m) for m in other_models)}, not for the model "
        "it serves"
        if other_models
        else ""
    )
    return (
        f"this server does not speculate: not one draft in arm {arm.name}'s {len(windows)} windows "
        f"({tokens:,} output tokens), yet it is method: {arm.method}{elsewhere}; a speculative arm "
        "needs a server that drafts (serve it with speculative decoding, or declare the arm method: baseline)"
    )


def _broken(label: str, broken: list[str]) -> CountersBroken:
    return CountersBroken(f"{label}: {'; '.join(broken)} (the server restarted or reset its counters)")


def check_no_drafts(
    adapter: EngineAdapter, arm: Arm, window: WindowRecord, records: list[RequestRecord], label: str
) -> None:
    """A baseline is a baseline: a ``method: baseline`` arm whose server drafted is not one
    (its speedups would compare speculation with speculation)."""
    if arm.method != "baseline":
        return
    drafted = adapter.window_counters(window, [r for r in records if r.ok])
    if drafted.drafts > 0 or drafted.draft_tokens > 0:
        raise EngineError(
            f"{label}: this server speculates: {drafted.drafts:,.0f} drafts of "
            f"{drafted.draft_tokens:,.0f} tokens in the window, yet arm {arm.name} is method: baseline; "
            "the baseline must decode one token per pass (serve it without speculative decoding)"
        )


# the ramp's requests sent: (its label, where each request goes as it ends, the stages' due times,
# what is read as each stage ends) -> its result (Sender.ramp: a progress bar over its seconds)
RampSender = Callable[
    [str, Callable[[RequestRecord], None], list[list[float]], Callable[[int], None]], RampResult
]


def measure_ramp(
    plan: RunPlan,
    run: RunDir,
    arm: Arm,
    server: Server,
    workload: LoadedWorkload,
    start: int,
    send: RampSender,
    check_alive: Callable[[RampResult], None],
) -> None:
    """The ramp (``load.ramp``) as one continuous window on this start-up: its requests into
    ``ramp.jsonl`` as they end, the counters read at its start and as each stage ends."""
    load, adapter = plan.load, plan.adapter
    serves(server)
    cache_reset, reset_attempts = reset_prefix_cache(adapter, server.base_url)
    first = adapter.read_spec_counters(server.base_url)  # None: counted per request
    counters: list[dict[str, Any] | None] = [first.to_json() if first is not None else None]
    counters += [None] * len(load.ramp)
    reported: list[dict[str, Any] | None] = [None] * len(load.ramp)

    def keep(record: RequestRecord) -> None:
        append_jsonl(run.ramp(arm.name), record.to_json())

    def stage_end(index: int) -> None:  # in the client's thread pool, as the stage ends
        if first is not None:
            found = adapter.read_spec_counters(server.base_url)
            counters[index + 1] = found.to_json() if found is not None else None
        reported[index] = adapter.server_figures(server.base_url)

    # the stages are in the plan's description: a short label leaves the bar its room
    label = f"ramp {workload.name} ({len(load.ramp)} stages, {load.ramp_duration_s():g} s)"
    if load.max_server_starts() > 1:
        label += f" (start-up {start + 1}/{load.max_server_starts()})"
    dues = ramp_dues(
        [(s.request_rate, s.duration_s) for s in load.ramp],
        load.arrival,
        load.burstiness,
        plan.sampling.seed,
        f"{workload.name}/ramp/{start}",
    )
    cpu_seconds = CpuSeconds(server.process.pid if server.process is not None else None)
    cpu_seconds.before()
    result = send(label, keep, dues, stage_end)
    check_alive(result)
    window = RampWindowRecord(
        workload=workload.name,
        prompt_format=workload.definition.prompt_format,
        repeat=start,
        server_start=start,
        stages=load.ramp,
        stage_ends_s=result.stage_ends_s,
        duration_s=result.duration_s,
        prefix_cache_reset=cache_reset,
        prefix_cache_reset_attempts=reset_attempts,
        acceptance_source=adapter.acceptance_source,
        counters=counters,
        stage_reported=reported,
        **cpu_seconds.after(),
    )
    append_jsonl(run.ramp_windows(arm.name), window.model_dump(mode="json"))
    read = [SpecCounters.from_json(c) for c in counters if c is not None]
    broken = [fell for was, now in zip(read, read[1:], strict=False) for fell in now.fallen(was)]
    if broken:
        raise _broken(label, broken)
