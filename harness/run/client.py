"""The streaming OpenAI-compatible client: raw timestamps and token ids, no derived numbers.

Each request streams (``stream: true`` with ``stream_options.include_usage``) and asks the
engine for token ids (the adapter's ``request_fields``), so output tokens are COUNTED FROM TOKEN
IDS, never from chunks: under speculation one chunk carries several tokens, and chunk gaps are
not per-token latencies. A request either finished (``FINISHED``, within its max_tokens, its output
counted by ids) or failed with its reason (``unfinished``): nothing in between is measured.

Times are ``time.perf_counter()`` seconds relative to the start of the measured window.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp
import orjson

from harness.config.engines import SERVED_MODEL_NAME
from harness.config.load import Load, RampStage, Sampling
from harness.config.workloads import ChatTemplate, LoadedWorkload, Prompt
from harness.core.formats import inert
from harness.core.secrets import scrub
from harness.results.records import FINISHED, RequestRecord  # the one request record: the store's type
from harness.run.engine_http import auth_headers, http_base, sent_secrets, unix_socket

T = TypeVar("T")


def run_client(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)``, quiet about a stop signal: the CLI's handler raises KeyboardInterrupt
    inside whichever task holds the thread, the CLI reports it once, and the task it ended is not
    reported again when collected ("Task exception was never retrieved" and a traceback in the
    job's log, pushing out what the job printed)."""

    def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if not isinstance(context.get("exception"), KeyboardInterrupt):
            loop.default_exception_handler(context)

    with asyncio.Runner() as runner:
        runner.get_loop().set_exception_handler(handle)
        return runner.run(main)


def request_body(
    prompt: Prompt,
    prompt_format: str,
    sampling: Sampling,
    load: Load,
    top_logprobs: int = 0,
    engine_fields: dict[str, Any] | None = None,
    chat: ChatTemplate | None = None,
    seed: int | None = None,
) -> tuple[str, dict[str, Any]]:
    """The endpoint path and JSON body for one prompt. Temperature is always sent explicitly;
    ``engine_fields`` (the adapter's ``request_fields``) ask for token ids and per-request details
    and carry the chat template's kwargs; ``chat`` (the workload's effective chat settings) adds a
    system prompt."""
    body: dict[str, Any] = {
        "model": SERVED_MODEL_NAME,
        "max_tokens": load.max_output_tokens,
        "temperature": sampling.temperature,
        "seed": sampling.seed if seed is None else seed,
        "stream": True,
        "stream_options": {"include_usage": True},
        **(engine_fields or {}),
    }
    if sampling.top_p is not None:
        body["top_p"] = sampling.top_p
    if sampling.top_k is not None:
        body["top_k"] = sampling.top_k
    if load.ignore_eos:
        body["ignore_eos"] = True
    if prompt_format == "chat":
        chat = chat or ChatTemplate()
        body["messages"] = chat.messages(prompt)
        if top_logprobs:
            body.update(logprobs=True, top_logprobs=top_logprobs)
        return "/v1/chat/completions", body
    body["prompt"] = prompt.text
    if top_logprobs:
        body["logprobs"] = top_logprobs
    return "/v1/completions", body


def _token_id(key: str) -> int | None:
    """vLLM with return_tokens_as_token_ids keys "token_id:123"; a text key has no id."""
    if key.startswith("token_id:"):
        try:
            return int(key[len("token_id:") :])
        except ValueError:
            return None
    return None


def parse_top_logprobs(logprobs: dict[str, Any] | None) -> list[list[tuple[int, float]]]:
    """Top logprobs per token from one chunk's ``logprobs``, in either OpenAI shape:
    completions ``{"top_logprobs": [{"token_id:1": lp, ...}, ...]}`` or chat
    ``{"content": [{"top_logprobs": [{"token": "token_id:1", "logprob": lp}, ...]}, ...]}``."""
    if not logprobs:
        return []
    if "content" in logprobs:
        return [_with_sampled(entry) for entry in logprobs["content"] or []]
    return [
        [(_token_id(k), v) for k, v in (entry or {}).items()] for entry in logprobs.get("top_logprobs") or []
    ]


