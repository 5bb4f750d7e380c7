"""A stand-in for SGLang 0.5.23's server (``python -m sglang.launch_server``), for
tests/test_gpu_rehearsal.py: what the harness reads of SGLang, from the argv it was launched with.

- Its flags, parsed strictly, ``--config FILE`` merged in (the harness's per-start API key); every
  route but ``/health*`` and ``/metrics`` refuses a request without that key (401).
- ``/server_info``: the resolved server arguments (context length, dtype, quantization, the
  attention backends, the speculative algorithm and draft tokens, which count the verified token:
  K + 1), its version and the lifetime acceptance figure in ``internal_states``.
- ``/metrics`` (with ``--enable-metrics``): the active speculative steps and draft tokens gauges.
- Streamed completions (``token_ids`` per chunk, the prompt's in the first) and chat (ids in
  ``sglext`` at the end), each ending with ``sglext.spec_tokens_details`` (verify steps, correct
  and proposed drafts, the histogram of correct drafts per step) when asked and speculating.
- ``/flush_cache``, ``/health_generate``, ``/v1/models``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import yaml
from aiohttp import web
from stand_in_engine import (
    Acceptance,
    Streamer,
    chunk_id,
    device_line,
    forward_pass,
    log,
    logprobs,
    output_ids,
    prompt_ids,
    prompt_text,
    requested_top,
    serve,
    served_k,
    steps,
    stream,
    token_text,
)

from sglang import __version__

OPEN_ROUTES = ("/health", "/health_generate", "/metrics")
DEFAULT_BACKEND = "fa3"  # what SGLang resolves on a Hopper GPU when none is pinned


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="sglang.launch_server", allow_abbrev=False)
    parser.add_argument("--model-path", required=True)
    parser.add_argument("--served-model-name", required=True)
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--context-length", type=int)
    parser.add_argument("--tp-size", type=int, default=1)
    parser.add_argument("--random-seed", type=int)
    parser.add_argument("--enable-metrics", action="store_true")
    parser.add_argument("--quantization")
    parser.add_argument("--attention-backend")
    parser.add_argument("--disable-decode-cuda-graph", action="store_true")
    parser.add_argument("--disable-prefill-cuda-graph", action="store_true")
    parser.add_argument("--speculative-algorithm")
    parser.add_argument("--speculative-num-draft-tokens", type=int)
    parser.add_argument("--speculative-num-steps", type=int)
    parser.add_argument("--speculative-eagle-topk", type=int)
    parser.add_argument("--speculative-draft-model-path")
    parser.add_argument("--speculative-ngram-min-bfs-breadth", type=int)
    parser.add_argument("--speculative-ngram-max-bfs-breadth", type=int)
    parser.add_argument("--config")
    parser.add_argument("--api-key")
    args = parser.parse_args(argv)
    if args.config:  # SGLang merges the file's keys into its arguments (api-key: --api-key)
        with open(args.config) as handle:
            for key, value in (yaml.safe_load(handle) or {}).items():
                setattr(args, key.replace("-", "_"), value)
    return args


class SglangStandIn:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        # SGLang counts the verified token in num-draft-tokens: K drafts are K + 1 draft tokens; with
        # topk 1 it makes them num_steps + 1 (arg_groups/speculative_hook.py)
        draft_tokens = args.speculative_num_draft_tokens or 1
        if args.speculative_eagle_topk == 1 and args.speculative_num_steps is not None:
            if draft_tokens != args.speculative_num_steps + 1:
                log("WARNING speculative_num_draft_tokens is adjusted to speculative_num_steps + 1")
            draft_tokens = args.speculative_num_steps + 1
        launched = draft_tokens - 1 if args.speculative_algorithm else 0
        self.k = served_k(launched) if launched else 0
        self.counts = Acceptance(self.k) if self.k else None
        self.completion_tokens = 0

    def server_info(self) -> dict[str, Any]:
        args, counts = self.args, self.counts
        lifetime = self.completion_tokens / counts.steps if counts and counts.steps else None
        return {
            "model_path": args.model_path,
            "served_model_name": args.served_model_name,
            "context_length": args.context_length,
            "dtype": args.dtype,
            "quantization": args.quantization,
            "tp_size": args.tp_size,
            "random_seed": args.random_seed,
            "attention_backend": args.attention_backend,
            "decode_attention_backend": args.attention_backend or DEFAULT_BACKEND,
            "speculative_algorithm": args.speculative_algorithm,
            "speculative_num_draft_tokens": self.k + 1 if self.k else None,
            "speculative_num_steps": args.speculative_num_steps,
            "speculative_eagle_topk": args.speculative_eagle_topk,
            "speculative_draft_model_path": args.speculative_draft_model_path,
            "speculative_draft_attention_backend": None,
            "launch_command": "python -m sglang.launch_server (stand-in)",
            "internal_states": [{"avg_spec_accept_length": lifetime}],
            "version": __version__,
        }

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self.auth])
        app.router.add_get("/health", lambda _: web.Response())
        app.router.add_get("/health_generate", lambda _: web.Response())
        app.router.add_get("/server_info", lambda _: web.json_response(self.server_info()))
        app.router.add_get("/v1/models", self.models)
        if self.args.enable_metrics:
            app.router.add_get("/metrics", self.metrics)
        app.router.add_post("/flush_cache", lambda _: web.Response(text="Cache flushed."))
        app.router.add_post("/v1/completions", self.generate)
        app.router.add_post("/v1/chat/completions", self.generate)
        return app

    @web.middleware
    async def auth(self, request: web.Request, handler: Any) -> web.StreamResponse:
        key = self.args.api_key
        if (
            key
            and request.path not in OPEN_ROUTES
            and request.headers.get("Authorization") != f"Bearer {key}"
        ):
            return web.json_response({"error": "Unauthorized"}, status=401)
        return await handler(request)

    async def models(self, _: web.Request) -> web.Response:
        model = {
            "id": self.args.served_model_name,
            "object": "model",
            "max_model_len": self.args.context_length,
        }
        return web.json_response({"object": "list", "data": [model]})

    async def metrics(self, _: web.Request) -> web.Response:
        labels = f'model_name="{self.args.served_model_name}"'
        lines = [f"sglang:num_running_reqs{{{labels}}} 0.0"]
        if self.k:
            lines += [
                f"sglang:spec_num_steps{{{labels}}} {float(self.args.speculative_num_steps or self.k)}",
                f"sglang:spec_num_draft_tokens{{{labels}}} {float(self.k + 1)}",
            ]
        return web.Response(text="\n".join(lines) + "\n")

    async def generate(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        chat = request.path == "/v1/chat/completions"
        text = prompt_text(body)
        ids, prompt = output_ids(text, int(body["max_tokens"])), prompt_ids(text)
        top = requested_top(body, chat)
        own = Acceptance(self.k) if self.k else None
        plan = steps(ids, self.k)

        async def produce(out: Streamer) -> None:
            if chat:
                await out.send(
                    self._envelope(chat, [{"index": 0, "delta": {"role": "assistant", "content": ""}}])
                )
            for index, step in enumerate(plan):
                await forward_pass()
                if step.accepted is not None and own is not None and self.counts is not None:
                    own.count(step.accepted)
                    self.counts.count(step.accepted)
                choice = self._choice(chat, step.tokens, top, index == len(plan) - 1)
                if not chat and body.get("return_token_ids"):
                    choice["token_ids"] = step.tokens
                    if index == 0:
                        choice["prompt_token_ids"] = prompt
                await out.send(self._envelope(chat, [choice]))
            self.completion_tokens += len(ids)
            sglext = self._sglext(body, chat, prompt, ids, own)
            if sglext:
                await out.send(self._envelope(chat, []) | {"sglext": sglext})
            if (body.get("stream_options") or {}).get("include_usage"):
                usage = {"prompt_tokens": len(prompt), "completion_tokens": len(ids)}
                await out.send(self._envelope(chat, []) | {"usage": usage})
            await out.send("[DONE]")

        return await stream(request, produce)

    def _sglext(
        self, body: dict, chat: bool, prompt: list[int], ids: list[int], own: Acceptance | None
    ) -> dict[str, Any]:
        sglext: dict[str, Any] = {}
        if own is not None and body.get("return_spec_tokens_details"):
            histogram = list(own.histogram)
            while len(histogram) > 1 and histogram[-1] == 0:  # SGLang grows it to the most accepted
                histogram.pop()
            sglext["spec_tokens_details"] = {
                "spec_accept_rate": own.accepted / own.proposed if own.proposed else 0.0,
                "spec_accept_length": len(ids) / own.steps if own.steps else 0.0,
                "spec_num_correct_drafts": own.accepted,
                "spec_num_proposed_drafts": own.proposed,
                "spec_verify_ct": own.steps,
                "spec_correct_drafts_histogram": histogram,
            }
        if chat and body.get("return_input_ids_in_sglext"):
            sglext["input_ids"] = prompt
        if chat and body.get("return_output_ids_in_sglext"):
            sglext["output_ids"] = [ids]
        return sglext

    def _choice(self, chat: bool, tokens: list[int], top: int, last: bool) -> dict[str, Any]:
        text = "".join(token_text(t) for t in tokens)
        choice: dict[str, Any] = {
            "index": 0,
            "finish_reason": "length" if last else None,
            "matched_stop": None,
        }
        choice |= {"delta": {"content": text}} if chat else {"text": text}
        if top:  # keyed by token text
            choice["logprobs"] = logprobs(tokens, top, chat, token_text)
        return choice

    def _envelope(self, chat: bool, choices: list[dict]) -> dict[str, Any]:
        kind = "chat.completion.chunk" if chat else "text_completion"
        return {"id": chunk_id(), "object": kind, "model": self.args.served_model_name, "choices": choices}


def main(argv: list[str]) -> None:
    args = parse(argv)
    engine = SglangStandIn(args)
    log(f"stand-in SGLang: {device_line()}")
    algorithm = args.speculative_algorithm
    log(f"server_args=ServerArgs(model_path={args.model_path!r}, speculative_algorithm={algorithm!r})")
    serve(engine.app(), args.host, args.port, None)


if __name__ == "__main__":
    main(sys.argv[1:])
