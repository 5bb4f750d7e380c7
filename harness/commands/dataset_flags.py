"""``--dataset``, ``--input-len``, ``--output-len`` (``bench run``, ``bench validate``): the regime's
workloads replaced for this run, as overrides (``harness.config.datasets``)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.core.overrides import Override


def add_dataset_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "workloads from the command line",
        "replace the regime's workloads for this run (like vLLM's --dataset-name random and AIPerf's "
        "--input-file); recorded and fingerprinted like --set",
    )
    group.add_argument(
        "--dataset",
        metavar="random|FILE.jsonl",
        help="random: load.num_prompts prompts of exactly --input-len tokens of the target's tokenizer, "
        "seeded by sampling.seed (the same seed, the same prompts), sent raw to /v1/completions, and, as "
        "vLLM's random dataset does, load.ignore_eos set so every request generates max_output_tokens "
        "(greedy tokens past an EOS are still the target's, so the exactness check holds; --set "
        "load.ignore_eos=false to stop at EOS). FILE.jsonl: one object per line with a 'prompt' string "
        "(raw) or a 'messages' list (chat)",
    )
    group.add_argument(
        "--input-len",
        type=int,
        metavar="N",
        help="with --dataset random: tokens per prompt, as the engine counts",
    )
    group.add_argument(
        "--output-len", type=int, metavar="M", help="with --dataset: load.max_output_tokens of every request"
    )


def dataset_overrides_from(args: argparse.Namespace) -> list[Override]:
    from harness.config.datasets import dataset_overrides

    return dataset_overrides(args.dataset, args.input_len, args.output_len)
