"""Drafter resolution, provenance and the untrained builder (no engine: the CPU engine tests
serve what it builds)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors import safe_open

from harness.config.regime import load_regime
from harness.core.errors import UserError
from harness.run.drafters import MANIFEST_NAME, resolve_drafter
from harness.run.drafters.untrained import _draft_config, build_untrained

ROOT = Path(__file__).resolve().parent.parent
# SmolLM2-135M's shape (the CPU default target), plus a tokenizer with one unused special token.
TARGET_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "head_dim": 64,
    "num_hidden_layers": 30,
    "vocab_size": 49152,
    "rms_norm_eps": 1e-5,
    "max_position_embeddings": 8192,
    "rope_parameters": {"rope_theta": 100000.0, "rope_type": "default"},
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 2,
}
ADDED_TOKENS = [
    {"id": 0, "content": "<|endoftext|>", "special": True},
    {"id": 1, "content": "<|im_start|>", "special": True},
    {"id": 2, "content": "<|im_end|>", "special": True},
    {"id": 16, "content": "<empty_output>", "special": True},
]


@pytest.fixture
def target(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv("BENCH_CACHE_DIR", str(tmp_path / "cache"))
    directory = tmp_path / "target"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(TARGET_CONFIG))
    (directory / "tokenizer.json").write_text(json.dumps({"added_tokens": ADDED_TOKENS}))
    return directory


def test_eagle3_layout_matches_what_vllm_loads(target: Path) -> None:
    config, shapes = _draft_config("eagle3", TARGET_CONFIG, target)
    assert config["architectures"] == ["LlamaForCausalLMEagle3"] and config["num_hidden_layers"] == 1
    assert config["eagle_config"] == {
        "eagle_aux_hidden_state_layer_ids": [2, 15, 27],
        "use_aux_hidden_state": True,
    }
    assert shapes["midlayer.self_attn.q_proj.weight"] == (576, 2 * 576)  # [embedding, hidden] concatenated
    assert shapes["midlayer.self_attn.k_proj.weight"] == (3 * 64, 2 * 576)
    assert shapes["fc.weight"] == (576, 3 * 576) and "midlayer.hidden_norm.weight" in shapes
    assert not any("embed_tokens" in name or "lm_head" in name for name in shapes)  # shared with the target


def test_dflash_layout_matches_what_vllm_loads(target: Path) -> None:
    config, shapes = _draft_config("dflash", TARGET_CONFIG, target)
    assert config["architectures"] == ["DFlashDraftModel"] and config["model_type"] == "qwen3"
    assert config["dflash_config"] == {
        "mask_token_id": 16,
        "target_layer_ids": [1, 15, 28],
    }  # never an end-of-turn id
    assert shapes["layers.0.self_attn.q_norm.weight"] == (64,) and shapes["fc.weight"] == (576, 3 * 576)


def test_build_untrained_once_with_manifest(target: Path) -> None:
    first = build_untrained("eagle3", str(target), seed=3)
    manifest = json.loads((first / MANIFEST_NAME).read_text())
    assert manifest["trained"] is False and manifest["seed"] == 3 and manifest["method"] == "eagle3"
    assert manifest["target"]["config_sha256"] and manifest["parameters"] > 0
    with safe_open(str(first / "model.safetensors"), "pt") as weights:
        assert set(weights.keys()) == set(_draft_config("eagle3", TARGET_CONFIG, target)[1])
    stamp = (first / "model.safetensors").stat().st_mtime_ns
    assert build_untrained("eagle3", str(target), seed=3) == first  # cached
    assert (first / "model.safetensors").stat().st_mtime_ns == stamp
    assert build_untrained("eagle3", str(target), seed=4) != first  # the seed is part of the key


def test_untrained_needs_a_local_target(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="needs? a local"):
        build_untrained("dflash", str(tmp_path / "missing"), seed=0)


def test_provenance_per_source(target: Path, tmp_path: Path) -> None:
    regime_path = ROOT / "regimes" / "h200_tp8.yaml"
    regime = load_regime(regime_path)
    eagle = next(a for a in regime.arms if a.method == "eagle3")
    published = resolve_drafter(
        eagle, regime, regime_path, "meta-llama/Llama-3.1-8B-Instruct", build=False, measured=[]
    )
    assert published.path == "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
    assert published.provenance["label"] == "published yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"

    trained = tmp_path / "my_drafter"
    trained.mkdir()
    (trained / MANIFEST_NAME).write_text(
        json.dumps({"trained": True, "label": "self-distilled here, 5 epochs"})
    )
    local = eagle.model_copy(
        update={"draft_model": eagle.draft_model.model_copy(update={"path": str(trained)})}
    )
    resolved = resolve_drafter(local, regime, regime_path, "x", build=False, measured=[])
    assert (
        resolved.provenance["trained"] is True
        and resolved.provenance["label"] == "self-distilled here, 5 epochs"
    )

    smoke_path = ROOT / "regimes" / "cpu_smoke.yaml"
    smoke = load_regime(smoke_path)
    arms = {a.name: a for a in smoke.arms}
    untrained = resolve_drafter(
        arms["dflash_untrained_k3"], smoke, smoke_path, str(target), build=False, measured=[]
    )
    assert (
        untrained.provenance["label"] == "untrained, mechanics only" and "dflash-untrained" in untrained.path
    )
    assert not Path(untrained.path).exists()  # validate-only resolution builds nothing
    self_draft = resolve_drafter(
        arms["self_draft_k3"], smoke, smoke_path, str(target), build=False, measured=[]
    )
    assert self_draft.provenance["label"] == "self-draft (the target itself), mechanics only"
