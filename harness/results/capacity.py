"""What a capacity search writes and reads back (``bench capacity``): its record, and one line per
probe of each arm.

    RESULTS/<regime>/capacity-<id>/capacity.json           CapacityRecord: the regime as run, the SLO,
                                                           the search's settings and stop rule
    RESULTS/<regime>/capacity-<id>/arms/<arm>/probes.jsonl one CapacityProbe per window probed
    RESULTS/<regime>/capacity-<id>/arms/<arm>/samples.jsonl every request (RequestRecord)
"""

from __future__ import annotations

from typing import Any, Literal

from harness.results.records import ResultModel

CAPACITY_FILE = "capacity.json"
PROBES_FILE = "probes.jsonl"


class SearchSettings(ResultModel):
    """How the highest rate within the SLO is searched: bracketing from ``start_rps`` (doubling
    while the SLO holds, halving while it does not), then bisection (geometric) until the bracket's
    ends are within ``resolution`` of each other or ``max_probes`` windows were sent."""

    workload: str
    start_rps: float
    prompts_per_probe: int
    max_probes: int
    resolution: float  # hi / lo - 1 at which the search stops
    target_pct: float  # the share of requests that must meet every SLO target
    min_rps: float  # below this, the arm has no capacity within the SLO (the search stops)


class CapacityRecord(ResultModel):
    schema_version: Literal[1] = 1
    source_path: str
    fingerprint: str
    regime: dict[str, Any]  # the regime as run, secrets redacted
    overrides: list[dict[str, Any]] = []
    slo: dict[str, Any]
    settings: SearchSettings
    # why it never runs far past capacity: the rule the search follows, in words
    stop_rule: str


class CapacityProbe(ResultModel):
    """One open-loop window of one arm at one offered rate."""

    index: int  # the probe's order within the arm's search
    rate_rps: float
    sent: int
    met: int  # requests that met every SLO target (harness.probes.slo.meets)
    failed: int  # requests that failed outright (an error: they miss the SLO too)
    duration_s: float  # first send to last completion
    holds: bool  # attainment >= the target
    phase: Literal["bracket", "bisect"]
