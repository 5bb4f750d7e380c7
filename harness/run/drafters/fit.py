"""Does the drafter fit its arm? Checked wherever both config.json files are readable here.

vLLM does not check these, and each one either fails a night's start-up or, worse, mis-measures:

- DFlash drafts a block in one pass: a block of B positions after the last verified token holds
  B - 1 drafts (vLLM's DFlash2 sizes its block as 1 + K), so K must be at most ``block_size - 1``;
  vLLM 0.33 accepts a larger K for DFlash silently;
- an EAGLE-3 head or a DFlash drafter reads the target's hidden states: its hidden size must be
  the target's, and the target layers it reads (``eagle_aux_hidden_state_layer_ids``,
  ``dflash_config.target_layer_ids``, ``num_target_layers``) must exist in the target;
- every drafter proposes token ids of the target's vocabulary: the vocabulary sizes must match;
- under tensor parallelism the drafter is sharded like the target: its attention heads must divide
  by TP, and its KV heads divide by TP or TP by them (then they are replicated);
- an ``mtp`` arm drafts with the target's own multi-token-prediction layers: the target's config
  must declare some (``num_nextn_predict_layers``, or ``mtp_num_hidden_layers``, at the top level
  or in its ``text_config``: what vLLM's ``SpeculativeConfig`` reads them from). Without them vLLM
  fails at start-up on the GPU machine, or SGLang drafts with nothing.

A hub drafter's config is read by the engine on the GPU machine, never here (no hub access at run
time): such an arm is reported as unchecked, by name, in ``bench validate``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.config.arms import Arm
from harness.config.methods import names
from harness.config.models import is_local_reference


@dataclass
class Fit:
    """What was checked for one arm's drafter, and what does not fit (as regime mismatches)."""

    checked: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    unchecked: str | None = None  # why nothing could be checked here


def _config(reference: str) -> dict[str, Any] | None:
    try:
        return json.loads((Path(reference).expanduser() / "config.json").read_text())
    except (OSError, ValueError):
        return None


def _nested(config: dict[str, Any], *names: str) -> Any:
    """A value at the top level or in the method's sub-config (z-lab DFlash, EAGLE-3 layouts)."""
    for name in names:
        if name in config:
            return config[name]
        for section in ("dflash_config", "eagle_config"):
            if isinstance(config.get(section), dict) and name in config[section]:
                return config[section][name]
    return None


MTP_LAYER_FIELDS = ("num_nextn_predict_layers", "mtp_num_hidden_layers")


def mtp_layers(config: dict[str, Any]) -> int | None:
    """How many MTP layers a target's config declares (None: it names none)."""
    for section in (config, config.get("text_config")):
        if isinstance(section, dict):
            for name in MTP_LAYER_FIELDS:
                if isinstance(section.get(name), int):
                    return section[name]
    return None


def _mtp_fit(arm: Arm, target: str) -> Fit:
    if not is_local_reference(target):
        return Fit(unchecked="the target is a hub model: its config is read by the engine, not here")
    base = _config(target)
    if base is None:
        return Fit(unchecked="the target's config.json is not readable here")
    layers, fit = mtp_layers(base), Fit()
    if not layers:
        fit.problems.append(
            f"arms.{arm.name}.method: mtp drafts with the target's own MTP layers, and its config declares "
            f"none ({' / '.join(MTP_LAYER_FIELDS)}: {layers if layers is not None else 'absent'})"
        )
    else:
        fit.checked.append(f"the target carries {layers} MTP layer{'s' if layers > 1 else ''}")
    return fit


