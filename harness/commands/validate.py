"""`bench validate REGIME`: check a regime (or a study) and print what `bench run` would launch."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from harness.commands.common import (
    EXIT_OK,
    EXIT_USAGE,
    add_executor_flags,
    add_override_flags,
    executor_options,
    overrides_from,
)
from harness.commands.dataset_flags import add_dataset_flags, dataset_overrides_from
from harness.core.errors import UserError

NAME = "validate"
SUMMARY = "check a regime file and print each arm's exact launch command; starts nothing"
DESCRIPTION = """
Read and check a regime file: every field, its workloads (paths relative to the regime file), its
gates and its drafters, then this machine against the regime's pins, and print each arm's exact
launch command. Nothing is started and nothing is written.

A regime with a sweep: section is a study: every point is checked and printed, and the placement of
the points on the node (or their jobs on the chosen executor) is shown.

It says which engines this Python environment holds (vLLM and SGLang need one environment each). On
the machine a regime runs on (its GPUs visible; a CPU regime: any machine), a regime whose engine is
not installed here is refused (exit 2) with the command that makes its environment; elsewhere the
file is checked and the command is printed. --download fetches the target and the drafters into the
Hugging Face cache before the night, after checking the cache's disk holds them.
"""
EXAMPLES = """
bench validate regimes/cpu_default.yaml
bench validate regimes/cpu_default.yaml --dataset random --input-len 128 --output-len 64
bench validate regimes/h200_tp_study.yaml --executor slurm --partition gpu
pip install "$(bench validate regimes/h200_tp8.yaml --engine-requirement)"
bench validate regimes/h200_tp8_deepseek_mtp.yaml --download   # ~690 GB into the HF cache, before the night
bench validate regimes/h200_tp8.yaml --engine-version 0.35.0   # what an upgrade would break
"""
INTERRUPTED = "nothing was started or written"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("regime", type=Path, help="regime YAML file")
    parser.add_argument(
        "--engine-requirement",
        action="store_true",
        help="print only the pip requirement of the engine release the regime pins (e.g. vllm==0.33.0), "
        'for installing exactly that: pip install "$(bench validate REGIME --engine-requirement)"',
    )
    parser.add_argument(
        "--engine-version",
        metavar="VERSION",
        help="check the regime's arms and engine settings against another release of its engine instead "
        "of the one it pins, and list everything that would break there (removed keys, keys that release "
        "ignores, flags, known defects); exit status 2 when something breaks",
    )
    parser.add_argument(
        "--download",
        action="store_true",
        help="fetch the regime's target and drafters (those given as hub ids) into the Hugging Face cache "
        "the servers read (HF_HOME), after checking its disk has room for them (their size from the hub, "
        "else the regime's estimate); nothing else is checked or printed. Run it before the night: a first "
        "start-up that downloads spends its engine.startup_timeout_s on it",
    )
    parser.add_argument(
        "--allow-known-defect",
        action="store_true",
        help="as for bench run: report a known engine defect the regime meets instead of refusing it",
    )
    add_override_flags(parser)
    add_dataset_flags(parser)
    add_executor_flags(parser)


def _defects(plan: Any, allow: bool, console: Console) -> None:
    """The regime against the known defects of the engine release it pins (or, unpinned, the
    installed one): ``bench run`` would refuse what this refuses."""
    from harness.run.plan import refuse_known_defects

    version = plan.regime.engine.version or plan.adapter.installed_version()
    refuse_known_defects(plan, version, allow, console)


def run(args: argparse.Namespace, console: Console) -> int:
    from harness.config.engines import engine_requirement
    from harness.run.plan import plan_regime

    overrides = dataset_overrides_from(args) + overrides_from(args)
    pending: list[str] = []  # the arms whose policy a study beside the regime has not written yet
    regime = _read(args.regime, overrides, pending)
    if args.engine_requirement:
        print(engine_requirement(regime, args.regime))  # plain: a script reads it
        return EXIT_OK
    if args.engine_version:
        return _under_release(args.regime, regime, args.engine_version, console)
    if args.download:
        return _download(args.regime, regime, console)
    if regime.sweep is not None:
        return _validate_study(args.regime, regime, executor_options(args), console, args.allow_known_defect)
    plan = plan_regime(args.regime, regime, overrides)
    _defects(plan, args.allow_known_defect, console)
    fingerprint = (
        "fingerprint once its k_schedule is resolved" if pending else f"fingerprint {regime.fingerprint()}"
    )
    console.print(f"[green]{args.regime}: valid[/] (regime '{regime.name}', {fingerprint})")
    for line in pending:
        console.print(f"[yellow]pending:[/] {escape(line)}", soft_wrap=True, highlight=False)
    _print_plan(plan, console)
    return EXIT_OK


def _read(path: Path, overrides: Any, pending: list[str]) -> Any:
    """The regime as `bench run` reads it (``read_regime``), except an arm whose ``k_schedule: {from:
    ...}`` names a policy that a study regime beside it has not written yet: left unresolved, and
    said in ``pending`` (the file is valid; `bench run` refuses it, naming that study). A study's
    arms are resolved as `bench run` resolves them: its points' commands need the schedule."""
    from harness.config.regime import load_regime
    from harness.results.study.policy_file import resolve_schedules

    loaded = load_regime(path, overrides)
    return resolve_schedules(loaded, path, pending if loaded.sweep is None else None)


