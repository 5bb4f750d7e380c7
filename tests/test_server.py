"""Server lifecycle: readiness, fail-fast on death, timeout, and teardown of the whole group."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from harness.core.errors import EngineError
from harness.run.server import Server, free_port, group_alive

CHILD = Path(__file__).parent / "lifecycle_child.py"


def _server(tmp_path: Path, mode: str) -> tuple[Server, Path]:
    port = free_port()
    pid_file = tmp_path / "pids"
    argv = [sys.executable, str(CHILD), mode, str(port), str(pid_file)]
    return Server(argv, {}, port, tmp_path / "server.log", "/health"), pid_file


def _pids(pid_file: Path) -> list[int]:
    deadline = time.monotonic() + 10
    while not pid_file.exists() or not pid_file.read_text().endswith("\n"):
        assert time.monotonic() < deadline, "child never wrote its pids"
        time.sleep(0.05)
    return [int(p) for p in pid_file.read_text().split()]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def test_ready_then_teardown_kills_grandchildren(tmp_path: Path) -> None:
    server, pid_file = _server(tmp_path, "healthy")
    with server:
        assert server.wait_ready(timeout_s=30) >= 0
        leader, grandchild = _pids(pid_file)
        assert _alive(grandchild)
    assert not _alive(leader) and not _alive(grandchild)
    assert not group_alive(leader)


def test_death_during_startup_fails_fast_with_log_tail(tmp_path: Path) -> None:
    server, pid_file = _server(tmp_path, "crash")
    started = time.monotonic()
    with server, pytest.raises(EngineError) as info:
        server.wait_ready(timeout_s=60)
    assert time.monotonic() - started < 30
    assert "exited with status 7" in str(info.value)
    assert "pretend the model failed to load" in str(info.value)
    # the crashed leader's grandchild must not survive the teardown either
    assert not _alive(_pids(pid_file)[1])


def test_startup_timeout(tmp_path: Path) -> None:
    server, pid_file = _server(tmp_path, "hang")
    with server, pytest.raises(EngineError, match="not ready after 2 s"):
        server.wait_ready(timeout_s=2)
    assert not any(_alive(pid) for pid in _pids(pid_file))


def test_sigterm_ignored_gets_sigkill(tmp_path: Path, monkeypatch) -> None:
    import harness.run.server as server_module

    original = server_module.kill_group
    monkeypatch.setattr(server_module, "kill_group", lambda pgid: original(pgid, grace_s=1.0))
    server, pid_file = _server(tmp_path, "stubborn")
    with server:
        server.wait_ready(timeout_s=30)
        pids = _pids(pid_file)
    assert not any(_alive(pid) for pid in pids)


def test_free_port_is_bindable() -> None:
    import socket

    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))  # raises if the port were taken


def test_a_server_on_a_unix_socket_listens_where_only_this_user_can_connect(tmp_path: Path) -> None:
    """The harness's vLLM servers listen on a Unix socket in a fresh directory of mode 0700 (no
    port another listener could hold, no route another user could reach); stopping removes it."""
    import stat

    from harness.run.server import unix_socket_path

    uds = unix_socket_path()
    pid_file = tmp_path / "pids"
    argv = [sys.executable, str(CHILD), "healthy", str(uds), str(pid_file)]
    server = Server(argv, {}, 0, tmp_path / "server.log", "/health", uds=uds)
    with server:
        server.wait_ready(timeout_s=30)
        assert server.base_url == f"unix:{uds}"
        assert stat.S_IMODE(uds.parent.stat().st_mode) == 0o700 and uds.parent.stat().st_uid == os.getuid()
        from harness.run import engine_http as http

        with http.client(2.0, server.base_url) as client:
            assert client.get("http://localhost/health").status_code == 200
    assert not uds.parent.exists()
