"""Open-loop arrival schedules (harness.core.arrivals) and the schedule probes
(harness.core.probes.schedule)."""

from __future__ import annotations

import statistics

import pytest

from harness.core.arrivals import arrival_offsets
from harness.core.probes.schedule import (
    achieved_rate_rps,
    behind_schedule,
    client_lag_s,
    lag_p90_s,
    queueing_s,
)
from harness.results import RequestRecord


def _gaps(offsets: list[float]) -> list[float]:
    return [b - a for a, b in zip(offsets, offsets[1:], strict=False)]


def test_schedules_are_fixed_by_the_seed_and_the_window() -> None:
    first = arrival_offsets(50, 2.0, "poisson", 1.0, seed=0, stream="code/2.0/0")
    assert first == arrival_offsets(50, 2.0, "poisson", 1.0, seed=0, stream="code/2.0/0")  # every arm alike
    assert first[0] == 0.0 and first == sorted(first) and len(first) == 50
    assert first != arrival_offsets(50, 2.0, "poisson", 1.0, seed=1, stream="code/2.0/0")
    assert first != arrival_offsets(50, 2.0, "poisson", 1.0, seed=0, stream="code/2.0/1")  # next repeat
    assert arrival_offsets(4, 2.0, "constant", 1.0, seed=0) == [0.0, 0.5, 1.0, 1.5]
    assert arrival_offsets(0, 2.0, "poisson", 1.0, seed=0) == []


@pytest.mark.parametrize(
    ("arrival", "burstiness", "cv"), [("poisson", 1.0, 1.0), ("gamma", 0.25, 2.0), ("gamma", 4.0, 0.5)]
)
def test_gaps_have_the_rate_and_the_burstiness_asked_for(arrival: str, burstiness: float, cv: float) -> None:
    """Mean gap 1/rate whatever the shape; the gaps' coefficient of variation is 1/sqrt(burstiness)
    (poisson: exponential gaps, CV 1)."""
    gaps = _gaps(arrival_offsets(20001, 4.0, arrival, burstiness, seed=3, stream="w"))
    mean = statistics.fmean(gaps)
    assert mean == pytest.approx(0.25, rel=0.05)
    assert statistics.stdev(gaps) / mean == pytest.approx(cv, rel=0.08)


def _sample(scheduled: float, dispatched: float, sent: float) -> RequestRecord:
    return RequestRecord(
        workload="w",
        prompt_id="p",
        concurrency=4,
        prompt_format="raw",
        request_rate=2.0,
        t_scheduled=scheduled,
        t_dispatched=dispatched,
        t_send=sent,
        t_first_token=sent + 0.1,
        t_done=sent + 1,
    )


def test_schedule_keeping_is_measured_per_request() -> None:
    on_time = [_sample(i * 0.5, i * 0.5 + 0.001, i * 0.5 + 0.002) for i in range(11)]
    assert achieved_rate_rps(on_time) == pytest.approx(2.0, rel=0.01)
    assert client_lag_s(on_time[3]) == pytest.approx(0.001) and queueing_s(on_time[3]) == pytest.approx(0.001)
    assert not behind_schedule(on_time, tolerance_s=0.05)
    # the client got to most requests 200 ms late: it, not the server, set a lighter load
    late = [_sample(i * 0.5, i * 0.5 + 0.2, i * 0.5 + 0.2) for i in range(11)]
    assert lag_p90_s(late) == pytest.approx(0.2) and behind_schedule(late, tolerance_s=0.05)
    # waiting for a max_concurrency slot is queueing, not the client falling behind
    capped = [_sample(i * 0.5, i * 0.5, i * 0.5 + 0.8) for i in range(11)]
    assert queueing_s(capped[0]) == pytest.approx(0.8) and not behind_schedule(capped, tolerance_s=0.05)
    closed = RequestRecord(workload="w", prompt_id="p", concurrency=1, prompt_format="raw", t_send=0.0)
    assert (
        client_lag_s(closed) is None and lag_p90_s([closed]) is None and not behind_schedule([closed], 0.05)
    )
