"""The decode floor's denominator (harness/run/sensors/bandwidth.py): a small STREAM-like copy measured
here (4 MiB, so it takes milliseconds; the number itself is the machine's), and the published GPU
bandwidths, which must cover every GPU a shipped regime pins."""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import pytest

from harness.run.sensors.bandwidth import (
    BandwidthReading,
    PublishedBandwidth,
    measure_memory_bandwidth,
    published_gpu_bandwidth,
)

ROOT = Path(__file__).resolve().parent.parent


def test_a_small_copy_measures_a_positive_bandwidth() -> None:
    reading = measure_memory_bandwidth(size_mib=4, repeats=2)
    assert isinstance(reading, BandwidthReading)
    assert math.isfinite(reading.gb_s) and reading.gb_s > 0
    assert reading.method == "numpy copy, best of 2, 4 MiB, 1 thread"
    assert reading.threads == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        reading.gb_s = 1.0  # type: ignore[misc]


@pytest.mark.parametrize(("size_mib", "repeats"), [(0, 5), (4, 0)])
def test_a_copy_of_nothing_is_refused(size_mib: int, repeats: int) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        measure_memory_bandwidth(size_mib=size_mib, repeats=repeats)


@pytest.mark.parametrize(
    ("nvml_name", "gb_s"),
    [
        ("NVIDIA H100 80GB HBM3", 3350.0),  # the SXM5 part
        ("NVIDIA H100 PCIe", 2000.0),
        ("NVIDIA H100 NVL", 3900.0),
        ("NVIDIA H200", 4800.0),
        ("NVIDIA A100-SXM4-80GB", 2039.0),
        ("NVIDIA A100-SXM4-40GB", 1555.0),
        ("NVIDIA B200", 8000.0),
        ("NVIDIA L40S", 864.0),
    ],
)
def test_the_published_bandwidth_of_the_names_nvml_reports(nvml_name: str, gb_s: float) -> None:
    published = published_gpu_bandwidth(nvml_name)
    assert isinstance(published, PublishedBandwidth)
    assert published.gb_s == gb_s
    assert published.source.startswith("NVIDIA ") and "datasheet" in published.source


def test_a_name_matches_whatever_its_case_spacing_or_prefix_but_not_a_similar_part() -> None:
    assert published_gpu_bandwidth("nvidia  h200") == published_gpu_bandwidth("H200")
    assert published_gpu_bandwidth("NVIDIA H100") is None  # which H100: SXM, PCIe and NVL differ
    assert published_gpu_bandwidth("NVIDIA GeForce RTX 4090") is None
    assert published_gpu_bandwidth("") is None


def test_every_gpu_a_shipped_regime_pins_has_a_published_bandwidth() -> None:
    pinned = {
        match.strip().strip("'\"")
        for path in sorted((ROOT / "regimes").glob("*.yaml"))
        for match in re.findall(r"^\s*gpu_model:\s*([^#\n]+)", path.read_text(), re.MULTILINE)
    }
    assert pinned, "no regime pins a gpu_model: the scan found nothing to check"
    missing = sorted(name for name in pinned if published_gpu_bandwidth(name) is None)
    assert not missing, f"regimes pin GPUs with no published bandwidth: {missing}"
