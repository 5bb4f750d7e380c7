"""A regime resolved against this machine, before any server starts: the plan that ``bench run``,
``bench validate`` and ``bench drafter build`` all go through.

``plan_regime`` loads and checks the regime and its workloads; ``Plan.preflight`` compares it with
the live environment (mismatches, lossy settings); ``Plan.resolve_models`` finds (or builds) the
target and every drafter; ``Plan.arm_commands`` gives each arm's exact launch command.

``prepare_run`` does all of that for ``bench run``, refusals included, and hands the runner a
finished ``RunPlan``: the runner reads it and never calls back here.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from harness.config.arms import Arm
from harness.config.checks import Power
from harness.config.engines import EngineAdapter, LaunchSpec, get_adapter
from harness.config.engines.defects import known_defects, release_of
from harness.config.engines.patches import patches
from harness.config.level import window_parts
from harness.config.load import Load, Sampling
from harness.config.models import converted_dir, is_local_reference, resolve_model_path
from harness.config.regime import Regime, load_regime
from harness.config.workloads import ChatTemplate, LoadedWorkload
from harness.core.config_file import existing_path, located
from harness.core.errors import FieldError, UserError
from harness.core.machine import gpus_text
from harness.core.overrides import Override, describe
from harness.core.secrets import redact_args, redact_env, redact_url
from harness.derive.intervals import design_level
from harness.results.calibration import Calibration
from harness.results.records import RunRecord
from harness.run.calibration import CalibrationSource, chosen_calibration
from harness.run.datasets import load_workloads
from harness.run.deployment import served_before
from harness.run.drafters import MANIFEST_NAME, ResolvedDrafter, resolve_drafter, resolve_drafters
from harness.run.drafters.fit import Fit, drafter_fit
from harness.run.model_build import resolve_package_gguf
from harness.run.outlook import margins_only
from harness.run.sensors.devices import server_env
from harness.run.sensors.engine_facts import installed_facts
from harness.run.sensors.environment import collect_environment
from harness.run.server import SOCKET_DIR_PREFIX
from harness.run.validation import check_environment, cuda_check, lossy_settings, no_gpu_here, server_gpus
from harness.run.workload_pass import WorkloadPassPlan, workload_pass_plan


@dataclass(frozen=True)
class Preflight:
    """What differs between the regime and this machine, and the lossy settings it asks for."""

    mismatches: list[str]
    lossy: list[str]
    # the GPUs each arm's server runs on (validation.server_gpus: index, name, uuid...); [] on a CPU
    # regime or where no GPU is visible
    gpus: list[dict[str, Any]] = field(default_factory=list)
    # a GPU regime's driver CUDA against its engine's (validation.cuda_check), checked or why not:
    # recorded in environment.json; None on a CPU regime or where no GPU is visible
    cuda_check: str | None = None

    def notes(self) -> list[str]:
        """What `bench validate` and `bench run` print besides the mismatches."""
        gpus = [f"each server runs on {gpus_text(self.gpus)}"] if self.gpus else []
        return gpus + ([f"CUDA: {self.cuda_check}"] if self.cuda_check else [])


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
    # what the command line set in the regime file (already in ``regime``), recorded with the run
    overrides: tuple[Override, ...] = ()

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
        """What ``arm``'s server is launched with; an engine on a Unix socket (or with a key file)
        is shown with the path as each start-up makes it (``harness.run.server``), XXXXXXXX for its
        random part."""
        draft = self.drafters[arm.name].path if arm.draft_model is not None else None
        private = Path(tempfile.gettempdir()) / f"{SOCKET_DIR_PREFIX}XXXXXXXX"
        where = {"uds": str(private / "engine.sock")} if self.adapter.unix_socket else {}
        if self.adapter.keyed and not where:
            where["key_file"] = str(private / "server-key.yaml")  # its per-start key (harness.run.server)
        return self.adapter.launch_spec(
            self.regime, arm, model, port, sys.executable, draft_model=draft, **where
        )

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
        inherited = environment.get("env") or {}
        gpus = server_gpus(self.regime, environment)
        cuda = cuda_check(self.regime, environment)[1] if gpus else None
        lossy = lossy_settings(self.regime, inherited)
        return Preflight(mismatches=mismatches, lossy=lossy, gpus=gpus, cuda_check=cuda)

    def arm_commands(self, model: str, gpus: list[dict[str, Any]] | None = None) -> list[ArmCommand]:
        """Each arm's exact launch command (after ``resolve_models``), the port shown as PORT; with
        ``gpus`` (``Preflight.gpus``) the devices the harness gives each server, as the runner does."""
        devices = server_env([g["index"] for g in gpus]) if gpus else {}
        commands = []
        for arm in self.regime.arms:
            # the port is wherever two specs for two ports differ: the engine names its own flag
            spec, other = (self.launch_spec(arm, model, port) for port in _SHOWN_PORTS)
            # shown with its secrets redacted (harness.core.secrets): a terminal is not a safe place
            shown, twins = redact_args(spec.argv), redact_args(other.argv)
            argv = [_show_port(part, twin) for part, twin in zip(shown, twins, strict=True)]
            env, other_env = redact_env(spec.env | devices), redact_env(other.env | devices)
            env = " ".join(f"{k}={shlex.quote(_show_port(v, other_env[k]))}" for k, v in sorted(env.items()))
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


_SHOWN_PORTS = (10101, 20202)  # two ports no other launch setting spells


def _show_port(part: str, twin: str) -> str:
    """An argument or env value with the port written as PORT, found by comparing it with its twin
    built for the other port."""
    return part if part == twin else part.replace(str(_SHOWN_PORTS[0]), "PORT")


def changed_workload(record: RunRecord, plan: Plan) -> str | None:
    """The first of ``plan``'s workloads whose prompts are not the ones the run ``record`` measured
    (by content hash); None when every one is the same."""
    stored = {w.name: w.content_sha256 for w in record.workloads}
    return next((w.name for w in plan.workloads if stored.get(w.name) != w.content_sha256), None)


def plan_regime(regime_path: Path, regime: Regime | None = None, overrides: Sequence[Override] = ()) -> Plan:
    """Load and check a regime and its workloads; starts nothing. ``overrides``: what the command
    line set in the file (in ``regime`` when it is given), recorded with the run; a refusal here
    names them too (the field it names may be one the command line set)."""
    try:
        return _plan_regime(regime_path, regime, overrides)
    except UserError as exc:
        if not overrides or "from the command line)" in str(exc):
            raise
        raise UserError(f"{exc} (with {describe(overrides)} from the command line)") from None


def _plan_regime(regime_path: Path, regime: Regime | None, overrides: Sequence[Override]) -> Plan:
    if regime is None:
        from harness.results.study.policy_file import resolve_schedules

        regime = resolve_schedules(load_regime(regime_path, overrides), regime_path)
    if not regime.endpoints():  # an endpoint's model is on its own machine
        _check_local_paths(regime, regime_path)
    adapter = get_adapter(regime.engine.name)
    installed = installed_facts(adapter, regime.engine.version)  # where the adapter's tables do not decide
    for location, message in adapter.option_problems(regime, installed)[:1]:
        raise located(regime_path, FieldError(location, message))
    if not regime.allow_lossy_acceptance:  # what bench run refuses, bench validate refuses, at its line
        for problem in adapter.lossy_settings(regime)[:1]:
            where, _, what = problem.partition(": ")
            location = tuple(int(p) if p.isdecimal() else p for p in re.findall(r"[^.\[\]]+", where))
            message = f"lossy or fake acceptance settings: {what} (allow_lossy_acceptance: true measures it)"
            raise located(regime_path, FieldError(location, message))
    _check_context(regime, regime_path)
    workloads = load_workloads(regime, regime_path)  # files, and random prompts (--dataset random)
    names: list[str] = []  # the names the cells carry: a conversation's one per turn
    for index, workload in enumerate(workloads):
        for name in workload.cell_names():
            if name in names:
                message = f"two workloads' cells would share the name '{name}'"
                raise located(regime_path, FieldError(("workloads", index), message))
            names.append(name)
    _check_conversations(regime, regime_path, workloads)
    _check_workload_names(regime, regime_path, names)
    return Plan(
        regime=regime,
        regime_path=regime_path,
        adapter=adapter,
        workloads=workloads,
        overrides=tuple(overrides),
    )


def _check_workload_names(regime: Regime, regime_path: Path, names: list[str]) -> None:
    """Every workload a gate or a deciding design's window names is one of the regime's cells' (a
    misspelt window would match nothing and stop a deciding run at its minimum)."""
    gates = regime.gates
    named = [(("gates", "rules", i, "workload"), g.workload) for i, g in enumerate(gates.rules)]
    named += [(("gates", "golden_tau", i, "workload"), g.workload) for i, g in enumerate(gates.golden_tau)]
    named += [
        (("load", "server_starts", "windows", i), window_parts(window)[0] or None)
        for i, window in enumerate(regime.load.decided_windows())
    ]
    for location, workload in named:
        if workload is not None and workload not in names:
            message = f"no workload named '{workload}' (workloads: {', '.join(names)})"
            raise located(regime_path, FieldError(location, message, value=workload, choices=names))


def _check_context(regime: Regime, regime_path: Path) -> None:
    """Prompts padded to load.context_tokens must leave the output its room in the model's window."""
    load, window = regime.load, regime.target.max_model_len
    if load.context_tokens is None or load.context_tokens <= window - load.max_output_tokens:
        return
    message = (
        f"{load.context_tokens} prompt tokens and {load.max_output_tokens} output tokens do not fit "
        f"target.max_model_len {window} (at most {window - load.max_output_tokens})"
    )
    raise located(regime_path, FieldError(("load", "context_tokens"), message, value=load.context_tokens))


