"""A regime's workloads loaded, in its order: workload files (and ``.jsonl`` prompt files) by
``harness.config.workloads``, and random prompts (``{dataset: random}``, ``bench run --dataset
random``) from the target's tokenizer on this machine (``harness.config.datasets``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.config.datasets import random_workload
from harness.config.models import converted_dir, is_local_reference, resolve_model_path
from harness.config.regime import Regime
from harness.config.workloads import LoadedWorkload, RandomPrompts, load_workload
from harness.core.config_file import existing_path, located
from harness.core.errors import FieldError, UserError


def load_workloads(regime: Regime, regime_path: Path) -> list[LoadedWorkload]:
    """Every workload of ``regime`` with its ``load.num_prompts`` prompts, as the windows send them."""
    load = regime.load
    loaded = []
    for index, entry in enumerate(regime.workloads):
        if isinstance(entry, RandomPrompts):
            total = entry.input_len + load.max_output_tokens
            if regime.target.max_model_len is not None and total > regime.target.max_model_len:
                message = (
                    f"random prompts of {entry.input_len} tokens and {load.max_output_tokens} output tokens "
                    f"({total}) do not fit target.max_model_len {regime.target.max_model_len}"
                )
                raise located(regime_path, FieldError(("workloads", index), message))
            tokenizer = target_tokenizer(regime, regime_path)
            loaded.append(random_workload(entry, tokenizer, load.num_prompts, regime.sampling.seed))
            continue
        path = existing_path(regime_path, ("workloads", index), entry, "workload file")
        loaded.append(load_workload(path, load.num_prompts, regime.chat, load.context_tokens))
    return loaded


def tokenizer_file(regime: Regime, regime_path: Path) -> Path:
    """The target's ``tokenizer.json`` on this machine (a packaged GGUF is converted once, as its
    run would), or a UserError saying where it was looked for."""
    target = regime.target
    if target.package is not None:
        folder = converted_dir(target.package.name, target.package.file)
        if not (folder / "tokenizer.json").is_file():
            from harness.run.model_build import resolve_package_gguf

            folder = resolve_package_gguf(target.package.name, target.package.file)
        where = f"the converted {target.package.file}"
    else:
        from harness.run.sensors.weights import local_model_dir

        reference = resolve_model_path(target.path or "", regime_path)
        local = local_model_dir(reference)
        if local is None:
            kind = (
                "no such folder"
                if is_local_reference(target.path or "")
                else "not in this machine's hub cache"
            )
            raise UserError(
                f"--dataset random makes its prompts from the target's tokenizer: {target.path} is {kind}. "
                f"Fetch its tokenizer first (huggingface-cli download {target.path} tokenizer.json "
                "tokenizer_config.json), or validate and run on the machine that has the model"
            )
        folder, where = local, str(local)
    file = folder / "tokenizer.json"
    if not file.is_file():
        raise UserError(f"--dataset random needs the target's tokenizer.json: {where} has none ({file})")
    return file


def target_tokenizer(regime: Regime, regime_path: Path) -> Any:
    """The target's tokenizer (``tokenizers.Tokenizer``: the Rust library, no transformers import)."""
    from tokenizers import Tokenizer

    file = tokenizer_file(regime, regime_path)
    try:
        return Tokenizer.from_file(str(file))
    except Exception as exc:  # a file tokenizers cannot read: its own words
        raise UserError(f"{file}: not a tokenizer the tokenizers library reads ({exc})") from None
