"""Study executors without an engine: the placement plan for a node's GPUs, CUDA_VISIBLE_DEVICES
applied to NVML, job outcomes, Slurm's submission parameters on submitit's own executor objects,
the dispatcher's decisions (what starts when, where an attempt writes, what is recorded) with a
stand-in executor, and submitit's local and debug clusters running the real `bench study-point`
command for a point that refuses to start (seconds, no engine). The real CPU engine under the
local and Ray executors is tests/test_study_executors_engine.py."""

from __future__ import annotations

import io
import itertools
import json
import platform
import signal
from pathlib import Path

import pytest
from rich.console import Console

from harness.core.errors import UserError
from harness.results.study.record import ExecutorOptions, PointAttempt, StudyDir
from harness.run.sensors.devices import visible_indices
from harness.run.study import run as study_run
from harness.run.study.executors import JobOutcome, JobSpec, outcome_of, slurm_parameters
from harness.run.study.placement import Demand, plan_lines, plan_placement
from harness.run.study.run import Dispatcher, study_record
from harness.run.study.sweep import plan_study
from tests.conftest import ROOT, bench

CLUSTER_REGIME = ROOT / "tests" / "regimes" / "cpu_cluster_e2e.yaml"


# --- placement ---------------------------------------------------------------------------------


def test_tp_1_2_4_8_on_an_8_gpu_node() -> None:
    demands = [Demand(f"p{i}", tp, 60) for i, tp in enumerate((1, 2, 4, 8))]
    slots = plan_placement(demands, 8)
    assert [s.devices for s in slots] == [(0,), (2, 3), (4, 5, 6, 7), tuple(range(8))]
    assert [s.after for s in slots] == [(), (), (), ("p0", "p1", "p2")]
    assert [s.wave for s in slots] == [1, 1, 1, 2]
    lines = plan_lines(slots, demands, [str(i) for i in range(8)])
    assert lines[1] == "wave 1: p1 on GPUs 2,3, at once (budget 60 min)"
    assert lines[3].startswith("wave 2: p3 on GPUs 0,1,2,3,4,5,6,7, after p0, p1, p2")


def test_four_tp2_points_share_a_node_and_the_fifth_waits_for_the_first_free_pair() -> None:
    demands = [Demand(f"p{i}", 2, minutes) for i, minutes in enumerate((30, 10, 20, 40, 5))]
    slots = plan_placement(demands, 8)
    assert [s.devices for s in slots[:4]] == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert slots[4].devices == (2, 3) and slots[4].after == ("p1",)  # p1's pair frees first (10 min)
    assert len({d for s in slots[:4] for d in s.devices}) == 8  # disjoint


def test_cpu_points_run_one_at_a_time_and_a_point_too_big_refuses_the_plan() -> None:
    slots = plan_placement([Demand("p0", 0, 5), Demand("p1", 0, 5), Demand("p2", 0, 5)], 0)
    assert [(s.devices, s.after, s.wave) for s in slots] == [((), (), 1), ((), ("p0",), 2), ((), ("p1",), 3)]
    with pytest.raises(UserError, match="p1 needs 8 GPUs and this node has 4"):
        plan_placement([Demand("p0", 4, 5), Demand("p1", 8, 5)], 4)


def test_cuda_visible_devices_as_cuda_reads_it() -> None:
    uuids = ["GPU-aaaa-1", "GPU-bbbb-2", "GPU-cccc-3", "GPU-dddd-4"]
    assert visible_indices(4, uuids, {}) == [0, 1, 2, 3]
    assert visible_indices(4, uuids, {"CUDA_VISIBLE_DEVICES": "2,3"}) == [2, 3]
    assert visible_indices(4, uuids, {"CUDA_VISIBLE_DEVICES": "GPU-cccc,GPU-aaaa-1"}) == [2, 0]
    assert visible_indices(4, uuids, {"CUDA_VISIBLE_DEVICES": "1,7,2"}) == [1]  # ends at a bad entry
    assert visible_indices(4, uuids, {"CUDA_VISIBLE_DEVICES": ""}) == []