def _check_conversations(regime: Regime, regime_path: Path, workloads: list[LoadedWorkload]) -> None:
    """A conversation workload measures each turn as a window built from the turn before, on the same
    server: a fixed number of repeats (an adaptive repeat would stop mid-conversation) and no ramp (one
    continuous window has no turns)."""
    talks = [w.name for w in workloads if w.turns > 1]
    if not talks:
        return
    load = regime.load
    if not isinstance(load.repeats, int):
        message = f"conversation workloads ({', '.join(talks)}) take a fixed number of repeats"
        raise located(regime_path, FieldError(("load", "repeats"), message))
    if load.ramp:
        message = f"conversation workloads ({', '.join(talks)}) cannot run in a ramp (it has no turns)"
        raise located(regime_path, FieldError(("load", "ramp"), message))


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
    if load.ramp:
        stages = " -> ".join(f"{s.label()} for {s.duration_s:g} s" for s in load.ramp)
        parts.append(f"a ramp {stages} ({load.ramp_duration_s():g} s, one continuous window per start-up)")
    return " and ".join(parts)


def _repeats_text(load: Load, endpoints: bool = False) -> str:
    if load.max_server_starts() > 1 and endpoints:  # nothing is started: a round is one window of each
        return f", each arm's server measured in {load.max_server_starts()} rounds (intervals over rounds)"
    if load.max_server_starts() > 1:
        each = f", each window {load.repeats} times per start-up" if load.repeats != 1 else ""
        low, high = load.min_server_starts(), load.max_server_starts()
        asked = load.decided_windows()
        until = f"the verdicts at {', '.join(asked)} are" if asked else "every verdict is"
        budget = load.budget_minutes()
        within = f" or {budget:g} minutes are spent" if budget is not None else ""
        times = f"{low} to {high} times, until {until} decided{within}" if load.decides() else f"{high} times"
        looks = load.looks()
        level = design_level(looks, first_look=load.first_look())
        level = f" at {100 * level:.1f}% for {looks} looks" if looks > 1 else ""
        return f", each arm's server started {times}{each} (intervals over start-ups{level})"
    if isinstance(load.repeats, int):
        return f", each window {load.repeats} times" if load.repeats > 1 else ""
    adaptive = load.repeats
    return (
        f", each window {adaptive.min} to {adaptive.max} times until its speedup's 95% interval is within "
        f"+-{100 * adaptive.target_rel_half_width:g}%"
    )


