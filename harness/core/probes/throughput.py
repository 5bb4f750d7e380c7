"""Throughput and speedup.

output tok/s = total output tokens of successful requests / window wall time
speedup      = arm tok/s / baseline tok/s, same workload, same prompts, same concurrency
in flight    = sum of request times / window time (Little's law)
step time    = window wall time / the engine's steps in it (its own count: SpecCounters.engine_steps)

The speedup's interval is ``harness.derive.intervals``'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class Timed(Protocol):
    @property
    def e2e_s(self) -> float | None: ...


def output_tokens_per_s(total_output_tokens: int, duration_s: float) -> float | None:
    return total_output_tokens / duration_s if duration_s > 0 and total_output_tokens > 0 else None


def requests_per_s(requests_ok: int, duration_s: float) -> float | None:
    """Successful requests / window wall time: ``vllm bench serve``'s request throughput."""
    return requests_ok / duration_s if duration_s > 0 and requests_ok > 0 else None


def speedup(arm_tok_s: float | None, baseline_tok_s: float | None) -> float | None:
    if arm_tok_s is None or not baseline_tok_s:
        return None
    return arm_tok_s / baseline_tok_s


def step_ms(duration_s: float, engine_steps: float | None) -> float | None:
    """The mean time of one engine step over a window, ms: the window's wall time over the steps the
    engine counted in it. It includes the client's gaps between requests (small in a closed loop)
    and the steps that ran a prefill (the same prompts in every arm)."""
    return duration_s / engine_steps * 1000.0 if engine_steps and duration_s > 0 else None


def mean_in_flight(records: Sequence[Timed], duration_s: float) -> float | None:
    """Requests in flight on average over a window (Little's law: their summed request times over
    the window's time), failed requests included: what load the engine really had. A closed-loop
    window that drains (num_prompts near the concurrency) averages below its stated concurrency."""
    times = [r.e2e_s for r in records if r.e2e_s is not None]
    return sum(times) / duration_s if duration_s > 0 and times else None
