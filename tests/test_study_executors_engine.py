"""Study executors on the REAL CPU engine and a REAL one-node Slurm cluster, read from the suite's
shared study (tests/conftest.py's ``shared_study``: tests/regimes/cpu_study_e2e.yaml, 2 points x
baseline + ngram K=2 and K=4, eager, each point one Slurm job through submitit and sbatch).

- slurm: the dispatching ``bench run`` is killed (SIGKILL) while p1's last server starts: the jobs
  run on, ``--resume`` re-attaches to them by job id (nothing is submitted twice); p1's job is
  then cancelled with scancel: p1 fails with Slurm's CANCELLED and its log, its server is gone,
  p0 completes. A point over its time limit (tests/regimes/cpu_slurm_timeout.yaml, --time-limit 1)
  fails with Slurm's TIMEOUT.
- local: the study resumed on this node continues p1 in place (its finished arms kept) on the GPUs
  the placement plan gave it, and leaves p0 as it was.
- Slurm and the node agree: the windows p1's last arm (ngram K=4) measured in its Slurm job before
  the cancel (its first, at concurrency 1) are measured again by the local resume, outside Slurm:
  the same tokens, the same tau.

The Ray executor's scheduling and records are tested with a stand-in (tests/test_study_executors.py).
"""

from __future__ import annotations

import json

import pytest

from harness.core.probes.acceptance import SpecCounters, mean_acceptance_length
from harness.derive.study.collect import load_study
from harness.results import read_jsonl
from tests.conftest import NODE, STUDY_REGIME, bench, engine_processes

pytestmark = pytest.mark.engine


def _sacct(shared_study, name: str) -> list[dict]:
    return [job for job in shared_study["jobs"] if job["JobName"] == name]


def test_each_point_ran_as_its_own_slurm_job_and_outlived_the_dispatcher(shared_study) -> None:
    killed = shared_study["killed"]
    ids = [p["attempts"][0]["job_id"] for p in killed["record"]["points"]]
    assert all(i.startswith("slurm:") and i.removeprefix("slurm:").isdigit() for i in ids), ids
    assert "p0: submitted (job slurm:" in killed["stdout"] and "p1: submitted (job slurm:" in killed["stdout"]
    # its regime pins no hardware.cpu_count: one CPU each, side by side, and the study says so
    assert "note: p0, p1: a CPU point that pins no hardware.cpu_count" in " ".join(killed["stdout"].split())
    # the dispatcher was killed; Slurm still ran p1's job (its server was starting)
    assert ids[1].removeprefix("slurm:") in killed["queue"]
    for point, job in zip(("p0", "p1"), ids, strict=True):
        placed = json.loads((shared_study["dir"] / "points" / point / "placement.json").read_text())
        assert (placed["executor"], placed["job_id"]) == ("slurm", job)
        environment = json.loads((shared_study["dir"] / "points" / point / "environment.json").read_text())
        assert environment["placement"]["job_id"] == job
        # re-attached, never submitted twice: one Slurm job per point in the whole history
        (record,) = _sacct(shared_study, f"cpu_study_e2e-{point}")
        assert record["JobID"] == job.removeprefix("slurm:")
    assert _sacct(shared_study, "cpu_study_e2e-p0")[0]["State"] == "COMPLETED"


def test_resume_reattaches_by_job_id_and_a_cancelled_job_fails_in_slurms_words(shared_study) -> None:
    after = shared_study["after_cancel"]
    out = after["stdout"]
    p1_job = shared_study["killed"]["record"]["points"][1]["attempts"][0]["job_id"]
    assert f"p1 (load.max_output_tokens=12): re-attached to job {p1_job}" in out
    # p0 was either still running (re-attached) or had finished while no bench run watched it
    assert "p0 (load.max_output_tokens=16): re-attached to job slurm:" in out or (
        "p0 (load.max_output_tokens=16): complete, kept" in out
    )
    assert "submitted (job" not in out  # nothing submitted again
    p0, p1 = (p["attempts"] for p in after["record"]["points"])
    assert len(p0) == 1 and p0[0]["state"] == "finished"
    assert len(p1) == 1 and p1[0]["state"] == "failed"
    assert p1[0]["reason"].startswith("CANCELLED by ") and "scancel" in p1[0]["reason"]
    assert "arm 3/3: ngram_k4" in p1[0]["log_tail"]  # the job's own output, up to where it was cancelled
    assert "p1: failed" in out and after["returncode"] == 3, out[-3000:]
    # its first two arms were measured, the third interrupted: said as such, not as failed arms
    assert "p1: arm ngram_k4: interrupted" in out and "p1: arm baseline: interrupted" in out
    assert not after["server_alive"], "the cancelled job's engine server was left running"
    assert _sacct(shared_study, "cpu_study_e2e-p1")[0]["State"].startswith("CANCELLED")


