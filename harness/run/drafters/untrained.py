"""Untrained drafters: an EAGLE-3 or DFlash head with random weights, in the layout vLLM loads
(the original EAGLE-3 layout; z-lab's DFlash layout). It runs the method's whole code path on a
real engine but accepts ~nothing: "untrained, mechanics only".

Building imports torch, so it runs in a child process (``python -m harness.run.drafters.untrained``),
like the GGUF conversion in ``harness.run.model_build``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from harness.config.models import cache_root
from harness.core.errors import UserError
from harness.run.drafters.manifest import (
    BUILDER_VERSION,
    MANIFEST_NAME,
    config_sha256,
    layer_ids,
    mask_token_id,
    target_config,
)
from harness.run.model_build import build_into_cache

UNTRAINED_NOTE = "random initialisation: runs the method's code path on the real engine, accepts ~nothing"


def untrained_dir(method: str, target_dir: str, seed: int) -> Path:
    """The cache entry for an untrained drafter: keyed by the target's config, method and seed."""
    digest = (config_sha256(target_dir) or "pending")[:12]
    return cache_root() / "drafters" / f"{method}-untrained-{digest}-seed{seed}-v{BUILDER_VERSION}"


def build_untrained(method: str, target_dir: str, seed: int) -> Path:
    """Build (once, cached) a randomly initialised drafter for the target; returns its directory."""
    target_config(target_dir)  # a clear error before any child process
    out = untrained_dir(method, target_dir, seed)
    if (out / MANIFEST_NAME).is_file():
        return out
    return build_into_cache(
        out,
        ["harness.run.drafters.untrained", method, target_dir, str(seed)],
        log_suffix=".build.log",
        failure=f"building the untrained {method} drafter failed",
    )


def _layer_shapes(config: dict[str, Any], attn_input: int, qk_norm: bool) -> dict[str, tuple[int, ...]]:
    hidden, inter = config["hidden_size"], config["intermediate_size"]
    heads, kv_heads = (
        config["num_attention_heads"],
        config.get("num_key_value_heads", config["num_attention_heads"]),
    )
    head_dim = config.get("head_dim") or hidden // heads
    shapes = {
        "self_attn.q_proj.weight": (heads * head_dim, attn_input),
        "self_attn.k_proj.weight": (kv_heads * head_dim, attn_input),
        "self_attn.v_proj.weight": (kv_heads * head_dim, attn_input),
        "self_attn.o_proj.weight": (hidden, heads * head_dim),
        "mlp.gate_proj.weight": (inter, hidden),
        "mlp.up_proj.weight": (inter, hidden),
        "mlp.down_proj.weight": (hidden, inter),
        "input_layernorm.weight": (hidden,),
        "post_attention_layernorm.weight": (hidden,),
    }
    if qk_norm:
        shapes["self_attn.q_norm.weight"] = (head_dim,)
        shapes["self_attn.k_norm.weight"] = (head_dim,)
    return shapes


_COPIED = (
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "rms_norm_eps",
    "max_position_embeddings",
    "rope_parameters",
    "rope_theta",
    "vocab_size",
    "hidden_act",
    "bos_token_id",
    "eos_token_id",
)


def _draft_config(
    method: str, config: dict[str, Any], target_dir: Path
) -> tuple[dict[str, Any], dict[str, tuple[int, ...]]]:
    """(config.json, weight name -> shape) of a one-layer drafter in the layout vLLM loads."""
    base = {k: config[k] for k in _COPIED if k in config}
    base.setdefault("head_dim", config["hidden_size"] // config["num_attention_heads"])
    hidden, layers = config["hidden_size"], config["num_hidden_layers"]
    if method == "eagle3":
        aux = layer_ids(layers)
        draft = {
            **base,
            "architectures": ["LlamaForCausalLMEagle3"],
            "model_type": "llama",
            "num_hidden_layers": 1,
            "draft_vocab_size": config["vocab_size"],
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": aux, "use_aux_hidden_state": True},
        }
        # The midlayer attends over [embedding, hidden] concatenated: its q/k/v take 2 x hidden.
        shapes = {f"midlayer.{k}": v for k, v in _layer_shapes(config, 2 * hidden, qk_norm=False).items()}
        shapes |= {
            "midlayer.hidden_norm.weight": (hidden,),
            "fc.weight": (hidden, len(aux) * hidden),
            "norm.weight": (hidden,),
        }
        return draft, shapes
    if method == "dflash":
        # z-lab's layout: DFlash layer ids are 0-based "after layer i" (vLLM adds 1).
        target_ids = sorted({1, layers // 2, layers - 2})
        draft = {
            **base,
            "architectures": ["DFlashDraftModel"],
            "model_type": "qwen3",
            "num_hidden_layers": 1,
            "block_size": 16,
            "num_target_layers": layers,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "attention_bias": False,
            "layer_types": ["full_attention"],
            "dflash_config": {
                "mask_token_id": mask_token_id(target_dir, config),
                "target_layer_ids": target_ids,
            },
        }
        shapes = {f"layers.0.{k}": v for k, v in _layer_shapes(config, hidden, qk_norm=True).items()}
        shapes |= {
            "fc.weight": (hidden, len(target_ids) * hidden),
            "hidden_norm.weight": (hidden,),
            "norm.weight": (hidden,),
        }
        return draft, shapes
    raise UserError(f"no untrained layout for method '{method}' (eagle3 or dflash)")


def _build(method: str, target_dir: Path, out_dir: Path, seed: int) -> None:
    import torch
    from safetensors.torch import save_file

    config = json.loads((target_dir / "config.json").read_text())
    draft_config, shapes = _draft_config(method, config, target_dir)
    generator = torch.Generator().manual_seed(seed)
    tensors = {}
    for name, shape in sorted(shapes.items()):
        if len(shape) == 1:  # norms start as identity, like a freshly initialised model
            tensors[name] = torch.ones(shape, dtype=torch.bfloat16)
        else:
            tensors[name] = (torch.randn(shape, generator=generator) * 0.02).to(torch.bfloat16)
    out_dir.mkdir(parents=True)
    save_file(tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    (out_dir / "config.json").write_text(json.dumps(draft_config, indent=2, sort_keys=True) + "\n")
    manifest = {
        "schema_version": 1,
        "kind": "untrained",
        "trained": False,
        "label": "untrained, mechanics only",
        "note": UNTRAINED_NOTE,
        "method": method,
        "layout": {
            "eagle3": "EAGLE-3 original (LlamaForCausalLMEagle3)",
            "dflash": "z-lab DFlash (DFlashDraftModel)",
        }[method],
        "seed": seed,
        "builder_version": BUILDER_VERSION,
        "parameters": sum(t.numel() for t in tensors.values()),
        "target": {
            "path": str(target_dir),
            "config_sha256": config_sha256(str(target_dir)),
        },
        "torch_version": torch.__version__,
    }
    (out_dir / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":  # python -m harness.run.drafters.untrained METHOD TARGET_DIR SEED OUT_DIR
    _build(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[4]), int(sys.argv[3]))
