"""Fixtures shared between test modules. The real CPU engine's runs are the suite's cost (about
40 s per server start-up on the AVX2 machine's 2 cores), so a run that several modules can read
is made once per session."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
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
        env={**os.environ, "COLUMNS": "200"},
    )


# Every point gets 2 logical GPUs of a 4-GPU "node": the two points run side by side as the
# placement plan says (the engine ignores CUDA_VISIBLE_DEVICES, the executor and the records do not).
NODE = ("--gpus", "4", "--gpus-per-point", "2")


def _wait_for(path_glob: str, root: Path, proc: subprocess.Popen, timeout: float = 900) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = sorted(root.glob(path_glob))
        if found:
            return found[0]
        assert proc.poll() is None, "the study ended before the point was killed"
        time.sleep(0.2)
    raise AssertionError(f"no {path_glob} under {root} after {timeout} s")


@pytest.fixture(scope="session")
def study(tmp_path_factory) -> dict:
    """tests/regimes/cpu_study_e2e.yaml run on the REAL CPU engine: two points x baseline + ngram
    K=2 and K=4, through the local executor, side by side. Point p1's job is killed (SIGKILL) while
    its second server starts, then the study is resumed: the executor tests read the first
    attempt, the study tests the finished study, the gate test gates a worse run against its p0.
    One study serves all three (each start-up costs ~40 s on the AVX2 machine): 7 start-ups
    instead of 6 for the study, 5 for the executors' own study and 1 for a second resume."""
    from harness.server import group_alive
    from harness.study.collect import load_study

    results = tmp_path_factory.mktemp("results")
    log = results / "run.out"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [*BENCH, "run", str(STUDY_REGIME), "--results-dir", str(results), *NODE],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env={**os.environ, "COLUMNS": "200"},
        )
        try:
            # p1's baseline is done and its second server is starting: kill the point's job
            pgid_file = _wait_for("cpu_study_e2e/study-*/points/p1/arms/ngram_k2/server.pgid", results, proc)
            study_dir = pgid_file.parents[4]
            server_pgid = int(pgid_file.read_text())
            job_pid = json.loads((study_dir / "points" / "p1" / "placement.json").read_text())["pid"]
            os.kill(job_pid, signal.SIGKILL)
            proc.wait(timeout=900)
        finally:
            if proc.poll() is None:
                proc.kill()
    first = {
        "returncode": proc.returncode,
        "stdout": log.read_text(),
        "record": json.loads((study_dir / "study.json").read_text()),
        "server_alive": group_alive(server_pgid),
    }
    p0 = study_dir / "points" / "p0"
    mtimes = {p: (p0 / p).stat().st_mtime_ns for p in ("summary.json", "arms/ngram_k4/samples.jsonl")}
    before = load_study(study_dir)  # p1 failed: p0's tables, to compare after the resume
    resumed = bench("run", "--resume", str(study_dir), timeout=1500)
    assert resumed.returncode == 0, resumed.stdout[-4000:] + resumed.stderr[-3000:]
    return {
        "dir": study_dir,
        "first": first,
        "p0_mtimes": mtimes,
        "p0_before": before,
        "resumed": resumed,
    }
