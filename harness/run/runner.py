"""Run a regime: in rounds of start-ups, each arm's server started, warmed up, every window measured
(``harness.run.window``), stopped.

Data flows one way: regime -> engine adapter (argv/env) -> server -> client (raw records)
-> result files. Metrics are derived from the stored raw files afterwards (``summary``), so a
crash never loses what was already measured: every request is on disk as soon as it ends.

A server that fails to start is started once more, fresh (``Runner._start_again``). An arm whose
engine still fails is recorded as failed (with its log tail) and sits out the rounds after; the
start-ups it completed stay in its verdicts. A baseline that fails stops the run at once
(``Runner._baseline_stop``): nothing could be compared with the start-ups left, so none is begun.
An interrupt stops the current server (the ``Server`` context manager) and propagates.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from harness.config.arms import Arm, endpoint_address
from harness.config.engines import SERVED_MODEL_NAME
from harness.config.level import LoadLevel
from harness.config.regime import Regime, recorded_source, stored_regime
from harness.config.workloads import LoadedWorkload, Prompt
from harness.core import stats
from harness.core.errors import EngineError, UserError
from harness.core.formats import inert
from harness.core.overrides import Override
from harness.core.probes.throughput import output_tokens_per_s
from harness.core.secrets import redact_args, redact_env, redact_url, scrub_file, secret_values
from harness.derive.analysis import analyze, write_analysis
from harness.derive.exactness import prompts_to_margin
from harness.derive.rounds import Standing, completed_starts, round_line, round_order, standing
from harness.derive.summary import summarize
from harness.results import (
    ArmStatus,
    Invocation,
    RequestRecord,
    RunDir,
    RunTiming,
    Summary,
    WindowRecord,
    read_json,
    read_jsonl,
    read_records,
    read_run_record,
    write_json_atomic,
)
from harness.results.calibration import CALIBRATION_FILE
from harness.results.files import check_lines, write_jsonl
from harness.results.raw import damaged_arms, raw_damage, read_raw
from harness.results.records import Round, RunRecord
from harness.run import engine_http as http
from harness.run.calibration import CalibrationSource
from harness.run.client import RampResult, WindowResult
from harness.run.deployment import deployment_change, served_now
from harness.run.outlook import earlier_round_minutes, outlook_text, start_up_seconds
from harness.run.pace_reference import pace_line, reference_for
from harness.run.passes import (
    PassSender,
    distribution_pass,
    margins_pass,
    pass_line,
    reference_pass,
    warm_up,
    workload_pass,
    write_skipped_pass,
)
from harness.run.plan import RunPlan, changed_workload, plan_regime, prepare_run
from harness.run.run_record import continued_record, regime_record
from harness.run.sending import Sender
from harness.run.sensors import gpu
from harness.run.sensors.devices import server_env
from harness.run.sensors.environment import model_identity
from harness.run.sensors.floor import decode_floor_inputs
from harness.run.sensors.power import open_reader
from harness.run.server import ExternalServer, PortTaken, Server, engine_server, reap_abandoned
from harness.run.validation import check_served, window_warnings
from harness.run.window import (
    CountersBroken,
    CpuSeconds,
    GpuProcesses,
    PowerUse,
    Precision,
    Sampler,
    Window,
    began_on,
    converse,
    measure_ramp,
    measure_window,
    never_drafted,
    turn_schedule,
    window_label,
)

# a start-up whose port another process took (harness.run.server.PortTaken) starts again on a fresh one
PORT_ATTEMPTS = 3


def refused_its_arguments(error: str) -> bool:
    """A start-up that failed on its own command line: the engine's argument parser exited with
    status 2 (argparse's usage error: an unknown or malformed flag). The same argv is refused the
    same way again, so it is not started once more (a GPU night's retry would only spend its
    import and say the same)."""
    return error.startswith("engine exited with status 2 during start-up")


class Runner:
    def __init__(self, plan: RunPlan, results_dir: Path, console: Console):
        self.plan = plan
        self.results_dir = results_dir
        self.continuing = False  # bench run --resume --rounds: complete arms take more rounds
        self.console = console
        self.sender = Sender(plan, console)
        # where this invocation's wall time goes (timing.json): seconds per phase, from preparing on
        self.started = plan.started
        self.clock = {
            "prepare_s": 0.0,
            "startup_s": 0.0,
            "measured_s": 0.0,
            "warmup_s": 0.0,
            "gpu_release_s": 0.0,
        }
        # the servers' own GPUs (RunPlan.gpus): power, energy and neighbours are read on them only; None
        # where none was chosen (a CPU regime): NVML, if any, reads every visible GPU
        self.devices = [g["index"] for g in plan.gpus] or None
        self.power_reader, self.power_note = (None, "disabled by the regime")
        if plan.power.enabled and not plan.regime.endpoints():
            self.power_reader, self.power_note = open_reader(devices=self.devices)
        elif plan.regime.endpoints():  # this machine's sensors say nothing of a server elsewhere
            self.power_note = "not read: the arms are existing servers, on machines of their own"
        # None on a machine without NVML, or with endpoints: nothing of theirs to watch here
        self.gpu_reader = None if plan.regime.endpoints() else gpu.open_process_reader(self.devices)
        self.on_created: Callable[[Path], None] | None = None  # told the new run directory (bench run --json)
        self.start_up_s: list[float] = []  # each start-up this invocation measured, all in (seconds)
        self.failed: set[str] = set()  # the arms that failed in this invocation: they sit out the rest
        self.pace_note: str | None = None  # why no reference pace is read (pace_reference.reference_for)

    def run(self, run_root: Path | None = None) -> tuple[RunDir, Summary]:
        """A new run: under ``results_dir/<regime>/<run-id>``, or exactly at ``run_root`` (a study's
        point); the directory is created exclusively either way."""
        if not self.plan.regime.endpoints():
            # the run recorded with the reference it is read against: one under its own conditions (the
            # regime's fingerprint: the plan's differs only for existing servers, never read here)
            found, self.pace_note = reference_for(
                self.plan.regime, self.plan.regime.fingerprint(), self.results_dir, self.plan.environment
            )
            if found != self.plan.regime.reference:
                self.plan = replace(
                    self.plan, regime=self.plan.regime.model_copy(update={"reference": found})
                )
        plan, regime = self.plan, self.plan.regime
        run = RunDir.create(self.results_dir, regime.name) if run_root is None else RunDir.create_at(run_root)
        self.console.print(
            f"Run directory: [bold]{run.root}[/]  (engine {plan.engine_version}, model {plan.model})"
        )
        if self.on_created is not None:
            self.on_created(run.root)
        with run.lock():
            self._reap(run.root.parent)  # the regime's earlier runs, this one's lock held
            write_json_atomic(run.root / "regime.json", regime_record(plan).model_dump(mode="json"))
            drafts = {name: model_identity(drafter.path) for name, drafter in plan.drafters.items()}
            write_json_atomic(
                run.root / "environment.json",
                {
                    **plan.environment,
                    "engine_patches": plan.engine_patches,
                    "target_identity": model_identity(plan.model),
                    "draft_identities": drafts,
                    "decode_floor": self._decode_floor(),
                },
            )
            if plan.calibration is not None:  # before any arm: re-deriving the run gives its intervals
                write_json_atomic(run.root / CALIBRATION_FILE, plan.calibration.model_dump(mode="json"))
            write_skipped_pass(plan, run)  # none to make: why, for the views
            return run, self._run_arms(run)

    def _decode_floor(self) -> dict[str, Any] | None:
        """The decode floor's inputs on this machine (``sensors.floor``); None for existing servers,
        whose machine is not this one."""
        regime = self.plan.regime
        if regime.endpoints():
            return None
        names = [g["name"] for g in self.plan.gpus if g.get("name")]
        return decode_floor_inputs(
            regime.hardware.kind, self.plan.model, regime.target.dtype, regime.tensor_parallel_size, names
        )

    def resume(
        self, run: RunDir, continued: RunRecord | None = None, damaged: Sequence[str] = ()
    ) -> tuple[RunDir, Summary]:
        """Continue a run from its first arm without complete results; completed arms are kept
        as they are, an incomplete arm's earlier files are moved aside (never deleted). With
        ``continued`` (``continued_record``: the run's record with more rounds), it is written first
        and complete arms take the rounds they lack, every start-up measured so far kept. The
        ``damaged`` arms (``--remeasure-damaged``) are measured again from their first start-up."""
        with run.lock():
            self.console.print(f"Resuming [bold]{escape(str(run.root))}[/]")
            if continued is not None:
                write_json_atomic(run.root / "regime.json", continued.model_dump(mode="json"))
                self.continuing = True
            for arm in damaged:
                self._remeasure_damaged(run, arm)
            self._reap(run.root)
            # a bench killed mid-run stopped no server, so none of its logs was scrubbed: now
            engine = self.plan.regime.engine
            secrets = secret_values({**os.environ, **engine.env}, engine.extra_args)
            for log in sorted(run.root.glob("arms/*/*.log")) if secrets else []:
                scrub_file(log, secrets)
            return run, self._run_arms(run)

    def _remeasure_damaged(self, run: RunDir, arm: str) -> None:
        """An arm whose raw lines were damaged since written, made to run again from its first
        start-up: its start-ups taken out of the rounds' ``done``, its status interrupted with why, so
        ``_resume_arm`` moves its files aside whole (where every reader still names the damage)."""
        status = run.read_status(arm)
        why = "its raw lines were damaged since written: measured again from its first start-up"
        self.console.print(f"[yellow]arm {escape(arm)}: {why}[/]", soft_wrap=True)
        update = {"status": "interrupted", "pgid": None, "remeasured": [*status.remeasured, why]}
        run.write_status(arm, status.model_copy(update=update))
        rounds = [
            entry.model_copy(update={"done": [n for n in entry.done if n != arm]})
            for entry in self._read_rounds(run)
        ]
        if rounds:
            self._write_rounds(run, rounds)

    def _reap(self, directory: Path) -> None:
        """Stop the servers a killed ``bench`` left running under ``directory`` (its run, or the
        regime's earlier runs that no live writer holds): they would take this run's CPU or GPU."""
        stopped = reap_abandoned(directory)
        if stopped:
            self.console.print(
                f"[yellow]stopped {len(stopped)} engine process group(s) an earlier bench left running[/] "
                f"(pgid {', '.join(map(str, stopped))})",
                highlight=False,
            )

    def _run_arms(self, run: RunDir) -> Summary:
        """Every arm without complete results, in rounds (``load.server_starts``): start-up 1 of every
        arm, then start-up 2 of every arm, ..., the order reversed every other round (ABBA,
        ``harness.derive.rounds.round_order``): a slow drift of the machine over the run is spread over the
        arms and their positions instead of landing on the last ones. With ``{decide: true}``, rounds
        are added from ``min`` on while a speculative cell's verdict is undecided, up to ``max``; each
        added round says what it bought. Each round's order is recorded (``timing.json``) as it runs,
        so a resume continues the round it stopped in: complete arms and start-ups are kept, the
        start-up that was cut short is moved aside and measured again."""
        self.clock["prepare_s"] = time.monotonic() - self.started
        self.console.print(self.plan.description, highlight=False)
        self.console.print(self._outlook(run), highlight=False)
        for warning in window_warnings(self.plan.regime, self.plan.regime_path):
            self.console.print(f"[yellow]warning:[/] {escape(warning)}", soft_wrap=True)
        rounds = self._read_rounds(run)
        done = self._to_run(run, rounds)  # arms to run -> start-ups of theirs already complete
        startups = {name: run.read_status(name).startups_s[:count] for name, count in done.items()}
        active = list(done)  # an arm that fails sits out the rounds after
        self.latest: Summary | None = None  # the summary after the latest start-up
        self.round_s: list[float] = []  # the seconds each whole round of this invocation took
        after: Standing | None = None  # the verdicts after the last round this invocation completed
        try:
            while active and (left := self._next_round(run, rounds, done, active, after)):
                began = time.monotonic()
                for name in left:
                    self._round_start_up(run, name, done, active, startups)
                    rounds[-1] = rounds[-1].model_copy(update={"done": [*rounds[-1].done, name]})
                    self._write_rounds(run, rounds)
                    self.latest = _write_summary(run)
                    if name == self.plan.baseline and name not in active:
                        raise self._baseline_stop(run, done, active)
                if len(left) == len(rounds[-1].order):  # a whole round: its pace plans the next
                    self.round_s.append(time.monotonic() - began)
                if self.plan.load.decides():
                    after = self._report_round(len(rounds), after)
                else:
                    self._report_fixed_round(len(rounds))
            self._fail_non_speculating(run, active)
            for name in active:  # every start-up it was to get is measured
                status = run.read_status(name)
                if status.status in ("running", "interrupted"):  # interrupted: by an earlier invocation
                    run.write_status(name, status.model_copy(update={"status": "ok", "pgid": None}))
        except BaseException:
            for name in done:  # arms waiting for their next start-up are not running any more
                status = run.read_status(name)
                if status.status == "running":
                    run.write_status(name, status.model_copy(update={"status": "interrupted", "pgid": None}))
            self._write_timing(run, interrupted=True)
            _write_summary(run)  # the partial run stays readable
            raise
        self._write_timing(run, interrupted=False)
        return _write_summary(run)

    def _fail_non_speculating(self, run: RunDir, active: list[str]) -> None:
        """A speculative arm whose existing server drafted nothing over all of its windows fails: "this
        server does not speculate" (``window.never_drafted``), its other models' counters named."""
        regime = self.plan.regime
        # an A/A check (allow_shared_endpoints): an arm on the baseline's own server is meant not to draft
        plain = {endpoint_address(a.endpoint) for a in regime.arms if a.method == "baseline" and a.endpoint}
        for arm in regime.arms:
            if (
                arm.name not in active
                or arm.endpoint is None  # a started server runs what it was given (checked from its log)
                or arm.method == "baseline"
                or (regime.allow_shared_endpoints and endpoint_address(arm.endpoint) in plain)
            ):
                continue
            windows = read_records(run.windows(arm.name), WindowRecord)
            records = read_records(run.samples(arm.name), RequestRecord)
            others = http.other_models(arm.endpoint.rstrip("/"))
            if why := never_drafted(self.plan.adapter, arm, windows, records, others):
                self._arm_failed(run, arm, "measuring", why, run.read_status(arm.name).startups_s)
                active.remove(arm.name)
                self.failed.add(arm.name)

    def _outlook(self, run: RunDir) -> str:
        """What the design is expected to take to decide (``outlook.outlook_text``), at the pace of this
        regime's last run in the results directory and the spread of this machine's calibration; the
        workload pass (``passes.pass_line``: a resumed run's, made already, is not counted again)."""
        regime, calibration = self.plan.regime, self.plan.calibration
        spread = (calibration.sd, calibration.df, calibration.label()) if calibration is not None else None
        said, planned = pass_line(self.plan, run)
        outlook = outlook_text(regime, earlier_round_minutes(self.results_dir, regime), spread, planned)
        said = f"\n{said}" if said else ""
        if regime.endpoints():  # a server elsewhere: this machine's pace is not its
            return outlook + said
        return f"{outlook}\n{pace_line(regime, self.plan.environment, self.pace_note)}{said}"

    def _to_run(self, run: RunDir, rounds: list[Round]) -> dict[str, int]:
        """The arms without complete results, each readied to run (``_resume_arm``), with the
        start-ups of theirs kept; complete arms are kept as they are."""
        arms = self.plan.regime.arms
        done: dict[str, int] = {}
        for index, arm in enumerate(arms, start=1):
            more = self.continuing and completed_starts(arm.name, rounds) < self.plan.load.max_server_starts()
            if run.read_status(arm.name).status == "ok" and not more:
                self.console.rule(
                    f"arm {index}/{len(arms)}: {arm.name} ({arm.method}): already complete, kept"
                )
            else:
                done[arm.name] = self._resume_arm(run, arm, rounds)
        if rounds:
            self._write_rounds(run, rounds)  # a failed arm's start-up taken out of its round (_reopen)
        return done

    def _next_round(
        self,
        run: RunDir,
        rounds: list[Round],
        done: dict[str, int],
        active: list[str],
        after: Standing | None,
    ) -> list[str]:
        """The arms to start next, in order, their round recorded: the rest of the round an earlier
        invocation stopped in, else a new round (in the alternating order) while one is needed; []
        when the run has what it needs."""
        last = rounds[-1] if rounds else None
        left = [n for n in last.order if n not in last.done and n in active] if last else []
        if left and last:  # the round an earlier invocation stopped in: its arms resume at their own count
            rounds[-1] = last.model_copy(
                update={"server_starts": {**last.server_starts, **{n: done[n] for n in left}}}
            )
        else:
            if rounds and self._enough(run, done, active, after):
                return []
            wanted = [n for n in active if done[n] < self.plan.load.max_server_starts()]
            if not wanted:
                return []
            left = round_order(wanted, len(rounds))
            rounds.append(Round(order=left, server_starts={n: done[n] for n in left}))
        self._write_rounds(run, rounds)
        return left

    def _round_start_up(
        self,
        run: RunDir,
        name: str,
        done: dict[str, int],
        active: list[str],
        startups: dict[str, list[float]],
    ) -> None:
        """The arm's next start-up; one that fails leaves ``active`` (its status says why). The
        seconds of each that ended well are the pace a stopped run's cost is said at."""
        arms = self.plan.regime.arms
        index, arm = next((i, a) for i, a in enumerate(arms, start=1) if a.name == name)
        self.console.rule(
            self._start_label(done[name]) + f"arm {index}/{len(arms)}: {arm.name} ({arm.method})"
        )
        began = time.monotonic()
        self._run_start_up(run, arm, done[name], startups[name])
        if run.read_status(name).status == "failed":
            active.remove(name)
            self.failed.add(name)
        else:
            done[name] += 1
            self.start_up_s.append(time.monotonic() - began)

    def _start_label(self, start: int) -> str:
        load = self.plan.load
        most = load.max_server_starts()
        if most == 1:
            return ""
        return f"start-up {start + 1}/{most}{' at most' if load.decides() else ''}, "

    def _enough(self, run: RunDir, done: dict[str, int], active: list[str], after: Standing | None) -> bool:
        """After a complete round: whether the run has the start-ups it needs. A fixed count: every
        arm has it. Deciding: every arm has ``min`` and every speculative cell is decided (an arm at
        ``max`` is not wanted for another round: the caller stops when none is). ``after``: the
        verdicts after that round, when this invocation measured it (a resume summarizes again)."""
        load = self.plan.load
        if not load.decides():
            return all(done[n] >= load.max_server_starts() for n in active)
        if any(done[n] < load.min_server_starts() for n in active):
            return False
        if (after if after is not None else self._standing(_write_summary(run))).all_decided:
            return True
        return self._over_budget(done, active)

    def _standing(self, summary: Summary | None) -> Standing:
        """Where the verdicts stand for the stop rule (``rounds.standing``), over the arms that can still
        take rounds: one that failed in this invocation sits out the rest, so no round can decide its
        cells (they stay in the verdicts, said)."""
        if self.failed and summary is not None:
            summary = summary.model_copy(
                update={"cells": [c for c in summary.cells if c.arm not in self.failed]}
            )
        return standing(summary, self.plan.load.decided_windows())

    def _over_budget(self, done: dict[str, int], active: list[str]) -> bool:
        """Whether another round would end past ``load.server_starts.budget_minutes``, at the pace of
        this invocation's rounds so far (said when it stops the run)."""
        budget = self.plan.load.budget_minutes()
        if (
            budget is None
            or not self.round_s
            or all(done[n] >= self.plan.load.max_server_starts() for n in active)
        ):
            return False
        pace = self._pace()
        spent = time.monotonic() - self.started
        if spent + pace <= 60 * budget:
            return False
        self.console.print(
            f"stopped: another round (about {pace / 60:.1f} min) would end past the budget of {budget:g} min "
            f"({spent / 60:.1f} min spent)",
            highlight=False,
        )
        return True

    def _pace(self) -> float:
        """The mean seconds a whole round of this invocation took (callers check there was one)."""
        return sum(self.round_s) / len(self.round_s)

    def _report_fixed_round(self, number: int) -> None:
        """A fixed design's progress after round ``number``: the rounds done and the time left at
        the pace of this invocation's rounds."""
        most = self.plan.load.max_server_starts()
        if most < 2 or not self.round_s:
            return
        left = (most - number) * self._pace() / 60
        tail = f"; about {left:.1f} min of rounds left" if number < most else ""
        self.console.print(f"round {number}/{most} done{tail}", highlight=False)

    def _report_round(self, number: int, before: Standing | None) -> Standing:
        """The line saying what round ``number`` bought (from ``min`` on), the windows still undecided
        and the most time left; the verdicts after it."""
        load = self.plan.load
        now = self._standing(self.latest)
        if number >= load.min_server_starts():
            line = round_line(number, before, now)
            left = now.undecided_windows()
            if left and number < load.max_server_starts() and self.round_s:
                most = self._pace() * (load.max_server_starts() - number) / 60
                budget = load.budget_minutes()
                if budget is not None:
                    most = min(most, max(0.0, budget - (time.monotonic() - self.started) / 60))
                line += f"; undecided: {', '.join(left)} (at most {most:.1f} min left)"
            self.console.print(line, highlight=False)
        return now

    def _write_timing(self, run: RunDir, interrupted: bool) -> None:
        earlier = _timing(run)
        this = Invocation(wall_s=time.monotonic() - self.started, interrupted=interrupted, **self.clock)
        timing = earlier.model_copy(update={"invocations": [*earlier.invocations, this]})
        write_json_atomic(run.root / "timing.json", timing.model_dump(mode="json"))

    def _read_rounds(self, run: RunDir) -> list[Round]:
        return list(_timing(run).rounds)

    def _write_rounds(self, run: RunDir, rounds: list[Round]) -> None:
        """The rounds so far, into ``timing.json`` (its invocations as they are): written before each
        round and after each start-up in it, so an interrupted run knows where it stopped."""
        timing = _timing(run).model_copy(update={"rounds": rounds})
        write_json_atomic(run.root / "timing.json", timing.model_dump(mode="json"))

    def _resume_arm(self, run: RunDir, arm: Arm, rounds: list[Round]) -> int:
        """Ready an arm without complete results to run (again); returns its start-ups kept. A new
        arm, or one whose run recorded no rounds (before version 7) starts over, its earlier files
        moved aside. One interrupted or failed after some start-ups keeps those (a failed one: those
        before the start-up it failed on, which runs again, ``_reopen``): its files are moved aside
        whole, and the complete start-ups' lines copied back (nothing is deleted)."""
        status = run.read_status(arm.name)
        kept = _reopen(arm.name, rounds) if status.status == "failed" else completed_starts(arm.name, rounds)
        aside = run.set_aside(arm.name)
        if kept == 0 or aside is None:  # nothing to keep (or its directory is gone)
            return 0
        self._copy_back(run, arm.name, aside, kept)
        startups = status.startups_s[:kept]
        run.write_status(
            arm.name,
            status.model_copy(update={"status": "interrupted", "pgid": None, "startups_s": startups}),
        )
        return kept

    def _copy_back(self, run: RunDir, arm: str, aside: Path, kept: int) -> None:
        """The lines of an arm's first ``kept`` start-ups, from its moved-aside files back into its
        directory: windows by ``server_start``, samples by ``repeat`` (counted over the start-ups,
        ``Load.repeat_index``), warm-ups by count; the unmeasured passes of the first start-up and
        the kept start-ups' logs and launch whole."""
        load = self.plan.load
        first = load.repeat_index(kept, 0)
        warmups = load.warmup_count(len(self.plan.workloads))  # per start-up
        keep: dict[Path, Callable[[int, dict[str, Any]], bool]] = {
            run.windows(arm): lambda _, w: w.get("server_start", 0) < kept,
            run.samples(arm): lambda _, s: s.get("repeat", 0) < first,
            run.warmup(arm): lambda number, _: number < kept * warmups,
            run.noise_floor(arm): lambda _, __: True,
            run.margins(arm): lambda _, __: True,  # logprobs of the baseline's greedy path, any start-up's
            run.distribution(arm): lambda _, __: True,
            run.workload_pass(arm): lambda _, __: True,
            run.ramp(arm): lambda _, s: s.get("repeat", 0) < kept,  # a ramp's repeat is its start-up
            run.ramp_windows(arm): lambda _, w: w.get("server_start", 0) < kept,
        }
        directory = run.arm_dir(arm)
        directory.mkdir(parents=True, exist_ok=True)
        for path, wanted in keep.items():
            lines = read_jsonl(aside / path.name)
            if lines:
                # lines written before lines were counted stay said to be (``check_lines``)
                before = check_lines(aside / path.name).unchecked
                unchecked = sum(1 for number, line in enumerate(lines[:before]) if wanted(number, line))
                kept_lines = [line for number, line in enumerate(lines) if wanted(number, line)]
                write_jsonl(path, kept_lines, unchecked)
        names = ["launch.json", *(run.server_log(arm, start).name for start in range(kept))]
        for name in names:
            if (aside / name).is_file():
                shutil.copy2(aside / name, directory / name)

    def _run_start_up(
        self, run: RunDir, arm: Arm, start: int, startups: list[float], again: bool = False
    ) -> None:
        """One start-up of the arm's server: warmed up, then every window ``repeats`` times. The
        unmeasured passes (the baseline's reference pass, the distribution check) run on the first
        start-up only; the baseline's later ones ask logprobs for the prompts that diverged
        (``margins_pass``, over two or more start-ups instead of the reference pass). The arm is
        ``ok`` after its last start-up (``startups``: the earlier ones' times).
        A start-up whose counters broke (``CountersBroken``: the server restarted or reset them) is
        measured again once (``again``), its first attempt's files kept aside; twice, the arm fails. So
        is one whose server did not start (``_start_again``)."""
        phase = "startup"  # a failure before the server is ready is infrastructure, not a regression
        remeasured = run.read_status(arm.name).remeasured
        try:
            with self._ready_server(run, arm, start) as (server, startup_s):
                if server.process is not None:  # an endpoint was reached, not started: no start-up time
                    startups.append(startup_s)
                self.clock["startup_s"] += startup_s
                phase = "measuring"
                served = {
                    "startup_s": startups[0] if startups else None,
                    "startups_s": startups,
                    "remeasured": remeasured,
                    **self._check_served(run, arm, server),
                }
                self._check_deployment(arm, server, "before this round")
                pgid = server.process.pid if server.process is not None else None
                run.write_status(arm.name, ArmStatus(status="running", pgid=pgid, **served))
                unmeasured = self._unmeasured(server)
                warm_up(self.plan, run, arm, unmeasured)
                for workload in self.plan.workloads:
                    for level in self.plan.load.levels():
                        self._measure_cell(run, arm, server, workload, level, start)
                for workload in self.plan.workloads if self.plan.load.ramp else []:
                    self._measure_ramp(run, arm, server, workload, start)
                if start == 0:
                    self._first_passes(run, arm, server, unmeasured)
                else:
                    self._later_passes(run, arm, server, unmeasured)
            # "ok" once the run has every start-up it wants (_run_arms: with decide, only it knows when)
            run.write_status(arm.name, ArmStatus(status="running", **served))
        except CountersBroken as exc:
            if again:
                self._arm_failed(run, arm, phase, f"{exc} (again, in the start-up measured again)", startups)
                return
            why = f"start-up {start + 1}: {exc}"
            self.console.print(
                f"[yellow]arm {arm.name}: {escape(why)}[/]: the start-up is measured again", soft_wrap=True
            )
            self._set_aside_start_up(run, arm, start, startups, [*remeasured, why])
            self._run_start_up(run, arm, start, startups, again=True)
        except EngineError as exc:
            self._engine_failed(run, arm, start, startups, phase, str(exc), again)
        except UserError:
            raise  # a refused regime: the check that raised has already written the arm's status
        except BaseException:
            run.write_status(arm.name, ArmStatus(status="interrupted", startups_s=startups))
            raise

    def _first_passes(self, run: RunDir, arm: Arm, server: Server, unmeasured: PassSender) -> None:
        """The unmeasured passes of an arm's first start-up, after its windows: the baseline's
        reference pass (logprobs, noise floor; a design of one round, else its later start-ups ask
        logprobs for the prompts that diverged: ``margins_pass``) and workload pass (every prompt of
        each pool: the covariate's workload mean); every arm's distribution check."""
        if arm.method == "baseline" and self.plan.reference_pass:
            reference_pass(self.plan, self.console, run, arm, server, unmeasured)
        if arm.name == self.plan.baseline:
            workload_pass(self.plan, self.console, run, arm, unmeasured)
        if self.plan.distribution_samples is not None:
            distribution_pass(self.plan, run, arm, unmeasured)

    def _later_passes(self, run: RunDir, arm: Arm, server: Server, unmeasured: PassSender) -> None:
        """The unmeasured pass of the baseline's later start-ups (greedy exactness over two or more):
        logprobs for the prompts an output has diverged on so far, read from the run's raw files."""
        if arm.name == self.plan.baseline and self.plan.margins_pass:
            wanted = prompts_to_margin(read_raw(run))
            margins_pass(self.plan, self.console, run, arm, server, unmeasured, wanted)

    def _engine_failed(
        self, run: RunDir, arm: Arm, start: int, startups: list[float], phase: str, error: str, again: bool
    ) -> None:
        """Start-up ``start`` failed: a server the harness started that did not start is started once
        more (``_start_again``; ``again``: this was that once more); else the arm fails."""
        if phase == "startup" and not again and arm.endpoint is None and not refused_its_arguments(error):
            self._start_again(run, arm, start, startups, error)
        else:
            self._arm_failed(run, arm, phase, error, startups, start)

    def _start_again(self, run: RunDir, arm: Arm, start: int, startups: list[float], error: str) -> None:
        """A server that did not start (it exited, or was not ready within ``startup_timeout_s``: a
        full disk, an NCCL hang, a GPU not yet released) is started once more, fresh; the failed
        attempt's files (its log) are kept aside whole and the retry recorded (``remeasured``). A
        second failure fails the arm."""
        why = f"start-up {start + 1}: the server did not start ({error.splitlines()[0].rstrip(':')})"
        remeasured = [*run.read_status(arm.name).remeasured, f"{why}: started again"]
        aside = self._set_aside_start_up(run, arm, start, startups, remeasured)
        kept = f" (its files kept in {aside.relative_to(run.root)})" if aside is not None else ""
        self.console.print(
            f"[yellow]arm {arm.name}: {escape(inert(why))}[/]{kept}: starting it once more, fresh",
            soft_wrap=True,
        )
        self._run_start_up(run, arm, start, startups, again=True)

    def _arm_failed(
        self, run: RunDir, arm: Arm, phase: str, error: str, startups: list[float], start: int = 0
    ) -> None:
        """The arm fails on start-up ``start``: it sits out the rounds after. A started server's
        start-up that failed while measuring, after complete ones, is moved aside whole (its log
        copied back beside the arm's, where the error names it), so the arm's files hold the
        start-ups it completed: those stay in its verdicts (``verdict.window_verdicts``). An existing
        server's windows stay where they are (the one that saw another deployment is the evidence);
        its cells that hold the failed round's stay out of the verdicts."""
        self.console.print(f"[red]arm {arm.name} failed:[/] {escape(inert(error))}", soft_wrap=True)
        remeasured = run.read_status(arm.name).remeasured
        if phase == "measuring" and start > 0 and arm.endpoint is None:
            aside = run.set_aside(arm.name)
            if aside is not None:
                self._copy_back(run, arm.name, aside, start)
                log = run.server_log(arm.name, start)
                if (aside / log.name).is_file():
                    shutil.copy2(aside / log.name, log)
            del startups[start:]
        status = ArmStatus(
            status="failed", phase=phase, error=error, startups_s=startups, remeasured=remeasured
        )
        run.write_status(arm.name, status)

    def _baseline_stop(self, run: RunDir, done: dict[str, int], active: list[str]) -> EngineError:
        """The run stopped where its baseline failed for good: every later start-up would measure arms
        with nothing to compare them with. Says what was not spent (the start-ups the design still
        wanted that were not begun, their minutes at the run's pace and $ at the regime's price),
        that what was measured is kept, and the command that continues the run once the fault is
        fixed."""
        baseline, load, regime = self.plan.baseline, self.plan.load, self.plan.regime
        status, start = run.read_status(baseline), done[baseline]
        begun = {**{n: done[n] for n in active}, baseline: start + 1}  # start-ups begun, each arm
        least = sum(max(0, load.min_server_starts() - n) for n in begun.values())
        most = sum(max(0, load.max_server_starts() - n) for n in begun.values())
        cold, warm, where = self._start_up_seconds()
        seconds = sum(  # an arm's first start-up is its cold one
            (cold + (left - 1) * warm if n == 0 else left * warm)
            for n in begun.values()
            if (left := load.min_server_starts() - n) > 0
        )
        price = regime.price_per_hour()
        unit = (
            f"cost.usd_per_gpu_hour {regime.cost.usd_per_gpu_hour:g} x {regime.tensor_parallel_size} GPUs"
            if regime.cost.usd_per_gpu_hour is not None
            else "cost.usd_per_machine_hour"
        )
        hours = seconds / 3600
        upto = f" (up to {most}, were its verdicts to stay undecided)" if most > least else ""
        twice = any(note.startswith(f"start-up {start + 1}:") for note in status.remeasured)
        error = status.error.splitlines()[0].rstrip(":") if status.error else "no error recorded"
        return EngineError(
            f"the baseline ({baseline}) failed on start-up {start + 1}"
            + (" twice (started once more, fresh)" if twice else "")
            + f": {error}\nNo arm can be compared without it: the run stopped, no further start-up begun. "
            f"Not spent: {least} start-up{'s' if least != 1 else ''} not begun{upto}, about "
            f"{60 * hours:.0f} min and ${hours * price:.2f} "
            f"at ${price:.2f}/h ({unit}), {where}. What was measured is kept in {run.root}; after the fix, "
            f"bench run --resume {run.root} continues it from the baseline's start-up {start + 1}."
        )

    def _start_up_seconds(self) -> tuple[float, float, str]:
        """An arm's first (cold) and later start-ups' seconds at this invocation's pace (its start-ups
        that ended well), else the night plan's (an earlier run's rounds, else its stated
        assumptions); where the figures are from."""
        if self.start_up_s:
            each = sum(self.start_up_s) / len(self.start_up_s)
            return each, each, "at this run's pace"
        return start_up_seconds(self.plan.regime, earlier_round_minutes(self.results_dir, self.plan.regime))

    def _set_aside_start_up(
        self, run: RunDir, arm: Arm, start: int, startups: list[float], remeasured: list[str]
    ) -> Path | None:
        """The arm's files as they were before start-up ``start``: the whole directory moved aside
        (nothing measured is deleted; returned), the earlier start-ups' lines copied back."""
        aside = run.set_aside(arm.name)
        if aside is not None and start > 0:
            self._copy_back(run, arm.name, aside, start)
        del startups[start:]
        status = ArmStatus(status="running", startups_s=startups, remeasured=remeasured)
        run.write_status(arm.name, status)
        return aside

    def _check_deployment(self, arm: Arm, server: Server | ExternalServer, when: str) -> None:
        """Stop the arm if the endpoint it reaches serves another deployment than the run began on."""
        began = began_on(self.plan, arm, server)
        if began is None:
            return
        if changed := deployment_change(began, server.base_url, served_now(self.plan.adapter, server), when):
            raise EngineError(changed)

    def _server(self, run: RunDir, arm: Arm, start: int) -> Server | ExternalServer:
        """The arm's server for one start-up (``engine_server``: a fresh private socket or port),
        its exact argv in ``launch.json`` with its secrets redacted (the latest start-up's: only
        the socket or port differs between them), its own log. An arm with an ``endpoint`` gets
        that existing server, reached again for each round."""
        plan = self.plan
        if arm.endpoint is not None:
            launch = {"endpoint": redact_url(arm.endpoint), "api_key_env": arm.api_key_env}
            write_json_atomic(run.arm_dir(arm.name) / "launch.json", {**launch, "server_start": start})
            return ExternalServer.of_arm(arm, plan.adapter.health_path, run.server_log(arm.name, start))
        draft = plan.draft_paths.get(arm.name)
        server = engine_server(
            plan.adapter,
            plan.regime,
            arm,
            plan.model,
            run.server_log(arm.name, start),
            draft_model=draft,
            env=server_env(self.devices) if self.devices else None,
        )
        launch = {"argv": redact_args(server.argv), "env": redact_env(server.extra_env), "port": server.port}
        if server.uds is not None:
            launch["uds"] = str(server.uds)
        write_json_atomic(run.arm_dir(arm.name) / "launch.json", {**launch, "server_start": start})
        return server

    def _check_served(self, run: RunDir, arm: Arm, server: Server) -> dict[str, Any]:
        """What the started engine reports against the regime: stop the run on a mismatch
        unless allowed (then it is recorded in the arm's status). Returns the arm status's fields
        from it: the mismatches, the attention backend the engine selected and how it counts drafts."""
        log = server.log_path if server.process is not None else None  # an endpoint's log is not here
        served = self.plan.adapter.served_config(server.base_url, log)
        found = [str(m) for m in check_served(self.plan.regime, served, arm)]
        if found and not self.plan.allow_mismatch:
            run.write_status(arm.name, ArmStatus(status="failed", error="regime mismatch", mismatches=found))
            raise UserError(
                f"arm {arm.name}: the server does not run the regime:\n  "
                + "\n  ".join(found)
                + "\nPass --allow-mismatch to run anyway (every mismatch is recorded)."
            )
        return {
            "mismatches": found,
            "attention_backend": served.attention_backend,
            "draft_counting": served.draft_counting,
            "runtime": served.runtime,
        }

    @contextmanager
    def _ready_server(self, run: RunDir, arm: Arm, start: int) -> Iterator[tuple[Server, float]]:
        """The arm's server for this start-up, started and ready (and stopped after the block). A
        port another process took before the engine bound it (``PortTaken``) is given up for a
        fresh one, up to ``PORT_ATTEMPTS`` times: the start-up is the same, on another port."""
        for attempt in range(1, PORT_ATTEMPTS + 1):
            before = gpu.memory_used(self.devices) if self.devices and arm.endpoint is None else None
            interrupted = False
            try:
                with self._server(run, arm, start) as server:
                    try:
                        startup_s = self._wait_ready(server)
                    except PortTaken as exc:
                        if attempt == PORT_ATTEMPTS:
                            raise
                        self.console.print(
                            f"[yellow]{escape(str(exc))}[/]: starting on another port", highlight=False
                        )
                        continue
                    yield server, startup_s
                    return
            except BaseException as exc:
                interrupted = not isinstance(exc, Exception)  # Ctrl-C: no wait
                raise
            finally:
                if before is not None and not interrupted:
                    self._gpus_released(before)

    def _gpus_released(self, before: list[int]) -> None:
        """After a server on GPUs stopped: wait (bounded) until its GPUs hold no more memory than before
        it started, so the next start-up finds it free; the wait is counted and said."""
        assert self.devices is not None
        release = gpu.wait_released(self.devices, before)
        self.clock["gpu_release_s"] += release.waited_s
        if release.held:
            held = ", ".join(f"GPU {device} {gib:.1f} GiB" for device, gib in release.held)
            self.console.print(
                f"[yellow]GPU memory still held {release.waited_s:.0f} s after the server stopped ({held} "
                "more than before it started): the next start-up may find too little free[/]",
                soft_wrap=True,
            )
        elif release.waited_s >= 1.0:
            self.console.print(f"GPU memory released {release.waited_s:.1f} s after the server stopped")

    def _wait_ready(self, server: Server) -> float:
        timeout = self.plan.startup_timeout_s
        with self.console.status("starting server...") as status:

            def tick(elapsed: float) -> None:
                status.update(f"starting server... {elapsed:.0f} s (log: {server.log_path})")

            startup_s = server.wait_ready(timeout, on_tick=tick)
        self.console.print(f"server ready in {startup_s:.0f} s")
        return startup_s

    def _measure_cell(
        self,
        run: RunDir,
        arm: Arm,
        server: Server,
        workload: LoadedWorkload,
        level: LoadLevel,
        start: int = 0,
    ) -> None:
        """A cell's repeats on this start-up: a fixed count, or (adaptive repeats, one start-up) until
        the 95% interval of the speedup (for the baseline: of its tok/s) is as narrow as the regime
        asks, or the maximum."""
        load = self.plan.load
        if isinstance(load.repeats, int):
            for repeat in range(load.repeats):
                index = load.repeat_index(start, repeat)
                converse(
                    self.console,
                    workload,
                    lambda turn, prompts, ended, index=index: self._measure_window(
                        run, arm, server, turn, level, index, start=start, prompts=prompts, ended=ended
                    )[1],
                )
            return
        target = load.repeats.target_rel_half_width
        reference = {} if arm.method == "baseline" else self._baseline_tok_s(run, workload.name, level)
        metric = "speedup" if reference else "output_tok_s"
        values: list[float] = []

        def precision(repeat: int, tok_s: float | None) -> dict[str, Any]:
            if tok_s is not None:
                base = reference.get(repeat) or (stats.mean(list(reference.values())) if reference else None)
                values.append(tok_s / base if base else tok_s)
            return {"metric": metric, "rel_half_width": stats.relative_half_width(values), "target": target}

        for repeat in range(load.repeats.max):  # adaptive repeats: single-turn workloads only (plan_regime)
            reached, _ = self._measure_window(run, arm, server, workload, level, repeat, precision)
            width = reached["rel_half_width"] if reached else None
            if repeat + 1 >= load.repeats.min and width is not None and width <= target:
                break

    def _baseline_tok_s(self, run: RunDir, workload: str, level: LoadLevel) -> dict[int, float]:
        """The baseline's tok/s per repeat in this cell, from its files (measured before this arm)."""
        baseline = self.plan.baseline
        samples = [s for s in read_records(run.samples(baseline), RequestRecord) if s.ok]
        out = {}
        for window in read_records(run.windows(baseline), WindowRecord):
            if (window.workload, window.level) == (workload, level):
                key = (workload, level, window.repeat)
                tokens = sum(s.output_tokens for s in samples if (s.workload, s.level, s.repeat) == key)
                tok_s = output_tokens_per_s(tokens, window.duration_s)
                if tok_s:
                    out[window.repeat] = tok_s
        return out

    def _measure_window(
        self,
        run: RunDir,
        arm: Arm,
        server: Server,
        workload: LoadedWorkload,
        level: LoadLevel,
        repeat: int = 0,
        precision: Precision | None = None,
        start: int = 0,
        prompts: list[Prompt] | None = None,
        ended: dict[str, int] | None = None,
    ) -> tuple[dict[str, Any] | None, list[RequestRecord]]:
        """One measured window (``harness.run.window``) of ``prompts`` (by default the workload's);
        returns the precision reached after it (adaptive repeats) and its records."""
        sent = workload.prompts if prompts is None else prompts
        label = window_label(self.plan, workload, level, repeat, start, adaptive=precision is not None)
        schedule = turn_schedule(self.plan, workload, level, repeat, sent)
        window = Window(run, arm, server, workload, level, repeat, start, sent, ended or {}, label, schedule)

        def send(window: Window) -> WindowResult:
            return self._send(server, workload, sent, level, label, window.keep, repeat, schedule=schedule)

        measured = measure_window(
            window, self.plan, self._samplers(server), send, partial(self._check_alive, server), precision
        )
        served = server.served_model or SERVED_MODEL_NAME
        for model in http.other_models(server.base_url, unsaid=True):  # once each: not counted, named
            self.console.print(
                f"[yellow]arm {escape(arm.name)}: its server's /metrics also count model "
                f"{escape(repr(model))}[/] (label model_name): left out; only {escape(repr(served))}'s "
                "counters are read",
                soft_wrap=True,
            )
        return measured

    def _samplers(self, server: Server) -> list[Sampler]:
        """This machine's sensors through a window: power, and a started server's GPU processes and
        CPU seconds (the CPU innermost: the last to start, the first to stop)."""
        pid = server.process.pid if server.process is not None else None
        power = PowerUse(self.power_reader, self.power_note, self.plan.power.sample_period_s, self.plan.gpus)
        return [power, GpuProcesses(self.gpu_reader, pid), CpuSeconds(pid)]

    def _measure_ramp(
        self, run: RunDir, arm: Arm, server: Server, workload: LoadedWorkload, start: int
    ) -> None:
        """The ramp as one continuous window on this start-up (``window.measure_ramp``)."""

        def send(
            label: str,
            keep: Callable[[RequestRecord], None],
            dues: list[list[float]],
            stage_end: Callable[[int], None],
        ) -> RampResult:
            result = self.sender.ramp(server, workload, label, keep, start, dues, stage_end)
            self.clock["measured_s"] += result.duration_s
            return result

        measure_ramp(self.plan, run, arm, server, workload, start, send, partial(self._check_alive, server))

    def _send(self, server: Server, *request: Any, measured: bool = True, **asked: Any) -> WindowResult:
        """A window's requests (``Sender.window``: workload, prompts, level, label, where each record
        goes, repeat; logprobs, schedule, seeds), its seconds counted measured or warm-up."""
        result = self.sender.window(server, *request, **asked)
        self.clock["measured_s" if measured else "warmup_s"] += result.duration_s
        return result

    def _unmeasured(self, server: Server) -> PassSender:
        """The unmeasured passes' requests to this start-up's server (``harness.run.passes``)."""

        def send(
            workload: LoadedWorkload,
            prompts: list[Prompt],
            level: LoadLevel,
            label: str,
            keep: Callable[[RequestRecord], None],
            **asked: Any,
        ) -> list[RequestRecord]:
            result = self._send(server, workload, prompts, level, label, keep, **asked)
            self._check_alive(server, result)
            return result.records

        return send

    def _check_alive(self, server: Server, result: WindowResult | RampResult) -> None:
        """End the arm (as failed) when the engine died, hung or failed every request."""
        code = server.exit_code()
        if code is not None:
            raise EngineError(
                f"engine exited with status {code} while measuring; log {server.log_path}:\n{server.tail()}"
            )
        if result.stalled:
            raise EngineError(
                f"engine hung: no token for {self.plan.load.stall_timeout_s:.0f} s with requests in "
                f"flight; log {server.log_path}:\n{server.tail()}"
            )
        if result.records and all(not r.ok for r in result.records):
            raise EngineError(f"every request failed (first error: {result.records[0].error})")


def _reopen(arm: str, rounds: list[Round]) -> int:
    """A failed arm's last start-up (the one it failed on) taken back out of its round's ``done``
    (``rounds`` changed in place), so that a resume runs it again: in that round where it is the last
    (still paired with the round's other start-ups), else in a new one. Returns the start-ups it
    completed before it (0: none, or a run that recorded no rounds)."""
    for index in range(len(rounds) - 1, -1, -1):
        entry = rounds[index]
        if arm in entry.done:
            rounds[index] = entry.model_copy(update={"done": [n for n in entry.done if n != arm]})
            return entry.server_starts[arm]
    return 0


def _timing(run: RunDir) -> RunTiming:
    """The run's ``timing.json`` so far (none yet: no invocation, no round)."""
    path = run.root / "timing.json"
    return RunTiming.model_validate(read_json(path)) if path.exists() else RunTiming(invocations=[])


def _write_summary(run: RunDir) -> Summary:
    """The run's summary and its analysis, stored beside the raw files (what ``bench show`` reads)."""
    summary = summarize(run)
    write_json_atomic(run.summary, summary.model_dump(mode="json"))
    write_analysis(run.root, analyze(summary))
    return summary


def run_regime(
    regime_path: Path,
    results_dir: Path,
    console: Console,
    allow_mismatch: bool = False,
    on_created: Callable[[Path], None] | None = None,
    regime: Regime | None = None,
    calibration: CalibrationSource | None = None,
    allow_known_defect: bool = False,
    overrides: Sequence[Override] = (),
) -> tuple[RunDir, Summary]:
    """A new run of the regime; ``on_created`` hears the run directory the moment it exists;
    ``regime``: the file's model when the caller has already read it (with ``overrides``, the
    command line's changes, set in it); ``calibration``: where this machine's calibration of it is
    looked for (default: the user's store); ``allow_known_defect``: measure through a known engine
    defect (recorded) instead of refusing."""
    plan = prepare_run(
        plan_regime(regime_path, regime, overrides),
        console,
        allow_mismatch,
        calibration=calibration,
        allow_known_defect=allow_known_defect,
    )
    runner = Runner(plan, results_dir, console)
    runner.on_created = on_created
    return runner.run()


def resume_run(
    run_dir: Path,
    console: Console,
    allow_mismatch: bool = False,
    rounds: int | None = None,
    remeasure_damaged: bool = False,
) -> tuple[RunDir, Summary]:
    """Resume with the regime stored in the run, refusing if its workloads changed since, or if a
    raw file lost, gained or changed lines since written (``raw_damage``: its start-ups would be
    kept, or copied back, as they are now) unless ``remeasure_damaged``; with ``rounds``, continue
    a finished run to that many rounds in all (``continued_record``), written only once every check
    has passed."""
    run = RunDir(run_dir)
    damage = raw_damage(run)
    if damage and not remeasure_damaged:
        raise UserError(
            f"{run_dir}: raw lines damaged since written ({'; '.join(damage)}); continuing would keep "
            "them: --remeasure-damaged measures each damaged arm again from its first start-up (its "
            "files kept aside as arms/<arm>.attempt-N)"
        )
    record = continued_record(run, rounds) if rounds is not None else read_run_record(run)
    source = recorded_source(record.source_path, run_dir)
    plan = plan_regime(source, stored_regime(record.regime, source))
    changed = changed_workload(record, plan)
    if changed is not None:
        raise UserError(
            f"{run_dir}: workload '{changed}' is not the one this run started with (its prompts "
            "changed); resuming would mix two workloads. Start a new run instead."
        )
    # a run forced through a known engine defect stays forced: its arms so far measured the defect
    forced = bool(record.known_defects)
    ready = prepare_run(
        plan, console, allow_mismatch, resumed_model=record.resolved_model, allow_known_defect=forced
    )
    runner = Runner(ready, run_dir.parent.parent, console)
    return runner.resume(run, record if rounds is not None else None, damaged_arms(run) if damage else [])
