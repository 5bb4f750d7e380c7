"""Faults on the REAL CPU engine: an engine killed mid-window, an engine that hangs, and resume.

These tests really do it: SIGKILL / SIGSTOP the vLLM server's process group while a measured
window is in flight, and check that the run carries on, keeps what was measured and leaves no
process behind.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.results import read_jsonl
from tests.conftest import engine_processes

pytestmark = pytest.mark.engine

ROOT = Path(__file__).resolve().parent.parent
BENCH = [sys.executable, "-m", "harness.cli"]


def _status(run: Path, arm: str) -> dict:
    path = run / "arms" / arm / "status.json"
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def _strike_when_measuring(proc: subprocess.Popen, results: Path, arm: str, sig: int) -> Path:
    """Wait until ``arm`` has finished at least one measured request, then signal its engine."""
    deadline = time.monotonic() + 600
    while True:
        assert proc.poll() is None, "bench run ended before the fault could be injected"
        assert time.monotonic() < deadline
        runs = list(results.glob("*/*/"))
        if (
            runs
            and _status(runs[0], arm).get("status") == "running"
            and read_jsonl(runs[0] / "arms" / arm / "samples.jsonl")
        ):
            os.killpg(_status(runs[0], arm)["pgid"], sig)
            return runs[0]
        time.sleep(0.2)


def test_killed_and_hung_engines(tmp_path: Path) -> None:
    results = tmp_path / "results"
    proc = subprocess.Popen(
        BENCH + ["run", str(ROOT / "tests" / "regimes" / "cpu_faults.yaml"), "--results-dir", str(results)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )
    try:
        run = _strike_when_measuring(proc, results, "ngram_killed", signal.SIGKILL)
        _strike_when_measuring(proc, results, "baseline_hung", signal.SIGSTOP)  # the run went on
        output, _ = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 3, output[-3000:]

    killed = _status(run, "ngram_killed")
    assert killed["status"] == "failed" and "engine exited with status" in killed["error"]
    kept = read_jsonl(run / "arms" / "ngram_killed" / "samples.jsonl")
    assert any(r["error"] is None for r in kept)  # what was measured before the crash is kept

    hung = _status(run, "baseline_hung")  # the next arm started and measured after the crash
    assert hung["status"] == "failed" and "engine hung: no token for 10 s" in hung["error"]
    assert any(r["error"] is None for r in read_jsonl(run / "arms" / "baseline_hung" / "samples.jsonl"))

    summary = json.loads((run / "summary.json").read_text())
    assert {a["name"]: a["status"] for a in summary["arms"]} == {
        "ngram_killed": "failed",
        "baseline_hung": "failed",
    }
    # a baseline that fails stops the run (nothing left to run here), saying so last
    assert "the baseline (baseline_hung) failed on start-up 1: engine hung" in " ".join(output.split())
    for arm in ("ngram_killed", "baseline_hung"):
        launch = json.loads((run / "arms" / arm / "launch.json").read_text())
        assert launch["uds"] and engine_processes(launch) == [], f"{arm}: processes left"
