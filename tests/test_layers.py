"""The house's rule, checked on the code itself: every module belongs to one layer, and imports
point only down the layers (a function-level import is an arrow too; one made only for type
checking is not). The layers, and which module is in which, are the one layer map in
docs/development.md#layout (this test reads its table):

    commands        cli, commands/*
    run side        plan, runner, server, client, engines' HTTP, sensors, drafters, study execution
    present         terminal tables, the verdict in words, HTML pages, gate writers
    derive          summary, pooling, intervals, verdicts, the run's analysis, gates, study analysis
    store           results/* files and records, study records, the history's file
    config          regime, models, workloads, and engines/ (what each engine is)
    foundations     errors, metrics registry, statistics, formats, the probes' formulas, arrivals

The run side and present sit side by side: neither imports the other. Present takes only types
(and constants) from derive, never a function: a view renders the analysis, it computes nothing.
The one sanctioned upward arrow is a function-level one, listed in LAZY with its reason: an engine
adapter's I/O methods reach engine_http.py (the run side's HTTP) only when the run side calls
them. A module that is not placed fails the test, so a new module must say where it lives. No
module in derive (or below it) imports a process, thread, socket, HTTP client or NVML.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HARNESS = ROOT / "harness"

# (layer, rank): a module may import modules of a lower rank, or of its own layer
LAYERS: dict[str, int] = {
    "foundations": 0,
    "config": 1,
    "store": 2,
    "derive": 3,
    "present": 4,
    "run": 4,
    "commands": 5,
}
# module name (or package prefix) -> layer; the longest prefix wins: the one layer map, the table in
# docs/development.md#layout (between its "<!-- layers" and "<!-- /layers -->" markers)
LAYER_MAP = ROOT / "docs" / "development.md"


def _places() -> dict[str, str]:
    text = LAYER_MAP.read_text()
    table = text[text.index("<!-- layers") : text.index("<!-- /layers -->")]
    return dict(re.findall(r"^\| `([\w.]+)` \| (\w[\w ]*?) \|", table, re.MULTILINE))


PLACES: dict[str, str] = _places()
LAZY = {
    (
        "harness.config.engines.vllm",
        "harness.run.engine_http",
    ): "the adapter's I/O methods, called by the run side",
    (
        "harness.config.engines.sglang",
        "harness.run.engine_http",
    ): "the adapter's I/O methods, called by the run side",
}
IMPURE = ("subprocess", "threading", "socket", "httpx", "aiohttp", "requests", "urllib", "pynvml", "asyncio")
PURE = ("urllib.parse",)  # splitting a URL's text is not reaching it


def _impure(module: str) -> bool:
    return module.split(".")[0] in IMPURE and not any(module == p or module.startswith(p + ".") for p in PURE)


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(HARNESS.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


MODULES = _modules()


def layer(name: str) -> str:
    prefixes = [p for p in PLACES if name == p or name.startswith(p + ".")]
    assert prefixes, f"{name} is in no layer: add it to PLACES in tests/test_layers.py"
    return PLACES[max(prefixes, key=len)]


def _imports(name: str, path: Path) -> set[str]:
    """Every module this one imports (harness modules resolved; others by their top name),
    function-level imports included; imports only for type checking are not arrows."""
    tree = ast.parse(path.read_text())
    checking = {
        id(node)
        for stmt in ast.walk(tree)
        if isinstance(stmt, ast.If) and "TYPE_CHECKING" in ast.unparse(stmt.test)
        for node in ast.walk(stmt)
    }
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if id(node) in checking:
            continue
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            submodules = {f"{base}.{alias.name}" for alias in node.names} & MODULES.keys()
            out.update(submodules or {base})  # `from harness.run.study import analysis` imports analysis
    return out


def _harness_imports(name: str) -> set[str]:
    return {m for m in _imports(name, MODULES[name]) if m in MODULES and m not in (name, "harness")}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_point_down_the_layers(name: str) -> None:
    mine = layer(name)
    upward = [
        f"{other} ({layer(other)})"
        for other in sorted(_harness_imports(name))
        if layer(other) != mine and LAYERS[layer(other)] >= LAYERS[mine] and (name, other) not in LAZY
    ]
    assert not upward, f"{name} ({mine}) imports up or sideways: {', '.join(upward)}"


@pytest.mark.parametrize("name", sorted(n for n in MODULES if LAYERS[layer(n)] <= LAYERS["derive"]))
def test_derive_and_below_touch_no_process_or_network(name: str) -> None:
    impure = sorted(m for m in _imports(name, MODULES[name]) if _impure(m))
    assert not impure, f"{name} ({layer(name)}) imports {', '.join(impure)}: that belongs to the run side"
    tree = ast.parse(MODULES[name].read_text())
    paths = [
        n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and str(n.value).startswith("/proc")
    ]
    assert not paths, f"{name} reads {paths[0]}: that is a sensor's job"


def test_no_import_circle() -> None:
    graph = {name: _harness_imports(name) for name in MODULES}
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for other in sorted(graph[name]):
            if state.get(other) == 1:
                circle = path[path.index(other) :] + [other] if other in path else [name, other]
                pytest.fail("import circle: " + " -> ".join(circle))
            if other not in state:
                visit(other, [*path, other])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])


def _derive_names_imported(name: str) -> list[str]:
    """What a module imports from derive modules, by name: ``module.name`` for each name, and the
    module itself for an ``import`` or ``from harness import module`` (function-level ones too)."""
    tree = ast.parse(MODULES[name].read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("harness"):
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                if submodule in MODULES and layer(submodule) == "derive":
                    found.append(submodule)  # a whole derive module: its functions with it
                elif node.module in MODULES and layer(node.module) == "derive":
                    found.append(f"{node.module}.{alias.name}")
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name in MODULES and layer(a.name) == "derive"]
    return found


def _is_type_or_constant(qualified: str) -> bool:
    import importlib

    module, _, attr = qualified.rpartition(".")
    if qualified in MODULES or module not in MODULES:
        return False
    value = getattr(importlib.import_module(module), attr)
    return isinstance(value, type) or not callable(value)


@pytest.mark.parametrize("name", sorted(n for n in MODULES if layer(n) == "present"))
def test_present_imports_only_derive_types(name: str) -> None:
    """Present renders the analysis derive made: from derive it takes types (and constants), never a
    function, so no view can compute a number of its own."""
    functions = [q for q in _derive_names_imported(name) if not _is_type_or_constant(q)]
    assert not functions, f"{name} (present) imports derive functions or modules: {', '.join(functions)}"
