"""What the GPU stand-ins (``vllm/`` and ``sglang/`` beside this file) share: a deterministic
"model" and a speculative decoder with a known acceptance pattern, streamed over aiohttp.

tests/test_gpu_rehearsal.py puts this directory first on a GPU regime's ``engine.env.PYTHONPATH``,
so the harness's real adapters launch ``vllm serve MODEL ...`` (``python -m vllm.entrypoints.cli.main
serve``, which hands the flags to ``vllm/entrypoints/openai/api_server.py``) and
``python -m sglang.launch_server ...`` exactly as on a GPU machine, and these modules answer: no
model, no GPU, only the protocol each engine speaks (its routes, counters, log lines and served
configuration), each read from the engine's own argv.

- The "model" is greedy and deterministic: output token i of a prompt depends on the prompt and i
  only, so every arm (and every pass) returns the same tokens for the same prompt, and stops at
  max_tokens with finish_reason "length".
- Speculation: after the prefill's token, each verify step accepts ``ACCEPTED_PER_STEP[j % 4]``
  drafts (capped at the served K) and emits them plus its own token; the counters count what the
  step accepted, as the engines do (drafts accepted past max_tokens included). With K=3 and
  ``1 + 10 n`` output tokens the steps end on a whole cycle: tau = 1 + mean(pattern) = 2.5.
- Synthetic acceptance (the vLLM stand-in, ``rejection_sample_method: synthetic``): vLLM 0.34's
  rule (``synthetic_rates``, from vllm/config/speculative.py) turns ``synthetic_acceptance_length``
  or ``_rates`` into unconditional per-position rates, and verify step j accepts the positions
  whose rate exceeds a low-discrepancy draw u_j (``synthetic_accepted``) instead of the pattern:
  vLLM draws at random, the stand-in evenly, so over whole cycles tau is the length exactly
  (length 1.5: 1, 0, 1, 0, ...; 2.0: 1 every step; 2.5 at K >= 2: 2, 1, 2, 1, ...).
- ``STAND_IN_SERVED_K`` in the environment makes a speculating stand-in serve that K instead of
  the one it was launched with (and say so, as the engine would): a wrong launch in miniature.
- The vLLM stand-in's engine (``EngineLoop``) runs one forward pass at a time for every request
  waiting on one (a batch), each ``step_seconds(K)``: ``STEP_S`` plus ``DRAFT_STEP_S`` per draft
  token, so the relative step cost is known, c(K) = 1 + K DRAFT_STEP_S / STEP_S = 1 + 0.5 K, and
  it counts its steps as vLLM's tokens-per-step histogram does (one observation per step). A
  step whose batch verifies more tokens than the largest captured CUDA graph (``ceiling``: batch x
  (K + 1)) runs uncaptured, ``UNCAPTURED_SLOWDOWN`` times slower, as vLLM's fallback does.
- ``STAND_IN_STARTUP_S``: seconds the server takes to start (a GPU start-up, scaled down).
- ``STAND_IN_FAIL_LAUNCHES`` (``"baseline:1,2;dflash:3,4"``): the launches of the baseline (no
  speculation) or of a speculative method that fail, counted from 1 over the run in files under
  ``STAND_IN_LAUNCH_DIR``: such a launch takes its start-up time, then exits with an NCCL error, as a
  server that does not start (``launch_fault``).
- ``STAND_IN_DIVERGE_ABOVE`` (``"dflash:1"``): a stand-in of that speculative method answers a
  request that arrives while more than that many are in flight with its third output token wrong
  (where the baseline's top-2 margin is wide: a real divergence, not a near tie), as vLLM #46669's
  DFlash/MTP with async scheduling above concurrency 1 does (``diverges``).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys
import time
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

ACCEPTED_PER_STEP = (3, 1, 2, 0)  # drafts accepted at verify steps 0, 1, 2, 3, 4 (= 0), ...
STEP_S = 0.01  # seconds per forward pass (the prefill's, then each verify or decode step)
# the vLLM stand-in's step: this much longer per draft token (step_seconds); whole milliseconds,
# which asyncio's timers keep (a 12.5 or 13 ms sleep took 14.3 on the 2-core machine, 15 ms 15.2)
DRAFT_STEP_S = 0.005
SERVED_K_ENV = "STAND_IN_SERVED_K"
VOCAB = 32000


def log(message: str) -> None:
    """A line of the server's log (its stdout: the harness's log file)."""
    print(message, flush=True)


def served_k(launched: int) -> int:
    """The K this stand-in serves: the one it was launched with, unless ``SERVED_K_ENV`` says otherwise."""
    return int(os.environ.get(SERVED_K_ENV, launched))


def step_seconds(k: int) -> float:
    """One engine step of the vLLM stand-in that drafts ``k`` tokens (and verifies k + 1)."""
    return STEP_S + k * DRAFT_STEP_S


def synthetic_rates(k: int, spec: dict[str, Any]) -> list[float] | None:
    """The unconditional per-position acceptance rates of synthetic verification, as vLLM 0.34
    resolves them (SpeculativeConfig._resolve_synthetic_acceptance_rates and
    _acceptance_length_to_rates, vllm/config/speculative.py): exactly one of the rates (K of them,
    in [0, 1], non-increasing) or a mean acceptance length L in [1, K + 1], whose rates are the
    minimum-variance schedule [1] * floor(L - 1) + [frac(L - 1)] + [0, ...]. None: not synthetic.
    ValueError with vLLM's message for what it refuses."""
    rates, length = spec.get("synthetic_acceptance_rates"), spec.get("synthetic_acceptance_length")
    if spec.get("rejection_sample_method") != "synthetic":
        if rates is not None or length is not None:
            raise ValueError(
                "synthetic_acceptance_rates / synthetic_acceptance_length are only valid with "
                "rejection_sample_method='synthetic'."
            )
        return None
    if (rates is None) == (length is None):
        raise ValueError(
            "rejection_sample_method='synthetic' requires exactly one of synthetic_acceptance_rates "
            "or synthetic_acceptance_length."
        )
    if rates is not None:
        if len(rates) != k:
            raise ValueError(f"synthetic_acceptance_rates must have length {k}, got {rates}.")
        if not all(0.0 <= r <= 1.0 for r in rates):
            raise ValueError(f"synthetic_acceptance_rates entries must be in [0, 1], got {rates}.")
        if any(rates[i] > rates[i - 1] for i in range(1, k)):
            raise ValueError(f"synthetic_acceptance_rates must be non-increasing, got {rates}.")
        return [float(r) for r in rates]
    if not 1.0 <= length <= k + 1:
        raise ValueError(f"synthetic_acceptance_length must be in [1, {k + 1}], got {length}.")
    drafts = length - 1
    full = int(drafts)
    return ([1.0] * full + [drafts - full] + [0.0] * (k - full - 1))[:k]


