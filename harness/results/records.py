"""The raw records of a run, as typed records: what the runner writes and every reader reads back.

- ``RequestRecord``: one line of ``samples.jsonl`` / ``noise_floor.jsonl`` / ``warmup.jsonl`` /
  ``distribution.jsonl``: what the client observed about one request, filled in while it streams,
  with its TTFT, TPOT, E2E and ITL computed from it (one formula each, ``probes.latency``);
- ``WindowRecord``: one line of ``windows.jsonl`` (one measured window: its duration, the counter
  scrapes around it, its power samples), built by the runner and read back by the summary;
- ``ArmStatus``: an arm's ``status.json``;
- ``RunRecord``: the run's ``regime.json``, what it measured under (written as it begins).

Older files are brought to the current version by ``harness.results.migrations`` before these
models read them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, TypeAdapter, with_config

from harness.config.engines.served import AttentionBackend, DraftCounting, ServedRuntime
from harness.config.level import LoadLevel
from harness.config.load import RampStage
from harness.core.probes.acceptance import SpecCounters
from harness.core.probes.latency import e2e_s, from_due_s, itl_s, tpot_s, ttft_s, ttst_s
from harness.core.probes.schedule import queueing_s


class ResultModel(BaseModel):
    """Base for everything the harness writes and reads back: unknown keys are errors (a file from
    a newer harness is refused, never half-read), values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


# The finish reasons of a request that finished: the engine stopped it (a stop token or string) or it
# reached max_tokens. Any other ("abort" when the engine dropped it, an engine's own) is a failure.
FINISHED = ("stop", "length")


def failure_kind(failure: str) -> str:
    """A failure's kind, for counting: its words before the first colon ("over max_tokens",
    "finish_reason 'abort'", "timeout"), at most 60 characters."""
    return failure.split(":", 1)[0].strip()[:60] or "unknown"


