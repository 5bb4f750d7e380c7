"""Run a study: every point is one job (``harness.run.study.jobs``: an ordinary run of the point's
concrete regime into the study directory) started by an executor (``harness.run.study.executors``:
this node, Slurm or Ray). A finished point is never run again; a point whose job failed or was
interrupted gets a new attempt: continued in place on the same machine and devices, in a new
attempt directory anywhere else. Every attempt is recorded in study.json as it starts and ends."""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from harness.config.regime import Regime, recorded_source, stored_regime
from harness.core.errors import UserError
from harness.core.overrides import Override
from harness.core.overrides import record as overrides_record
from harness.derive.study.collect import StudyResults, load_study
from harness.results.files import RunDir, read_json, writer_lock
from harness.results.study.record import (
    ExecutorOptions,
    PointAttempt,
    StudyDir,
    StudyPointRecord,
    StudyRecord,
)
from harness.run.plan import Plan
from harness.run.server import log_tail, stop_left_running
from harness.run.study.executors import (
    Executor,
    Job,
    JobOutcome,
    JobSpec,
    SlurmJob,
    attach_slurm,
    open_executor,
    unpinned_cpu_note,
)
from harness.run.study.jobs import LOG_TAIL_LINES, PLACEMENT_FILE, now, point_command
from harness.run.study.placement import Demand, Slot, plan_placement, point_gpus, time_limit_minutes
from harness.run.study.sweep import StudyPlan, plan_study

POLL_S = 0.5
INTERRUPT_GRACE_S = 150  # a job's runner stops its server (up to 20 s) and writes its files


def study_record(
    study: StudyPlan, executor: ExecutorOptions, overrides: Sequence[Override] = ()
) -> StudyRecord:
    sweep = study.regime.sweep
    return StudyRecord(
        name=study.regime.name,
        source_path=str(study.source.resolve()),  # a resume may start in another directory
        regime=study.regime.redacted().model_dump(mode="json"),  # no secret on disk
        regime_axes=dict(sweep.regime) if sweep else {},
        arm_axes=dict(sweep.arms) if sweep else {},
        families=study.families,
        points=[
            StudyPointRecord(
                id=p.id, axes=list(p.axes), fingerprint=p.regime.fingerprint(), run_dir=f"points/{p.id}"
            )
            for p in study.points
        ],
        executor=executor,
        overrides=overrides_record(overrides),
    )


def node_devices(options: ExecutorOptions) -> list[str]:
    """The GPUs the local executor hands out, as NVML indices (jobs get them with
    CUDA_DEVICE_ORDER=PCI_BUS_ID, so CUDA counts them as NVML does): every GPU this process may
    use, or the first ``--gpus N``. Where NVML sees none, ``--gpus N`` names N logical devices."""
    from harness.run.sensors.environment import collect_gpus

    visible = [str(g["index"]) for g in collect_gpus()["gpus"]]
    if options.gpus is None:
        return visible
    if not visible:
        return [str(i) for i in range(options.gpus)]
    if options.gpus > len(visible):
        raise UserError(
            f"--gpus {options.gpus}: this process may use {len(visible)} GPUs ({', '.join(visible)})"
        )
    return visible[: options.gpus]


def demands(ids: list[str], plans: list[Plan], options: ExecutorOptions) -> list[Demand]:
    """Each point's GPUs and time budget under these executor options."""
    return [
        Demand(
            point,
            point_gpus(plan.regime, options.gpus_per_point),
            options.time_limit_min or time_limit_minutes(plan.regime),
        )
        for point, plan in zip(ids, plans, strict=True)
    ]


def placement(
    ids: list[str], plans: list[Plan], options: ExecutorOptions
) -> tuple[list[Demand], list[Slot] | None, list[str]]:
    """Each point's demand and, for the local executor, the plan of who runs where on this node's
    GPUs (their CUDA_VISIBLE_DEVICES names); a point that cannot fit refuses the whole study."""
    wanted = demands(ids, plans, options)
    if options.name != "local":
        return wanted, None, []
    devices = node_devices(options)
    return wanted, plan_placement(wanted, len(devices)), devices