def test_job_outcomes() -> None:
    assert outcome_of(0) == JobOutcome("finished")
    assert outcome_of(130).state == "interrupted"
    assert outcome_of(-signal.SIGKILL) == JobOutcome("failed", "killed by SIGKILL")
    assert "an arm or the engine failed" in outcome_of(3).reason


# --- Slurm's parameters, on submitit's own executor -----------------------------------------------


def test_slurm_submission_on_submitits_executor(tmp_path: Path, monkeypatch) -> None:
    submitit = pytest.importorskip("submitit")
    monkeypatch.setattr(submitit.SlurmExecutor, "affinity", classmethod(lambda cls: 1))  # no srun here
    options = ExecutorOptions(name="slurm", partition="gpu", account="inference")
    spec = JobSpec("p1", 1, "h200_tp_study-p1", ["bench"], tmp_path / "p1.log", 2, 16, (), 798)
    executor = submitit.AutoExecutor(folder=tmp_path, cluster="slurm")
    executor.update_parameters(**slurm_parameters(spec, options))
    script = executor._executor._make_submission_file_text("python -m job", "UID")
    for line in (
        "#SBATCH --gpus-per-node=2",
        "#SBATCH --partition=gpu",
        "#SBATCH --account=inference",
        "#SBATCH --time=798",
        "#SBATCH --nodes=1",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --cpus-per-task=16",
        "#SBATCH --job-name=h200_tp_study-p1",
        "#SBATCH --signal=URG@90",  # not submitit's USR2, which kills the engine (executors.py says why)
        "#SBATCH --no-requeue",  # a point is run again by the study, never by Slurm
    ):
        assert line in script, script


# --- the dispatcher, with a stand-in executor ------------------------------------------------------


class FakeJob:
    def __init__(self, spec: JobSpec, outcome: JobOutcome, log_text: str, ticks: int) -> None:
        self.spec, self.outcome, self.ticks = spec, outcome, ticks
        self.job_id = f"fake:{spec.point}.{spec.attempt}"
        spec.log.parent.mkdir(parents=True, exist_ok=True)
        spec.log.write_text(log_text)

    def poll(self) -> JobOutcome | None:
        self.ticks -= 1
        return self.outcome if self.ticks < 0 else None

    def interrupt(self) -> None:
        self.outcome, self.ticks = JobOutcome("interrupted", "interrupted"), 0


class FakeExecutor:
    """Records what it was asked to run; its jobs end after a few polls with the outcome asked
    for. ``running_at_submit`` is how many other jobs ran when each one started."""

    def __init__(self, name: str, outcomes: dict[str, JobOutcome], attachable: set[str] = frozenset()):
        self.name, self.outcomes, self.attachable = name, outcomes, attachable
        self.specs: list[JobSpec] = []
        self.jobs: list[FakeJob] = []
        self.running_at_submit: list[int] = []
        self.completes: Path | None = None  # a run directory an attached job completes as it ends

    def submit(self, spec: JobSpec) -> FakeJob:
        self.running_at_submit.append(sum(1 for j in self.jobs if j.ticks >= 0))
        self.specs.append(spec)
        job = FakeJob(spec, self.outcomes.get(spec.point, JobOutcome("finished")), f"{spec.point} ran\n", 2)
        self.jobs.append(job)
        return job

    def attach(self, attempt):
        """A job that still runs; like a re-attached local job, it cannot tell how it exited."""
        if attempt.job_id in self.attachable:
            spec = JobSpec("re", 0, "", [], Path("/dev/null"), 0, 1, (), 1)
            job = FakeJob.__new__(FakeJob)
            unknown = JobOutcome("failed", "ended while no bench run watched it")
            job.spec, job.outcome, job.ticks, job.job_id = spec, unknown, 1, attempt.job_id
            if self.completes is not None:
                poll, run = job.poll, self.completes

                def poll_then_finish() -> JobOutcome | None:
                    outcome = poll()
                    if outcome is not None:
                        _finished_run(run)
                    return outcome

                job.poll = poll_then_finish
            return job
        return None

    def close(self) -> None:
        pass