# A slotted dataclass, not a ResultModel: the client fills it in once per streamed chunk
# (``harness.run.client._absorb_chunk``), where a pydantic model's attribute assignment costs ~0.4 us
# against a slot's ~0.07 (benchmarks/client_overhead.py measures that loop). It is validated, as strictly as
# a ResultModel (unknown keys are errors), when it is read back (``from_json``).
@with_config(ConfigDict(extra="forbid"))
@dataclass(slots=True)
class RequestRecord:
    """Everything observed about one request, as raw as possible. Times are ``time.perf_counter()``
    seconds from the start of its window."""

    workload: str
    prompt_id: str
    concurrency: int
    prompt_format: str
    repeat: int = 0  # which repeat of the (workload, load level) window
    request_rate: float | None = None  # the open-loop window's rate (requests/s); None: closed loop
    t_scheduled: float | None = None  # open loop: when the request was due
    t_dispatched: float | None = None  # open loop: when the client got to it (then maybe waited for a slot)
    seed: int | None = None  # the distribution check's per-sample seed; None: the regime's seed
    t_send: float = 0.0  # set by the client as it sends
    t_first_token: float | None = None
    t_done: float | None = None
    chunks: list[tuple[float, int, str]] = field(default_factory=list)  # (time, tokens in chunk, its text)
    token_ids: list[int] = field(default_factory=list)
    # Per output token, the engine's top logprobs as (token id, logprob) pairs (when requested);
    # token id None where the engine keys logprobs by text (SGLang).
    top_logprobs: list[list[tuple[int | None, float]]] = field(default_factory=list)
    # The engine's own per-request speculative statistics, verbatim (SGLang's spec_tokens_details).
    spec_details: dict[str, Any] | None = None
    prompt_token_count: int | None = None
    # The prompt as the engine tokenized it (chat template applied): what prompt-lookup drafting can
    # copy from; [] where the engine did not say.
    prompt_token_ids: list[int] = field(default_factory=list)
    usage_completion_tokens: int | None = None
    finish_reason: str | None = None
    text: str = ""
    error: str | None = None

    @property
    def failure(self) -> str | None:
        """Why this request is no finished answer: its error, or a finish reason other than
        ``FINISHED`` (a record stored before the client refused those itself); None: it finished."""
        if self.error is not None:
            return self.error
        if self.finish_reason is not None and self.finish_reason not in FINISHED:
            return f"finish_reason {self.finish_reason[:80]!r}"
        return None

    @property
    def ok(self) -> bool:
        return self.failure is None

    @property
    def level(self) -> LoadLevel:
        return LoadLevel(self.concurrency, self.request_rate)

    @property
    def output_tokens(self) -> int:
        """Counted from token ids, never from chunks (a speculative chunk carries several)."""
        return len(self.token_ids)

    @property
    def ttft_s(self) -> float | None:
        """First token - send (``probes.latency.ttft_s``)."""
        return ttft_s(self.t_send, self.t_first_token)

    @property
    def tpot_s(self) -> float | None:
        """(E2E - TTFT) / (output tokens - 1) (``probes.latency.tpot_s``)."""
        return tpot_s(self.t_send, self.t_first_token, self.t_done, self.output_tokens)

    @property
    def ttst_s(self) -> float | None:
        """The first two token-carrying chunks' gap, AIPerf's TTST (``probes.latency.ttst_s``)."""
        return ttst_s(self.chunks)

    @property
    def e2e_s(self) -> float | None:
        """End of the stream - send (``probes.latency.e2e_s``)."""
        return e2e_s(self.t_send, self.t_done)

    @property
    def itl_s(self) -> list[float]:
        """vLLM's ITL: the gap before each streamed chunk after the first (``probes.latency.itl_s``);
        one per chunk, not per token."""
        return itl_s([t for t, _, _ in self.chunks])

    @property
    def queueing_s(self) -> float | None:
        """Open loop: the wait for a max_concurrency slot before the send (``probes.schedule``)."""
        return queueing_s(self)

    @property
    def scheduled_ttft_s(self) -> float | None:
        """TTFT from when the request was due, its queueing for a slot inside (``probes.latency``):
        the cell's TTFT and SLO attainment; equal to ``ttft_s`` in closed loop."""
        return from_due_s(self.ttft_s, self.queueing_s)

    @property
    def scheduled_e2e_s(self) -> float | None:
        """E2E from when the request was due (its queueing inside); ``e2e_s`` in closed loop."""
        return from_due_s(self.e2e_s, self.queueing_s)

    def to_json(self) -> dict[str, Any]:
        """The stored line: the raw fields, plus TTFT and TPOT for readers outside the harness
        (``from_json`` drops them again: the properties above are the one place they are computed)."""
        return {**asdict(self), **{name: getattr(self, name) for name in DERIVED_REQUEST_FIELDS}}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RequestRecord:
        """A stored line, validated (pydantic's ``ValidationError`` on a bad one)."""
        return _REQUEST.validate_python({k: v for k, v in data.items() if k not in DERIVED_REQUEST_FIELDS})


# Written with every request line since version 2, recomputed on reading (equal: the same formula on
# the same floats).
DERIVED_REQUEST_FIELDS = ("ttft_s", "tpot_s")
_REQUEST = TypeAdapter(RequestRecord)
# The name the readers used while the client had a record type of its own; the same class.
RequestRecord = RequestRecord


class PowerGpu(ResultModel):
    """One GPU whose power a window's NVML samples summed (as NVML names it)."""

    index: int  # NVML's (PCI bus order)
    name: str | None = None
    uuid: str | None = None


class WindowPower(ResultModel):
    source: str | None = None  # "nvml", "rapl", or None: not measured
    note: str = "not recorded"
    samples: list[tuple[float, float | None, float | None, bool]] = []  # (t, W, cumulative J, throttled)
    # nvml: the GPUs summed, the servers' own (RunPlan.gpus); None: every GPU visible to the harness, or
    # recorded before the harness chose a server's GPUs (no migration: it reads as "not recorded")
    gpus: list[PowerGpu] | None = None