def _with_sampled(entry: dict[str, Any]) -> list[tuple[int | None, float]]:
    """A chat position's top logprobs plus the sampled token's own (outside the top-k when sampling
    at temperature > 0 picked a less likely token: the distribution check needs its logprob)."""
    tops = [(_token_id(top["token"]), top["logprob"]) for top in entry.get("top_logprobs") or []]
    sampled = (
        (_token_id(entry["token"]), entry["logprob"]) if "token" in entry and "logprob" in entry else None
    )
    if sampled is not None and sampled[0] is not None and sampled[0] not in {t for t, _ in tops}:
        tops.append(sampled)
    return tops


class UnreadableResponse(Exception):
    """A response this client cannot take: recorded as the request's error, never raised past it."""


class StreamError(Exception):
    """The server said in the stream that the request failed: recorded as its error, as said."""


# The adapter's ``absorb_chunk``: what a chunk carries outside the OpenAI fields (SGLang's sglext).
ChunkExtras = Callable[[RequestRecord, dict[str, Any]], None]


def _well_typed(record: RequestRecord) -> None:
    """Once per finished request: what the chunks put in ``record`` has the types the store and
    the probes read (a server of another shape fails here, not in the report)."""
    for what, ids in (("token ids", record.token_ids), ("prompt token ids", record.prompt_token_ids)):
        if type(ids) is not list or not all(type(i) is int for i in ids):
            raise UnreadableResponse(f"{what} that are not integers: {str(ids)[:80]}")
    for what, count in (
        ("completion_tokens", record.usage_completion_tokens),
        ("prompt_tokens", record.prompt_token_count),
    ):
        if count is not None and type(count) is not int:
            raise UnreadableResponse(f"usage.{what} that is not an integer: {str(count)[:80]}")
    if not isinstance(record.finish_reason, str):
        raise UnreadableResponse(f"a finish_reason that is not a string: {str(record.finish_reason)[:80]}")


def _absorb_chunk(
    record: RequestRecord, chunk: dict[str, Any], now: float, extras: ChunkExtras | None = None
) -> None:
    """One decoded event into ``record`` (called once per streamed chunk: kept to plain lookups).
    A field of a shape the engines never send raises here or fails ``_well_typed`` at the end:
    either way the request's error (``send_request``), never a wrong value stored."""
    if extras is not None:
        extras(record, chunk)
    if chunk.get("error") is not None:  # vLLM's and SGLang's error event mid-stream: not finished
        raise StreamError(f"error event: {str(chunk['error'])[:MAX_ERROR_CHARS]}")
    usage = chunk.get("usage")
    if usage:
        record.usage_completion_tokens = usage.get("completion_tokens")
        record.prompt_token_count = usage.get("prompt_tokens", record.prompt_token_count)
    choices = chunk.get("choices")
    if record.t_first_token is None and not record.prompt_token_ids:
        # the first chunk carries the prompt's ids: chat on the chunk, completions on its choice
        prompt_ids = chunk.get("prompt_token_ids") or next(
            (c["prompt_token_ids"] for c in choices or () if c.get("prompt_token_ids")), []
        )
        record.prompt_token_ids = prompt_ids
    if not choices:
        return
    new_tokens, new_text = 0, ""
    for choice in choices:
        ids = choice.get("token_ids")
        if ids:
            record.token_ids.extend(ids)
            new_tokens += len(ids)
        logprobs = choice.get("logprobs")
        if logprobs:
            record.top_logprobs.extend(parse_top_logprobs(logprobs))
        delta = choice.get("delta")
        new_text += (delta.get("content") or "") if delta is not None else (choice.get("text") or "")
        if choice.get("finish_reason"):
            record.finish_reason = choice["finish_reason"]
    # A chunk with text but no token ids (SGLang's streaming chat sends the ids at the end) still
    # marks the first token's arrival; its token count is unknown (0).
    if new_tokens or new_text:
        record.text += new_text
        if record.t_first_token is None:
            record.t_first_token = now
        record.chunks.append((now, new_tokens, new_text))