def _radical_inverse(j: int) -> float:
    """j's bits mirrored after the binary point (van der Corput): 0, 0.5, 0.25, 0.75, 0.125, ..."""
    u, scale = 0.0, 0.5
    while j:
        u, j, scale = u + scale * (j & 1), j >> 1, scale / 2
    return u


def synthetic_accepted(rates: list[float], j: int) -> int:
    """Drafts verify step ``j`` accepts: position p is accepted in a share rates[p] of the steps
    (u_j below rates[p]), and the rates do not increase, so the accepted ones are a prefix."""
    u = _radical_inverse(j)
    return sum(u < rate for rate in rates)


def device_line() -> str:
    """What the server was given of the machine's GPUs (a GPU engine would use every visible one)."""
    return " ".join(f"{k}={os.environ.get(k)}" for k in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"))


def prompt_text(body: dict[str, Any]) -> str:
    """The prompt as one string: a completion's text, or a chat's messages and template arguments."""
    if "messages" in body:
        return json.dumps([body["messages"], body.get("chat_template_kwargs")], sort_keys=True)
    return str(body.get("prompt", ""))


def requested_top(body: dict[str, Any], chat: bool) -> int:
    """The top logprobs a request asks for (chat: logprobs + top_logprobs; completions: logprobs=N)."""
    if chat:
        return int(body.get("top_logprobs") or 0) if body.get("logprobs") else 0
    return int(body.get("logprobs") or 0)


def prompt_ids(text: str) -> list[int]:
    """One id per whitespace-separated word (a tokenizer, roughly)."""
    return [zlib.crc32(word.encode()) % VOCAB for word in text.split()] or [0]


def output_ids(text: str, count: int) -> list[int]:
    """The greedy answer: ``count`` ids that depend on the prompt and the position only."""
    seed = int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)
    return [(seed + 7919 * i) % VOCAB for i in range(count)]


def token_text(token: int) -> str:
    return f" t{token}"