class WindowPrecision(ResultModel):
    """Adaptive repeats: how precisely the cell was known after this window."""

    metric: Literal["speedup", "output_tok_s"]  # speedup vs the baseline; tok/s for the baseline itself
    rel_half_width: float | None  # of the 95% interval of the mean over the repeats so far
    target: float


class WindowCpu(ResultModel):
    """CPU seconds during the window, by whom (``harness.core.probes.cpu``)."""

    engine_s: float  # the engine server's process group
    client_s: float  # the harness process
    others_s: float  # every other process on the machine
    steal_s: float  # taken by the hypervisor for other guests
    cores: float  # the machine's logical CPUs


class GpuNeighbour(ResultModel):
    """Another process on one of the engine's GPUs during a window (``harness.core.probes.gpu``)."""

    device: int  # NVML index
    pid: int  # as NVML reports it (the host's pid namespace)
    name: str | None  # command name, where this machine can see the process
    memory_mib: float | None  # the most it held during the window
    sm_pct: float | None  # mean SM utilisation over the window; None: NVML cannot say per process


class WindowGpu(ResultModel):
    """The other processes on the engine's GPUs during a window."""

    polls: int  # NVML polls during the window (one per second)
    engine_devices: list[int]  # the GPUs where the engine's processes were seen
    attributed: bool  # False: none of the engine's pids was visible (another pid namespace): no flag
    utilization_supported: bool  # NVML reported SM utilisation per process
    others: list[GpuNeighbour]


class WindowRecord(ResultModel):
    """One measured window: a workload at a load level (a concurrency, or a request rate), one repeat."""

    workload: str
    category: str
    prompt_format: str
    concurrency: int  # closed loop: in flight, exactly; open loop: at most
    repeat: int = 0  # within the cell, counted over every server start-up (Load.repeat_index)
    server_start: int = 0  # which start-up of the arm's server measured it (load.server_starts; version 6 on)
    request_rate: float | None = None  # open loop: requests/s; None: closed loop
    arrival: str | None = None  # open loop: poisson | constant | gamma (with burstiness)
    schedule: list[float] = []  # open loop: each request's due time, seconds from the window's start
    duration_s: float  # first send to last completion
    prefix_cache_reset: bool = False
    # the resets asked for as the window began (each refusal asked again, up to 5 times); with
    # prefix_cache_reset false after some, the engine kept refusing and the window may have run on a
    # warm cache. 0: none asked (a conversation's later turn), or recorded before it was counted
    prefix_cache_reset_attempts: int = 0
    # the prefix cache's lookups and hits in the window, prompt tokens (probes.prefix_cache); None: not
    # reported by the engine, or recorded before version 10
    prefix_cache: dict[str, float] | None = None
    # conversation workloads: which turn (1 = the first; ``workload`` is then "<name>.turn<t>"); None:
    # a single-turn workload (version 10 on)
    turn: int | None = None
    # where tau comes from: "server_counters" (scrapes around the window) or "per_request" details
    acceptance_source: Literal["server_counters", "per_request"] = "server_counters"
    counters_before: dict[str, Any] | None = None  # SpecCounters.to_json()
    counters_after: dict[str, Any] | None = None
    server_reported: dict[str, Any] | None = None  # the engine's own server-wide figure, labelled, never tau
    # an existing server (arms[].endpoint): the output tokens it generated in the window beyond the
    # window's own requests (another tenant's); None: a server the harness started, or one whose
    # metrics have no such counter (then nobody can tell)
    others_tokens: float | None = None
    # why its counter scrapes are no count of the window (a counter fell: the server restarted or
    # reset; harness.core.probes.acceptance.counter_breaks): never summed; [] a count to trust
    counters_broken: list[str] = []
    # other models whose samples the server's /metrics carried (label model_name), left out of every
    # counter read (engine_http.served_samples); [] in windows written before they were named
    other_models: list[str] = []
    # an existing server: the model id it served as the window ended (None: a server the harness
    # started, which serves "target", or a window recorded before it was)
    served_model: str | None = None
    power: WindowPower | None = None
    precision: WindowPrecision | None = None  # adaptive repeats only
    cpu: WindowCpu | None = None  # None: recorded before version 3, or no /proc on this machine
    gpu: WindowGpu | None = None  # None: recorded before version 4, or no NVML (no GPU) here

    @property
    def level(self) -> LoadLevel:
        return LoadLevel(self.concurrency, self.request_rate)

    def counter_delta(self) -> SpecCounters:
        """The window's counter delta (server_counters windows only)."""
        if self.counters_before is None or self.counters_after is None:
            return SpecCounters()
        return SpecCounters.from_json(self.counters_after).minus(SpecCounters.from_json(self.counters_before))


