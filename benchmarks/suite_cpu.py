"""Where the test suite's CPU goes: by test module and by kind of process.

Runs the README's test command (or the pytest arguments given after ``--``) and samples every
process on the machine twice a second: its user + system CPU, the test that started it (pytest
puts ``PYTEST_CURRENT_TEST`` in the environment every process of a test inherits; a process that
overwrote its environment block, as vLLM's renamed engine core does, takes its parent's), and its
kind: vLLM API server, vLLM engine core, a drafter build's torch stage, a ``bench`` command, the
pytest workers themselves (the unit tests run in them), the tests' vLLM zygote (its one import of
vLLM; a server it forks is an API server of the test whose ``bench`` asked for it: its log says
which), a stage zygote (torch and the trainer imported once for a process's drafter-build stages;
each stage it forks is a drafter torch stage), other. On a machine whose two cores the suite keeps
busy, the wall clock follows this CPU: it says what to cut.

    .venv/bin/python benchmarks/suite_cpu.py [--interval 0.5] [--top 25] [-- PYTEST ARGS]

Processes that lived less than one interval are missed; the last line compares what was sampled
with the CPU the kernel charged the pytest run (``getrusage`` of its reaped children). The machine
is named (model, cores, AVX-512 or not): the same suite costs about 1.65-1.9x the CPU on the
project's AVX2-only EPYC. The sampled total is the one to compare: the kernel's leaves out the
shared study's Slurm jobs (slurmd starts them, so they are not the run's children).
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.run.sensors.environment import describe_cpu  # noqa: E402

README_COMMAND = ["-v", "--durations=25", "-n", "2"]  # the README's test command, after `python -m pytest`
TEST_VARIABLE = "PYTEST_CURRENT_TEST"
STAGE_KIND = "drafter torch stage"
# tests/engine_site/zygote.py's, by the module it serves (python -m zygote SOCKET MODULE ...)
ZYGOTE_KINDS = {"harness.run.drafters.train_stages": "stage zygote (its import)"}
ZYGOTE_KIND = "vllm zygote (its import)"
# what a process can turn into after it was first seen: vLLM's engine core renames itself, and a
# fork of a zygote shows the argv it was started with once it is its own process
RENAMED = ("vllm API server", "vllm engine core", STAGE_KIND)
# tests/engine_site/zygote.py's log line for each server it forks: the bench process that asked
FORKED = re.compile(r"forked (\d+) for bench (\d+)")


@dataclass
class Seen:
    """One process (pid and start time) as last sampled."""

    kind: str
    module: str | None
    cpu_s: float
    parent: tuple[int, float] | None


def kind_of(cmdline: list[str], name: str) -> str:
    """What a process is, from its command line and name (vLLM renames its engine core)."""
    joined = " ".join(cmdline)
    if is_zygote(cmdline):
        return ZYGOTE_KINDS.get(cmdline[4] if len(cmdline) > 4 else "", ZYGOTE_KIND)
    if name.startswith("VLLM::") or "multiprocessing.spawn" in joined and "vllm" in joined:
        return "vllm engine core"
    if "vllm.entrypoints" in joined:
        return "vllm API server"
    if "harness.run.drafters.train_stages" in joined:
        return STAGE_KIND
    if "harness.cli" in joined:
        return "bench command"
    # the main pytest, and xdist's workers (execnet starts them reading their code from stdin)
    if "pytest" in " ".join(cmdline[:3]) or "sys.stdin.readline()" in joined:
        return "pytest worker (unit tests)"
    return "other"


def is_zygote(cmdline: list[str]) -> bool:
    """tests/engine_site/zygote.py (``python -m zygote SOCKET MODULE STARTER PADDING``)."""
    return cmdline[1:3] == ["-m", "zygote"]


def module_of(environ: dict[str, str]) -> str | None:
    """The test module a process was started for (``tests/test_x.py::test_y (call)``)."""
    current = environ.get(TEST_VARIABLE)
    return current.split("::", 1)[0].rsplit("/", 1)[-1] if current else None


def sample(seen: dict[tuple[int, float], Seen], ours: set[int]) -> None:
    for proc in psutil.process_iter(["pid", "ppid", "create_time", "name", "cmdline", "cpu_times"]):
        info = proc.info
        if info["pid"] in ours or info["cpu_times"] is None:
            continue
        key = (info["pid"], info["create_time"])
        cpu = info["cpu_times"].user + info["cpu_times"].system
        entry = seen.get(key)
        if entry is None:
            try:
                environ = proc.environ()
            except (psutil.Error, OSError):
                environ = {}
            parent = None
            try:
                parent_proc = psutil.Process(info["ppid"])
                if is_zygote(parent_proc.cmdline()):  # a fork: its requester's (a bench process's)
                    # its own environment block is gone (setproctitle moves it): its zygote's
                    # names the test where a process's own zygote was started for it (a stage's)
                    environ = parent_proc.environ()
                    parent_proc = psutil.Process(requester(parent_proc.cmdline()[3], info["pid"]))
                parent = (parent_proc.pid, parent_proc.create_time())
            except (psutil.Error, OSError, IndexError, ValueError):
                pass
            kind = kind_of(info["cmdline"] or [], info["name"] or "")
            seen[key] = Seen(kind, module_of(environ), cpu, parent)
        else:
            entry.cpu_s = cpu
            # renamed after it was first seen: vLLM's engine core, a server the tests' zygote forked
            kind = kind_of(info["cmdline"] or [], info["name"] or "")
            if kind in RENAMED:
                entry.kind = kind


def requester(zygote_socket: str, pid: int) -> int:
    """The bench process a server forked by the tests' zygote was started for (from its log)."""
    log = Path(zygote_socket).parent / "zygote.log"
    for _ in range(10):  # the zygote logs a fork right after it answers
        found = dict(FORKED.findall(log.read_text(errors="replace")))
        if str(pid) in found:
            return int(found[str(pid)])
        time.sleep(0.05)
    raise ValueError(f"no fork of {pid} in {log}")