_JSON = {"content-type": "application/json"}
# What the client reads of a server, at most: an error reply's body (the message it records is cut
# to 500 characters anyway), and one streamed event (an event never ends without its blank line: a
# server that sends none would otherwise grow the buffer until memory runs out). The largest events
# the engines send are the last ones, with every token id of the prompt and of the output.
MAX_ERROR_BODY_BYTES = 64 * 1024
MAX_ERROR_CHARS = 500
MAX_EVENT_BYTES = 8 * 1024 * 1024
# What one request may stream, beyond which it is the server's error, not an answer: the tokens the
# request asked for at most (max_tokens) with this margin, and as many text characters per token
# (the longest tokens of today's vocabularies are a few dozen characters). An engine that streams
# ids without end (1.5 MB events of 500,000 ids each, each under the event cap) took bench to 3.8 GB
# in 8 s before this (issue 64).
TOKEN_MARGIN = 2
EXTRA_TOKENS = 64
MAX_CHARS_PER_TOKEN = 256


def _check_limit(record: RequestRecord, limit: int | None, body: dict[str, Any]) -> None:
    """Raise where ``record`` holds more than a response to ``body`` may stream."""
    if limit is not None and (
        len(record.token_ids) > limit or len(record.text) > limit * MAX_CHARS_PER_TOKEN
    ):
        raise UnreadableResponse(
            f"more than {limit} tokens streamed for max_tokens {body.get('max_tokens')} "
            f"({len(record.token_ids)} ids, {len(record.text)} characters): not an answer"
        )


def asked_tokens(body: dict[str, Any]) -> int | None:
    """The most output tokens ``body`` asks for (max_tokens); None where it names none."""
    asked = body.get("max_tokens") or body.get("max_completion_tokens")
    return asked if isinstance(asked, int) and asked > 0 else None


def token_limit(body: dict[str, Any]) -> int | None:
    """The most tokens a response to ``body`` may stream before the client stops reading it (the
    memory guard; a finished answer must still stay within max_tokens: ``unfinished``); None where
    it names no max_tokens."""
    asked = asked_tokens(body)
    return TOKEN_MARGIN * asked + EXTRA_TOKENS if asked is not None else None


def unfinished(record: RequestRecord, body: dict[str, Any]) -> str | None:
    """Why a stream that ended is not a finished answer to ``body``, in its kind's words first (the
    views count failures by them); None: it finished. An engine stops at max_tokens, so a token more
    is another request's or a broken engine's; output text without a token id has no count (the
    client counts tokens from ids, never from text)."""
    if record.finish_reason is None:
        return "stream ended without a finish_reason"
    _well_typed(record)
    if record.finish_reason not in FINISHED:
        return f"finish_reason {record.finish_reason[:80]!r}"
    asked = asked_tokens(body)
    if asked is not None and len(record.token_ids) > asked:
        return f"over max_tokens: {len(record.token_ids)} tokens for max_tokens {asked}"
    if record.text and not record.token_ids:
        return f"output without token ids: {len(record.text)} characters streamed, no token id"
    return None


def sse_events(buffer: bytes | bytearray) -> tuple[list[bytes], bytes]:
    """Complete server-sent events' data payloads in ``buffer``, and what is left of it (an event
    not yet complete). Events end with a blank line; only ``data:`` lines carry a payload."""
    if b"\r" in buffer:  # the SSE spec allows CRLF; vLLM and SGLang send LF
        buffer = buffer.replace(b"\r\n", b"\n")
    *events, rest = buffer.split(b"\n\n")
    payloads = []
    for event in events:
        if event.startswith(b"data:") and b"\n" not in event:  # the engines' one-line events
            payloads.append(event[5:].strip())
        else:
            payloads += [line[5:].strip() for line in event.split(b"\n") if line.startswith(b"data:")]
    return payloads, rest