class RampWindowRecord(ResultModel):
    """One ramp window (``load.ramp``): the stages run back to back on one server start-up, one
    line of ``ramp_windows.jsonl``; its requests are the lines of ``ramp.jsonl`` with the same
    ``repeat``. Counters are read at the window's start and as each stage ends."""

    workload: str
    prompt_format: str
    repeat: int = 0  # the server start-up's index (one ramp per workload per start-up)
    server_start: int = 0
    stages: list[RampStage]  # as the regime gave them; stage i runs from the sum of the earlier durations
    stage_ends_s: list[float]  # when the client left each stage (seconds from the window's start)
    duration_s: float  # first send to the last completion (the drain after the last stage inside)
    prefix_cache_reset: bool = False
    prefix_cache_reset_attempts: int = 0  # as WindowRecord's
    acceptance_source: Literal["server_counters", "per_request"] = "server_counters"
    counters: list[dict[str, Any] | None] = []  # SpecCounters.to_json(): at the start, then after each stage
    # the engine's own figures as each stage ended (SGLang: the speculative steps its adaptive mode ran)
    stage_reported: list[dict[str, Any] | None] = []
    cpu: WindowCpu | None = None

    def stage_bounds(self) -> list[tuple[float, float]]:
        """Each stage's planned (start, end) on the window's clock."""
        out, start = [], 0.0
        for stage in self.stages:
            out.append((start, start + stage.duration_s))
            start += stage.duration_s
        return out

    def stage_counters(self, index: int) -> SpecCounters | None:
        """The counter delta over stage ``index`` (None where a read is missing)."""
        if index + 1 >= len(self.counters):
            return None
        before, after = self.counters[index], self.counters[index + 1]
        if before is None or after is None:
            return None
        return SpecCounters.from_json(after).minus(SpecCounters.from_json(before))


ArmState = Literal["not_run", "running", "ok", "failed", "interrupted"]


class ArmStatus(ResultModel):
    """An arm's ``status.json``: where it got to, and why it stopped if it did not finish."""

    status: ArmState
    phase: Literal["startup", "measuring"] | None = None  # where a failure happened
    error: str | None = None
    startup_s: float | None = None  # the first start-up's
    startups_s: list[
        float
    ] = []  # every start-up of the arm's server so far (load.server_starts; version 6 on)
    pgid: int | None = None  # the server's process group while running (to find an orphan)
    mismatches: list[str] = []  # regime mismatches recorded with --allow-mismatch
    attention_backend: AttentionBackend | None = None  # None: the engine did not say
    draft_counting: DraftCounting | None = None  # None: recorded before version 4
    # how the engine ran the steps (async scheduling, captured graph sizes, running cap), as its
    # latest start-up reported it; None: not reported, or before version 16
    runtime: ServedRuntime | None = None
    # the start-ups measured again, each with why (its counters broke: a server restart or reset);
    # the first attempt's files are kept beside the arm's (arms/<arm>.attempt-N)
    remeasured: list[str] = []


class Invocation(ResultModel):
    """One ``bench run`` (or ``--resume``) of a run directory: where its wall time went, in seconds."""

    wall_s: float  # from the command's start to its end (or interruption)
    prepare_s: float  # environment checks, model conversion and drafter builds before the first arm
    startup_s: float  # engine servers starting, until healthy
    measured_s: float  # measured windows, the baseline's noise-floor pass included
    warmup_s: float  # warm-up requests (never measured)
    # waiting, after a server on GPUs stopped, for its GPUs' memory to be freed (bounded; 0: no GPU,
    # or recorded before it was waited for)
    gpu_release_s: float = 0.0
    interrupted: bool = False