def _under_release(path: Path, regime: Any, version: str, console: Console) -> int:
    """Every problem the regime would have pinned to ``version`` of its engine (not only the first,
    as a run refuses): what breaks on an upgrade."""
    from harness.config.engines import get_adapter
    from harness.config.engines.defects import known_defects
    from harness.core.config_file import located
    from harness.core.errors import FieldError
    from harness.run.sensors.engine_facts import installed_facts

    moved = regime.model_copy(update={"engine": regime.engine.model_copy(update={"version": version})})
    adapter = get_adapter(moved.engine.name)
    found = [
        str(located(path, FieldError(location, message)))
        for location, message in adapter.option_problems(moved, installed_facts(adapter, version))
    ]
    found += [
        f"{path}: {d.upstream} in {moved.engine.name} {version}: {d.effect} (avoid: {d.avoid})"
        for d in known_defects(moved, version)
    ]
    was = regime.engine.version or "unpinned"
    if not found:
        console.print(f"[green]{path}: nothing breaks under {moved.engine.name} {version}[/] (pinned: {was})")
        return EXIT_OK
    console.print(
        f"[red]{path}: {len(found)} thing(s) break under {moved.engine.name} {version}[/] (pinned: {was}):"
    )
    for line in found:
        console.print(f"  {escape(line)}", soft_wrap=True)
    return EXIT_USAGE


def _validate_study(path: Path, regime: Any, options: Any, console: Console, allow_defect: bool) -> int:
    from harness.results.study.record import ExecutorOptions
    from harness.run.study.sweep import plan_study

    options = options or ExecutorOptions()
    study, plans = plan_study(path, regime)
    for plan in plans:
        _defects(plan, allow_defect, console)
    sweep = regime.sweep
    axes = [f"{p} in {v}" for p, v in sweep.regime.items()]
    axes += [f"{arm}.{f} in {v}" for arm, fields in sweep.arms.items() for f, v in fields.items()]
    console.print(
        f"[green]{path}: valid study[/] (regime '{regime.name}'): {len(study.points)} "
        f"point{'s' if len(study.points) != 1 else ''}, "
        f"{study.server_starts()} server start-ups (load.server_starts per arm per point; on this "
        "project's 2-core CPU machines a start-up took ~25 s in eager mode and ~2 min compiled). Axes: "
        + "; ".join(axes),
        highlight=False,
    )
    for point, plan in zip(study.points, plans, strict=True):
        console.rule(f"{point.id}: {point.label()} (fingerprint {point.regime.fingerprint()})")
        _print_plan(plan, console)
    _print_placement([p.id for p in study.points], plans, options, regime, console)
    return EXIT_OK


def _print_placement(ids: list[str], plans: list[Any], options: Any, regime: Any, console: Console) -> None:
    """Where the points would run: slots on this node (local), or one job per point."""
    from harness.run.study.placement import plan_lines
    from harness.run.study.run import placement

    node = "this node"
    try:
        wanted, slots, devices = placement(ids, plans, options)
    except UserError:
        if options.gpus is not None or regime.hardware.kind != "gpu":
            raise
        # validating a GPU study away from its node: plan for the node the regime pins
        options = options.model_copy(update={"gpus": regime.hardware.gpu_count})
        wanted, slots, devices = placement(ids, plans, options)
        node = "a node as hardware.gpu_count pins it (this machine has fewer GPUs)"
    console.rule(f"executor {options.name}")
    if slots is not None:
        gpus = f"{len(devices)} GPUs ({','.join(devices)})" if devices else "no GPU (CPU-only)"
        console.print(
            f"Placement on {node}, {gpus}: each point waits for the ones listed",
            highlight=False,
            markup=False,
        )
        for line in plan_lines(slots, wanted, devices):
            console.print(f"  {line}", highlight=False, markup=False)
    else:
        for demand, plan in zip(wanted, plans, strict=True):
            console.print(
                f"  {demand.point}: one job, 1 node, {demand.gpus} GPUs, time limit {demand.minutes} min",
                highlight=False,
            )
            if options.name == "slurm" and options.slurm_cluster == "slurm":
                for line in _sbatch_lines(demand, plan, options, regime):
                    console.print(f"    {line}", highlight=False, markup=False)
        if options.name == "slurm":
            from harness.run.study.executors import unpinned_cpu_note

            note = unpinned_cpu_note([d.point for d in wanted], plans)
            if note:
                console.print(f"  {note}", highlight=False, markup=False)


