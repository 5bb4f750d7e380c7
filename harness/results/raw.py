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
from harness.results.files import RunDir, UnreadLines, read_json, read_records, read_run_record
from harness.results.records import (
    ArmStatus,
    RampWindowRecord,
    RequestRecord,
    RunRecord,
    RunTiming,
    WindowRecord,
)


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
        )
        for arm in regime.arms
    }
    for name, arm in arms.items():  # a finished arm wrote both: one gone is said, not shown as 0/0
        if arm.status.status == "ok":
            for path, rows in ((run.samples(name), arm.samples), (run.windows(name), arm.windows)):
                if not rows:
                    unread.missing(path)
    timing_path = run.root / "timing.json"
    timing = _validated(RunTiming, timing_path) if timing_path.exists() else None
    calibration_path = run.root / CALIBRATION_FILE
    calibration = _validated(Calibration, calibration_path) if calibration_path.exists() else None
    return RawRun(
        run=run,
        record=record,
        regime=regime,
        environment=environment,
        arms=arms,
        unread=unread,
        timing=timing,
        calibration=calibration,
    )
