"""The night's plan `bench validate` prints (issue 72): start-ups cold and warm from a table of
published costs or this machine's earlier runs, windows, the reference pass, the wall time and $
at the regime's price; a design that cannot decide said as a warning. No engine starts here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from harness.cli import main
from harness.config.engines.vllm import VllmAdapter
from harness.config.regime import load_regime
from harness.results.model import RunTiming
from harness.results.records import ArmStatus, Invocation, Round
from harness.run.outlook import (
    STARTUP_COSTS,
    earlier_round_minutes,
    night_plan,
    params_billions,
    published_startup,
)

ROOT = Path(__file__).resolve().parent.parent
GPU_NIGHTS = ("h200_tp8", "h100_tp1_llama31_8b", "h100_tp8", "h200_policy_sglang")
NO_GPU = {
    "gpus": [],
    "engine_version": "vllm 0.34.0",
    "gpu_probe": "NVML unavailable: Driver Not Loaded",
    "hub_token": "environment",
}


def _validate_here(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, regime: Path) -> str:
    """``bench validate REGIME`` in this process on a machine without a GPU (its vLLM the regime's
    0.34.0): what it printed, whitespace folded."""
    monkeypatch.setattr("harness.run.sensors.environment.collect_environment", lambda version: NO_GPU)
    monkeypatch.setattr(VllmAdapter, "installed_version", lambda self: "vllm 0.34.0")
    monkeypatch.setattr("harness.cli.signal.signal", lambda *args: None)  # pytest keeps its own handlers
    assert main(["validate", str(regime)]) == 0
    return " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("name", GPU_NIGHTS)
def test_each_gpu_regime_plans_a_night_that_decides(
    name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Validate prints the night: cold and warm start-ups with their sources, windows, the
    targeted margins (no full reference pass over 2+ rounds), the expected wall time and its $ at
    the regime's own price (the $ is the minutes at that price), within the budget; neither a
    "cannot decide" nor a prompts warning."""
    monkeypatch.chdir(ROOT)  # SGLang's tuned arm opens its tier file from there
    monkeypatch.setattr("harness.run.outlook.earlier_round_minutes", lambda *args: None)  # no run here
    said = _validate_here(monkeypatch, capsys, ROOT / "regimes" / f"{name}.yaml")
    regime = load_regime(ROOT / "regimes" / f"{name}.yaml")
    assert "cannot decide" not in said and "warning:" not in said, said
    assert re.search(
        r"start-ups: each arm's first \d+ s cold .* later ones \d+ s warm; assumed: published", said
    )
    assert re.search(r"vLLM #\d+", said), said
    # 2+ rounds: no full reference pass; the noise floor is the baseline's own start-ups (issue 81)
    assert "margins (greedy exactness): logprobs only for the prompts an arm diverged on" in said
    assert "the baseline's reference pass" not in said
    found = re.search(r"expected: (\d+) min \(([\d.]+) rounds\), \$([\d.]+) at \$([\d.]+)/h", said)
    assert found is not None, said
    minutes, dollars, price = int(found[1]), float(found[3]), float(found[4])
    assert price == pytest.approx(regime.price_per_hour())
    assert dollars == pytest.approx(minutes / 60 * price, abs=0.01 + price / 120)
    most = re.search(r"at most (\d+) min \((\d) rounds\)", said)
    assert most is not None and int(most[1]) <= regime.load.budget_minutes()  # type: ignore[operator]
    assert int(most[2]) >= 3, said  # room to add rounds until decided


