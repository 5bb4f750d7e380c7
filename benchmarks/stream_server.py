"""A local OpenAI-format stream server that emits tokens as fast as it can: the client's ceiling.

No engine, no model: each request to ``/v1/completions`` or ``/v1/chat/completions`` streams
``max_tokens`` tokens as server-sent events shaped like vLLM's (``token_ids`` per chunk, the
prompt's ids in the first chunk, ``top_logprobs`` when asked, a usage chunk, ``[DONE]``), with
``--tokens-per-chunk`` tokens per chunk (1: plain decoding; 3-5: what speculation sends). The
chunks are pre-encoded so the server spends almost nothing per token: what limits the tokens/s a
client sees is the client. It runs as its own process, so the client's CPU time can be measured
apart from it.

    python benchmarks/stream_server.py --port 8765 [--tokens-per-chunk 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json

PROMPT_IDS = list(range(1000, 1100))  # a 100-token prompt


def _chunk(chat: bool, first: bool, ids: list[int], logprobs: int, finish: str | None) -> bytes:
    text = "".join(f" t{i}" for i in ids)
    if chat:
        choice: dict = {"index": 0, "delta": {"content": text}, "token_ids": ids, "finish_reason": finish}
        if logprobs:
            choice["logprobs"] = {
                "content": [
                    {
                        "token": f"token_id:{i}",
                        "logprob": -0.1,
                        "top_logprobs": [
                            {"token": f"token_id:{i + k}", "logprob": -0.1 * (k + 1)} for k in range(logprobs)
                        ],
                    }
                    for i in ids
                ]
            }
        body: dict = {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "target",
            "choices": [choice],
        }
        if first:
            body["prompt_token_ids"] = PROMPT_IDS
    else:
        choice = {"index": 0, "text": text, "token_ids": ids, "finish_reason": finish}
        if first:
            choice["prompt_token_ids"] = PROMPT_IDS
        if logprobs:
            choice["logprobs"] = {
                "tokens": [f"token_id:{i}" for i in ids],
                "token_logprobs": [-0.1] * len(ids),
                "top_logprobs": [{f"token_id:{i + k}": -0.1 * (k + 1) for k in range(logprobs)} for i in ids],
            }
        body = {
            "id": "cmpl-bench",
            "object": "text_completion",
            "created": 0,
            "model": "target",
            "choices": [choice],
        }
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


def stream_bytes(chat: bool, max_tokens: int, per_chunk: int, logprobs: int) -> list[bytes]:
    """Every event of one response, encoded once."""
    events, sent = [], 0
    while sent < max_tokens:
        ids = list(range(sent, min(sent + per_chunk, max_tokens)))
        sent += len(ids)
        events.append(_chunk(chat, not events, ids, logprobs, "length" if sent >= max_tokens else None))
    usage = {
        "prompt_tokens": len(PROMPT_IDS),
        "completion_tokens": max_tokens,
        "total_tokens": len(PROMPT_IDS) + max_tokens,
    }
    events.append(b"data: " + json.dumps({"id": "x", "choices": [], "usage": usage}).encode() + b"\n\n")
    events.append(b"data: [DONE]\n\n")
    return events


class StreamServer:
    def __init__(self, per_chunk: int, chunk_delay_s: float = 0.0):
        self.per_chunk = per_chunk
        self.chunk_delay_s = chunk_delay_s
        self.cache: dict[tuple[bool, int, int], list[bytes]] = {}

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:  # keep-alive: one request after another on the connection
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                path = lines[0].split(" ")[1]
                length = next(
                    (
                        int(line.split(":", 1)[1])
                        for line in lines
                        if line.lower().startswith("content-length:")
                    ),
                    0,
                )
                request = json.loads(await reader.readexactly(length)) if length else {}
                chat = path.endswith("/chat/completions")
                # chat asks top logprobs with top_logprobs (logprobs: true); completions with logprobs: N
                logprobs = request.get("top_logprobs") if chat else request.get("logprobs")
                key = (chat, int(request.get("max_tokens", 16)), int(logprobs or 0))
                events = self.cache.get(key)
                if events is None:
                    events = self.cache[key] = stream_bytes(key[0], key[1], self.per_chunk, key[2])
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                    b"transfer-encoding: chunked\r\n\r\n"
                )
                for event in events:
                    writer.write(b"%x\r\n%s\r\n" % (len(event), event))
                    await writer.drain()  # one event per write: the client sees each as it would
                    if self.chunk_delay_s:
                        await asyncio.sleep(self.chunk_delay_s)
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionResetError, BrokenPipeError):
            pass
        finally:
            writer.close()


async def serve(port: int, per_chunk: int, chunk_delay_s: float = 0.0) -> None:
    server = await asyncio.start_server(
        StreamServer(per_chunk, chunk_delay_s).handle, "127.0.0.1", port, backlog=1024
    )
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--tokens-per-chunk", type=int, default=1)
    parser.add_argument(
        "--chunk-delay-s", type=float, default=0.0, help="pause after each event (requests that take time)"
    )
    args = parser.parse_args()
    asyncio.run(serve(args.port, args.tokens_per_chunk, args.chunk_delay_s))


if __name__ == "__main__":
    main()
