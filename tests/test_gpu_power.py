"""The real NVML path, for the day a GPU is available (skipped without NVML)."""

from __future__ import annotations

import pytest

pynvml = pytest.importorskip("pynvml", reason="nvidia-ml-py is not installed")

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def nvml_reader():
    from harness.run.sensors.power import NvmlReader

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
    from harness.run.sensors.environment import collect_gpus

    record = collect_gpus()
    assert record["gpu_probe"] == "nvml" and record["gpus"] and record["gpus"][0]["name"]


def test_nvml_tells_the_engine_from_a_neighbour_on_the_gpu(nvml_reader) -> None:
    """Two processes keep the GPU busy: one in its own process group plays the engine, the other is
    its neighbour. The watch attributes the GPU to the first and names the second, with its SM share
    where the device reports it per process."""
    import subprocess
    import sys
    import time

    from harness.run.sensors import gpu

    pytest.importorskip("torch", reason="a CUDA process needs torch")
    burn = (
        "import torch, time\n"
        "a = torch.randn(8192, 8192, device='cuda')\n"
        "end = time.time() + 10\n"
        "while time.time() < end:\n    a = (a @ a).clamp_(-1, 1)\n"
        "torch.cuda.synchronize()\n"
    )
    engine = subprocess.Popen([sys.executable, "-c", burn], start_new_session=True)
    neighbour = subprocess.Popen([sys.executable, "-c", burn])
    try:
        time.sleep(5)  # CUDA contexts up and multiplying
        watch = gpu.watch(gpu.open_process_reader(), engine_pgid=engine.pid)
        assert watch is not None
        time.sleep(3)
        used = watch.stop()
    finally:
        engine.wait(timeout=60)
        neighbour.wait(timeout=60)
    if not used["attributed"]:
        pytest.skip(f"NVML reports pids of another pid namespace here: {used['others']}")
    assert used["engine_devices"] and used["polls"] >= 2
    seen = {o["pid"]: o for o in used["others"]}
    assert neighbour.pid in seen and engine.pid not in seen, used
    if used["utilization_supported"]:
        assert seen[neighbour.pid]["sm_pct"] > 0, used