def logprobs_of(token: int, top: int) -> list[tuple[int, float]]:
    """The top ``top`` (id, logprob) at a position: the chosen token first, a wide margin below it."""
    return [(token, -0.05)] + [((token + k) % VOCAB, -3.0 - k) for k in range(1, top)]


def logprobs(tokens: list[int], top: int, chat: bool, name: Callable[[int], str]) -> dict[str, Any]:
    """A chunk's ``logprobs`` in the OpenAI shape of its endpoint, each token keyed by ``name``
    (vLLM with return_tokens_as_token_ids: "token_id:N"; SGLang: the token's text)."""
    tops = [logprobs_of(t, top) for t in tokens]
    if chat:
        return {
            "content": [
                {
                    "token": name(t),
                    "logprob": entry[0][1],
                    "top_logprobs": [{"token": name(i), "logprob": lp} for i, lp in entry],
                }
                for t, entry in zip(tokens, tops, strict=True)
            ]
        }
    return {
        "tokens": [name(t) for t in tokens],
        "token_logprobs": [entry[0][1] for entry in tops],
        "top_logprobs": [{name(i): lp for i, lp in entry} for entry in tops],
    }


@dataclass
class Step:
    tokens: list[int]  # what this pass emits (the prefill: one token)
    accepted: int | None  # drafts the verify step accepted (None: the prefill, or no speculation)


def steps(ids: list[int], k: int, rates: list[float] | None = None) -> list[Step]:
    """The passes that produce ``ids``: the prefill's token, then one token per decode step (k = 0),
    or per verify step its accepted drafts plus its own token, cut at the last id. Its drafts are
    accepted in the pattern, or as synthetic ``rates`` say."""
    out, done, j = [Step(ids[:1], None)], 1, 0
    while done < len(ids):
        if rates is not None:
            accepted = min(synthetic_accepted(rates, j), k)
        else:
            accepted = min(ACCEPTED_PER_STEP[j % len(ACCEPTED_PER_STEP)], k) if k else 0
        emitted = ids[done : done + accepted + 1]
        out.append(Step(emitted, accepted if k else None))
        done, j = done + len(emitted), j + 1
    return out


@dataclass
class Acceptance:
    """One request's (or the server's) speculative counts, as the engines keep them."""

    k: int
    steps: int = 0
    accepted: int = 0
    histogram: list[int] = field(default_factory=list)  # steps that accepted exactly j drafts
    per_position: list[int] = field(default_factory=list)  # steps that accepted position p

    def __post_init__(self) -> None:
        self.histogram = self.histogram or [0] * (self.k + 1)
        self.per_position = self.per_position or [0] * self.k

    def count(self, accepted: int) -> None:
        self.steps += 1
        self.accepted += accepted
        self.histogram[accepted] += 1
        for position in range(accepted):
            self.per_position[position] += 1

    @property
    def proposed(self) -> int:
        return self.steps * self.k


class Streamer:
    """One streamed response: server-sent events over ``request``'s connection."""

    def __init__(self, response: web.StreamResponse) -> None:
        self.response = response

    async def send(self, payload: dict[str, Any] | str, event: str | None = None) -> None:
        data = payload if isinstance(payload, str) else json.dumps(payload)
        head = f"event: {event}\n" if event else ""
        await self.response.write(f"{head}data: {data}\n\n".encode())


async def stream(request: web.Request, produce: Callable[[Streamer], Awaitable[None]]) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    await produce(Streamer(response))
    await response.write_eof()
    return response


async def forward_pass() -> None:
    await asyncio.sleep(STEP_S)


UNCAPTURED_SLOWDOWN = 1.5  # a step past the capture ceiling (eager fallback), relative to a captured one
STARTUP_ENV = "STAND_IN_STARTUP_S"


def slow_start() -> None:
    """Take ``STAND_IN_STARTUP_S`` seconds to start, as an engine loading, compiling and capturing."""
    time.sleep(float(os.environ.get(STARTUP_ENV, "0")))


FAIL_LAUNCHES_ENV, LAUNCH_DIR_ENV = "STAND_IN_FAIL_LAUNCHES", "STAND_IN_LAUNCH_DIR"
DIVERGE_ENV = "STAND_IN_DIVERGE_ABOVE"


def diverges(method: str | None, in_flight: int) -> bool:
    """Whether a request of a ``method`` stand-in that arrived with ``in_flight`` requests in flight
    (itself included) gets a wrong token (``STAND_IN_DIVERGE_ABOVE``)."""
    named, _, above = os.environ.get(DIVERGE_ENV, "").partition(":")
    return bool(method) and named == method and in_flight > int(above or 1)


