"""A regime resolved against this machine, before any server starts: the plan that ``bench run``,
``bench validate`` and ``bench drafter build`` all go through.

``plan_regime`` loads and checks the regime and its workloads; ``Plan.preflight`` compares it with
the live environment (mismatches, lossy settings); ``Plan.resolve_models`` finds (or builds) the
target and every drafter; ``Plan.arm_commands`` gives each arm's exact launch command.
"""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from harness.config_file import existing_path, located
from harness.drafters import MANIFEST_NAME, ResolvedDrafter, resolve_drafter, resolve_drafters
from harness.drafters.fit import Fit, drafter_fit
from harness.engines import EngineAdapter, LaunchSpec, get_adapter, is_local_reference, resolve_model_path
from harness.errors import FieldError, UserError
from harness.models import converted_dir, resolve_package_gguf
from harness.regime import Arm, Load, Regime, load_regime, workload_paths
from harness.validation import check_environment, lossy_settings
from harness.workloads import ChatTemplate, LoadedWorkload, load_workload


@dataclass(frozen=True)
class Preflight:
    """What differs between the regime and this machine, and the lossy settings it asks for."""

    mismatches: list[str]
    lossy: list[str]


@dataclass(frozen=True)
class ArmCommand:
    arm: Arm
    command: str  # env assignments + argv, shell-quoted, with PORT for the port
    drafter: str  # "" or ", drafter: <label>..."