def _error(text: str, hidden: frozenset[str]) -> str:
    """A request's error as it is stored: what the server was sent (``hidden``: its key, the URL's
    credentials, their headers) scrubbed before the text is cut (a cut inside a key would keep its
    start), cut to ``MAX_ERROR_CHARS``, control characters inert."""
    return inert(scrub(text, hidden)[:MAX_ERROR_CHARS])


def _decode(payload: bytes) -> dict[str, Any]:
    chunk = orjson.loads(payload)
    if not isinstance(chunk, dict):
        raise UnreadableResponse(f"an event that is not a JSON object: {bytes(payload[:80])!r}")
    return chunk


async def send_request(
    session: aiohttp.ClientSession,
    record: RequestRecord,
    path: str,
    body: dict[str, Any],
    clock_zero: float,
    extras: ChunkExtras | None = None,
    hidden: frozenset[str] = frozenset(),
) -> RequestRecord:
    """Stream one request into ``record``; failures are recorded, never raised: whatever the
    server sends (an event of another shape, an endless event, a huge error body) ends this request
    with an error and the window goes on. ``hidden``: what the request carries that its error must
    not keep if the server echoes it (``engine_http.sent_secrets``).

    The hot path of every measured window, so it stays lean (its cost per token is measured by
    ``benchmarks/client_overhead.py``): aiohttp's raw byte stream split into events here, orjson
    to decode them, and one timestamp per network read (events that arrived together get the
    time they arrived, not the time each was parsed). An event is split out only when a read could
    have ended one, so a long event costs its length once, not once per read."""
    record.t_send = time.perf_counter() - clock_zero
    limit = token_limit(body)
    try:
        async with session.post(path, data=orjson.dumps(body), headers=_JSON) as response:
            if response.status != 200:  # the rest of the body is never read: the connection closes
                detail = (await response.content.read(MAX_ERROR_BODY_BYTES)).decode(errors="replace")
                record.error = _error(f"HTTP {response.status}: {detail}", hidden)
                return record
            buffer, done = bytearray(), False  # grown in place: an endless event is no quadratic copy
            async for data in response.content.iter_any():
                now = time.perf_counter() - clock_zero
                ended = b"\n\n" in buffer[-1:] + data or b"\r" in data
                buffer += data
                if not ended:
                    if len(buffer) > MAX_EVENT_BYTES:
                        raise UnreadableResponse(f"an event over {MAX_EVENT_BYTES // 2**20} MiB with no end")
                    continue
                payloads, buffer = sse_events(buffer)
                for payload in payloads:
                    if payload == b"[DONE]":
                        done = True
                        break
                    _absorb_chunk(record, _decode(payload), now, extras)
                _check_limit(record, limit, body)
                if done:
                    break
        failure = unfinished(record, body)
        if failure is not None:
            record.error = _error(failure, hidden)
    except TimeoutError:  # aiohttp's read timeout (asyncio.TimeoutError is TimeoutError)
        record.error = "timeout"
    except (aiohttp.ClientError, orjson.JSONDecodeError, UnreadableResponse, StreamError) as exc:
        said = str(exc) if isinstance(exc, StreamError) else f"{type(exc).__name__}: {exc}"
        record.error = _error(said, hidden)
    except Exception as exc:  # a chunk of another shape ({"choices": [null]}): this request's error only
        record.error = _error(f"unreadable response ({type(exc).__name__}: {exc})", hidden)
    finally:
        record.t_done = time.perf_counter() - clock_zero
    return record


@dataclass
class WindowResult:
    records: list[RequestRecord]
    duration_s: float  # first send to last completion
    stalled: bool = False  # the no-progress watchdog stopped the window


@dataclass
class RampResult:
    records: list[RequestRecord]
    stage_ends_s: list[float]  # when the client left each stage, seconds from the window's start
    duration_s: float  # first send to last completion (the requests in flight at the end finish)
    stalled: bool = False


def _last_progress(started: list[RequestRecord]) -> float:
    """Latest moment anything happened: a send, a chunk, a completion."""
    return max(max(r.t_send, r.chunks[-1][0] if r.chunks else 0.0, r.t_done or 0.0) for r in started)