def attribute(seen: dict[tuple[int, float], Seen]) -> None:
    """A process whose environment said nothing takes its nearest ancestor's module."""
    for entry in seen.values():
        parent, hops = entry.parent, 0
        while entry.module is None and parent in seen and hops < 20:
            entry.module = seen[parent].module
            parent, hops = seen[parent].parent, hops + 1


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between samples (default 0.5)")
    parser.add_argument("--top", type=int, default=25, help="rows of the module x kind table (default 25)")
    parser.add_argument("pytest_args", nargs="*", help="after --: pytest's arguments (default: the README's)")
    args = parser.parse_args()
    pytest_args = args.pytest_args or README_COMMAND
    seen: dict[tuple[int, float], Seen] = {}
    ours = {os.getpid()}
    started = time.monotonic()
    suite = subprocess.Popen([sys.executable, "-m", "pytest", *pytest_args], cwd=ROOT)
    try:
        while suite.poll() is None:
            sample(seen, ours)
            time.sleep(args.interval)
    except KeyboardInterrupt:
        suite.wait()
    wall = time.monotonic() - started
    charged = resource.getrusage(resource.RUSAGE_CHILDREN)
    attribute(seen)
    suite_procs = {k: e for k, e in seen.items() if e.module is not None or e.kind != "other"}
    by_kind, by_cell = Counter(), Counter()
    for entry in suite_procs.values():
        by_kind[entry.kind] += entry.cpu_s
        by_cell[(entry.module or "(no test)", entry.kind)] += entry.cpu_s
    total = sum(by_kind.values())
    print(f"\n{describe_cpu()}; pytest {' '.join(pytest_args)}: exit {suite.returncode}, {wall / 60:.1f} min")
    print(f"\n{'kind':32s} {'CPU s':>8s} {'share':>6s}")
    for kind, cpu in by_kind.most_common():
        print(f"{kind:32s} {cpu:8.0f} {cpu / total:6.0%}")
    print(f"\n{'test module':40s} {'kind':28s} {'CPU s':>7s}")
    for (module, kind), cpu in by_cell.most_common(args.top):
        print(f"{module:40s} {kind:28s} {cpu:7.0f}")
    print(
        f"\nsampled {total:.0f} CPU s in {len(suite_procs)} processes; the kernel charged the run "
        f"{charged.ru_utime + charged.ru_stime:.0f} s (user + system of its reaped processes; "
        f"the difference: processes shorter than {args.interval} s, and the Slurm jobs and daemons, "
        "which are not its children)"
    )
    return suite.returncode


if __name__ == "__main__":
    sys.exit(main())