def test_a_job_over_its_time_limit_fails_as_slurms_timeout(shared_study) -> None:
    timed_out = shared_study["timeout"]
    assert timed_out["returncode"] == 3, timed_out["stdout"][-3000:]
    (point,) = json.loads((timed_out["dir"] / "study.json").read_text())["points"]
    (attempt,) = point["attempts"]
    assert attempt["state"] == "failed" and attempt["reason"].startswith("TIMEOUT: "), attempt
    assert attempt["log_tail"], "the timed-out job's output is kept"
    (job,) = _sacct(shared_study, "cpu_slurm_timeout-p0")
    assert (job["State"], job["Timelimit"]) == ("TIMEOUT", "00:01:00")
    for launch in (timed_out["dir"] / "points" / "p0" / "arms").glob("*/launch.json"):
        assert not engine_processes(json.loads(launch.read_text())), f"{launch.parent.name}'s server runs on"


def test_the_local_resume_continues_p1_in_place_on_the_plans_gpus(shared_study) -> None:
    plan = bench("validate", str(STUDY_REGIME), *NODE, timeout=300)
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert "wave 1: p1 on GPUs 2,3, at once" in plan.stdout
    resumed, study_dir = shared_study["resumed"], shared_study["dir"]
    assert resumed.returncode == 0, resumed.stdout[-4000:] + resumed.stderr[-3000:]
    assert "p0 (load.max_output_tokens=16): complete, kept" in resumed.stdout
    p0 = study_dir / "points" / "p0"
    assert {p: (p0 / p).stat().st_mtime_ns for p in shared_study["p0_mtimes"]} == shared_study["p0_mtimes"]
    p1 = json.loads((study_dir / "study.json").read_text())["points"][1]["attempts"]
    assert [(a["attempt"], a["run_dir"], a["executor"], a["state"]) for a in p1] == [
        (1, "points/p1", "slurm", "failed"),
        (2, "points/p1", "local", "finished"),  # the Slurm job ran on this node: continued in place
    ]
    assert p1[1]["devices"] == ["2", "3"]
    placed = json.loads((study_dir / "points" / "p1" / "placement.json").read_text())
    assert placed["executor"] == "slurm" and placed["continued_by"][-1]["cuda_visible_devices"] == "2,3"
    assert (
        study_dir / "points" / "p1" / "arms" / "ngram_k4.attempt-1" / "server.log"
    ).is_file()  # kept aside
    assert load_study(study_dir).missing == []


def test_slurm_and_the_node_measure_the_same_tau(shared_study) -> None:
    """Greedy ngram decodes the same tokens wherever it runs, so its acceptance is the same count:
    the windows p1's ngram_k4 measured in its Slurm job before the cancel (its first, at concurrency
    1, mostly; kept aside when the node continued the point) and the same windows measured again on
    the node agree on every token and on tau to the digit."""
    arms = shared_study["dir"] / "points" / "p1" / "arms"

    def windows(arm: str) -> dict:
        taus = {}
        for window in read_jsonl(arms / arm / "windows.jsonl"):
            delta = SpecCounters.from_json(window["counters_after"]).minus(
                SpecCounters.from_json(window["counters_before"])
            )
            tau = mean_acceptance_length(delta.drafts, delta.accepted_tokens)
            taus[window["workload"], window["concurrency"], window["repeat"]] = tau and round(tau, 2)
        return taus

    def tokens(arm: str, keys) -> dict:
        return {
            (s["workload"], s["concurrency"], s["repeat"], s["prompt_id"]): s["token_ids"]
            for s in read_jsonl(arms / arm / "samples.jsonl")
            if (s["workload"], s["concurrency"], s["repeat"]) in keys
        }

    on_slurm, on_the_node = windows("ngram_k4.attempt-1"), windows("ngram_k4")
    assert on_slurm and all(tau is not None for tau in on_slurm.values()), on_slurm
    assert on_slurm == {key: on_the_node[key] for key in on_slurm}
    in_the_job = tokens("ngram_k4.attempt-1", on_slurm)
    prompts = json.loads((arms.parent / "regime.json").read_text())["regime"]["load"]["num_prompts"]
    assert len(in_the_job) == len(on_slurm) * prompts and all(in_the_job.values()), in_the_job
    assert in_the_job == tokens("ngram_k4", on_slurm)
