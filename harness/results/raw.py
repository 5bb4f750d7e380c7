"""A run directory's raw files, read once into typed records: the input of every derived view
(the summary, the gates, the report's figures, the pandas frames)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from harness.config.regime import Regime
from harness.core.errors import UserError
from harness.results.calibration import CALIBRATION_FILE, Calibration
from harness.results.files import (
    UNCHECKED,
    RunDir,
    UnreadLines,
    check_lines,
    read_json,
    read_records,
    read_run_record,
    sums_path,
)
from harness.results.records import (
    ArmStatus,
    RampWindowRecord,
    RequestRecord,
    RunRecord,
    RunTiming,
    WindowRecord,
)
from harness.results.workload_pass import WORKLOAD_PASS_FILE, WorkloadPassRecord


@dataclass
class RawArm:
    name: str
    status: ArmStatus
    samples: list[RequestRecord]  # measured requests, in the order they completed
    windows: list[WindowRecord]  # measured windows, in the order they ran
    noise_floor: list[RequestRecord]  # the baseline's second pass (empty for other arms)
    distribution: list[RequestRecord] = field(default_factory=list)  # temperature > 0: seeded samples
    ramp: list[RequestRecord] = field(default_factory=list)  # load.ramp: the ramp windows' requests
    ramp_windows: list[RampWindowRecord] = field(default_factory=list)  # load.ramp: one per window
    # the baseline's pass over every prompt of each workload's pool (verdict.covariate); [] elsewhere
    workload_pass: list[RequestRecord] = field(default_factory=list)
    # the baseline's targeted logprob pass (margins.jsonl): only the prompts an output diverged on,
    # asked on its later start-ups; [] elsewhere, and in runs that made the full pass (noise_floor)
    margins: list[RequestRecord] = field(default_factory=list)


@dataclass
class RawRun:
    run: RunDir
    record: RunRecord  # regime.json: the resolved regime, its fingerprint, workloads, drafters
    regime: Regime
    environment: dict[str, Any]
    arms: dict[str, RawArm]  # in the regime's arm order
    unread: UnreadLines = field(default_factory=UnreadLines)
    timing: RunTiming | None = None  # timing.json; None for runs made before it was recorded
    calibration: Calibration | None = None  # calibration.json: the machine calibration the run used
    # workload_pass.json: what the workload pass did (measured, cached, skipped); None: a run before it
    workload_pass_record: WorkloadPassRecord | None = None

    @property
    def baseline_arm(self) -> str:
        return self.regime.baseline_arm.name


def _validated(model: Any, path: Path) -> Any:
    """A run's JSON record as ``model``: one that is not such a record is a clear error naming its
    file and field, never a traceback (a hand-edited or foreign ``timing.json``)."""
    try:
        return model.model_validate(read_json(path))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise UserError(f"{path}: {where}: {first['msg']}") from None


def read_raw(run_dir: Path | RunDir) -> RawRun:
    """Every raw file of a run, validated; a directory without ``regime.json`` is refused."""
    run = run_dir if isinstance(run_dir, RunDir) else RunDir(Path(run_dir))
    if not (run.root / "regime.json").is_file():
        raise UserError(f"{run.root}: not a run directory (no regime.json)")
    record = read_run_record(run)
    try:
        regime = Regime.model_validate(record.regime)
    except ValidationError as exc:
        raise UserError(f"{run.root / 'regime.json'}: regime: {exc.errors()[0]['msg']}") from None
    environment_path = run.root / "environment.json"
    environment = read_json(environment_path) if environment_path.exists() else {}
    unread = UnreadLines()
    arms = {
        arm.name: RawArm(
            name=arm.name,
            status=run.read_status(arm.name),
            samples=read_records(run.samples(arm.name), RequestRecord, unread),
            windows=read_records(run.windows(arm.name), WindowRecord, unread),
            noise_floor=read_records(run.noise_floor(arm.name), RequestRecord, unread),
            distribution=read_records(run.distribution(arm.name), RequestRecord, unread),
            ramp=read_records(run.ramp(arm.name), RequestRecord, unread),
            ramp_windows=read_records(run.ramp_windows(arm.name), RampWindowRecord, unread),
            workload_pass=read_records(run.workload_pass(arm.name), RequestRecord, unread),
            margins=read_records(run.margins(arm.name), RequestRecord, unread),
        )
        for arm in regime.arms
    }
    damaged = {name: _leave_out_damaged(run, arm, unread) for name, arm in arms.items()}
    for name, arm in arms.items():  # a finished arm wrote both: one gone is said, not shown as 0/0
        if arm.status.status == "ok" and "samples.jsonl" not in damaged[name]:
            for path, rows in ((run.samples(name), arm.samples), (run.windows(name), arm.windows)):
                if not rows:
                    unread.missing(path)
    for aside in sorted((run.root / "arms").glob("*.attempt-*")):
        for path, problems in _damage(aside, run.read_status_at(aside)):
            unread.damaged(path, problems, "set aside, its start-ups measured again")
    timing_path = run.root / "timing.json"
    timing = _validated(RunTiming, timing_path) if timing_path.exists() else None
    calibration_path = run.root / CALIBRATION_FILE
    calibration = _validated(Calibration, calibration_path) if calibration_path.exists() else None
    pass_path = run.root / WORKLOAD_PASS_FILE
    pass_record = _validated(WorkloadPassRecord, pass_path) if pass_path.exists() else None
    return RawRun(
        run=run,
        record=record,
        regime=regime,
        environment=environment,
        arms=arms,
        unread=unread,
        timing=timing,
        calibration=calibration,
        workload_pass_record=pass_record,
    )


# The files read together: a window's line and its requests' lines (a ramp's likewise) are summed
# together, so damage to either leaves out both.
FAMILIES = (
    (("samples.jsonl", "windows.jsonl"), ("samples", "windows"), "windows and requests"),
    (("ramp.jsonl", "ramp_windows.jsonl"), ("ramp", "ramp_windows"), "ramp"),
    (("noise_floor.jsonl",), ("noise_floor",), "second pass (the noise floor)"),
    (("distribution.jsonl",), ("distribution",), "distribution samples"),
    (("workload_pass.jsonl",), ("workload_pass",), "workload pass (the covariate's workload mean)"),
    (("margins.jsonl",), ("margins",), "margins (logprobs of the prompts that diverged)"),
)
CHECKED_FILES = tuple(name for names, _, _ in FAMILIES for name in names)


def _damage(arm_dir: Path, status: ArmStatus) -> list[tuple[Path, list[str]]]:
    """Each raw file of an arm's directory with lines missing, edited, added or (a finished arm's)
    torn since written (``check_lines``)."""
    found = []
    for name in CHECKED_FILES:
        path = arm_dir / name
        if problems := check_lines(path).problems(finished=status.status == "ok"):
            found.append((path, problems))
    return found


def _leave_out_damaged(run: RunDir, arm: RawArm, unread: UnreadLines) -> set[str]:
    """Checks the arm's raw files against their sums; a damaged file and the files summed with it are
    left out of every figure (the arm reads as if it had none), each one named with its lines.
    Returns the names of the files left out."""
    arm_dir = run.arm_dir(arm.name)
    damage = dict(_damage(arm_dir, arm.status))
    left_out: set[str] = set()
    for names, fields, what in FAMILIES:
        paths = [arm_dir / name for name in names]
        if not any(path in damage for path in paths):
            continue
        for path in paths:
            if path in damage:
                unread.damaged(path, damage[path], f"arm {arm.name}'s {what} left out of every figure")
        for field_name in fields:
            setattr(arm, field_name, [])
        left_out.update(names)
    return left_out


def raw_damage(run: RunDir) -> list[str]:
    """Every damaged raw file of the run's arms, as a line naming it and its lines: what a
    continuation refuses to build on (``bench run --resume``)."""
    lines = []
    for arm_dir in sorted(p for p in (run.root / "arms").glob("*") if ".attempt-" not in p.name):
        for path, problems in _damage(arm_dir, run.read_status_at(arm_dir)):
            lines.append(f"{path}: {'; '.join(problems)}")
    return lines


def damaged_arms(run: RunDir) -> list[str]:
    """The arms with a damaged raw file (``raw_damage``)."""
    return sorted(
        p.name
        for p in (run.root / "arms").glob("*")
        if ".attempt-" not in p.name and p.is_dir() and _damage(p, run.read_status_at(p))
    )


def unchecked_note(run_dir: Path) -> str | None:
    """One line for a run whose raw lines were (some of them) written before lines were counted (a
    run of an older harness, or continued from one): they load as they are, unchecked. Reads only
    the first line of each sums file."""
    unchecked = []
    for arm_dir in sorted(p for p in (run_dir / "arms").glob("*") if ".attempt-" not in p.name):
        for path in (arm_dir / name for name in CHECKED_FILES):
            sums = sums_path(path)
            if not path.is_file() or path.stat().st_size == 0:
                continue
            if not sums.is_file():
                unchecked.append(path)
                continue
            with sums.open(encoding="utf-8", errors="replace") as handle:
                if handle.readline().startswith(UNCHECKED):
                    unchecked.append(path)
    if not unchecked:
        return None
    count = len(unchecked)
    return (
        f"{run_dir}: {count} raw file{'s' if count != 1 else ''} written before the harness counted "
        "their lines: a line missing or edited there cannot be named"
    )
