"""The life of one engine server: start, wait until ready, stop without leaving anything behind.

- The server runs in its own process group (``start_new_session``), so teardown can signal the
  whole group: vLLM forks an engine-core process (and workers) that outlive a killed parent.
- Output goes to a log file per arm, never to a pipe nobody reads.
- Readiness polls the health endpoint with a SHORT client timeout, because vLLM binds its
  socket before the model loads (a TCP connect succeeds early and requests hang), and checks
  on every poll that the process is still alive, failing fast with the tail of the log.
- Every started group is registered so an interrupted ``bench run`` can still stop it, and named
  in ``server.pgid`` beside its log until it is stopped, so that whoever finds a killed ``bench``
  process's run (a study's executor, the next run or resume) can stop what it left running
  (``stop_left_running``, ``reap_abandoned``); the kernel sends it SIGTERM when its bench dies.
- Only this server can be the one that answers (docs/security.md): an engine with a Unix socket
  listens in a fresh 0700 directory (``unix_socket_path``); on a TCP port, the listener must be
  in the server's own process group (``listeners``), and a keyed engine must know this start's
  API key (``api_key_file``); a port taken before the engine bound it is ``PortTaken``.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from secrets import token_hex
from typing import TYPE_CHECKING

import httpx

from harness.core.errors import EngineError
from harness.core.formats import inert
from harness.core.secrets import redact_url, scrub, scrub_file, secret_values
from harness.results.files import lock_held
from harness.run import engine_http as http

if TYPE_CHECKING:
    from harness.config.arms import Arm
    from harness.config.engines import EngineAdapter
    from harness.config.regime import Regime

_LIVE_GROUPS: set[int] = set()
PGID_FILE = "server.pgid"
# Every server process, and every child it forks, carries its arm directory in this variable: a
# group whose leader is gone (bench SIGKILLed, the server dead, its forked child reparented) is found
# by it, never by the group number alone (a number the kernel may give to someone else's group).
SERVER_MARK = "BENCH_SERVER_DIR"
# Linux's prctl(PR_SET_PDEATHSIG): the server gets SIGTERM when the bench process that started it
# dies, even by SIGKILL (when no teardown runs at all). Looked up here, in the parent: the child only
# calls it between fork and exec, where nothing else is safe to do.
PR_SET_PDEATHSIG = 1
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl if sys.platform == "linux" else None


def die_with_parent() -> None:
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, signal.SIGTERM)


# A server on a Unix socket listens in a directory of its own that only this user can enter
# (``mkdtemp``: mode 0700): no other user of a shared node can reach it, its dev-mode routes
# included, no other process can be listening there before it, and no port can be taken.
SOCKET_DIR_PREFIX = "bench-engine-"
READY_POLL_S = 0.25  # how often a starting server's health endpoint is asked


def unix_socket_path() -> Path:
    """Where a new server's Unix socket goes: a fresh private directory (AF_UNIX paths are short:
    under the system's temporary folder, not the run directory)."""
    return Path(tempfile.mkdtemp(prefix=SOCKET_DIR_PREFIX)) / "engine.sock"


def free_port() -> int:
    """A port the OS just had free on 127.0.0.1 (the engine binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def log_tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def group_alive(pgid: int) -> bool:
    """True while any non-zombie process is in the group. A zombie (exited, not yet reaped)
    still answers ``killpg(pgid, 0)``, so on Linux the group is read from /proc instead."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
            return True
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
    return bool(group_pids(pgid))


def kill_group(pgid: int, grace_s: float = 20.0) -> None:
    """SIGTERM the process group, then SIGKILL whatever is left after ``grace_s``."""
    try:
        os.killpg(pgid, signal.SIGTERM)
        os.killpg(pgid, signal.SIGCONT)  # a stopped (hung) process acts on SIGTERM only once continued
    except ProcessLookupError:
        _LIVE_GROUPS.discard(pgid)
        return
    deadline, pause = time.monotonic() + grace_s, 0.01
    while time.monotonic() < deadline and group_alive(pgid):
        time.sleep(pause)  # from 10 ms: most servers are gone within one (a fixed 0.2 s cost every stop)
        pause = min(0.2, pause * 2)
    if group_alive(pgid):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    _LIVE_GROUPS.discard(pgid)


