"""A capacity search's answer (``bench capacity``), derived from its probes only (pure): per arm the
highest offered rate at which the SLO attainment target held, the lowest above it at which it did
not, each probe's attainment with its Wilson 95% interval, and each speculative arm's capacity
against the baseline's.

    attainment (%)   = 100 x requests meeting every SLO target / requests sent (harness.probes.slo)
    holds            = attainment >= the target (e.g. 95%)
    capacity         = the highest probed rate that held below the lowest rate that did not
    ceiling          = that lowest failing rate: the capacity lies in [capacity, ceiling)
    vs the baseline  = capacity / the baseline's capacity, between (capacity / baseline's ceiling)
                       and (ceiling / baseline's capacity): the search's bracket, not a sampling
                       interval (the probes' own uncertainty is their Wilson intervals)
"""

from __future__ import annotations

from dataclasses import dataclass

from scipy.stats import binomtest

from harness.results.capacity import CapacityProbe, CapacityRecord


@dataclass(frozen=True)
class ProbeResult:
    rate_rps: float
    sent: int
    met: int
    attainment_pct: float
    low_pct: float  # Wilson 95% interval of the attainment
    high_pct: float
    holds: bool
    phase: str


@dataclass(frozen=True)
class ArmCapacity:
    arm: str
    capacity_rps: float | None  # None: it did not hold even at the lowest rate probed
    ceiling_rps: float | None  # None: it held at every rate probed (the search stopped before failing)
    probes: tuple[ProbeResult, ...]
    resolved: bool  # ceiling / capacity - 1 within the search's resolution

    def at_capacity(self) -> ProbeResult | None:
        return next((p for p in self.probes if p.rate_rps == self.capacity_rps), None)


@dataclass(frozen=True)
class CapacityComparison:
    arm: str
    ratio: float  # capacity / the baseline's capacity
    low: float | None  # the bracket's ends (None where a ceiling is unknown)
    high: float | None


@dataclass(frozen=True)
class CapacityAnalysis:
    slo: str  # the targets, in words
    target_pct: float
    workload: str
    baseline: str
    arms: tuple[ArmCapacity, ...]
    comparisons: tuple[CapacityComparison, ...]


def probe_result(probe: CapacityProbe) -> ProbeResult:
    interval = binomtest(probe.met, probe.sent).proportion_ci(confidence_level=0.95, method="wilson")
    return ProbeResult(
        rate_rps=probe.rate_rps,
        sent=probe.sent,
        met=probe.met,
        attainment_pct=100.0 * probe.met / probe.sent,
        low_pct=100.0 * interval.low,
        high_pct=100.0 * interval.high,
        holds=probe.holds,
        phase=probe.phase,
    )


def arm_capacity(arm: str, probes: list[CapacityProbe], resolution: float) -> ArmCapacity:
    results = tuple(probe_result(p) for p in probes if p.sent > 0)
    failing = [p.rate_rps for p in results if not p.holds]
    below = min(failing) if failing else float("inf")
    held = [p.rate_rps for p in results if p.holds and p.rate_rps < below]
    capacity = max(held) if held else None
    ceiling = below if failing else None
    resolved = capacity is not None and ceiling is not None and ceiling / capacity - 1 <= resolution + 1e-9
    return ArmCapacity(arm, capacity, ceiling, results, resolved)


def _slo_text(slo: dict) -> str:
    parts = [
        f"{name.upper()} {slo[key]:g} ms"
        for key, name in (("ttft_ms", "ttft"), ("tpot_ms", "tpot"), ("e2e_ms", "e2e"))
        if slo.get(key) is not None
    ]
    return " / ".join(parts)


def analyze_capacity(record: CapacityRecord, probes: dict[str, list[CapacityProbe]]) -> CapacityAnalysis:
    """The answer from the record and each arm's probes (arms in the regime's order)."""
    arms = [a["name"] for a in record.regime["arms"] if a["name"] in probes]
    baseline = next(a["name"] for a in record.regime["arms"] if a["method"] == "baseline")
    found = tuple(arm_capacity(name, probes[name], record.settings.resolution) for name in arms)
    base = next((a for a in found if a.arm == baseline), None)
    comparisons = []
    for arm in found:
        if arm.arm == baseline or base is None or arm.capacity_rps is None or not base.capacity_rps:
            continue
        low = arm.capacity_rps / base.ceiling_rps if base.ceiling_rps else None
        high = arm.ceiling_rps / base.capacity_rps if arm.ceiling_rps else None
        comparisons.append(CapacityComparison(arm.arm, arm.capacity_rps / base.capacity_rps, low, high))
    return CapacityAnalysis(
        slo=_slo_text(record.slo),
        target_pct=record.settings.target_pct,
        workload=record.settings.workload,
        baseline=baseline,
        arms=found,
        comparisons=tuple(comparisons),
    )
