"""Migrations of a study's ``study.json`` (``harness.results.study.record.StudyRecord``), by the
``schema_version`` it holds (numbered apart from runs)."""

from __future__ import annotations

from typing import Any

from harness.results.migrations import Migrations


def migrate_v1(study: dict[str, Any]) -> dict[str, Any]:
    """Version 2: the ``executor`` that runs the points' jobs and each point's ``attempts``. A
    version-1 study ran its points in the bench process, on this machine: the local executor, no jobs."""
    points = [{**point, "attempts": point.get("attempts", [])} for point in study["points"]]
    executor = study.get("executor", {"name": "local"})
    return {**study, "schema_version": 2, "points": points, "executor": executor}


MIGRATIONS = Migrations(
    current=2,
    steps={1: migrate_v1},
    # the versions that changed nothing this file holds: each reads as it is (what they added, in words)
    history={},
)