def kill_all_started() -> None:
    """Stop every server group this process started and has not stopped yet."""
    for pgid in list(_LIVE_GROUPS):
        kill_group(pgid, grace_s=5.0)


def stop_left_running(directory: Path) -> list[int]:
    """Stop the server groups named by ``server.pgid`` files under ``directory`` (a run whose
    ``bench`` process was killed before it could stop them); returns the groups stopped. A group is
    stopped only while its leader is still the server that was started (its command line names the
    socket or the port in the arm's launch.json), never a process that reused the number."""
    stopped = []
    for pgid_file in sorted(directory.rglob(PGID_FILE)):
        try:
            pgid = int(pgid_file.read_text().strip())
            launch = json.loads((pgid_file.parent / "launch.json").read_text())
            where = str(launch.get("uds") or launch["port"])  # its socket, or its port
        except (OSError, ValueError, KeyError):
            continue
        try:
            cmdline = Path(f"/proc/{pgid}/cmdline").read_bytes().split(b"\0")
        except OSError:  # gone already (its parent-death signal): its file and directory still go
            cmdline = []
        if where.encode() in cmdline and group_alive(pgid):
            kill_group(pgid, grace_s=10.0)
            stopped.append(pgid)
        elif _kill_marked(pgid, pgid_file.parent.resolve()):  # the leader gone, its children left
            stopped.append(pgid)
        pgid_file.unlink(missing_ok=True)
        socket_dir = Path(launch["uds"]).parent if launch.get("uds") else None
        if socket_dir is not None and socket_dir.name.startswith(SOCKET_DIR_PREFIX):
            shutil.rmtree(socket_dir, ignore_errors=True)  # its private directory goes with it
    return stopped


class PortTaken(EngineError):
    """Another process took the port chosen for a server (it could not bind, or someone else
    answers there): start again on another port."""


# how the engines (uvicorn, Python's socket) say that bind() failed: errno 98 on Linux
_ADDRESS_IN_USE = re.compile(r"address already in use|errno 98|EADDRINUSE", re.IGNORECASE)


def listeners(port: int) -> set[int] | None:
    """The pids (of this user's processes) listening on TCP ``port``, IPv4 or IPv6, from /proc;
    None where that cannot be told (no /proc/net, or no listener there in this network namespace):
    then the answer is taken on trust."""
    found, readable = set(), False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        readable = True
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                found.add(int(fields[9]))  # state 0A: LISTEN; field 9: the socket's inode
    if not readable or not found:
        return None
    return _socket_owners(found)


def _socket_owners(inodes: set[int]) -> set[int]:
    """The pids (of this user: others' descriptors cannot be read) holding any of ``inodes``."""
    wanted = {f"socket:[{inode}]" for inode in inodes}
    owners = set()
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        try:
            if any(os.readlink(fd) in wanted for fd in fd_dir.iterdir()):
                owners.add(int(fd_dir.parent.name))
        except OSError:
            continue  # another user's process, or gone
    return owners


def group_pids(pgid: int) -> set[int]:
    """The live processes of process group ``pgid``."""
    pids = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            pids.add(int(stat.parent.name))
    return pids


def _kill_marked(pgid: int, arm_dir: Path) -> bool:
    """SIGKILL the processes of group ``pgid`` that carry ``arm_dir`` as their ``SERVER_MARK`` (a
    server's children whose leader is gone); whether there were any."""
    mark = f"{SERVER_MARK}={arm_dir}".encode()
    found = False
    for pid in group_pids(pgid):
        try:
            marked = mark in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue  # gone, or not this user's
        if marked:
            try:
                os.kill(pid, signal.SIGKILL)
                found = True
            except ProcessLookupError:
                pass
    return found