@dataclass
class Plan:
    """A regime resolved against this machine: everything needed before a server starts."""

    regime: Regime
    regime_path: Path
    adapter: EngineAdapter
    workloads: list[LoadedWorkload]
    drafters: dict[str, ResolvedDrafter] = field(
        default_factory=dict
    )  # arm name -> drafter (set by resolve_models)

    def resolve_models(
        self, build: bool, console: Console | None = None, build_trained: bool | None = None
    ) -> str:
        """The target the engine loads and every arm's drafter. ``build`` converts packaged GGUFs and
        builds drafters (cached; a trained one takes a while and shows its own progress on ``console``;
        ``build_trained=False`` leaves trained ones unbuilt); without it only their paths are computed."""
        if build and console is not None:
            with console.status("Resolving the target (a packaged GGUF is converted once, ~30 s)..."):
                model = model_reference(self.regime, self.regime_path, convert=True)
        else:
            model = model_reference(self.regime, self.regime_path, convert=build)
        self.drafters = resolve_drafters(
            self.regime,
            self.regime_path,
            model,
            build,
            self.workloads,
            console,
            build_trained=build if build_trained is None else build_trained,
        )
        return model

    def launch_spec(self, arm: Arm, model: str, port: int) -> LaunchSpec:
        draft = self.drafters[arm.name].path if arm.draft_model is not None else None
        return self.adapter.launch_spec(self.regime, arm, model, port, sys.executable, draft_model=draft)

    def drafter_fits(self, model: str) -> dict[str, Fit]:
        """Per arm with a drafter, whether it fits the arm (after ``resolve_models``)."""
        fits = {}
        for arm in self.regime.arms:
            drafter = self.drafters[arm.name].path if arm.name in self.drafters else None
            fit = drafter_fit(arm, drafter, model, self.regime.tensor_parallel_size)
            if fit is not None:
                fits[arm.name] = fit
        return fits

    def preflight(self, environment: dict[str, Any]) -> Preflight:
        """The regime against the live environment; the caller decides what refuses a run."""
        mismatches = [str(m) for m in check_environment(self.regime, environment)]
        return Preflight(mismatches=mismatches, lossy=lossy_settings(self.regime))

    def arm_commands(self, model: str) -> list[ArmCommand]:
        """Each arm's exact launch command (after ``resolve_models``), the port shown as PORT."""
        commands = []
        for arm in self.regime.arms:
            spec = self.launch_spec(arm, model, port=0)
            argv = [
                ("PORT" if prev == "--port" else part)
                for prev, part in zip([""] + spec.argv[:-1], spec.argv, strict=True)
            ]
            env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(spec.env.items()))
            commands.append(
                ArmCommand(arm, f"{env + ' ' if env else ''}{shlex.join(argv)}", self._drafter_note(arm))
            )
        return commands

    def _drafter_note(self, arm: Arm) -> str:
        if arm.name not in self.drafters:
            return ""
        resolved = self.drafters[arm.name]
        source = resolved.provenance["source"]
        built_later = source in ("untrained", "trained") and not Path(resolved.path).exists()
        note = f", drafter: {resolved.provenance['label']}" + (", built on first run" if built_later else "")
        if source == "trained":
            note += f"; {resolved.provenance['reference']}"
        return note

    def build_trained_drafters(
        self,
        console: Console,
        arm: str | None = None,
        method: str | None = None,
        continue_epochs: int | None = None,
    ) -> list[tuple[Arm, ResolvedDrafter, bool]]:
        """Build now (``bench drafter build``) the drafters ``bench run`` would build on first use,
        through the same resolution: (arm, its drafter, whether it was already built). With
        ``continue_epochs``, train each arm's finished drafter that many epochs more instead (a warm
        start from it: ``trained.warm_start``), as a drafter of its own; the arms keep theirs."""
        arms = self.trained_arms(arm, method)
        with console.status("Resolving the target (a packaged GGUF is converted once, ~30 s)..."):
            model = model_reference(self.regime, self.regime_path, convert=True)
        if continue_epochs is not None:
            arms = [self._continuation(a, model, continue_epochs) for a in arms]
        built = []
        for chosen in arms:
            unbuilt = resolve_drafter(chosen, self.regime, self.regime_path, model, False, self.workloads)
            cached = Path(unbuilt.path, MANIFEST_NAME).is_file()
            drafter = resolve_drafter(
                chosen, self.regime, self.regime_path, model, True, self.workloads, console
            )
            self.drafters[chosen.name] = drafter
            built.append((chosen, drafter, cached))
        return built

    def _continuation(self, arm: Arm, model: str, epochs: int) -> Arm:
        """The arm with its finished drafter as the warm start of ``epochs`` more epochs."""
        built = resolve_drafter(arm, self.regime, self.regime_path, model, False, self.workloads)
        if not Path(built.path, MANIFEST_NAME).is_file():
            raise UserError(
                f"{self.regime_path}: arm {arm.name}: its drafter is not built yet ({built.path}), so there "
                "is nothing to continue: bench drafter build without --continue-epochs builds it"
            )
        trained = arm.draft_model.trained.model_copy(  # type: ignore[union-attr]
            update={"warm_start": str(built.path), "epochs": epochs}
        )
        draft = arm.draft_model.model_copy(update={"trained": trained})  # type: ignore[union-attr]
        return arm.model_copy(update={"draft_model": draft})

    def trained_arms(self, arm: str | None = None, method: str | None = None) -> list[Arm]:
        """The arms whose drafter the harness trains (``draft_model: {trained: ...}``), optionally
        only one arm or one method; none is an error naming what was asked for."""
        found = [
            a
            for a in self.regime.arms
            if a.draft_model is not None
            and a.draft_model.trained is not None
            and arm in (None, a.name)
            and method in (None, a.method)
        ]
        if not found:
            wanted = " ".join(
                filter(None, (f"named {arm}" if arm else "", f"of method {method}" if method else ""))
            )
            raise UserError(
                f"{self.regime_path}: no arm {wanted + ' ' if wanted else ''}has a "
                "`draft_model: {trained: ...}` to build"
            )
        return found


def plan_regime(regime_path: Path, regime: Regime | None = None) -> Plan:
    """Load and check a regime and its workloads; starts nothing."""
    regime = regime if regime is not None else load_regime(regime_path)
    _check_local_paths(regime, regime_path)
    adapter = get_adapter(regime.engine.name)
    paths = workload_paths(regime, regime_path)
    workloads = [load_workload(path, regime.load.num_prompts, regime.chat) for path in paths]
    names = [w.name for w in workloads]
    for index, name in enumerate(names):
        if name in names[:index]:
            raise located(
                regime_path, FieldError(("workloads", index), f"two workload files share the name '{name}'")
            )
    gates = regime.gates
    for location, workload in [
        (("gates", "rules", i, "workload"), g.workload) for i, g in enumerate(gates.rules)
    ] + [(("gates", "golden_tau", i, "workload"), g.workload) for i, g in enumerate(gates.golden_tau)]:
        if workload is not None and workload not in names:
            message = f"no workload named '{workload}' (workloads: {', '.join(names)})"
            raise located(regime_path, FieldError(location, message, value=workload, choices=names))
    return Plan(regime=regime, regime_path=regime_path, adapter=adapter, workloads=workloads)


