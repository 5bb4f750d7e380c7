"""What a study point's job runs, on whatever node the executor put it: one command,

    python -m harness.cli study-point STUDY_DIR POINT_ID --run-dir points/<id>[.attempt-N] [--continue]

the same for every executor. It runs the point's concrete regime exactly as ``bench run`` runs a
regime (``harness.run.runner``), into its run directory inside the shared study directory, and writes
``placement.json`` there: the host, the job id and the GPUs it ran on, so the machine-identity
checks apply per point. Slurm and Ray run it through ``run_job``, a plain function that starts the
command with the job's id in its environment and its output in the job's log.
"""

from __future__ import annotations

import os
import platform
import signal
import subprocess
import sys
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rich.console import Console

from harness.config.regime import recorded_source, stored_regime
from harness.core.errors import UserError
from harness.results.files import read_json, write_json_atomic
from harness.results.study.record import StudyDir
from harness.run.plan import prepare_run
from harness.run.runner import Runner, resume_run
from harness.run.sensors.environment import collect_gpus, collect_placement
from harness.run.study.sweep import plan_study

PLACEMENT_FILE = "placement.json"
LOG_TAIL_LINES = 30  # of a failed job's output, kept in study.json


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def point_command(
    study_root: Path, point: str, run_dir: str, resume: bool, allow_mismatch: bool
) -> list[str]:
    command = [
        sys.executable,
        "-m",
        "harness.cli",
        "study-point",
        str(study_root),
        point,
        "--run-dir",
        run_dir,
    ]
    return command + (["--continue"] if resume else []) + (["--allow-mismatch"] if allow_mismatch else [])


def run_job(command: list[str], log: str, executor: str, job_id: str, extra_env: dict[str, str]) -> int:
    """A scheduler's job (submitit's function, Ray's task): the point's command, its output in
    ``log``; returns the command's exit status. The devices are the scheduler's: Slurm and Ray set
    CUDA_VISIBLE_DEVICES for the job, and the command inherits it. Cancelled (Ray's cancel, Slurm's
    signal), it interrupts the command, which stops its engine servers, instead of orphaning them."""
    if not job_id and executor == "slurm":
        import submitit

        job_id = f"slurm:{submitit.JobEnvironment().job_id}"
        # Slurm's warning before the time limit (executors.TIME_LIMIT_WARNING) is noted in the
        # job's log; the point runs on until Slurm's SIGTERM at the limit stops it
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGURG, _time_limit_warning)
    env = {**os.environ, **extra_env, "BENCH_EXECUTOR": executor, "BENCH_JOB_ID": job_id}
    Path(log).parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        child = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env
        )
        try:
            return child.wait()
        except BaseException:
            child.send_signal(signal.SIGINT)
            try:
                child.wait(timeout=120)
            except subprocess.TimeoutExpired:
                child.kill()
            raise


def _time_limit_warning(signum: int, frame: Any) -> None:
    print(f"{now()} Slurm: the time limit is near; the point runs on until Slurm stops it", flush=True)


def placement_record() -> dict[str, Any]:
    """Where this process runs, for ``placement.json``: the executor's job, the host, the devices."""
    placement = collect_placement()["placement"] or {
        "executor": None,
        "job_id": None,
        "host": platform.node(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }
    gpus = collect_gpus()["gpus"]
    return {
        **placement,
        "pid": os.getpid(),
        "gpus": [{"index": g["index"], "name": g["name"], "uuid": g.get("uuid")} for g in gpus],
        "started_at": now(),
    }


def run_point(
    study_root: Path, point_id: str, run_dir: str, resume: bool, console: Console, allow_mismatch: bool
) -> int:
    """``bench study-point``: run (or continue) one point into ``run_dir``. Exit status 0 when every
    arm finished with results, 3 otherwise (the run's own files say which arm and why)."""
    record = StudyDir(study_root).read()
    ids = [p.id for p in record.points]
    if point_id not in ids:
        raise UserError(f"{study_root}: no point {point_id!r} (points: {', '.join(ids)})")
    source = recorded_source(record.source_path, study_root)
    _, plans = plan_study(source, stored_regime(record.regime, source), record.set_overrides())
    plan = plans[ids.index(point_id)]
    root = study_root / run_dir
    if resume and (root / "regime.json").is_file():
        # the same host and devices (why it continues in place); this job is added to the record
        try:
            placed = read_json(root / PLACEMENT_FILE)
        except UserError:
            placed = placement_record()
        continued = [*placed.get("continued_by", []), placement_record()]
        write_json_atomic(root / PLACEMENT_FILE, {**placed, "continued_by": continued})
        _, summary = resume_run(root, console, allow_mismatch)
    else:
        runner = Runner(prepare_run(plan, console, allow_mismatch), study_root, console)
        runner.on_created = lambda path: write_json_atomic(path / PLACEMENT_FILE, placement_record())
        _, summary = runner.run(run_root=root)
    return 0 if summary.arms and all(arm.status == "ok" for arm in summary.arms) else 3
