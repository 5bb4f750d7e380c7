"""What every drafter the harness builds or reads shares: the manifest file and its name, the
builder version (one for untrained and trained builds), the target's config hash, the target
layers a drafter reads, and DFlash's mask token."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from harness.core.errors import UserError

# Bump when a build's layout or data change, so old cache entries are not reused.
BUILDER_VERSION = 1
MANIFEST_NAME = "drafter_manifest.json"
TRAINING_PROMPTS_NAME = "training_prompts.json"  # hashes of every trained-on prompt: checked at run time


def read_manifest(directory: str | Path) -> dict[str, Any] | None:
    path = Path(directory) / MANIFEST_NAME
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def config_sha256(target_dir: str) -> str | None:
    config = Path(target_dir) / "config.json"
    return hashlib.sha256(config.read_bytes()).hexdigest() if config.is_file() else None


def target_config(target_dir: str) -> dict[str, Any]:
    config = Path(target_dir) / "config.json"
    if not config.is_file():
        raise UserError(
            f"a drafter is built from the target's config.json, but {config} does not exist; drafters built "
            "here need a local (or packaged) target"
        )
    return json.loads(config.read_text())


def layer_ids(num_layers: int) -> list[int]:
    """EAGLE-3's (and speculators') convention: a low, a middle and a high layer of the target."""
    return sorted({min(2, num_layers - 1), num_layers // 2, max(0, num_layers - 3)})


def mask_token_id(target_dir: Path, config: dict[str, Any]) -> int:
    """DFlash fills its block with a mask token. Models without one (SmolLM2) get a special token
    that no prompt or chat template uses, never an end-of-turn id."""
    reserved = {config.get(k) for k in ("bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id")}
    tokenizer = target_dir / "tokenizer.json"
    if tokenizer.is_file():
        added = json.loads(tokenizer.read_text()).get("added_tokens") or []
        unused = [
            t["id"]
            for t in added
            if t.get("special")
            and t["id"] not in reserved
            and not t["content"].startswith(("<|im_", "<|end", "<|begin", "<|start"))
        ]
        if unused:
            return max(unused)
    return config["vocab_size"] - 1
