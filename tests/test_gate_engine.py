"""`bench gate` end to end on the REAL CPU engine: a run gated without a baseline passes (its
relative gates skipped) and against itself is refused; the study's point p0 measured again on the
node (tests/regimes/cpu_gate.yaml, beside the study's last resume) gated against the study's p0
(the same conditions and arms, measured as a Slurm job by tests/conftest.py's session fixture):
both runs started each server once, so the relative tau gate cannot see the start-up spread and is
inconclusive, while a tau floor K=4 cannot reach (tau = 1 + accepted / drafts <= 5) is a
regression: exit code 1 and a JUnit file naming the failed gates. No speed is asserted. (An arm
configured differently from the baseline run's is said: tests/test_gates.py.)"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.conftest import ROOT, bench

pytestmark = pytest.mark.engine

REGIME = ROOT / "tests" / "regimes" / "cpu_gate.yaml"


@pytest.fixture(scope="module")
def runs(shared_study) -> tuple[Path, Path]:
    """(the study's p0, the same point run again on the node: conftest.py runs
    tests/regimes/cpu_gate.yaml beside the study's last resume)."""
    return shared_study["dir"] / "points" / "p0", shared_study["gate_run"]


def test_run_without_a_baseline_passes_and_against_itself_is_refused(runs) -> None:
    _, again = runs
    out = bench("gate", str(again), timeout=300)
    assert out.returncode == 0, out.stdout
    suite = ET.parse(again / "gate" / "junit.xml").getroot()
    # 3 rules x 2 cells (code_humaneval at concurrency 1 and 2); the relative rule's 2 skipped
    assert int(suite.get("tests")) == 6 and suite.get("failures") == "0" and suite.get("errors") == "0"
    assert suite.get("skipped") == "2"
    refused = bench("gate", str(again), "--baseline", str(again), timeout=300)
    assert refused.returncode == 2 and "the baseline is the run itself" in refused.stdout


def test_a_floor_the_run_cannot_reach_is_a_regression(runs, tmp_path: Path) -> None:
    good, again = runs
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
    assert all(
        case.find("system-out").text.startswith(
            "inconclusive: one start-up per side cannot see the start-up spread"
        )
        for case in relative
    )
