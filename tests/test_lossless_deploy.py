"""Deploy only what stayed lossless (issue 78, item 4): an arm that pays but whose greedy outputs left
the baseline's beyond near ties on more prompts than the baseline's own noise floor is "pays, not
lossless": never deployed, in every view (terminal verdict, lab table, --minilab, the HTML report,
the export). The stand-in: the stored default run (ngram_k4 pays 1.18x [1.05, 1.32], 120/120
identical) with 12 of ngram_k4's outputs changed at one token, as an engine that garbles a verify
step would (vLLM #46669).
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from harness.derive.analysis import analyze
from harness.derive.summary import summarize
from harness.derive.verdict import divergence, window_verdicts
from harness.present.verdict_text import verdict_line
from tests.one_answer import bench

FIXTURE = Path(__file__).parent / "fixtures" / "run_v14_default"


def _diverging(tmp_path: Path, garbled: int = 12) -> Path:
    """The default run with ``garbled`` of ngram_k4's outputs changed at their sixth token (where
    the baseline's top-2 margin is wide: a divergence, not a near tie)."""
    run = tmp_path / "diverging"
    shutil.copytree(FIXTURE, run)
    path = run / "arms" / "ngram_k4" / "samples.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    for line in lines[:garbled]:
        line["token_ids"][5] = (line["token_ids"][5] + 1) % 49_000
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return run


def test_an_arm_that_pays_but_diverges_is_not_deployed_in_every_view(tmp_path: Path) -> None:
    run = _diverging(tmp_path)
    [verdict] = window_verdicts(summarize(run))
    assert verdict.outcome == "pays" and verdict.best is not None and verdict.best.arm == "ngram_k4"
    assert verdict.deploy == "baseline" and verdict.answer == "pays, not lossless"
    assert verdict.lossy is not None and (verdict.lossy.diverged, verdict.lossy.compared) == (12, 120)
    assert (verdict.lossy.floor, verdict.lossy.floor_compared) == (0, 30)

    shown = " ".join(bench("show", str(run)).split())
    assert "ngram_k4 pays, but is not lossless here: 12 of 120 prompt outputs diverged" in shown
    assert "not deployed: deploy baseline" in shown
    minilab = bench("show", str(run), "--minilab")
    rows = {line.split("|")[1].strip(): line for line in minilab.splitlines() if line.startswith("| ")}
    assert "| deploy |" in rows["baseline"] and "pays, not lossless" in rows["ngram_k4"]
    report = tmp_path / "report.html"
    bench("report", str(run), "-o", str(report))
    assert "pays, not lossless" in report.read_text()
    bench("export", str(run), "-o", str(tmp_path / "export"))
    with (tmp_path / "export" / "cells.csv").open() as handle:
        cells = {row["arm"]: row for row in csv.DictReader(handle)}
    assert cells["ngram_k4"]["verdict"] == "pays, not lossless" and cells["ngram_k4"]["deploy"] == "False"
    assert cells["baseline"]["deploy"] == "True"


def test_the_same_run_unchanged_deploys_the_arm(tmp_path: Path) -> None:
    """The control: the stored run as measured deploys ngram_k4, so the test above can fail."""
    [verdict] = window_verdicts(summarize(FIXTURE))
    assert verdict.deploy == "ngram_k4" and verdict.lossy is None and verdict.answer == "pays"
    assert "not lossless" not in verdict_line(verdict)


@pytest.mark.parametrize(("floor", "lossy"), [(0.0, True), (10.0, False), (5.0, True)])
def test_the_noise_floor_sets_what_counts_as_a_divergence(floor: float, lossy: bool) -> None:
    """A larger share diverged than the baseline's own reference pass left it: not lossless; a share
    within the floor is the engine's own noise, and the arm stays deployable."""
    summary = summarize(FIXTURE)
    arm, baseline = (
        summary.cell("ngram_k4", "code_humaneval", 1),
        summary.cell("baseline", "code_humaneval", 1),
    )
    assert arm is not None and baseline is not None and arm.exactness and baseline.exactness
    arm = arm.model_copy(update={"exactness": arm.exactness.model_copy(update={"diverged_pct": 10.0})})
    baseline = baseline.model_copy(
        update={"exactness": baseline.exactness.model_copy(update={"diverged_pct": floor})}
    )
    found = divergence(summary, arm, baseline)
    assert (found is not None) == lossy
    analysis = analyze(summary)  # the unchanged run: one answer, deployed
    assert analysis.verdicts[0].deploy == "ngram_k4"


def test_a_study_never_chooses_an_arm_that_was_not_lossless(tmp_path: Path) -> None:
    """A study point's observation of the diverging arm is marked, and no choice (recommendation,
    best K, flip, policy) is made of it, as its run's verdict never deploys it."""
    from types import SimpleNamespace

    from harness.derive.study.collect import point_observations

    point = SimpleNamespace(id="p0", axes=())
    garbled = {o.arm: o for o in point_observations(point, summarize(_diverging(tmp_path)), {})}  # type: ignore[arg-type]
    assert garbled["ngram_k4"].diverged and not garbled["baseline"].diverged
    clean = {o.arm: o for o in point_observations(point, summarize(FIXTURE), {})}  # type: ignore[arg-type]
    assert not clean["ngram_k4"].diverged
