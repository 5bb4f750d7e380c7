"""Adaptive repeats: a window is repeated until its speedup's interval is as narrow as the regime
asks (never fewer than min, never more than max), what was reached is stored with each window, and
the summary says what the extra repeats cost."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from rich.console import Console

from harness.derive.summary import cell_metrics
from harness.results import RunDir, WindowRecord
from harness.run.plan import plan_regime, run_plan
from harness.run.runner import Runner
from tests.test_probes import ARM, _record

ROOT = Path(__file__).resolve().parent.parent


def _runner(tmp_path: Path, target: float, arm_index: int = 1) -> tuple[Runner, object]:
    data = yaml.safe_load((ROOT / "tests" / "regimes" / "cpu_e2e.yaml").read_text())
    data["workloads"] = [str(ROOT / "workloads" / "code_humaneval.yaml")]
    data["load"]["repeats"] = {"min": 2, "max": 5, "target_rel_half_width": target}
    data["power"] = {"enabled": False}
    path = tmp_path / "adaptive.yaml"
    path.write_text(yaml.safe_dump(data))
    plan = plan_regime(path)
    return Runner(run_plan(plan, "model"), tmp_path, Console(quiet=True)), plan.regime.arms[arm_index]


def _script(monkeypatch: pytest.MonkeyPatch, runner: Runner, tok_s: list[float], baseline: dict[int, float]):
    """Windows that 'measure' the scripted tok/s; returns the precision recorded after each."""
    reached = []

    def fake_window(run, arm, server, workload, concurrency, repeat=0, precision=None):
        reached.append(precision(repeat, tok_s[repeat]))
        return reached[-1], []  # the precision reached, and the window's records

    monkeypatch.setattr(runner, "_measure_window", fake_window)
    monkeypatch.setattr(runner, "_baseline_tok_s", lambda run, workload, concurrency: baseline)
    return reached


def test_stops_at_the_minimum_when_precise(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner, arm = _runner(tmp_path, target=0.05)
    reached = _script(monkeypatch, runner, [20.0, 20.2, 20.1, 20.0, 20.0], {0: 10.0, 1: 10.0})
    runner._measure_cell(RunDir(tmp_path), arm, None, runner.plan.workloads[0], 1)
    assert len(reached) == 2 and reached[-1]["metric"] == "speedup" and reached[-1]["rel_half_width"] <= 0.05


def test_repeats_until_precise_or_the_maximum(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner, arm = _runner(tmp_path, target=0.02)
    noisy = _script(monkeypatch, runner, [10.0, 20.0, 15.0, 12.0, 18.0], {0: 10.0, 1: 10.0})
    runner._measure_cell(RunDir(tmp_path), arm, None, runner.plan.workloads[0], 1)
    assert len(noisy) == 5 and noisy[-1]["rel_half_width"] > 0.02  # the maximum, target not reached
    runner, arm = _runner(tmp_path, target=0.05)
    settles = _script(monkeypatch, runner, [10.0, 14.0, 12.0, 12.0, 12.0], {})  # the baseline: its own tok/s
    runner._measure_cell(RunDir(tmp_path), arm, None, runner.plan.workloads[0], 1)
    assert 2 < len(settles) <= 5 and settles[-1]["metric"] == "output_tok_s"


def test_summary_reports_the_precision_and_its_cost() -> None:
    def window(repeat: int, duration: float, width: float) -> WindowRecord:
        return WindowRecord(
            workload="w",
            category="code",
            prompt_format="raw",
            concurrency=1,
            repeat=repeat,
            duration_s=duration,
            precision={"metric": "speedup", "rel_half_width": width, "target": 0.05},
        )

    records = [_record(0.0, 0.5, 2.5, 21, repeat=r) for r in range(3)]
    cell = cell_metrics(
        ARM,
        None,
        [window(0, 2.0, 0.5), window(1, 2.0, 0.2), window(2, 3.0, 0.04)],
        records,
        0.36,
        None,
        min_repeats=2,
        engine="vllm",
    )
    assert cell.rel_half_width == 0.04 and cell.precision_target == 0.05 and cell.extra_repeat_s == 3.0