def _session(base_url: str, limit: int, load: Load) -> aiohttp.ClientSession:
    """The window's HTTP session: at most ``limit`` connections (0: no limit)."""
    uds = unix_socket(base_url)  # a server on a Unix socket (vLLM's: harness.run.runner)
    connector = (
        aiohttp.UnixConnector(path=uds, limit=limit, force_close=False)
        if uds
        else aiohttp.TCPConnector(limit=limit, force_close=False)
    )
    # the read timeout bounds the gap between bytes; the request's total deadline is wait_for's
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10.0, sock_read=load.request_timeout_s)
    # trust_env=False: the server is this machine's own; a proxy from the environment must not carry
    # (or time) its requests
    return aiohttp.ClientSession(
        base_url=http_base(base_url),
        connector=connector,
        timeout=timeout,
        trust_env=False,
        headers=auth_headers(base_url),  # a keyed server's per-start key (harness.run.server)
    )


async def _send_guarded(
    client: aiohttp.ClientSession,
    record: RequestRecord,
    request: tuple[str, dict[str, Any]],
    clock_zero: float,
    extras: ChunkExtras | None,
    load: Load,
    stalled: asyncio.Event,
    hidden: frozenset[str],
) -> None:
    """One request with its total deadline; a cancellation by the stall watchdog is its error."""
    path, body = request
    try:
        await asyncio.wait_for(
            send_request(client, record, path, body, clock_zero, extras, hidden), load.request_timeout_s
        )
    except asyncio.TimeoutError:
        record.error = f"timeout: not complete after {load.request_timeout_s:.0f} s"
    except asyncio.CancelledError:
        if not stalled.is_set():
            raise  # an interrupt, not our watchdog
        record.error = f"stalled: no token from any request for {load.stall_timeout_s:.0f} s"


async def _watch_stalls(
    started: list[RequestRecord],
    tasks: list[asyncio.Future[Any]],
    clock_zero: float,
    load: Load,
    stalled: asyncio.Event,
) -> None:
    """Stop the window (cancel every task) when no request in flight made progress for
    ``stall_timeout_s``: a hung engine."""
    while True:
        await asyncio.sleep(min(1.0, load.stall_timeout_s / 4))
        in_flight = [r for r in started if r.t_done is None]
        now = time.perf_counter() - clock_zero
        if in_flight and now - _last_progress(started) > load.stall_timeout_s:
            stalled.set()
            for task in tasks:
                task.cancel()
            return


