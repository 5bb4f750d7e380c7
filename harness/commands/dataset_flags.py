"""``--dataset``, ``--input-len``, ``--output-len`` (``bench run``, ``bench validate``): the regime's
workloads replaced for this run, as overrides (``harness.config.datasets``).

The lengths are read as text and checked here, in the words of the flag (a whole number within the
workload model's own bounds), so that ``nan`` or ``--input-len 1000001`` is one line and exit 2, not
argparse's usage or the model's traceback."""

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
        metavar="N",
        help="with --dataset random: tokens per prompt, as the engine counts",
    )
    group.add_argument(
        "--output-len", metavar="M", help="with --dataset: load.max_output_tokens of every request"
    )


def token_count(flag: str, text: str | None, most: int | None = None) -> int | None:
    """``text`` as a number of tokens, 1 to ``most``; a UserError naming ``flag`` otherwise."""
    from harness.core.errors import UserError

    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        raise UserError(f"{flag} {text}: expected a whole number of tokens") from None
    if value < 1 or (most is not None and value > most):
        bound = f", at most {most:,}" if most is not None else ""
        raise UserError(f"{flag} {value}: expected a positive number of tokens{bound}")
    return value


def _most(model: type, field: str) -> int | None:
    """A model field's upper bound (``Field(le=...)``): the one place it is written."""
    return next((bound.le for bound in model.model_fields[field].metadata if hasattr(bound, "le")), None)


def dataset_overrides_from(args: argparse.Namespace) -> list[Override]:
    from harness.config.datasets import dataset_overrides
    from harness.config.workloads import RandomPrompts

    input_len = token_count("--input-len", args.input_len, _most(RandomPrompts, "input_len"))
    return dataset_overrides(args.dataset, input_len, token_count("--output-len", args.output_len))