def _sbatch_lines(demand: Any, plan: Any, options: Any, regime: Any) -> list[str]:
    """The point's ``#SBATCH`` lines as submitit will write them (its output files under the study
    directory, which does not exist yet)."""
    from harness.run.study.executors import JobSpec, sbatch_options

    folder = Path("results") / regime.name / "study-<id>" / "slurm"
    spec = JobSpec(
        point=demand.point,
        attempt=1,
        name=f"{regime.name}-{demand.point}",
        command=[],
        log=folder,
        gpus=demand.gpus,
        cpus=plan.regime.hardware.cpu_count,
        devices=(),
        time_limit_min=demand.minutes,
    )
    return sbatch_options(spec, options, folder)


def _download(path: Path, regime: Any, console: Console) -> int:
    """``--download``: the regime checked as ``bench run`` reads it, then its hub models fetched (a
    study: every point's)."""
    from harness.run.weights import download

    if regime.sweep is not None:
        from harness.run.study.sweep import plan_study

        regimes = [plan.regime for plan in plan_study(path, regime)[1]]
    else:
        from harness.run.plan import plan_regime

        regimes = [plan_regime(path, regime).regime]
    console.print(f"[green]{path}: valid[/]; its models, into the Hugging Face cache:", highlight=False)
    fetched: dict[str, str] = {}
    for chosen in regimes:  # a study's points: each repository once
        fetched |= download(chosen, console, done=frozenset(fetched))
    if fetched:
        console.print("[green]downloaded[/]: the first start-ups load them from the cache")
    return EXIT_OK


def _engine_here(plan: Any, environment: dict[str, Any]) -> str:
    """The engines this environment holds, in a line; refuses (``UserError``) a regime whose engine
    it cannot run where this machine is the regime's (its GPUs visible, or a CPU regime), naming the
    command that makes the right environment; elsewhere that command is part of the line."""
    from harness.config.engine_environment import (
        engines_line,
        environment_command,
        installed_engines,
        runs_here,
    )
    from harness.config.engines import engine_requirement

    regime = plan.regime
    found = installed_engines()
    line = engines_line(found)
    mine = next((e for e in found if e.engine == regime.engine.name), None)
    if mine is None or runs_here(regime, mine):
        return line
    requirement = engine_requirement(regime, plan.regime_path) if regime.engine.version else None
    command = environment_command(regime, requirement)
    if mine.distribution is None:
        what = f"{regime.engine.name} is not installed in this environment"
    elif mine.broken:
        what = f"this environment's {mine.text()}"
    else:
        what = f"this environment holds {mine.text()}, not the GPU build"
    wanted = requirement or regime.engine.name
    if regime.hardware.kind == "cpu" or environment.get("gpus"):
        raise UserError(
            f"{plan.regime_path}: the regime runs {wanted}, and {what} (vLLM and SGLang need one each): "
            f"make it with: {command}; then bench validate {plan.regime_path} again"
        )
    return f"{line} The regime runs {wanted}; on its machine, make its environment: {command}"


def _print_endpoints(plan: Any, console: Console) -> None:
    from harness.core.secrets import redact_url

    console.print(
        "Every arm is an existing server: nothing is started here, and its hardware, target and engine "
        "are declared, not checked (what each server reports of itself is recorded when it runs).",
        highlight=False,
    )
    for arm in plan.regime.arms:
        key = f", key from ${arm.api_key_env}" if arm.api_key_env else ""
        console.print(
            f"  {escape(arm.name)} ({arm.method}): {escape(redact_url(arm.endpoint))}{key}", highlight=False
        )


