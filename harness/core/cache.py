"""Where the harness keeps what it can compute or convert again (models converted for the engine,
the simulated interval levels): ``BENCH_CACHE_DIR``, else ``~/.cache/spec-bench``. Nothing kept
here is a measurement; deleting it costs only the time to make it again."""

from __future__ import annotations

import json
import math
import os
import secrets
import sys
from collections.abc import Callable
from pathlib import Path


def cache_root() -> Path:
    """Where converted models live; ``BENCH_CACHE_DIR`` overrides the default."""
    env = os.environ.get("BENCH_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "spec-bench"


def kept_number(
    folder: str, key: str, compute: Callable[[], float], within: tuple[float, float] | None = None
) -> float:
    """``compute()``, kept on disk under ``key`` (the whole of what it depends on, versions included)
    so that the next process reads it instead; computed afresh where the cache cannot be read or
    written (a read-only home), or holds another key under the same name.

    A kept number is a file anyone can edit, and it feeds answers: it is used only if it is finite
    and, where ``within`` is given, inside those bounds (where ``compute`` can put it). Otherwise it
    is computed again, said on stderr with the file and the value found, and kept anew."""
    import hashlib

    path = cache_root() / folder / f"{hashlib.sha256(key.encode()).hexdigest()[:24]}.json"
    try:
        kept = json.loads(path.read_text())
        value = kept.get("value") if kept.get("key") == key else None
        if isinstance(value, float):
            if _usable(value, within):
                return value
            bounds = f" outside [{within[0]:.6g}, {within[1]:.6g}]" if within and math.isfinite(value) else ""
            print(
                f"{path}: held {value!r}{bounds}, where its computation cannot put it: computed again",
                file=sys.stderr,
            )
    except (OSError, ValueError, AttributeError):
        pass
    value = compute()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}")
        tmp.write_text(json.dumps({"key": key, "value": value}))
        os.replace(tmp, path)  # whole or not at all: parallel writers of one key write the same value
    except OSError:
        pass
    return value


def _usable(value: float, within: tuple[float, float] | None) -> bool:
    return math.isfinite(value) and (within is None or within[0] <= value <= within[1])
