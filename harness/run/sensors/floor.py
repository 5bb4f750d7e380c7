"""What the decode floor (``harness.derive.ceiling``) is computed from, read on this machine before the
servers start: the target's footprint (its safetensors headers and config) and the memory
bandwidth (measured on a CPU; the part's published figure on a GPU, since NVML measures none).
Recorded in ``environment.json`` as ``decode_floor``; absent parts are None, never guessed."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from harness.run.sensors.bandwidth import measure_memory_bandwidth, published_gpu_bandwidth
from harness.run.sensors.weights import local_model_dir, target_footprint


def decode_floor_inputs(
    kind: str, model: str, dtype: str, tensor_parallel: int, gpu_names: list[str]
) -> dict[str, Any]:
    """``kind``: the regime's hardware kind; ``model``: the target as the engine loads it (a
    directory, or a hub id found in this machine's hub cache); ``gpu_names``: the servers' GPUs as
    NVML names them."""
    folder = local_model_dir(model)
    try:
        footprint = target_footprint(folder, dtype) if folder is not None else None
    except (OSError, ValueError):  # an unreadable header or an unknown dtype: no footprint, no floor
        footprint = None
    bandwidth: dict[str, Any] | None = None
    if kind == "cpu":
        try:
            reading = measure_memory_bandwidth()
        except MemoryError:  # a memory limit below the probe's 512 MiB: no bandwidth, no floor
            reading = None
        if reading is not None:
            bandwidth = {"gb_s": reading.gb_s, "source": f"measured: {reading.method}"}
    elif gpu_names and (published := published_gpu_bandwidth(gpu_names[0])) is not None:
        bandwidth = {"gb_s": published.gb_s, "source": f"published: {published.part}, {published.source}"}
    return {
        "footprint": asdict(footprint) if footprint is not None else None,
        "bandwidth": bandwidth,
        "tensor_parallel": tensor_parallel,
    }