def run_study(
    regime_path: Path,
    results_dir: Path,
    console: Console,
    options: ExecutorOptions,
    allow_mismatch: bool = False,
    on_created: Callable[[Path], None] | None = None,
    regime: Regime | None = None,
    overrides: Sequence[Override] = (),
) -> tuple[StudyDir, StudyResults]:
    """A new study; ``on_created`` hears the study directory the moment it exists; ``regime``: the
    file's model when the caller has already read it (with ``overrides``, the command line's
    changes, set in it; each point's run records them)."""
    study, plans = plan_study(regime_path, regime, overrides)
    placement([p.id for p in study.points], plans, options)  # a point that cannot fit: refused now
    directory = StudyDir.create(results_dir, study.regime.name)
    if on_created is not None:
        on_created(directory.root)
    record = study_record(study, options, overrides)
    directory.write(record)
    console.print(
        f"Study directory: [bold]{directory.root}[/] ({len(study.points)} points, "
        f"{study.server_starts()} server start-ups, executor {options.name})"
    )
    return Dispatcher(directory, record, plans, console, allow_mismatch).run()


def resume_study(
    study_dir: Path, console: Console, options: ExecutorOptions | None = None, allow_mismatch: bool = False
) -> tuple[StudyDir, StudyResults]:
    """Continue a study with the regime stored in it: finished points are kept as they are; a
    job still running is re-attached to where its executor can (Slurm; a local job on this node)."""
    directory = StudyDir(study_dir)
    record = directory.read()
    source = recorded_source(record.source_path, study_dir)
    study, plans = plan_study(source, stored_regime(record.regime, source), record.set_overrides())
    if [p.regime.fingerprint() for p in study.points] != [p.fingerprint for p in record.points]:
        raise UserError(
            f"{study_dir}: the study's points no longer expand to the regimes it started with "
            "(a different harness version?); start a new study instead"
        )
    if options is not None and options != record.executor:
        record = record.model_copy(update={"executor": options})
    placement([p.id for p in record.points], plans, record.executor)
    console.print(f"Resuming study [bold]{escape(str(directory.root))}[/] (executor {record.executor.name})")
    return Dispatcher(directory, record, plans, console, allow_mismatch).run()


def _complete(run: RunDir, plan: Plan) -> bool:
    return (run.root / "regime.json").is_file() and all(
        run.read_status(arm.name).status == "ok" for arm in plan.regime.arms
    )


def _set_aside_empty(root: Path) -> None:
    """A point directory created but never written (a crash right after mkdir) is moved aside."""
    attempt = 1
    while (target := root.with_name(f"{root.name}.empty-{attempt}")).exists():
        attempt += 1
    os.replace(root, target)


def _same_place(run_root: Path, devices: tuple[str, ...], cpu_point: bool) -> bool:
    """Whether a point's earlier attempt ran here (and, for a GPU point, on these GPUs): only then
    is it continued in place (its finished arms kept), since a point's arms are compared with its
    own baseline. A CPU point's engine ignores the GPUs it was given: the machine is what counts."""
    try:
        placed = read_json(run_root / PLACEMENT_FILE)
    except UserError:
        return False
    same_gpus = cpu_point or placed.get("cuda_visible_devices") == (",".join(devices) if devices else None)
    return placed.get("host") == platform.node() and same_gpus


def stop_orphans(run_root: Path) -> list[int]:
    """Stop the engine servers a killed job left behind, when the job ran on this host (another
    node's scheduler ends a job's processes with the job); returns the groups stopped."""
    try:
        placed = read_json(run_root / PLACEMENT_FILE)
    except UserError:
        return []
    return stop_left_running(run_root) if placed.get("host") == platform.node() else []


