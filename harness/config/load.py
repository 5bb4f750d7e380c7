"""What every measured window sends, and how often it is measured: sampling, the load levels (closed
and open loop), a ramp, repeats, server start-ups in rounds, and the SLO a request is served well
within."""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import ConfigDict, Discriminator, Field, Tag, field_validator, model_validator

from harness.config.level import LoadLevel, window_parts
from harness.core.config_file import StrictModel
from harness.core.errors import FieldError

# the most warm-up requests a load level gets above ``warmup_requests``: a level of concurrency c
# is warmed with min(c, WARMUP_BATCH) in flight (``Load.warmup_level``)
WARMUP_BATCH = 8


class Sampling(StrictModel):
    """Sampling sent with every request. Temperature is required: greedy must be explicit."""

    temperature: float = Field(
        ge=0, description="Sampling temperature; 0 means greedy (needed for exactness)."
    )
    seed: int = Field(default=0, description="Per-request seed, also passed to the engine (--seed).")
    top_p: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="Nucleus sampling (temperature > 0 only); default: the engine's (1).",
    )
    top_k: int | None = Field(
        default=None, ge=1, description="Sample among the k most likely tokens (temperature > 0 only)."
    )

    @model_validator(mode="after")
    def _sampled_settings_need_sampling(self) -> Sampling:
        if self.temperature == 0 and (self.top_p is not None or self.top_k is not None):
            raise FieldError(
                "top_p" if self.top_p is not None else "top_k",
                "top_p and top_k shape sampling: they need temperature > 0 (greedy ignores them)",
            )
        return self

    def unset(self) -> set[str]:
        """Fields left out of fingerprints while unset (regimes written before they existed keep theirs)."""
        return {name for name in ("top_p", "top_k") if getattr(self, name) is None}


class Slo(StrictModel):
    """Latency targets a request must meet to count as served well (harness.core.probes.slo): the share of
    requests meeting all of them and the goodput (requests/s meeting them) become metrics of every
    cell. Give any subset; each target in milliseconds."""

    ttft_ms: float | None = Field(default=None, gt=0, description="Time to first token, at most (ms).")
    tpot_ms: float | None = Field(
        default=None, gt=0, description="Time per output token after the first, at most (ms)."
    )
    e2e_ms: float | None = Field(
        default=None, gt=0, description="Whole request, send to last token, at most (ms)."
    )
    target_pct: float = Field(
        default=99,
        gt=0,
        le=100,
        description="The share of requests that must meet the targets: with open-loop rates, the highest "
        "rate at which each arm still does is reported (interpolated between the measured rates).",
    )

    @model_validator(mode="after")
    def _some_target(self) -> Slo:
        if self.ttft_ms is None and self.tpot_ms is None and self.e2e_ms is None:
            raise ValueError("give at least one target: ttft_ms, tpot_ms or e2e_ms (milliseconds, > 0)")
        return self

    def describe(self) -> str:
        """The targets, e.g. ``TTFT <= 2000 ms, TPOT <= 150 ms``."""
        parts = [
            f"{name} <= {value:g} ms"
            for name, value in (("TTFT", self.ttft_ms), ("TPOT", self.tpot_ms), ("E2E", self.e2e_ms))
            if value is not None
        ]
        return ", ".join(parts)


class AdaptiveRepeats(StrictModel):
    """Pay for precision once: repeat a window until its speedup is known well enough."""

    min: int = Field(
        default=2, ge=2, le=100, description="Repeats always measured (at least 2: an interval)."
    )
    max: int = Field(ge=2, le=100, description="Repeats at most, whatever the precision reached.")
    target_rel_half_width: float = Field(
        gt=0,
        lt=1,
        description="Stop once the 95% bootstrap interval of the window's speedup (for the baseline: of its "
        "tok/s) has a half-width of at most this fraction of its mean, e.g. 0.05 for +-5%.",
    )

    @model_validator(mode="after")
    def _ordered(self) -> AdaptiveRepeats:
        if self.min > self.max:
            raise FieldError("min", f"min ({self.min}) must not exceed max ({self.max})")
        return self