def _turns_text(workload: LoadedWorkload) -> str:
    conversation = workload.definition.conversation
    if conversation is None:
        return ""
    later = "its own later turns" if conversation.follow_up is None else "a follow-up instruction"
    return (
        f", {conversation.turns} turns, each a cell: the model's own answers and {later} carried into the "
        "next turn, the prefix cache kept between turns"
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
        f"{w.name} ({w.definition.prompt_format}{_chat_text(w.chat)}{_turns_text(w)})" for w in plan.workloads
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
        + _repeats_text(load, regime.endpoints())
        + f"; {load.num_prompts} prompts per window"
        + (f" padded to about {load.context_tokens} tokens" if load.context_tokens else "")
        + f", max {load.max_output_tokens} "
        f"output tokens, {sampling}, seed {regime.sampling.seed}, {_warmup_text(load, len(plan.workloads))}"
        f"; engine mode {mode}; dtype {regime.target.dtype}, TP "
        f"{regime.tensor_parallel_size}; {exactness}"
        + (f"; SLO {regime.slo.describe()} (SLO share and goodput per cell)" if regime.slo else "")
        + _patches_text(regime)
        + (f"; set on the command line: {describe(plan.overrides)}" if plan.overrides else "")
        + "."
    )


def _warmup_text(load: Load, workloads: int) -> str:
    """The warm-up every server start-up gets (``Load.warmup_levels``), in words."""
    levels = load.warmup_levels()
    if not levels:
        return "no warm-up"
    each = ", ".join(f"{count} at concurrency {level.concurrency}" for level, count in levels)
    where = "per workload " if workloads > 1 else ""
    total = load.warmup_count(workloads)
    return (
        f"{total} warm-up request{'' if total == 1 else 's'} per server start-up (not measured; {where}"
        f"{each}, before the first window)"
    )


