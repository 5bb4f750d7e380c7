"""The environment a run happened in, as small collectors filling one dict.

Each collector is tolerant of what is missing (no git, no NVML, no GPU): it records what it
can and never fails the run. Engine and torch versions are read from package metadata, so
nothing heavy is imported.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import harness


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def collect_harness() -> dict[str, Any]:
    repo = Path(harness.__file__).resolve().parent.parent
    sha = None
    try:
        out = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        )
        if out.returncode == 0:
            sha = out.stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        pass
    return {"harness_version": harness.__version__, "harness_git_sha": sha}


def collect_python() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "platform": platform.platform(),
        "torch": _dist_version("torch"),
    }


def collect_cpu() -> dict[str, Any]:
    model = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu_model": model or platform.processor() or None, "cpu_count": os.cpu_count()}


def collect_gpus() -> dict[str, Any]:
    """GPU names and count through NVML, when the nvidia-ml-py package and a driver exist."""
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return {"gpus": [], "gpu_probe": "nvidia-ml-py not installed"}
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError subclasses: no driver, no device
        return {"gpus": [], "gpu_probe": f"NVML unavailable: {exc}"}
    try:
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = pynvml.nvmlDeviceGetName(handle)
            gpus.append({"index": index, "name": name.decode() if isinstance(name, bytes) else name})
        driver = pynvml.nvmlSystemGetDriverVersion()
        return {"gpus": gpus, "gpu_driver": driver.decode() if isinstance(driver, bytes) else driver, "gpu_probe": "nvml"}
    finally:
        pynvml.nvmlShutdown()


def collect_environment(engine_version: str | None) -> dict[str, Any]:
    record: dict[str, Any] = {"engine_version": engine_version}
    for collector in (collect_harness, collect_python, collect_cpu, collect_gpus):
        record.update(collector())
    return record
