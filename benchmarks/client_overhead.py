"""What the client costs: CPU per streamed token and the one-core ceiling, harness vs the peer.

Starts ``benchmarks/stream_server.py`` (a process of its own that streams pre-encoded
OpenAI-format chunks as fast as it can), then drives it with, in turn:

- the harness's client (``harness.run.client.run_window``, the code path every measured window
  takes: token ids, the prompt's ids, top logprobs when asked, per-chunk timestamps);
- ``vllm bench serve``'s client (``vllm.benchmarks.lib.endpoint_request_func.
  async_request_openai_completions`` with an aiohttp session as ``vllm bench serve`` opens it),
  when vLLM is installed;

at several concurrency levels, in this one process, one after the other. For each it prints the
tokens/s reached (the server is not the limit, so this is the client's ceiling on one core) and
the client's CPU time per streamed token (``time.process_time`` of this process over the
window). Medians of ``--passes`` passes.

    .venv/bin/python benchmarks/client_overhead.py [--concurrency 1 8 64] [--tokens 256]
        [--requests 64] [--tokens-per-chunk 1] [--logprobs 0] [--passes 3]
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import harness.run.client  # noqa: E402
from harness.config.load import Load, Sampling  # noqa: E402
from harness.config.workloads import LoadedWorkload, Prompt, Workload  # noqa: E402
from harness.run.server import free_port  # noqa: E402

Client = Callable[
    [str, int, int, int, int], Awaitable[int]
]  # (url, concurrency, requests, tokens, logprobs) -> tokens


async def harness_client(url: str, concurrency: int, requests: int, tokens: int, logprobs: int) -> int:
    workload = LoadedWorkload(
        Workload.model_validate(
            {
                "name": "bench",
                "category": "code",
                "prompt_format": "raw",
                "source": {"path": "none.jsonl", "format": "jsonl"},
            }
        ),
        [Prompt(f"p{i}", "def f(x):") for i in range(requests)],
        "none",
    )
    load = Load(concurrency=[concurrency], num_prompts=requests, max_output_tokens=tokens, ignore_eos=True)
    fields = {"return_token_ids": True}
    result = await harness.run.client.run_window(
        url,
        workload,
        workload.prompts,
        concurrency,
        Sampling(temperature=0),
        load,
        top_logprobs=logprobs,
        engine_fields=fields,
    )
    assert all(r.ok for r in result.records), [r.error for r in result.records if not r.ok][:3]
    return sum(len(r.token_ids) for r in result.records)


async def peer_client(url: str, concurrency: int, requests: int, tokens: int, logprobs: int) -> int:
    import aiohttp
    from vllm.benchmarks.lib.endpoint_request_func import RequestFuncInput, async_request_openai_completions

    connector = aiohttp.TCPConnector(
        limit=concurrency,
        limit_per_host=concurrency,
        ttl_dns_cache=300,
        use_dns_cache=True,
        keepalive_timeout=60,
        enable_cleanup_closed=True,
        force_close=False,
    )
    semaphore = asyncio.Semaphore(concurrency)
    async with aiohttp.ClientSession(
        connector=connector, trust_env=True, timeout=aiohttp.ClientTimeout(total=6 * 60 * 60)
    ) as session:

        async def one(i: int) -> int:
            async with semaphore:
                out = await async_request_openai_completions(
                    RequestFuncInput(
                        prompt="def f(x):",
                        api_url=f"{url}/v1/completions",
                        prompt_len=4,
                        output_len=tokens,
                        model="target",
                        logprobs=logprobs or None,
                        ignore_eos=True,
                    ),
                    session,
                )
                assert out.success, out.error
                return out.output_tokens or 0

        return sum(await asyncio.gather(*(one(i) for i in range(requests))))


def start_server(port: int, per_chunk: int) -> subprocess.Popen:
    server = subprocess.Popen(
        [
            sys.executable,
            str(HERE / "stream_server.py"),
            "--port",
            str(port),
            "--tokens-per-chunk",
            str(per_chunk),
        ]
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return server
        except OSError:
            time.sleep(0.1)
    server.kill()
    raise SystemExit("the stream server did not start")


def measure(
    client: Client, url: str, concurrency: int, requests: int, tokens: int, logprobs: int
) -> tuple[float, float]:
    """(tokens/s, client CPU us per token) of one pass."""
    wall, cpu = time.perf_counter(), time.process_time()
    counted = asyncio.run(client(url, concurrency, requests, tokens, logprobs))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    assert counted == requests * tokens, (counted, requests * tokens)
    return counted / wall, 1e6 * cpu / counted


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--tokens-per-chunk", type=int, default=1)
    parser.add_argument(
        "--logprobs", type=int, default=0, help="top logprobs per token (the harness asks 2 for exactness)"
    )
    parser.add_argument("--passes", type=int, default=3)
    args = parser.parse_args()

    clients: dict[str, Client] = {"harness": harness_client}
    try:
        import vllm.benchmarks.lib.endpoint_request_func  # noqa: F401

        clients["vllm bench serve"] = peer_client
    except ImportError:
        print("vLLM is not installed: measuring the harness's client only")
    port = free_port()
    server = start_server(port, args.tokens_per_chunk)
    url = f"http://127.0.0.1:{port}"
    try:
        cpu_model = next(
            (
                line.split(":", 1)[1].strip()
                for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")
            ),
            platform.processor(),
        )
        print(
            f"# {cpu_model}; Python {platform.python_version()}; {args.requests} requests x {args.tokens} "
            f"tokens, {args.tokens_per_chunk} token(s) per chunk, top logprobs {args.logprobs}; median of "
            f"{args.passes} passes"
        )
        print("| client | concurrency | tokens/s | client CPU us/token |")
        print("|---|---|---|---|")
        for concurrency in args.concurrency:
            for name, client in clients.items():
                measure(
                    client, url, concurrency, min(args.requests, 8), args.tokens, args.logprobs
                )  # warm-up
                passes = [
                    measure(client, url, concurrency, args.requests, args.tokens, args.logprobs)
                    for _ in range(args.passes)
                ]
                rate = statistics.median(p[0] for p in passes)
                cost = statistics.median(p[1] for p in passes)
                print(f"| {name} | {concurrency} | {rate:,.0f} | {cost:.1f} |", flush=True)
    finally:
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    main()
