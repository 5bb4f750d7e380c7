"""The layers, read from the source (AST, so a new import or a new /proc read fails here):

- ``harness/core/probes/`` is formulas over stored samples: it imports nothing that runs a process, a
  thread or a connection, nor NVML, nor the run side (``harness.run.sensors`` and its users), and reads
  no file, no /proc and no environment variable; the sensors (``harness/run/sensors/``) do that;
- the drafters' modules import each other without a circle (function-level imports included);
- no module of the harness imports another in a circle at module level."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "harness"

# what a formula has no business with: processes, threads, sockets, HTTP clients, NVML
FORBIDDEN_MODULES = {
    "subprocess",
    "threading",
    "multiprocessing",
    "concurrent",
    "asyncio",
    "socket",
    "http",
    "urllib",
    "httpx",
    "aiohttp",
    "requests",
    "pynvml",
}
# the run side above the probes: they may import the probes, never the other way
RUN_SIDE = (
    "harness.run.sensors",
    "harness.run.runner",
    "harness.run.server",
    "harness.run.client",
    "harness.config.engines",
)
READS = {"open", "read_text", "read_bytes", "iterdir", "glob", "environ", "getenv", "cpu_count"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _imports(tree: ast.AST, known: dict[str, Path], nodes: Iterator[ast.AST] | None = None) -> set[str]:
    """Every module named by an import statement among ``nodes`` (default: the whole tree); ``from
    package import submodule`` names the submodule, not the package."""
    found: set[str] = set()
    for node in nodes if nodes is not None else ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            submodules = {f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in known}
            found |= submodules
            if len(submodules) < len(node.names):
                found.add(node.module)
    return found


def _probe_files() -> list[Path]:
    return sorted((PACKAGE / "core" / "probes").glob("*.py"))


@pytest.mark.parametrize("path", _probe_files(), ids=lambda p: p.name)
def test_the_probes_import_no_process_thread_socket_http_or_nvml(path: Path) -> None:
    imported = _imports(ast.parse(path.read_text()), _modules())
    bad = sorted(
        name
        for name in imported
        if name.split(".")[0] in FORBIDDEN_MODULES or name.startswith(RUN_SIDE) or name == "os"
    )
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}: machine access belongs in harness/run/sensors/"


@pytest.mark.parametrize("path", _probe_files(), ids=lambda p: p.name)
def test_the_probes_read_no_file_proc_or_environment(path: Path) -> None:
    tree = ast.parse(path.read_text())
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value.startswith(("/proc", "/sys")):
                bad.append(f"line {node.lineno}: {node.value!r}")
        elif isinstance(node, ast.Attribute) and node.attr in READS:
            bad.append(f"line {node.lineno}: .{node.attr}")
        elif isinstance(node, ast.Name) and node.id in READS:
            bad.append(f"line {node.lineno}: {node.id}")
    assert not bad, f"{path.relative_to(ROOT)} reads the machine ({bad}): that is a sensor's job"


def test_the_scan_sees_what_it_forbids() -> None:
    """The scans themselves: a sensor module trips every one of them."""
    sensor = ast.parse((PACKAGE / "run" / "sensors" / "gpu.py").read_text())
    assert {"threading", "harness.run.sensors.power"} <= _imports(sensor, _modules())
    cpu = list(ast.walk(ast.parse((PACKAGE / "run" / "sensors" / "cpu.py").read_text())))
    assert any(isinstance(n, ast.Constant) and n.value == "/proc" for n in cpu)
    assert any(isinstance(n, ast.Attribute) and n.attr == "read_text" for n in cpu)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _graph(names: dict[str, Path], module_level: bool) -> dict[str, set[str]]:
    known = _modules()
    graph = {}
    for name, path in names.items():
        tree = ast.parse(path.read_text())
        nodes = iter(tree.body) if module_level else None
        graph[name] = {m for m in _imports(tree, known, nodes) if m in names and m != name}
    return graph


def test_the_drafters_import_each_other_without_a_circle() -> None:
    drafters = {n: p for n, p in _modules().items() if n.startswith("harness.run.drafters.")}
    assert "harness.run.drafters.distill" in drafters and "harness.run.drafters.train_stages" in drafters
    assert _cycles(_graph(drafters, module_level=False)) == []


def test_no_module_level_import_circle_in_the_harness() -> None:
    assert _cycles(_graph(_modules(), module_level=True)) == []


def test_the_circle_finder_finds_one() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
