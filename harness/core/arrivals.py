"""Open-loop arrival schedules: when each request of a rate window is due, decided before it starts.

Production traffic arrives on its own schedule whether or not the server keeps up. A rate window
sends its prompts at offsets computed up front from the regime's seed, so every arm sees the same
schedule (a fair comparison) and the schedule is stored with the window:

    gaps between requests ~ Gamma(shape = burstiness, scale = 1 / (rate x burstiness))   (mean 1 / rate)
    poisson  = gamma with burstiness 1 (exponential gaps)
    constant = every gap exactly 1 / rate
    first request at offset 0; offset i = the sum of the first i gaps

Burstiness below 1 bunches requests (more variable gaps), above 1 evens them out: the same model as
``vllm bench serve --burstiness`` and GuideLLM's Poisson profile.
"""

from __future__ import annotations

import hashlib
from typing import Literal

import numpy as np

Arrival = Literal["poisson", "constant", "gamma"]


def arrival_offsets(
    count: int, rate: float, arrival: Arrival, burstiness: float, seed: int, stream: str = ""
) -> list[float]:
    """Seconds from the window's start at which each of ``count`` requests is due. ``stream`` names
    the window (workload, rate, repeat) so each window has its own draw, the same for every arm."""
    if count <= 0:
        return []
    if arrival == "constant":
        return [i / rate for i in range(count)]
    shape = 1.0 if arrival == "poisson" else burstiness
    generator = np.random.default_rng(_seed(seed, stream))
    gaps = generator.gamma(shape, 1.0 / (rate * shape), size=count - 1)
    return [0.0, *np.cumsum(gaps).tolist()]


def ramp_dues(
    stages: list[tuple[float | None, float]], arrival: Arrival, burstiness: float, seed: int, stream: str = ""
) -> list[list[float]]:
    """A ramp's open-loop due times, per stage (``(request_rate or None, duration_s)``): each
    rate stage draws its own schedule (``stream``/stage index), shifted to the stage's start and cut
    at its end; a closed-loop stage has none."""
    out, start = [], 0.0
    for index, (rate, duration) in enumerate(stages):
        if rate is None:
            out.append([])
        else:
            enough = int(rate * duration * 3) + 8  # far more than the stage can hold: cut below
            offsets = arrival_offsets(enough, rate, arrival, burstiness, seed, f"{stream}/stage-{index}")
            out.append([start + t for t in offsets if t < duration])
        start += duration
    return out


def _seed(seed: int, stream: str) -> int:
    """A stable 64-bit seed per (regime seed, window): Python's hash() changes between processes."""
    return int.from_bytes(hashlib.sha256(f"{seed}/{stream}".encode()).digest()[:8], "little")
