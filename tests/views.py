"""The pages of stored runs as the commands render them (each run analysed once, then rendered)."""

from __future__ import annotations

from pathlib import Path

from harness.derive.analysis import load_analysis
from harness.present.report import render_comparison as _compare
from harness.present.report import render_report as _render


def render_report(run_dir: Path) -> str:
    return _render(load_analysis(run_dir))


def render_comparison(run_a: Path, run_b: Path, force: bool) -> str:
    from harness.derive.gates.compare import compare_runs

    return _compare(load_analysis(run_a), load_analysis(run_b), force, compare_runs(run_a, run_b))


def write_study(root: Path, points: dict[str, Path], families: dict[str, str]) -> Path:
    """A study over ``engine.enforce_eager`` whose points are copies of stored runs (``p0``: True,
    ``p1``: False, ...), as ``bench run`` leaves one."""
    import shutil

    from harness.config.regime import Regime
    from harness.results.files import read_json
    from harness.results.study.record import StudyDir, StudyPointRecord, StudyRecord

    for point, run in points.items():
        shutil.copytree(run, root / "points" / point)
    source = next(iter(points.values())) / "regime.json"
    regime = Regime.model_validate(read_json(source)["regime"]).model_dump(mode="json")
    record = StudyRecord(
        name=f"{root.name}_study",
        source_path=str(source),
        regime=regime,
        regime_axes={"engine.enforce_eager": [True, False]},
        arm_axes={},
        families=families,
        points=[
            StudyPointRecord(
                id=p, axes=[("engine.enforce_eager", i == 0)], fingerprint="f", run_dir=f"points/{p}"
            )
            for i, p in enumerate(points)
        ],
    )
    StudyDir(root).write(record)
    return root
