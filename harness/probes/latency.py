"""Per-request latency: TTFT and TPOT (percentiles over requests: ``harness.stats.quantile``).

    TTFT = time of the first token - time the request was sent
    TPOT = (E2E - TTFT) / (output_tokens - 1), output tokens counted from token ids
    from the due time (open loop) = TTFT or E2E + queueing (``probes.schedule.queueing_s``)

This is vLLM's / SGLang's / MLPerf's TPOT (AIPerf and GuideLLM call it ITL). Chunk gaps are
NOT used: under speculation one chunk carries ~tau tokens.

Open loop: a request due while ``max_concurrency`` requests are in flight waits for a slot before it
is sent. A user's request would have waited in that queue too, so counting TTFT and E2E from the
send leaves the queue out exactly when the server is slowest (coordinated omission): the figures
that count (the cell's TTFT, SLO attainment) start when the client got to the request, the wait
for a slot inside; the send-based ones are kept beside them. The client's own lateness (it got to
the request after its due time: ``client_lag_s``) is not added: it is the harness's, not the
deployment's, and a window where it is large is flagged as behind schedule. Closed loop has no
queue (the next request is sent as one completes): both figures are the same. TPOT is per token
after the first, which no queue before the send changes.
"""

from __future__ import annotations


def ttft_s(t_send: float, t_first_token: float | None) -> float | None:
    return None if t_first_token is None else t_first_token - t_send


def tpot_s(
    t_send: float, t_first_token: float | None, t_done: float | None, output_tokens: int
) -> float | None:
    """None when undefined: no first token, or fewer than two output tokens."""
    if t_first_token is None or t_done is None or output_tokens < 2:
        return None
    return (t_done - t_first_token) / (output_tokens - 1)


def from_due_s(latency_s: float | None, queueing_s: float | None) -> float | None:
    """A send-based latency counted from when the request was due instead: its wait for a
    ``max_concurrency`` slot added (None: no queue, closed loop, the latency itself)."""
    if latency_s is None or queueing_s is None:
        return latency_s
    return latency_s + queueing_s
