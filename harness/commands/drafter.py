"""`bench drafter build REGIME`: self-distil the drafters a regime trains itself."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from harness.commands.common import EXIT_OK, subcommand
from harness.config.methods import names
from harness.core.errors import UserError

NAME = "drafter"
SUMMARY = "build the drafters a regime trains itself (self-distilled EAGLE-3 / DFlash heads)"
DESCRIPTION = """
Drafters a regime trains itself (an arm's draft_model: trained:). `bench run` builds them on first
use; `bench drafter build` builds them ahead, to see the training and its validation accuracy.
"""
EXAMPLES = """
bench drafter build regimes/cpu_trained_drafters.yaml
bench drafter build regimes/cpu_trained_drafters.yaml --method eagle3 --continue-epochs 2
"""
INTERRUPTED = "servers stopped; the drafter build resumes where it stopped when run again"

_BUILD_DESCRIPTION = """
For every arm whose draft_model is `trained:` (or only --arm / --method): the target answers the
training prompts on the real engine (greedy), its hidden states are captured at the method's layers,
and speculators' trainer fits the head; the checkpoint and a drafter_manifest.json (target identity,
data split and hashes, steps, validation accuracy per position, library versions) are cached. The
prompts the regime measures are held out. Interrupted builds resume where they stopped. The CPU
regime's EAGLE-3 takes about 45 minutes on 2 cores.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="drafter_command", required=True, metavar="ACTION")
    build = subcommand(
        actions,
        "build",
        summary="self-distil the regime's trained drafters now (bench run would build them on first use)",
        description=_BUILD_DESCRIPTION,
        examples=EXAMPLES,
    )
    build.add_argument("regime", type=Path, help="regime YAML file, e.g. regimes/cpu_trained_drafters.yaml")
    build.add_argument("--arm", help="only this arm's drafter")
    build.add_argument("--method", choices=names("built"), help="only the arms of this method")
    build.add_argument(
        "--continue-epochs",
        type=int,
        metavar="N",
        help="train each chosen arm's finished drafter N epochs more: its weights, a fresh warm-up + decay "
        "schedule, the first loss checked against where it ended; built and cached as a drafter of its own "
        "(the arm keeps its drafter; the output says how to measure the continuation)",
    )


def run(args: argparse.Namespace, console: Console) -> int:
    """`drafter build` (the only action)."""
    from harness.run.plan import plan_regime

    if args.continue_epochs is not None and args.continue_epochs < 1:
        raise UserError(
            f"--continue-epochs: expected a positive number of epochs, got {args.continue_epochs}"
        )
    plan = plan_regime(args.regime)
    built = plan.build_trained_drafters(console, args.arm, args.method, args.continue_epochs)
    for arm, drafter, cached in built:
        if cached:
            console.print(f"{arm.name}: already built: {drafter.path}", markup=False)
        else:
            for epoch in (drafter.provenance.get("manifest") or {}).get("validation", []):
                accuracy = " / ".join(f"{a:.3f}" for a in epoch["accuracy_per_position"])
                console.print(
                    f"  epoch {epoch['epoch']}: validation accuracy per position {accuracy}", highlight=False
                )
        if args.continue_epochs is not None:
            trained = arm.draft_model.trained  # type: ignore[union-attr]
            console.print(
                f"{arm.name}: to measure the continuation, set the arm's draft_model.trained.warm_start: "
                f"{trained.warm_start} and epochs: {trained.epochs} (or draft_model: {drafter.path})",
                soft_wrap=True,
                highlight=False,
            )
    return EXIT_OK
