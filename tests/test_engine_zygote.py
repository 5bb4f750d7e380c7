"""The tests' engine zygote (tests/engine_site/zygote.py) forks a server only where a freshly
started one would be the same process: what it refuses, without an engine (the end-to-end test
checks a forked server's answers against a fresh one's), and a fork of a small module of the
standard library, end to end: its argv, descriptors, output and exit status."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
from pathlib import Path

import pytest

from tests.conftest import wait_until
from tests.engine_site import zygote
from tests.engine_site.zygote import (
    IN_A_JOB,
    SERVER,
    STAGES,
    ZYGOTE_ENV,
    env_difference,
    fork,
    fork_server,
    fork_stage,
    start_zygote,
)


def test_only_what_no_import_reads_may_differ() -> None:
    mine = {"PATH": "/bin", "OMP_NUM_THREADS": "1", "HF_ENDPOINT": "https://huggingface.co"}
    noise = {"PYTEST_CURRENT_TEST": "t", "BENCH_X": "1", "HF_TOKEN": "s", "TMPDIR": "/var/tmp"}
    theirs = {**mine, **noise, "CUDA_VISIBLE_DEVICES": "2,3", ZYGOTE_ENV: "/tmp/z.sock"}
    assert env_difference(mine, theirs) == []
    read_at_import = {"OMP_NUM_THREADS": "2", "HF_ENDPOINT": "https://x.invalid", "PYTHONPATH": "/patch"}
    assert env_difference(mine, {**theirs, **read_at_import}) == sorted(read_at_import)
    assert env_difference(mine, {"OMP_NUM_THREADS": "1", "HF_ENDPOINT": "https://huggingface.co"}) == ["PATH"]
    # a Slurm job's variables are no noise: its servers come from a zygote inside the job
    assert env_difference(mine, {**mine, "SLURM_JOB_ID": "7", "SUBMITIT_FOLDER": "/f"}) == [
        "SLURM_JOB_ID",
        "SUBMITIT_FOLDER",
    ]


def test_a_slurm_jobs_server_and_other_commands_never_ask_the_sessions(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "zygote.sock"
    asked = []  # a Slurm job's server asks its bench process's own zygote (here: none there)
    monkeypatch.setattr(
        zygote,
        "own_zygote",
        lambda module, env: asked.append((module, env.get(IN_A_JOB))) or str(tmp_path / "no"),
    )
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(path))
        listener.listen(1)
        listener.setblocking(False)
        server = [sys.executable, "-m", SERVER, "--port", "8000"]
        assert fork_server(server, {ZYGOTE_ENV: str(path), IN_A_JOB: "42"}, 0, 1, 2) is None
        assert asked == [(SERVER, "42")]
        assert fork_server([sys.executable, "-m", "http.server"], {ZYGOTE_ENV: str(path)}, 0, 1, 2) is None
        assert fork_server(server, {ZYGOTE_ENV: "0"}, 0, 1, 2) is None
        # a torch stage asks this process's own stage zygote, a server never does
        stage = [sys.executable, "-m", STAGES, "train", "/w"]
        assert fork_server(stage, {ZYGOTE_ENV: str(path)}, 0, 1, 2) is None
        assert fork_stage(stage, {ZYGOTE_ENV: str(path)}, 0, 1, 2) is None
        assert asked[1:] == [(STAGES, None)]
        assert fork_stage(stage, {ZYGOTE_ENV: "0"}, 0, 1, 2) is None and len(asked) == 2
        assert fork_stage(server, {ZYGOTE_ENV: str(path)}, 0, 1, 2) is None and len(asked) == 2
        with pytest.raises(BlockingIOError):  # nobody connected to the session's zygote
            listener.accept()


def test_a_fork_runs_its_module_as_python_m_runs_it(tmp_path: Path) -> None:
    """A zygote of the standard library's json.tool (imported once, forked per request): the fork
    shows its own argv in /proc, reads and writes the descriptors it was sent, exits with the
    status ``python -m json.tool`` gives; another module, or an environment that differs in what an
    import could read, is refused (the caller starts its process itself)."""
    env = {**os.environ, ZYGOTE_ENV: "0"}
    process, path = start_zygote(env, "json.tool")
    try:
        args = [sys.executable, "-m", "json.tool", "--sort-keys"]
        read, write = os.pipe()
        with open(tmp_path / "out", "w+b") as out:
            forked = fork(path, args, env, read, out.fileno(), out.fileno())
            os.close(read)
            assert forked is not None
            with open(f"/proc/{forked.pid}/cmdline", "rb") as cmdline:  # while it waits for its input
                # its argv, NUL-separated as exec leaves it (then the NULs of the zygote's padding)
                assert cmdline.read().rstrip(b"\0").split(b"\0") == [arg.encode() for arg in args]
            assert os.getpgid(forked.pid) == os.getsid(forked.pid) == forked.pid  # its own session
            assert forked.poll() is None
            os.write(write, b'{"b": 1, "a": [1, 2]}')
            os.close(write)
            assert forked.wait(timeout=30) == 0
            out.seek(0)
            assert out.read().decode() == json.dumps({"a": [1, 2], "b": 1}, indent=4, sort_keys=True) + "\n"
        with open(tmp_path / "bad", "w+b") as bad:
            bad.write(b"{not json")
            bad.seek(0)
            forked = fork(path, args, env, bad.fileno(), bad.fileno(), bad.fileno())
            assert forked is not None and forked.wait(timeout=30) == 1  # SystemExit(an error): 1
        with open(os.devnull, "rb") as devnull:
            other = [sys.executable, "-m", "http.server"]
            assert fork(path, other, env, devnull.fileno(), 1, 2) is None
            assert fork(path, args, {**env, "OMP_NUM_THREADS": "7"}, devnull.fileno(), 1, 2) is None
        log = (Path(path).parent / "zygote.log").read_text()
        assert (
            log.count(" forked ") == 2
            and "differs in what it runs" in log
            and "differs in OMP_NUM_THREADS" in log
        )
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert not Path(path).parent.exists()  # it removes its directory as it ends


def test_a_zygote_and_its_forks_end_with_the_process_that_started_it(tmp_path: Path) -> None:
    """A process's own zygote (a stage zygote's way) whose starter is killed with SIGKILL (no
    atexit runs): the zygote stops, its fork gets SIGTERM (its input stays open: only a signal
    ends it), its directory goes. Nothing is left."""
    import shutil
    import signal
    import subprocess

    from harness.run.server import group_alive

    read, write = os.pipe()  # the fork's input: the write end stays here, open, to the end
    starter = f"""
