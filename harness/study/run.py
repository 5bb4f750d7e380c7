"""Run a study: every point is an ordinary run (``harness.runner``) into the study directory,
one after the other; a finished point is never run again, an interrupted one resumes."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from harness.errors import UserError
from harness.plan import Plan, plan_regime
from harness.regime import Regime, load_regime
from harness.results.files import RunDir, write_text_atomic
from harness.runner import Runner, resume_run
from harness.study.collect import StudyResults, load_study
from harness.study.record import StudyDir, StudyPointRecord, StudyRecord
from harness.study.sweep import StudyPlan, expand
from harness.study.tables import markdown

ANALYSIS_FILE = "analysis.md"


def plan_study(regime_path: Path, regime: Regime | None = None) -> tuple[StudyPlan, list[Plan]]:
    """Expand and validate every point (workloads, local paths) before anything starts."""
    regime = regime if regime is not None else load_regime(regime_path)
    study = expand(regime, regime_path)
    return study, [plan_regime(regime_path, point.regime) for point in study.points]


def study_record(study: StudyPlan) -> StudyRecord:
    sweep = study.regime.sweep
    return StudyRecord(
        name=study.regime.name,
        source_path=str(study.source),
        regime=study.regime.model_dump(mode="json"),
        regime_axes=dict(sweep.regime) if sweep else {},
        arm_axes=dict(sweep.arms) if sweep else {},
        families=study.families,
        points=[
            StudyPointRecord(
                id=p.id, axes=list(p.axes), fingerprint=p.regime.fingerprint(), run_dir=f"points/{p.id}"
            )
            for p in study.points
        ],
    )


def run_study(
    regime_path: Path,
    results_dir: Path,
    console: Console,
    allow_mismatch: bool = False,
    on_created: Callable[[Path], None] | None = None,
) -> tuple[StudyDir, StudyResults]:
    """A new study; ``on_created`` hears the study directory the moment it exists."""
    study, plans = plan_study(regime_path)
    directory = StudyDir.create(results_dir, study.regime.name)
    if on_created is not None:
        on_created(directory.root)
    record = study_record(study)
    directory.write(record)
    console.print(
        f"Study directory: [bold]{directory.root}[/] ({len(study.points)} points, "
        f"{study.server_starts()} server start-ups)"
    )
    return _run_points(directory, record, plans, console, allow_mismatch)


def resume_study(
    study_dir: Path, console: Console, allow_mismatch: bool = False
) -> tuple[StudyDir, StudyResults]:
    """Continue a study with the regime stored in it: finished points are kept as they are."""
    directory = StudyDir(study_dir)
    record = directory.read()
    study, plans = plan_study(Path(record.source_path), Regime.model_validate(record.regime))
    if [p.regime.fingerprint() for p in study.points] != [p.fingerprint for p in record.points]:
        raise UserError(
            f"{study_dir}: the study's points no longer expand to the regimes it started with "
            "(a different harness version?); start a new study instead"
        )
    console.print(f"Resuming study [bold]{directory.root}[/]")
    return _run_points(directory, record, plans, console, allow_mismatch)


def _complete(run: RunDir, plan: Plan) -> bool:
    return all(run.read_status(arm.name).status == "ok" for arm in plan.regime.arms)


def _set_aside_empty(root: Path) -> None:
    """A point directory created but never written (a crash right after mkdir) is moved aside."""
    attempt = 1
    while (target := root.with_name(f"{root.name}.attempt-{attempt}")).exists():
        attempt += 1
    os.replace(root, target)


def _run_points(
    directory: StudyDir, record: StudyRecord, plans: list[Plan], console: Console, allow_mismatch: bool
) -> tuple[StudyDir, StudyResults]:
    for index, (point, plan) in enumerate(zip(record.points, plans, strict=True), start=1):
        run = directory.point_run(point)
        label = ", ".join(f"{path}={value}" for path, value in point.axes) or "no regime axis"
        title = f"study point {index}/{len(record.points)}: {point.id} ({label})"
        if (run.root / "regime.json").is_file() and _complete(run, plan):
            console.rule(f"[bold]{title}: complete, kept")
            continue
        console.rule(f"[bold]{title}")
        if (run.root / "regime.json").is_file():
            resume_run(run.root, console, allow_mismatch)
            continue
        if run.root.exists():
            _set_aside_empty(run.root)
        Runner(plan, directory.root, console, allow_mismatch).run(run_root=run.root)
    results = load_study(directory.root)
    write_analysis(results)
    return directory, results


def write_analysis(results: StudyResults) -> None:
    """``analysis.md``: the study's tables as Markdown, for design docs."""
    write_text_atomic(results.root / ANALYSIS_FILE, markdown(results))
