"""Service-level objectives and goodput: how many requests a deployment would count as served well.

    a request meets the SLO  = it succeeded AND every target the regime sets holds for it:
                               TTFT <= ttft_ms, TPOT <= tpot_ms, E2E <= e2e_ms (absent target: no limit)
    SLO attainment (%)       = 100 x requests meeting the SLO / requests sent (a failed request misses)
    goodput (requests/s)     = requests meeting the SLO / window wall time

This is DistServe's goodput and what ``vllm bench serve --goodput`` reports; TTFT, TPOT and E2E are
the request record's own (``probes.latency``), TTFT and E2E counted from when the request was due:
an open-loop request that waited for a ``max_concurrency`` slot waited in the deployment's queue, and
a target it missed there is missed (counted from the send, a saturated server would look as if it
met its SLO: coordinated omission). Closed loop has no such wait: the same as from the send. A
request whose TPOT is undefined (one output token) meets a TPOT target: it had no second token to
be late.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol


class Targets(Protocol):
    ttft_ms: float | None
    tpot_ms: float | None
    e2e_ms: float | None


class Request(Protocol):
    tpot_s: float | None

    @property
    def ok(self) -> bool: ...

    @property
    def scheduled_ttft_s(self) -> float | None: ...

    @property
    def scheduled_e2e_s(self) -> float | None: ...


def _within(value_s: float | None, limit_ms: float | None, undefined_meets: bool = False) -> bool:
    if limit_ms is None:
        return True
    if value_s is None:
        return undefined_meets
    return value_s * 1000.0 <= limit_ms


def meets(request: Request, slo: Targets) -> bool:
    return (
        request.ok
        and _within(request.scheduled_ttft_s, slo.ttft_ms)
        and _within(request.tpot_s, slo.tpot_ms, undefined_meets=True)
        and _within(request.scheduled_e2e_s, slo.e2e_ms)
    )


def attainment_pct(requests: Iterable[Request], slo: Targets) -> float | None:
    """Share of the requests sent that met the SLO; None for no requests."""
    found = [meets(r, slo) for r in requests]
    return 100.0 * sum(found) / len(found) if found else None


def goodput_rps(requests: Iterable[Request], slo: Targets, duration_s: float) -> float | None:
    """Requests per second that met the SLO over the window's wall time; None without a duration."""
    if duration_s <= 0:
        return None
    return sum(meets(r, slo) for r in requests) / duration_s