def _check_local_paths(regime: Regime, regime_path: Path) -> None:
    """A model or draft written as a local path must exist now, not fail minutes into a run."""
    references = [(("target", "path"), regime.target.path)] + [
        (("arms", i, "draft_model", "path"), arm.draft_model.path)
        for i, arm in enumerate(regime.arms)
        if arm.draft_model
    ]
    for location, reference in references:
        if reference and is_local_reference(reference):
            existing_path(regime_path, location, reference, "local model directory", need_file=False)


def model_reference(regime: Regime, regime_path: Path, convert: bool) -> str:
    """The string handed to the engine as the target model; converts a packaged GGUF if asked."""
    target = regime.target
    if target.package is not None:
        if not convert:  # where the conversion is (or will be) cached
            return str(converted_dir(target.package.name, target.package.file))
        return str(resolve_package_gguf(target.package.name, target.package.file))
    return resolve_model_path(target.path, regime_path)


def _levels_text(load: Load) -> str:
    """The load levels: closed-loop concurrency and open-loop request rates (with their arrivals)."""
    parts = [f"concurrency {load.concurrency}"] if load.concurrency else []
    if load.request_rate:
        arrivals = load.arrival + (f", burstiness {load.burstiness:g}" if load.arrival == "gamma" else "")
        cap = f"at most {load.max_concurrency} in flight" if load.max_concurrency else "no cap"
        parts.append(f"request rate {load.request_rate} req/s ({arrivals} arrivals, {cap})")
    return " and ".join(parts)


def _repeats_text(load: Load) -> str:
    if load.server_starts > 1:
        each = f", each window {load.repeats} times per start-up" if load.repeats != 1 else ""
        return f", each arm's server started {load.server_starts} times{each} (intervals over start-ups)"
    if isinstance(load.repeats, int):
        return f", each window {load.repeats} times" if load.repeats > 1 else ""
    adaptive = load.repeats
    return (
        f", each window {adaptive.min} to {adaptive.max} times until its speedup's 95% interval is within "
        f"+-{100 * adaptive.target_rel_half_width:g}%"
    )


def _chat_text(chat: ChatTemplate | None) -> str:
    """A chat workload's settings as the plan states them (nothing for none)."""
    if chat is None or chat.is_empty():
        return ""
    parts = [f"chat_template_kwargs {json.dumps(chat.template_kwargs)}"] if chat.template_kwargs else []
    if chat.system_prompt is not None:
        shown = chat.system_prompt if len(chat.system_prompt) <= 40 else chat.system_prompt[:40] + "..."
        parts.append(f"system prompt {json.dumps(shown)}")
    return "".join(f", {part}" for part in parts)


def describe_plan(plan: Plan) -> str:
    """One paragraph stating what will be measured, defaults included."""
    regime, load = plan.regime, plan.regime.load
    mode = "eager (--enforce-eager)" if regime.engine.enforce_eager else "compiled (torch.compile / graphs)"
    sampling = "greedy" if regime.sampling.temperature == 0 else f"temperature {regime.sampling.temperature}"
    workloads = ", ".join(
        f"{w.name} ({w.definition.prompt_format}{_chat_text(w.chat)})" for w in plan.workloads
    )
    if regime.exactness_applies():
        exactness = (
            f"greedy exactness vs the baseline, near tie < {regime.near_tie_margin()} nats, from the top-"
            f"{regime.exactness.top_logprobs} logprobs of a second, unmeasured baseline pass (also its noise "
            "floor; measured windows never ask for logprobs)"
        )
    elif regime.distribution_applies():
        check = regime.distribution_check
        exactness = (
            f"output-distribution check instead of a token diff: {check.samples_per_prompt} seeded samples "
            "per prompt per arm, unmeasured, compared with the baseline's"
        )
    else:
        exactness = "no exactness probe (disabled)"
    return (
        f"{len(regime.arms)} arms ({', '.join(a.name for a in regime.arms)}) x workloads {workloads} x "
        + _levels_text(load)
        + _repeats_text(load)
        + f"; {load.num_prompts} prompts per window, max {load.max_output_tokens} "
        f"output tokens, {sampling}, seed {regime.sampling.seed}, {load.warmup_requests} warm-up requests "
        f"per server (not measured); engine mode {mode}; dtype {regime.target.dtype}, TP "
        f"{regime.tensor_parallel_size}; {exactness}"
        + (f"; SLO {regime.slo.describe()} (SLO share and goodput per cell)" if regime.slo else "")
        + "."
    )
