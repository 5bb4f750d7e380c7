"""The Slurm executor against a REAL one-node Slurm cluster (tests/slurm_cluster.py: slurmctld,
slurmd, slurmdbd, MariaDB and munge, started by the session), without an engine: what sbatch is
given, and jobs that end while no ``bench run`` watches them. The engine's side (a study through
sbatch, re-attach, scancel, a time limit) is tests/test_study_executors_engine.py."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import BENCH, ROOT

pytestmark = pytest.mark.engine  # the session's cluster lives beside the study's engine runs

CLUSTER_REGIME = ROOT / "tests" / "regimes" / "cpu_cluster_e2e.yaml"


def _refused_study(tmp_path: Path) -> Path:
    """The executors' small study on a CPU model no machine has: each point's job starts, reads
    the regime, refuses this machine (exit 2) within seconds, no engine started."""
    regime = tmp_path / "refused.yaml"
    text = CLUSTER_REGIME.read_text().replace("  kind: cpu\n", "  kind: cpu\n  cpu_model: NoSuchCPU 9000\n")
    regime.write_text(text.replace("../../workloads/", f"{ROOT}/workloads/"))
    return regime


def test_the_cluster_is_one_idle_node_with_this_machines_cpus(slurm) -> None:
    out = slurm.run("sinfo", "--noheader", "-o", "%P %c %t %N")
    assert out.split() == [f"{slurm.partition}*", str(slurm.cpus), "idle", slurm.node] or slurm.queue()


def test_jobs_that_ended_while_no_bench_run_watched_are_collected_from_their_files(
    slurm, tmp_path: Path
) -> None:
    env = {**slurm.env, "COLUMNS": "200"}
    results = tmp_path / "results"
    command = [*BENCH, "run", str(_refused_study(tmp_path)), "--results-dir", str(results)]
    command += ["--executor", "slurm", "--partition", slurm.partition, "--time-limit", "5"]
    dispatcher = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=ROOT, env=env
    )
    try:
        deadline = time.monotonic() + 120
        while True:  # both points submitted: the dispatcher is killed, the jobs run on
            found = list(results.glob("cpu_cluster_e2e/study-*/study.json"))
            points = json.loads(found[0].read_text())["points"] if found else []
            if points and all(p["attempts"] for p in points):
                break
            assert dispatcher.poll() is None and time.monotonic() < deadline, (
                dispatcher.stdout.read().decode()
            )
            time.sleep(0.1)
        dispatcher.kill()
        dispatcher.wait(timeout=30)
    finally:
        if dispatcher.poll() is None:
            dispatcher.kill()
    study = found[0].parent
    ids = [p["attempts"][0]["job_id"].removeprefix("slurm:") for p in points]
    deadline = time.monotonic() + 180
    while set(ids) & set(slurm.queue()):  # both jobs end with no bench run watching
        assert time.monotonic() < deadline, slurm.run("squeue")
        time.sleep(0.5)

    resumed = subprocess.run(
        [*BENCH, "run", "--resume", str(study)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=600,
    )
    assert resumed.returncode == 3, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    record = json.loads((study / "study.json").read_text())
    for point, job in zip(record["points"], ids, strict=True):
        (first,) = point["attempts"]  # the ended job, collected; nothing submitted again
        assert first["job_id"] == f"slurm:{job}" and first["state"] == "failed"
        assert first["reason"].startswith("exited with status 2"), first[
            "reason"
        ]  # from submitit's result file
        assert "NoSuchCPU" in first["log_tail"]  # the point's own refusal, from its log
        assert f"re-attached to job slurm:{job}" in resumed.stdout
    states = [j["State"] for j in slurm.jobs("cpu_cluster_e2e-p0", "cpu_cluster_e2e-p1")]
    assert states == ["COMPLETED", "COMPLETED"], slurm.jobs()  # the jobs ended cleanly; the points refused


def test_validate_prints_the_sbatch_lines_that_are_submitted(slurm, tmp_path: Path) -> None:
    regime = _refused_study(tmp_path)
    shown = subprocess.run(
        [*BENCH, "validate", str(regime), "--executor", "slurm", "--partition", slurm.partition],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "COLUMNS": "200"}, timeout=300,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stdout + shown.stderr
    results = tmp_path / "results"
    subprocess.run(
        [*BENCH, "run", str(regime), "--results-dir", str(results), "--executor", "slurm", "--partition",
         slurm.partition], capture_output=True, cwd=ROOT, env=slurm.env, timeout=600,
    )  # fmt: skip
    (study,) = results.glob("cpu_cluster_e2e/study-*")
    for point in ("p0", "p1"):
        job = json.loads((study / "study.json").read_text())["points"][int(point[1])]["attempts"][0]["job_id"]
        script = (study / "slurm" / f"{job.removeprefix('slurm:')}_submission.sh").read_text()
        submitted = [line for line in script.splitlines() if line.startswith("#SBATCH")]
        printed = shown.stdout.split(f"  {point}: one job", 1)[1].splitlines()[1 : len(submitted) + 1]
        # the same options; the output files' directory is the study's, which validate cannot know
        same = [line.strip() for line in printed if "_log." not in line]
        assert same == [line for line in submitted if "_log." not in line], (printed, submitted)
        assert f"#SBATCH --job-name=cpu_cluster_e2e-{point}" in same and "#SBATCH --partition=bench" in same