def drafter_fit(arm: Arm, drafter: str | None, target: str, tensor_parallel_size: int) -> Fit | None:
    """The checks for one arm (None for arms without a drafter: baseline, ngram, suffix)."""
    if arm.method == "mtp":
        return _mtp_fit(arm, target)
    if arm.method not in names("draft_model") or drafter is None:
        return None
    for which, reference in (("drafter", drafter), ("target", target)):
        if not is_local_reference(reference):
            return Fit(unchecked=f"the {which} is a hub model: its config is read by the engine, not here")
        if not (Path(reference).expanduser() / "config.json").is_file():
            return Fit(unchecked=f"the {which} is not built yet: checked when bench run builds it")
    draft, base = _config(drafter), _config(target)
    if draft is None or base is None:
        return Fit(unchecked="a config.json here is not valid JSON")
    fit, where, k = Fit(), f"arms.{arm.name}", arm.num_speculative_tokens or 0
    _block(fit, where, arm, draft, k)
    _hidden_states(fit, where, arm, draft, base)
    _vocabulary(fit, where, draft, base)
    _sharding(fit, where, draft, tensor_parallel_size)
    return fit


def _block(fit: Fit, where: str, arm: Arm, draft: dict[str, Any], k: int) -> None:
    if arm.method != "dflash":
        return
    block = _nested(draft, "block_size")
    if not isinstance(block, int):
        fit.checked.append("block size not in the drafter's config")
    elif k > block - 1:
        fit.problems.append(
            f"{where}.num_speculative_tokens: K={k} but the DFlash drafter's block holds {block - 1} drafts "
            f"(block_size {block}); vLLM would accept it silently"
        )
    else:
        fit.checked.append(f"K={k} <= block {block} - 1")


def _hidden_states(fit: Fit, where: str, arm: Arm, draft: dict[str, Any], base: dict[str, Any]) -> None:
    if arm.method == "draft_model":
        return
    layers = base.get("num_hidden_layers")
    hidden = draft.get("target_hidden_size") or draft.get("hidden_size")
    if hidden is not None and base.get("hidden_size") is not None:
        if hidden != base["hidden_size"]:
            fit.problems.append(
                f"{where}.draft_model: reads hidden states of size {hidden}, the target's are "
                f"{base['hidden_size']}: a drafter for another target"
            )
        else:
            fit.checked.append(f"hidden size {hidden} = target")
    read = _nested(draft, "target_layer_ids", "eagle_aux_hidden_state_layer_ids") or []
    wanted = _nested(draft, "num_target_layers")
    if not isinstance(layers, int):
        return
    missing = [i for i in read if not isinstance(i, int) or i >= layers]
    if missing or (isinstance(wanted, int) and wanted != layers):
        fit.problems.append(
            f"{where}.draft_model: made for a target with {wanted or 'more'} layers (reads layers "
            f"{read}), the target has {layers}"
        )
    elif read or wanted:
        fit.checked.append(f"the target layers it reads exist ({layers})")


def _vocabulary(fit: Fit, where: str, draft: dict[str, Any], base: dict[str, Any]) -> None:
    mine, theirs = draft.get("vocab_size"), base.get("vocab_size")
    if mine is None or theirs is None:
        return
    if mine != theirs:
        fit.problems.append(f"{where}.draft_model: vocabulary of {mine} tokens, the target's has {theirs}")
    else:
        fit.checked.append(f"vocabulary {mine} = target")


def _sharding(fit: Fit, where: str, draft: dict[str, Any], tensor_parallel_size: int) -> None:
    heads, kv = (
        draft.get("num_attention_heads"),
        draft.get("num_key_value_heads") or draft.get("num_attention_heads"),
    )
    if tensor_parallel_size <= 1 or not isinstance(heads, int) or not isinstance(kv, int):
        return
    if heads % tensor_parallel_size or (kv % tensor_parallel_size and tensor_parallel_size % kv):
        fit.problems.append(
            f"{where}.draft_model: {heads} attention / {kv} KV heads cannot be sharded over "
            f"tensor_parallel_size {tensor_parallel_size}"
        )
    else:
        fit.checked.append(f"{heads} heads shard over TP {tensor_parallel_size}")
