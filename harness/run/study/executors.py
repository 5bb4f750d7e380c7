"""Where a study's point jobs run: this node (``local``), Slurm through submitit, or Ray. Each
executor only starts a job (``harness.run.study.jobs``' command for one point), says how it ended, and
stops it on Ctrl-C; what to run, where, and what to record is ``harness.run.study.run``'s.

- ``local`` starts the command as a child process on the GPUs the placement plan gave the point
  (``CUDA_VISIBLE_DEVICES``), in its own process group so a Ctrl-C is forwarded deliberately.
- ``slurm`` submits one job per point with submitit (one node, the point's GPUs, its time limit);
  jobs outlive the ``bench run`` that submitted them and ``--resume`` re-attaches by job id.
  submitit's ``local`` and ``debug`` clusters run the same jobs without Slurm (tests, dry runs).
- ``ray`` runs one task per point with ``num_gpus`` on an existing cluster (``--ray-address``) or
  on a Ray instance the command starts on this node; Ray picks the GPUs and sets
  ``CUDA_VISIBLE_DEVICES``. Tasks die with the driver, so a resumed study resubmits them.
"""

from __future__ import annotations

import os
import platform
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from harness.core.errors import UserError
from harness.results.study.record import ExecutorOptions, JobState, PointAttempt
from harness.run.study.jobs import run_job

EXIT_INTERRUPTED = 130


class JobOutcome(NamedTuple):
    state: JobState  # finished, failed or interrupted
    reason: str | None = None


@dataclass(frozen=True)
class JobSpec:
    point: str
    attempt: int
    name: str  # the scheduler's job name: <study>-<point>
    command: list[str]
    log: Path
    gpus: int
    cpus: int | None  # the regime's hardware.cpu_count pin; None: the scheduler's default
    devices: tuple[str, ...]  # local only: CUDA_VISIBLE_DEVICES from the placement plan
    time_limit_min: int


class Job(Protocol):
    job_id: str

    def poll(self) -> JobOutcome | None: ...  # None while it runs

    def interrupt(self) -> None: ...  # the study's bench run was interrupted


class Executor(Protocol):
    name: str

    def submit(self, spec: JobSpec) -> Job: ...

    def attach(self, attempt: PointAttempt) -> Job | None: ...  # a job still running, or None

    def close(self) -> None: ...


def outcome_of(returncode: int) -> JobOutcome:
    """A point command's exit status as a job outcome (``bench study-point`` exits 0 when every arm
    has results, 3 when an arm or the engine failed, 2 when it refused to start, 130 interrupted)."""
    if returncode == 0:
        return JobOutcome("finished")
    if returncode == EXIT_INTERRUPTED:
        return JobOutcome("interrupted", "interrupted")
    if returncode < 0:
        return JobOutcome("failed", f"killed by {signal.Signals(-returncode).name}")
    explained = {2: " (refused to start: see the log)", 3: " (an arm or the engine failed: see the run)"}
    return JobOutcome("failed", f"exited with status {returncode}{explained.get(returncode, '')}")


def _missing(package: str) -> UserError:
    return UserError(
        f"--executor needs {package}, which is not installed: pip install -e '.[cluster]' (submitit and Ray)"
    )


# --- local ---------------------------------------------------------------------------------------


class LocalJob:
    def __init__(self, process: subprocess.Popen) -> None:
        self.process = process
        self.job_id = f"local:{platform.node()}:{process.pid}"

    def poll(self) -> JobOutcome | None:
        code = self.process.poll()
        return None if code is None else outcome_of(code)

    def interrupt(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGINT)  # its runner stops its servers and exits 130
        except ProcessLookupError:
            pass


class OrphanJob:
    """A local job whose ``bench run`` went away while it ran: watched by pid until it ends."""

    def __init__(self, job_id: str, pid: int) -> None:
        self.job_id, self.pid = job_id, pid

    def poll(self) -> JobOutcome | None:
        if _running(self.pid):
            return None
        return JobOutcome("failed", "ended while no bench run watched it: see its run")

    def interrupt(self) -> None:
        try:
            os.killpg(self.pid, signal.SIGINT)
        except ProcessLookupError:
            pass


def _running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