def _patches_text(regime: Regime) -> str:
    known = patches()
    applied = [f"{known[n].upstream} ({known[n].label()})" for n in regime.engine.patches]
    return (
        f"; engine patched (servers only, never the installed engine): {'; '.join(applied)}"
        if applied
        else ""
    )


@dataclass(frozen=True)
class RunPlan:
    """A regime made ready to run on this machine, before anything starts: the engine is installed,
    the machine matches the regime (or the mismatches are allowed), the target and every drafter are
    resolved and built, and each drafter fits its arm. ``Runner`` only reads it."""

    regime: Regime
    regime_path: Path
    adapter: EngineAdapter
    workloads: tuple[LoadedWorkload, ...]
    model: str  # the target as the engine loads it
    drafters: dict[str, ResolvedDrafter]  # arm name -> its drafter, for the arms with a draft_model
    draft_paths: dict[str, str]  # arm name -> the drafter path the engine is given
    description: str  # what will be measured (``describe_plan``), printed before the arms run
    engine_version: str
    environment: dict[str, Any]  # this machine, as collected (``environment.json`` adds model identities)
    mismatches: tuple[str, ...]  # regime and drafter mismatches allowed by --allow-mismatch, recorded
    lossy: tuple[str, ...]  # lossy acceptance settings the regime allows, recorded
    known_defects: tuple[str, ...]  # known engine defects forced through (--allow-known-defect), recorded
    engine_patches: tuple[dict[str, str], ...]  # the patches the servers run with: name, label, sha256, ...
    allow_mismatch: bool  # whether a server that does not run the regime may go on (checked at start-up)
    started: float  # time.monotonic() when preparing began: the invocation's wall time counts from it
    # the regime's parts the runner reads at every window
    load: Load
    sampling: Sampling
    power: Power
    baseline: str  # the baseline arm's name
    startup_timeout_s: float
    # greedy exactness: the baseline's full unmeasured logprob pass on its first start-up (a design of
    # one round), or, over two or more start-ups, ``margins_pass``: logprobs only for the prompts an
    # output diverged on, on its later start-ups (``outlook.margins_only``)
    reference_pass: bool
    distribution_samples: int | None  # seeded samples per prompt of the distribution check; None: none
    # this machine's calibration of the regime (the runner copies it into the run as calibration.json);
    # None: none found, --no-calibration, or a resumed run (it keeps the one in its directory)
    calibration: Calibration | None = None
    # the GPUs every server runs on (index, name, uuid, as environment.json's server_gpus): the runner
    # gives each server exactly these and reads power and neighbours on them; () where none was
    # chosen (a CPU regime, no GPU visible): nothing is set and NVML, if any, reads what is visible
    gpus: tuple[dict[str, Any], ...] = ()
    overrides: tuple[Override, ...] = ()  # what the command line set in the regime file, recorded
    # an endpoint regime: what each arm's server said it serves before the run (in its fingerprint)
    served_endpoints: dict[str, dict[str, Any]] = field(default_factory=dict)
    # the baseline's workload pass (verdict.covariate): each workload's pool, its cache key and whether
    # it is kept already, or why there is none; None: not planned (a plan made without it)
    workload_pass: WorkloadPassPlan | None = None
    margins_pass: bool = False  # greedy exactness over 2+ start-ups: the baseline's targeted logprob pass

    def fingerprint(self) -> str:
        """The run's fingerprint: the regime's, and for existing servers what each one serves."""
        if not self.served_endpoints:
            return self.regime.fingerprint()
        served = json.dumps(self.served_endpoints, sort_keys=True)
        return hashlib.sha256(f"{self.regime.fingerprint()} {served}".encode()).hexdigest()[:16]


