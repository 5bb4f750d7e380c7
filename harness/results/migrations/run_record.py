"""Migrations of a run's ``regime.json`` (the resolved regime, its fingerprint, the workloads with
their hashes, the drafters' provenance), by the run's ``schema_version``. The resolved regime inside
needs no step yet: no regime field has been renamed or removed since version 1 and each one added
since has a default (the steps below say which version added which), so today's strict
``harness.config.regime.Regime`` reads every version's. A step goes here the day one is renamed."""

from __future__ import annotations

from typing import Any

from harness.results.migrations import Migrations


def migrate_v1(record: dict[str, Any]) -> dict[str, Any]:
    """Version 2 typed the results: samples carry ``ttft_s``/``tpot_s`` (the record's own, written
    for readers outside the harness), the summary is the dump of ``Summary``. ``drafters`` (each arm's
    drafter provenance) appeared during version 1: a record without it predates drafter arms."""
    return {**record, "schema_version": 2, "drafters": record.get("drafters", {})}


def migrate_v3(record: dict[str, Any]) -> dict[str, Any]:
    """Version 4: each workload records the ``chat`` settings its requests carried (before, requests
    carried none: None); windows the other processes on the engine's GPUs (``gpu``); arm statuses
    their engine's ``draft_counting``."""
    workloads = [{**workload, "chat": workload.get("chat")} for workload in record["workloads"]]
    return {**record, "schema_version": 4, "workloads": workloads}


MIGRATIONS = Migrations(
    current=16,
    steps={1: migrate_v1, 3: migrate_v3},
    # the versions that changed nothing this file holds: each reads as it is (what they added, in words)
    history={
        2: (
            "Version 3: samples carry ``prompt_token_ids`` and, measured, no top logprobs (only the "
            "baseline's second pass, ``noise_floor.jsonl``, asks for them); windows their ``cpu`` by whom; "
            "arm statuses the ``attention_backend``; ``timing.json`` per invocation. ``regime.json`` is "
            "unchanged."
        ),
        4: (
            "Version 5: a regime may set ``slo`` targets and open-loop ``load.request_rate`` (a version-4 "
            "regime has neither: the defaults); open-loop windows carry ``request_rate``, ``arrival`` and "
            "``schedule``, their samples ``t_scheduled`` and ``t_dispatched``; sampled runs (temperature > 0)"
            " an ``arms/<arm>/distribution.jsonl``."
        ),
        5: (
            "Version 6: ``load.server_starts`` (a version-5 regime started each arm's server once: the "
            "default, 1); windows record their ``server_start`` (their ``repeat`` counts over every start-"
            "up), arm statuses every start-up's time (``startups_s``: ``status.migrate_v5``)."
        ),
        6: (
            "Version 7 changed the summary's speedup model (``summary.migrate_v6``); ``regime.json`` is "
            "unchanged. A version-7 regime's ``load.server_starts`` may be ``{min, max, decide}`` (rounds "
            "added until the verdicts are decided; a version-6 regime has an int, read as before). "
            "``timing.json`` records the rounds of start-ups (``rounds``: each round's arms in the order they"
            " ran, reversed every other round, their start-up indexes and the arms whose start-up ended; a "
            "resume continues the last round); a version-6 run has none, reads as ``[]``, and a resume of it "
            "starts an incomplete arm over. Open-loop samples are read as before: their TTFT and E2E from the"
            " due time (``RequestRecord.scheduled_ttft_s``) are computed from the times every version-5 line "
            "holds."
        ),
        7: (
            "Version 8: a regime may name engine patches (``engine.patches``; absent: none), and the record "
            "holds ``known_defects``, the known engine defects the run was forced through (absent: none); "
            "``environment.json`` holds ``engine_patches`` (name, sha256, the defect it fixes)."
        ),
        8: (
            "Version 9: on vLLM 0.33 a request's ``spec_details`` may hold its own acceptance (the response's"
            " ``metrics.speculative_decoding``); the record is otherwise unchanged."
        ),
        9: (
            "Version 10: windows may carry ``turn`` (a conversation workload's turn; its cells are named "
            "``<workload>.turn<t>``) and ``prefix_cache`` (the window's prefix-cache lookups and hits); a "
            "workload definition may hold ``conversation``. The record is otherwise unchanged."
        ),
        10: (
            "Version 11 corrected the summary's intervals for a deciding design's looks (summary's history, "
            "version 11): the record is unchanged."
        ),
        11: (
            "Version 12 fitted the summary's deciding intervals to the design's looks (summary's history, "
            "version 12): the record is unchanged."
        ),
        12: (
            "Version 13 made the summary's intervals about the workload (summary's history, version 13): "
            "the record is unchanged."
        ),
        13: (
            "Version 14: a window's counters (``counters_before``, ``counters_after``) may carry "
            "``engine_steps``, the engine's steps so far (vLLM's ``iteration_tokens_total`` count), for the "
            "step cost model; absent: the engine did not say. The record is otherwise unchanged."
        ),
        14: "Version 15 nested the summary's speedup estimates (``summary.migrate_v14``): unchanged.",
        15: (
            "Version 16: arm statuses carry ``runtime`` (how the engine ran its steps: async "
            "scheduling, the captured CUDA-graph sizes, the running cap), windows "
            "``prefix_cache_reset_attempts``, timing ``gpu_release_s``, the summary's arms "
            "``cache_reset_failed``; absent, each reads as not recorded."
        ),
    },
)
