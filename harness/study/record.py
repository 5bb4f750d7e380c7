"""A study's directory and its ``study.json``.

Layout (``results/<regime-name>/study-<id>/``)::

    study.json         schema_version, the study regime as written (with its sweep), the axes, each
                       point's id, axis values, fingerprint and run directory, the arm families
    points/<id>/       each point: an ordinary run directory (regime.json, arms/, summary.json)
    analysis.md        the recommendation, break-even points, best K and flips, for design docs
                       (derived; ``bench show STUDY_DIR`` re-derives it)

Points' states are read from their run directories, never stored twice.

Schema history (``schema_version``):
    1 - first version.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from harness.errors import UserError
from harness.results.files import RunDir, create_exclusive, new_run_id, read_json, write_json_atomic
from harness.results.records import ResultModel

STUDY_FILE = "study.json"


class StudyPointRecord(ResultModel):
    id: str
    axes: list[tuple[str, Any]]  # (dotted path, value) of every regime-level axis
    fingerprint: str  # the concrete regime's
    run_dir: str  # relative to the study directory


class StudyRecord(ResultModel):
    schema_version: Literal[1] = 1
    name: str
    source_path: str  # the study regime file
    regime: dict[str, Any]  # the study regime as written, sweep included (resume re-expands it)
    regime_axes: dict[str, list[Any]]
    arm_axes: dict[str, dict[str, list[Any]]]
    families: dict[str, str]  # expanded arm name -> the arm it came from
    points: list[StudyPointRecord]


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
        return RunDir(self.root / point.run_dir)

    def write(self, record: StudyRecord) -> None:
        write_json_atomic(self.record_path, record.model_dump(mode="json"))

    def read(self) -> StudyRecord:
        data = read_json(self.record_path)
        version = data.get("schema_version") if isinstance(data, dict) else None
        if version != 1:
            raise UserError(
                f"{self.record_path}: schema_version {version!r} is not supported (this harness reads 1)"
            )
        try:
            return StudyRecord.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            raise UserError(
                f"{self.record_path}: {'.'.join(map(str, first['loc']))}: {first['msg']}"
            ) from None


def is_study_dir(path: Path) -> bool:
    return (path / STUDY_FILE).is_file()
