"""The real NVML path, for the day a GPU is available (skipped without NVML)."""

from __future__ import annotations

import pytest

pynvml = pytest.importorskip("pynvml", reason="nvidia-ml-py is not installed")

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def nvml_reader():
    from harness.power import NvmlReader

    try:
        reader = NvmlReader()
    except Exception as exc:
        pytest.skip(f"NVML unavailable: {exc}")
    yield reader
    reader.close()


def test_nvml_power_reading(nvml_reader) -> None:
    reading = nvml_reader.read()
    assert reading.watts is not None and reading.watts > 0


def test_environment_lists_the_gpus(nvml_reader) -> None:
    from harness.environment import collect_gpus

    record = collect_gpus()
    assert record["gpu_probe"] == "nvml" and record["gpus"] and record["gpus"][0]["name"]