class LocalExecutor:
    name = "local"  # the placement plan (harness.run.study.placement) chooses each point's GPUs

    def submit(self, spec: JobSpec) -> Job:
        env = {**os.environ, "BENCH_EXECUTOR": "local"}
        env.pop("BENCH_JOB_ID", None)  # the job's id is its own pid (harness.core.machine)
        if spec.devices:  # NVML indices: make CUDA count the GPUs in NVML's (PCI bus) order
            env |= {"CUDA_VISIBLE_DEVICES": ",".join(spec.devices), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
        spec.log.parent.mkdir(parents=True, exist_ok=True)
        with open(spec.log, "ab") as out:
            process = subprocess.Popen(
                spec.command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
                start_new_session=True,
            )  # fmt: skip
        return LocalJob(process)

    def attach(self, attempt: PointAttempt) -> Job | None:
        kind, host, pid = (attempt.job_id or "::").split(":", 2)
        if kind != "local" or host != platform.node() or not pid.isdecimal() or not _running(int(pid)):
            return None
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            return None
        return OrphanJob(attempt.job_id, int(pid)) if "study-point" in cmdline else None

    def close(self) -> None:
        pass


# --- slurm (submitit) ------------------------------------------------------------------------------


# submitit asks Slurm for SIGUSR2 90 s before the time limit (--signal=USR2@90), and Slurm sends it
# to every process of the job: the point's command and its engine servers too, whose default action
# is to die (a 1-minute job on the test cluster ended "killed by SIGUSR2" 25 s in; under load the
# signal came before the job's Python had started). submitit's own handler would end a function it
# cannot checkpoint there anyway ("timed-out and not checkpointable", sacct: FAILED). A point is
# never requeued by submitit (a new attempt is the study's), so the warning is SIGURG instead,
# which every process ignores unless it asks for it (the job notes it in its log): Slurm's own limit
# stands, SIGTERM at the limit stops the point's servers like a Ctrl-C, sacct says TIMEOUT, and the
# windows already measured are on disk.
TIME_LIMIT_WARNING = "URG@90"


def slurm_parameters(spec: JobSpec, options: ExecutorOptions) -> dict[str, Any]:
    """submitit's AutoExecutor parameters for one point: one node, one task, its GPUs and time."""
    params: dict[str, Any] = {
        "name": spec.name,
        "nodes": 1,
        "tasks_per_node": 1,
        "timeout_min": spec.time_limit_min,
        # a requeued job (node failure, preemption) would run the point again under the same id,
        # beside the new attempt a resume makes: a point is run again by the study, never by Slurm
        "slurm_additional_parameters": {"signal": TIME_LIMIT_WARNING, "no_requeue": True},
    }
    if spec.cpus:
        params["cpus_per_task"] = spec.cpus
    if spec.gpus:
        params["gpus_per_node"] = spec.gpus
    if options.partition:
        params["slurm_partition"] = options.partition
    if options.account:
        params["slurm_account"] = options.account
    return params


def unpinned_cpu_note(ids: list[str], plans: list[Any]) -> str | None:
    """What a study sent to Slurm says of its CPU points whose regime pins no
    ``hardware.cpu_count`` (``plans``: each point's plan, in ``ids``' order): such a job asks for no
    CPUs and gets the cluster's default with other jobs beside it, where the local executor gives a
    CPU point the whole machine. None when every point is pinned or on GPUs."""
    unpinned = [
        point
        for point, plan in zip(ids, plans, strict=True)
        if plan.regime.hardware.kind == "cpu" and not plan.regime.hardware.cpu_count
    ]
    if not unpinned:
        return None
    named = ", ".join(unpinned[:6]) + (f" and {len(unpinned) - 6} more" if len(unpinned) > 6 else "")
    return (
        f"note: {named}: a CPU point that pins no hardware.cpu_count asks Slurm for no "
        "CPUs and gets the cluster's default (1 CPU on a stock Slurm) with other jobs beside it; pin "
        "hardware.cpu_count for the cores it should measure on"
    )


# How Slurm itself ends a job, in sacct's words (its State column), and what each means for the point.
SLURM_ENDINGS = {
    "CANCELLED": "cancelled (scancel, or an administrator)",
    "TIMEOUT": "Slurm stopped it at its time limit (--time-limit, or the derived budget)",
    "PREEMPTED": "preempted by a higher-priority job",
    "NODE_FAIL": "its node failed",
    "OUT_OF_MEMORY": "killed for exceeding its memory",
    "DEADLINE": "past its deadline",
    "BOOT_FAIL": "its node failed to boot",
}
# A job whose output is in while sacct still shows it running (or not at all: slurmctld hands the
# accounting records to slurmdbd asynchronously, seconds later under load) is waited for this long.
SETTLE_S = 60
# A job sacct does not know at all (another cluster's id, SLURM_CONF unset, its records purged)
# and without output is given up after this long, instead of being waited for forever.
UNKNOWN_GIVE_UP_S = 300
# While waiting on Slurm (accounting to record an end, a stopped job to leave the queue): sacct or
# squeue at most this often per job (the dispatcher polls every 0.5 s; slurmctld serves everyone)
FORCE_EVERY_S = 5.0
ALIVE = ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "RESIZING", "SUSPENDED")


