"""Migrations of ``summary.json`` (``harness.results.model.Summary``), by the ``schema_version`` it
holds. A summary is derived (``bench`` re-derives it from the raw files); the stored one is what
``bench gate --baseline`` and the study's pages read when they compare."""

from __future__ import annotations

from typing import Any

from harness.results.migrations import Migrations, status


def migrate_v1(summary: dict[str, Any]) -> dict[str, Any]:
    """Version 2: the dump of ``Summary``: ``windows`` renamed ``cells`` (one per arm x workload x
    concurrency), ``unread_lines`` added (none: version 1 did not say)."""
    upgraded = {key: value for key, value in summary.items() if key != "windows"}
    return {**upgraded, "schema_version": 2, "cells": summary["windows"], "unread_lines": []}


def migrate_v5(summary: dict[str, Any]) -> dict[str, Any]:
    """Version 6: several server start-ups per arm: arms list every start-up's time (as an arm's
    status does: ``status.migrate_v5``), repeats their ``server_start`` (0: there was one), and a
    cell's speedup interval may come from its start-ups (``speedup_interval: server_starts``)."""
    arms = [status.migrate_v5(arm) for arm in summary["arms"]]
    return {**summary, "schema_version": 6, "arms": arms}


def migrate_v6(summary: dict[str, Any]) -> dict[str, Any]:
    """Version 7: one model for every speedup (``harness.derive.intervals``: arms x rounds on log start-up
    tok/s, a t interval). A version-6 interval was a percentile bootstrap over repeats or requests,
    which cannot see the start-up spread: it is dropped (the speedup reads as unverified; ``bench``
    re-derives the new interval from the raw files). Cells gained ``mean_in_flight`` (absent: not
    recorded)."""
    cells = [
        {**c, "speedup_low": None, "speedup_high": None, "speedup_interval": None} for c in summary["cells"]
    ]
    return {**summary, "schema_version": 7, "cells": cells}


def migrate_v7(summary: dict[str, Any]) -> dict[str, Any]:
    """Version 8: what the run knew of its engine (``harness.config.engines.defects``, ``.patches``):
    ``known_defects``, the known engine defects a run was forced through (--allow-known-defect), and
    ``engine_patches``, the upstream fixes its servers ran with. A version-7 run had neither."""
    return {**summary, "schema_version": 8, "known_defects": [], "engine_patches": []}


# a version-14 record's flat speedup fields, by the nested estimate's field each became
_FLAT_ESTIMATE = {
    "speedup_low": "low",
    "speedup_high": "high",
    "speedup_interval": "source",
    "speedup_rounds": "rounds",
    "speedup_df": "df",
    "speedup_log_se": "log_se",
    "speedup_looks": "looks",
    "speedup_first_look": "first_look",
    "speedup_model_arms": "model_arms",
    "speedup_prompts": "prompts",
    "speedup_prompt_log_se": "prompt_log_se",
    "speedup_own_spread": "own_spread",
    "speedup_calibration_refused": "calibration_refused",
}


def _nest_estimate(record: dict[str, Any]) -> dict[str, Any]:
    """A cell, category or ramp span with its flat ``speedup_*`` fields (but the point) in one
    ``estimate``; none where every one was absent or None (it reads as None)."""
    found = {nested: record[flat] for flat, nested in _FLAT_ESTIMATE.items() if record.get(flat) is not None}
    kept = {key: value for key, value in record.items() if key not in _FLAT_ESTIMATE}
    return {**kept, "estimate": found} if found else kept


def migrate_v14(summary: dict[str, Any]) -> dict[str, Any]:
    """Version 15: a speedup's interval and design are one nested ``estimate``
    (``harness.results.model.SpeedupEstimate``) in cells, categories and ramp spans, in place of
    the 13 flat ``speedup_*`` fields beside the point (``speedup`` stays): the same values, moved."""
    nested = {
        key: [_nest_estimate(r) for r in summary.get(key, [])] for key in ("cells", "categories", "ramp")
    }
    return {**summary, "schema_version": 15, **{key: rows for key, rows in nested.items() if key in summary}}


