"""What a decode step must read, the numerator of the decode floor (``harness.derive.ceiling``): the
target's weight bytes, counted exactly from its safetensors headers (the header only, never the
data), and its KV-cache bytes per token from its ``config.json``. Local files only: a hub id is
looked up in the Hugging Face cache, never on the network."""

from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# bytes per parameter of a dtype as a regime (--dtype) or a config.json names it
_DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2}
_MAX_HEADER = 100_000_000  # the safetensors format's own limit on a header's size


@dataclass(frozen=True)
class TargetFootprint:
    """The bytes a batch-1 decode step reads: every weight once, and the KV cache of the context.

    ``weight_bytes`` is the parameters a step reads x ``bytes_per_parameter`` of the served dtype:
    the dense footprint, an estimate. An untied input embedding is left out
    (``unread_embedding``): a step looks up one row of it, while the output projection (a tied
    embedding's one matrix) is read whole. A quantized checkpoint served quantized reads fewer
    bytes, and one served with a narrower ``kv_cache_dtype`` (fp8) reads fewer KV bytes."""

    parameters: int
    dtype: str  # the served dtype, "auto" resolved from the config
    bytes_per_parameter: int
    weight_bytes: int
    kv_bytes_per_token: int
    unread_embedding: int = 0  # the untied input embedding's elements, not in weight_bytes


def _header(path: Path) -> dict[str, Any]:
    # the format: an 8-byte little-endian header length, then that many bytes of JSON; the tensor
    # data after it is never read
    with path.open("rb") as f:
        start = f.read(8)
        if len(start) < 8:
            raise ValueError(f"{path}: {len(start)} bytes, too short for a safetensors file")
        (length,) = struct.unpack("<Q", start)
        if length > _MAX_HEADER:
            raise ValueError(f"{path}: a safetensors header of {length} bytes (the format allows 100 MB)")
        return json.loads(f.read(length))


def _safetensors_files(model_dir: Path) -> list[Path]:
    # a sharded checkpoint's index names its shards: a directory may also hold another copy of the
    # weights (Mistral's consolidated.safetensors beside model-0000N-of-0000M), counted only once
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [model_dir / name for name in shards]
    return sorted(model_dir.glob("*.safetensors"))


def _shapes(files: list[Path]) -> dict[str, list[int]]:
    """Every tensor's shape by name, each name once (from the headers)."""
    shapes: dict[str, list[int]] = {}
    for path in files:
        for name, entry in _header(path).items():
            if name != "__metadata__":  # the file's string metadata, not a tensor
                shapes.setdefault(name, entry["shape"])
    return shapes


def count_parameters(files: list[Path], shapes: dict[str, list[int]] | None = None) -> int:
    """Every tensor's element count, each tensor name once: tied embeddings are stored once and read
    once per step (the output projection's matmul; the embedding lookup reads one row). Elements,
    not weights, of a packed quantized tensor (GPTQ's int32 ``qweight`` holds 8 weights each).
    ``shapes``: the headers' shapes where the caller has read them already."""
    found = _shapes(files) if shapes is None else shapes
    return sum(math.prod(shape) for shape in found.values())  # prod([]) is 1: a scalar


# the input embedding's tensor, as Llama/Qwen (embed_tokens), GPT-2 (wte) and BLOOM name it
_INPUT_EMBEDDING = ("embed_tokens.weight", "wte.weight", "word_embeddings.weight")


def untied_input_embedding(shapes: dict[str, list[int]], config: dict[str, Any]) -> int:
    """The elements of an input embedding stored apart from the output projection (the config's
    ``tie_word_embeddings`` is false): a step reads one row of it, not the matrix. 0 when tied."""
    tied = config.get("tie_word_embeddings", _text_config(config).get("tie_word_embeddings", True))
    if tied:
        return 0
    return sum(math.prod(s) for name, s in shapes.items() if name.endswith(_INPUT_EMBEDDING))


def _text_config(config: dict[str, Any]) -> dict[str, Any]:
    # a multimodal model's decoder sits under text_config; its vision tower runs on the prompt only
    return config.get("text_config") or config


