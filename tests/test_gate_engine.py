"""`bench gate` end to end on the REAL CPU engine: a run gated against itself passes; a run whose
ngram_k4 arm is made worse (K=1 instead of 4, tests/regimes/cpu_gate.yaml) gated against the
study's point p0 (the same conditions, measured by tests/test_study_engine.py's session fixture)
is a regression: exit code 1 and a JUnit file naming the failed gates. No speed is asserted; tau
of greedy ngram is what moves."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.conftest import ROOT, bench

pytestmark = pytest.mark.engine

REGIME = ROOT / "tests" / "regimes" / "cpu_gate.yaml"


@pytest.fixture(scope="module")
def runs(study, tmp_path_factory) -> tuple[Path, Path]:
    """(the study's p0: ngram_k4 at K=4, the worse run: K=1), measured under the same conditions."""
    results = tmp_path_factory.mktemp("gate")
    proc = bench("run", str(REGIME), "--results-dir", str(results), timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    (worse,) = (results / "cpu_gate").iterdir()
    _, study_dir = study
    return study_dir / "points" / "p0", worse


def test_run_against_itself_passes(runs) -> None:
    _, worse = runs
    out = bench("gate", str(worse), "--baseline", str(worse), timeout=300)
    assert out.returncode == 0, out.stdout
    suite = ET.parse(worse / "gate" / "junit.xml").getroot()
    # 3 rules x 2 cells (code_humaneval at concurrency 1 and 2)
    assert int(suite.get("tests")) == 6 and suite.get("failures") == "0" and suite.get("errors") == "0"


def test_worse_configuration_is_a_regression(runs, tmp_path: Path) -> None:
    good, worse = runs
    junit = tmp_path / "junit.xml"
    out = bench("gate", str(worse), "--baseline", str(good), "--junit", str(junit), timeout=300)
    assert out.returncode == 1, out.stdout
    assert "arm ngram_k4 is configured differently" in out.stdout
    failed = {
        case.get("name"): case.find("failure").get("message")
        for case in ET.parse(junit).getroot().iter("testcase")
        if case.find("failure") is not None
    }
    assert sorted(failed) == [
        f"ngram_k4 tau regression <= 10% [code_humaneval @ {concurrency}]" for concurrency in (1, 2)
    ]
    assert all(message.startswith("regression:") for message in failed.values())
