"""Power metrics from the raw samples stored with each window (``harness.run.sensors.power`` reads them).

Energy, mean/peak W and J/token are derived from ``[t, W, cumulative J, throttled]`` rows. Energy
comes from the energy counter delta where there is one, else from integrating power over time.
"""

from __future__ import annotations

from typing import Any


def summarize_power(samples: list[list[Any]] | None, output_tokens: int) -> dict[str, Any]:
    """mean/peak W, energy (J), J per output token, throttled, from raw [t, W, J, throttled] rows."""
    empty = {
        "duration_s": None,
        "mean_w": None,
        "peak_w": None,
        "energy_j": None,
        "j_per_token": None,
        "throttled": None,
    }
    if not samples or len(samples) < 2:
        return empty
    times = [s[0] for s in samples]
    watts = [s[1] for s in samples if s[1] is not None]
    counters = [s[2] for s in samples]
    if all(c is not None for c in counters):
        energy = counters[-1] - counters[0]
    elif len(watts) == len(samples):
        energy = sum(
            (times[i + 1] - times[i]) * (watts[i] + watts[i + 1]) / 2 for i in range(len(samples) - 1)
        )
    else:
        return empty
    duration = times[-1] - times[0]
    return {
        "duration_s": duration,
        "mean_w": energy / duration if duration > 0 else None,
        "peak_w": max(watts) if watts else None,
        "energy_j": energy,
        "j_per_token": energy / output_tokens if output_tokens else None,
        "throttled": any(bool(s[3]) for s in samples),
    }


def combine_power(stats: list[dict[str, Any]], output_tokens: int) -> dict[str, Any]:
    """Several windows' ``summarize_power`` results as one (the repeats of a window): energies and
    durations add, the peak is the highest; absent as soon as one window has no measurement."""
    if len(stats) == 1:
        return stats[0]
    if not stats or any(s["energy_j"] is None or not s["duration_s"] for s in stats):
        return summarize_power(None, output_tokens)
    energy, duration = sum(s["energy_j"] for s in stats), sum(s["duration_s"] for s in stats)
    peaks = [s["peak_w"] for s in stats if s["peak_w"] is not None]
    return {
        "duration_s": duration,
        "mean_w": energy / duration,
        "peak_w": max(peaks) if peaks else None,
        "energy_j": energy,
        "j_per_token": energy / output_tokens if output_tokens else None,
        "throttled": any(s["throttled"] for s in stats),
    }