class Dispatcher:
    """Submits each point's job when its GPUs are free (local) or at once (a cluster schedules),
    records every attempt in study.json as it starts and ends, and collects the results at the end."""

    def __init__(
        self,
        directory: StudyDir,
        record: StudyRecord,
        plans: list[Plan],
        console: Console,
        allow_mismatch: bool,
    ) -> None:
        self.directory, self.record, self.plans = directory, record, plans
        self.console, self.allow_mismatch = console, allow_mismatch
        self.options = record.executor
        self.running: dict[str, Job] = {}
        self.ended: set[str] = set()  # points whose job ended (or needed none) in this invocation
        self.followed: dict[str, int] = {}  # point -> bytes of its log already shown (a lone job's)
        self.follow = False

    # study.json ------------------------------------------------------------------------------
    def _point(self, point_id: str) -> StudyPointRecord:
        return next(p for p in self.record.points if p.id == point_id)

    def _update(self, point_id: str, **changes: object) -> None:
        """Change the point's newest attempt."""
        point = self._point(point_id)
        self._put(point, [*point.attempts[:-1], point.attempts[-1].model_copy(update=changes)])

    def _put(self, point: StudyPointRecord, attempts: list[PointAttempt]) -> None:
        """The point with these attempts, written to study.json at once."""
        changed = point.model_copy(update={"attempts": attempts})
        points = [changed if p.id == point.id else p for p in self.record.points]
        self.record = self.record.model_copy(update={"points": points})
        self.directory.write(self.record)

    # one point ----------------------------------------------------------------------------------
    def _submit(self, executor: Executor, index: int, demand: Demand, devices: tuple[str, ...]) -> None:
        point = self.record.points[index]
        root = self.directory.root
        resume, attempt = False, len(point.attempts) + 1
        run_dir = point.current_run_dir()
        if (root / run_dir / "regime.json").is_file():
            cpu_point = self.plans[index].regime.hardware.kind == "cpu"
            if executor.name == "local" and (
                not point.attempts or _same_place(root / run_dir, devices, cpu_point)
            ):
                resume = True  # continued in place: same machine, same devices
            else:  # points/<id> holds attempt 1, whether or not study.json recorded it
                attempt = max(attempt, 2)
                while (root / f"{point.run_dir}.attempt-{attempt}").exists():
                    attempt += 1
                run_dir = f"{point.run_dir}.attempt-{attempt}"
        elif (root / run_dir).exists():
            _set_aside_empty(root / run_dir)
        log = f"logs/{point.id}.{attempt}.log"
        spec = JobSpec(
            point=point.id,
            attempt=attempt,
            name=f"{self.record.name}-{point.id}",
            command=point_command(root, point.id, run_dir, resume, self.allow_mismatch),
            log=root / log,
            gpus=demand.gpus,
            cpus=self.plans[index].regime.hardware.cpu_count,
            devices=devices,
            time_limit_min=demand.minutes,
        )
        job = executor.submit(spec)
        record = PointAttempt(
            attempt=attempt,
            run_dir=run_dir,
            executor=executor.name,
            job_id=job.job_id,
            devices=list(devices),
            log=log,
            submitted_at=now(),
        )
        self._put(point, [*point.attempts, record])
        self.running[point.id] = job
        where = f" on GPUs {','.join(devices)}" if devices else ""
        how = "continuing its run" if resume else f"run {run_dir}"
        verb = "started" if executor.name == "local" else "submitted"  # a cluster queues it
        self.console.print(
            f"{point.id}: {verb}{where} (job {job.job_id}, {how}, log {log})", highlight=False, markup=False
        )
        if self.follow:
            self.followed[point.id] = 0

    def _ended(self, point_id: str, outcome: JobOutcome, started: float) -> None:
        job = self.running.pop(point_id)
        point = self._point(point_id)
        attempt = point.attempts[-1]
        run_root = self.directory.root / attempt.run_dir
        self._follow(point_id, final=True)
        plan = self.plans[[p.id for p in self.record.points].index(point_id)]
        if outcome.state == "failed" and _complete(RunDir(run_root), plan):
            # e.g. a job re-attached after its bench run went away, which cannot tell how it
            # exited: its run says every arm finished, and that is what counts
            outcome = JobOutcome("finished", f"{outcome.reason}; its run is complete")
        tail = None
        if outcome.state != "finished":
            stopped = stop_orphans(run_root)
            tail = log_tail(self.directory.root / attempt.log, LOG_TAIL_LINES)
            if stopped:
                tail += f"\n(stopped the engine servers it left running: process groups {stopped})"
        self._update(point_id, state=outcome.state, reason=outcome.reason, log_tail=tail, ended_at=now())
        self.ended.add(point_id)
        minutes = (time.monotonic() - started) / 60
        if outcome.state == "finished":
            self.console.print(
                f"[green]{point_id}: finished[/] {minutes:.1f} min after it was submitted ({job.job_id})",
                highlight=False,
            )
        else:
            self.console.print(
                f"[red]{point_id}: {outcome.state}[/]: {escape(outcome.reason or '')} ({job.job_id}); "
                f"log {attempt.log}, last lines:\n{escape(tail or '')}",
                highlight=False,
            )

    def _follow(self, point_id: str, final: bool = False) -> None:
        """Show a lone job's output as it comes (one point at a time: a CPU-only machine)."""
        if point_id not in self.followed:
            return
        log = self.directory.root / self._point(point_id).attempts[-1].log
        try:
            with open(log, "rb") as handle:
                handle.seek(self.followed[point_id])
                chunk = handle.read()
        except OSError:
            return
        complete = chunk if final else chunk[: chunk.rfind(b"\n") + 1]
        self.followed[point_id] += len(complete)
        if complete:
            self.console.out(complete.decode(errors="replace"), end="", highlight=False)
        if final:
            del self.followed[point_id]

    # the loop -------------------------------------------------------------------------------------
    def run(self) -> tuple[StudyDir, StudyResults]:
        root = self.directory.root
        with writer_lock(root / "study.lock"):  # one bench run dispatches a study at a time
            return self._run(root)

    def _run(self, root: Path) -> tuple[StudyDir, StudyResults]:
        wanted, slots, devices = placement([p.id for p in self.record.points], self.plans, self.options)
        # one point at a time (a CPU-only machine): its output is shown as it comes
        self.follow = slots is not None and all(s.wave == i + 1 for i, s in enumerate(slots))
        executor = open_executor(self.options, root)
        if executor.name == "slurm":
            note = unpinned_cpu_note([p.id for p in self.record.points], self.plans)
            if note:
                self.console.print(note, highlight=False, markup=False)
        try:
            pending = self._resumable(executor)
            started = {p: time.monotonic() for p in self.running}
            while pending or self.running:
                for index in list(pending):
                    slot = slots[index] if slots is not None else None
                    if slot is not None and not self._free(slot, slots):
                        continue
                    pending.remove(index)
                    placed = tuple(devices[d] for d in slot.devices) if slot is not None else ()
                    self._submit(executor, index, wanted[index], placed)
                    started[self.record.points[index].id] = time.monotonic()
                for point_id, job in list(self.running.items()):
                    self._follow(point_id)
                    outcome = job.poll()
                    if outcome is not None:
                        self._ended(point_id, outcome, started[point_id])
                time.sleep(POLL_S)
        except KeyboardInterrupt:
            self._interrupt()
            raise
        finally:
            executor.close()
        return self.directory, load_study(root)

    def _resumable(self, executor: Executor) -> list[int]:
        """The points still to run: complete ones are kept, a job still running is re-attached
        where its executor can, and a job nobody can reach any more is recorded as failed."""
        pending = []
        for index, (point, plan) in enumerate(zip(self.record.points, self.plans, strict=True)):
            title = f"study point {index + 1}/{len(self.record.points)}: {point.id} ({_label(point)})"
            last = point.attempts[-1] if point.attempts else None
            if _complete(RunDir(self.directory.root / point.current_run_dir()), plan):
                self.console.print(f"{title}: complete, kept", highlight=False, markup=False)
                self.ended.add(point.id)
                if last is not None and last.state == "submitted":  # it ended while no bench run watched
                    reason = "finished while no bench run watched it: collected from its run's files"
                    self._update(point.id, state="finished", reason=reason, ended_at=now())
                continue
            if last is not None and last.state == "submitted":
                job = self._attach(executor, last)
                if job is not None:
                    self.running[point.id] = job
                    self.console.print(
                        f"{title}: re-attached to job {job.job_id}", highlight=False, markup=False
                    )
                    continue
                reason = "the job is gone: it was not running when the study resumed"
                self._update(point.id, state="failed", reason=reason, ended_at=now())
            pending.append(index)
        return pending

    def _attach(self, executor: Executor, attempt: PointAttempt) -> Job | None:
        """An earlier attempt's job, followed to its end: by this study's executor, or, when the
        study resumes on another one, by Slurm's job id (a Slurm job outlives its bench run, and
        running the point a second time beside it would measure it twice)."""
        if attempt.executor == executor.name:
            return executor.attach(attempt)
        if attempt.executor == "slurm":
            return attach_slurm(attempt, self.directory.root / "slurm")
        return None

    def _free(self, slot: Slot, slots: list[Slot]) -> bool:
        """A point starts once every point planned before it on its GPUs has ended and no running
        job holds one of them (or the machine, for a CPU point)."""
        if any(p not in self.ended for p in slot.after):
            return False
        by_point = {s.point: s for s in slots}
        for point_id in self.running:
            other = by_point[point_id]
            if not slot.devices or not other.devices or set(slot.devices) & set(other.devices):
                return False
        return True

    def _interrupt(self) -> None:
        """Ctrl-C: jobs this machine runs (local, a started Ray) are interrupted and waited for, so
        their servers stop; Slurm jobs keep running and ``--resume`` re-attaches to them."""
        if not self.running:
            return
        for job in self.running.values():
            job.interrupt()
        deadline = time.monotonic() + INTERRUPT_GRACE_S
        try:
            while self.running and time.monotonic() < deadline:
                for point_id, job in list(self.running.items()):
                    if isinstance(job, SlurmJob) and job.real_slurm:
                        self.console.print(f"{point_id}: job {job.job_id} keeps running on Slurm")
                        self.running.pop(point_id)
                        continue
                    outcome = job.poll()
                    if outcome is not None:
                        self._ended(point_id, outcome, time.monotonic())
                time.sleep(POLL_S)
        except KeyboardInterrupt:
            pass  # an interrupt outside bench's CLI (which holds later signals until its teardown ends)


def _label(point: StudyPointRecord) -> str:
    return ", ".join(f"{path}={value}" for path, value in point.axes) or "no regime axis"
