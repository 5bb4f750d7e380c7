"""A stand-in for vLLM 0.34.0's OpenAI server (``python -m vllm.entrypoints.openai.api_server``),
for tests/test_gpu_rehearsal.py: what the harness reads of vLLM, from the argv it was launched with.

- Its flags, parsed strictly (an unknown flag fails the start-up, as vLLM's parser does); it
  listens on ``--uds`` (or ``--host``/``--port``).
- Its start-up log lines (vllm/v1/engine/core.py, VllmConfig.__str__, SpeculativeConfig.__repr__,
  platforms/cuda.py): the engine's config with dtype, quantization and speculative config, and the
  attention backend it selected.
- ``/health``, ``/version``, ``/v1/models`` (max_model_len), ``/metrics`` (the spec-decode counters,
  per position too, the prefix cache's queries and hits, in tokens, and the tokens-per-step
  histogram, ``vllm:iteration_tokens_total``, whose count is the engine's steps),
  ``/reset_prefix_cache`` only with VLLM_SERVER_DEV_MODE=1 (404 otherwise, as vLLM's router).
- Its engine runs batched steps of a known time that grows with K (``EngineLoop``,
  ``step_seconds``), and honours ``rejection_sample_method: synthetic`` with
  ``synthetic_acceptance_length`` or ``_rates`` (refused at start-up where vLLM 0.34 refuses them).
- Streamed completions and chat: ``token_ids`` per chunk with ``return_token_ids`` (the prompt's in
  the first), ``token_id:N`` logprob keys with ``return_tokens_as_token_ids``, a final usage chunk
  carrying ``metrics.speculative_decoding`` under ``--per-request-spec-decode-metrics summary``.
- A deployment that changes under the harness (tests/test_endpoint_trust.py), by environment:
  ``STAND_IN_RESTART_AFTER=N[,M...]`` restarts it (every counter back to 0) as its N-th request ends;
  ``STAND_IN_MODEL_AFTER=N:NAME`` serves model NAME from then on (another model behind the URL).
- ``STAND_IN_OTHER_MODEL=NAME``: its ``/metrics`` also count model NAME (a server shared by two
  models): every counter of its own once more under NAME's label, 10 times the drafts and 25 times
  the rest (another tau).
- ``STAND_IN_RESET_FAILS=N``: the first N prefix-cache resets answer ``{"success": false}``, as
  vLLM 0.34 does while a request's blocks are still held (its route says callers may retry).
- A GPU server's runtime as vLLM 0.34 logs it: the flags given (``non-default args``: async
  scheduling, ``--max-num-seqs``), the decode sizes captured as CUDA graphs up to the ceiling
  (``--compilation-config``'s ``max_cudagraph_capture_size``, else 512, Hopper's default; none with
  ``--enforce-eager``), a step past the ceiling slower (``EngineLoop``); ``--trust-remote-code``
  and any ``--tensor-parallel-size`` taken; ``STAND_IN_STARTUP_S`` seconds to start.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from aiohttp import web
from stand_in_engine import (
    Acceptance,
    EngineLoop,
    Streamer,
    chunk_id,
    device_line,
    diverges,
    garbled,
    launch_fault,
    log,
    logprobs,
    output_ids,
    prompt_ids,
    prompt_text,
    requested_top,
    serve,
    served_k,
    slow_start,
    step_seconds,
    steps,
    stream,
    synthetic_rates,
    token_text,
)

from vllm import __version__

RESTART_AFTER_ENV = "STAND_IN_RESTART_AFTER"
MODEL_AFTER_ENV = "STAND_IN_MODEL_AFTER"
RESET_FAILS_ENV = "STAND_IN_RESET_FAILS"
BACKENDS = ["FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION"]
NO_DRAFT_MODEL = ("ngram", "suffix", "extract_hidden_states")  # SpeculativeConfig.__repr__ shows model=None


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="vllm.entrypoints.openai.api_server", allow_abbrev=False)
    parser.add_argument("--model", required=True)
    parser.add_argument("--served-model-name", required=True)
    parser.add_argument("--uds")
    parser.add_argument("--host")
    parser.add_argument("--port", type=int)
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--max-model-len", type=int, required=True)
    parser.add_argument("--tensor-parallel-size", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--generation-config", default="auto")
    parser.add_argument("--quantization")
    parser.add_argument("--attention-backend")
    parser.add_argument("--enforce-eager", action="store_true")
    parser.add_argument("--speculative-config", type=json.loads)
    parser.add_argument("--per-request-spec-decode-metrics", choices=("none", "summary", "detailed"))
    parser.add_argument("--trust-remote-code", action="store_true")
    parser.add_argument("--compilation-config", type=json.loads, default={})
    parser.add_argument("--max-num-seqs", type=int)
    parser.add_argument("--async-scheduling", action=argparse.BooleanOptionalAction)
    return parser.parse_args(argv)


DEFAULT_CEILING = 512  # vLLM's largest captured step on Hopper (config/vllm.py, _set_cudagraph_sizes)


def capture_sizes(args: argparse.Namespace, k: int) -> list[int]:
    """The step sizes (tokens) captured as CUDA graphs: vLLM's grid to the ceiling and each uniform
    decode batch of K + 1 tokens a request that fits; none when eager."""
    if args.enforce_eager:
        return []
    ceiling = args.compilation_config.get("max_cudagraph_capture_size") or DEFAULT_CEILING
    grid = {1, 2, 4, *range(8, ceiling + 1, 8)}
    return sorted(grid | {n * (k + 1) for n in range(1, ceiling // (k + 1) + 1)})


class VllmStandIn:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        spec = args.speculative_config
        self.k = served_k(int(spec["num_speculative_tokens"])) if spec else 0
        self.method = spec["method"] if spec else None
        # synthetic verification's per-position rates (None: the stand-ins' pattern); ValueError:
        # vLLM refuses the config, and the server never starts
        self.rates = synthetic_rates(self.k, spec) if spec else None
        self.model = args.served_model_name
        self.ended = 0  # requests answered, for the changes the environment asks for
        self.resets_asked = 0  # prefix-cache resets asked for (STAND_IN_RESET_FAILS refuses the first)
        self.in_flight = 0  # requests being answered (STAND_IN_DIVERGE_ABOVE reads it)
        self._restart()

    def _restart(self) -> None:
        """Everything a process keeps in memory, fresh: what a restarted server reports."""
        self.counts = Acceptance(self.k) if self.k else None
        sizes = capture_sizes(self.args, self.k)
        self.engine = EngineLoop(step_seconds(self.k), self.k + 1, max(sizes) if sizes else None)
        self.queries = self.hits = self.generated = 0
        self.cached: set[str] = set()

    def _request_ended(self) -> None:
        self.ended += 1
        if str(self.ended) in os.environ.get(RESTART_AFTER_ENV, "").split(","):
            log("stand-in: restarting (every counter back to 0)")
            self._restart()
        after, _, name = os.environ.get(MODEL_AFTER_ENV, "").partition(":")
        if after and self.ended == int(after):
            log(f"stand-in: now serving {name}")
            self.model = name

    def startup_log(self) -> None:
        args, spec = self.args, self.args.speculative_config
        speculative = "None"
        if spec:
            model = None if self.method in NO_DRAFT_MODEL else spec.get("model")
            speculative = (
                f"SpeculativeConfig(method={self.method!r}, model={model!r}, num_spec_tokens={self.k})"
            )
        dtype = "bfloat16" if args.dtype == "auto" else args.dtype
        given = {"model": args.model}
        if args.async_scheduling is not None:
            given["async_scheduling"] = args.async_scheduling
        if args.max_num_seqs is not None:
            given["max_num_seqs"] = args.max_num_seqs
        log(f"INFO [api_utils.py:286] non-default args: {given!r}")
        sizes = capture_sizes(args, self.k)
        mode = "<CUDAGraphMode.NONE: 0>" if not sizes else "<CUDAGraphMode.FULL_AND_PIECEWISE: 2>"
        compilation = (
            f"{{'cudagraph_mode': {mode}, 'cudagraph_capture_sizes': {sizes}, "
            f"'max_cudagraph_capture_size': {max(sizes) if sizes else None}}}"
        )
        log(f"stand-in vLLM: {device_line()}")
        log(
            f"INFO [core.py:154] Initializing a V1 LLM engine (v{__version__}) with config: "
            f"model={args.model!r}, speculative_config={speculative}, tokenizer={args.model!r}, "
            f"skip_tokenizer_init=False, dtype=torch.{dtype}, max_seq_len={args.max_model_len}, "
            f"tensor_parallel_size={args.tensor_parallel_size}, quantization={args.quantization}, "
            f"enforce_eager={args.enforce_eager}, device_config=cuda, seed={args.seed}, "
            f"served_model_name={args.served_model_name}, enable_prefix_caching=True, "
            f"compilation_config={compilation}"
        )
        backend = args.attention_backend or BACKENDS[0]
        log(f"INFO [cuda.py:550] Using {backend} attention backend out of potential backends: {BACKENDS}.")

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/health", lambda _: web.Response())
        app.router.add_get("/version", lambda _: web.json_response({"version": __version__}))
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/metrics", self.metrics)
        if os.environ.get("VLLM_SERVER_DEV_MODE") == "1":  # dev-mode routes only
            app.router.add_post("/reset_prefix_cache", self.reset_prefix_cache)
        app.router.add_post("/v1/completions", self.generate)
        app.router.add_post("/v1/chat/completions", self.generate)
        return app

    async def models(self, _: web.Request) -> web.Response:
        model = {
            "id": self.model,
            "object": "model",
            "owned_by": "vllm",
            "root": self.args.model,
            "max_model_len": self.args.max_model_len,
        }
        return web.json_response({"object": "list", "data": [model]})

    async def reset_prefix_cache(self, _: web.Request) -> web.Response:
        self.resets_asked += 1
        if self.resets_asked <= int(os.environ.get(RESET_FAILS_ENV, "0")):
            return web.json_response({"success": False})  # blocks still held: the caller may retry
        self.cached.clear()
        return web.json_response({"success": True})

    async def metrics(self, _: web.Request) -> web.Response:
        labels = f'engine="0",model_name="{self.model}"'
        lines = [
            f"vllm:prefix_cache_queries_total{{{labels}}} {float(self.queries)}",
            f"vllm:prefix_cache_hits_total{{{labels}}} {float(self.hits)}",
            f"vllm:generation_tokens_total{{{labels}}} {float(self.generated)}",
        ]
        counts = self.counts
        if counts is not None:  # vLLM registers the spec-decode counters only when it speculates
            lines += [
                "# TYPE vllm:spec_decode_num_drafts_total counter",
                f"vllm:spec_decode_num_drafts_total{{{labels}}} {float(counts.steps)}",
                f"vllm:spec_decode_num_draft_tokens_total{{{labels}}} {float(counts.proposed)}",
                f"vllm:spec_decode_num_accepted_tokens_total{{{labels}}} {float(counts.accepted)}",
            ]
            lines += [
                f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels},position="{p}"}} {float(n)}'
                for p, n in enumerate(counts.per_position)
            ]
        lines += self.engine.histogram("vllm:iteration_tokens_total", labels)  # registered always
        other = os.environ.get("STAND_IN_OTHER_MODEL")
        if other:  # another model's counts on the same endpoint, under its own label
            mine, theirs = f'model_name="{self.model}"', f'model_name="{other}"'
            for line in [line for line in lines if not line.startswith("#") and mine in line]:
                name, value = line.rsplit(" ", 1)
                scale = 10 if "num_drafts" in name or "num_draft_tokens" in name else 25  # another tau
                lines.append(f"{name.replace(mine, theirs)} {float(value) * scale}")
        return web.Response(text="\n".join(lines) + "\n")

    def _prefix(self, text: str, tokens: int) -> None:
        self.queries += tokens
        if text in self.cached:
            self.hits += tokens
        self.cached.add(text)

    async def generate(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        chat = request.path == "/v1/chat/completions"
        text = prompt_text(body)
        ids, prompt = output_ids(text, int(body["max_tokens"])), prompt_ids(text)
        self.in_flight += 1
        if diverges(self.method, self.in_flight):
            ids = garbled(ids)
        self._prefix(text, len(prompt))
        top = requested_top(body, chat)
        own = Acceptance(self.k) if self.k else None
        plan = steps(ids, self.k, self.rates)

        async def produce(out: Streamer) -> None:
            if chat:  # the role chunk, with the prompt's ids
                first = self._envelope(chat, [{"index": 0, "delta": {"role": "assistant", "content": ""}}])
                await out.send(first | ({"prompt_token_ids": prompt} if body.get("return_token_ids") else {}))
            for index, step in enumerate(plan):  # the prefill computes the prompt too
                await self.engine.forward(len(step.tokens) + (len(prompt) if index == 0 else 0))
                if step.accepted is not None and own is not None and self.counts is not None:
                    own.count(step.accepted)
                    self.counts.count(step.accepted)
                choice = self._choice(body, chat, step.tokens, top, index == len(plan) - 1)
                if index == 0 and not chat and body.get("return_token_ids"):
                    choice["prompt_token_ids"] = prompt
                await out.send(self._envelope(chat, [choice]))
                self.generated += len(step.tokens)
            if (body.get("stream_options") or {}).get("include_usage"):
                await out.send(self._usage(chat, len(prompt), len(ids), own))
            await out.send("[DONE]")
            self._request_ended()

        try:
            return await stream(request, produce)
        finally:
            self.in_flight -= 1

    def _choice(self, body: dict, chat: bool, tokens: list[int], top: int, last: bool) -> dict[str, Any]:
        text = "".join(token_text(t) for t in tokens)
        choice: dict[str, Any] = {"index": 0, "finish_reason": "length" if last else None}
        choice |= {"delta": {"content": text}} if chat else {"text": text}
        if body.get("return_token_ids"):
            choice["token_ids"] = tokens
        if top:
            as_ids = body.get("return_tokens_as_token_ids")
            choice["logprobs"] = logprobs(
                tokens, top, chat, (lambda t: f"token_id:{t}") if as_ids else token_text
            )
        return choice

    def _envelope(self, chat: bool, choices: list[dict]) -> dict[str, Any]:
        kind = "chat.completion.chunk" if chat else "text_completion"
        return {"id": chunk_id(), "object": kind, "model": self.model, "choices": choices}

    def _usage(self, chat: bool, prompt: int, completion: int, own: Acceptance | None) -> dict[str, Any]:
        chunk = self._envelope(chat, [])
        chunk["usage"] = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
        if own is not None and self.args.per_request_spec_decode_metrics in ("summary", "detailed"):
            chunk["metrics"] = {  # RequestSpecDecodeMetrics.to_dict
                "speculative_decoding": {
                    "mean_acceptance_length": 1 + own.accepted / own.steps if own.steps else 1.0,
                    "draft_acceptance_rate": own.accepted / own.proposed if own.proposed else 0.0,
                    "acceptance_histogram": own.histogram,
                    "num_spec_steps": own.steps,
                    "num_accepted_draft_tokens": own.accepted,
                    "num_draft_tokens": own.proposed,
                    "num_spec_tokens": own.k,
                }
            }
        return chunk


def main(argv: list[str]) -> None:
    args = parse(argv)
    if args.per_request_spec_decode_metrics not in (None, "none") and not args.speculative_config:
        sys.exit("--per-request-spec-decode-metrics requires speculative decoding")  # config/vllm.py
    try:
        engine = VllmStandIn(args)
    except ValueError as exc:  # SpeculativeConfig's own refusal, before the engine starts
        sys.exit(f"ValueError: {exc}")
    engine.startup_log()
    slow_start()
    launch_fault((args.speculative_config or {}).get("method", "baseline"))
    serve(engine.app(), args.host, args.port, args.uds)


if __name__ == "__main__":
    main(sys.argv[1:])
