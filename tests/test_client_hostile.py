"""The client against a server that misbehaves (tests/hostile_server.py, a process of its own):
chunks of the wrong shape, an event that is not JSON, a 200 MiB error body and an event that
never ends each become that request's recorded error; the window completes, the good requests
are measured, and the client's memory stays bounded. Property-based: no sequence of bytes a
server streams makes the client raise."""

from __future__ import annotations

import asyncio
import json
import socket
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from harness.config.engines import get_adapter
from harness.config.load import Load, Sampling
from harness.config.workloads import LoadedWorkload, Prompt, Workload
from harness.run.client import (
    MAX_EVENT_BYTES,
    RequestRecord,
    run_window,
    sse_events,
)
from tests.conftest import local_server

ROOT = Path(__file__).resolve().parent.parent
MALFORMED = ("not-an-object", "null-choice", "int-token-ids", "not-json", "bad-sglext")


@pytest.fixture(scope="module")
def hostile_server() -> str:
    with local_server(ROOT / "tests" / "hostile_server.py") as url:
        yield url


def _window(url: str, texts: list[str], extras=None):
    source = {"path": "x.jsonl", "format": "jsonl"}
    definition = Workload.model_validate(
        {"name": "w", "category": "c", "prompt_format": "raw", "source": source}
    )
    prompts = [Prompt(f"p{i}-{text}", text) for i, text in enumerate(texts)]
    workload = LoadedWorkload(definition, prompts, "sha")
    load = Load(concurrency=[4], num_prompts=len(prompts), max_output_tokens=4, request_timeout_s=60)
    fields = get_adapter("vllm").request_fields("raw", 0)
    return asyncio.run(
        run_window(
            url, workload, prompts, 4, Sampling(temperature=0), load, engine_fields=fields, extras=extras
        )
    )


def test_every_bad_response_is_that_requests_error_and_the_window_goes_on(hostile_server: str) -> None:
    texts = ["good", *MALFORMED, "huge-error", "endless-event", "token-flood", "control-error", "good"]
    tracemalloc.start()
    try:
        result = _window(hostile_server, texts, extras=get_adapter("sglang").absorb_chunk)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert not result.stalled and len(result.records) == len(texts)
    by_text = {record.prompt_id.split("-", 1)[1]: record for record in result.records}
    for record in result.records:
        if record.prompt_id.endswith("-good"):
            assert record.ok and record.token_ids == [0, 1, 2, 3], record.error
    errors = {
        text: by_text[text].error for text in (*MALFORMED, "huge-error", "endless-event", "token-flood")
    }
    assert all(errors.values()), errors
    assert "not a JSON object" in errors["not-an-object"] and "JSONDecodeError" in errors["not-json"]
    assert errors["huge-error"].startswith("HTTP 500: xxx") and len(errors["huge-error"]) <= 510
    assert f"an event over {MAX_EVENT_BYTES // 2**20} MiB with no end" in errors["endless-event"]
    # max_output_tokens 4: at most 2 x 4 + 64 tokens, the first flooding event ends it
    # text from outside is inert: the terminal, summary.md and JUnit get escapes, not control characters
    assert by_text["control-error"].error == "HTTP 500: bad\\x00thing \\x01 \\x1b[31mred\\x1b[0m"
    assert errors["token-flood"].startswith(
        "UnreadableResponse: more than 72 tokens streamed for max_tokens 4"
    )
    # a 200 MiB body read whole used to add 525 MiB; the endless event grew without end
    assert peak < 64 * 2**20, f"the client held {peak / 2**20:.0f} MiB"


def test_a_key_or_url_credentials_an_endpoint_echoes_are_never_recorded(hostile_server: str) -> None:
    """Issue 70, item 7: a server that echoes the request's Authorization header in its error body
    (the key as a Bearer header, a URL's user:pass as a Basic one) has it scrubbed from the
    request's recorded error, before the error is cut to its length (a cut inside the key would
    keep its start)."""
    import base64

    from harness.run import engine_http as http

    key, password = "key-" + "9f" * 16, "pa55word-xyz"
    basic = base64.b64encode(f"us3r:{password}".encode()).decode()
    keyed, with_credentials = hostile_server, hostile_server.replace("://", f"://us3r:{password}@")
    http.register_key(keyed, key)
    try:
        records = [
            *_window(keyed, ["echo-auth", "echo-auth-late"]).records,
            *_window(with_credentials, ["echo-auth", "echo-auth-late"]).records,
        ]
    finally:
        http.register_key(keyed, None)
    errors = [record.error or "" for record in records]
    assert (
        errors[0] == "HTTP 401: refused: Bearer <redacted>"
        and errors[2] == "HTTP 401: refused: Basic <redacted>"
    )
    for error in errors:
        assert error.startswith("HTTP 401: ") and len(error) <= 510, error
        assert not any(part in error for part in (key[:8], password, basic[:8])), error


def test_the_harness_http_ignores_proxies_from_the_environment(hostile_server: str, monkeypatch) -> None:
    """A proxy in the environment (HTTP_PROXY on a cluster login node) must not carry the harness's
    requests to its own loopback server: here the proxy is a closed port."""
    from harness.run import engine_http as http

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{closed}")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    result = _window(hostile_server, ["good"])
    assert result.records[0].ok, result.records[0].error
    import httpx

    with http.client(timeout=2.0) as client:
        assert client.get(hostile_server + "/nothing").status_code in (404, 405)
    with pytest.raises(httpx.ConnectError):  # what trusting the environment would have done
        httpx.get(hostile_server + "/nothing", timeout=2.0)


