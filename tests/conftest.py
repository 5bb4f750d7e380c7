"""Fixtures shared between test modules. The real CPU engine's runs are the suite's cost (about
25 s per server start-up on 2 cores), so a run that two modules can read is made once per session."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCH = [sys.executable, "-m", "harness.cli"]
STUDY_REGIME = ROOT / "tests" / "regimes" / "cpu_study_e2e.yaml"


def bench(*args: str, timeout: int = 1500) -> subprocess.CompletedProcess:
    """``bench ARGS`` in a subprocess, from the repository root, with a wide terminal."""
    return subprocess.run(
        BENCH + list(args),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={"COLUMNS": "200", **os.environ},
    )


@pytest.fixture(scope="session")
def study(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """tests/regimes/cpu_study_e2e.yaml run on the REAL CPU engine: two points x baseline + ngram
    K=2 and K=4 (the study tests read it; the gate test gates a worse run against its point p0).
    The local executor runs the two points side by side, each on one logical GPU of a 2-GPU
    "node": CPU points would run one at a time, and the suite's time is what this saves."""
    results = tmp_path_factory.mktemp("results")
    proc = bench(
        "run", str(STUDY_REGIME), "--results-dir", str(results), "--gpus", "2", "--gpus-per-point", "1"
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    (study_dir,) = sorted((results / "cpu_study_e2e").iterdir())
    return proc, study_dir
