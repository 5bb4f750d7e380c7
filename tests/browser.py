"""Headless Chromium for the browser tests (Debian's chromium; .ci/run installs it and sets
BENCH_REQUIRE_BROWSER so these tests run there, never skip)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

import pytest

CHROMIUM = shutil.which("chromium")

needs_browser = pytest.mark.skipif(
    CHROMIUM is None and not os.environ.get("BENCH_REQUIRE_BROWSER"),
    reason="Debian's chromium is not installed (.ci/run installs it and sets BENCH_REQUIRE_BROWSER)",
)


def chromium(*args: str) -> subprocess.CompletedProcess:
    """Run headless Chromium with the flags a closed network needs and a fresh profile."""
    assert CHROMIUM, "BENCH_REQUIRE_BROWSER is set but chromium is not installed"
    profile = tempfile.mkdtemp()
    try:
        return subprocess.run(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                f"--user-data-dir={profile}",
                "--enable-logging=stderr",
                "--v=0",
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        shutil.rmtree(profile, ignore_errors=True)
