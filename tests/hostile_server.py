"""A hostile OpenAI-format server (aiohttp, a process of its own) for the client's tests: what it
sends for ``/v1/completions`` depends on the request's prompt.

- ``good``: a well-formed vLLM-shaped stream of 4 tokens, a usage chunk and ``[DONE]``;
- ``not-an-object``: ``data: [1]``;  ``null-choice``: ``{"choices": [null]}``;
  ``int-token-ids``: ``{"choices": [{"token_ids": 5}]}``;  ``not-json``: ``data: {oops``;
  ``bad-sglext``: an ``sglext`` that is a string;
- ``huge-error``: status 500 with a 200 MiB body, streamed a MiB at a time;
- ``endless-event``: a 200 OK stream whose one ``data:`` line never ends (no blank line) until the
  client goes away;
- ``control-error``: status 500 whose body holds NUL, \x01 and an ESC colour sequence;
- ``token-flood``: well-formed events of 200,000 token ids each, without a finish_reason, until the
  client goes away;
- ``abort``: 2 tokens, the second with finish_reason "abort" (an engine that dropped the request);
  ``overrun``: 60 tokens more than the request's max_tokens (under the client's memory guard), then
  "length"; ``no-ids``: ``good``'s text without token ids; ``error-event``: 2 tokens, then vLLM's
  error event (``{"error": {...}}``) and ``[DONE]`` without a finish_reason;
- ``echo-auth``: status 401 whose body echoes the request's ``Authorization`` header (a Bearer key,
  or the Basic form of a URL's ``user:pass``), as a careless gateway's error page does;
  ``echo-auth-late``: the same after 490 characters, where a 500-character cut falls inside it;
  ``echo-auth-first``: ``echo-auth`` for the server's first request, ``good`` after it (a gateway
  that refused once: the arm measures, its one failed request's error stored).

``/version`` and ``/v1/models`` answer as an existing vLLM server's would, with a version and a model
id that carry terminal escapes (``HOSTILE_VERSION``, ``HOSTILE_MODEL``: an erase, an OSC title).

    python tests/hostile_server.py --port 8766 [--every MODE]

With ``--every MODE`` every request behaves as that prompt's mode, and ``/health`` and ``/metrics``
answer: a stand-in engine a whole ``bench run`` launches (tests/chaos_bench.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json

from aiohttp import web

MIB = b"x" * 2**20
# what the server reports of itself: an erase-screen and an OSC window-title sequence in each
HOSTILE_VERSION = "0.31.0\x1b[2J\x1b]0;owned-version\x07"
HOSTILE_MODEL = "target\x1b]0;owned-model\x07\x1b[2J"


def _event(payload: object) -> bytes:
    return b"data: " + (payload if isinstance(payload, bytes) else json.dumps(payload).encode()) + b"\n\n"


def good_chunks() -> list[bytes]:
    chunks = [
        {"choices": [{"index": 0, "text": f" t{i}", "token_ids": [i], "finish_reason": None}]}
        for i in range(3)
    ]
    chunks.append({"choices": [{"index": 0, "text": " t3", "token_ids": [3], "finish_reason": "length"}]})
    chunks.append({"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 4}})
    return [_event(c) for c in chunks] + [b"data: [DONE]\n\n"]


MALFORMED = {
    "not-an-object": b"[1]",
    "null-choice": {"choices": [None]},
    "int-token-ids": {"choices": [{"index": 0, "text": "a", "token_ids": 5}]},
    "not-json": b"{oops",
    "bad-sglext": {"sglext": "no", "choices": [{"index": 0, "text": "a", "token_ids": [1]}]},
}


def _tokens(ids: list[int], last: str | None, with_ids: bool = True) -> list[bytes]:
    """One event per token id, the last with ``last`` as its finish_reason, then usage and [DONE]."""
    chunks = []
    for n, i in enumerate(ids):
        choice = {"index": 0, "text": f" t{i}", "finish_reason": last if n == len(ids) - 1 else None}
        chunks.append({"choices": [choice | ({"token_ids": [i]} if with_ids else {})]})
    usage = {"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": len(ids)}}
    return [_event(c) for c in [*chunks, usage]] + [b"data: [DONE]\n\n"]


# streams that end without a finished answer, by mode, from the request's max_tokens
UNFINISHED = {
    "abort": lambda asked: _tokens([0, 1], "abort"),
    "overrun": lambda asked: _tokens(list(range(asked + 60)), "length"),
    "no-ids": lambda asked: _tokens([0, 1, 2, 3], "length", with_ids=False),
    "error-event": lambda asked: (
        _tokens([0, 1], None)[:2]
        + [_event({"error": {"message": "engine core died", "type": "InternalServerError", "code": 500}})]
        + [b"data: [DONE]\n\n"]
    ),
}


async def completions(request: web.Request) -> web.StreamResponse:
    prompt = request.app["every"] or (await request.json())["prompt"]
    if prompt == "echo-auth-first":
        request.app["answered"] = answered = request.app.get("answered", 0) + 1
        prompt = "echo-auth" if answered == 1 else "good"
    if prompt in ("echo-auth", "echo-auth-late"):
        pad = "." * 490 if prompt == "echo-auth-late" else ""
        return web.Response(status=401, text=f"{pad}refused: {request.headers.get('Authorization', 'none')}")
    if prompt == "control-error":
        return web.Response(status=500, body=b"bad\x00thing \x01 \x1b[31mred\x1b[0m")
    if prompt == "huge-error":
        response = web.StreamResponse(status=500)
        await response.prepare(request)
        for _ in range(200):
            await response.write(MIB)  # the client stops reading: the write fails, the handler ends
        return response
    response = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await response.prepare(request)
    if prompt == "endless-event":
        await response.write(b"data: {")
        while True:  # until the client closes the connection (ConnectionResetError ends the handler)
            await response.write(b"1" * 65536)
            await asyncio.sleep(0)
    if prompt == "token-flood":
        flood = _event(
            {"choices": [{"index": 0, "text": "", "token_ids": [7] * 200_000, "finish_reason": None}]}
        )
        while True:  # each event under the client's event cap; the stream under no cap of its own
            await response.write(flood)
            await asyncio.sleep(0)
    for chunk in await _answer(request, prompt):
        await response.write(chunk)
    return response


async def _answer(request: web.Request, prompt: str) -> list[bytes]:
    """What a mode that streams a whole answer sends: an unfinished one, a malformed event first, or good."""
    if prompt in UNFINISHED:
        return UNFINISHED[prompt]((await request.json()).get("max_tokens") or 4)
    return ([_event(MALFORMED[prompt])] if prompt in MALFORMED else []) + good_chunks()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--every", help="every request behaves as this prompt's mode")
    args = parser.parse_args()
    app = web.Application()
    app["every"] = args.every
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", completions)
    app.router.add_get("/health", lambda request: web.Response(text="ok"))
    app.router.add_get("/metrics", lambda request: web.Response(text=""))
    app.router.add_get("/version", lambda request: web.json_response({"version": HOSTILE_VERSION}))
    models = {"data": [{"id": HOSTILE_MODEL, "max_model_len": 1024}]}
    app.router.add_get("/v1/models", lambda request: web.json_response(models))
    web.run_app(app, host="127.0.0.1", port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
