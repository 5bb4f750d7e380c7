"""The house's rule, checked on the code itself: every module belongs to one layer, and imports
point only down the layers (a function-level import is an arrow too; one made only for type checking is not).

    commands        cli, commands/*
    run side        plan, runner, server, client, engines/*, sensors/*, drafters/*, study execution
    present         terminal tables, prose, HTML report, gate writers, export frames
    derive          summary, pooling, intervals, verdicts, gates, study analysis (pure, no I/O)
    store           results/* files and records, study records
    config          regime, models, workloads, and engines/ (what each engine is: argv, request
                    fields, counter semantics, parsers)
    foundations     errors, metrics registry, statistics, the probes' formulas, arrivals: pure
                    functions over plain values (derive's own floor: they know no files)

The run side and present sit side by side: neither imports the other. The one sanctioned upward
arrow is a function-level one, listed in LAZY with its reason: an engine adapter's I/O methods
reach engines/http.py (the run side's HTTP) only when the run side calls them. A module that is not
placed fails the test, so a new module must say where it lives. No module in derive (or below it)
imports a process, thread, socket, HTTP client or NVML: those are the sensors' and the run side's.
"""

from __future__ import annotations

import ast
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
# module name (or package prefix) -> layer; the longest prefix wins
PLACES: dict[str, str] = {
    "harness": "commands",  # the package's public API: load_run / load_study (PEP 562, on use)
    "harness.errors": "foundations",
    "harness.formats": "foundations",  # how a speedup and its interval are written
    "harness.metrics": "foundations",
    "harness.stats": "foundations",
    "harness.probes": "foundations",
    "harness.arrivals": "foundations",
    "harness.config_file": "foundations",
    "harness.secrets": "foundations",  # what counts as a secret, and its redaction
    "harness.environment": "foundations",  # machine identity and fingerprint of a stored environment
    "harness.regime": "config",
    "harness.models": "config",  # names a model's files; building one is harness.model_build's
    "harness.engines": "config",  # engine knowledge: argv, request fields, counters, parsers
    "harness.workloads": "config",
    "harness.results": "store",
    "harness.history.entry": "store",  # what the history keeps of a run, typed
    "harness.history.store": "store",  # the history's DuckDB file: schema, migrations, reads
    "harness.history.collect": "derive",  # a run directory as a history entry (its start-up samples)
    "harness.history.changes": "derive",  # change points per series (Apache Otava's E-Divisive)
    "harness.history.trend": "derive",  # the series the trend page draws: nights, band, open regressions
    "harness.history.reference": "derive",  # the nights a run is gated against, their prediction interval
    "harness.results.frames": "derive",  # the derived numbers as DataFrames (load_run().cells())
    "harness.study.record": "store",
    "harness.summary": "derive",
    "harness.pooling": "derive",
    "harness.intervals": "derive",
    "harness.rounds": "derive",  # the start-ups' order per round and when another round buys nothing
    "harness.verdict": "derive",
    "harness.schedule_check": "derive",  # a scheduled arm against every static K of its method
    "harness.ramp": "derive",  # a run's ramps per stage, pooled over start-ups
    "harness.gates": "derive",
    "harness.study.analysis": "derive",
    "harness.study.collect": "derive",
    "harness.study.policy": "derive",  # the K per batch size a study's decided cells support
    "harness.study.policy_file": "store",  # policy.json, and k_schedule: {from: STUDY} resolved from it
    "harness.table": "present",
    "harness.ramp_table": "present",  # the ramp's stages and boundaries, for the terminal and the report
    "harness.terminal": "present",
    "harness.findings": "derive",  # the findings' rules over the numbers (sentences: to become facts)
    "harness.analysis": "derive",  # the one analysis of a run: what every view of it renders
    "harness.verdict_text": "present",  # the verdict in plain words, its statistics beneath
    "harness.report": "present",
    "harness.gate_report": "present",
    "harness.study.tables": "present",
    "harness.study.report": "present",
    "harness.study.analysis_md": "present",
    "harness.engines.http": "run",
    "harness.model_build": "run",
    "harness.sensors": "run",
    "harness.server": "run",
    "harness.client": "run",
    "harness.plan": "run",
    "harness.calibration": "run",  # calibration regimes, the store and the lookup a run makes
    "harness.runner": "run",
    "harness.validation": "run",
    "harness.drafters": "run",
    "harness.study.run": "run",
    "harness.study.executors": "run",
    "harness.study.jobs": "run",
    "harness.study.placement": "run",
    "harness.study.sweep": "run",
    "harness.study": "run",
    "harness.cli": "commands",
    "harness.commands": "commands",
}
LAZY = {
    ("harness.engines.vllm", "harness.engines.http"): "the adapter's I/O methods, called by the run side",
    ("harness.engines.sglang", "harness.engines.http"): "the adapter's I/O methods, called by the run side",
}
IMPURE = ("subprocess", "threading", "socket", "httpx", "aiohttp", "requests", "urllib", "pynvml", "asyncio")


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
            out.update(submodules or {base})  # `from harness.study import analysis` imports analysis
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
    impure = sorted(m for m in _imports(name, MODULES[name]) if m.split(".")[0] in IMPURE)
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