import os, sys, time
sys.path.insert(0, {str(Path(zygote.__file__).parent)!r})
import zygote
env = {{**os.environ, zygote.ZYGOTE_ENV: "0"}}
path = zygote.own_zygote("json.tool", env)
forked = zygote.fork(path, [sys.executable, "-m", "json.tool"], env, {read}, 1, 2)
print(zygote._OWN["json.tool"][0].pid, forked.pid, path, flush=True)
time.sleep(120)
"""
    proc = subprocess.Popen(
        [sys.executable, "-c", starter], stdout=subprocess.PIPE, text=True, pass_fds=(read,)
    )
    os.close(read)
    started: list[int] = []
    path = ""
    try:
        zygote_pid, fork_pid, path = proc.stdout.readline().split()
        started += [int(zygote_pid), int(fork_pid)]
        assert all(group_alive(pid) for pid in started)  # each its own session
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        wait_until(lambda: not any(map(group_alive, started)) and not Path(path).parent.exists(), 30)
        assert not group_alive(int(fork_pid)), "the fork outlived its starter"
        assert not group_alive(int(zygote_pid)), "the zygote outlived its starter"
        assert not Path(path).parent.exists(), "the zygote left its directory"
    finally:
        os.close(write)
        proc.kill()
        proc.wait()
        proc.stdout.close()
        for pid in started:  # what a failure above left
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        if path:
            shutil.rmtree(Path(path).parent, ignore_errors=True)