class DecidedStarts(StrictModel):
    """Spend start-ups where they matter: ``min`` rounds always, then one more round at a time while
    any speculative cell's verdict is undecided (its interval neither excludes 1 nor lies within the
    equivalence margin of 1: ``harness.derive.intervals``), up to ``max``. Each interval is then at the
    level fitted to the looks the run may take (``Load.looks``, from ``min`` rounds: 98.6% for 2 to
    6; Bonferroni's 1 - 0.05 / (max - min + 1) would be 99.0%). Strict: ``decide:
    "yes"`` or ``max: 4.0`` is an error, not a guess."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    min: int = Field(
        default=2, ge=1, le=20, description="Rounds always measured (2: the first with an interval)."
    )
    max: int = Field(ge=1, le=20, description="Rounds at most, decided or not.")
    decide: bool = Field(
        default=True,
        description="Add rounds until decided; false: always `max` rounds (as `server_starts: max`).",
    )
    windows: list[str] = Field(
        default_factory=list,
        description="The windows whose verdicts the rounds are added for, each '@LEVEL' (every workload at "
        "that load level: '@1', '@2req/s') or 'WORKLOAD @LEVEL' ('code_humaneval @1'); the run stops when "
        "these are decided, whatever the others say (a cell near 1.00x may never decide). Default: every "
        "window.",
    )
    budget_minutes: float | None = Field(
        default=None,
        gt=0,
        description="The most wall time the run may spend: no round is begun that the pace of the rounds "
        "so far says would end past it (the plan states the expected time to decide and this bound). "
        "Default: no bound but `max`.",
    )
    effect: float = Field(
        default=1.2,
        gt=1,
        le=10,
        description="The smallest speedup worth knowing (and its inverse, the smallest slowdown): the plan "
        "and bench validate state how many rounds and minutes the design is expected to take to decide "
        "an arm at this speedup.",
    )

    @model_validator(mode="after")
    def _ordered(self) -> DecidedStarts:
        if self.max < self.min:
            raise FieldError("max", f"max ({self.max}) must be at least min ({self.min})")
        return self


class RampStage(StrictModel):
    """One stage of a ramp: a closed-loop concurrency (exactly that many requests in flight) or an
    open-loop request rate, held for ``duration_s`` seconds."""

    concurrency: int | None = Field(
        default=None, ge=1, description="Requests in flight during the stage (closed loop)."
    )
    request_rate: float | None = Field(
        default=None,
        gt=0,
        description="Requests per second during the stage (open loop, arrivals as load.arrival; at most "
        "load.max_concurrency in flight). Give this or concurrency.",
    )
    duration_s: float = Field(gt=0, le=3600, description="How long the stage lasts, in seconds.")

    @model_validator(mode="after")
    def _one_kind(self) -> RampStage:
        if (self.concurrency is None) == (self.request_rate is None):
            raise ValueError("give exactly one of concurrency or request_rate for a ramp stage")
        return self

    def label(self) -> str:
        return f"@{self.concurrency}" if self.request_rate is None else f"@{self.request_rate:g}req/s"


class Load(StrictModel):
    """How much traffic each measured window sends."""

    concurrency: list[int] = Field(
        default_factory=list,
        description="Closed-loop concurrency levels: one measured window per level, exactly that many "
        "requests in flight. Give these, request_rate, or both.",
    )
    request_rate: list[float] = Field(
        default_factory=list,
        description="Open-loop request rates (requests/s): one measured window per rate, requests due on a "
        "schedule computed up front from the seed (the same for every arm), sent whether or not earlier ones "
        "completed.",
    )
    ramp: list[RampStage] = Field(
        default_factory=list,
        description="Load that moves: stages run back to back as ONE continuous window per workload on "
        "every server start-up (after the fixed levels), e.g. concurrency 1 -> 4 -> 16 -> 4 -> 1, 20 s "
        "each; prompts are sent in turn and again from the first. Reported per stage (tok/s, speedup, "
        "drafted tokens per draft from counters read at every boundary) and across each boundary "
        "(TPOT of the requests that span it). Default: no ramp.",
    )
    arrival: Literal["poisson", "constant", "gamma"] = Field(
        default="poisson",
        description="How open-loop requests arrive: poisson (exponential gaps), constant (every 1/rate s), "
        "or gamma (gaps with shape `burstiness`; poisson is gamma with burstiness 1).",
    )
    burstiness: float = Field(
        default=1.0,
        gt=0,
        description="Gamma arrivals only: the gaps' shape; below 1 bunches requests, above 1 evens them out.",
    )
    max_concurrency: int | None = Field(
        default=None,
        ge=1,
        description="Open loop: at most this many requests in flight; a due request waits for a slot (the "
        "wait is recorded as client-side queueing). Default: no cap.",
    )
    schedule_tolerance_s: float = Field(
        default=0.05,
        gt=0,
        description="Open loop: a request the client itself sent later than its due time by more than this "
        "(beyond waiting for a max_concurrency slot) marks the window as behind schedule: the client, "
        "not the server, set that load.",
    )
    num_prompts: int = Field(gt=0, description="Prompts per workload per load level (concurrency or rate).")
    max_output_tokens: int = Field(gt=0, description="max_tokens of every request.")
    context_tokens: int | None = Field(
        default=None,
        ge=1,
        description="Pad every prompt to about this many tokens with other records of its workload, whole, "
        "before it (a code file before the function to complete, documents before the question; 3 characters "
        "taken as a token; each cell reports the prompt tokens the engine counted). A study axis: "
        "load.context_tokens: [512, 1024, 1792]. Default: the prompts as they are.",
    )
    repeats: Annotated[
        Annotated[Annotated[int, Field(ge=1, le=100)], Tag("tag-count")]
        | Annotated[AdaptiveRepeats, Tag("tag-adaptive")],
        Discriminator(
            lambda value: "tag-adaptive" if isinstance(value, dict | AdaptiveRepeats) else "tag-count"
        ),
    ] = Field(
        default=1,
        description="Measure every (workload, concurrency) window this many times (each repeat is kept, so "
        "gates and studies can tell an effect from noise), or {min, max, target_rel_half_width}: repeat "
        "until the speedup's interval is that narrow.",
    )

    server_starts: Annotated[
        Annotated[Annotated[int, Field(ge=1, le=20)], Tag("tag-count")]
        | Annotated[DecidedStarts, Tag("tag-decide")],
        Discriminator(lambda value: "tag-decide" if isinstance(value, dict | DecidedStarts) else "tag-count"),
    ] = Field(
        default=1,
        description="Start each arm's server this many times, in rounds (start-up 1 of every arm, then "
        "start-up 2, ..., the arms' order reversed every other round), and measure every window `repeats` "
        "times on each start-up: the speedup's interval "
        "then rests on start-ups (the arms x rounds model), so it covers "
        "what changes from one start-up to the next (measured on a CPU: the baseline's tok/s by up to 15%), "
        "which repeats on one server cannot see. Or {min, max, decide: true}: add rounds from `min` on "
        "until every speculative cell's verdict is decided, or `max`; each interval is then at a "
        "level fitted to the looks the run may take (98.6% from 2 to 6), so that the one it stops on "
        "still covers 95%. Needs a fixed repeats count.",
    )

    def min_repeats(self) -> int:
        return self.repeats if isinstance(self.repeats, int) else self.repeats.min

    def max_repeats(self) -> int:
        return self.repeats if isinstance(self.repeats, int) else self.repeats.max

    def min_server_starts(self) -> int:
        """Start-ups every arm gets: the count, or the rounds measured before any decision."""
        starts = self.server_starts
        return starts if isinstance(starts, int) else (starts.min if starts.decide else starts.max)

    def max_server_starts(self) -> int:
        """Start-ups an arm may get (what a time budget plans for)."""
        return self.server_starts if isinstance(self.server_starts, int) else self.server_starts.max

    def decides(self) -> bool:
        """Rounds are added until the verdicts are decided (``server_starts: {decide: true}``)."""
        return not isinstance(self.server_starts, int) and self.server_starts.decide

    def looks(self) -> int:
        """How many times a run may look at its intervals and stop: once per round from ``min`` to
        ``max`` when it decides, else once (``harness.derive.intervals``: each interval is corrected
        for them)."""
        return self.max_server_starts() - self.min_server_starts() + 1 if self.decides() else 1

    def first_look(self) -> int | None:
        """The rounds at a deciding run's first look (``min``); None: one look, a fixed design."""
        return self.min_server_starts() if self.decides() else None

    ignore_eos: bool = Field(default=False, description="Generate max_output_tokens regardless of EOS.")
    warmup_requests: int = Field(
        default=2,
        ge=0,
        description="Warm-up requests after each start-up, before measuring, at every workload and load "
        f"level the start-up measures: at least this many at each, a level's concurrency (up to "
        f"{WARMUP_BATCH}) if more; kept apart from results; 0: no warm-up.",
    )
    request_timeout_s: float = Field(
        default=600, gt=0, description="Total time one request may take, in seconds."
    )
    stall_timeout_s: float = Field(
        default=120,
        gt=0,
        description="No token from any in-flight request for this long ends the arm as failed (a hung "
        "engine).",
    )

    @field_validator("concurrency")
    @classmethod
    def _levels_positive_unique(cls, levels: list[int]) -> list[int]:
        for index, level in enumerate(levels):
            if level < 1:
                raise FieldError(index, "every concurrency level must be >= 1")
            if level in levels[:index]:
                raise FieldError(index, "concurrency levels must be unique")
        return levels

    @field_validator("request_rate")
    @classmethod
    def _rates_positive_unique(cls, rates: list[float]) -> list[float]:
        for index, rate in enumerate(rates):
            if not math.isfinite(rate) or rate <= 0:
                raise FieldError(index, "every request rate must be a finite number > 0 (requests/s)")
            if rate in rates[:index]:
                raise FieldError(index, "request rates must be unique")
        return rates

    @model_validator(mode="after")
    def _some_level(self) -> Load:
        if not self.concurrency and not self.request_rate:
            raise ValueError(
                "give at least one load level: concurrency (closed loop) or request_rate (open loop)"
            )
        open_ramp = any(stage.request_rate is not None for stage in self.ramp)
        if not self.request_rate and not open_ramp and self.max_concurrency is not None:
            raise FieldError(
                "max_concurrency", "max_concurrency caps open-loop windows: set request_rate too (or drop it)"
            )
        if self.max_server_starts() > 1 and not isinstance(self.repeats, int):
            raise FieldError(
                "server_starts",
                "server_starts > 1 needs a fixed repeats count (adaptive repeats stop on one server's "
                "interval, which does not cover the start-ups)",
            )
        shorts = {level.short() for level in self.levels()}
        for index, window in enumerate(self.decided_windows()):
            if "@" not in window or window_parts(window)[1] not in shorts:
                raise FieldError(
                    ("server_starts", "windows", index),
                    f"{window!r} names no load level of this regime: give '@LEVEL' or 'WORKLOAD @LEVEL', "
                    f"LEVEL one of {', '.join(sorted(shorts))}",
                )
        return self

    def decided_windows(self) -> list[str]:
        """The windows a deciding run stops on (``server_starts.windows``; []: every window)."""
        return [] if isinstance(self.server_starts, int) else list(self.server_starts.windows)

    def budget_minutes(self) -> float | None:
        """A deciding run's wall-time bound (None: none but ``max`` rounds)."""
        return None if isinstance(self.server_starts, int) else self.server_starts.budget_minutes

    def repeat_index(self, server_start: int, repeat: int) -> int:
        """A window's repeat number within its cell, counted over every start-up of the arm's server:
        samples and windows stay unique per (prompt, repeat), and repeat k pairs with the baseline's k."""
        return server_start * self.max_repeats() + repeat

    def levels(self) -> list[LoadLevel]:
        """Every window's load level, in the order measured: closed loop first, then the rates."""
        cap = min(self.max_concurrency or self.num_prompts, self.num_prompts)
        return [LoadLevel(c) for c in self.concurrency] + [LoadLevel(cap, r) for r in self.request_rate]

    def warmup_levels(self) -> list[tuple[LoadLevel, int]]:
        """One workload's warm-up before a start-up's windows, as (closed-loop level, requests) for
        every load level in the order measured, then the ramp's closed-loop stages ([] with
        ``warmup_requests: 0``): the level's concurrency in flight, up to ``WARMUP_BATCH`` (an open-loop
        level's cap), and ``warmup_requests`` requests or that many, whichever is more; a size already
        warmed is not warmed again. Each level's first batches then pay their one-time costs (Triton
        autotune, JIT, the scheduler's first batches of that size) unmeasured and alike for every arm;
        larger decode batches are what a GPU engine's start-up already ran (CUDA graph capture)."""
        if self.warmup_requests == 0:
            return []
        sizes = [level.concurrency for level in self.levels()]
        sizes += [stage.concurrency for stage in self.ramp if stage.concurrency is not None]
        flights = dict.fromkeys(min(size, WARMUP_BATCH) for size in sizes)  # in order, once each
        return [(LoadLevel(flight), max(self.warmup_requests, flight)) for flight in flights]

    def warmup_count(self, workloads: int) -> int:
        """Warm-up requests per server start-up, over ``workloads`` workloads."""
        return workloads * sum(count for _, count in self.warmup_levels())

    def ramp_duration_s(self) -> float:
        """A ramp window's planned length (0: no ramp)."""
        return sum(stage.duration_s for stage in self.ramp)

    def open_loop_fields(self) -> set[str]:
        """The open-loop settings, left out of fingerprints while no rate is set (so regimes written
        before they existed keep theirs)."""
        if self.request_rate or any(stage.request_rate is not None for stage in self.ramp):
            return set()
        return {"request_rate", "arrival", "burstiness", "max_concurrency", "schedule_tolerance_s"}
