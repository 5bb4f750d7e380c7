"""What a capacity search writes and reads back (``bench capacity``): its record, and one line per
probe of each arm.

    RESULTS/<regime>/capacity-<id>/capacity.json           CapacityRecord: the regime as run, the SLO,
                                                           the search's settings and stop rule
    RESULTS/<regime>/capacity-<id>/arms/<arm>/probes.jsonl one CapacityProbe per window probed
    RESULTS/<regime>/capacity-<id>/arms/<arm>/samples.jsonl every request (RequestRecord)

Schema history (``CapacityRecord.schema_version``; the probes' lines are of their record's version):

    1  the first
    2  ``settings.max_rps``, the cap on the rate (None in version 1: no cap); each probe's failed
       requests by kind (``errors``, {} in version 1: not recorded)

Both read as they are (the new fields' defaults say "not recorded"). No stored number may be
infinite or NaN (``allow_inf_nan=False``): such a number is not JSON, and a rate of Infinity was
once written to probes.jsonl.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, model_validator

from harness.results.records import ResultModel

CAPACITY_FILE = "capacity.json"
PROBES_FILE = "probes.jsonl"


class _Finite(ResultModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class SearchSettings(_Finite):
    """How the highest rate within the SLO is searched: bracketing from ``start_rps`` (doubling
    while the SLO holds, up to ``max_rps``; halving while it does not), then bisection (geometric)
    until the bracket's ends are within ``resolution`` of each other or ``max_probes`` windows were
    sent (the stop rules: ``harness.derive.capacity.next_step``)."""

    workload: str
    start_rps: float
    prompts_per_probe: int
    max_probes: int
    resolution: float  # hi / lo - 1 at which the search stops
    target_pct: float  # the share of requests that must meet every SLO target
    min_rps: float  # below this, the arm has no capacity within the SLO (the search stops)
    max_rps: float | None = None  # no rate above it is offered (None: version 1, no cap)

    @model_validator(mode="after")
    def _start_within_the_cap(self) -> SearchSettings:
        if self.max_rps is not None and not 0 < self.start_rps <= self.max_rps:
            raise ValueError(f"start_rps {self.start_rps:g} is not within (0, max_rps {self.max_rps:g}]")
        return self


class CapacityRecord(_Finite):
    schema_version: Literal[1, 2] = 2
    source_path: str
    fingerprint: str
    regime: dict[str, Any]  # the regime as run, secrets redacted
    overrides: list[dict[str, Any]] = []
    slo: dict[str, Any]
    settings: SearchSettings
    # why it never runs far past capacity: the rule the search follows, in words
    stop_rule: str


class CapacityProbe(_Finite):
    """One open-loop window of one arm at one offered rate."""

    index: int  # the probe's order within the arm's search
    rate_rps: float
    sent: int
    met: int  # requests that met every SLO target (harness.core.probes.slo.meets)
    failed: int  # requests that failed outright (an error: they miss the SLO too)
    duration_s: float  # first send to last completion
    holds: bool  # attainment >= the target
    phase: Literal["bracket", "bisect"]
    # the failed requests by kind ("HTTP 500", "timeout", "stalled", ...): version 2; {}: not recorded
    errors: dict[str, int] = {}

    @property
    def missed(self) -> int:
        """Requests that were answered but missed an SLO target (the failed ones apart)."""
        return self.sent - self.met - self.failed
