"""Per-request latency: TTFT, TPOT, E2E and ITL (percentiles: ``harness.core.stats.quantile``).

    TTFT = time of the first token - time the request was sent
    TTST = the second streamed chunk with content - the first (AIPerf 0.13's ``TTSTMetric``)
    TPOT = (E2E - TTFT) / (output_tokens - 1), output tokens counted from token ids
    E2E  = end of the stream - time the request was sent
    ITL  = the gaps between successive streamed chunks after the first, one per chunk
    from the due time (open loop) = TTFT or E2E + queueing (``probes.schedule.queueing_s``)

The names and definitions are ``vllm bench serve``'s (``vllm/benchmarks/serve.py``,
``calculate_metrics``; ITL from ``lib/endpoint_request_func.py``, one gap per chunk after the
first): TPOT is per output token, ITL per chunk, and they are not the same number. Under
speculation a chunk is one verify step with the drafts it accepted, so its gap is about TPOT times
the tokens it carries; ITL pools the chunk gaps of every request (vLLM's ``itls += output.itl``),
TPOT is one value per request. AIPerf and GuideLLM call the per-token figure ITL; here ITL is always vLLM's.

Open loop: a request due while ``max_concurrency`` requests are in flight waits for a slot before it
is sent. A user's request would have waited in that queue too, so counting TTFT and E2E from the
send leaves the queue out exactly when the server is slowest (coordinated omission): the figures
that count (the cell's TTFT and E2E, SLO attainment) start when the client got to the request, the
wait for a slot inside; the send-based TTFT is kept beside them. The client's own lateness (it got
to the request after its due time: ``client_lag_s``) is not added: it is the harness's, not the
deployment's, and a window where it is large is flagged as behind schedule. Closed loop has no
queue (the next request is sent as one completes): both figures are the same. TPOT and ITL are
after the first token, which no queue before the send changes.
"""

from __future__ import annotations

from itertools import pairwise


def ttft_s(t_send: float, t_first_token: float | None) -> float | None:
    return None if t_first_token is None else t_first_token - t_send


def tpot_s(
    t_send: float, t_first_token: float | None, t_done: float | None, output_tokens: int
) -> float | None:
    """None when undefined: no first token, or fewer than two output tokens."""
    if t_first_token is None or t_done is None or output_tokens < 2:
        return None
    return (t_done - t_first_token) / (output_tokens - 1)


def ttst_s(chunks: list[tuple[float, int, str]]) -> float | None:
    """Time to second token as AIPerf 0.13 defines it (``aiperf/metrics/types/ttst_metric.py``: the
    second content response's timestamp - the first's): the gap between the first two chunks with
    content, however many tokens each carried; None for fewer than two such chunks. Content: token
    ids, or text where the engine streams text alone and gives the ids at the end (SGLang's chat).
    Under speculation the first chunk after the prefill's carries the accepted drafts too."""
    times = content_times(chunks)
    return times[1] - times[0] if len(times) >= 2 else None


def content_times(chunks: list[tuple[float, int, str]]) -> list[float]:
    """The arrival times of the streamed chunks that carried content: tokens, or text (an engine
    that streams text alone counts 0 tokens in each chunk)."""
    return [time for time, count, text in chunks if count > 0 or text]


def e2e_s(t_send: float, t_done: float | None) -> float | None:
    return None if t_done is None else t_done - t_send


def itl_s(chunk_times: list[float]) -> list[float]:
    """The gap before each streamed chunk after the first (vLLM's ITL): one per chunk, however
    many tokens it carries ([] for fewer than two chunks)."""
    return [later - earlier for earlier, later in pairwise(chunk_times)]


def from_due_s(latency_s: float | None, queueing_s: float | None) -> float | None:
    """A send-based latency counted from when the request was due instead: its wait for a
    ``max_concurrency`` slot added (None: no queue, closed loop, the latency itself)."""
    if latency_s is None or queueing_s is None:
        return latency_s
    return latency_s + queueing_s
