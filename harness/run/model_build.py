"""Build a model into the cache (the run side of ``harness.config.models``): a packaged GGUF file converted
once into a HF safetensors directory, and any cache entry built by a child process.

The conversion imports torch/transformers, so it runs in a child process
(``python -m harness.run.model_build``): ``import harness`` stays light and a crash there cannot take
the runner with it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from harness.config.models import converted_dir, package_file
from harness.core.errors import UserError


def resolve_package_gguf(package: str, gguf_file: str) -> Path:
    """Return the cached HF directory for a packaged GGUF file, converting it on first use."""
    gguf_path = package_file(package, gguf_file)
    target = converted_dir(package, gguf_file)
    if (target / "config.json").is_file():
        return target
    return build_into_cache(
        target,
        ["harness.run.model_build", str(gguf_path)],
        log_suffix=".convert.log",
        failure=f"converting {gguf_path.name} to a HF directory failed; is the 'cpu' extra installed "
        "(transformers, gguf, torch)?",
    )


def build_into_cache(target: Path, module_argv: list[str], log_suffix: str, failure: str) -> Path:
    """Run ``python -m <module_argv> <tmp dir>`` in a child process (torch stays out of this
    process, and a crash there cannot take the runner with it), then publish ``tmp`` as ``target``
    atomically: a half-written directory is never seen as a cache entry."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + f".tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    log = target.with_name(target.name + log_suffix)
    with open(log, "w") as log_file:
        proc = subprocess.run(
            [sys.executable, "-m", *module_argv, str(tmp)], stdout=log_file, stderr=subprocess.STDOUT
        )
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        tail = log.read_text(errors="replace").splitlines()[-15:]
        raise UserError(f"{failure} (exit {proc.returncode}); log {log}:\n" + "\n".join(tail))
    try:
        os.replace(tmp, target)
    except OSError:  # another process published it first
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _convert(gguf_path: Path, out_dir: Path) -> None:
    """GGUF -> HF safetensors (float32, so nothing is rounded twice: the dequantized GGUF weights
    are kept exactly and the engine casts to the regime's dtype)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(src, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(src, gguf_file=name, dtype=torch.float32)
    # transformers refuses to save a model still marked as GGUF-quantized; the weights are
    # already dequantized in memory, so drop the marker.
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.hf_quantizer = None
    model.is_quantized = False
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)


if __name__ == "__main__":  # python -m harness.run.model_build GGUF_FILE OUT_DIR
    _convert(Path(sys.argv[1]), Path(sys.argv[2]))
