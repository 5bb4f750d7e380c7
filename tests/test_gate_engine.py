"""`bench gate` end to end on the REAL CPU engine: a run gated without a baseline passes (its
relative gates skipped) and against itself is refused; a run whose ngram_k4 arm is made worse
(K=1 instead of 4, tests/regimes/cpu_gate.yaml) gated against the study's point p0 (the same
conditions, measured by tests/test_study_engine.py's session fixture): both runs started each
server once, so the relative tau gate cannot see the start-up spread and is inconclusive, while
a tau floor K=1 cannot reach (tau = 1 + accepted / drafts <= 2) is a regression: exit code 1 and
a JUnit file naming the failed gates. No speed is asserted; tau of greedy ngram is what moves."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.conftest import ROOT, bench

pytestmark = pytest.mark.engine

REGIME = ROOT / "tests" / "regimes" / "cpu_gate.yaml"


@pytest.fixture(scope="module")
def runs(shared_study) -> tuple[Path, Path]:
    """(the study's p0: ngram_k4 at K=4, the worse run: K=1), measured under the same conditions
    (conftest.py runs tests/regimes/cpu_gate.yaml beside the study's resume)."""
    return shared_study["dir"] / "points" / "p0", shared_study["gate_run"]


def test_run_without_a_baseline_passes_and_against_itself_is_refused(runs) -> None:
    _, worse = runs
    out = bench("gate", str(worse), timeout=300)
    assert out.returncode == 0, out.stdout
    suite = ET.parse(worse / "gate" / "junit.xml").getroot()
    # 3 rules x 2 cells (code_humaneval at concurrency 1 and 2); the relative rule's 2 skipped
    assert int(suite.get("tests")) == 6 and suite.get("failures") == "0" and suite.get("errors") == "0"
    assert suite.get("skipped") == "2"
    refused = bench("gate", str(worse), "--baseline", str(worse), timeout=300)
    assert refused.returncode == 2 and "the baseline is the run itself" in refused.stdout


def test_worse_configuration_is_a_regression(runs, tmp_path: Path) -> None:
    good, worse = runs
    gates = tmp_path / "gates.yaml"
    regime = REGIME.read_text().replace("../../workloads/", f"{ROOT}/workloads/")
    gates.write_text(regime.replace("metric: tau, min: 1.0}", "metric: tau, min: 2.5}"))
    junit = tmp_path / "junit.xml"
    out = bench(
        "gate", str(worse), "--baseline", str(good), "--gates", str(gates), "--junit", str(junit), timeout=300
    )
    assert out.returncode == 1, out.stdout
    assert "arm ngram_k4 is configured differently" in out.stdout
    cases = {case.get("name"): case for case in ET.parse(junit).getroot().iter("testcase")}
    failed = {
        name: case.find("failure").get("message")
        for name, case in cases.items()
        if case.find("failure") is not None
    }
    assert sorted(failed) == [
        f"ngram_k4 tau >= 2.5 [code_humaneval @ {concurrency}]" for concurrency in (1, 2)
    ]
    relative = [case for name, case in cases.items() if "regression <=" in name]
    assert len(relative) == 2
    assert all(
        case.find("system-out").text.startswith(
            "inconclusive: one start-up per side cannot see the start-up spread"
        )
        for case in relative
    )
