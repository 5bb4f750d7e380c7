"""Study executors on the REAL CPU engine (tests/regimes/cpu_cluster_e2e.yaml: 2 points x baseline
and ngram, eager mode). Each point gets 2 logical GPUs of a 4-GPU "node" (--gpus 4
--gpus-per-point 2), so the two points run side by side as the placement plan says; the engine
ignores CUDA_VISIBLE_DEVICES, the executor and the records do not.

- local: the plan's GPUs reach each point's job; point p1's job is killed (SIGKILL) while its
  second server starts: p1 is reported failed with the reason and its log, its server is stopped,
  p0 completes; --resume continues p1 in place (same node, same GPUs) without touching p0.

The Ray executor runs the suite's shared study (tests/conftest.py's ``study``: a Ray instance the
command starts with 2 logical GPUs, one task per point), which the study and gate tests read.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from harness.server import group_alive
from harness.study.collect import load_study
from tests.conftest import BENCH, ROOT, bench

pytestmark = pytest.mark.engine

CLUSTER_REGIME = ROOT / "tests" / "regimes" / "cpu_cluster_e2e.yaml"
NODE = ("--gpus", "4", "--gpus-per-point", "2")


def _wait_for(path_glob: str, root: Path, proc: subprocess.Popen, timeout: float = 600) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = sorted(root.glob(path_glob))
        if found:
            return found[0]
        assert proc.poll() is None, "the study ended before the point was killed"
        time.sleep(0.2)
    raise AssertionError(f"no {path_glob} under {root} after {timeout} s")


@pytest.fixture(scope="module")
def killed(tmp_path_factory) -> dict:
    """The local-executor study with p1's job killed, then resumed."""
    results = tmp_path_factory.mktemp("results")
    log = results / "run.out"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [*BENCH, "run", str(CLUSTER_REGIME), "--results-dir", str(results), *NODE],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env={"COLUMNS": "200", **os.environ},
        )
        try:
            # p1's baseline is done and its second server is starting: kill the point's job
            pgid_file = _wait_for("cpu_cluster_e2e/study-*/points/p1/arms/ngram/server.pgid", results, proc)
            study_dir = pgid_file.parents[4]
            server_pgid = int(pgid_file.read_text())
            job_pid = json.loads((study_dir / "points" / "p1" / "placement.json").read_text())["pid"]
            os.kill(job_pid, signal.SIGKILL)
            proc.wait(timeout=600)
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
    mtimes = {p: (p0 / p).stat().st_mtime_ns for p in ("summary.json", "arms/ngram/samples.jsonl")}
    resumed = bench("run", "--resume", str(study_dir), timeout=900)
    return {"dir": study_dir, "first": first, "p0_mtimes": mtimes, "resumed": resumed}


def test_each_point_ran_on_the_gpus_the_plan_gave_it(killed) -> None:
    plan = bench("validate", str(CLUSTER_REGIME), *NODE, timeout=300)
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert (
        "wave 1: p0 on GPUs 0,1, at once" in plan.stdout and "wave 1: p1 on GPUs 2,3, at once" in plan.stdout
    )
    for point, devices in (("p0", "0,1"), ("p1", "2,3")):
        placed = json.loads((killed["dir"] / "points" / point / "placement.json").read_text())
        assert placed["cuda_visible_devices"] == devices and placed["executor"] == "local"
        environment = json.loads((killed["dir"] / "points" / point / "environment.json").read_text())
        assert environment["placement"]["job_id"] == placed["job_id"]
    attempts = {p["id"]: p["attempts"] for p in killed["first"]["record"]["points"]}
    assert attempts["p0"][0]["devices"] == ["0", "1"] and attempts["p1"][0]["devices"] == ["2", "3"]


def test_a_killed_job_fails_its_point_only_and_leaves_no_server(killed) -> None:
    first = killed["first"]
    assert first["returncode"] == 3, first["stdout"][-3000:]
    p0, p1 = (p["attempts"] for p in first["record"]["points"])
    assert p0[0]["state"] == "finished"
    assert (p1[0]["state"], p1[0]["reason"]) == ("failed", "killed by SIGKILL")
    assert "arm 2/2: ngram" in p1[0]["log_tail"]  # the job's own output, up to where it died
    assert "p1: failed" in first["stdout"] and "caveat: point p1 has no complete run" in first["stdout"]
    assert not first["server_alive"], "the killed job's engine server was left running"


def test_resume_continues_the_killed_point_and_keeps_the_finished_one(killed) -> None:
    resumed, study_dir = killed["resumed"], killed["dir"]
    assert resumed.returncode == 0, resumed.stdout[-4000:] + resumed.stderr[-3000:]
    assert "p0 (load.max_output_tokens=12): complete, kept" in resumed.stdout
    p0 = study_dir / "points" / "p0"
    assert {p: (p0 / p).stat().st_mtime_ns for p in killed["p0_mtimes"]} == killed["p0_mtimes"]
    p1 = json.loads((study_dir / "study.json").read_text())["points"][1]["attempts"]
    assert [(a["attempt"], a["run_dir"], a["state"]) for a in p1] == [
        (1, "points/p1", "failed"),
        (2, "points/p1", "finished"),  # same node, same GPUs: continued in place
    ]
    assert (study_dir / "points" / "p1" / "arms" / "ngram.attempt-1" / "server.log").is_file()  # kept aside
    assert load_study(study_dir).missing == []