def _finished_run(root: Path) -> None:
    """What a point's finished run leaves that the dispatcher reads: every arm's status ok."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "regime.json").write_text('{"schema_version": 6}')  # the run's version: its statuses' too
    for arm in ("baseline", "ngram"):
        (root / "arms" / arm).mkdir(parents=True, exist_ok=True)
        (root / "arms" / arm / "status.json").write_text('{"status": "ok"}')


def _study(tmp_path: Path, options: ExecutorOptions):
    study, plans = plan_study(CLUSTER_REGIME)
    directory = StudyDir.create(tmp_path, study.regime.name)
    record = study_record(study, options)
    directory.write(record)
    return directory, record, plans


def _dispatch(monkeypatch, directory, record, plans, executor: FakeExecutor) -> str:
    monkeypatch.setattr(study_run, "open_executor", lambda options, root: executor)
    monkeypatch.setattr(study_run, "load_study", lambda root: None)  # no run to summarise here
    monkeypatch.setattr(study_run, "POLL_S", 0.0)
    out = io.StringIO()
    Dispatcher(directory, directory.read(), plans, Console(file=out, width=200), False).run()
    return out.getvalue()


def test_cpu_points_run_one_at_a_time_with_their_output_shown(tmp_path: Path, monkeypatch) -> None:
    directory, record, plans = _study(tmp_path, ExecutorOptions(gpus=0))
    executor = FakeExecutor("local", {})
    out = _dispatch(monkeypatch, directory, record, plans, executor)
    assert [s.point for s in executor.specs] == ["p0", "p1"] and executor.running_at_submit == [0, 0]
    assert [s.devices for s in executor.specs] == [(), ()]
    assert "p0 ran" in out and "p1 ran" in out  # a lone job's log, shown as it comes
    saved = directory.read()
    assert [(p.attempts[0].state, p.attempts[0].run_dir) for p in saved.points] == [
        ("finished", "points/p0"),
        ("finished", "points/p1"),
    ]
    assert executor.specs[1].command[-3:] == ["p1", "--run-dir", "points/p1"]


def test_points_on_disjoint_gpus_run_side_by_side(tmp_path: Path, monkeypatch) -> None:
    directory, record, plans = _study(tmp_path, ExecutorOptions(gpus=4, gpus_per_point=2))
    executor = FakeExecutor("local", {})
    out = _dispatch(monkeypatch, directory, record, plans, executor)
    assert [s.devices for s in executor.specs] == [("0", "1"), ("2", "3")]
    assert executor.running_at_submit == [0, 1]  # p1 started while p0 ran
    assert "p0 ran" not in out  # two at once: events only, each log stays in its file
    assert [p.attempts[0].devices for p in directory.read().points] == [["0", "1"], ["2", "3"]]


def test_a_failed_job_is_recorded_and_its_point_gets_a_new_attempt(tmp_path: Path, monkeypatch) -> None:
    directory, record, plans = _study(tmp_path, ExecutorOptions(name="ray"))
    failing = FakeExecutor("ray", {"p1": JobOutcome("failed", "killed by SIGKILL")})
    out = _dispatch(monkeypatch, directory, record, plans, failing)
    p1 = directory.read().points[1].attempts[0]
    assert (p1.state, p1.reason, p1.log_tail) == ("failed", "killed by SIGKILL", "p1 ran")
    assert "p1: failed" in out and "killed by SIGKILL" in out
    # the failed attempt had started its run: a cluster job lands anywhere, so a new directory
    (directory.root / "points" / "p1").mkdir(parents=True)
    (directory.root / "points" / "p1" / "regime.json").write_text('{"schema_version": 6}')
    _finished_run(directory.root / "points" / "p0")
    retry = FakeExecutor("ray", {})
    out = _dispatch(monkeypatch, directory, directory.read(), plans, retry)
    assert "p0 (load.max_output_tokens=12): complete, kept" in out
    assert [s.point for s in retry.specs] == ["p1"]
    assert retry.specs[0].command[-2:] == ["--run-dir", "points/p1.attempt-2"]
    attempts = directory.read().points[1].attempts
    assert [(a.attempt, a.run_dir, a.state) for a in attempts] == [
        (1, "points/p1", "failed"),
        (2, "points/p1.attempt-2", "finished"),
    ]


def test_on_the_same_node_and_gpus_a_point_continues_in_place(tmp_path: Path, monkeypatch) -> None:
    directory, record, plans = _study(tmp_path, ExecutorOptions(gpus=4, gpus_per_point=2))
    _dispatch(monkeypatch, directory, record, plans, FakeExecutor("local", {"p1": JobOutcome("failed", "x")}))
    run = directory.root / "points" / "p1"
    run.mkdir(parents=True)
    (run / "regime.json").write_text('{"schema_version": 6}')
    placed = {"host": platform.node(), "cuda_visible_devices": "2,3"}
    (run / "placement.json").write_text(json.dumps(placed))
    _finished_run(directory.root / "points" / "p0")
    again = FakeExecutor("local", {"p1": JobOutcome("failed", "x")})
    _dispatch(monkeypatch, directory, directory.read(), plans, again)
    assert [s.command[-3:] for s in again.specs] == [["--run-dir", "points/p1", "--continue"]]
    # a GPU point given other GPUs is somewhere else; a CPU point's engine ignores them
    assert not study_run._same_place(run, ("0", "1"), cpu_point=False)
    assert study_run._same_place(run, ("2", "3"), cpu_point=False) and study_run._same_place(run, (), True)
    # elsewhere (another node), the same point starts a new attempt directory instead
    (run / "placement.json").write_text(json.dumps({**placed, "host": "another-node"}))
    third = FakeExecutor("local", {})
    _dispatch(monkeypatch, directory, directory.read(), plans, third)
    assert [s.command[-2:] for s in third.specs] == [["--run-dir", "points/p1.attempt-3"]]


def test_resume_re_attaches_to_a_running_job_or_records_it_gone(tmp_path: Path, monkeypatch) -> None:
    directory, record, plans = _study(tmp_path, ExecutorOptions(name="slurm"))
    points = [
        p.model_copy(
            update={
                "attempts": [
                    PointAttempt(
                        attempt=1,
                        run_dir=p.run_dir,
                        executor="slurm",
                        job_id=f"slurm:{100 + i}",
                        log=f"logs/{p.id}.1.log",
                        submitted_at="2026-11-30T00:00:00+00:00",
                    )
                ]
            }
        )
        for i, p in enumerate(record.points)
    ]
    directory.write(record.model_copy(update={"points": points}))
    executor = FakeExecutor("slurm", {}, attachable={"slurm:100"})
    executor.completes = directory.root / "points" / "p0"  # the re-attached job completes its run
    out = _dispatch(monkeypatch, directory, record, plans, executor)
    assert "p0 (load.max_output_tokens=12): re-attached to job slurm:100" in out
    assert [s.point for s in executor.specs] == ["p1"]  # p0's job was still running: not resubmitted
    (p0,) = directory.read().points[0].attempts
    assert p0.state == "finished" and p0.reason.endswith("its run is complete")
    p1 = directory.read().points[1].attempts
    assert p1[0].state == "failed" and "the job is gone" in p1[0].reason and p1[1].state == "finished"


# --- submitit's local and debug clusters running the real point command --------------------------


@pytest.mark.parametrize("cluster", ["debug", "local"])
def test_submitit_runs_the_point_command_and_reports_its_refusal(tmp_path: Path, cluster: str) -> None:
    pytest.importorskip("submitit")
    regime = tmp_path / "refused.yaml"
    text = CLUSTER_REGIME.read_text().replace("  kind: cpu\n", "  kind: cpu\n  cpu_model: NoSuchCPU 9000\n")
    text = text.replace("../../workloads/", f"{ROOT}/workloads/")
    regime.write_text(text)
    out = io.StringIO()
    options = ExecutorOptions(name="slurm", slurm_cluster=cluster, time_limit_min=5)
    _, results = study_run.run_study(regime, tmp_path / "results", Console(file=out, width=200), options)
    saved = results.record.points
    assert [a.state for p in saved for a in p.attempts] == ["failed", "failed"]
    first = saved[0].attempts[0]
    assert first.reason.startswith("exited with status 2") and first.job_id.startswith("slurm:")
    assert "NoSuchCPU" in first.log_tail  # the point's own refusal, from its log
    assert results.missing == ["p0", "p1"] and "p0: failed" in out.getvalue()


def test_a_version_1_study_reads_as_one_without_jobs(tmp_path: Path) -> None:
    """tests/fixtures/study_v1: a study.json as the harness wrote it before executors existed."""
    record = StudyDir(ROOT / "tests" / "fixtures" / "study_v1").read()
    assert record.schema_version == 2 and record.executor == ExecutorOptions()
    assert [(p.id, p.attempts, p.current_run_dir()) for p in record.points] == [
        ("p0", [], "points/p0"),
        ("p1", [], "points/p1"),
    ]


def test_ctrl_c_interrupts_the_running_jobs_and_records_it(tmp_path: Path, monkeypatch) -> None:
    directory, record, plans = _study(tmp_path, ExecutorOptions(gpus=4, gpus_per_point=2))
    executor = FakeExecutor("local", {})
    real_sleep = study_run.time.sleep
    polls = iter(range(1000))

    def sleep(seconds: float) -> None:
        if next(polls) == 0:  # Ctrl-C while both points' jobs run
            raise KeyboardInterrupt
        real_sleep(0)

    monkeypatch.setattr(study_run.time, "sleep", sleep)
    with pytest.raises(KeyboardInterrupt):
        _dispatch(monkeypatch, directory, record, plans, executor)
    assert [s.point for s in executor.specs] == ["p0", "p1"]
    assert [p.attempts[0].state for p in directory.read().points] == ["interrupted", "interrupted"]


def test_validate_prints_the_placement_plan_for_an_8_gpu_node() -> None:
    out = bench(
        "validate", str(ROOT / "regimes" / "h200_tp_study.yaml"), "--executor", "local", "--gpus", "8"
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Placement on this node, 8 GPUs (0,1,2,3,4,5,6,7)" in out.stdout
    for line in (
        "wave 1: p0 on GPUs 0, at once",
        "wave 1: p1 on GPUs 2,3, at once",
        "wave 1: p2 on GPUs 4,5,6,7, at once",
        "wave 2: p3 on GPUs 0,1,2,3,4,5,6,7, after p0, p1, p2",
    ):
        assert line in out.stdout
    slurm = bench(
        "validate", str(ROOT / "regimes" / "h200_tp_study.yaml"), "--executor", "slurm", "--time-limit", "90"
    )
    assert "p3: one job, 1 node, 8 GPUs, time limit 90 min" in slurm.stdout
    assert "hardware.cpu_count" not in slurm.stdout  # GPU points: nothing to say of CPUs
    too_small = bench(
        "run", str(ROOT / "regimes" / "h200_tp_study.yaml"), "--gpus", "4", "--results-dir", "/nonexistent"
    )
    assert too_small.returncode == 2 and "p3 needs 8 GPUs and this node has 4" in too_small.stdout
    assert "Traceback" not in too_small.stdout + too_small.stderr


def test_slurm_says_when_a_cpu_point_asks_for_no_cpus(tmp_path: Path) -> None:
    """A CPU point without a hardware.cpu_count pin goes to Slurm asking for no CPUs (one on a
    stock Slurm, beside other jobs): validate says so; a pinned one asks for its cores and is quiet."""
    regime = ROOT / "tests" / "regimes" / "cpu_cluster_e2e.yaml"
    unpinned = bench("validate", str(regime), "--executor", "slurm")
    assert unpinned.returncode == 0, unpinned.stdout + unpinned.stderr
    said = " ".join(unpinned.stdout.split())
    assert "note: p0, p1: a CPU point that pins no hardware.cpu_count asks Slurm for no CPUs" in said
    text = regime.read_text().replace("../../workloads/", f"{ROOT}/workloads/")
    pinned_path = tmp_path / "pinned.yaml"
    pinned_path.write_text(
        text.replace("hardware:\n  kind: cpu\n", "hardware:\n  kind: cpu\n  cpu_count: 1\n", 1)
    )
    pinned = bench("validate", str(pinned_path), "--executor", "slurm")
    assert pinned.returncode == 0, pinned.stdout + pinned.stderr
    assert "#SBATCH --cpus-per-task=1" in pinned.stdout and "hardware.cpu_count" not in pinned.stdout


def test_executor_options_are_for_studies_only() -> None:
    single = bench("run", str(ROOT / "tests" / "regimes" / "cpu_e2e.yaml"), "--executor", "ray")
    assert single.returncode == 2 and "apply to a study" in single.stdout
    negative = bench("validate", str(CLUSTER_REGIME), "--gpus-per-point", "0")
    assert negative.returncode == 2 and "--gpus-per-point must be positive" in negative.stdout


def test_a_study_spanning_two_gpu_models_says_so(tmp_path: Path) -> None:
    from harness.derive.study.collect import StudyResults
    from harness.present.study.tables import caveats

    study, _ = plan_study(CLUSTER_REGIME)
    record = study_record(study, ExecutorOptions(name="slurm"))
    run_dirs = {}
    for point, gpu in (("p0", "NVIDIA H200"), ("p1", "NVIDIA H100 80GB HBM3")):
        run_dirs[point] = tmp_path / point
        run_dirs[point].mkdir()
        environment = {
            "cpu_model": "Xeon",
            "gpus": [{"name": gpu, "memory_total_mib": 1, "power_limit_w": 700}],
        }
        (run_dirs[point] / "environment.json").write_text(json.dumps(environment))
    results = StudyResults(root=tmp_path, record=record, summaries={}, missing=[], run_dirs=run_dirs)
    (line,) = caveats(results)
    assert (
        "ran on different machines" in line
        and "p0: 1 x NVIDIA H200" in line
        and "p1: 1 x NVIDIA H100" in line
    )
    # the same model everywhere: nothing to say
    (run_dirs["p1"] / "environment.json").write_text((run_dirs["p0"] / "environment.json").read_text())
    assert (
        caveats(StudyResults(root=tmp_path, record=record, summaries={}, missing=[], run_dirs=run_dirs)) == []
    )


# --- a Slurm job's end, in Slurm's words -----------------------------------------------------------


class SubmititJobStandIn:
    """What SlurmJob reads of submitit's job: done(), sacct's State, the result or the error."""

    def __init__(
        self, states: list[str], result: int | None = 130, error: Exception | None = None, done: bool = True
    ) -> None:
        self.job_id, self.states, self.result_value, self.error = "42", states, result, error
        self.finished = done

    def done(self) -> bool:
        return self.finished

    def get_info(self, mode: str = "force") -> dict:
        return {"State": self.states.pop(0) if len(self.states) > 1 else self.states[0]}

    @property
    def state(self) -> str:
        return self.states[0]

    def exception(self):
        return self.error

    def result(self):
        return self.result_value


@pytest.mark.parametrize(
    ("state", "reason"),
    [
        ("CANCELLED by 0", "CANCELLED by 0: cancelled (scancel, or an administrator)"),
        ("TIMEOUT", "TIMEOUT: Slurm stopped it at its time limit (--time-limit, or the derived budget)"),
        ("PREEMPTED", "PREEMPTED: preempted by a higher-priority job"),
    ],
)
def test_a_job_slurm_ended_reads_in_slurms_words_not_as_its_commands_exit(
    state: str, reason: str, monkeypatch
) -> None:
    """The point's command stops on Slurm's SIGTERM like a Ctrl-C (exit 130: "interrupted");
    what happened is Slurm's to say, once the job has left the queue (its processes gone)."""
    from harness.run.study import executors

    asked: list[str] = []
    queued = [True]

    def in_queue(job_id: str) -> bool:
        asked.append(job_id)
        return queued.pop(0) if queued else False

    monkeypatch.setattr(executors, "_in_queue", in_queue)
    now = [0.0]
    monkeypatch.setattr(executors.time, "monotonic", lambda: now[0])
    for done in (True, False):  # with or without its output (a preempted job may leave none)
        queued[:], asked[:] = [True], []
        job = executors.SlurmJob(
            SubmititJobStandIn([state], done=done), cancel_on_interrupt=False, real_slurm=True
        )
        assert job.poll() is None  # COMPLETING: still stopping its servers (Slurm's KillWait)
        now[0] += 0.5
        assert job.poll() is None and len(asked) == 1  # the next poll, 0.5 s on: squeue not asked again
        now[0] += executors.FORCE_EVERY_S
        assert job.poll() == JobOutcome("failed", reason) and len(asked) == 2