def _config_dtype(config: dict[str, Any]) -> str | None:
    for source in (config, _text_config(config)):
        named = source.get("dtype") or source.get("torch_dtype")
        if isinstance(named, str):
            return named.removeprefix("torch.")
    return None


def kv_bytes_per_token(config: dict[str, Any], bytes_per_value: int) -> int | None:
    """2 (K and V) x layers x KV heads x head_dim x bytes: the KV cache one token of context adds,
    and each step reads. Grouped-query attention's formula (multi-head: KV heads = heads); an MLA
    model (DeepSeek's compressed latent) caches less. None when the config lacks the fields."""
    text = _text_config(config)
    try:
        layers = int(text["num_hidden_layers"])
        heads = int(text["num_attention_heads"])
        kv_heads = int(text.get("num_key_value_heads") or heads)
        head_dim = int(text.get("head_dim") or text["hidden_size"] // heads)
    except (KeyError, TypeError, ValueError):
        return None
    return 2 * layers * kv_heads * head_dim * bytes_per_value


def target_footprint(model_dir: Path, dtype: str) -> TargetFootprint | None:
    """The weight and KV bytes of the model in ``model_dir`` served as ``dtype`` ("float32",
    "bfloat16", "float16", "half", or "auto": the config's dtype, as the regime's ``--dtype auto``
    asks; vLLM may serve a float32 checkpoint in half precision under "auto", so pass the served
    dtype where the run recorded it). None when the directory has no safetensors, no config.json, or
    a config without the fields (or, for "auto", the dtype) the estimate needs."""
    files = _safetensors_files(model_dir)
    config_path = model_dir / "config.json"
    if not files or not config_path.is_file():
        return None
    config = json.loads(config_path.read_text())
    served = _config_dtype(config) if dtype == "auto" else dtype
    if served is None:
        return None
    if served not in _DTYPE_BYTES:
        raise ValueError(f"unknown dtype {served!r}: one of {', '.join(sorted(_DTYPE_BYTES))} or 'auto'")
    width = _DTYPE_BYTES[served]
    kv = kv_bytes_per_token(config, width)
    if kv is None:
        return None
    shapes = _shapes(files)  # every header read once
    parameters, unread = count_parameters(files, shapes), untied_input_embedding(shapes, config)
    return TargetFootprint(
        parameters=parameters,
        dtype=served,
        bytes_per_parameter=width,
        weight_bytes=(parameters - unread) * width,
        kv_bytes_per_token=kv,
        unread_embedding=unread,
    )


def _hub_cache(environ: Mapping[str, str]) -> Path:
    # huggingface_hub's own order: HF_HUB_CACHE, its legacy name, then HF_HOME/hub, whose default is
    # $XDG_CACHE_HOME/huggingface (~/.cache/huggingface)
    for variable in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if environ.get(variable):
            return Path(environ[variable]).expanduser()
    if environ.get("HF_HOME"):
        return Path(environ["HF_HOME"]).expanduser() / "hub"
    xdg = Path(environ["XDG_CACHE_HOME"]).expanduser() if environ.get("XDG_CACHE_HOME") else None
    return (xdg or Path.home() / ".cache") / "huggingface" / "hub"


def local_model_dir(path_or_id: str, environ: Mapping[str, str] | None = None) -> Path | None:
    """``path_or_id`` itself if it is a directory; else, for a hub id ("Qwen/Qwen3-8B"), its snapshot
    in the Hugging Face cache: the one ``refs/main`` names (what a load of the id would use), else the
    newest; None when the cache holds none. Never the network."""
    as_path = Path(path_or_id).expanduser()
    if as_path.is_dir():
        return as_path
    repo = _hub_cache(os.environ if environ is None else environ) / f"models--{path_or_id.replace('/', '--')}"
    snapshots = repo / "snapshots"
    ref = repo / "refs" / "main"
    if ref.is_file() and (snapshots / ref.read_text().strip()).is_dir():
        return snapshots / ref.read_text().strip()
    found = [p for p in snapshots.glob("*") if p.is_dir()] if snapshots.is_dir() else []
    return max(found, key=lambda p: p.stat().st_mtime) if found else None
