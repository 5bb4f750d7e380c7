"""A study end to end on the REAL CPU engine (tests/regimes/cpu_study_e2e.yaml: 2 points x
baseline + ngram K=2 and K=4, eager mode): `bench validate` lists the points, `bench run` runs
them into one study directory and prints the analysis, `bench report` renders the study page,
and a resumed study never re-runs a finished point and gives the same tables. The study itself
is run once per session (conftest.py's ``study``: its point p1 killed and resumed, which the
executor tests read); the gate test gates a run against its p0."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from harness.derive.study.collect import load_study
from harness.present.study.tables import best_k_rows, break_even_rows, markdown, recommendation_rows
from tests.browser import CHROMIUM, chromium
from tests.conftest import STUDY_REGIME, bench

pytestmark = pytest.mark.engine


def test_validate_lists_the_points() -> None:
    out = bench("validate", str(STUDY_REGIME), timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "2 points" in out.stdout and "6 server start-ups" in out.stdout
    assert "p0: load.max_output_tokens=16" in out.stdout and "p1: load.max_output_tokens=12" in out.stdout
    assert "ngram_k2" in out.stdout and "ngram_k4" in out.stdout


def test_study_runs_every_point_and_prints_the_analysis(shared_study) -> None:
    proc, study_dir = shared_study["resumed"], shared_study["dir"]
    record = json.loads((study_dir / "study.json").read_text())
    assert [p["id"] for p in record["points"]] == ["p0", "p1"]
    assert record["families"] == {"baseline": "baseline", "ngram_k2": "ngram", "ngram_k4": "ngram"}
    for point in ("p0", "p1"):
        regime = json.loads((study_dir / "points" / point / "regime.json").read_text())["regime"]
        assert [a["name"] for a in regime["arms"]] == ["baseline", "ngram_k2", "ngram_k4"]
        assert regime["sweep"] is None
    assert "recommendation" in proc.stdout and "break-even" in proc.stdout and "best K" in proc.stdout
    loaded = load_study(study_dir)
    assert loaded.missing == [] and len(loaded.recommendations()) == 2 * 2  # points x levels
    cells = loaded.cells()
    assert set(cells["point"]) == {"p0", "p1"} and set(cells["load.max_output_tokens"]) == {16, 12}
    assert (study_dir / "analysis.md").read_text() == markdown(loaded)
    policy = loaded.policy_file()  # policy.json / policy.yaml: one document, as derived
    assert json.loads((study_dir / "policy.json").read_text()) == policy.model_dump(mode="json")
    assert yaml.safe_load((study_dir / "policy.yaml").read_text()) == policy.model_dump(mode="json")
    assert {(s.point, s.family, s.workload) for s in policy.schedules} == {
        ("p0", "ngram", "code_humaneval"),
        ("p1", "ngram", "code_humaneval"),
    }
    assert "speculation policy (policy.yaml)" in " ".join(proc.stdout.split())
    for summary in loaded.summaries.values():  # adaptive repeats: the precision reached is stored
        assert all(
            c.precision_target == 0.5 and c.rel_half_width is not None and 2 <= c.repeats <= 3
            for c in summary.cells
        )


def test_study_report_links_every_point(shared_study, tmp_path: Path) -> None:
    study_dir = shared_study["dir"]
    out = bench("report", str(study_dir), "-o", str(tmp_path / "page"), timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    page = (tmp_path / "page" / "index.html").read_text()
    assert 'href="p0.html"' in page and 'href="p1.html"' in page and "Recommendation" in page
    assert (tmp_path / "page" / "p1.html").is_file()
    if CHROMIUM or os.environ.get("BENCH_REQUIRE_BROWSER"):
        dom = chromium("--dump-dom", (tmp_path / "page" / "index.html").as_uri())
        assert dom.returncode == 0 and 'class="recommendation"' in dom.stdout and "Uncaught" not in dom.stderr


def test_resume_never_reruns_a_finished_point(shared_study) -> None:
    """The study resumed after p1's job was killed (conftest.py): p0 is kept, not re-run, and its
    tables are the same as before the resume; p1's killed arm is moved aside, not lost."""
    resumed, study_dir = shared_study["resumed"], shared_study["dir"]
    assert "p0 (load.max_output_tokens=16): complete, kept" in resumed.stdout
    p0 = study_dir / "points" / "p0"
    assert {p: (p0 / p).stat().st_mtime_ns for p in shared_study["p0_mtimes"]} == shared_study["p0_mtimes"]
    assert (study_dir / "points" / "p1" / "arms" / "ngram_k4.attempt-1").is_dir()  # moved aside, not lost
    before, after = shared_study["p0_before"], load_study(study_dir)
    assert after.missing == []
    assert after.summaries["p0"] == before.summaries["p0"]
    assert _p0_tables(after) == _p0_tables(before)  # the finished point's tables, unchanged


def _p0_tables(results) -> tuple:
    header, rows = recommendation_rows(results)
    column = next(i for i, h in enumerate(header) if h.startswith("p0:"))
    return (
        [r[:2] + [r[column]] for r in rows],
        [r for r in break_even_rows(results)[1] if r[0] == "p0"],
        [r for r in best_k_rows(results)[1] if r[0] == "p0"],
    )


def test_a_policy_arm_from_the_study_validates_as_vllm_reads_it(shared_study, tmp_path: Path) -> None:
    """k_schedule: {from: STUDY}: the study's schedule, resolved into an arm `bench validate` checks
    and prints in the launch line (vLLM's num_speculative_tokens_per_batch_size), or refused by name
    where the policy runs no speculation at any batch size."""
    study_dir = shared_study["dir"]
    policy = load_study(study_dir).policy_file()
    data = yaml.safe_load(STUDY_REGIME.read_text())
    data.pop("sweep")
    data["workloads"] = [str((STUDY_REGIME.parent / w).resolve()) for w in data["workloads"]]
    data["arms"] = [
        {"name": "baseline", "method": "baseline"},
        {"name": "policy", "method": "ngram", "k_schedule": {"from": str(study_dir), "point": "p0"}},
    ]
    regime = tmp_path / "policy_arm.yaml"
    regime.write_text(yaml.safe_dump(data, sort_keys=False))
    out = bench("validate", str(regime), timeout=300)
    (schedule,) = [s for s in policy.schedules if s.point == "p0"]
    said = " ".join((out.stdout + out.stderr).split())
    if schedule.k_max:
        assert out.returncode == 0, said
        expected = json.dumps(schedule.speculative_config["num_speculative_tokens_per_batch_size"])
        assert f'"num_speculative_tokens_per_batch_size": {expected}' in said
    else:
        assert out.returncode == 2 and "runs no speculation at any batch size" in said, said
