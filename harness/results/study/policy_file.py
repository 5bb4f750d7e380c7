"""A study's ``policy.json`` (and ``policy.yaml``, the same document for people): the speculation
policy ``harness.derive.study.policy`` derived, with the exact engine configuration that runs it.

Written beside ``study.json`` when a study ends and by ``bench show STUDY``; read back by an arm's
``k_schedule: {from: STUDY_DIR}`` (``resolve_schedules`` below). ``schema_version`` is this
file's own; a file of another version is refused, never half-read.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import ValidationError

from harness.config.arms import Arm, KScheduleSource
from harness.config.regime import Regime
from harness.core.errors import UserError
from harness.results.files import read_json
from harness.results.records import ResultModel

POLICY_JSON = "policy.json"
POLICY_YAML = "policy.yaml"


class PolicyLevel(ResultModel):
    """One measured load level: the K run there and why."""

    concurrency: int
    k: int  # 0: drafting off
    arm: str | None  # the study's arm with that K
    decided: bool
    why: str
    speedup: float | None = None
    low: float | None = None
    high: float | None = None


class PolicyBoundary(ResultModel):
    last: int  # the last batch size of the lower range
    between: tuple[int, int]
    how: Literal["break-even", "interpolated"]
    break_even: float | None = None


class PolicySchedule(ResultModel):
    point: str
    axes: list[tuple[str, Any]]
    family: str
    method: str
    workload: str  # a workload's name, or "mix"
    weights: dict[str, float] = {}  # the mix's, normalised
    k_max: int  # the largest K of the schedule (the arm's num_speculative_tokens)
    ranges: list[tuple[int, int, int]]  # (first batch size, last, K), inclusive
    levels: list[PolicyLevel]
    boundaries: list[PolicyBoundary]
    undecided: list[int] = []  # levels where the data did not decide, run with drafting off
    # the engine's own configuration: vLLM's --speculative-config, SGLang's adaptive config file's
    # content; None where the engine cannot run this schedule (said in ``note``)
    engine: str
    speculative_config: dict[str, Any] | None = None
    adaptive_config: dict[str, Any] | None = None
    adaptive_config_file: str | None = None  # beside policy.json: --speculative-adaptive-config FILE
    note: str | None = None


class PolicyFile(ResultModel):
    schema_version: Literal[1] = 1
    study: str  # the study directory's name
    regime: str  # the study regime's name
    rule: str  # how the K per level and the boundaries were chosen, in words
    schedules: list[PolicySchedule]

    def pick(self, family: str | None, workload: str | None, point: str | None) -> PolicySchedule:
        """The schedule a ``k_schedule: {from: ...}`` names; each left out must be unambiguous."""
        found = [
            s
            for s in self.schedules
            if (family is None or s.family == family) and (point is None or s.point == point)
        ]
        if workload is None:  # the mix, when there is one: the traffic the server will see
            mixes = [s for s in found if s.workload == "mix"]
            found = mixes or found
        else:
            found = [s for s in found if s.workload == workload]
        if len(found) == 1:
            return found[0]
        choices = sorted({f"{s.point}/{s.family}/{s.workload}" for s in self.schedules})
        what = "no schedule" if not found else f"{len(found)} schedules"
        raise UserError(
            f"{what} for family={family or 'any'}, workload={workload or 'the mix or the only one'}, "
            f"point={point or 'any'}; the policy has (point/family/workload): {', '.join(choices) or 'none'}"
        )


def read_policy(study_dir: Path) -> PolicyFile:
    path = Path(study_dir) / POLICY_JSON
    if not path.is_file() and Path(study_dir).is_dir() and not (Path(study_dir) / "study.json").is_file():
        raise UserError(
            f"{study_dir}: no study with a {POLICY_JSON} here (a regime's results folder holds its studies: "
            "run the study regime first)"
        )
    if not path.is_file():
        raise UserError(f"{path}: no policy here (bench show {study_dir} derives it from a finished study)")
    try:
        return PolicyFile.model_validate(read_json(path))
    except ValidationError as exc:
        first = exc.errors()[0]
        raise UserError(f"{path}: {'.'.join(map(str, first['loc']))}: {first['msg']}") from None


def newest_policy(path: Path) -> Path:
    """``path`` itself when it holds a policy, else its newest ``study-*`` that does (a regime's results
    folder: the policy of the latest study of that regime); a folder with neither is returned as is."""
    if (path / POLICY_JSON).is_file() or not path.is_dir():
        return path
    studies = sorted(p for p in path.glob("study-*") if (p / POLICY_JSON).is_file())
    return studies[-1] if studies else path


def creating_study(folder: Path, regime_path: Path | None) -> Path | None:
    """The study regime beside ``regime_path`` whose runs write ``folder``: a regime's studies go to
    results/<its name>/study-<id>, so a regime with a sweep: named as ``folder`` is (None: none, or
    ``folder`` names one study, which no later run creates)."""
    if regime_path is None or folder.name.startswith("study-"):
        return None
    for candidate in sorted(Path(regime_path).parent.glob("*.yaml")):
        try:
            data = yaml.safe_load(candidate.read_text())
        except (OSError, yaml.YAMLError):
            continue
        if isinstance(data, dict) and data.get("name") == folder.name and data.get("sweep") is not None:
            return candidate
    return None


def _not_yet(folder: Path, study: Path) -> tuple[str, str]:
    """Where a policy will be and the command that writes it: ``bench run STUDY`` (with the
    --results-dir that puts it there, unless the default from here does)."""
    shown = Path(os.path.normpath(folder))
    command = f"bench run {study}"
    if Path("results").resolve() != shown.parent.resolve():
        command += f" --results-dir {shown.parent}"
    return f"{shown}/study-<id>/{POLICY_JSON}", command


def resolve_schedules(regime: Regime, regime_path: Path | None, pending: list[str] | None = None) -> Regime:
    """The regime with every ``k_schedule: {from: STUDY_DIR}`` replaced by that study's schedule
    (and ``k_schedule_source`` saying which): what runs, is fingerprinted and is stored.

    A ``from:`` naming the results folder of a study regime beside this one (``creating_study``)
    that holds no policy yet is refused, naming the run that writes it; with ``pending`` (`bench
    validate`) the arm is left unresolved instead, and said in ``pending``."""
    # Why a shipped regime may name a policy a run will create, rather than the policy being shipped
    # (issue 62): a policy is what one study measured on one machine (two sessions on this project's
    # EPYC wrote an all-off one and a K=2-up-to-batch-2 one: docs/measured.md), so one checked in
    # would be verified on every other machine as if it were theirs, and would be read before the
    # study the regime asks for had run. The file is checked everywhere as it is; only `bench run`
    # needs the policy, and it names the run that writes it.
    arms = list(regime.arms)
    changed = False
    for index, arm in enumerate(arms):
        source = arm.k_schedule
        if not isinstance(source, KScheduleSource):
            continue
        where = f"{regime_path or regime.name}: arms[{index}].k_schedule"
        study_dir = Path(source.source)
        if not study_dir.is_absolute() and regime_path is not None:
            study_dir = Path(regime_path).parent / study_dir
        study_dir = newest_policy(study_dir)
        study = None if (study_dir / POLICY_JSON).is_file() else creating_study(study_dir, regime_path)
        if study is not None:
            policy, command = _not_yet(study_dir, study)
            if pending is None:
                raise UserError(
                    f"{where}: no {policy} yet: run `{command}` first (the study writes it when it ends)"
                )
            pending.append(
                f"arms[{index}].k_schedule: from {policy}: not there yet: `{command}` creates it; bench run "
                "refuses until then"
            )
            continue
        try:
            found = read_policy(study_dir)
            families = {s.family for s in found.schedules if s.method == arm.method}
            family = source.family or (families.pop() if len(families) == 1 else None)
            schedule = found.pick(family, source.workload, source.point)
        except UserError as exc:
            raise UserError(f"{where}: {exc}") from None
        if schedule.method != arm.method:
            raise UserError(
                f"{where}: the schedule is for method '{schedule.method}' ({schedule.family}), the arm is "
                f"'{arm.method}'"
            )
        if not schedule.k_max:
            raise UserError(
                f"{where}: {study_dir / POLICY_JSON} runs no speculation at any batch size "
                f"({schedule.point}/{schedule.family}/{schedule.workload}: "
                f"{', '.join(f'{lv.concurrency}: {lv.why}' for lv in schedule.levels[:2])}"
                f"{', ...' if len(schedule.levels) > 2 else ''}): nothing to schedule"
            )
        data = arm.model_dump(mode="json", by_alias=True)
        data["k_schedule"] = [list(r) for r in schedule.ranges]
        data["k_schedule_source"] = (
            f"{study_dir / POLICY_JSON}: {schedule.point}/{schedule.family}/{schedule.workload}"
        )
        try:
            arms[index] = Arm.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(map(str, first["loc"]))
            raise UserError(f"{where}: from {study_dir / POLICY_JSON}: {loc}: {first['msg']}") from None
        changed = True
    return regime.model_copy(update={"arms": arms}) if changed else regime
