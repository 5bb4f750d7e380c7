"""Per-request latency: TTFT and TPOT (percentiles over requests: ``harness.stats.quantile``).

    TTFT = time of the first token - time the request was sent
    TPOT = (E2E - TTFT) / (output_tokens - 1), output tokens counted from token ids

This is vLLM's / SGLang's / MLPerf's TPOT (AIPerf and GuideLLM call it ITL). Chunk gaps are
NOT used: under speculation one chunk carries ~tau tokens.
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