def reap_abandoned(directory: Path) -> list[int]:
    """``stop_left_running`` for every run directory under ``directory`` (itself included) whose
    writer is gone: no live process holds its ``run.lock`` (``harness.results.files.writer_lock``).
    A run another bench is writing keeps its servers."""
    stopped = []
    for run_dir in sorted({pgid.parent.parent.parent for pgid in directory.rglob(f"arms/*/{PGID_FILE}")}):
        if not lock_held(run_dir / "run.lock") or run_dir == directory:
            stopped += stop_left_running(run_dir)
    return stopped


class Server:
    """One engine server process group. Use as a context manager so it is always stopped."""

    def __init__(
        self,
        argv: list[str],
        env: dict[str, str],
        port: int,
        log_path: Path,
        health_path: str,
        secrets: set[str] | frozenset[str] = frozenset(),
        uds: Path | None = None,
        api_key: str | None = None,
        private_dir: Path | None = None,
    ):
        self.argv = argv
        self.extra_env = env
        self.port = port
        self.uds = uds  # the Unix socket it serves on (``engine_server``), instead of the port
        self._log_start = 0  # where this start's lines begin in the log (a retry appends)
        # a keyed server's per-start key (sent with every request, checked at readiness), and the
        # private directory holding its socket or key file (removed when it stops)
        self.api_key = api_key
        self.private_dir = private_dir if private_dir is not None else (uds.parent if uds else None)
        self.log_path = log_path
        self.health_path = health_path
        # values the engine may print (vLLM logs its non-default arguments): scrubbed from its log
        # when it stops and from every tail of it the harness shows (harness.core.secrets)
        self.secrets = secrets
        self.process: subprocess.Popen | None = None
        self.served_model: str | None = None  # requests name the harness's own served name

    @property
    def base_url(self) -> str:
        return f"{http.UNIX}{self.uds}" if self.uds is not None else f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self._log_start = log.tell()
            self.process = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **self.extra_env, SERVER_MARK: str(self.log_path.parent.resolve())},
                start_new_session=True,  # own process group: teardown reaches every child
                preexec_fn=die_with_parent,  # SIGTERM when bench dies: no engine outlives it
            )
        _LIVE_GROUPS.add(self.process.pid)
        (self.log_path.parent / PGID_FILE).write_text(f"{self.process.pid}\n")
        http.register_key(self.base_url, self.api_key)

    def tail(self) -> str:
        """The end of the engine's log, as the harness shows it: secrets scrubbed."""
        return inert(scrub(log_tail(self.log_path), self.secrets))

    def exit_code(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def wait_ready(self, timeout_s: float, on_tick: Callable[[float], None] | None = None) -> float:
        """Block until the health endpoint answers 200 from THIS server; return the seconds it
        took. On a TCP port, the answer counts only while the listener on the port belongs to the
        server's own process group (``listeners``): a port is chosen by binding and closing, and
        another process can take it before the engine binds. ``PortTaken`` when that happened (the
        engine could not bind, or someone else answers there): the caller starts again elsewhere."""
        started = time.monotonic()
        url = http.http_base(self.base_url) + self.health_path
        with http.client(2.0, self.base_url) as client:  # its own server: no proxy, its socket
            while True:
                elapsed = time.monotonic() - started
                code = self.exit_code()
                if code is not None:
                    if self.uds is None and _ADDRESS_IN_USE.search(self._log_since_start()):
                        raise PortTaken(f"port {self.port} was taken before the engine could bind it")
                    raise EngineError(
                        f"engine exited with status {code} during start-up; log "
                        f"{self.log_path}:\n{self.tail()}"
                    )
                if elapsed > timeout_s:
                    raise EngineError(
                        f"engine not ready after {timeout_s:.0f} s; log {self.log_path}:\n{self.tail()}"
                    )
                try:
                    answered = client.get(url).status_code == 200
                except httpx.HTTPError:
                    answered = False  # not listening yet, or listening but not serving yet
                if answered:
                    if self.uds is not None:  # its private socket: no one else could answer there
                        return elapsed
                    owners = listeners(self.port)
                    if owners is not None and not owners & group_pids(self.process.pid):
                        raise PortTaken(f"port {self.port}: another process answers there, not this server")
                    if self.api_key is None or self._knows_its_key(client):
                        return elapsed
                if on_tick:
                    on_tick(elapsed)
                # a quarter second: a health GET costs next to nothing, and each start-up (the unit of
                # evidence, started many times a run) was found ready up to a whole second late
                time.sleep(READY_POLL_S)

    def _knows_its_key(self, client: httpx.Client) -> bool:
        """A keyed server is ready once a route behind its key answers with it (the models list):
        the server that answers is the one given this start's key. A 401 there is another server."""
        try:
            status = client.get(http.http_base(self.base_url) + "/v1/models").status_code
        except httpx.HTTPError:
            return False
        if status == 401:
            raise PortTaken(f"port {self.port}: the server there refuses this start's key, not this server")
        return status == 200

    def _log_since_start(self) -> str:
        try:
            with open(self.log_path, "rb") as log:
                log.seek(self._log_start)
                return log.read().decode(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        if self.process is None:  # never started (refused, or failed before its process existed)
            self._remove_private_dir()
            return
        kill_group(self.process.pid)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        (self.log_path.parent / PGID_FILE).unlink(missing_ok=True)
        http.register_key(self.base_url, None)
        self._remove_private_dir()
        if self.secrets:
            scrub_file(self.log_path, self.secrets)

    def _remove_private_dir(self) -> None:
        if self.private_dir is not None and self.private_dir.name.startswith(SOCKET_DIR_PREFIX):
            shutil.rmtree(self.private_dir, ignore_errors=True)

    def __enter__(self) -> Server:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


REACH_TIMEOUT_S = 60.0  # an existing server that does not answer within this is not serving


class ExternalServer:
    """A server an arm names (``arms[].endpoint``) that the harness did not start: it is read and
    sent requests, never started or stopped, and no process of this machine is its own (no CPU,
    GPU or power accounting is taken for it here). Its served model's id, from ``/v1/models``, is
    the model every request names."""

    process = None  # not the harness's: nothing to account, signal or stop

    def __init__(self, base_url: str, health_path: str, log_path: Path, api_key: str | None = None):
        self.base_url = base_url.rstrip("/")
        self.health_path = health_path
        self.log_path = log_path  # the harness's notes on it: the server's own log is not here
        self.api_key = api_key
        self.served_model: str | None = None

    @classmethod
    def of_arm(cls, arm: Arm, health_path: str, log_path: Path) -> ExternalServer:
        """The server an arm names (``arm.endpoint``), with its key from ``arm.api_key_env``."""
        key = os.environ.get(arm.api_key_env) if arm.api_key_env else None
        return cls(arm.endpoint or "", health_path, log_path, key)

    def start(self) -> None:
        http.register_key(self.base_url, self.api_key)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        where = redact_url(self.base_url)
        with open(self.log_path, "a") as log:
            log.write(f"an existing server at {where}: not started or stopped by the harness\n")

    def wait_ready(self, timeout_s: float, on_tick: Callable[[float], None] | None = None) -> float:
        """Block until it answers its health route and lists a model (whose id requests then name);
        the seconds that took (reaching it, not a start-up). A running server answers at once: the
        wait is at most ``REACH_TIMEOUT_S`` (a restart in progress), not a start-up's timeout."""
        timeout_s = min(timeout_s, REACH_TIMEOUT_S)
        started = time.monotonic()
        with http.client(5.0, self.base_url) as client:
            while True:
                elapsed = time.monotonic() - started
                self.served_model, reason = self._probe(client)
                if self.served_model is not None:
                    return elapsed
                if elapsed > timeout_s:
                    where = redact_url(self.base_url)
                    why = http.error_text(self.base_url, reason)[:300]  # its key and credentials scrubbed
                    raise EngineError(f"{where}: not serving after {timeout_s:.0f} s ({why})")
                if on_tick:
                    on_tick(elapsed)
                time.sleep(READY_POLL_S)

    def _probe(self, client: httpx.Client) -> tuple[str | None, str]:
        """The id of the model it serves, or None and why not."""
        base = http.http_base(self.base_url)
        try:
            if client.get(base + self.health_path).status_code != 200:
                return None, "its health route does not answer 200"
            listed = client.get(base + "/v1/models")
        except httpx.HTTPError as exc:
            return None, f"{type(exc).__name__}: {exc}"
        if listed.status_code == 401:
            raise EngineError(f"{redact_url(self.base_url)}: the server refuses the key (HTTP 401)")
        try:
            models = listed.json().get("data") or [] if listed.status_code == 200 else []
        except (ValueError, AttributeError):
            models = []
        if models and isinstance(models[0], dict) and isinstance(models[0].get("id"), str):
            # inert as it is read, as engine_http.get_json reads /v1/models: the id is stored with
            # the run and printed (an id with control characters is no real deployment's)
            return inert(models[0]["id"]), ""
        return None, f"/v1/models answers {listed.status_code} with no model"

    def tail(self) -> str:
        return ""  # its log is on its own machine

    def exit_code(self) -> int | None:
        return None

    def stop(self) -> None:
        http.register_key(self.base_url, None)  # left running: it is not the harness's

    def __enter__(self) -> ExternalServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def engine_server(
    adapter: EngineAdapter,
    regime: Regime,
    arm: Arm,
    model: str,
    log_path: Path,
    draft_model: str | None = None,
    env: dict[str, str] | None = None,
) -> Server:
    """The server for one start-up of ``arm`` (not started yet): on a fresh private Unix socket
    where the adapter's engine listens on one, else on a port the OS just had free; the values
    it must not print (``harness.core.secrets``) scrubbed from its log. ``env``: the harness's own
    additions to the engine's launch environment (the GPUs it runs on), over the adapter's."""
    uds = unix_socket_path() if adapter.unix_socket else None
    port = 0 if uds is not None else free_port()
    where: dict[str, str] = {} if uds is None else {"uds": str(uds)}  # only for adapters that take it
    key, private = None, None
    if adapter.keyed and uds is None:
        key, key_file = api_key_file()
        private = key_file.parent
        where["key_file"] = str(key_file)
    spec = adapter.launch_spec(regime, arm, model, port, sys.executable, draft_model=draft_model, **where)
    launch_env = {**spec.env, **(env or {})}
    secrets = secret_values({**os.environ, **launch_env}, spec.argv) | ({key} if key else set())
    return Server(
        spec.argv,
        launch_env,
        port,
        log_path,
        adapter.health_path,
        secrets=secrets,
        uds=uds,
        api_key=key,
        private_dir=private,
    )


def api_key_file() -> tuple[str, Path]:
    """A fresh API key, and the file that gives it to the server: ``api-key: KEY`` (the
    ``--config`` YAML SGLang merges into its arguments), mode 0600 in a directory of mode 0700."""
    # hex: a urlsafe key starts with "-" once in 64, and SGLang's parser then reads `--api-key -x...`
    # as a flag with no value and the server does not start (seen in the contract test)
    key = token_hex(32)
    path = Path(tempfile.mkdtemp(prefix=SOCKET_DIR_PREFIX)) / "server-key.yaml"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(f"api-key: {json.dumps(key)}\n")  # as a flag: SGLang makes it --api-key
    return key, path
