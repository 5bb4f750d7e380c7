"""A study's directory and its ``study.json``.

Layout (``results/<regime-name>/study-<id>/``)::

    study.json         schema_version, the study regime as written (with its sweep), the axes, each
                       point's id, axis values, fingerprint and run directory, the arm families, the
                       executor, and each point's jobs (attempts: job id, state, the scheduler's reason)
    points/<id>/       each point: an ordinary run directory (regime.json, arms/, summary.json, and
                       placement.json: where it ran)
    points/<id>.attempt-<n>/  a later attempt at a point whose job failed, started where it could
                       not continue the earlier one (another node, other GPUs); earlier ones are kept
    logs/<id>.<n>.log  each job's output
    analysis.md        the recommendation, break-even points, best K and flips, for design docs
                       (derived; ``bench show STUDY_DIR`` re-derives it)

What was measured is read from the points' run directories, never stored twice; study.json holds
what only the scheduler knows (job ids, how a job ended). Only the ``bench run`` that owns the
study writes study.json; jobs write into their own run directories.

``schema_version`` is numbered apart from a run's; older files are read through
``harness.results.migrations.study``, whose steps are its history.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import ValidationError

from harness.core.errors import UserError
from harness.results import migrations
from harness.results.files import RunDir, create_exclusive, new_run_id, read_json, write_json_atomic
from harness.results.migrations import study as study_steps
from harness.results.records import ResultModel

if TYPE_CHECKING:
    from harness.core.overrides import Override

STUDY_FILE = "study.json"


ExecutorName = Literal["local", "slurm", "ray"]
JobState = Literal["submitted", "finished", "failed", "interrupted"]


class PointAttempt(ResultModel):
    """One job that ran (or runs) a point."""

    attempt: int  # 1, 2, ...
    run_dir: str  # relative to the study directory; a continued attempt shares its predecessor's
    executor: ExecutorName
    job_id: str | None = None  # local:<host>:<pid>, the Slurm job id, the Ray task id
    devices: list[str] = []  # CUDA_VISIBLE_DEVICES the executor planned (local); placement.json has the rest
    state: JobState = "submitted"
    reason: str | None = None  # why the job failed, in the scheduler's words
    log: str  # relative to the study directory
    log_tail: str | None = None  # the last lines of a failed job's output
    submitted_at: str
    ended_at: str | None = None


class ExecutorOptions(ResultModel):
    """How the study's jobs are run; ``bench run --resume`` uses it unless told otherwise."""

    name: ExecutorName = "local"
    gpus: int | None = None  # the node's GPUs (local; a started Ray instance)
    gpus_per_point: int | None = None  # None: each point's tensor_parallel_size (CPU points: none)
    partition: str | None = None  # slurm
    account: str | None = None  # slurm
    time_limit_min: int | None = None  # None: derived per point
    slurm_cluster: Literal["slurm", "local", "debug"] = "slurm"  # submitit's local/debug: tests, dry runs
    ray_address: str | None = None  # None: a local Ray instance started by the command


class StudyPointRecord(ResultModel):
    id: str
    axes: list[tuple[str, Any]]  # (dotted path, value) of every regime-level axis
    fingerprint: str  # the concrete regime's
    run_dir: str  # relative to the study directory: the first attempt's
    attempts: list[PointAttempt] = []

    def current_run_dir(self) -> str:
        """Where the point's newest attempt writes: its results, once it has some."""
        return self.attempts[-1].run_dir if self.attempts else self.run_dir


class StudyRecord(ResultModel):
    schema_version: Literal[2] = 2  # migrations.study's current version
    name: str
    source_path: str  # the study regime file
    regime: dict[str, Any]  # the study regime as written, sweep included (resume re-expands it)
    regime_axes: dict[str, list[Any]]
    arm_axes: dict[str, dict[str, list[Any]]]
    families: dict[str, str]  # expanded arm name -> the arm it came from
    points: list[StudyPointRecord]
    executor: ExecutorOptions = ExecutorOptions()
    # what the command line set in the study file (already in "regime"), each with its flag
    overrides: list[dict[str, Any]] = []

    def set_overrides(self) -> list[Override]:
        from harness.core.overrides import Override

        return [Override.model_validate(override) for override in self.overrides]


class StudyDir:
    def __init__(self, root: Path):
        self.root = root

    @classmethod
    def create(cls, results_dir: Path, regime_name: str) -> StudyDir:
        return cls(create_exclusive(results_dir / regime_name / f"study-{new_run_id()}"))

    @property
    def record_path(self) -> Path:
        return self.root / STUDY_FILE

    def point_run(self, point: StudyPointRecord) -> RunDir:
        return RunDir(self.root / point.current_run_dir())

    def write(self, record: StudyRecord) -> None:
        write_json_atomic(self.record_path, record.model_dump(mode="json"))

    def read(self) -> StudyRecord:
        data = migrations.upgrade(read_json(self.record_path), study_steps.MIGRATIONS, str(self.record_path))
        try:
            return StudyRecord.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            raise UserError(
                f"{self.record_path}: {'.'.join(map(str, first['loc']))}: {first['msg']}"
            ) from None


def is_study_dir(path: Path) -> bool:
    return (path / STUDY_FILE).is_file()
