"""Fixtures shared between test modules. The real CPU engine's runs are the suite's cost (about
40 s per server start-up on the AVX2 machine's 2 cores), so a run that several modules can read
is made once per session."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.run.sensors.environment import describe_cpu
from tests.engine_site.zygote import ZYGOTE_ENV, start_zygote

try:
    from xdist.scheduler import LoadScopeScheduling
except ImportError:  # pytest without xdist (no -n): the lanes are not needed
    LoadScopeScheduling = object

# Under the README's two workers each torch in the suite (a drafter's training, hidden states,
# a model loaded in-process) runs one thread: the other core is an engine's, and two torch threads
# on one free core wait on each other (the torch stages ran ~2x longer beside an engine). The
# engine regimes under tests/regimes/ state their own OMP_NUM_THREADS=1.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parent.parent
# Every engine the suite starts forks its engine core instead of spawning it, and imports vLLM
# without cyclic GC (a start-up: 26.5 s of CPU instead of 43 on the 2-core AVX2 machine):
# tests/engine_site/sitecustomize.py says why and how.
# Processes started from here inherit it; the run records it (PYTHONPATH in environment.json).
ENGINE_SITE = ROOT / "tests" / "engine_site"
if str(ENGINE_SITE) not in os.environ.get("PYTHONPATH", "").split(os.pathsep):  # the workers inherit it
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ENGINE_SITE), os.environ.get("PYTHONPATH")]))
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


def wait_until(condition, timeout: float = 15.0, step: float = 0.1) -> bool:
    """Whether ``condition()`` came true within ``timeout`` seconds (asked every ``step``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(step)
    return bool(condition())


def engine_processes(launch: dict) -> list[str]:
    """Pids of processes still serving where a ``launch.json`` says its server listened (its Unix
    socket, or its port)."""
    where = f"--uds {re.escape(launch['uds'])}" if launch.get("uds") else f"--port {launch['port']}"
    out = subprocess.run(["pgrep", "-f", f"{where}( |$)"], capture_output=True, text=True)
    return out.stdout.split()


@contextlib.contextmanager
def local_server(script: Path, *args: str) -> Iterator[str]:
    """A small HTTP server of the tests' own (``script --port PORT ARGS``, no engine) in its own
    process, for as long as the block runs: its base URL once it accepts connections."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, str(script), "--port", str(port), *args])
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, f"{script.name} did not start"
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=10)


def stop(proc: subprocess.Popen) -> None:
    """A ``bench`` still running when its test failed: interrupted as a user would (Ctrl-C), so it
    stops its servers; killed if it does not end."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# The study's local resume gives every point 2 logical GPUs of a 4-GPU "node": the placement plan
# hands p1's continuation GPUs 2,3 (the engine ignores CUDA_VISIBLE_DEVICES, the executor and the
# records do not).
NODE = ("--gpus", "4", "--gpus-per-point", "2")
TIMEOUT_REGIME = ROOT / "tests" / "regimes" / "cpu_slurm_timeout.yaml"


def _wait_for(path_glob: str, root: Path, proc: subprocess.Popen, timeout: float = 900) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = sorted(root.glob(path_glob))
        if found:
            return found[0]
        assert proc.poll() is None, f"the study ended before {path_glob} appeared"
        time.sleep(0.2)
    raise AssertionError(f"no {path_glob} under {root} after {timeout} s")


def _wait_for_text(text: str, log: Path, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while text not in log.read_text(errors="replace"):
        assert proc.poll() is None, f"the bench run ended without saying {text!r}:\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"no {text!r} in {log} after {timeout} s"
        time.sleep(0.2)


@pytest.fixture(scope="session")
def slurm():
    """A real one-node Slurm cluster for the session (tests/slurm_cluster.py), or a skip where
    this machine cannot run one (.ci/run installs it and sets BENCH_REQUIRE_SLURM: there it must)."""
    from tests.slurm_cluster import missing, one_node_cluster

    why = missing()
    if why:
        if os.environ.get("BENCH_REQUIRE_SLURM"):
            pytest.fail(f"BENCH_REQUIRE_SLURM is set but the test cluster cannot start: {why}")
        pytest.skip(f"no Slurm test cluster on this machine: {why}")
    with one_node_cluster() as cluster:
        yield cluster


@pytest.fixture(scope="session")
def shared_study(tmp_path_factory, slurm) -> dict:
    """tests/regimes/cpu_study_e2e.yaml run on the REAL CPU engine, two points x baseline + ngram
    K=2 and K=4, submitted to a real one-node Slurm cluster (``slurm``) as one job per point, side
    by side on its 2 CPUs. Its history is the faults users meet on a cluster:

    1. while p1's last server starts, the dispatching ``bench run`` is killed (SIGKILL): its jobs
       run on; ``bench run --resume`` re-attaches to them by job id;
    2. once p1's last arm has measured its first window in its job, p1's job is cancelled
       (scancel): the resumed run records Slurm's CANCELLED, and p0 completes; meanwhile
       tests/regimes/cpu_slurm_timeout.yaml runs into its 1-minute limit;
    3. the study is resumed on the local executor (--gpus 4 --gpus-per-point 2): p1 continues in
       place on this node (its last arm only, measured again from its first window: what its job
       measured is kept aside, for the Slurm-vs-node comparison).

    The executor and Slurm tests read the steps, the study tests the finished study, the gate test
    gates copies of p0. One study serves them all (each start-up costs ~40 s on the AVX2 machine):
    7 start-ups, plus the timed-out point's one."""
    from harness.derive.study.collect import load_study
    from harness.run.server import group_alive

    results = tmp_path_factory.mktemp("results")
    env = {**slurm.env, "COLUMNS": "200"}

    started: list[subprocess.Popen] = []  # every bench run this fixture starts: stopped on the way out

    def start(*args: str, log: Path | None = None) -> subprocess.Popen:
        out = open(log, "w") if log is not None else subprocess.PIPE  # noqa: SIM115 (the child holds it)
        proc = subprocess.Popen(
            [*BENCH, *args], stdout=out, stderr=subprocess.STDOUT, text=True, cwd=ROOT, env=env
        )
        started.append(proc)
        return proc

    slurm_flags = ("--executor", "slurm", "--partition", slurm.partition)
    first_log, resumed_log = results / "first.out", results / "resumed.out"
    timeout_results = tmp_path_factory.mktemp("timeout")
    try:
        dispatcher = start(
            "run", str(STUDY_REGIME), "--results-dir", str(results), *slurm_flags, log=first_log
        )
        pgid_file = _wait_for(
            "cpu_study_e2e/study-*/points/p1/arms/ngram_k4/server.pgid", results, dispatcher
        )
        dispatcher.kill()  # 1. the dispatcher dies; Slurm runs the jobs on
        dispatcher.wait(timeout=30)
        study_dir = pgid_file.parents[4]
        server_pgid = int(pgid_file.read_text())
        killed_record = json.loads((study_dir / "study.json").read_text())
        queue_after_kill = slurm.queue()
        resumed = start("run", "--resume", str(study_dir), log=resumed_log)
        p1_job = killed_record["points"][1]["attempts"][0]["job_id"]
        _wait_for_text(f"re-attached to job {p1_job}\n", resumed_log, resumed)
        # 2. p1's job is cancelled once its last arm measured a window there (the node measures it again)
        _wait_for("points/p1/arms/ngram_k4/windows.jsonl", study_dir, resumed)
        slurm.run("scancel", p1_job.removeprefix("slurm:"))
        timeout_flags = ("--results-dir", str(timeout_results), *slurm_flags, "--time-limit", "1")
        timed_out = start("run", str(TIMEOUT_REGIME), *timeout_flags, log=timeout_results / "run.out")
        resumed.wait(timeout=900)
        ngram_k4 = study_dir / "points" / "p1" / "arms" / "ngram_k4" / "status.json"
        assert json.loads(ngram_k4.read_text())["status"] != "ok", (
            "p1's job finished its last arm before the scancel reached it: nothing was cancelled"
        )
        after_cancel = {
            "returncode": resumed.returncode,
            "stdout": resumed_log.read_text(),
            "record": json.loads((study_dir / "study.json").read_text()),
            "server_alive": group_alive(server_pgid),
        }
        p0 = study_dir / "points" / "p0"
        mtimes = {p: (p0 / p).stat().st_mtime_ns for p in ("summary.json", "arms/ngram_k4/samples.jsonl")}
        before = load_study(study_dir)  # p1 failed: p0's tables, to compare after the last resume
        # 3. (through start(): on a failure the finally below interrupts it, so its point's job,
        # in a session of its own, stops its server too)
        local_run = start("run", "--resume", str(study_dir), "--executor", "local", *NODE)
        local_out, _ = local_run.communicate(timeout=1500)
        local = subprocess.CompletedProcess(local_run.args, local_run.returncode, local_out, "")
        timed_out.wait(timeout=600)
    finally:
        for proc in started:
            stop(proc)
    assert local.returncode == 0, local.stdout[-4000:] + local.stderr[-3000:]
    (timeout_study,) = (timeout_results / "cpu_slurm_timeout").iterdir()
    return {
        "dir": study_dir,
        "killed": {"record": killed_record, "queue": queue_after_kill, "stdout": first_log.read_text()},
        "after_cancel": after_cancel,
        "p0_mtimes": mtimes,
        "p0_before": before,
        "resumed": local,
        "timeout": {
            "returncode": timed_out.returncode,
            "stdout": (timeout_results / "run.out").read_text(),
            "dir": timeout_study,
        },
        "jobs": slurm.jobs("cpu_study_e2e-p0", "cpu_study_e2e-p1", "cpu_slurm_timeout-p0"),
    }


# The README's command runs the suite on two workers (pytest-xdist, ``-n 2``), in two lanes. The
# engine's modules run one after another on the first worker, longest first; the second starts with
# the drafter builds (``SECOND_LANE``: one server at a time, half of it torch, nothing in it timed),
# whatever the first worker runs (the servers of tests/regimes/ compute on one thread:
# OMP_NUM_THREADS=1, and NUMBA_NUM_THREADS with it for ngram: docs/measuring.md). The unit and
# contract modules come last, on whichever worker is free: short units that end both lanes together
# (with the drafter builds at the end of the second lane, the first one idled ~4 minutes). Some
# engine units run two servers themselves (``TWO_SERVERS``: the study's two points, the end-to-end
# module's runs side by side). The second worker takes the other one-server engine units still
# queued (the production and fault tests) only while the first worker runs one server at most: the
# fault test's stall timeout must not see a neighbour's slowness. Measured on the AVX2-only EPYC:
# docs/measured.md#the-test-suite.
# The work goes out a module at a time (a module-scoped server starts once), the modules that read
# the session's study as one unit (the study is made once). xdist's own ``xdist_group`` mark cannot
# group them under pytest 9.2 (it rewrites ``item._nodeid``, which pytest no longer reads): the
# scheduler is below.
ENGINE_MODULES = frozenset(
    {
        "test_distill_engine.py",
        "test_end_to_end.py",
        "test_endpoints.py",
        "test_engine_faults.py",
        "test_gate_engine.py",
        "test_production_engine.py",
        "test_slurm.py",
        "test_study_engine.py",
        "test_study_executors_engine.py",
        "test_workload_pass.py",  # one run of the baseline alone: the workload pass on a pool of 10
    }
)
# the modules that read the session's study, or use its Slurm cluster (one cluster a session: a
# second one on another worker would share the first's munge socket)
STUDY_MODULES = frozenset(
    {"test_gate_engine.py", "test_slurm.py", "test_study_engine.py", "test_study_executors_engine.py"}
)
TWO_SERVERS = frozenset({"study", "test_end_to_end.py", "test_endpoints.py"})
SECOND_LANE = frozenset({"test_distill_engine.py"})
LONGEST_FIRST = (
    "study",  # 7 start-ups, two at a time (the timed-out point beside them)
    "test_distill_engine.py",  # drafter builds: one server at a time, and torch (the second lane's)
    "test_end_to_end.py",  # two runs side by side
    "test_production_engine.py",  # one run: its patched servers import vLLM twice, as users' do
    "test_engine_faults.py",  # one server at a time: whichever worker is free first
    "test_interval_coverage.py",  # 600 simulated runs of the harness's own functions
)
ENGINE_LANE = "gw0"


def _unit(module: str) -> str:
    return "study" if module in STUDY_MODULES else module


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items) -> None:
    strays = {
        it.path.name for it in items if {"shared_study", "slurm"} & set(it.fixturenames)
    } - STUDY_MODULES
    strays |= {it.path.name for it in items if it.get_closest_marker("engine")} - ENGINE_MODULES
    if strays:  # a study module apart would make the study twice; an engine module apart, two engines at once
        raise pytest.UsageError(f"tests/conftest.py: add {sorted(strays)} to ENGINE_MODULES / STUDY_MODULES")

    def rank(item) -> int:
        unit = _unit(item.path.name)
        return LONGEST_FIRST.index(unit) if unit in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: within a unit, the collection order stands


def _unit_of(scope: str) -> str:
    return scope if scope == "study" else Path(scope).name


def _engine(scope: str) -> bool:
    return scope == "study" or Path(scope).name in ENGINE_MODULES


class Lanes(LoadScopeScheduling):
    """A work unit per module (the study's modules one unit), handed out in collection order
    (the addopts' --no-loadscope-reorder keeps xdist from sorting them by test count): engine
    units to the engine lane, the others to whichever worker asks; a one-server engine unit to
    the other worker when it has nothing else and the engine lane runs one server."""

    def _split_scope(self, nodeid: str) -> str:
        module = Path(nodeid.split("::", 1)[0]).name
        return "study" if module in STUDY_MODULES else nodeid.split("::", 1)[0]

    def _servers_elsewhere(self, node) -> int:
        """Servers the other workers' unfinished units run (1 or 2 each)."""
        return sum(
            2 if _unit_of(scope) in TWO_SERVERS else 1
            for other, units in self.assigned_work.items()
            if other is not node
            for scope, tests in units.items()
            if _engine(scope) and not all(tests.values())
        )

    def _one_server_units(self, node) -> list[str]:
        """For the other worker, its own work done (at most its last test left, which it runs
        once it knows what comes next): the one-server engine units still queued, while the engine
        lane runs one server; []: wait (asked again as the engine lane's tests end)."""
        single = [s for s in self.workqueue if _engine(s) and _unit_of(s) not in TWO_SERVERS]
        if not single or self._pending_of(self.assigned_work.get(node, {})) > 1:
            return []
        return single if self._servers_elsewhere(node) <= 1 else []

    def _assign_work_unit(self, node) -> None:
        lane = node.gateway.id == ENGINE_LANE
        second = [s for s in self.workqueue if not _engine(s) or _unit_of(s) in SECOND_LANE]
        first = [s for s in self.workqueue if s not in second]
        # the second lane's engine units before its own tests (the queue is longest first): the
        # unit modules, short, fill both lanes at the end
        second.sort(key=lambda scope: not _engine(scope))
        eligible = (first or second) if lane else second
        if not eligible and not lane:
            if not any(_engine(s) for s in self.workqueue):
                node.shutdown()  # what is left is the engine lane's own
                return
            units = self._one_server_units(node)
            if not units:
                return
            for unit in units:
                self._send(node, unit)
            # its last units: a worker runs its last test only once it knows what comes next, or
            # at shutdown (a one-test module would wait for the end of the session otherwise)
            node.shutdown()
            return
        if not eligible:
            node.shutdown()
            return
        self._send(node, eligible[0])

    def _send(self, node, scope: str) -> None:
        work_unit = self.workqueue.pop(scope)
        self.assigned_work.setdefault(node, {})[scope] = work_unit
        collection = self.registered_collections[node]
        node.send_runtest_some([collection.index(n) for n, done in work_unit.items() if not done])

    def mark_test_complete(self, node, item_index: int, duration: float = 0) -> None:
        super().mark_test_complete(node, item_index, duration)
        # A waiting worker may take a unit (or stop) once this one moved on. It waits holding its
        # last test unrun (a worker runs a test once it knows the next one, or at shutdown).
        for other in self.nodes:
            if (
                other is not node
                and not other.shutting_down
                and self._pending_of(self.assigned_work.get(other, {})) <= 1
            ):
                self._reschedule(other)


def pytest_xdist_make_scheduler(config, log):
    return Lanes(config, log)


# The session's zygote (tests/engine_site/zygote.py): vLLM's API server imported once, and each
# unpatched server a test's bench process starts a fork of it, in its own session and process group
# (a start-up cost ~11 core-seconds less on the 2-core AVX-512 EPYC). The controller starts it
# before the workers exist, with the environment the test regimes give their servers (tests/regimes/:
# engine.env, and what harness.config.engines.vllm adds on a CPU), so that their requests match it; a server
# whose environment differs in what vLLM's import reads starts as users' do; a Slurm job's servers
# come from a zygote of the job's own (zygote.own_zygote). BENCH_TEST_ZYGOTE=0: no zygote.
ZYGOTE_SERVER_ENV = {
    "OMP_NUM_THREADS": "1",
    "NUMBA_NUM_THREADS": "1",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_SERVER_DEV_MODE": "1",
    "VLLM_CPU_KVCACHE_SPACE": "2",
}


def _engine_tests_selected(config) -> bool:
    if "not engine" in (config.getoption("markexpr", "") or ""):
        return False
    for arg in config.args:
        path = Path(arg.split("::")[0])
        path = path if path.is_absolute() else Path(config.invocation_params.dir) / path
        if path.is_dir() or path.name in ENGINE_MODULES:
            return True
    return False


def pytest_configure(config) -> None:
    inherited = os.environ.get("PYTEST_XDIST_WORKER") or ZYGOTE_ENV in os.environ  # or BENCH_TEST_ZYGOTE=0
    if inherited or not _engine_tests_selected(config):
        return
    process, socket_path = start_zygote({**os.environ, **ZYGOTE_SERVER_ENV}, cwd=ROOT, start_new_session=True)
    os.environ[ZYGOTE_ENV] = socket_path  # its socket appears once vLLM is imported
    directory = Path(socket_path).parent
    config.stash[_ZYGOTE] = (process, directory)


_ZYGOTE = pytest.StashKey[tuple]()


def pytest_terminal_summary(terminalreporter, config) -> None:
    # The suite's time turns on the CPU kind (docs/measured.md#per-machine-kind): the summary names
    # it, so that the tail of a CI log, all that CI keeps, says which kind its durations are from.
    terminalreporter.write_line(f"machine: {describe_cpu()}")
    if _ZYGOTE not in config.stash:
        return
    _, directory = config.stash[_ZYGOTE]
    path = directory / "zygote.log"
    log = path.read_text(errors="replace").splitlines() if path.is_file() else []
    if not any(" imported " in line for line in log):  # its import failed, or is not done yet
        why = log[-1] if log else "no log"
        terminalreporter.write_line(f"engine zygote (tests/engine_site/zygote.py): never served ({why})")
        return
    forked = sum(" forked " in line for line in log)
    refused = [line.split("differs in ", 1)[-1] for line in log if " refused " in line]
    why = f" (their environment differs in: {'; '.join(sorted(set(refused)))})" if refused else ""
    terminalreporter.write_line(
        f"engine zygote (tests/engine_site/zygote.py): {forked} servers forked, {len(refused)} started "
        f"as users' do{why}"
    )


def pytest_unconfigure(config) -> None:
    if _ZYGOTE not in config.stash:
        return
    process, directory = config.stash[_ZYGOTE]
    stop(process)
    shutil.rmtree(directory, ignore_errors=True)
