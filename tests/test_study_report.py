"""The study page and tables on a stored study made of the recorded CPU run (two points that
differ in one axis): deterministic, self-contained, every point linked, and opened in headless
Chromium."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness.cli import main
from harness.regime import Regime
from harness.results.files import read_json
from harness.study.collect import load_study
from harness.study.record import StudyDir, StudyPointRecord, StudyRecord
from harness.study.report import render_study
from harness.study.tables import markdown
from tests.browser import chromium, needs_browser

GOLDEN = Path(__file__).parent / "fixtures" / "run_v1"


@pytest.fixture
def study(tmp_path: Path) -> Path:
    """Two copies of the golden run as the points of a study over engine.enforce_eager."""
    root = tmp_path / "study-x"
    for point in ("p0", "p1"):
        shutil.copytree(GOLDEN, root / "points" / point)
    regime = Regime.model_validate(read_json(GOLDEN / "regime.json")["regime"]).model_dump(mode="json")
    record = StudyRecord(
        name="golden_study",
        source_path=str(GOLDEN / "regime.json"),
        regime=regime,
        regime_axes={"engine.enforce_eager": [True, False]},
        arm_axes={},
        families={"baseline": "baseline", "ngram_k4": "ngram_k4"},
        points=[
            StudyPointRecord(id=p, axes=[("engine.enforce_eager", v)], fingerprint="f", run_dir=f"points/{p}")
            for p, v in (("p0", True), ("p1", False))
        ],
    )
    StudyDir(root).write(record)
    return root


def test_study_tables_from_stored_points(study: Path, capsys: pytest.CaptureFixture[str]) -> None:
    loaded = load_study(study)
    assert loaded.missing == [] and len(loaded.recommendations()) == 2 * 4  # points x (workload, level)
    assert loaded.flips() == []  # the same measurements on both sides: nothing flips
    text = markdown(loaded)
    assert "| code_humaneval | 1 |" in text and "## Break-even concurrency" in text
    assert main(["show", str(study)]) == 0
    out = capsys.readouterr().out
    assert "recommendation" in out and "flips: none" in out and (study / "analysis.md").read_text() == text
    cells = loaded.cells()
    assert list(cells.columns[:3]) == ["point", "engine.enforce_eager", "family"] and len(cells) == 16


def test_study_page_is_deterministic_and_links_every_point(study: Path, tmp_path: Path) -> None:
    first = render_study(study, tmp_path / "a").read_bytes()
    second = render_study(study, tmp_path / "b").read_bytes()
    assert first == second and b"http://" not in first and b"https://" not in first
    assert b'href="p0.html"' in first and b'href="p1.html"' in first
    assert (tmp_path / "a" / "p1.html").read_bytes() == (tmp_path / "b" / "p1.html").read_bytes()


def test_a_study_without_results_yet_says_so(study: Path) -> None:
    shutil.rmtree(study / "points" / "p1")
    loaded = load_study(study)
    assert loaded.missing == ["p1"] and "Points without results yet: p1" in markdown(loaded)


@needs_browser
def test_study_page_in_headless_chromium(study: Path, tmp_path: Path) -> None:
    page = render_study(study, tmp_path / "page")
    dom = chromium("--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert 'class="recommendation"' in dom.stdout and 'class="break-even"' in dom.stdout
    assert dom.stdout.count("<img ") >= 2 and "Uncaught" not in dom.stderr
    shot = tmp_path / "study.png"
    taken = chromium(f"--screenshot={shot}", "--window-size=1200,2000", page.as_uri())
    assert taken.returncode == 0 and shot.stat().st_size > 20_000
