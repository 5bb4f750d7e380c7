"""Power: sample the accelerator's (or CPU package's) power during each measured window.

Sources, first available wins:
- ``nvml``: NVML power usage (W) per GPU, the total-energy counter (mJ) where supported, SM
  clock and clock-throttle reasons (thermal or power capping sets ``throttled``);
- ``rapl``: the CPU package energy counters of Linux powercap (``/sys/class/powercap``), the
  CPU-side equivalent;
- neither: the run records "not available" and goes on.

This module reads hardware; the metrics derived from its samples are ``harness.core.probes.power``'s.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from harness.run.sensors.devices import handles_at


@dataclass(frozen=True)
class PowerReading:
    t: float  # perf_counter seconds
    watts: float | None  # summed over devices; None where only an energy counter exists
    energy_j: float | None  # cumulative counter, summed over devices; None if unsupported
    throttled: bool = False


class PowerReader(Protocol):
    source: str

    def read(self) -> PowerReading: ...

    def close(self) -> None: ...


# NVML clock-throttle reasons that mean the chip slowed down for heat or power.
_THROTTLE_MASK_NAMES = (
    "nvmlClocksThrottleReasonSwPowerCap",
    "nvmlClocksThrottleReasonHwSlowdown",
    "nvmlClocksThrottleReasonSwThermalSlowdown",
    "nvmlClocksThrottleReasonHwThermalSlowdown",
    "nvmlClocksThrottleReasonHwPowerBrakeSlowdown",
)


def open_nvml(devices: list[int] | None = None) -> tuple[Any, list[Any]]:
    """nvidia-ml-py, initialised, and a handle per GPU: the NVML indices ``devices`` (the servers'
    own, ``harness.run.sensors.devices.choose_gpus``), else every visible GPU. ImportError, NVMLError or
    RuntimeError ("no GPU") mean "not available" here."""
    import pynvml  # nvidia-ml-py

    pynvml.nvmlInit()
    try:
        handles = [handle for _, handle in handles_at(pynvml, devices)]
    except Exception:
        pynvml.nvmlShutdown()
        raise
    if not handles:
        pynvml.nvmlShutdown()
        raise RuntimeError("NVML sees no GPU")
    return pynvml, handles


class NvmlReader:
    """The summed power and energy of ``devices`` (NVML indices; None: every visible GPU). A TP=1
    server on an 8-GPU node is charged its own GPU, not the seven idle ones beside it."""

    source = "nvml"

    def __init__(self, devices: list[int] | None = None) -> None:
        self._nvml, self._handles = open_nvml(devices)
        self._mask = sum(getattr(self._nvml, name, 0) for name in _THROTTLE_MASK_NAMES)

    def read(self) -> PowerReading:
        nvml, watts, throttled = self._nvml, 0.0, False
        joules: list[float | None] = []
        for handle in self._handles:
            watts += nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0
            try:
                joules.append(nvml.nvmlDeviceGetTotalEnergyConsumption(handle) / 1000.0)
            except nvml.NVMLError:  # VMs and MIG slices lack the counter: only the energy is lost
                joules.append(None)
            try:
                throttled |= bool(nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle) & self._mask)
            except nvml.NVMLError:
                pass
        energy = None if None in joules else sum(j for j in joules if j is not None)  # a part is not the sum
        return PowerReading(time.perf_counter(), watts, energy, throttled)

    def close(self) -> None:
        self._nvml.nvmlShutdown()


class RaplReader:
    source = "rapl"

    def __init__(self, root: Path = Path("/sys/class/powercap")) -> None:
        # Package domains only (intel-rapl:0, intel-rapl:1, ...); subdomains would double count.
        self._files = sorted(p / "energy_uj" for p in root.glob("intel-rapl:*") if p.name.count(":") == 1)
        self._files = [f for f in self._files if f.is_file()]
        if not self._files:
            raise RuntimeError(f"no RAPL package energy counters under {root}")
        self.read()  # unreadable (permissions) -> not available

    def read(self) -> PowerReading:
        energy = sum(int(f.read_text()) for f in self._files) / 1e6
        return PowerReading(time.perf_counter(), None, energy)

    def close(self) -> None:
        pass


def open_reader(
    factories: tuple[Callable[[], PowerReader], ...] | None = None, devices: list[int] | None = None
) -> tuple[PowerReader | None, str]:
    """The first power source that works here, or None with the reason each one gave; by default
    NVML over ``devices`` (see ``NvmlReader``), then RAPL."""
    if factories is None:
        factories = (partial(NvmlReader, devices), RaplReader)
    reasons = []
    for factory in factories:
        try:
            return factory(), ""
        except Exception as exc:  # ImportError, NVMLError, OSError, RuntimeError: all mean "not here"
            made = getattr(factory, "func", factory)  # a partial's class
            reasons.append(f"{getattr(made, 'source', made.__name__)}: {exc or type(exc).__name__}")
    return None, "not available (" + "; ".join(reasons) + ")"


class PowerSampler:
    """Reads a PowerReader every ``period_s`` on a thread between ``start`` and ``stop``."""

    def __init__(self, reader: PowerReader, period_s: float) -> None:
        self.reader, self.period_s = reader, period_s
        self.readings: list[PowerReading] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while True:
            try:
                self.readings.append(self.reader.read())
            except Exception:  # a failed read loses one sample, never the run
                pass
            if self._stop.wait(self.period_s):
                return

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> list[PowerReading]:
        self._stop.set()
        self._thread.join()
        try:
            self.readings.append(self.reader.read())  # close the window with a final reading
        except Exception:
            pass
        return self.readings
