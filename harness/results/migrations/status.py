"""Migrations of an arm's ``status.json``, by its run's ``schema_version`` (the file holds none)."""

from __future__ import annotations

from typing import Any

from harness.results.migrations import Migrations


def migrate_v5(status: dict[str, Any]) -> dict[str, Any]:
    """Version 6: an arm's server may start several times and ``startups_s`` lists every start-up's
    time; before, it started once, so its one start-up is ``startup_s`` (none before it was ready)."""
    if "startups_s" in status:
        return status
    first = status.get("startup_s")
    return {**status, "startups_s": [] if first is None else [first]}


MIGRATIONS = Migrations(
    current=16,
    steps={5: migrate_v5},
    # the versions that changed nothing this file holds: each reads as it is (what they added, in words)
    history={
        1: "Version 2 changed no status field.",
        2: "Version 3 added ``attention_backend``; absent, it reads as None: not recorded.",
        3: "Version 4 added ``draft_counting``; absent, it reads as None: not recorded.",
        4: "Version 5 changed no status field.",
        6: "Version 7 changed the summary's speedup model only (``summary.migrate_v6``): unchanged.",
        7: (
            "Version 8 recorded the engine's known defects and patches in the run and its summary "
            "(``summary.migrate_v7``): unchanged."
        ),
        8: (
            "Version 9 added derived acceptance figures to the summary's cells (summary's history, version "
            "9): unchanged."
        ),
        9: "Version 10 added conversation turns and prefix-cache counts to the windows: unchanged.",
        10: "Version 11 corrected the summary's intervals for a deciding design's looks: unchanged.",
        11: "Version 12 fitted the summary's deciding intervals to the design's looks: unchanged.",
        12: "Version 13 made the summary's intervals about the workload: unchanged.",
        13: "Version 14 added the engine's step count to the windows' counters: unchanged.",
        14: "Version 15 nested the summary's speedup estimates (``summary.migrate_v14``): unchanged.",
        15: (
            "Version 16: arm statuses carry ``runtime`` (how the engine ran its steps: async "
            "scheduling, the captured CUDA-graph sizes, the running cap), windows "
            "``prefix_cache_reset_attempts``, timing ``gpu_release_s``, the summary's arms "
            "``cache_reset_failed``; absent, each reads as not recorded."
        ),
    },
)