def _in_queue(job_id: str) -> bool:
    """Whether Slurm still lists the job (``squeue``): a cancelled or timed-out job stays there,
    COMPLETING, until its processes are gone (Slurm's KillWait)."""
    try:
        out = subprocess.run(
            ["squeue", "--noheader", "--jobs", job_id, "--format", "%T"],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0 and bool(out.stdout.strip())


class SlurmJob:
    def __init__(self, job: Any, cancel_on_interrupt: bool, real_slurm: bool) -> None:
        self.job, self.job_id = job, f"slurm:{job.job_id}"
        self.cancel_on_interrupt, self.real_slurm = cancel_on_interrupt, real_slurm
        self.waiting_since: float | None = None  # output in, or the job unknown: since when
        self.forced_at = self.queue_asked_at = -FORCE_EVERY_S

    def poll(self) -> JobOutcome | None:
        if self.real_slurm:
            return self._poll_slurm()
        if not self.job.done():
            return None
        return self._from_output()

    def _poll_slurm(self) -> JobOutcome | None:
        """Slurm's own word for how the job ended comes first: a cancelled or timed-out job's
        command was stopped by a signal, and its exit status alone would read "interrupted"."""
        done = self.job.done()
        now = time.monotonic()
        force = done and now - self.forced_at >= FORCE_EVERY_S
        if force:
            self.forced_at = now
        state = (self.job.get_info(mode="force" if force else "standard").get("State") or "UNKNOWN").strip()
        word = state.split(" ")[0]
        if word in SLURM_ENDINGS:
            if now - self.queue_asked_at < FORCE_EVERY_S:
                return None  # asked squeue a moment ago
            self.queue_asked_at = now
            if _in_queue(self.job.job_id):
                return None  # its processes are still stopping: its log and servers are not final
            return JobOutcome("failed", f"{state}: {SLURM_ENDINGS[word]}")
        if word == "SUSPENDED" or (not done and word in ALIVE):
            self.waiting_since = None
            return None  # a suspended job resumes; a running one runs
        if not done or word in ALIVE or word in ("UNKNOWN", ""):
            self.waiting_since = self.waiting_since or now
            if now - self.waiting_since < (SETTLE_S if done else UNKNOWN_GIVE_UP_S):
                return None  # accounting has not recorded the end yet, or sacct does not know the job
        if not done:
            return JobOutcome(
                "failed",
                f"{state}: sacct does not know job {self.job.job_id} and it left no output (another "
                "cluster's job, SLURM_CONF not set, or its records purged); see its log",
            )
        return self._from_output()

    def _from_output(self) -> JobOutcome:
        error = self.job.exception()
        if error is None:
            return outcome_of(self.job.result())
        # the scheduler's words where submitit has them, the first line of the error otherwise
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return JobOutcome("failed", f"{self.job.state}: {first}")

    def interrupt(self) -> None:
        if self.cancel_on_interrupt:  # submitit's local cluster: its jobs are this machine's processes
            self.job.cancel(check=False)
        # a Slurm job keeps running; bench run --resume re-attaches to it


def sbatch_options(spec: JobSpec, options: ExecutorOptions, folder: Path) -> list[str]:
    """The ``#SBATCH`` lines submitit writes for this point's job (what ``bench validate`` shows),
    rendered by submitit's own Slurm script builder, which needs no Slurm on this machine (its
    executor would: it looks for srun)."""
    try:
        import submitit
        from submitit.slurm.slurm import _make_sbatch_string
    except ImportError:
        raise _missing("submitit") from None
    renamed = submitit.SlurmExecutor._equivalence_dict() or {}
    params = {k.removeprefix("slurm_"): v for k, v in slurm_parameters(spec, options).items()}
    script = _make_sbatch_string(
        command="", folder=folder, **{renamed.get(k, k): v for k, v in params.items()}
    )
    return [line for line in script.splitlines() if line.startswith("#SBATCH")]


class SlurmExecutor:
    name = "slurm"  # Slurm allocates the GPUs

    def __init__(self, options: ExecutorOptions, folder: Path) -> None:
        try:
            import submitit
        except ImportError:
            raise _missing("submitit") from None
        self.options, self.folder, self.submitit = options, folder, submitit
        try:
            self.executor = submitit.AutoExecutor(folder=folder, cluster=options.slurm_cluster)
        except RuntimeError as exc:  # "Could not detect srun": not on a Slurm cluster
            raise UserError(f"--executor slurm: {exc}") from None

    def submit(self, spec: JobSpec) -> Job:
        params = slurm_parameters(spec, self.options)
        if self.options.slurm_cluster != "slurm":  # submitit's local/debug clusters take no slurm_* keys
            params = {k: v for k, v in params.items() if not k.startswith("slurm_")}
        self.executor.update_parameters(**params)
        job = self.executor.submit(run_job, spec.command, str(spec.log), "slurm", "", {})
        real = self.options.slurm_cluster == "slurm"
        return SlurmJob(job, cancel_on_interrupt=self.options.slurm_cluster == "local", real_slurm=real)

    def attach(self, attempt: PointAttempt) -> Job | None:
        if self.options.slurm_cluster != "slurm":
            return None  # submitit's local and debug jobs end with the process that watched them
        return attach_slurm(attempt, self.folder)

    def close(self) -> None:
        pass


def attach_slurm(attempt: PointAttempt, folder: Path) -> Job | None:
    """A Slurm job of an earlier ``bench run``, followed by its id (its state from sacct, its result
    from submitit's files in ``folder``), whichever executor resumes the study. Only a job that
    was submitted through sbatch (its script in ``folder``): submitit's local jobs have a pid for
    an id, which sacct would not know, or would take for another job."""
    kind, _, job_id = (attempt.job_id or ":").partition(":")
    if kind != "slurm" or not job_id.isdecimal() or not (folder / f"{job_id}_submission.sh").is_file():
        return None
    try:
        import submitit
    except ImportError:
        raise _missing("submitit") from None
    return SlurmJob(
        submitit.SlurmJob(folder=folder, job_id=job_id), cancel_on_interrupt=False, real_slurm=True
    )


# --- ray -----------------------------------------------------------------------------------------


def _ray_point(command: list[str], log: str) -> int:
    import ray

    return run_job(command, log, "ray", f"ray:{ray.get_runtime_context().get_task_id()}", {})


class RayJob:
    def __init__(self, ray: Any, ref: Any) -> None:
        self.ray, self.ref = ray, ref
        self.job_id = f"ray:{ref.task_id().hex()}"

    def poll(self) -> JobOutcome | None:
        ready, _ = self.ray.wait([self.ref], timeout=0)
        if not ready:
            return None
        try:
            return outcome_of(self.ray.get(self.ref))
        except self.ray.exceptions.RayError as exc:  # the worker died, the node was lost, cancelled
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            return JobOutcome("failed", f"{type(exc).__name__}: {first}"[:300])

    def interrupt(self) -> None:
        self.ray.cancel(self.ref)  # KeyboardInterrupt in the task: run_job stops its command cleanly


class RayExecutor:
    name = "ray"  # Ray assigns the GPUs

    def __init__(self, options: ExecutorOptions) -> None:
        try:
            import ray
        except ImportError:
            raise _missing("ray") from None
        self.ray = ray
        self.started = options.ray_address is None
        settings: dict[str, Any] = {"log_to_driver": False, "include_dashboard": False}
        if self.started:  # a local instance on this node: the GPUs --gpus says, else Ray's count
            settings["object_store_memory"] = 100 * 2**20  # the jobs pass no data through Ray
            if options.gpus is not None:
                settings["num_gpus"] = options.gpus
        else:
            settings["address"] = options.ray_address
        try:
            ray.init(**settings)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise UserError(f"--executor ray: could not start or reach Ray: {exc}") from None
        self.task = ray.remote(max_retries=0)(_ray_point)

    def submit(self, spec: JobSpec) -> Job:
        # A GPU point needs no CPU slot of Ray's; a CPU point takes the whole machine when Ray runs
        # on this one (CPU points one at a time, as with the local executor), else what it pins.
        cpus = spec.cpus or 1
        if spec.gpus:
            cpus = 0
        elif self.started:
            cpus = os.cpu_count() or cpus
        ref = self.task.options(num_gpus=spec.gpus, num_cpus=cpus, name=spec.name).remote(
            spec.command, str(spec.log)
        )
        return RayJob(self.ray, ref)

    def attach(self, attempt: PointAttempt) -> Job | None:
        return None  # a task does not outlive its driver

    def close(self) -> None:
        self.ray.shutdown()


def open_executor(options: ExecutorOptions, study_root: Path) -> Executor:
    if options.name == "slurm":
        return SlurmExecutor(options, study_root / "slurm")
    if options.name == "ray":
        return RayExecutor(options)
    return LocalExecutor()
