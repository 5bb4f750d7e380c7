"""Requests whose stream was not decoding: flagged and counted, never dropped.

A finished request's TPOT is (E2E - TTFT) / (tokens - 1). Two streams make that a number about
something else than decoding, and a cell's TPOT quietly lower:

- **one chunk**: every output token (at least two) arrived in a single chunk, e.g. 20 tokens at
  once after an 843 ms TTFT: the engine stalled or something between it and the client buffered
  the stream; its TPOT (0.007 ms) is the time to read one chunk.
- **faster than a step**: a request gets at most K + 1 tokens per engine step (K draft tokens
  and the one the verification makes; 1 for the baseline), and a step takes about the cell's
  median gap between chunks. A TPOT below half of that median gap / (K + 1) is not decoding:
  its tokens came in a burst after a stall. Half leaves room for a request that drew every
  draft while its neighbours' steps ran slower.

The request's numbers stay in the cell (they are what the client saw); the counts reach the
findings and each request's kind the export's requests table (``odd``).
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence

from harness.core.probes.latency import content_times, itl_s
from harness.results.records import RequestRecord

ONE_CHUNK = "all tokens in one chunk"
FASTER_THAN_A_STEP = "a burst faster than an engine step"
# the cell's step time is the median of its chunk gaps; below this many, too few to say
MIN_GAPS = 8
STEP_SHARE = 0.5  # a TPOT below this share of the fastest a step allows is flagged


def token_chunks(record: RequestRecord) -> list[float]:
    """The arrival times of the chunks that carried content (``probes.latency.content_times``:
    tokens, or text where an engine streams text alone)."""
    return content_times(record.chunks)


def tpot_floor_s(records: Sequence[RequestRecord], tokens_per_step: int) -> float | None:
    """The lowest TPOT a cell's requests can reach by decoding: ``STEP_SHARE`` of the cell's
    median chunk gap over ``tokens_per_step``; None with fewer than ``MIN_GAPS`` gaps."""
    gaps = [gap for r in records if r.ok for gap in itl_s(token_chunks(r))]
    if len(gaps) < MIN_GAPS:
        return None
    return STEP_SHARE * statistics.median(gaps) / tokens_per_step


def odd_kind(record: RequestRecord, floor_s: float | None) -> str | None:
    """Why a finished request's TPOT is not a decode speed (``ONE_CHUNK``, ``FASTER_THAN_A_STEP``),
    None where it is (or the request failed, or made fewer than two tokens)."""
    if not record.ok or record.output_tokens < 2:
        return None
    if len(token_chunks(record)) == 1:
        return ONE_CHUNK
    tpot = record.tpot_s
    if floor_s is not None and tpot is not None and tpot < floor_s:
        return FASTER_THAN_A_STEP
    return None


def odd_kinds(records: Sequence[RequestRecord], tokens_per_step: int) -> list[str | None]:
    """Each of one cell's requests' ``odd_kind``, in order."""
    floor = tpot_floor_s(records, tokens_per_step)
    return [odd_kind(r, floor) for r in records]


def odd_counts(records: Sequence[RequestRecord], tokens_per_step: int) -> dict[str, int]:
    """A cell's odd requests by kind, most first; {} for none."""
    return dict(Counter(k for k in odd_kinds(records, tokens_per_step) if k is not None).most_common())


def tokens_per_step(num_speculative_tokens: int | None) -> int:
    """The most tokens one engine step gives a request: K drafts and the verified one."""
    return (num_speculative_tokens or 0) + 1
