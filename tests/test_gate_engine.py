"""`bench gate` end to end on the REAL CPU engine: a run gated against itself passes; the same
regime with the ngram arm made worse (K=1 instead of 4) is a regression: exit code 1 and a JUnit
file naming the failed gate. No speed is asserted; tau of greedy ngram is what moves."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytestmark = pytest.mark.engine

ROOT = Path(__file__).resolve().parent.parent
REGIME = ROOT / "tests" / "regimes" / "cpu_gate.yaml"
BENCH = [sys.executable, "-m", "harness.cli"]


def _run(regime: Path, results: Path) -> Path:
    proc = subprocess.run(
        BENCH + ["run", str(regime), "--results-dir", str(results)],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
        env=dict(os.environ),
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    (run,) = (results / "cpu_gate").iterdir()
    return run


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("gate")
    good = _run(REGIME, base / "good")
    worse_regime = base / "cpu_gate_worse.yaml"
    text = REGIME.read_text().replace("num_speculative_tokens: 4", "num_speculative_tokens: 1")
    worse_regime.write_text(text.replace("../../workloads/", f"{ROOT}/workloads/"))
    return good, _run(worse_regime, base / "worse")


def test_run_against_itself_passes(runs) -> None:
    good, _ = runs
    out = subprocess.run(
        BENCH + ["gate", str(good), "--baseline", str(good)], capture_output=True, text=True, cwd=ROOT
    )
    assert out.returncode == 0, out.stdout
    suite = ET.parse(good / "gate" / "junit.xml").getroot()
    assert int(suite.get("tests")) == 3 and suite.get("failures") == "0" and suite.get("errors") == "0"


def test_worse_configuration_is_a_regression(runs, tmp_path: Path) -> None:
    good, worse = runs
    junit = tmp_path / "junit.xml"
    out = subprocess.run(
        BENCH + ["gate", str(worse), "--baseline", str(good), "--junit", str(junit)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert out.returncode == 1, out.stdout
    assert "arm ngram is configured differently" in out.stdout
    failed = {
        case.get("name"): case.find("failure").get("message")
        for case in ET.parse(junit).getroot().iter("testcase")
        if case.find("failure") is not None
    }
    assert list(failed) == ["ngram tau regression <= 10% [code_humaneval @ 1]"]
    assert failed["ngram tau regression <= 10% [code_humaneval @ 1]"].startswith("regression:")
