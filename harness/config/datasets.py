"""Workloads from the command line: ``--dataset random --input-len N --output-len M`` and
``--dataset FILE.jsonl`` (``bench run``, ``bench validate``), as overrides of the regime.

Each is an override like ``--set`` (``harness.core.overrides``): the regime's ``workloads:`` become
``[{dataset: random, input_len: N}]`` or ``[FILE]`` (absolute), so the regime as run, its
fingerprint, ``regime.json`` (and a resume, which re-reads it) and the prompts' content hash all
carry it.

``random`` is vLLM's ``--dataset-name random``: each prompt a run of consecutive token ids from a
seeded random offset, special tokens left out, decoded, re-encoded and trimmed or extended until
the engine counts exactly N tokens (the text's plus the BOS the tokenizer adds, if any). The offsets
come from the regime's ``sampling.seed``: the same seed and tokenizer, the same prompts. As vLLM does
for this dataset, ``load.ignore_eos`` is set, so every request generates exactly ``max_output_tokens``
(``--output-len``): under greedy sampling the tokens past an EOS are still the target's argmax, so
the exactness check compares like with like, and no window is shortened by a stop token.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Protocol

from harness.config.workloads import (
    LoadedWorkload,
    Prompt,
    RandomPrompts,
    Workload,
    WorkloadSource,
    is_prompt_file,
    loaded_workload,
)
from harness.core.errors import UserError
from harness.core.overrides import Override

RANDOM = "random"
# decode/encode rounds per prompt before its next offset is tried (vLLM's max_retry)
_RETRIES = 10


class Tokenizer(Protocol):
    """What is used of a ``tokenizers.Tokenizer`` (the target's ``tokenizer.json``)."""

    def encode(self, sequence: str, add_special_tokens: bool = ...) -> Any: ...
    def decode(self, ids: list[int], skip_special_tokens: bool = ...) -> str: ...
    def get_vocab_size(self, with_added_tokens: bool = ...) -> int: ...
    def get_added_tokens_decoder(self) -> dict[int, Any]: ...


def dataset_overrides(dataset: str | None, input_len: int | None, output_len: int | None) -> list[Override]:
    """The overrides ``--dataset``, ``--input-len`` and ``--output-len`` make, each recorded as the
    flags were typed; a UserError (exit 2) for what cannot be one."""
    if dataset is None:
        if input_len is not None or output_len is not None:
            flag = "--input-len" if input_len is not None else "--output-len"
            raise UserError(
                f"{flag} goes with --dataset: --dataset random --input-len N --output-len M, or "
                "--dataset FILE.jsonl [--output-len M] (--set load.max_output_tokens=M changes the "
                "regime's own workloads' output length)"
            )
        return []
    given = " ".join(
        f"{flag} {value}"
        for flag, value in (("--dataset", dataset), ("--input-len", input_len), ("--output-len", output_len))
        if value is not None
    )
    for flag, value in (("--input-len", input_len), ("--output-len", output_len)):
        if value is not None and value < 1:
            raise UserError(f"{flag} {value}: expected a positive number of tokens")
    found: list[Override] = []
    if dataset == RANDOM:
        if input_len is None:
            raise UserError(f"{given}: give the prompt length, e.g. --dataset random --input-len 128")
        entry = RandomPrompts(dataset=RANDOM, input_len=input_len).model_dump(mode="json")
        found.append(Override(path="workloads", value=[entry], given=given))
        found.append(Override(path="load.ignore_eos", value=True, given=given))
    else:
        if input_len is not None:
            raise UserError(f"{given}: --input-len is the length of --dataset random's prompts, not a file's")
        file = Path(dataset).expanduser()
        if not is_prompt_file(file):
            raise UserError(
                f"--dataset {dataset}: expected 'random' or a .jsonl file (one object per line with a "
                "'prompt' string or a 'messages' list)"
            )
        if not file.is_file():
            raise UserError(f"--dataset {dataset}: no such file (looked for {file.resolve()})")
        found.append(Override(path="workloads", value=[str(file.resolve())], given=given))
    if output_len is not None:
        found.append(Override(path="load.max_output_tokens", value=output_len, given=given))
    return found


def random_prompts(tokenizer: Tokenizer, input_len: int, count: int, seed: int) -> list[Prompt]:
    """``count`` prompts of exactly ``input_len`` tokens as the engine counts them (``encode`` with
    the tokenizer's special tokens), the same for the same seed and tokenizer."""
    special = {i for i, token in tokenizer.get_added_tokens_decoder().items() if token.special}
    allowed = [i for i in range(tokenizer.get_vocab_size(with_added_tokens=True)) if i not in special]
    extra = len(tokenizer.encode("", add_special_tokens=True).ids)  # a BOS the engine adds
    length = input_len - extra
    if length < 1:
        raise UserError(f"--input-len {input_len}: the tokenizer adds {extra} token(s) itself; give more")
    rng = random.Random(f"random/{seed}")
    prompts = []
    for index in range(count):
        for _ in range(100):  # another offset where the decoded text does not re-encode to the length
            text = _fitted(tokenizer, allowed, length, rng.randrange(len(allowed)) + index, rng)
            if text is not None and len(tokenizer.encode(text, add_special_tokens=True).ids) == input_len:
                break
        else:
            raise UserError(f"no text of exactly {input_len} tokens found for prompt {index} in 100 tries")
        prompts.append(Prompt(prompt_id=f"random-{index}", text=text))
    return prompts


def _fitted(
    tokenizer: Tokenizer, allowed: list[int], length: int, offset: int, rng: random.Random
) -> str | None:
    """vLLM's ``gen_prompt_decode_to_target_len``: decode, re-encode, trim or extend with random
    tokens, until the text encodes to ``length`` tokens (None: not within the retries)."""
    ids = [allowed[(offset + i) % len(allowed)] for i in range(length)]
    for _ in range(_RETRIES):
        text = tokenizer.decode(ids, skip_special_tokens=False)
        ids = list(tokenizer.encode(text, add_special_tokens=False).ids)
        if len(ids) == length:
            return text
        if len(ids) > length:
            ids = ids[:length]
        else:
            ids += [rng.choice(allowed) for _ in range(length - len(ids))]
    return None


def random_workload(
    entry: RandomPrompts, tokenizer: Tokenizer, num_prompts: int, seed: int
) -> LoadedWorkload:
    """The random workload as measured: raw prompts to /v1/completions, hashed like any workload's."""
    definition = Workload(
        name=entry.name,
        category=RANDOM,
        description=f"{num_prompts} random prompts of {entry.input_len} tokens (seed {seed})",
        source=WorkloadSource(path=f"random (seed {seed})", format="jsonl"),
        prompt_format="raw",
    )
    return loaded_workload(definition, random_prompts(tokenizer, entry.input_len, num_prompts, seed), None)
