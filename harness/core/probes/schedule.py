"""Open-loop windows: did the load arrive as scheduled? (``harness.core.arrivals`` makes the schedule.)

    achieved rate (requests/s) = (requests sent - 1) / (last send - first send)
    client lag                 = when the client got to a request - when it was due
    queueing                   = when it was sent - when the client got to it (waiting for a
                                 max_concurrency slot: the load the cap holds back)
    behind schedule            = the 90th percentile client lag exceeds load.schedule_tolerance_s

A client that falls behind its own schedule sets a lighter load than the regime states: its
window says so, so the server's numbers are never reported as if the stated rate had arrived.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from harness.core.stats import quantile

if TYPE_CHECKING:  # a formula knows the record's shape, not the store
    from harness.results.records import RequestRecord


def achieved_rate_rps(records: Sequence[RequestRecord]) -> float | None:
    sends = sorted(r.t_send for r in records)
    if len(sends) < 2 or sends[-1] <= sends[0]:
        return None
    return (len(sends) - 1) / (sends[-1] - sends[0])


def client_lag_s(record: RequestRecord) -> float | None:
    if record.t_scheduled is None or record.t_dispatched is None:
        return None
    return max(0.0, record.t_dispatched - record.t_scheduled)


def queueing_s(record: RequestRecord) -> float | None:
    if record.t_dispatched is None:
        return None
    return max(0.0, record.t_send - record.t_dispatched)


def lag_p90_s(records: Sequence[RequestRecord]) -> float | None:
    lags = [lag for r in records if (lag := client_lag_s(r)) is not None]
    return quantile(lags, 0.9) if lags else None


def behind_schedule(records: Sequence[RequestRecord], tolerance_s: float) -> bool:
    lag = lag_p90_s(records)
    return lag is not None and lag > tolerance_s
