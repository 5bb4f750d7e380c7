"""The study page and tables on a stored study made of the recorded CPU run (two points that
differ in one axis): deterministic, self-contained, every point linked, and opened in headless
Chromium."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness.cli import main
from harness.commands.report import study_page as render_study
from harness.derive.study.collect import load_study
from harness.present.study.tables import markdown
from tests.browser import chromium, measured_page, needs_browser
from tests.views import write_study

GOLDEN = Path(__file__).parent / "fixtures" / "run_v1"


@pytest.fixture
def study(tmp_path: Path) -> Path:
    """Two copies of the golden run as the points of a study over engine.enforce_eager."""
    points = {"p0": GOLDEN, "p1": GOLDEN}
    root = write_study(tmp_path / "study-x", points, {"baseline": "baseline", "ngram_k4": "ngram_k4"})
    return root


def test_study_tables_from_stored_points(study: Path, capsys: pytest.CaptureFixture[str]) -> None:
    loaded = load_study(study)
    assert loaded.missing == [] and len(loaded.recommendations()) == 2 * 4  # points x (workload, level)
    assert loaded.flips() == []  # the same measurements on both sides: nothing flips
    text = markdown(loaded)
    assert "| code_humaneval | 1 |" in text and "## Break-even concurrency" in text
    # per point, what moves along the axis: each cell's prompt tokens, tau, tok/fwd, TPOT and speedup
    per_point = text[text.index("## Per point") :].split("\n\n")[2].splitlines()
    cell = next(c for c in loaded.summaries["p1"].cells if c.arm == "ngram_k4" and c.concurrency == 2)
    row = f"| p1: engine.enforce_eager=False | {cell.workload} | @2 | ngram_k4 |"
    (line,) = [r for r in per_point if r.startswith(row)]
    assert f"| {cell.tau:.2f} | {cell.tokens_per_forward:.2f} | {cell.tpot_ms_p50:.1f} |" in line
    assert f"{cell.speedup:.2f}x" in line
    assert len(per_point) == 2 + 2 * 8  # header, rule, points x arms x (workload, level)
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
    for window in (800, 1280, 1400):  # the recommendation (the study's verdict) fits whole
        found = measured_page(page.read_text(), tmp_path, window, ("table.recommendation",))
        assert found["scroll-width"] <= window and found["tables"] == 1 and found["over"] == 0, (
            window,
            found,
        )
    shot = tmp_path / "study.png"
    taken = chromium(f"--screenshot={shot}", "--window-size=1200,2000", page.as_uri())
    assert taken.returncode == 0 and shot.stat().st_size > 20_000


def test_observations_carry_each_rounds_speedup_and_the_stored_interval(study: Path) -> None:
    from harness.derive.study.collect import point_observations, round_speedups

    loaded = load_study(study)
    summary = loaded.summaries["p0"]
    base = next(c for c in summary.cells if c.arm == summary.baseline_arm)
    arm = next(c for c in summary.cells if c.arm != summary.baseline_arm and c.workload == base.workload)
    template = arm.per_repeat[0]

    def starts(*tok_s: tuple[int, float]) -> list:
        return [template.model_copy(update={"server_start": s, "output_tok_s": v}) for s, v in tok_s]

    # the arm's start-up 0 averages (12 + 14) / 2 = 13 against the baseline's 10; start-up 1 is
    # 9 / 12; the baseline's start-up 2 has no arm partner and is left out
    fast = arm.model_copy(update={"per_repeat": starts((0, 12.0), (0, 14.0), (1, 9.0))})
    reference = base.model_copy(update={"per_repeat": starts((0, 10.0), (1, 12.0), (2, 11.0))})
    assert round_speedups(fast, reference) == ((0, pytest.approx(1.3)), (1, pytest.approx(0.75)))
    assert round_speedups(fast, None) == ()
    o = next(o for o in point_observations(loaded.point("p0"), summary, {}) if o.arm == arm.arm)
    stored = next(
        c
        for c in summary.cells
        if c.arm == o.arm and (c.workload, c.concurrency) == (o.workload, o.concurrency)
    )
    assert (o.speedup, o.stored) == (stored.speedup, stored.estimate)
    # the golden run has one start-up per arm: its one round's speedup is the model's point
    assert len(o.round_speedups) == 1 and o.round_speedups[0][1] == pytest.approx(o.speedup)
