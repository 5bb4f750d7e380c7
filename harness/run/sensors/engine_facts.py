"""The installed engine's own facts (for vLLM: what its SpeculativeConfig takes), read by the
adapter's reader module in a child process (importing an engine costs seconds and prints), kept on
disk per installed release.

Validation holds a regime to these facts where the adapter says the installed engine decides
(``installed_facts_reader``: for vLLM an unpinned regime, or a release its tables, read from the
releases' sources and checked against them by tests/test_engine_contracts.py, do not hold), and
the installed engine is the regime's release.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from functools import cache
from typing import Any

from harness.config.models import cache_root

READ_TIMEOUT_S = 120  # an import of vLLM takes 5-15 s on the project's 2-core machines


@cache
def read_installed_facts(reader: str, installed: str) -> dict[str, Any] | None:
    """What ``python -m reader`` prints of the installed engine (``installed``: its distribution and
    version, the cache's key); None where it would not import or said nothing readable (then the
    adapter's tables stand in)."""
    path = (
        cache_root() / "engine-facts" / (re.sub(r"[^A-Za-z0-9_.+-]+", "-", f"{reader}-{installed}") + ".json")
    )
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        pass
    try:
        proc = subprocess.run(
            [sys.executable, "-m", reader], capture_output=True, text=True, timeout=READ_TIMEOUT_S
        )
        lines = proc.stdout.strip().splitlines()
        raw = json.loads(lines[-1]) if proc.returncode == 0 and lines else None
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None
    if not isinstance(raw, dict):
        return None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(raw))
    except OSError:
        pass  # read again next time
    return raw


def installed_facts(adapter: Any, version: str | None) -> dict[str, Any] | None:
    """The installed engine's facts for a regime pinned to ``version``, where the adapter says they
    decide; else None."""
    reader = adapter.installed_facts_reader(version)
    installed = adapter.installed_version() if reader else None
    return read_installed_facts(reader, installed) if reader and installed else None
