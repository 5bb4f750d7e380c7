"""Study executors on the REAL CPU engine, read from the suite's shared study (tests/conftest.py's
``study``: tests/regimes/cpu_study_e2e.yaml, 2 points x baseline + ngram K=2 and K=4, eager). Each
point gets 2 logical GPUs of a 4-GPU "node" (--gpus 4 --gpus-per-point 2), so the two points run
side by side as the placement plan says; the engine ignores CUDA_VISIBLE_DEVICES, the executor
and the records do not.

- local: the plan's GPUs reach each point's job; point p1's job is killed (SIGKILL) while its
  last server starts: p1 is reported failed with the reason and its log, its server is stopped,
  p0 completes; --resume continues p1 in place (same node, same GPUs) without touching p0.

The Ray executor's scheduling and records are tested with a stand-in (tests/test_study_executors.py).
"""

from __future__ import annotations

import json

import pytest

from harness.study.collect import load_study
from tests.conftest import NODE, STUDY_REGIME, bench

pytestmark = pytest.mark.engine


def test_each_point_ran_on_the_gpus_the_plan_gave_it(shared_study) -> None:
    plan = bench("validate", str(STUDY_REGIME), *NODE, timeout=300)
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert (
        "wave 1: p0 on GPUs 0,1, at once" in plan.stdout and "wave 1: p1 on GPUs 2,3, at once" in plan.stdout
    )
    for point, devices in (("p0", "0,1"), ("p1", "2,3")):
        placed = json.loads((shared_study["dir"] / "points" / point / "placement.json").read_text())
        assert placed["cuda_visible_devices"] == devices and placed["executor"] == "local"
        environment = json.loads((shared_study["dir"] / "points" / point / "environment.json").read_text())
        assert environment["placement"]["job_id"] == placed["job_id"]
    attempts = {p["id"]: p["attempts"] for p in shared_study["first"]["record"]["points"]}
    assert attempts["p0"][0]["devices"] == ["0", "1"] and attempts["p1"][0]["devices"] == ["2", "3"]


def test_a_killed_job_fails_its_point_only_and_leaves_no_server(shared_study) -> None:
    first = shared_study["first"]
    assert first["returncode"] == 3, first["stdout"][-3000:]
    p0, p1 = (p["attempts"] for p in first["record"]["points"])
    assert p0[0]["state"] == "finished"
    assert (p1[0]["state"], p1[0]["reason"]) == ("failed", "killed by SIGKILL")
    assert "arm 3/3: ngram_k4" in p1[0]["log_tail"]  # the job's own output, up to where it died
    assert "p1: failed" in first["stdout"] and "caveat: point p1 has no complete run" in first["stdout"]
    assert not first["server_alive"], "the killed job's engine server was left running"


def test_resume_continues_the_killed_point_and_keeps_the_finished_one(shared_study) -> None:
    resumed, study_dir = shared_study["resumed"], shared_study["dir"]
    assert resumed.returncode == 0, resumed.stdout[-4000:] + resumed.stderr[-3000:]
    assert "p0 (load.max_output_tokens=16): complete, kept" in resumed.stdout
    p0 = study_dir / "points" / "p0"
    assert {p: (p0 / p).stat().st_mtime_ns for p in shared_study["p0_mtimes"]} == shared_study["p0_mtimes"]
    p1 = json.loads((study_dir / "study.json").read_text())["points"][1]["attempts"]
    assert [(a["attempt"], a["run_dir"], a["state"]) for a in p1] == [
        (1, "points/p1", "failed"),
        (2, "points/p1", "finished"),  # same node, same GPUs: continued in place
    ]
    assert (
        study_dir / "points" / "p1" / "arms" / "ngram_k4.attempt-1" / "server.log"
    ).is_file()  # kept aside
    assert load_study(study_dir).missing == []
