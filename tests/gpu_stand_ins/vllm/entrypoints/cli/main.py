"""``vllm serve MODEL [flags]`` for the stand-in vLLM, as ``python -m vllm.entrypoints.cli.main``
(what the ``vllm`` console script runs): the model is positional, and ``--model`` is refused as
vLLM's ``serve`` refuses it; the flags go to the stand-in OpenAI server as they would to vLLM's."""

from __future__ import annotations

import sys

from vllm.entrypoints.openai import api_server


def main(argv: list[str]) -> None:
    if not argv or argv[0] != "serve" or len(argv) < 2 or argv[1].startswith("-"):
        sys.exit("stand-in vllm: usage: vllm serve MODEL [flags]")
    if "--model" in argv:  # vLLM: "With `vllm serve`, you should provide the model as a positional argument"
        sys.exit("stand-in vllm: with `vllm serve`, give the model as a positional argument, not --model")
    api_server.main(["--model", argv[1], *argv[2:]])


if __name__ == "__main__":
    main(sys.argv[1:])