def garbled(ids: list[int]) -> list[int]:
    """The answer with its third token replaced: what a broken verify step streams."""
    return [(t + 1) % VOCAB if i == 2 else t for i, t in enumerate(ids)]


def launches(method: str) -> int:
    """This launch's number among ``method``'s (1: its first), counted in ``STAND_IN_LAUNCH_DIR``."""
    folder = os.environ.get(LAUNCH_DIR_ENV)
    if not folder:
        return 0
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"{method}.launches"), "a+") as handle:
        handle.write("launch\n")
        handle.seek(0)
        return len(handle.read().splitlines())


def launch_fault(method: str) -> None:
    """Exit as a server that does not start, on the launches of ``method`` (``baseline``, or the
    speculative method) that ``STAND_IN_FAIL_LAUNCHES`` names: after its start-up time, as an NCCL
    hang or a crash in CUDA-graph capture ends a GPU start-up."""
    parts = (part.partition(":") for part in os.environ.get(FAIL_LAUNCHES_ENV, "").split(";"))
    told = {name.strip(): {int(n) for n in numbers.split(",") if n.strip()} for name, _, numbers in parts}
    number = launches(method)
    if number in told.get(method, set()):
        log(f"RuntimeError: NCCL error: unhandled system error (stand-in: {method}'s launch {number} fails)")
        sys.exit(1)


class EngineLoop:
    """An engine core in miniature: one forward pass at a time for every request waiting on one
    (a batch: a request that asks during a pass waits for the next), each ``step_s`` long. It counts
    its steps and their tokens as vLLM's tokens-per-step histogram does (one observation a step)."""

    BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)  # vLLM's, to 8192

    def __init__(self, step_s: float, width: int = 1, ceiling: int | None = None) -> None:
        self.step_s = step_s
        self.width, self.ceiling = width, ceiling  # tokens a request verifies a step; the capture ceiling
        self.uncaptured = 0  # steps run past the ceiling
        self.steps = 0
        self.tokens = 0
        self.buckets = [0] * len(self.BUCKETS)  # steps with at most BUCKETS[i] tokens
        self._waiting: list[tuple[asyncio.Future, int]] = []
        self._runner: asyncio.Task | None = None

    async def forward(self, tokens: int) -> None:
        """One forward pass of a request that computes ``tokens`` tokens in it."""
        future = asyncio.get_running_loop().create_future()
        self._waiting.append((future, tokens))
        if self._runner is None or self._runner.done():
            self._runner = asyncio.ensure_future(self._run())
        await future

    async def _run(self) -> None:
        while self._waiting:
            batch, self._waiting = self._waiting, []
            past = self.ceiling is not None and len(batch) * self.width > self.ceiling
            self.uncaptured += past
            await asyncio.sleep(self.step_s * (UNCAPTURED_SLOWDOWN if past else 1.0))
            tokens = sum(n for _, n in batch)
            self.steps += 1
            self.tokens += tokens
            for i, bound in enumerate(self.BUCKETS):
                self.buckets[i] += tokens <= bound
            for future, _ in batch:
                if not future.done():  # its request went away
                    future.set_result(None)

    def histogram(self, name: str, labels: str) -> list[str]:
        """The steps as a Prometheus histogram, ``name``_bucket/_count/_sum."""
        lines = [f"# TYPE {name} histogram"]
        lines += [
            f'{name}_bucket{{{labels},le="{float(bound)}"}} {float(n)}'
            for bound, n in zip(self.BUCKETS, self.buckets, strict=True)
        ]
        lines += [
            f'{name}_bucket{{{labels},le="+Inf"}} {float(self.steps)}',
            f"{name}_count{{{labels}}} {float(self.steps)}",
            f"{name}_sum{{{labels}}} {float(self.tokens)}",
        ]
        return lines


def chunk_id() -> str:
    return f"cmpl-{time.monotonic_ns()}"


def serve(app: web.Application, host: str | None, port: int | None, uds: str | None) -> None:
    """Serve until SIGTERM (what the harness sends the process group)."""
    where = f"unix:{uds}" if uds else f"http://{host}:{port}"
    log(f"stand-in: serving on {where} (pid {os.getpid()}, python {sys.version.split()[0]})")
    if uds:
        web.run_app(app, path=uds, print=None, handle_signals=True)
    else:
        web.run_app(app, host=host, port=port, print=None, handle_signals=True)
