"""Migrations of a study's ``study.json`` (``harness.study.record.StudyRecord``), by the
``schema_version`` it holds (numbered apart from runs)."""

from __future__ import annotations

from typing import Any


def migrate_v1(study: dict[str, Any]) -> dict[str, Any]:
    """Version 2: the ``executor`` that runs the points' jobs and each point's ``attempts``. A
    version-1 study ran its points in the bench process, on this machine: the local executor, no jobs."""
    points = [{**point, "attempts": point.get("attempts", [])} for point in study["points"]]
    executor = study.get("executor", {"name": "local"})
    return {**study, "schema_version": 2, "points": points, "executor": executor}


STEPS = (migrate_v1,)
