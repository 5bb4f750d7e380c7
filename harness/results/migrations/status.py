"""Migrations of an arm's ``status.json``, by its run's ``schema_version`` (the file holds none)."""

from __future__ import annotations

from typing import Any


def migrate_v1(status: dict[str, Any]) -> dict[str, Any]:
    """Version 2 changed no status field."""
    return status


def migrate_v2(status: dict[str, Any]) -> dict[str, Any]:
    """Version 3 added ``attention_backend``; absent, it reads as None: not recorded."""
    return status


def migrate_v3(status: dict[str, Any]) -> dict[str, Any]:
    """Version 4 added ``draft_counting``; absent, it reads as None: not recorded."""
    return status


def migrate_v4(status: dict[str, Any]) -> dict[str, Any]:
    """Version 5 changed no status field."""
    return status


def migrate_v5(status: dict[str, Any]) -> dict[str, Any]:
    """Version 6: an arm's server may start several times and ``startups_s`` lists every start-up's
    time; before, it started once, so its one start-up is ``startup_s`` (none before it was ready)."""
    if "startups_s" in status:
        return status
    first = status.get("startup_s")
    return {**status, "startups_s": [] if first is None else [first]}


def migrate_v6(status: dict[str, Any]) -> dict[str, Any]:
    """Version 7 changed the summary's speedup model only (``summary.migrate_v6``): unchanged."""
    return status


def migrate_v7(status: dict[str, Any]) -> dict[str, Any]:
    """Version 8 recorded the engine's known defects and patches in the run and its summary
    (``summary.migrate_v7``): unchanged."""
    return status


def migrate_v8(status: dict[str, Any]) -> dict[str, Any]:
    """Version 9 added derived acceptance figures to the summary's cells (``summary.migrate_v8``):
    unchanged."""
    return status


def migrate_v9(status: dict[str, Any]) -> dict[str, Any]:
    """Version 10 added conversation turns and prefix-cache counts to the windows: unchanged."""
    return status


def migrate_v10(status: dict[str, Any]) -> dict[str, Any]:
    """Version 11 corrected the summary's intervals for a deciding design's looks: unchanged."""
    return status


def migrate_v11(status: dict[str, Any]) -> dict[str, Any]:
    """Version 12 fitted the summary's deciding intervals to the design's looks: unchanged."""
    return status


STEPS = (
    migrate_v1,
    migrate_v2,
    migrate_v3,
    migrate_v4,
    migrate_v5,
    migrate_v6,
    migrate_v7,
    migrate_v8,
    migrate_v9,
    migrate_v10,
    migrate_v11,
)
