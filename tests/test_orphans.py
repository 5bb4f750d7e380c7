"""No engine outlives the bench that started it (without an engine: tests/lifecycle_child.py plays
the server's process group). A bench killed with SIGKILL runs no teardown: the kernel sends its
server SIGTERM (PR_SET_PDEATHSIG); a group a killed bench left behind is stopped by the next
bench run or resume of the regime, unless a live bench holds that run; a second Ctrl-C cannot cut
the teardown short; the run lock is an flock a dead writer cannot keep."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.core.errors import UserError
from harness.results.files import RunDir, lock_held, writer_lock
from harness.run.server import PGID_FILE, group_alive, reap_abandoned
from tests.conftest import wait_until

ROOT = Path(__file__).resolve().parent.parent
CHILD = ROOT / "tests" / "lifecycle_child.py"


# A stand-in bench: starts a Server the way the runner does, prints its group, then waits.
STARTER = """
import sys, time
from pathlib import Path
from harness.run.server import Server, free_port
port = free_port()
root = Path(sys.argv[1])
server = Server([sys.executable, sys.argv[2], "healthy", str(port), str(root / "pids")], {}, port,
                root / "server.log", "/health")
server.start()
server.wait_ready(30)
print(server.process.pid, flush=True)
time.sleep(600)
"""


def test_a_bench_killed_by_sigkill_leaves_no_server(tmp_path: Path) -> None:
    bench = subprocess.Popen(
        [sys.executable, "-c", STARTER, str(tmp_path), str(CHILD)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        pgid = int(bench.stdout.readline())
        assert group_alive(pgid)
        bench.kill()  # SIGKILL: no handler, no finally, no teardown
        bench.wait(timeout=10)
        leader_gone = wait_until(lambda: not Path(f"/proc/{pgid}").exists() or _zombie(pgid))
        assert leader_gone, "the server outlived the bench that started it"
    finally:
        if bench.poll() is None:
            bench.kill()
        for pid in (tmp_path / "pids").read_text().split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def _left_running(run: Path, arm: str) -> int:
    """A server group as a killed bench leaves it: running, named in server.pgid, its port in
    launch.json."""
    from harness.run.server import free_port

    port = free_port()
    arm_dir = run / "arms" / arm
    arm_dir.mkdir(parents=True)
    child = subprocess.Popen(
        [sys.executable, str(CHILD), "healthy", str(port), str(arm_dir / "pids")], start_new_session=True
    )
    (arm_dir / PGID_FILE).write_text(f"{child.pid}\n")
    (arm_dir / "launch.json").write_text(json.dumps({"argv": [], "env": {}, "port": port}))
    assert wait_until(lambda: (arm_dir / "pids").exists())
    return child.pid


def test_the_next_run_stops_what_a_killed_bench_left_and_keeps_a_live_ones(tmp_path: Path) -> None:
    regime = tmp_path / "results" / "cpu_x"
    abandoned, live = regime / "20261202-000000-aaaaaa", regime / "20261202-000001-bbbbbb"
    dead_group, live_group = _left_running(abandoned, "baseline"), _left_running(live, "baseline")
    holder = subprocess.Popen(  # another bench, alive, writing its run
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from harness.results.files import writer_lock\n"
            "with writer_lock(Path(sys.argv[1])):\n    print('locked', flush=True); time.sleep(600)",
            str(live / "run.lock"),
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert holder.stdout.readline().strip() == "locked" and lock_held(live / "run.lock")
        assert reap_abandoned(regime) == [dead_group]
        assert not group_alive(dead_group) and group_alive(live_group)
        assert not (abandoned / "arms" / "baseline" / PGID_FILE).exists()
        holder.kill()  # its writer dies: the lock goes with it, the next run reaps its server too
        holder.wait(timeout=10)
        assert not lock_held(live / "run.lock")
        assert reap_abandoned(regime) == [live_group] and not group_alive(live_group)
    finally:
        for group in (dead_group, live_group):
            try:
                os.killpg(group, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if holder.poll() is None:
            holder.kill()


def test_a_group_whose_command_line_is_another_process_is_never_stopped(tmp_path: Path) -> None:
    run = tmp_path / "run"
    group = _left_running(run, "baseline")
    try:  # the recorded port is not this process's: a pid reused by something else
        (run / "arms" / "baseline" / "launch.json").write_text(json.dumps({"port": 1}))
        assert reap_abandoned(run) == [] and group_alive(group)
    finally:
        os.killpg(group, signal.SIGKILL)


def test_a_second_interrupt_does_not_cut_the_teardown_short() -> None:
    from harness import cli

    saved = {s: signal.getsignal(s) for s in cli._STOP_SIGNALS}
    try:
        for s in cli._STOP_SIGNALS:
            signal.signal(s, cli._raise_interrupt)
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
        torn = False
        try:
            os.kill(os.getpid(), signal.SIGINT)  # the user presses Ctrl-C again while servers stop
            time.sleep(0.2)
        except KeyboardInterrupt:
            torn = True
        assert not torn and signal.getsignal(signal.SIGTERM) is cli._while_stopping
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)


def test_the_run_lock_is_released_by_a_writer_killed_with_sigkill(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path, "r")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from harness.results.files import RunDir\n"
            "with RunDir(Path(sys.argv[1])).lock():\n    print('locked', flush=True); time.sleep(600)",
            str(run.root),
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(UserError, match=f"another bench process \\(pid {holder.pid}\\)"), run.lock():
            pass
        holder.kill()
        holder.wait(timeout=10)
        assert (run.root / "run.lock").exists()  # left behind by the killed writer, but not held
        with run.lock():
            assert (run.root / "run.lock").read_text().strip() == str(os.getpid())
        with writer_lock(tmp_path / "other.lock"):
            assert lock_held(tmp_path / "other.lock")
        assert not lock_held(tmp_path / "other.lock")
    finally:
        if holder.poll() is None:
            holder.kill()


# --- the right server answers: a port another process took is never measured --------------------


@pytest.fixture
def decoy():
    """Another process's HTTP server on a port, answering 200 to everything (a listener that
    took the port the harness chose, between its choice and the engine's bind)."""
    import http.server
    import threading

    class Yes(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Yes)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()