async def run_window(
    base_url: str,
    workload: LoadedWorkload,
    prompts: list[Prompt],
    concurrency: int,
    sampling: Sampling,
    load: Load,
    on_request_done: Callable[[RequestRecord], None] | None = None,
    top_logprobs: int = 0,
    engine_fields: dict[str, Any] | None = None,
    repeat: int = 0,
    schedule: list[float] | None = None,
    request_rate: float | None = None,
    seeds: list[int] | None = None,
    extras: ChunkExtras | None = None,
) -> WindowResult:
    """Send ``prompts`` with at most ``concurrency`` in flight; return the raw records. Closed loop
    (no ``schedule``): the next prompt goes as soon as a slot frees. Open loop: prompt i is due
    ``schedule[i]`` seconds after the window starts (``harness.core.arrivals``), sent then if a slot is
    free, else as soon as one is; each record keeps when it was due, when the client got to it and
    when it was sent.

    Two guards against a hung engine: each request has a total deadline (``request_timeout_s``;
    aiohttp's read timeout only bounds the gap between bytes), and a watchdog stops the whole window
    when no request has made progress for ``stall_timeout_s`` while some are in flight."""
    fmt = workload.definition.prompt_format
    semaphore = asyncio.Semaphore(concurrency)
    clock_zero = time.perf_counter()
    started: list[RequestRecord] = []
    stalled = asyncio.Event()
    hidden = sent_secrets(base_url)

    async with _session(base_url, concurrency, load) as client:

        async def one(prompt: Prompt, due: float | None, seed: int | None) -> RequestRecord:
            record = RequestRecord(
                workload.name, prompt.prompt_id, concurrency, fmt, repeat, request_rate, seed=seed
            )
            if due is not None:  # open loop: wait for the due time, whatever is in flight
                await asyncio.sleep(due - (time.perf_counter() - clock_zero))
                record.t_scheduled, record.t_dispatched = due, time.perf_counter() - clock_zero
            async with semaphore:
                started.append(record)
                request = request_body(
                    prompt, fmt, sampling, load, top_logprobs, engine_fields, workload.chat, seed
                )
                await _send_guarded(client, record, request, clock_zero, extras, load, stalled, hidden)
            if on_request_done:
                on_request_done(record)
            return record

        dues = schedule if schedule is not None else [None] * len(prompts)
        per_prompt = seeds if seeds is not None else [None] * len(prompts)
        tasks = [
            asyncio.ensure_future(one(p, due, seed))
            for p, due, seed in zip(prompts, dues, per_prompt, strict=True)
        ]
        guard = asyncio.ensure_future(_watch_stalls(started, tasks, clock_zero, load, stalled))
        try:
            await asyncio.wait(tasks)  # every task ends: completed, or cancelled by the watchdog
        finally:
            guard.cancel()
    # After a stall, prompts still waiting for a slot were never sent: they have no record.
    records = [task.result() for task in tasks if not (stalled.is_set() and task.cancelled())]
    return WindowResult(
        records=records, duration_s=time.perf_counter() - clock_zero, stalled=stalled.is_set()
    )