class Round(ResultModel):
    """One round of server start-ups (``load.server_starts``): the next start-up of every arm, in
    the order they ran (alternating between rounds, ABBA: ``harness.derive.rounds.round_order``)."""

    order: list[str]  # the arms, in the order their servers were started this round
    # each one's start-up index: its own count (an arm retried on resume restarts at 0)
    server_starts: dict[str, int]
    done: list[str] = []  # the arms whose start-up ended (measured, or failed); the rest were interrupted


class RunTiming(ResultModel):
    """``timing.json``: every invocation on the run, so anyone can check what the harness cost, and
    the rounds of start-ups in the order they ran (a resume continues the last one)."""

    invocations: list[Invocation]
    rounds: list[Round] = []  # [] for runs before version 7 recorded them

    def unpaired_arms(self, baseline: str) -> list[str]:
        """The arms whose start-ups ran in other rounds than the baseline's start-ups of the same
        index: an arm that failed and was retried on resume starts its count again at 0, in rounds
        of its own (often in another invocation), so the arms x rounds model would pair it with
        baseline start-ups of other rounds and drift between them would be in its speedup, unseen
        by the interval. The last round that ran an arm's start-up is the one its kept files hold
        (an earlier attempt's were set aside)."""
        ran: dict[tuple[str, int], int] = {}
        for index, entry in enumerate(self.rounds):
            for arm in entry.done:
                ran[(arm, entry.server_starts[arm])] = index
        return sorted(
            {
                arm
                for (arm, start), index in ran.items()
                if arm != baseline and ran.get((baseline, start)) not in (None, index)
            }
        )

    def total(self, name: str) -> float:
        return sum(getattr(i, name) for i in self.invocations)

    def minutes_per_round(self, rounds: int) -> float | None:
        """The wall minutes a round took over ``rounds`` rounds (the preparation left out); None
        without a round."""
        return (self.total("wall_s") - self.total("prepare_s")) / rounds / 60 if rounds > 0 else None

    @property
    def overhead_ratio(self) -> float | None:
        """Wall time / (start-ups + measured windows): 1.0 is a harness that costs nothing."""
        core = self.total("startup_s") + self.total("measured_s")
        return self.total("wall_s") / core if core > 0 else None


class WorkloadRecord(ResultModel):
    """One workload as the run measured it: its definition and the hash of its prompts' content (a
    resume or a gate refuses other prompts under the same name)."""

    name: str
    category: str
    prompt_format: str
    definition: dict[str, Any]
    content_sha256: str
    prompt_ids: list[str]
    chat: dict[str, Any] | None = None  # chat workloads: what every request carried besides its messages


class RunRecord(ResultModel):
    """A run's ``regime.json``: what it measured under, written before any arm (``harness.run.
    run_record``), read back as the current version (``harness.results.files.read_run_record``)."""

    schema_version: int
    source_path: str  # the regime file, resolved (a resume may start in another directory)
    overrides: list[dict[str, Any]] = []  # what the command line set (already in ``regime``)
    fingerprint: str  # the regime's (and what existing servers serve)
    served_endpoints: dict[str, dict[str, Any]] = {}  # per endpoint arm: what it said it serves
    price_per_hour: float
    near_tie_margin: float
    resolved_model: str
    regime: dict[str, Any]  # the regime as run, no secret in it (``RawRun.regime`` validates it)
    drafters: dict[str, dict[str, Any]] = {}  # per arm: its drafter's path and provenance
    workloads: list[WorkloadRecord]
    mismatches: list[str] = []  # allowed by --allow-mismatch
    lossy_settings: list[str] = []
    known_defects: list[str] = []  # known engine defects the run was forced through
    engine_patches: list[str] = []

    def prompts(self) -> list[tuple[str, str, str]]:
        """The prompts measured, by workload: (name, format, content hash), sorted (not the files' paths)."""
        return sorted((w.name, w.prompt_format, w.content_sha256) for w in self.workloads)
