"""Throughput and speedup.

output tok/s = total output tokens of successful requests / window wall time
speedup      = arm tok/s / baseline tok/s, same workload, same prompts, same concurrency

The speedup's interval is ``harness.intervals``'s.
"""

from __future__ import annotations


def output_tokens_per_s(total_output_tokens: int, duration_s: float) -> float | None:
    return total_output_tokens / duration_s if duration_s > 0 and total_output_tokens > 0 else None


def speedup(arm_tok_s: float | None, baseline_tok_s: float | None) -> float | None:
    if arm_tok_s is None or not baseline_tok_s:
        return None
    return arm_tok_s / baseline_tok_s