# --- properties: what the client does with any bytes a server streams ----------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=12,
)
chunk_like = st.fixed_dictionaries(
    {},
    optional={
        "choices": st.lists(
            st.fixed_dictionaries(
                {},
                optional={
                    "token_ids": json_values,
                    "text": json_values,
                    "delta": json_values,
                    "logprobs": json_values,
                    "finish_reason": json_values,
                    "prompt_token_ids": json_values,
                },
            )
            | json_values,
            max_size=3,
        )
        | json_values,
        "usage": json_values,
        "prompt_token_ids": json_values,
        "sglext": json_values,
        "metrics": json_values,
    },
)


class _Stream:
    """The part of an aiohttp response ``send_request`` reads, over a fixed list of reads."""

    def __init__(self, reads: list[bytes]) -> None:
        self.status, self.content = 200, self
        self._reads = reads

    async def iter_any(self):
        for data in self._reads:
            yield data

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc) -> None:
        return None


class _Session:
    def __init__(self, reads: list[bytes]) -> None:
        self._reads = reads

    def post(self, *args, **kwargs) -> _Stream:
        return _Stream(self._reads)


def _stream_bytes(chunks: list) -> list[bytes]:
    return [b"data: " + json.dumps(chunk).encode() + b"\n\n" for chunk in chunks] + [b"data: [DONE]\n\n"]


@given(chunks=st.lists(chunk_like | json_values, max_size=6), engine=st.sampled_from(["vllm", "sglang"]))
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_stream_of_any_shape_ends_in_a_well_typed_record_or_its_error(chunks, engine: str) -> None:
    """Whatever JSON a server streams (with either adapter reading its own fields), the request
    ends with an error, or with a record of the types the store reads: never an exception."""
    from harness.run.client import send_request

    record = RequestRecord("w", "p", 1, "raw")
    extras = get_adapter(engine).absorb_chunk
    asyncio.run(send_request(_Session(_stream_bytes(chunks)), record, "/v1/completions", {}, 0.0, extras))
    assert record.t_done is not None
    if record.error is None:
        assert isinstance(record.finish_reason, str) and isinstance(record.text, str)
        assert all(type(i) is int for i in record.token_ids + record.prompt_token_ids)
        assert all(type(n) is int for _, n, _ in record.chunks)
    else:
        assert isinstance(record.error, str) and len(record.error) <= 500


def test_well_formed_streams_still_come_through_whole() -> None:
    from harness.run.client import send_request

    chunks = [
        {"choices": [{"index": 0, "text": " a", "token_ids": [5, 6], "prompt_token_ids": [1, 2]}]},
        {"choices": [{"index": 0, "text": " b", "token_ids": [7], "finish_reason": "length"}]},
        {"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 3}},
    ]
    record = RequestRecord("w", "p", 1, "raw")
    reads = [b"".join(_stream_bytes(chunks))[i : i + 7] for i in range(0, 400, 7)]  # cut anywhere
    asyncio.run(send_request(_Session(reads), record, "/v1/completions", {}, 0.0))
    assert record.ok and record.token_ids == [5, 6, 7] and record.prompt_token_ids == [1, 2]
    assert record.usage_completion_tokens == 3 and record.text == " a b"


@given(data=st.binary(max_size=400), cuts=st.lists(st.integers(0, 400), max_size=6))
@settings(max_examples=300, deadline=None)
def test_events_split_the_same_however_the_bytes_arrive(data: bytes, cuts: list[int]) -> None:
    """sse_events over a stream read in pieces gives the payloads of the stream read whole."""
    whole, _ = sse_events(data)
    pieces, buffer = [], b""
    for start, end in zip([0, *sorted(cuts)], [*sorted(cuts), len(data)], strict=True):
        payloads, buffer = sse_events(buffer + data[start:end])
        pieces += payloads
    assert pieces == whole


@given(
    lines=st.lists(
        st.one_of(
            st.text(max_size=40),
            st.builds(
                lambda name, label, value: f"vllm:spec_decode_num_{name}_total{{{label}}} {value}",
                st.sampled_from(["drafts", "draft_tokens", "accepted_tokens", "accepted_tokens_per_pos"]),
                st.one_of(st.just(""), st.builds('position="{}"'.format, st.text(max_size=4))),
                st.one_of(st.floats(allow_nan=True), st.sampled_from(["NaN", "+Inf", "-1", "1e400", "x"])),
            ),
        ),
        max_size=12,
    )
)
# a digit str.isdigit accepts and int() refuses (found by this test on a run of the suite)
@example(lines=['vllm:spec_decode_num_accepted_tokens_per_pos_total{position="\u00b9"} 0.0'])
@settings(max_examples=300, deadline=None)
def test_any_metrics_text_gives_finite_counters(lines: list[str]) -> None:
    """What a server's /metrics says is read into finite, non-negative counters, whatever it is
    (a position that is not a number, NaN, a negative count): never an exception mid-run."""
    import math

    from harness.config.engines import get_adapter

    counters = get_adapter("vllm").parse_spec_counters("\n".join(lines))
    values = [
        counters.drafts,
        counters.draft_tokens,
        counters.accepted_tokens,
        *counters.accepted_per_position.values(),
    ]
    assert all(math.isfinite(v) and v >= 0 for v in values)
    assert all(isinstance(p, int) and p >= 0 for p in counters.accepted_per_position)