def run_plan(
    plan: Plan,
    model: str,
    *,
    served_endpoints: dict[str, dict[str, Any]] | None = None,
    engine_version: str = "",
    environment: dict[str, Any] | None = None,
    mismatches: list[str] | None = None,
    lossy: list[str] | None = None,
    known_defects: list[str] | None = None,
    allow_mismatch: bool = False,
    started: float | None = None,
    calibration: Calibration | None = None,
    gpus: list[dict[str, Any]] | None = None,
) -> RunPlan:
    """The finished value from a plan whose models are resolved; checks nothing (``prepare_run``
    checks, then builds it with this)."""
    regime = plan.regime
    return RunPlan(
        regime=regime,
        regime_path=plan.regime_path,
        adapter=plan.adapter,
        workloads=tuple(plan.workloads),
        model=model,
        drafters=dict(plan.drafters),
        draft_paths={name: drafter.path for name, drafter in plan.drafters.items()},
        description=describe_plan(plan),
        engine_version=engine_version,
        environment=environment or {},
        mismatches=tuple(mismatches or ()),
        lossy=tuple(lossy or ()),
        known_defects=tuple(known_defects or ()),
        engine_patches=tuple(
            {**p.record(), "label": p.label()} for p in (patches()[n] for n in regime.engine.patches)
        ),
        allow_mismatch=allow_mismatch,
        started=time.monotonic() if started is None else started,
        load=regime.load,
        sampling=regime.sampling,
        power=regime.power,
        baseline=regime.baseline_arm.name,
        startup_timeout_s=regime.engine.startup_timeout_s,
        reference_pass=regime.exactness_applies() and not margins_only(regime),
        margins_pass=margins_only(regime),
        distribution_samples=(
            regime.distribution_check.samples_per_prompt if regime.distribution_applies() else None
        ),
        calibration=calibration,
        gpus=tuple(gpus or ()),
        overrides=plan.overrides,
        served_endpoints=served_endpoints or {},
        workload_pass=workload_pass_plan(
            regime, plan.regime_path, plan.workloads, engine_version, environment or {}
        ),
    )


