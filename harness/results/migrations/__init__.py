"""Schema migrations: every file the harness reads back is brought to the version it writes, one pure
dict -> dict step at a time, before a strict model reads it (asv's ``Results.update_to_N``).

One module per file kind, each with its ``MIGRATIONS``: the version it writes (``current``), a step
for each version that changed something the file holds (``migrate_vN`` takes a version-N file to
version N + 1), and for every other version the identity: most versions only added fields whose
defaults say "not recorded", so such a file reads as it is (``history`` says in words what each of
those versions added). The steps' docstrings and the history are the schema history.

- ``run_record``: a run's ``regime.json``. Its ``schema_version`` is the run's: every file of the run
  directory is of that version (``harness.results.files.SCHEMA_VERSION`` is the current one).
- ``status``: ``arms/<arm>/status.json``, of its run's version (the file holds none of its own).
- ``summary``: ``summary.json``, of the version it holds (the same numbering: it is derived from a run).
- ``study``: a study's ``study.json``, numbered on its own.

The raw lines of a run (``samples.jsonl``, ``windows.jsonl``, ...) and ``timing.json`` have no steps:
every version only added fields whose defaults say "not recorded", so each version's lines read as
the current one. The first change that needs more gives them a module here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.core.errors import UserError

Step = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class Migrations:
    """One file kind's schema history: the version this harness writes, the steps of the versions
    that changed something the file holds, and what every other version added, in words."""

    current: int
    steps: Mapping[int, Step]  # version N -> its step to N + 1; a version without one reads as it is
    history: Mapping[int, str] = field(default_factory=dict)


def upgrade(data: Any, migrations: Migrations, source: str, version: Any = None) -> dict[str, Any]:
    """``data`` (a file of ``version``; by default the ``schema_version`` it holds) as the current
    version: the steps from its version on, in order, the identity where a version has none. A
    version this harness does not know is refused with a hint: a newer one was written by a newer
    harness."""
    if version is None:
        version = data.get("schema_version") if isinstance(data, dict) else None
    current = migrations.current
    known = isinstance(version, int) and not isinstance(version, bool) and 1 <= version <= current
    if not isinstance(data, dict) or not known:
        newer = isinstance(version, int) and not isinstance(version, bool) and version > current
        hint = (
            "it was written by a newer harness: upgrade this one to read it"
            if newer
            else "use the harness version that wrote it"
        )
        raise UserError(
            f"{source}: schema_version {version!r} is not supported by this harness (it reads versions 1 "
            f"to {current}); {hint}"
        )
    for step in (migrations.steps.get(v) for v in range(version, current)):
        data = step(data) if step is not None else data
    return {**data, "schema_version": current} if "schema_version" in data else data
