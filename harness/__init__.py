"""Speculative-decoding regime harness.

For notebooks: ``harness.load_run(path)`` loads a run directory as typed results with pandas
tables (``.cells()``, ``.requests()``, ``.categories()``, ``.repeats()``); ``harness.load_study(path)``
loads a study (its analysis and ``.cells()`` over every point); ``harness.load_history(path)`` reads a
history file (``.runs()``, ``.samples()``, ``.cells()``). Both are imported on first use, so
``import harness`` stays light (no pandas, no engine).
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["__version__", "load_history", "load_run", "load_study"]


def __getattr__(name: str) -> Any:
    if name == "load_run":
        from harness.derive.frames import load_run

        return load_run
    if name == "load_history":
        from harness.results.history.store import load_history

        return load_history
    if name == "load_study":
        from harness.derive.study.collect import load_study

        return load_study
    raise AttributeError(f"module 'harness' has no attribute {name!r}")