def prepare_run(
    plan: Plan,
    console: Console,
    allow_mismatch: bool = False,
    resumed_model: str | None = None,
    calibration: CalibrationSource | None = None,
    allow_known_defect: bool = False,
) -> RunPlan:
    """Everything ``bench run`` does before a server starts, in this order: the engine's version,
    this machine against the regime, this machine's calibration of the regime (``calibration``
    says where to look; one named that was made elsewhere is refused), the target and drafters
    built, and each drafter against its arm. A refusal raises here, before anything starts; what
    ``allow_mismatch`` lets through is printed and recorded (it never lets a calibration of another
    machine or regime through). A resumed run keeps the target it started with (``resumed_model``)
    and the calibration in its directory; its drafters' fits were checked when it started."""
    started = time.monotonic()
    if plan.regime.sweep is not None:  # a study: each of its points is a job (harness.run.study.run)
        raise UserError(f"{plan.regime_path}: a regime with a sweep: section is a study; run it as one")
    if plan.regime.endpoints():
        return _endpoint_plan(plan, console, allow_mismatch, started)
    version, environment, preflight = _machine_checks(plan, console, allow_mismatch)
    forced = refuse_known_defects(plan, version, allow_known_defect, console)
    calibrated, notes = None, []
    if resumed_model is None:
        source = calibration or CalibrationSource()
        calibrated = chosen_calibration(source, plan.regime, environment, plan.regime_path, notes)
    for note in notes:
        console.print(f"[yellow]calibration[/] {escape(note)}", soft_wrap=True)
    if calibrated is not None:
        console.print(f"Intervals from {escape(calibrated.label())}", soft_wrap=True)
    model = plan.resolve_models(build=True, console=console)
    problems = []
    if resumed_model is None:
        problems = [p for fit in plan.drafter_fits(model).values() for p in fit.problems]
        why = "a drafter does not fit its arm"
        _refuse_unless_allowed(plan, problems, why, "drafter mismatch", console, allow_mismatch)
    return run_plan(
        plan,
        resumed_model or model,
        engine_version=version,
        environment=environment,
        mismatches=preflight.mismatches + problems,
        lossy=preflight.lossy,
        known_defects=forced,
        allow_mismatch=allow_mismatch,
        started=started,
        calibration=calibrated,
        gpus=preflight.gpus,
    )


ENDPOINT_MODEL = "the model each endpoint serves"


def _endpoint_plan(plan: Plan, console: Console, allow_mismatch: bool, started: float) -> RunPlan:
    """A regime whose arms are existing servers: nothing is installed, built or started here, and
    this machine is the client's, not the servers'. The regime's pins (hardware, target, engine,
    each arm's method and K) are what the user declares the servers to be: recorded as declared,
    checked only where a server reports them (its version, its context length: the runner)."""
    regime = plan.regime
    unset = [(i, a) for i, a in enumerate(regime.arms) if a.api_key_env and a.api_key_env not in os.environ]
    for index, arm in unset[:1]:
        raise located(
            plan.regime_path,
            FieldError(("arms", index, "api_key_env"), f"{arm.api_key_env} is not set in this environment"),
        )
    declared = (
        "declared, not checked: the arms are existing servers; hardware, target and engine are what the "
        "regime says they run"
    )
    console.print(f"[yellow]{escape(declared)}[/]", soft_wrap=True, highlight=False)
    environment = collect_environment(plan.adapter.installed_version())  # the client's machine
    environment["endpoints"] = {arm.name: redact_url(arm.endpoint or "") for arm in regime.arms}
    timeout = regime.engine.startup_timeout_s
    # each endpoint reached now, before any window
    served = {arm.name: served_before(plan.adapter, arm, timeout) for arm in regime.arms}
    return run_plan(
        plan,
        ENDPOINT_MODEL,
        engine_version=f"{regime.engine.name} (endpoints: as each server reports it)",
        environment=environment,
        mismatches=[],
        allow_mismatch=allow_mismatch,
        started=started,
        served_endpoints=served,
    )


