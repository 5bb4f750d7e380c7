"""Faults without an engine: the no-progress watchdog, the run lock, moving an arm aside."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.config.load import Load, Sampling
from harness.config.workloads import LoadedWorkload, Prompt, Workload
from harness.core.errors import UserError
from harness.results import RunDir
from harness.run.client import run_window

WORKLOAD = LoadedWorkload(
    definition=Workload.model_validate(
        {
            "name": "w",
            "category": "test",
            "source": {"path": "x.jsonl", "format": "jsonl"},
            "prompt_format": "raw",
        }
    ),
    prompts=[Prompt("a", "hello"), Prompt("b", "world"), Prompt("c", "again")],
    content_sha256="0",
)


async def _stalling_server(ready: asyncio.Future) -> None:
    """Answers with one streamed token, then never sends another byte: a hung engine, as the
    client sees it (the real-engine version of this test SIGSTOPs vLLM)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        chunk = b'data: {"choices":[{"text":"x","token_ids":[7],"finish_reason":null}]}\n\n'
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
        )
        writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        await writer.drain()
        await asyncio.sleep(3600)

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    ready.set_result(server.sockets[0].getsockname()[1])
    async with server:
        await server.serve_forever()


def _window_against_stalling_server(load: Load, prompts: list[Prompt], concurrency: int):
    async def scenario():
        ready = asyncio.get_running_loop().create_future()
        server = asyncio.ensure_future(_stalling_server(ready))
        port = await ready
        try:
            return await run_window(
                f"http://127.0.0.1:{port}", WORKLOAD, prompts, concurrency, Sampling(temperature=0), load
            )
        finally:
            server.cancel()

    return asyncio.run(scenario())


def test_watchdog_ends_a_window_that_makes_no_progress() -> None:
    load = Load(
        concurrency=[2], num_prompts=3, max_output_tokens=8, stall_timeout_s=1.0, request_timeout_s=60
    )
    result = _window_against_stalling_server(load, WORKLOAD.prompts, 2)
    assert result.stalled and result.duration_s < 10
    assert len(result.records) == 2  # the third prompt never got a slot, so it was never sent
    assert all(r.error.startswith("stalled") and r.token_ids == [7] for r in result.records)


def test_request_deadline_is_total_not_per_read() -> None:
    load = Load(
        concurrency=[1], num_prompts=1, max_output_tokens=8, stall_timeout_s=60, request_timeout_s=1.0
    )
    result = _window_against_stalling_server(load, WORKLOAD.prompts[:1], 1)
    assert not result.stalled and result.records[0].error.startswith("timeout")


def test_lock_refuses_a_live_writer_and_takes_over_a_dead_one(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path, "r")
    refused = pytest.raises(UserError, match=f"another bench process \\(pid {os.getpid()}\\)")
    with run.lock(), refused, run.lock():
        pass
    assert not (run.root / "run.lock").exists()
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    (run.root / "run.lock").write_text(dead.stdout)
    with run.lock():
        assert (run.root / "run.lock").read_text().strip() == str(os.getpid())


def test_set_aside_keeps_every_attempt(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path, "r")
    for attempt in (1, 2):
        run.arm_dir("a").mkdir(parents=True)
        (run.arm_dir("a") / "samples.jsonl").write_text(json.dumps({"attempt": attempt}) + "\n")
        run.set_aside("a")
    kept = sorted(p.name for p in (run.root / "arms").iterdir())
    assert kept == ["a.attempt-1", "a.attempt-2"]
    assert run.set_aside("a") is None
