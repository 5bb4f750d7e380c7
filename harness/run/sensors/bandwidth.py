"""Memory bandwidth, the denominator of the decode floor (``harness.derive.ceiling.floor_step_ms``): measured
on this machine's CPU memory, or, for a GPU, the HBM bandwidth its vendor publishes.

The measurement is a STREAM-like copy in numpy. It runs on one thread (numpy's copy is one
``memcpy``), and one core cannot draw the bandwidth of all of a multi-core machine's memory
channels, while an engine decoding on every core can: the reading is lower than what the engine may
reach. A lower bandwidth makes the computed floor step longer, so the floor is an upper bound on the
true floor, and a measured step's distance from the floor looks smaller than it is."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

_MIB = 1 << 20


@dataclass(frozen=True)
class BandwidthReading:
    """A measured memory bandwidth: ``gb_s`` in 1e9 bytes per second, how it was measured, and on
    how many threads (the floor it gives is only as low as the bandwidth is high, see the module)."""

    gb_s: float
    method: str
    threads: int


def measure_memory_bandwidth(size_mib: int = 256, repeats: int = 5) -> BandwidthReading:
    """STREAM's copy kernel: ``dst[:] = src`` over two float64 arrays of ``size_mib`` MiB each, far
    larger than any cache at the default, so the copy runs from and to memory. A copy moves 2 x size
    bytes (the read and the write, STREAM's count: a write that first reads its cache line moves
    more, which the count leaves out, as STREAM does). The best of ``repeats`` timings, as STREAM
    reports: a slower one measured a neighbour or the scheduler, not the memory."""
    if size_mib < 1 or repeats < 1:
        raise ValueError(f"size_mib and repeats must be at least 1, got {size_mib} and {repeats}")
    n = size_mib * _MIB // 8
    src = np.ones(n, dtype=np.float64)  # ones, not zeros: calloc'd zero pages are not yet in memory
    dst = np.empty_like(src)
    np.copyto(dst, src)  # untimed: faults dst's pages in, so no timing counts the first touch
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - start)
    moved = 2 * n * 8
    return BandwidthReading(
        gb_s=moved / best / 1e9,
        method=f"numpy copy, best of {repeats}, {size_mib} MiB, 1 thread",
        threads=1,
    )


@dataclass(frozen=True)
class PublishedBandwidth:
    """A GPU's memory bandwidth from its vendor's specification (1e9 bytes per second, per GPU)."""

    gb_s: float
    part: str
    source: str


# Keyed by the name NVML reports (``nvmlDeviceGetName``, what ``environment.json`` records and a
# regime's ``hardware.gpu_model`` pins), normalised by _normalise. Peak figures, per GPU: no kernel
# reaches them, so a floor computed from them is the lowest the part allows.
_PUBLISHED: dict[str, PublishedBandwidth] = {
    "h100 80gb hbm3": PublishedBandwidth(3350.0, "H100 SXM5 80GB", "NVIDIA H100 datasheet"),
    "h100 pcie": PublishedBandwidth(2000.0, "H100 PCIe 80GB", "NVIDIA H100 datasheet"),
    "h100 nvl": PublishedBandwidth(3900.0, "H100 NVL 94GB", "NVIDIA H100 datasheet"),
    "h200": PublishedBandwidth(4800.0, "H200 SXM 141GB", "NVIDIA H200 datasheet"),
    "h200 nvl": PublishedBandwidth(4800.0, "H200 NVL 141GB", "NVIDIA H200 datasheet"),
    "a100-sxm4-80gb": PublishedBandwidth(2039.0, "A100 80GB SXM", "NVIDIA A100 datasheet"),
    "a100 80gb pcie": PublishedBandwidth(1935.0, "A100 80GB PCIe", "NVIDIA A100 datasheet"),
    "a100-sxm4-40gb": PublishedBandwidth(1555.0, "A100 40GB SXM", "NVIDIA A100 datasheet"),
    "a100-pcie-40gb": PublishedBandwidth(1555.0, "A100 40GB PCIe", "NVIDIA A100 datasheet"),
    "b200": PublishedBandwidth(8000.0, "B200 (HGX B200)", "NVIDIA HGX B200 datasheet"),
    "l40s": PublishedBandwidth(864.0, "L40S 48GB GDDR6", "NVIDIA L40S datasheet"),
}


def _normalise(gpu_model: str) -> str:
    # case, runs of spaces and the vendor prefix vary between drivers and regimes; the rest must match
    # exactly: "H100 NVL" and "H100 PCIe" are not the SXM part, whose bandwidth differs by half
    name = " ".join(gpu_model.split()).casefold()
    return name.removeprefix("nvidia ")


def published_gpu_bandwidth(gpu_model: str) -> PublishedBandwidth | None:
    """The published HBM (L40S: GDDR6) bandwidth of the GPU NVML names ``gpu_model``, or None for a
    part the table does not hold (a guess from a similar name would be a wrong floor)."""
    return _PUBLISHED.get(_normalise(gpu_model))