def _clock(monkeypatch, step: float) -> None:
    from harness.run.study import executors

    clock = itertools.count()
    monkeypatch.setattr(executors.time, "monotonic", lambda: float(next(clock)) * step)


def test_a_job_whose_end_accounting_has_not_recorded_yet_is_waited_for(monkeypatch) -> None:
    from harness.run.study import executors

    _clock(monkeypatch, 10)  # ten seconds a call: well within SETTLE_S, every call forces sacct
    job = executors.SlurmJob(
        SubmititJobStandIn(["RUNNING", "COMPLETING", "COMPLETED"], result=0), False, True
    )
    assert job.poll() is None and job.poll() is None  # the output is in, sacct still says it runs
    assert job.poll() == JobOutcome("finished")  # then COMPLETED: the command's own exit status counts


def test_a_suspended_job_is_waited_for_and_an_unknown_one_given_up(monkeypatch) -> None:
    from harness.run.study import executors

    _clock(monkeypatch, 100)
    suspended = executors.SlurmJob(SubmititJobStandIn(["SUSPENDED"], result=0), False, True)
    assert all(suspended.poll() is None for _ in range(20))  # 2,000 s: it resumes when Slurm says
    unknown = executors.SlurmJob(SubmititJobStandIn(["UNKNOWN"], done=False), False, True)
    assert [unknown.poll() for _ in range(3)] == [None, None, None]
    outcome = unknown.poll()  # after UNKNOWN_GIVE_UP_S (300 s), not forever
    assert outcome.state == "failed" and outcome.reason.startswith("UNKNOWN: sacct does not know job 42")


