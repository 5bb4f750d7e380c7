"""Engine patches: a named, versioned upstream fix that the harness applies to the servers it
launches, and to nothing else.

The installed engine is never edited. A regime asks for a patch by name (``engine.patches``); the
adapter then puts ``site/`` first on the server's ``PYTHONPATH`` and names the patch and its hash
in ``SPEC_BENCH_ENGINE_PATCHES``. ``site/sitecustomize.py`` runs first in every process of that
server (the engine core is spawned with the same environment), checks the file's hash and the
installed engine's exact release, refuses to start the server on any other, and replaces the
broken function right after the engine imports the module that holds it. Each process that applies
a patch says so on stderr (``APPLIED_MARK``), so the server log shows it ran.

A patch is one module in this package with the constants read here (``NAME``, ``ENGINE``,
``DISTRIBUTIONS``, ``FIXES``, ``UPSTREAM``, ``TARGET``) and ``apply(module)``; its hash, the sha256
of that file, goes into the regime's fingerprint, the run's environment record and every verdict.
"""

from __future__ import annotations

import hashlib
import importlib
import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path

SITE_DIR = Path(__file__).resolve().parent / "site"
ENV_VAR = "SPEC_BENCH_ENGINE_PATCHES"
APPLIED_MARK = "spec-bench: engine patch"
_MODULES = ("vllm_55005_cpu_expand",)


@dataclass(frozen=True)
class EnginePatch:
    name: str
    engine: str  # a name in harness.config.engines.ENGINES
    distributions: dict[str, tuple[str, ...]]  # distribution -> the exact releases it is written for
    fixes: str  # the id in harness.config.engines.defects
    upstream: str  # "vLLM #55005, fix from PR #55006"
    target: str  # the engine module it patches
    path: Path

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.path.read_bytes()).hexdigest()

    @property
    def versions(self) -> tuple[str, ...]:
        return tuple(sorted({v for releases in self.distributions.values() for v in releases}))

    def label(self) -> str:
        """``vllm-55005-cpu-expand@1a2b3c4d5e6f``: the name and the hash the server checks."""
        return f"{self.name}@{self.sha256[:12]}"

    def record(self) -> dict[str, str]:
        """What a run stores of the patch (environment record)."""
        return {"name": self.name, "sha256": self.sha256, "fixes": self.fixes, "upstream": self.upstream}


@cache
def patches() -> dict[str, EnginePatch]:
    """Every patch the harness ships, by name (their modules read for constants only: the fix
    itself imports the engine, inside ``apply``)."""
    found = {}
    for module_name in _MODULES:
        module = importlib.import_module(f"{__name__}.{module_name}")
        found[module.NAME] = EnginePatch(
            name=module.NAME,
            engine=module.ENGINE,
            distributions={d: tuple(v) for d, v in module.DISTRIBUTIONS.items()},
            fixes=module.FIXES,
            upstream=module.UPSTREAM,
            target=module.TARGET,
            path=Path(module.__file__),
        )
    return found


def launch_env(names: list[str], pythonpath: str | None = None) -> dict[str, str]:
    """The server environment that applies ``names`` (empty: nothing): ``site/`` ahead of the
    regime's own ``pythonpath``, if it sets one."""
    if not names:
        return {}
    known = patches()
    path = os.pathsep.join([str(SITE_DIR)] + ([pythonpath] if pythonpath else []))
    return {"PYTHONPATH": path, ENV_VAR: ",".join(known[name].label() for name in names)}