MIGRATIONS = Migrations(
    current=16,
    steps={1: migrate_v1, 5: migrate_v5, 6: migrate_v6, 7: migrate_v7, 14: migrate_v14},
    # the versions that changed nothing this file holds: each reads as it is (what they added, in words)
    history={
        2: (
            "Version 3: cells gained the speedup's interval, the copy and context shares and the CPU shares "
            "and flags, arms their attention backend, the summary the run's ``timing``; absent, each reads as"
            " not recorded."
        ),
        3: (
            "Version 4: cells gained the GPU neighbours' SM share and count (and ``noisy_neighbour`` counts a"
            " busy GPU neighbour too; a version-3 cell's flag stays as it was derived), cells and repeats "
            "``tokens_per_forward``, arms their ``draft_counting``; absent, each reads as not recorded."
        ),
        4: (
            "Version 5: ``slo`` targets with cells' and repeats' ``slo_pct`` and ``goodput_rps``, open-loop "
            "cells (the achieved rate, lag, queueing, ``behind_schedule``), the ``distribution`` section; a "
            "version-4 run had no SLO, no open loop and no distribution check."
        ),
        8: (
            "Version 9: cells gained ``accepted_past_stop`` (drafts the counters accepted past requests' "
            "stops, at least; ``probes.acceptance.accepted_past_stop``) and ``prompt_tau`` (tau per prompt "
            "from each request's own acceptance, where the engine reports it). Absent: not derived; ``bench``"
            " re-derives both from the raw files."
        ),
        9: (
            "Version 10: cells gained ``turn`` (a conversation workload's turn), ``prompt_tokens_mean`` and "
            "``prefix_cache_hit_pct`` (prompt tokens served from the prefix cache). Absent: a single-turn "
            "workload, or not read; ``bench`` re-derives them from the raw files."
        ),
        10: (
            "Version 11: cells and ramp spans gained ``speedup_looks``, the looks at its interval a run that "
            "adds rounds until decided could take (its interval is at 1 - 0.05 / looks). Absent: 1. A "
            "version-10 run that decided stored uncorrected intervals; ``bench`` re-derives corrected ones "
            "from the raw files."
        ),
        11: (
            "Version 12: cells and ramp spans gained ``speedup_first_look``, the rounds at a deciding run's "
            "first look, to which the looks' level is fitted (``stats.repeated_level``), and "
            "``speedup_model_arms``, the arms of the model a speedup was fitted in: the winner of several "
            "arms that shared one is corrected at the two-sided Dunnett level instead of Bonferroni's. "
            "Absent: a version-11 run's stored intervals were at Bonferroni's 1 - 0.05 / looks, and a view of"
            " it keeps Bonferroni's level for its looks and its winner (``intervals.design_level``), so it "
            "reads as it did; ``bench`` re-derives fitted ones from the raw files."
        ),
        12: (
            "Version 13: a speedup's interval is about the workload: cells, categories and ramp spans gained "
            "``speedup_prompts`` and ``speedup_prompt_log_se`` (the prompt-sampling term, a jackknife over "
            "prompts, inside ``speedup_log_se``), ``speedup_own_spread`` (the arm's own paired spread "
            "replaced the pooled one) and ``speedup_calibration_refused``. Absent: a version-12 interval, "
            "about its prompts only; ``bench`` re-derives the new one from the raw files."
        ),
        13: (
            "Version 14: cells and repeats gained ``engine_step_count`` (the engine's steps in their "
            "windows) and ``step_ms`` (window time per step), the step cost model's samples "
            "(``harness.derive.cost_model``). Absent: not recorded (a window before version 14 has no step "
            "count)."
        ),
        15: (
            "Version 16: arms gained ``runtime`` (how the engine ran its steps: async scheduling, the "
            "captured CUDA-graph sizes, the running cap) and ``cache_reset_failed``; published figures "
            "the source's regime; cells the peers' statistics (each latency's mean, min, max, std, TTST, "
            "request and total token throughput, input tokens). Absent: not recorded."
        ),
    },
)