def test_a_design_of_one_start_up_without_calibration_is_warned_of(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """One start-up per arm and no calibration: every cell would end unverified, and validate says
    so as a warning (the night's plan for its one round still printed); a calibration's spread
    lets the same design decide."""
    data = yaml.safe_load((ROOT / "regimes" / "cpu_smoke.yaml").read_text())
    data["workloads"] = [str(ROOT / "regimes" / w) for w in data["workloads"]]
    data["load"]["server_starts"] = 1
    path = tmp_path / "one_start.yaml"
    path.write_text(yaml.safe_dump(data))
    monkeypatch.chdir(tmp_path)
    said = _validate_here(monkeypatch, capsys, path)
    assert "warning: this design cannot decide (one start-up per arm" in said, said
    assert 'every cell would end "unverified"' in said
    assert "Night's plan (5 arms x 1 round;" in said and "expected: " in said
    regime = load_regime(path)
    assert night_plan(regime).cannot is not None
    assert night_plan(regime, spread=(0.05, 20, "a calibration")).cannot is None
    shipped = night_plan(load_regime(ROOT / "regimes" / "cpu_smoke.yaml"))
    assert shipped.cannot is None and "cannot decide" not in shipped.text()


def test_the_start_up_table_names_its_sources() -> None:
    """Every row of published start-up costs names where its figures are from, and the plan says
    it: vLLM #19824 and #20264 at TP 8, #10460 and #11005 for an 8B at TP 1; cold above warm."""
    for row in STARTUP_COSTS:
        assert re.search(r"#\d{4,5}|run \d{8}-\d{6}", row.sources), row
        assert row.seconds(compiled=True, compiles=True, cold=True) > row.seconds(True, True, cold=False)
    tp8 = night_plan(load_regime(ROOT / "regimes" / "h200_tp8.yaml")).text()
    assert "vLLM #19824" in tp8 and "#20264" in tp8 and "210 s cold" in tp8 and "59 s warm" in tp8
    tp1 = night_plan(load_regime(ROOT / "regimes" / "h100_tp1_llama31_8b.yaml")).text()
    assert "vLLM #10460, #11005" in tp1 and "8B at TP 1" in tp1
    assert params_billions("meta-llama/Llama-3.1-8B-Instruct") == 8
    assert params_billions("Qwen/Qwen2.5-0.5B-Instruct") == 0.5
    assert params_billions("SmolLM2-135M-Instruct.Q4_1.gguf") == pytest.approx(0.135)
    assert params_billions("deepseek-ai/DeepSeek-V3-0324") is None
    deepseek = load_regime(ROOT / "regimes" / "h200_tp8_deepseek_mtp.yaml")
    assert published_startup(deepseek).params_b[1] == float("inf")  # its size unread: the largest row


def _earlier_run(results: Path, regime_name: str, arms: list[str], run_id: str) -> None:
    """A run of two complete rounds, 12 minutes each, its arms' start-ups 300 s then 40 s."""
    root = results / regime_name / run_id
    timing = RunTiming(
        invocations=[
            Invocation(wall_s=60 + 2 * 720, prepare_s=60, startup_s=680, measured_s=700, warmup_s=30)
        ],
        rounds=[Round(order=arms, server_starts=dict.fromkeys(arms, i), done=arms) for i in range(2)],
    )
    root.mkdir(parents=True)
    (root / "timing.json").write_text(timing.model_dump_json())
    for arm in arms:
        (root / "arms" / arm).mkdir(parents=True)
        status = ArmStatus(status="ok", startup_s=300.0, startups_s=[300.0, 40.0])
        (root / "arms" / arm / "status.json").write_text(status.model_dump_json())


def test_an_earlier_run_of_the_regime_replaces_the_assumed_figures(tmp_path: Path) -> None:
    """This machine's own earlier run of the regime: its minutes a round and its arms' start-ups
    (first, later) replace the table's and the token pace's, and the plan says measured, in which
    run; without one, they are assumed."""
    regime = load_regime(ROOT / "regimes" / "h100_tp1_llama31_8b.yaml")
    assumed = night_plan(regime, earlier_round_minutes(tmp_path, regime)).text()
    assert "assumed: published" in assumed and "measured: run" not in assumed
    _earlier_run(tmp_path, regime.name, [a.name for a in regime.arms], "20270101-000000")
    earlier = earlier_round_minutes(tmp_path, regime)
    assert earlier is not None and earlier.minutes == pytest.approx(12.0)
    assert (earlier.first_startup_s, earlier.later_startup_s) == (300.0, 40.0)
    measured = night_plan(regime, earlier)
    text = measured.text()
    assert "each arm's first 300 s (measured: run 20270101-000000's first start-ups)" in text, text
    assert "later ones 40 s (measured: run 20270101-000000's later start-ups)" in text
    assert "at 12.0 min a round (measured: run 20270101-000000)" in measured.outlook
    assert "assumed: published" not in text
    found = re.search(r"expected: (\d+) min \(([\d.]+) rounds\)", text)
    assert found is not None and int(found[1]) == round(12.0 * float(found[2]))


def test_two_rounds_with_three_arms_warn_that_an_unequal_spread_goes_unseen() -> None:
    from harness.run.outlook import UNEQUAL_SPREAD

    smoke = night_plan(load_regime(ROOT / "regimes" / "cpu_smoke.yaml"))  # 2 rounds, 5 arms
    assert UNEQUAL_SPREAD in smoke.warnings and f"warning: {UNEQUAL_SPREAD}" in smoke.text()
    default = night_plan(load_regime(ROOT / "regimes" / "cpu_default.yaml"))  # 4 rounds, 2 arms
    assert UNEQUAL_SPREAD not in default.warnings
