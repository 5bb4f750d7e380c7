"""A capacity search's answer (``bench capacity``), derived from its probes only (pure): per arm the
highest offered rate at which the SLO attainment target held, the lowest above it at which it did
not, each probe's attainment with its Wilson 95% interval, and each speculative arm's capacity
against the baseline's.

    attainment (%)   = 100 x requests meeting every SLO target / requests sent (harness.core.probes.slo)
    holds            = attainment >= the target (e.g. 95%)
    capacity         = the highest probed rate that held below the lowest rate that did not
    ceiling          = that lowest failing rate: the capacity lies in [capacity, ceiling)
    vs the baseline  = capacity / the baseline's capacity, between (capacity / baseline's ceiling)
                       and (ceiling / baseline's capacity): the search's bracket, not a sampling
                       interval (the probes' own uncertainty is their Wilson intervals)

The search's rule (``next_step``) is here too, pure, so the run side follows it and the answer
names the rule that ended each arm's search from the stored probes alone. Its stop rules:

    resolution           the bracket [capacity, ceiling) is within the resolution
    max-rate             the SLO held at the cap on the rate (``max_rps``): doubling stops there
    min-rate             no rate held, and halving again would go below ``min_rps``
    missed-without-load  no rate held; at the lowest rate the attainment's Wilson 95% interval lies
                         wholly below the target, and halving to it did not raise the attainment
                         (some met it: none met is an overload still being halved out of). A
                         lower rate compatible with the target (5/6 at 90%: [44, 97]) never stops
                         it: the search halves on.
    max-probes           the probe budget is spent before any rule above ended it
    ended-early          the probes end before the rule did: the engine failed, or the search was
                         interrupted
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from harness.results.capacity import CapacityProbe, CapacityRecord, SearchSettings

StopRule = Literal["resolution", "max-rate", "min-rate", "missed-without-load", "max-probes", "ended-early"]


@dataclass(frozen=True)
class Step:
    """The next probe: its offered rate and phase."""

    rate_rps: float
    phase: Literal["bracket", "bisect"]


@dataclass(frozen=True)
class Stop:
    """Why an arm's search ended (the module's docstring defines each rule)."""

    rule: StopRule


def wilson_pct(met: int, sent: int) -> tuple[float, float]:
    """The Wilson 95% interval of an attainment of ``met`` of ``sent``, in percent."""
    # imported here: scipy.stats takes 0.6 s, and the CLI imports this module for every command
    from scipy.stats import binomtest

    interval = binomtest(met, sent).proportion_ci(confidence_level=0.95, method="wilson")
    return 100.0 * interval.low, 100.0 * interval.high


def next_step(probes: list[CapacityProbe], settings: SearchSettings) -> Step | Stop:
    """The next rate to probe, from the probes so far, or the rule that ends the search: doubling
    from ``start_rps`` while the SLO holds (never above ``max_rps``), halving while it does not,
    then geometric bisection between the highest rate that held and the lowest that did not."""
    if not probes:
        return Step(settings.start_rps, "bracket")
    found = _rule(probes, settings)
    if isinstance(found, Step) and len(probes) >= settings.max_probes:
        return Stop("max-probes")
    return found


def _rule(probes: list[CapacityProbe], settings: SearchSettings) -> Step | Stop:
    failing = [p.rate_rps for p in probes if not p.holds]
    ceiling = min(failing) if failing else None
    held = [p.rate_rps for p in probes if p.holds and (ceiling is None or p.rate_rps < ceiling)]
    if ceiling is None:
        top, cap = max(held), settings.max_rps
        if cap is not None and top >= cap:
            return Stop("max-rate")
        return Step(top * 2 if cap is None else min(top * 2, cap), "bracket")
    if not held:
        if _missed_without_load(probes, settings.target_pct):
            return Stop("missed-without-load")
        lower = ceiling / 2
        return Step(lower, "bracket") if lower >= settings.min_rps else Stop("min-rate")
    floor = max(held)
    if ceiling / floor - 1 <= settings.resolution:
        return Stop("resolution")
    return Step(floor * math.sqrt(ceiling / floor), "bisect")  # the geometric mean, without overflow


def _missed_without_load(probes: list[CapacityProbe], target_pct: float) -> bool:
    """Whether the SLO is missed without load: at the lowest rate probed, some met it, its Wilson
    interval lies wholly below the target, and halving to it did not raise the attainment."""
    if len(probes) < 2:
        return False
    lowest, above = sorted(probes, key=lambda p: p.rate_rps)[:2]
    share = lowest.met / lowest.sent
    return 0 < share <= above.met / above.sent and wilson_pct(lowest.met, lowest.sent)[1] < target_pct


def search_stop(probes: list[CapacityProbe], settings: SearchSettings) -> Stop:
    """The rule that ended a search with these probes (``ended-early`` where the rule had not)."""
    found = next_step(probes, settings)
    return found if isinstance(found, Stop) else Stop("ended-early")


@dataclass(frozen=True)
class ProbeResult:
    rate_rps: float
    sent: int
    met: int
    failed: int  # failed outright (HTTP errors, timeouts): apart from the SLO misses
    missed: int  # answered, but missed an SLO target
    errors: tuple[tuple[str, int], ...]  # the failed ones by kind, most first ((): not recorded)
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
    stop: Stop  # the rule that ended the search
    max_probes: int  # its probe budget

    @property
    def failed(self) -> int:
        return sum(p.failed for p in self.probes)

    @property
    def sent(self) -> int:
        return sum(p.sent for p in self.probes)

    def errors(self) -> tuple[tuple[str, int], ...]:
        """The failed requests of every probe by kind, most first."""
        counts: dict[str, int] = {}
        for probe in self.probes:
            for kind, count in probe.errors:
                counts[kind] = counts.get(kind, 0) + count
        return tuple(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

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
    settings: SearchSettings  # the search's: what its stop rules name (resolution, min and max rate)


def probe_result(probe: CapacityProbe) -> ProbeResult:
    low, high = wilson_pct(probe.met, probe.sent)
    return ProbeResult(
        rate_rps=probe.rate_rps,
        sent=probe.sent,
        met=probe.met,
        failed=probe.failed,
        missed=probe.missed,
        errors=tuple(sorted(probe.errors.items(), key=lambda kv: (-kv[1], kv[0]))),
        attainment_pct=100.0 * probe.met / probe.sent,
        low_pct=low,
        high_pct=high,
        holds=probe.holds,
        phase=probe.phase,
    )


def arm_capacity(arm: str, probes: list[CapacityProbe], settings: SearchSettings) -> ArmCapacity:
    resolution = settings.resolution
    results = tuple(probe_result(p) for p in probes if p.sent > 0)
    failing = [p.rate_rps for p in results if not p.holds]
    below = min(failing) if failing else float("inf")
    held = [p.rate_rps for p in results if p.holds and p.rate_rps < below]
    capacity = max(held) if held else None
    ceiling = below if failing else None
    resolved = capacity is not None and ceiling is not None and ceiling / capacity - 1 <= resolution + 1e-9
    stop = search_stop(probes, settings)
    return ArmCapacity(arm, capacity, ceiling, results, resolved, stop, settings.max_probes)


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
    found = tuple(arm_capacity(name, probes[name], record.settings) for name in arms)
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
        settings=record.settings,
    )