def _machine_checks(
    plan: Plan, console: Console, allow_mismatch: bool
) -> tuple[str, dict[str, Any], Preflight]:
    """The installed engine's version, this machine's environment and the regime against it: lossy
    settings refuse unless the regime allows them, mismatches unless ``allow_mismatch``."""
    version = _engine_version(plan)
    environment = collect_environment(version)
    preflight = plan.preflight(environment)
    if preflight.gpus:  # recorded with the run (environment.json)
        environment |= {"server_gpus": preflight.gpus, "cuda_check": preflight.cuda_check}
    for note in preflight.notes():
        console.print(escape(note), soft_wrap=True, highlight=False)
    if preflight.lossy and not plan.regime.allow_lossy_acceptance:
        raise UserError(
            f"{plan.regime_path}: lossy or fake acceptance settings (set allow_lossy_acceptance: true to "
            "measure them anyway; they are flagged in the results):\n  " + "\n  ".join(preflight.lossy)
        )
    why = "this machine does not match the regime"
    no_gpu = no_gpu_here(plan.regime, environment)  # --allow-mismatch cannot help: say where to run it
    checks = f" (`bench validate {plan.regime_path}` checks the file on any machine)."
    next_step = no_gpu + checks if no_gpu else None
    _refuse_unless_allowed(
        plan, preflight.mismatches, why, "regime mismatch", console, allow_mismatch, next_step
    )
    return version, environment, preflight


def refuse_known_defects(
    plan: Plan, version: str | None, allow: bool, console: Console | None = None
) -> list[str]:
    """The known defects of engine ``version`` that the regime meets (``harness.config.engines.defects``):
    refused, each in one line naming the upstream issue and the ways out, unless ``allow`` (then
    printed and returned, to be recorded with the run)."""
    found = known_defects(plan.regime, version)
    release = release_of(version or "")
    if found and not allow:
        raise UserError("\n".join(f"{plan.regime_path}: {d.refusal(plan.regime, release)}" for d in found))
    lines = [d.forced(plan.regime, release) for d in found]
    for line in lines if console is not None else ():
        console.print(f"[yellow]known engine defect (forced):[/] {escape(line)}", soft_wrap=True)
    return lines


def _engine_version(plan: Plan) -> str:
    version = plan.adapter.installed_version()
    if version is None:
        raise UserError(
            f"engine '{plan.regime.engine.name}' is not installed in {sys.executable}; for the CPU "
            "default run scripts/setup-cpu.sh (or pip install -e '.[cpu]')"
        )
    return version


def _refuse_unless_allowed(
    plan: Plan,
    found: list[str],
    why: str,
    label: str,
    console: Console,
    allow_mismatch: bool,
    next_step: str | None = None,
) -> None:
    """Mismatches stop the run before anything starts, unless allowed: then each is printed
    (and recorded with the run). The refusal ends with ``next_step``, by default --allow-mismatch."""
    if found and not allow_mismatch:
        raise UserError(
            f"{plan.regime_path}: {why}; nothing was started:\n  "
            + "\n  ".join(found)
            + "\n"
            + (next_step or "Pass --allow-mismatch to run anyway (every mismatch is recorded).")
        )
    for item in found:
        console.print(f"[yellow]{label} (allowed):[/] {escape(item)}", soft_wrap=True)