class _Ramp:
    """The state of one ramp window while it runs (``run_ramp``)."""

    def __init__(
        self,
        client: aiohttp.ClientSession,
        workload: LoadedWorkload,
        prompts: list[Prompt],
        sampling: Sampling,
        load: Load,
        send: tuple[dict[str, Any] | None, ChunkExtras | None, int],  # engine fields, extras, repeat
        on_request_done: Callable[[RequestRecord], None] | None,
        hidden: frozenset[str] = frozenset(),  # what its errors must not keep (sent_secrets)
    ):
        self.client, self.workload, self.prompts, self.hidden = client, workload, prompts, hidden
        self.sampling, self.load, self.on_request_done = sampling, load, on_request_done
        self.engine_fields, self.extras, self.repeat = send
        self.cap = load.max_concurrency or 0  # open-loop stages: at most this many in flight (0: no cap)
        self.clock_zero = time.perf_counter()
        self.started: list[RequestRecord] = []
        self.tasks: list[asyncio.Future[RequestRecord]] = []
        self.stalled = asyncio.Event()

    def now(self) -> float:
        return time.perf_counter() - self.clock_zero

    def in_flight(self) -> list[asyncio.Future[RequestRecord]]:
        return [t for t in self.tasks if not t.done()]

    async def _one(self, record: RequestRecord, prompt: Prompt) -> RequestRecord:
        self.started.append(record)
        fmt = self.workload.definition.prompt_format
        request = request_body(
            prompt, fmt, self.sampling, self.load, 0, self.engine_fields, self.workload.chat
        )
        await _send_guarded(
            self.client, record, request, self.clock_zero, self.extras, self.load, self.stalled, self.hidden
        )
        if self.on_request_done:
            self.on_request_done(record)
        return record

    def launch(self, stage: RampStage, due: float | None = None, dispatched: float | None = None) -> None:
        """Send the next prompt (in turn, from the first again after the last)."""
        prompt = self.prompts[len(self.tasks) % len(self.prompts)]
        record = RequestRecord(
            self.workload.name,
            prompt.prompt_id,
            stage.concurrency or self.cap,
            self.workload.definition.prompt_format,
            self.repeat,
            stage.request_rate,
        )
        record.t_scheduled, record.t_dispatched = due, dispatched
        self.tasks.append(asyncio.ensure_future(self._one(record, prompt)))

    async def until(self, deadline: float) -> None:
        """Wait for a completion, or until ``deadline`` (window clock)."""
        pending, wait = self.in_flight(), max(0.0, deadline - self.now())
        if pending:
            await asyncio.wait(pending, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
        else:
            await asyncio.sleep(wait)

    async def closed_stage(self, concurrency: int, stage: RampStage, end: float) -> None:
        """Exactly ``concurrency`` in flight until ``end``: a rise sends at once, a fall waits for
        completions."""
        while not self.stalled.is_set() and self.now() < end:
            for _ in range(concurrency - len(self.in_flight())):
                self.launch(stage)
            await self.until(end)

    async def open_stage(self, stage: RampStage, due_times: list[float], end: float) -> None:
        """Each request at its due time (then as soon as a slot frees under the cap), until ``end``."""
        for due in due_times:
            await asyncio.sleep(max(0.0, due - self.now()))
            dispatched = self.now()
            while self.cap and len(self.in_flight()) >= self.cap and not self.stalled.is_set():
                await self.until(end + self.load.request_timeout_s)  # queueing for a slot: recorded
            if self.stalled.is_set():
                return
            self.launch(stage, due, dispatched)
        await asyncio.sleep(max(0.0, end - self.now()))


async def run_ramp(
    base_url: str,
    workload: LoadedWorkload,
    prompts: list[Prompt],
    stages: list[RampStage],
    sampling: Sampling,
    load: Load,
    on_request_done: Callable[[RequestRecord], None] | None = None,
    engine_fields: dict[str, Any] | None = None,
    repeat: int = 0,
    dues: list[list[float]] | None = None,
    extras: ChunkExtras | None = None,
    on_stage_end: Callable[[int], None] | None = None,
) -> RampResult:
    """Load that moves, as one continuous window: the stages back to back on one clock (stage i
    from the sum of the earlier durations to that plus its own), prompts sent in turn and again
    from the first. A closed-loop stage keeps exactly its concurrency in flight: more are sent the
    moment it starts, and as it lowers, completions are not replaced until the count is down to it.
    An open-loop stage sends at its due times (``dues[i]``: seconds from the window's start), at
    most ``load.max_concurrency`` in flight. ``on_stage_end(i)`` runs in a thread as stage i ends
    (the runner reads the engine's counters there) without holding up the sends. When the last
    stage ends nothing more is sent and the requests in flight finish (the drain is outside every
    stage). The same guards as ``run_window``."""
    open_loop = any(s.request_rate is not None for s in stages)
    cap = load.max_concurrency or 0
    limit = 0 if open_loop and not cap else max(s.concurrency or cap for s in stages)
    stage_ends: list[float] = []
    scrapes: list[asyncio.Future[None]] = []
    async with _session(base_url, limit, load) as client:
        send = (engine_fields, extras, repeat)
        ramp = _Ramp(client, workload, prompts, sampling, load, send, on_request_done, sent_secrets(base_url))
        guard = asyncio.ensure_future(
            _watch_stalls(ramp.started, ramp.tasks, ramp.clock_zero, load, ramp.stalled)
        )
        try:
            end = 0.0
            for index, stage in enumerate(stages):
                end += stage.duration_s
                if stage.concurrency is not None:
                    await ramp.closed_stage(stage.concurrency, stage, end)
                else:
                    await ramp.open_stage(stage, dues[index] if dues else [], end)
                stage_ends.append(ramp.now())
                if on_stage_end is not None:
                    scrapes.append(asyncio.ensure_future(asyncio.to_thread(on_stage_end, index)))
                if ramp.stalled.is_set():
                    break
            if ramp.tasks:
                await asyncio.wait(ramp.tasks)  # the drain: every request ends, or the watchdog cancels it
            await asyncio.gather(*scrapes)
        finally:
            guard.cancel()
    records = [t.result() for t in ramp.tasks if not (ramp.stalled.is_set() and t.cancelled())]
    return RampResult(records, stage_ends, ramp.now(), ramp.stalled.is_set())
