"""Run a regime: for each arm, start its server, warm up, measure every window, stop it.

Data flows one way: regime -> engine adapter (argv/env) -> server -> client (raw records)
-> result files. Metrics are derived from the stored raw files afterwards (``summary``), so a
crash never loses what was already measured: every request is on disk as soon as it ends.

An arm whose engine fails is recorded as failed (with its log tail) and the next arm runs.
An interrupt stops the current server (the ``Server`` context manager) and propagates.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from harness.client import RequestRecord, WindowResult, run_window
from harness.drafters import ResolvedDrafter, resolve_drafters
from harness.engines import EngineAdapter, LaunchSpec, get_adapter, is_local_reference, resolve_model_path
from harness.environment import collect_environment, model_identity
from harness.errors import EngineError, UserError
from harness.models import converted_dir, resolve_package_gguf
from harness.regime import Arm, Regime, load_regime, workload_paths
from harness.results import SCHEMA_VERSION, RunDir, append_jsonl, read_json, read_run_record, write_json_atomic
from harness.server import Server, free_port, log_tail
from harness.probes.power import PowerSampler, open_reader
from harness.summary import summarize
from harness.validation import check_environment, check_served, lossy_settings
from harness.workloads import LoadedWorkload, Prompt, load_workload


@dataclass
class Plan:
    """A regime resolved against this machine: everything needed before a server starts."""

    regime: Regime
    regime_path: Path
    adapter: EngineAdapter
    workloads: list[LoadedWorkload]
    drafters: dict[str, ResolvedDrafter] = field(default_factory=dict)  # arm name -> drafter (set by resolve_models)

    def resolve_models(self, build: bool, console: Console | None = None, build_trained: bool | None = None) -> str:
        """The target the engine loads and every arm's drafter. ``build`` converts packaged GGUFs and
        builds drafters (cached; a trained one takes a while and shows its own progress on ``console``;
        ``build_trained=False`` leaves trained ones unbuilt); without it only their paths are computed."""
        if build and console is not None:
            with console.status("Resolving the target (a packaged GGUF is converted once, ~30 s)..."):
                model = model_reference(self.regime, self.regime_path, convert=True)
        else:
            model = model_reference(self.regime, self.regime_path, convert=build)
        self.drafters = resolve_drafters(self.regime, self.regime_path, model, build, self.workloads, console,
                                         build_trained=build if build_trained is None else build_trained)
        return model

    def launch_spec(self, arm: Arm, model: str, port: int) -> LaunchSpec:
        draft = self.drafters[arm.name].path if arm.draft_model is not None else None
        return self.adapter.launch_spec(self.regime, arm, model, port, sys.executable, draft_model=draft)


def plan_regime(regime_path: Path, regime: Regime | None = None) -> Plan:
    """Load and check a regime and its workloads; starts nothing."""
    regime = regime if regime is not None else load_regime(regime_path)
    _check_local_paths(regime, regime_path)
    adapter = get_adapter(regime.engine.name)
    workloads = [load_workload(path, regime.load.num_prompts) for path in workload_paths(regime, regime_path)]
    names = [w.name for w in workloads]
    if len(set(names)) != len(names):
        raise UserError(f"{regime_path}: workloads: two workload files share a name ({', '.join(names)})")
    gates = regime.gates
    for location, workload in [(f"gates.rules[{i}].workload", g.workload) for i, g in enumerate(gates.rules)] + [
        (f"gates.golden_tau[{i}].workload", g.workload) for i, g in enumerate(gates.golden_tau)
    ]:
        if workload is not None and workload not in names:
            raise UserError(f"{regime_path}: {location}: no workload named '{workload}' (workloads: {', '.join(names)})")
    return Plan(regime=regime, regime_path=regime_path, adapter=adapter, workloads=workloads)


def _check_local_paths(regime: Regime, regime_path: Path) -> None:
    """A model or draft written as a local path must exist now, not fail minutes into a run."""
    references = [("target.path", regime.target.path)] + [
        (f"arms[{i}].draft_model.path", arm.draft_model.path) for i, arm in enumerate(regime.arms) if arm.draft_model
    ]
    for location, reference in references:
        if reference and is_local_reference(reference):
            resolved = Path(resolve_model_path(reference, regime_path))
            if not resolved.exists():
                raise UserError(f"{regime_path}: {location}: local model directory {reference} does not exist ({resolved})")


def model_reference(regime: Regime, regime_path: Path, convert: bool) -> str:
    """The string handed to the engine as the target model; converts a packaged GGUF if asked."""
    target = regime.target
    if target.package is not None:
        if not convert:  # where the conversion is (or will be) cached
            return str(converted_dir(target.package.name, target.package.file))
        return str(resolve_package_gguf(target.package.name, target.package.file))
    return resolve_model_path(target.path, regime_path)


def describe_plan(plan: Plan) -> str:
    """One paragraph stating what will be measured, defaults included."""
    regime, load = plan.regime, plan.regime.load
    mode = "eager (--enforce-eager)" if regime.engine.enforce_eager else "compiled (torch.compile / graphs)"
    sampling = "greedy" if regime.sampling.temperature == 0 else f"temperature {regime.sampling.temperature}"
    workloads = ", ".join(f"{w.name} ({w.definition.prompt_format})" for w in plan.workloads)
    if regime.exactness_applies():
        exactness = (
            f"greedy exactness vs the baseline from top-{regime.exactness.top_logprobs} logprobs (all arms), "
            f"near tie < {regime.near_tie_margin()} nats" + (", baseline noise floor (2nd pass)" if regime.exactness.noise_floor else "")
        )
    else:
        exactness = "no exactness probe (disabled or not greedy)"
    return (
        f"{len(regime.arms)} arms ({', '.join(a.name for a in regime.arms)}) x workloads {workloads} x "
        f"concurrency {load.concurrency}"
        + (f", each window {load.repeats} times" if load.repeats > 1 else "")
        + f"; {load.num_prompts} prompts per window, max {load.max_output_tokens} "
        f"output tokens, {sampling}, seed {regime.sampling.seed}, {load.warmup_requests} warm-up requests per "
        f"server (not measured); engine mode {mode}; dtype {regime.target.dtype}, TP {regime.tensor_parallel_size}; "
        f"{exactness}."
    )


def _regime_record(plan: Plan, model: str) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "source_path": str(plan.regime_path),
        "fingerprint": plan.regime.fingerprint(),
        "price_per_hour": plan.regime.price_per_hour(),
        "near_tie_margin": plan.regime.near_tie_margin(),
        "resolved_model": model,
        "regime": plan.regime.model_dump(mode="json"),
        # Per arm: where its drafter came from (untrained / published / trained here); tau depends on it.
        "drafters": {name: {"path": d.path, **d.provenance} for name, d in plan.drafters.items()},
        "workloads": [
            {
                "name": w.name,
                "category": w.definition.category,
                "prompt_format": w.definition.prompt_format,
                "definition": w.definition.model_dump(mode="json"),
                "content_sha256": w.content_sha256,
                "prompt_ids": [p.prompt_id for p in w.prompts],
            }
            for w in plan.workloads
        ],
    }


def _reset_prefix_cache(base_url: str, plan: Plan) -> bool:
    """Empty the engine's prefix cache so a window does not reuse the previous one's prompts."""
    path = plan.adapter.reset_prefix_cache_path
    if path is None:
        return False
    try:
        response = httpx.post(base_url + path, timeout=30.0)
    except httpx.HTTPError:
        return False
    if response.status_code != 200:
        return False
    try:  # vLLM answers JSON, SGLang plain text ("Cache flushed.")
        return response.json().get("success", True) is not False
    except ValueError:
        return True


def _scrape(base_url: str, plan: Plan) -> dict[str, Any]:
    try:
        response = httpx.get(base_url + plan.adapter.metrics_path, timeout=10.0)
        response.raise_for_status()
    except httpx.HTTPError as exc:
        raise EngineError(f"could not read {plan.adapter.metrics_path}: {exc}") from None
    return plan.adapter.parse_spec_counters(response.text).to_json()


class Runner:
    def __init__(self, plan: Plan, results_dir: Path, console: Console, allow_mismatch: bool = False):
        self.plan = plan
        self.results_dir = results_dir
        self.console = console
        self.allow_mismatch = allow_mismatch
        self.power_reader, self.power_note = (None, "disabled by the regime")
        if plan.regime.power.enabled:
            self.power_reader, self.power_note = open_reader()

    def _validate(self, environment: dict[str, Any]) -> tuple[list[str], list[str]]:
        """Refuse a regime this machine does not match (unless allowed) and lossy settings (unless
        the regime allows them). Returns (mismatches, lossy settings) to record with the run."""
        regime = self.plan.regime
        lossy = lossy_settings(regime)
        if lossy and not regime.allow_lossy_acceptance:
            raise UserError(
                f"{self.plan.regime_path}: lossy or fake acceptance settings (set allow_lossy_acceptance: true to "
                "measure them anyway; they are flagged in the results):\n  " + "\n  ".join(lossy)
            )
        mismatches = [str(m) for m in check_environment(regime, environment)]
        if mismatches and not self.allow_mismatch:
            raise UserError(
                f"{self.plan.regime_path}: this machine does not match the regime; nothing was started:\n  "
                + "\n  ".join(mismatches) + "\nPass --allow-mismatch to run anyway (every mismatch is recorded)."
            )
        for mismatch in mismatches:
            self.console.print(f"[yellow]regime mismatch (allowed):[/] {escape(mismatch)}", soft_wrap=True)
        return mismatches, lossy

    def _engine_version(self) -> str:
        version = self.plan.adapter.installed_version()
        if version is None:
            raise UserError(
                f"engine '{self.plan.regime.engine.name}' is not installed in {sys.executable}; "
                "for the CPU default run scripts/setup-cpu.sh (or pip install -e '.[cpu]')"
            )
        return version

    def run(self) -> tuple[RunDir, dict[str, Any]]:
        regime = self.plan.regime
        version = self._engine_version()
        environment = collect_environment(version)
        mismatches, lossy = self._validate(environment)
        model = self.plan.resolve_models(build=True, console=self.console)
        run = RunDir.create(self.results_dir, regime.name)
        self.console.print(f"Run directory: [bold]{run.root}[/]  (engine {version}, model {model})")
        with run.lock():
            record = {**_regime_record(self.plan, model), "mismatches": mismatches, "lossy_settings": lossy}
            write_json_atomic(run.root / "regime.json", record)
            drafts = {name: model_identity(drafter.path) for name, drafter in self.plan.drafters.items()}
            write_json_atomic(run.root / "environment.json",
                              {**environment, "target_identity": model_identity(model), "draft_identities": drafts})
            return run, self._run_arms(run, model)

    def resume(self, run: RunDir, model: str) -> tuple[RunDir, dict[str, Any]]:
        """Continue a run from its first arm without complete results; completed arms are kept
        as they are, an incomplete arm's earlier files are moved aside (never deleted)."""
        self._validate(collect_environment(self._engine_version()))
        self.plan.resolve_models(build=True, console=self.console)  # cached: the same target and drafters as before
        with run.lock():
            self.console.print(f"Resuming [bold]{run.root}[/]")
            return run, self._run_arms(run, model)

    def _run_arms(self, run: RunDir, model: str) -> dict[str, Any]:
        regime = self.plan.regime
        self.console.print(describe_plan(self.plan), highlight=False)
        try:
            for index, arm in enumerate(regime.arms, start=1):
                title = f"arm {index}/{len(regime.arms)}: {arm.name} ({arm.method})"
                if run.arm_status(arm.name) == "ok":
                    self.console.rule(f"{title}: already complete, kept")
                    continue
                self.console.rule(title)
                run.set_aside(arm.name)
                self._run_arm(run, arm, model)
                write_json_atomic(run.summary, summarize(run))
        except BaseException:
            write_json_atomic(run.summary, summarize(run))  # the partial run stays readable
            raise
        return read_json(run.summary)

    def _run_arm(self, run: RunDir, arm: Arm, model: str) -> None:
        port = free_port()
        spec = self.plan.launch_spec(arm, model, port)
        write_json_atomic(run.arm_dir(arm.name) / "launch.json", {"argv": spec.argv, "env": spec.env, "port": port})
        server = Server(spec.argv, spec.env, port, run.server_log(arm.name), self.plan.adapter.health_path)
        phase = "startup"  # a failure before the server is ready is infrastructure, not a regression
        try:
            with server:
                startup_s = self._wait_ready(server)
                phase = "measuring"
                running = {"status": "running", "startup_s": startup_s, "pgid": server.process.pid}
                running["mismatches"] = self._check_served(run, arm, server)
                write_json_atomic(run.status(arm.name), running)
                self._warm_up(run, arm, server)
                for workload in self.plan.workloads:
                    for concurrency in self.plan.regime.load.concurrency:
                        for repeat in range(self.plan.regime.load.repeats):
                            self._measure_window(run, arm, server, workload, concurrency, repeat)
                if arm.method == "baseline" and self.plan.regime.exactness.noise_floor:
                    self._noise_floor_pass(run, arm, server)
            write_json_atomic(run.status(arm.name), {"status": "ok", "startup_s": startup_s, "mismatches": running["mismatches"]})
        except EngineError as exc:
            self.console.print(f"[red]arm {arm.name} failed:[/] {escape(str(exc))}", soft_wrap=True)
            write_json_atomic(run.status(arm.name), {"status": "failed", "phase": phase, "error": str(exc)})
        except UserError:
            raise  # a refused regime: the check that raised has already written the arm's status
        except BaseException:
            write_json_atomic(run.status(arm.name), {"status": "interrupted"})
            raise

    def _check_served(self, run: RunDir, arm: Arm, server: Server) -> list[str]:
        """What the started engine reports against the regime: stop the run on a mismatch
        unless allowed (then it is recorded in the arm's status)."""
        served = self.plan.adapter.served_config(server.base_url, server.log_path)
        found = [str(m) for m in check_served(self.plan.regime, served, arm)]
        if found and not self.allow_mismatch:
            write_json_atomic(run.status(arm.name), {"status": "failed", "error": "regime mismatch", "mismatches": found})
            raise UserError(
                f"arm {arm.name}: the server does not run the regime:\n  " + "\n  ".join(found)
                + "\nPass --allow-mismatch to run anyway (every mismatch is recorded)."
            )
        return found

    def _wait_ready(self, server: Server) -> float:
        timeout = self.plan.regime.engine.startup_timeout_s
        with self.console.status("starting server...") as status:
            def tick(elapsed: float) -> None:
                status.update(f"starting server... {elapsed:.0f} s (log: {server.log_path})")
            startup_s = server.wait_ready(timeout, on_tick=tick)
        self.console.print(f"server ready in {startup_s:.0f} s")
        return startup_s

    def _warm_up(self, run: RunDir, arm: Arm, server: Server) -> None:
        count = self.plan.regime.load.warmup_requests
        if count == 0:
            return
        workload = self.plan.workloads[0]
        prompts = (workload.prompts * count)[:count]
        def keep(record: RequestRecord) -> None:
            append_jsonl(run.warmup(arm.name), record.to_json())

        result = self._send(server, workload, prompts, 1, f"warm-up ({count} requests)", keep)
        self._check_alive(server, result)

    def _measure_window(
        self, run: RunDir, arm: Arm, server: Server, workload: LoadedWorkload, concurrency: int, repeat: int = 0
    ) -> None:
        cache_reset = _reset_prefix_cache(server.base_url, self.plan)
        per_request = self.plan.adapter.acceptance_source == "per_request"
        before = None if per_request else _scrape(server.base_url, self.plan)
        sampler = PowerSampler(self.power_reader, self.plan.regime.power.sample_period_s) if self.power_reader else None
        if sampler:
            sampler.start()
        def keep(record: RequestRecord) -> None:  # on disk the moment it ends: a crash loses nothing
            append_jsonl(run.samples(arm.name), record.to_json())

        repeats = self.plan.regime.load.repeats
        label = f"{workload.name} @ concurrency {concurrency}" + (f" (repeat {repeat + 1}/{repeats})" if repeats > 1 else "")
        try:
            result = self._send(server, workload, workload.prompts, concurrency, label, keep, repeat)
        finally:
            readings = sampler.stop() if sampler else []
        self._check_alive(server, result)
        after = None if per_request else _scrape(server.base_url, self.plan)
        server_reported = self.plan.adapter.server_figures(server.base_url) if per_request else None
        append_jsonl(run.windows(arm.name), {
            "workload": workload.name,
            "category": workload.definition.category,
            "prompt_format": workload.definition.prompt_format,
            "concurrency": concurrency,
            "repeat": repeat,
            "duration_s": result.duration_s,
            "prefix_cache_reset": cache_reset,
            # where tau comes from: counter scrapes around the window, or each request's own details
            "acceptance_source": self.plan.adapter.acceptance_source,
            "counters_before": before,
            "counters_after": after,
            "server_reported": server_reported,
            "power": {
                "source": self.power_reader.source if self.power_reader else None,
                "note": self.power_note,
                "samples": [[r.t, r.watts, r.energy_j, r.throttled] for r in readings],
            },
        })

    def _noise_floor_pass(self, run: RunDir, arm: Arm, server: Server) -> None:
        """The baseline's windows once more, same server, same prompts and concurrency: stored apart
        and compared with the first pass, never mixed into throughput or latency."""

        def keep(record: RequestRecord) -> None:
            append_jsonl(run.noise_floor(arm.name), record.to_json())

        for workload in self.plan.workloads:
            for concurrency in self.plan.regime.load.concurrency:
                label = f"noise floor: {workload.name} @ concurrency {concurrency}"
                _reset_prefix_cache(server.base_url, self.plan)  # the same cold start as the first pass
                result = self._send(server, workload, workload.prompts, concurrency, label, keep)
                self._check_alive(server, result)

    def _send(
        self, server: Server, workload: LoadedWorkload, prompts: list[Prompt], concurrency: int, label: str,
        on_done: Callable[[RequestRecord], None], repeat: int = 0,
    ) -> WindowResult:
        columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=self.console, transient=False) as progress:
            task = progress.add_task(label, total=len(prompts))

            def done(record: RequestRecord) -> None:
                on_done(record)
                progress.advance(task)

            regime = self.plan.regime
            top_logprobs = regime.exactness.top_logprobs if regime.exactness_applies() else 0
            fields = self.plan.adapter.request_fields(workload.definition.prompt_format, top_logprobs)
            return asyncio.run(run_window(
                server.base_url, workload, prompts, concurrency, regime.sampling, regime.load, done, top_logprobs, fields,
                repeat,
            ))

    def _check_alive(self, server: Server, result: WindowResult) -> None:
        """End the arm (as failed) when the engine died, hung or failed every request."""
        code = server.exit_code()
        if code is not None:
            raise EngineError(
                f"engine exited with status {code} while measuring; log {server.log_path}:\n{log_tail(server.log_path)}"
            )
        if result.stalled:
            raise EngineError(
                f"engine hung: no token for {self.plan.regime.load.stall_timeout_s:.0f} s with requests in flight; "
                f"log {server.log_path}:\n{log_tail(server.log_path)}"
            )
        if result.records and all(not r.ok for r in result.records):
            raise EngineError(f"every request failed (first error: {result.records[0].error})")


def run_regime(
    regime_path: Path, results_dir: Path, console: Console, allow_mismatch: bool = False
) -> tuple[RunDir, dict[str, Any]]:
    return Runner(plan_regime(regime_path), results_dir, console, allow_mismatch).run()


def resume_run(run_dir: Path, console: Console, allow_mismatch: bool = False) -> tuple[RunDir, dict[str, Any]]:
    """Resume with the regime stored in the run, refusing if its workloads changed since."""
    run = RunDir(run_dir)
    record = read_run_record(run)
    regime = Regime.model_validate(record["regime"])
    plan = plan_regime(Path(record["source_path"]), regime)
    stored = {w["name"]: w["content_sha256"] for w in record["workloads"]}
    for workload in plan.workloads:
        if stored.get(workload.name) != workload.content_sha256:
            raise UserError(
                f"{run_dir}: workload '{workload.name}' is not the one this run started with (its prompts changed); "
                "resuming would mix two workloads. Start a new run instead."
            )
    return Runner(plan, run_dir.parent.parent, console, allow_mismatch).resume(run, record["resolved_model"])
