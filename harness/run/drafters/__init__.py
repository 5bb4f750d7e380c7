"""Drafters: where an arm's draft model comes from, and the ones the harness builds itself.

- ``resolve``: an arm's ``draft_model`` -> what the engine loads, with its provenance;
- ``untrained``: randomly initialised EAGLE-3 / DFlash heads (mechanics only);
- ``distill``: self-distilled heads trained on the target's own answers, with
  ``train_stages`` (its torch stages, in child processes);
- ``manifest``: the manifest file, builder version, config hash, layer ids and mask token they share.
"""

from harness.run.drafters.manifest import MANIFEST_NAME, TRAINING_PROMPTS_NAME, read_manifest
from harness.run.drafters.resolve import ResolvedDrafter, held_out_check, resolve_drafter, resolve_drafters

__all__ = [
    "MANIFEST_NAME",
    "TRAINING_PROMPTS_NAME",
    "ResolvedDrafter",
    "held_out_check",
    "read_manifest",
    "resolve_drafter",
    "resolve_drafters",
]
