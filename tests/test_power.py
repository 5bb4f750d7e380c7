"""The power probe with injected readers (NVML cannot run here) and its arithmetic."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from harness.core.probes.power import summarize_power
from harness.run.sensors.power import PowerReading, PowerSampler, RaplReader, open_reader


class FakeReader:
    source = "fake"

    def __init__(self, watts: float, with_counter: bool, throttle_after: int | None = None):
        self.watts, self.with_counter, self.throttle_after, self.calls = (
            watts,
            with_counter,
            throttle_after,
            0,
        )
        self.t0 = time.perf_counter()

    def read(self) -> PowerReading:
        self.calls += 1
        t = time.perf_counter()
        energy = (t - self.t0) * self.watts if self.with_counter else None
        throttled = self.throttle_after is not None and self.calls > self.throttle_after
        return PowerReading(t, self.watts, energy, throttled)

    def close(self) -> None:
        pass


def test_sampler_collects_during_the_window() -> None:
    sampler = PowerSampler(FakeReader(300.0, with_counter=True), period_s=0.02)
    sampler.start()
    time.sleep(0.3)
    readings = sampler.stop()
    assert len(readings) >= 5
    stats = summarize_power([[r.t, r.watts, r.energy_j, r.throttled] for r in readings], output_tokens=100)
    assert stats["mean_w"] == pytest.approx(300.0, rel=1e-6) and stats["peak_w"] == 300.0
    assert stats["j_per_token"] == pytest.approx(stats["energy_j"] / 100) and stats["throttled"] is False


def test_energy_from_counter_beats_integration() -> None:
    samples = [[0.0, 100.0, 1000.0, False], [1.0, 300.0, 1250.0, True], [2.0, 100.0, 1400.0, False]]
    stats = summarize_power(samples, output_tokens=40)
    assert stats["energy_j"] == pytest.approx(400.0) and stats["mean_w"] == pytest.approx(200.0)
    assert (
        stats["peak_w"] == 300.0
        and stats["j_per_token"] == pytest.approx(10.0)
        and stats["throttled"] is True
    )


def test_energy_by_trapezoid_without_counter() -> None:
    samples = [[0.0, 100.0, None, False], [1.0, 300.0, None, False], [2.0, 100.0, None, False]]
    assert summarize_power(samples, output_tokens=0)["energy_j"] == pytest.approx(400.0)
    assert summarize_power(samples, output_tokens=0)["j_per_token"] is None


def test_too_few_samples_is_absent_not_zero() -> None:
    assert summarize_power([], 10)["energy_j"] is None
    assert summarize_power(None, 10)["mean_w"] is None


def test_not_available_says_why() -> None:
    def broken():
        raise RuntimeError("no driver")

    reader, note = open_reader((broken,))
    assert reader is None and note == "not available (broken: no driver)"


def test_rapl_reads_package_domains_only(tmp_path: Path) -> None:
    for name, value in (("intel-rapl:0", "1000000"), ("intel-rapl:0:0", "999"), ("intel-rapl:1", "2000000")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "energy_uj").write_text(value)
    reading = RaplReader(tmp_path).read()
    assert reading.energy_j == pytest.approx(3.0) and reading.watts is None
    with pytest.raises(RuntimeError, match="no RAPL"):
        RaplReader(tmp_path / "empty")


def test_this_machine_without_nvml_or_rapl_goes_on() -> None:
    reader, note = open_reader()
    if reader is None:
        assert note.startswith("not available (nvml:") and "rapl:" in note
    else:
        reader.close()