def test_submitits_local_cluster_reads_the_commands_exit() -> None:
    from harness.run.study.executors import SlurmJob

    job = SlurmJob(SubmititJobStandIn(["FINISHED"], result=3), cancel_on_interrupt=True, real_slurm=False)
    assert job.poll() == JobOutcome(
        "failed", "exited with status 3 (an arm or the engine failed: see the run)"
    )


def _submitted_to_slurm(directory: StudyDir, record) -> None:
    """p0's first attempt as a Slurm job submitted by an earlier bench run (job 7), never collected."""
    attempt = PointAttempt(
        attempt=1, run_dir="points/p0", executor="slurm", job_id="slurm:7", log="logs/p0.1.log",
        submitted_at="2026-12-03T00:00:00+00:00",
    )  # fmt: skip
    first = record.points[0].model_copy(update={"attempts": [attempt]})
    directory.write(record.model_copy(update={"points": [first, *record.points[1:]]}))


def test_a_point_that_finished_while_no_bench_run_watched_is_recorded_finished(
    tmp_path: Path, monkeypatch
) -> None:
    directory, record, plans = _study(tmp_path, ExecutorOptions(name="slurm"))
    _submitted_to_slurm(directory, record)
    _finished_run(directory.root / "points" / "p0")
    executor = FakeExecutor("slurm", {})
    out = _dispatch(monkeypatch, directory, record, plans, executor)
    assert "p0 (load.max_output_tokens=12): complete, kept" in out
    assert [s.point for s in executor.specs] == ["p1"]
    (p0,) = directory.read().points[0].attempts
    assert (p0.state, p0.reason) == (
        "finished",
        "finished while no bench run watched it: collected from its run's files",
    )


def test_a_study_resumed_on_another_executor_follows_its_slurm_jobs_by_id(
    tmp_path: Path, monkeypatch
) -> None:
    """A Slurm job outlives its bench run: resumed with --executor local, the study follows the
    job (by its id, through sacct) instead of running the point a second time beside it."""
    directory, record, plans = _study(tmp_path, ExecutorOptions(name="local"))
    _submitted_to_slurm(directory, record)
    followed = []

    def attach_slurm(attempt, folder):
        followed.append((attempt.job_id, folder))
        job = FakeJob(
            JobSpec("p0", 1, "", [], directory.root / "logs" / "p0.1.log", 0, 1, (), 1),
            JobOutcome("finished"),
            "",
            1,
        )
        job.job_id = attempt.job_id
        return job

    monkeypatch.setattr(study_run, "attach_slurm", attach_slurm)
    executor = FakeExecutor("local", {})
    out = _dispatch(monkeypatch, directory, record, plans, executor)
    assert followed == [("slurm:7", directory.root / "slurm")]
    assert "re-attached to job slurm:7" in out and [s.point for s in executor.specs] == ["p1"]
