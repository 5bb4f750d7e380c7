"""A ramp's stages and boundaries (``load.ramp``): formulas over one continuous window's requests.

A ramp window runs its stages back to back on one clock, so a stage is a span of time, not a set of
requests: a request sent late in one stage streams most of its tokens in the next. So

    stage tok/s      = output tokens whose chunk arrived inside [start, end) / (end - start)
                       (a chunk's tokens counted from token ids, as everywhere: ``harness.run.client``)
    stage in flight  = the time-average of the requests in flight over [start, end)
    TPOT inside      = TPOT of the requests sent and finished inside the stage
    TPOT across      = TPOT of the requests in flight as the stage began (sent in an earlier stage,
                       done in this one or later): what the change of load did to requests already
                       running, the spike at the boundary a schedule's threshold would show

Tokens streamed after the last stage ends (the drain) belong to no stage. Pure: plain values in.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class Streamed(Protocol):
    """What a ramp's formulas read of a request (``RequestRecord`` has it)."""

    t_send: float
    t_done: float | None
    chunks: list[tuple[float, int, str]]

    @property
    def ok(self) -> bool: ...

    @property
    def tpot_s(self) -> float | None: ...


def tokens_between(records: Sequence[Streamed], start: float, end: float) -> int:
    """Output tokens of successful requests whose chunks arrived inside [start, end)."""
    return sum(n for r in records if r.ok for t, n, _ in r.chunks if start <= t < end)


def in_flight_between(records: Sequence[Streamed], start: float, end: float) -> float | None:
    """The time-average number of requests in flight over [start, end) (failed ones included: the
    load the engine had); a request not done by the end counts to the end."""
    if end <= start:
        return None
    busy = sum(
        max(0.0, min(r.t_done if r.t_done is not None else end, end) - max(r.t_send, start)) for r in records
    )
    return busy / (end - start)


def tpot_inside(records: Sequence[Streamed], start: float, end: float) -> list[float]:
    """TPOT of the successful requests sent and finished inside [start, end)."""
    return [
        r.tpot_s
        for r in records
        if r.ok and r.tpot_s is not None and start <= r.t_send and r.t_done is not None and r.t_done < end
    ]


def tpot_across(records: Sequence[Streamed], boundary: float) -> list[float]:
    """TPOT of the successful requests in flight at ``boundary`` (sent before it, done after it)."""
    return [
        r.tpot_s
        for r in records
        if r.ok
        and r.tpot_s is not None
        and r.t_send < boundary
        and r.t_done is not None
        and r.t_done > boundary
    ]