def test_a_server_whose_port_was_taken_is_never_declared_ready(tmp_path: Path, decoy: int) -> None:
    from harness.run.server import PortTaken, Server

    argv = [sys.executable, str(CHILD), "healthy", str(decoy), str(tmp_path / "pids")]
    with Server(argv, {}, decoy, tmp_path / "server.log", "/health") as server, pytest.raises(PortTaken):
        server.wait_ready(timeout_s=30)  # the decoy answers 200; the child cannot bind


def test_a_run_whose_port_was_taken_starts_again_on_another(
    tmp_path: Path, decoy: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    import harness.run.server
    from tests.test_run_plan import stand_in_run

    ports = iter([decoy])
    real = harness.run.server.free_port
    monkeypatch.setattr(harness.run.server, "free_port", lambda: next(ports, None) or real())
    run, summary, printed, _, _ = stand_in_run(tmp_path, monkeypatch)
    assert [a.status for a in summary.arms] == ["ok", "ok"], printed
    assert f"port {decoy}: another process answers there, not this server" in printed
    assert "starting on another port" in printed
    launches = [json.loads((run.arm_dir(a) / "launch.json").read_text()) for a in ("baseline", "ngram_k4")]
    assert decoy not in [launch["port"] for launch in launches]


@pytest.mark.parametrize("served_key", ["this-start", "another"])
def test_a_keyed_server_is_ready_only_when_it_knows_this_starts_key(tmp_path: Path, served_key: str) -> None:
    """A keyed engine (SGLang) is ready when a route behind its key answers with this start's key:
    a server that refuses it is another server on the port."""
    from harness.run.server import PortTaken, Server, free_port

    port = free_port()
    argv = [sys.executable, str(CHILD), "keyed", str(port), str(tmp_path / "pids")]
    env = {"LIFECYCLE_KEY": served_key}
    with Server(argv, env, port, tmp_path / "server.log", "/health", api_key="this-start") as server:
        if served_key == "this-start":
            assert server.wait_ready(timeout_s=30) >= 0
        else:
            with pytest.raises(PortTaken, match="refuses this start's key"):
                server.wait_ready(timeout_s=30)


def test_a_server_that_never_started_leaves_no_private_directory(tmp_path: Path) -> None:
    """Its socket directory is made when the server is built; a start-up given up before its
    process existed (stopped without a start) must not leave it behind in /tmp."""
    from harness.run.server import Server, unix_socket_path

    uds = unix_socket_path()
    server = Server(["/bin/true"], {}, 0, tmp_path / "server.log", "/health", uds=uds)
    assert uds.parent.is_dir()
    server.stop()  # never started
    assert not uds.parent.exists()


def test_a_server_that_died_with_its_bench_leaves_no_private_directory(tmp_path: Path) -> None:
    """A bench killed with SIGKILL while its server starts: the kernel stops the server (its
    parent-death signal) before anyone reads its pid file; the next run still removes the file and the
    server's private socket directory (``/tmp/bench-engine-*``), which nobody else would."""
    import tempfile

    from harness.run.server import SOCKET_DIR_PREFIX

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(timeout=30)  # a pid that no process has any more
    private = Path(tempfile.mkdtemp(prefix=SOCKET_DIR_PREFIX))
    arm = tmp_path / "cpu_x" / "20261202-000000-aaaaaa" / "arms" / "baseline"
    arm.mkdir(parents=True)
    (arm / PGID_FILE).write_text(f"{gone.pid}\n")
    (arm / "launch.json").write_text(json.dumps({"argv": [], "env": {}, "uds": str(private / "engine.sock")}))
    try:
        assert reap_abandoned(tmp_path / "cpu_x") == []  # nothing alive to stop
        assert not private.exists() and not (arm / PGID_FILE).exists()
    finally:
        if private.exists():
            private.rmdir()


def test_a_servers_child_left_without_its_leader_is_found_by_its_mark(tmp_path: Path) -> None:
    """bench SIGKILLed, then the server itself: its forked child (same group, reparented) used to
    survive every later run and resume (stop_left_running acted only while the leader lived). Now
    the group's processes that carry the arm's mark are stopped; an unmarked one is not."""
    from harness.run.server import SERVER_MARK, free_port, stop_left_running

    def started(run: Path, mark: bool) -> tuple[int, int]:
        arm_dir = run / "arms" / "ngram_k4"
        arm_dir.mkdir(parents=True)
        env = {**os.environ, **({SERVER_MARK: str(arm_dir.resolve())} if mark else {})}
        port = free_port()
        leader = subprocess.Popen(
            [sys.executable, str(CHILD), "healthy", str(port), str(arm_dir / "pids")],
            start_new_session=True,
            env=env,
        )
        (arm_dir / PGID_FILE).write_text(f"{leader.pid}\n")
        (arm_dir / "launch.json").write_text(json.dumps({"argv": [], "env": {}, "port": port}))
        assert wait_until(lambda: (arm_dir / "pids").exists() and (arm_dir / "pids").read_text().strip())
        child = int((arm_dir / "pids").read_text().split()[1])
        leader.kill()  # the server dies; its engine-core-like child lives on in the group
        leader.wait(timeout=10)
        return leader.pid, child

    marked_group, marked_child = started(tmp_path / "marked", mark=True)
    other_group, other_child = started(tmp_path / "other", mark=False)
    try:
        assert group_alive(marked_group) and group_alive(other_group)  # the children, leaderless
        assert stop_left_running(tmp_path / "marked") == [marked_group]
        assert wait_until(lambda: not group_alive(marked_group))
        assert stop_left_running(tmp_path / "other") == [] and group_alive(other_group)
    finally:
        for pid in (marked_child, other_child):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
