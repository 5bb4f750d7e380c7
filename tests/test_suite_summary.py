"""The suite's own summary names the machine's CPU kind (tests/conftest.py): the suite's time turns
on it, and the tail of a CI log is all that CI keeps."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from harness.run.sensors.environment import describe_cpu

ROOT = Path(__file__).resolve().parent.parent


def test_the_summary_names_the_cpu_kind() -> None:
    one_test = "tests/test_docs.py::test_readme_is_a_five_minute_read"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", one_test, "-q", "-p", "no:cacheprovider"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"machine: {describe_cpu()}" in done.stdout.splitlines()
