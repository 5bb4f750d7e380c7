"""The capacity search's rule and answer without an engine (tests/test_endpoints.py runs it on the
real CPU engine): the next rate from the probes so far, against a server whose true capacity is
known, and the capacities, Wilson intervals and comparison derived from stored probes."""

from __future__ import annotations

import pytest
from scipy.stats import binomtest

from harness.derive.capacity import (
    ArmCapacity,
    Step,
    Stop,
    analyze_capacity,
    arm_capacity,
    next_step,
    probe_result,
)
from harness.results.capacity import CapacityProbe, CapacityRecord, SearchSettings

SETTINGS = SearchSettings(
    workload="w",
    start_rps=1.0,
    prompts_per_probe=20,
    max_probes=12,
    resolution=0.1,
    target_pct=95.0,
    min_rps=1 / 64,
)


def _searched(served, settings: SearchSettings = SETTINGS) -> list[CapacityProbe]:
    """The probes the search sends to a server that meets the SLO for ``served(rate)`` of 20
    requests at each rate."""
    probes: list[CapacityProbe] = []
    while isinstance(step := next_step(probes, settings), Step):
        rate, phase = step.rate_rps, step.phase
        met = served(rate)
        holds = 100 * met / 20 >= settings.target_pct
        probes.append(
            CapacityProbe(
                index=len(probes),
                rate_rps=rate,
                sent=20,
                met=met,
                failed=0,
                duration_s=1.0,
                holds=holds,
                phase=phase,
            )
        )
    return probes


def _search(true_capacity: float, settings: SearchSettings = SETTINGS) -> list[CapacityProbe]:
    """A server that holds the SLO exactly up to ``true_capacity``, fewer met as the load grows past it."""
    return _searched(
        lambda rate: 20 if rate <= true_capacity else min(18, int(19 * true_capacity / rate)), settings
    )


@pytest.mark.parametrize("true_capacity", [0.05, 0.7, 1.0, 3.3, 17.0])
def test_the_search_brackets_then_bisects_to_the_resolution(true_capacity: float) -> None:
    probes = _search(true_capacity)
    found = arm_capacity("a", probes, SETTINGS)
    assert found.capacity_rps is not None and found.ceiling_rps is not None
    assert found.capacity_rps <= true_capacity < found.ceiling_rps
    assert found.ceiling_rps / found.capacity_rps - 1 <= SETTINGS.resolution + 1e-9 and found.resolved
    # never offered above twice the highest rate that held (an open loop's backlog grows without bound)
    for index, probe in enumerate(probes):
        held = [p.rate_rps for p in probes[:index] if p.holds]
        assert not held or probe.rate_rps <= 2 * max(held) + 1e-12
    assert [p.phase for p in probes][:2] != ["bisect", "bisect"]


def test_the_search_stops_at_its_limits() -> None:
    assert len(_search(1e9, SETTINGS.model_copy(update={"max_probes": 5}))) == 5  # never fails: max_probes
    below = _search(1e-6)  # never holds, none met at any rate: halves down to min_rps, then stops
    assert all(not p.holds for p in below) and min(p.rate_rps for p in below) >= SETTINGS.min_rps
    assert arm_capacity("a", below, SETTINGS).capacity_rps is None
    missed = _searched(lambda rate: 10)  # half met at every rate: halving does not help, stops at once
    assert [p.rate_rps for p in missed] == [1.0, 0.5]


def test_halving_stops_at_min_rps_while_it_helps() -> None:
    probes = _searched(lambda rate: min(18, int(10 + 1 / rate)))  # attainment rises as the rate falls
    assert all(not p.holds for p in probes)
    assert min(p.rate_rps for p in probes) >= SETTINGS.min_rps and len(probes) < SETTINGS.max_probes


def test_an_overload_met_by_none_is_halved_out_of() -> None:
    """None met at 1 and at 0.5 req/s is an overload still being left (a review found the search gave
    up there): it halves on until the SLO holds."""
    found = arm_capacity("a", _searched(lambda rate: 20 if rate <= 0.3 else 0), SETTINGS)
    assert found.capacity_rps is not None and found.capacity_rps <= 0.3 < found.ceiling_rps


def test_the_comparison_says_a_ratio_only_where_it_means_one() -> None:
    from harness.commands.capacity import comparison_lines
    from harness.derive.capacity import CapacityAnalysis, CapacityComparison

    def arm(name: str, capacity: float | None, ceiling: float | None, probes: int = 2) -> ArmCapacity:
        results = tuple(probe_result(p) for p in _searched(lambda rate: 20)[:probes])
        return ArmCapacity(name, capacity, ceiling, results, False, Stop("max-probes"), 8)

    def lines(base: ArmCapacity, other: ArmCapacity, compared: tuple = ()) -> list[str]:
        analysis = CapacityAnalysis("TTFT 500 ms", 95.0, "w", "baseline", (base, other), compared, SETTINGS)
        return comparison_lines(analysis)

    both_open = lines(
        arm("baseline", 2, None), arm("ng", 4, None), (CapacityComparison("ng", 2.0, None, None),)
    )
    assert "not comparable" in both_open[0] and "+100%" not in both_open[0]
    half = lines(arm("baseline", 2, None), arm("ng", 1, 2), (CapacityComparison("ng", 0.5, None, 1.0),))
    assert "-50% [..., +0%]" in half[0]
    assert "met the SLO at no rate probed" in lines(arm("baseline", None, 1), arm("ng", 2, 4))[0]
    assert "was not measured" in lines(arm("baseline", None, None, probes=0), arm("ng", 2, 4))[0]


def test_the_answer_from_stored_probes() -> None:
    def probes(rates: list[tuple[float, int]]) -> list[CapacityProbe]:
        return [
            CapacityProbe(
                index=i, rate_rps=r, sent=20, met=m, failed=0, duration_s=1.0, holds=m >= 19, phase="bracket"
            )
            for i, (r, m) in enumerate(rates)
        ]

    record = CapacityRecord(
        source_path="x.yaml",
        fingerprint="f",
        stop_rule="r",
        slo={"ttft_ms": 500.0, "tpot_ms": 50.0},
        regime={
            "arms": [{"name": "baseline", "method": "baseline"}, {"name": "ngram_k4", "method": "ngram"}]
        },
        settings=SETTINGS,
    )
    analysis = analyze_capacity(
        record,
        {
            "baseline": probes([(1, 20), (2, 19), (4, 12), (3, 15)]),
            "ngram_k4": probes([(1, 20), (2, 20), (4, 19), (8, 5)]),
        },
    )
    base, ngram = analysis.arms
    assert (base.capacity_rps, base.ceiling_rps, ngram.capacity_rps, ngram.ceiling_rps) == (2, 3, 4, 8)
    (compared,) = analysis.comparisons
    assert (compared.ratio, compared.low, compared.high) == (2.0, 4 / 3, 8 / 2)
    at = base.at_capacity()
    expected = binomtest(19, 20).proportion_ci(confidence_level=0.95, method="wilson")
    assert at.attainment_pct == 95.0 and at.low_pct == pytest.approx(100 * expected.low)
    assert analysis.slo == "TTFT 500 ms / TPOT 50 ms"
