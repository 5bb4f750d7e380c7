"""`bench gate` end to end on a run the REAL CPU engine has just measured: the study's point p0
(tests/conftest.py's session fixture, a Slurm job), with the gates of tests/regimes/cpu_gate.yaml
(a regime of p0's conditions: `--gates` takes a regime's gates section). Gated without a baseline
it passes (its relative gates skipped) and against itself it is refused. Gated against a copy of
itself under another run id, the relative tau gate, one start-up per side, cannot see the start-up
spread and is inconclusive (JUnit: skipped), while a tau floor K=4 cannot reach (tau = 1 + accepted
/ drafts <= 5) is a regression: exit code 1 and a JUnit file naming the failed gates. No speed is
asserted.

A copy, not a second run of p0's conditions: that cost two start-ups (~67 core-seconds on the
AVX-512 EPYC, about twice that on the AVX2-only one) for what tests/test_gates.py checks on stored
runs; that cpu_gate.yaml keeps p0's conditions, and that an arm configured differently from the
baseline run's is said, are tests/test_gates.py's too."""

from __future__ import annotations

import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.conftest import ROOT, bench

pytestmark = pytest.mark.engine

REGIME = ROOT / "tests" / "regimes" / "cpu_gate.yaml"


@pytest.fixture(scope="module")
def runs(shared_study, tmp_path_factory) -> tuple[Path, Path]:
    """(a copy of the study's p0, another copy under another run id): the gate writes into the run
    it gates, and the study's own p0 is the study tests' to read."""
    p0 = shared_study["dir"] / "points" / "p0"
    copies = []
    for study in ("gated-study", "twin-study"):  # a point's run id is <study>/<point>
        copy = tmp_path_factory.mktemp("gate") / study / "points" / "p0"
        shutil.copytree(p0, copy, ignore=shutil.ignore_patterns("gate"))
        copies.append(copy)
    return copies[0], copies[1]


def test_run_without_a_baseline_passes_and_against_itself_is_refused(runs) -> None:
    again, _ = runs
    out = bench("gate", str(again), "--gates", str(REGIME), timeout=300)
    assert out.returncode == 0, out.stdout
    suite = ET.parse(again / "gate" / "junit.xml").getroot()
    # 3 rules x 2 cells (code_humaneval at concurrency 1 and 2); the relative rule's 2 skipped
    assert int(suite.get("tests")) == 6 and suite.get("failures") == "0" and suite.get("errors") == "0"
    assert suite.get("skipped") == "2"
    refused = bench("gate", str(again), "--baseline", str(again), "--gates", str(REGIME), timeout=300)
    assert refused.returncode == 2 and "the baseline is the run itself" in refused.stdout


def test_a_floor_the_run_cannot_reach_is_a_regression(runs, tmp_path: Path) -> None:
    again, good = runs
    gates = tmp_path / "gates.yaml"
    regime = REGIME.read_text().replace("../../workloads/", f"{ROOT}/workloads/")
    gates.write_text(regime.replace("metric: tau, min: 1.0}", "metric: tau, min: 5.5}"))
    junit = tmp_path / "junit.xml"
    out = bench(
        "gate", str(again), "--baseline", str(good), "--gates", str(gates), "--junit", str(junit), timeout=300
    )
    assert out.returncode == 1, out.stdout
    cases = {case.get("name"): case for case in ET.parse(junit).getroot().iter("testcase")}
    failed = {
        name: case.find("failure").get("message")
        for name, case in cases.items()
        if case.find("failure") is not None
    }
    assert sorted(failed) == [
        f"ngram_k4 tau >= 5.5 [code_humaneval @ {concurrency}]" for concurrency in (1, 2)
    ]
    relative = [case for name, case in cases.items() if "regression <=" in name]
    assert len(relative) == 2
    # inconclusive is skipped (neither passed nor a regression), with the reason it could not decide
    assert all(
        case.find("skipped")
        .get("message")
        .startswith(
            "inconclusive (not cleared, not failed): one start-up per side cannot see the start-up spread"
        )
        for case in relative
    )