def _print_plan(plan: Any, console: Console) -> None:
    """What `bench validate` shows of one concrete regime: the plan, this machine against it, commands."""
    from harness.config.arms import KScheduleSource
    from harness.run.outlook import earlier_round_minutes, night_plan
    from harness.run.plan import describe_plan
    from harness.run.sensors import environment as sensors
    from harness.run.validation import no_gpu_here, prompt_warnings, window_warnings
    from harness.run.workload_pass import workload_pass_plan

    environment = None
    if not plan.regime.endpoints():  # the engine's environment first: refused here before the plan
        environment = sensors.collect_environment(plan.adapter.installed_version())
        engines = _engine_here(plan, environment)
    console.print(describe_plan(plan), highlight=False)
    # what the design is expected to take to decide and the night it takes (start-ups, windows,
    # passes, wall time and $), at the pace and start-ups of this regime's last run under results/
    # (the default --results-dir), else at stated assumptions; a design that cannot decide: a warning
    # the baseline's workload pass (verdict.covariate), as bench run on this machine would make it
    version = (environment or {}).get("engine_version") or ""
    planned = workload_pass_plan(plan.regime, plan.regime_path, plan.workloads, version, environment or {})
    earlier = earlier_round_minutes(Path("results"), plan.regime)
    night = night_plan(plan.regime, earlier, workload_pass=planned)
    shown = night.lines if night.cannot is not None else (night.outlook, *night.lines)
    shown = (*shown, planned.line())
    console.print("\n".join(shown), highlight=False, markup=False)
    warnings = [night.cannot] if night.cannot is not None else []
    warnings += night.warnings  # a start-up past its timeout, the minimum rounds past the budget
    warnings += window_warnings(plan.regime, plan.regime_path) + prompt_warnings(
        plan.regime, plan.regime_path
    )
    for warning in warnings:
        console.print(f"[yellow]warning:[/] {escape(warning)}", soft_wrap=True)
    _print_detectable(plan.regime, console)
    if plan.regime.endpoints():  # nothing is launched here, and this machine is only the client's
        _print_endpoints(plan, console)
        return
    model = plan.resolve_models(build=False)
    preflight = plan.preflight(environment)
    for problem in preflight.lossy:
        console.print(f"[yellow]lossy acceptance setting:[/] {escape(problem)}", soft_wrap=True)
    for note in preflight.notes():  # the GPUs the servers get, the driver's CUDA against the engine's
        console.print(escape(note), soft_wrap=True, highlight=False)
    no_gpu = no_gpu_here(plan.regime, environment)  # --allow-mismatch cannot help there
    if preflight.mismatches:
        instead = "" if no_gpu else "; --allow-mismatch to run anyway"
        console.print(f"This machine does not match the regime (`bench run` would stop{instead}):")
        for mismatch in preflight.mismatches:
            console.print(f"  [yellow]{escape(mismatch)}[/]", soft_wrap=True)
        if no_gpu:
            console.print(f"{escape(no_gpu)}; the file itself is valid.", soft_wrap=True, highlight=False)
    else:
        console.print("This machine matches the regime's pins.")
    console.print(escape(engines), highlight=False, soft_wrap=True)
    fits = plan.drafter_fits(model)
    # an arm whose schedule's policy is not there yet has no command yet (``_read``)
    ready = [arm for arm in plan.regime.arms if not isinstance(arm.k_schedule, KScheduleSource)]
    commandable = dataclasses.replace(plan, regime=plan.regime.model_copy(update={"arms": ready}))
    commands = {c.arm.name: c for c in commandable.arm_commands(model, preflight.gpus)}
    for arm in plan.regime.arms:
        command = commands.get(arm.name)
        if command is None:
            console.print(
                f"\n[bold]{arm.name}[/] ({arm.method}, K from its policy, pending above)", highlight=False
            )
            continue
        console.print(
            f"\n[bold]{arm.name}[/] ({arm.method}, K={arm.num_speculative_tokens or '-'}{command.drafter}):",
            highlight=False,
        )
        console.print(f"  {command.command}", highlight=False, soft_wrap=True, markup=False)
        fit = fits.get(arm.name)
        if fit is not None:
            _print_fit(fit, console)


def _print_detectable(regime: Any, console: Console) -> None:
    """Each relative rule's detectable change at the regime's design, a rule whose limit the design
    cannot resolve in yellow with the start-ups that would (harness.derive.gates.detectable)."""
    from harness.derive.gates.detectable import design_lines

    for line, flagged in design_lines(regime):
        shown = f"[yellow]{escape(line)}[/]" if flagged else escape(line)
        console.print(shown, soft_wrap=True, highlight=False)


def _print_fit(fit: Any, console: Console) -> None:
    """An arm's drafter against the arm and the target (harness.run.drafters.fit)."""
    if fit.unchecked:
        console.print(f"  [yellow]drafter fit not checked:[/] {escape(fit.unchecked)}", soft_wrap=True)
    for problem in fit.problems:
        console.print(f"  [red]drafter does not fit:[/] {escape(problem)}", soft_wrap=True)
    if fit.checked:
        console.print(f"  drafter fit: {escape('; '.join(fit.checked))}", highlight=False, soft_wrap=True)
