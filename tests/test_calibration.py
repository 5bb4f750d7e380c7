"""Machine calibrations (``bench calibrate``, ``harness.run.calibration``): the calibration regime made
from a regime, the residual spread of its run as a ``Calibration``, the store's names, the lookup a
run makes (a match is used, anything else never; a named file that does not match is refused) and
the command's edges. The engine is never started: a whole calibration goes through the runner with
the stand-in server of tests/test_run_plan.py."""

from __future__ import annotations

import io
import json
import math
import statistics
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from harness.config.regime import Regime, load_regime
from harness.core.errors import UserError
from harness.core.machine import environment_fingerprint, machine_identity
from harness.results import Summary
from harness.results.calibration import CALIBRATION_FILE, Calibration
from harness.results.model import CellMetrics, RepeatMetrics
from harness.run.calibration import (
    CalibrationSource,
    calibration_mismatch,
    calibration_regime,
    chosen_calibration,
    default_store,
    find_calibration,
    measure_calibration,
    one_start_up_interval,
    read_calibration,
    write_calibration,
)
from harness.run.plan import plan_regime, prepare_run

ROOT = Path(__file__).resolve().parent.parent
SMOKE = ROOT / "regimes" / "cpu_smoke.yaml"
E2E = ROOT / "tests" / "regimes" / "cpu_e2e.yaml"  # pins vllm 0.31.0
CREATED = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)
MACHINE = {"engine_version": "0.32.0", "torch": "2.9.0", "cpu_model": "AMD EPYC 7B13", "cpu_count": 2}
OTHER_MACHINE = {**MACHINE, "cpu_model": "Intel Xeon Platinum 8481C"}


def _console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=200), out


def bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
    )


# --- the calibration regime ---------------------------------------------------------------------


def test_the_calibration_regime_is_the_regime_on_a_small_window_started_n_times() -> None:
    regime = load_regime(SMOKE)
    made = calibration_regime(regime)
    assert made.name == "cpu_smoke-calibration"
    load = made.load
    assert (load.server_starts, load.repeats) == (6, 1)
    assert (load.num_prompts, load.max_output_tokens) == (6, 32)  # min(6, 8) prompts, min(96, 32) tokens
    assert load.concurrency == [1, 4] and load.warmup_requests == 2  # the levels themselves kept
    assert not made.exactness_applies() and not made.exactness.enabled
    assert not made.distribution_check.enabled and made.gates.rules == []
    # everything that defines the servers is the regime's own
    for part in ("hardware", "engine", "target", "sampling", "arms", "workloads", "cost", "chat"):
        assert getattr(made, part) == getattr(regime, part), part
    assert made.fingerprint() != regime.fingerprint()  # the small window is not the regime

    chosen = calibration_regime(regime, rounds=5, num_prompts=3, max_output_tokens=10)
    assert (chosen.load.server_starts, chosen.load.num_prompts, chosen.load.max_output_tokens) == (5, 3, 10)


def test_a_calibration_regime_needs_five_rounds_two_arms_and_no_sweep() -> None:
    regime = load_regime(SMOKE)
    with pytest.raises(UserError, match="at least 5 rounds"):
        calibration_regime(regime, rounds=4)
    alone = regime.model_copy(update={"arms": [regime.baseline_arm]})
    with pytest.raises(UserError, match="needs the baseline and at least one other arm"):
        calibration_regime(alone)
    with pytest.raises(UserError, match="is a study"):
        calibration_regime(load_regime(ROOT / "tests" / "regimes" / "cpu_study_e2e.yaml"))


def test_a_window_the_regime_refuses_is_a_user_error() -> None:
    regime = load_regime(SMOKE)
    with pytest.raises(UserError, match=r"the calibration regime of 'cpu_smoke': load.max_output_tokens"):
        calibration_regime(regime, max_output_tokens=0)


# --- the spread of a calibration run ------------------------------------------------------------

# start-up mean tok/s per round: (baseline, ngram_k4) in two cells; a third cell only the baseline has
CODE_1 = [(100.0, 120.0), (104.0, 121.0), (98.0, 119.0), (101.0, 126.0), (103.0, 118.0)]
CHAT_4 = [(210.0, 190.0), (200.0, 196.0), (205.0, 181.0), (215.0, 199.0), (198.0, 188.0)]


def _cell(arm: str, workload: str, concurrency: int, by_round: list[float]) -> CellMetrics:
    """A cell with only what the spread reads: one repeat per start-up (the rest left unset)."""
    repeats = [
        RepeatMetrics(
            repeat=r,
            server_start=r,
            duration_s=1.0,
            output_tokens=1,
            output_tok_s=v,
            tau=None,
            usd_per_mtok=None,
        )
        for r, v in enumerate(by_round)
    ]
    return CellMetrics.model_construct(
        arm=arm, workload=workload, concurrency=concurrency, per_repeat=repeats
    )


def _summary() -> Summary:
    cells = [
        _cell("baseline", "code", 1, [b for b, _ in CODE_1]),
        _cell("ngram_k4", "code", 1, [n for _, n in CODE_1]),
        _cell("baseline", "chat", 4, [b for b, _ in CHAT_4]),
        _cell("ngram_k4", "chat", 4, [n for _, n in CHAT_4]),
        _cell("baseline", "chat", 1, [150.0, 151.0, 149.0, 152.0, 150.0]),  # ngram failed here: no spread
    ]
    return Summary.model_construct(run_id="20261201-093000-a1b2c3", cells=cells)


def _expected_sd() -> float:
    """Two arms: the residual variance is half the sample variance of the per-round log ratios;
    the cells' variances are averaged."""
    variances = [statistics.variance([math.log(n / b) for b, n in rows]) / 2 for rows in (CODE_1, CHAT_4)]
    return math.sqrt(sum(variances) / 2)


def test_the_residual_spread_of_a_calibration_run_becomes_a_calibration() -> None:
    regime = load_regime(SMOKE)
    found = measure_calibration(_summary(), regime, MACHINE, created=CREATED)
    assert found.sd == pytest.approx(_expected_sd(), rel=1e-12)
    assert found.sd == pytest.approx(0.026503, abs=1e-6)
    assert (found.df, found.rounds, found.cells) == (4, 5, 2)  # one cell's df: (2 - 1)(5 - 1)
    assert found.arms == ["baseline", "ngram_k4"]  # the arms measured, in the regime's order
    assert found.regime_name == "cpu_smoke" and found.regime_fingerprint == regime.fingerprint()
    assert found.machine_fingerprint == environment_fingerprint(MACHINE)
    assert found.machine == machine_identity(MACHINE) and found.machine["cpu_model"] == "AMD EPYC 7B13"
    assert found.created == "2026-12-01T09:30:00+00:00" and found.run_id == "20261201-093000-a1b2c3"
    assert found.label().startswith("this machine's calibration of 2026-12-01 (5 rounds of 2 arms")


def test_what_a_calibration_buys_a_run_with_one_start_up() -> None:
    found = measure_calibration(_summary(), load_regime(SMOKE), MACHINE, created=CREATED)
    interval = one_start_up_interval(found)
    # a t interval with the calibration's 4 df: 1.00x * exp(+-t(0.975, 4) * sd * sqrt(2))
    half = 2.7764451051977987 * found.sd * math.sqrt(2)
    assert (interval.df, interval.source) == (4, "calibration")
    assert (interval.low, interval.high) == pytest.approx((math.exp(-half), math.exp(half)), rel=1e-9)


def test_no_cell_with_two_arms_over_two_rounds_is_no_calibration() -> None:
    summary = Summary.model_construct(
        run_id="r", cells=[_cell("baseline", "code", 1, [100.0, 101.0]), _cell("ngram_k4", "code", 1, [90.0])]
    )
    with pytest.raises(UserError, match="r: no cell has two arms measured on two or more of the same"):
        measure_calibration(summary, load_regime(SMOKE), MACHINE)


# --- the store ----------------------------------------------------------------------------------


def _calibration(regime: Regime, environment: dict = MACHINE, created: datetime = CREATED) -> Calibration:
    return measure_calibration(_summary(), regime, environment, created=created)


def test_the_store_names_a_file_by_regime_fingerprint_and_machine(tmp_path: Path) -> None:
    regime = load_regime(SMOKE)
    calibration = _calibration(regime)
    path = write_calibration(calibration, tmp_path / "store")
    fingerprint, machine = regime.fingerprint(), environment_fingerprint(MACHINE)
    assert path == tmp_path / "store" / f"cpu_smoke-{fingerprint[:12]}-{machine[:12]}.json"
    assert read_calibration(path) == calibration
    again = write_calibration(
        _calibration(regime, created=datetime(2026, 12, 2, tzinfo=UTC)), tmp_path / "store"
    )
    assert again == path and read_calibration(path).created.startswith("2026-12-02")  # replaced


def test_the_default_store_is_the_users_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BENCH_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_store() == tmp_path / "home" / ".cache" / "spec-bench" / "calibrations"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_store() == tmp_path / "xdg" / "spec-bench" / "calibrations"
    monkeypatch.setenv("BENCH_CACHE_DIR", str(tmp_path / "bench"))  # where the harness caches models
    assert default_store() == tmp_path / "bench" / "calibrations"
    written = write_calibration(_calibration(load_regime(SMOKE)))
    assert written.parent == tmp_path / "bench" / "calibrations"


# --- the lookup ---------------------------------------------------------------------------------


def test_a_run_finds_only_its_own_regime_and_machines_calibration(tmp_path: Path) -> None:
    regime = load_regime(SMOKE)
    store = tmp_path / "store"
    mine = _calibration(regime)
    write_calibration(mine, store)
    write_calibration(_calibration(regime, OTHER_MACHINE), store)  # the same regime on another machine
    longer = regime.model_copy(update={"load": regime.load.model_copy(update={"max_output_tokens": 128})})
    write_calibration(_calibration(longer), store)  # another fingerprint on this machine
    assert len(list(store.iterdir())) == 3
    assert find_calibration(store, regime, MACHINE) == mine
    assert find_calibration(store, regime, {**MACHINE, "torch": "2.10.0"}) is None  # torch changed
    assert find_calibration(tmp_path / "none", regime, MACHINE) is None
    # a renamed regime (the same fingerprint): the newest calibration of either name
    renamed = regime.model_copy(update={"name": "smoke"})
    newer = _calibration(renamed, created=datetime(2026, 12, 5, tzinfo=UTC))
    write_calibration(newer, store)
    assert find_calibration(store, regime, MACHINE) == newer
    source = CalibrationSource(store=store)
    # the newest is days old: not used, and the run says why
    notes: list[str] = []
    assert chosen_calibration(source, regime, MACHINE, "regimes/cpu_smoke.yaml", notes) is None
    assert len(notes) == 1 and notes[0].startswith("not used: this machine's calibration of 2026-12-05")
    assert "days old; a calibration holds for 24 h" in notes[0]
    assert notes[0].endswith("bench calibrate regimes/cpu_smoke.yaml makes a fresh one")
    old = write_calibration(newer, tmp_path / "old")
    today = _calibration(renamed, created=datetime.now(UTC) - timedelta(hours=3))
    write_calibration(today, store)
    assert chosen_calibration(source, regime, MACHINE) == today
    assert chosen_calibration(CalibrationSource(store=store, enabled=False), regime, MACHINE) is None
    # one the user names that is too old is refused, as one of another machine is
    with pytest.raises(UserError, match="does not describe regimes/cpu_smoke.yaml on this machine today"):
        chosen_calibration(CalibrationSource(file=old), regime, MACHINE, "regimes/cpu_smoke.yaml")


def test_a_broken_file_in_the_store_is_named(tmp_path: Path) -> None:
    regime = load_regime(SMOKE)
    path = write_calibration(_calibration(regime), tmp_path)
    data = json.loads(path.read_text())
    del data["sd"]
    path.write_text(json.dumps(data))
    with pytest.raises(UserError, match=rf"{path}: not a calibration file: sd: Field required"):
        find_calibration(tmp_path, regime, MACHINE)


def test_a_named_calibration_of_another_machine_or_regime_is_refused_with_what_differs(
    tmp_path: Path,
) -> None:
    regime = load_regime(SMOKE)
    theirs = write_calibration(_calibration(regime, OTHER_MACHINE), tmp_path)
    with pytest.raises(UserError) as refused:
        chosen_calibration(CalibrationSource(file=theirs), regime, MACHINE, "regimes/cpu_smoke.yaml")
    message = str(refused.value)
    assert message.startswith(f"{theirs}: this calibration does not describe regimes/cpu_smoke.yaml on this")
    assert "cpu_model: Intel Xeon Platinum 8481C vs AMD EPYC 7B13" in message
    assert "regime fingerprint" not in message and "bench calibrate regimes/cpu_smoke.yaml" in message

    longer = regime.model_copy(update={"load": regime.load.model_copy(update={"max_output_tokens": 128})})
    problems = calibration_mismatch(_calibration(regime), longer, MACHINE)
    assert problems == [
        f"regime fingerprint: {regime.fingerprint()} (calibrated: cpu_smoke) vs {longer.fingerprint()} "
        "(this run: cpu_smoke)"
    ]
    mine = write_calibration(_calibration(regime, created=datetime.now(UTC)), tmp_path / "mine")
    assert chosen_calibration(CalibrationSource(file=mine), regime, MACHINE) == read_calibration(mine)
    with pytest.raises(UserError, match="no such calibration file"):
        chosen_calibration(CalibrationSource(file=tmp_path / "gone.json"), regime, MACHINE)


# --- prepare_run: the lookup before anything starts ---------------------------------------------


def _prepared(monkeypatch: pytest.MonkeyPatch, environment: dict) -> tuple[object, list[str]]:
    """The e2e regime's plan on a machine that matches it, with ``environment``; the list records
    the models resolved (none: refused before anything was built)."""
    plan = plan_regime(E2E)
    calls: list[str] = []
    monkeypatch.setattr(plan.adapter, "installed_version", lambda: "0.31.0")
    monkeypatch.setattr("harness.run.plan.collect_environment", lambda version: environment)
    monkeypatch.setattr(plan, "resolve_models", lambda build, console=None: calls.append("resolve") or "/m")
    monkeypatch.setattr(plan, "drafter_fits", lambda model: {})
    return plan, calls


def test_prepare_run_uses_this_machines_calibration_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    environment = {**MACHINE, "engine_version": "0.31.0"}
    plan, _ = _prepared(monkeypatch, environment)
    stored = _calibration(plan.regime, environment, created=datetime.now(UTC))
    write_calibration(stored, tmp_path)
    console, out = _console()
    ready = prepare_run(plan, console, calibration=CalibrationSource(store=tmp_path))
    assert ready.calibration == stored
    assert (
        f"Intervals from this machine's calibration of {stored.created[:10]} (5 rounds of 2 arms"
        in out.getvalue()
    )
    assert (
        prepare_run(plan, console, calibration=CalibrationSource(store=tmp_path, enabled=False)).calibration
        is None
    )
    # a resumed run keeps the calibration in its directory: nothing is looked up
    assert (
        prepare_run(
            plan, console, resumed_model="/m", calibration=CalibrationSource(store=tmp_path)
        ).calibration
        is None
    )
    # the default store: the user's cache
    monkeypatch.setenv("BENCH_CACHE_DIR", str(tmp_path / "cache"))
    assert prepare_run(plan, console).calibration is None
    write_calibration(stored)
    assert prepare_run(plan, console).calibration == stored


def test_prepare_run_refuses_a_named_calibration_of_another_machine_before_building(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan, calls = _prepared(monkeypatch, {**MACHINE, "engine_version": "0.31.0"})
    theirs = write_calibration(
        _calibration(plan.regime, {**OTHER_MACHINE, "engine_version": "0.31.0"}), tmp_path
    )
    with pytest.raises(UserError, match="cpu_model: Intel Xeon Platinum 8481C vs AMD EPYC 7B13"):
        prepare_run(plan, _console()[0], allow_mismatch=True, calibration=CalibrationSource(file=theirs))
    assert calls == []  # refused before the target or any drafter was built


# --- the whole command, through the runner, with the stand-in server ----------------------------


def test_calibrate_then_run_with_one_start_up_gets_the_calibrations_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harness.cli import _parser
    from harness.commands import calibrate
    from harness.run.runner import run_regime
    from tests.test_run_plan import StandIn

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    data = yaml.safe_load(E2E.read_text())
    data["target"] = {"path": str(model), "dtype": "bfloat16", "max_model_len": 1024}
    data["workloads"] = [str(ROOT / "workloads" / "code_humaneval.yaml")]
    data["load"] |= {"concurrency": [2], "warmup_requests": 0, "num_prompts": 4}
    # a ramp (the calibration leaves it out), short: against the stand-in each second of it is
    # hundreds of requests, ~1 s of this process's CPU
    data["load"]["ramp"] = [{"concurrency": c, "duration_s": 0.3} for c in (1, 2)]
    regime = tmp_path / "stand_in.yaml"
    regime.write_text(yaml.safe_dump(data))
    monkeypatch.setattr("harness.run.plan.get_adapter", lambda name: StandIn())
    console, out = _console()
    store = tmp_path / "store"
    args = _parser().parse_args(
        ["calibrate", str(regime), "--rounds", "5", "--num-prompts", "2", "--store", str(store)]
        + ["--results-dir", str(tmp_path / "results"), "--allow-mismatch"]
    )
    assert calibrate.run(args, console) == 0, out.getvalue()
    (path,) = store.iterdir()
    calibration = read_calibration(path)
    (run,) = (tmp_path / "results" / "cpu_e2e-calibration").iterdir()  # a run like any other
    summary = Summary.model_validate_json((run / "summary.json").read_text())
    assert [a.status for a in summary.arms] == ["ok", "ok"], out.getvalue()
    assert not (run / CALIBRATION_FILE).exists()  # a calibration run uses none
    assert load_regime(regime).load.ramp and not (run / "arms" / "baseline" / "ramp_windows.jsonl").exists()
    cell = summary.cell("ngram_k4", "code_humaneval", 2)
    assert cell is not None and sorted(cell.startup_tok_s()) == [0, 1, 2, 3, 4] and cell.repeats == 5
    assert (calibration.rounds, calibration.df, calibration.cells, calibration.run_id) == (5, 4, 1, run.name)
    assert calibration.regime_fingerprint == load_regime(regime).fingerprint()
    environment = json.loads((run / "environment.json").read_text())
    assert calibration.machine_fingerprint == environment_fingerprint(environment)
    printed = " ".join(out.getvalue().split())
    assert (
        f"start-up spread {100 * calibration.sd:.1f}% (residual sd of log start-up tok/s; 4 degrees"
        in printed
    )
    assert "with one start-up per arm now gets a t interval with 4 degrees of freedom, [" in printed
    assert f"Stored: {path}" in printed and f"--calibration-store {store} uses it" in printed

    # a run of the regime itself, one start-up per arm: its interval is the calibration's
    again, measured = run_regime(
        regime, tmp_path / "results", console, allow_mismatch=True, calibration=CalibrationSource(store=store)
    )
    assert json.loads((again.root / CALIBRATION_FILE).read_text()) == calibration.model_dump(mode="json")
    speedup = measured.cell("ngram_k4", "code_humaneval", 2)
    assert speedup is not None and speedup.estimate.source == "calibration"
    # the calibration's 4 df for the start-ups, combined with the prompts' sampling (a jackknife)
    assert speedup.estimate.prompts and 1 <= speedup.estimate.df <= 4 + speedup.estimate.prompts - 1
    assert speedup.estimate.low is not None
    assert "Intervals from this machine's calibration of" in out.getvalue()


# --- the command line ---------------------------------------------------------------------------


def test_calibrate_help_and_argument_errors() -> None:
    shown = bench("calibrate", "--help")
    assert shown.returncode == 0
    assert all(
        flag in shown.stdout
        for flag in ("--rounds N", "--num-prompts P", "--max-output-tokens T", "--store DIR")
    )
    assert "calibrate" in bench("--help").stdout
    few = bench("calibrate", "regimes/cpu_smoke.yaml", "--rounds", "4")
    assert few.returncode == 2 and "argument --rounds: 4: a calibration needs at least 5 rounds" in few.stderr
    none = bench("calibrate", "regimes/cpu_smoke.yaml", "--num-prompts", "0")
    assert none.returncode == 2 and "argument --num-prompts: 0: expected a number >= 1" in none.stderr
    word = bench("calibrate", "regimes/cpu_smoke.yaml", "--max-output-tokens", "many")
    assert word.returncode == 2 and "'many': expected a whole number" in word.stderr
    study = bench("calibrate", "tests/regimes/cpu_study_e2e.yaml")
    assert study.returncode == 2 and "is a study (a sweep: section)" in study.stdout
    assert "Traceback" not in study.stdout + study.stderr


def test_run_calibration_flags() -> None:
    shown = bench("run", "--help")
    assert shown.returncode == 0
    assert all(
        f in shown.stdout for f in ("--calibration-store DIR", "--calibration FILE", "--no-calibration")
    )
    both = bench("run", "regimes/cpu_smoke.yaml", "--calibration", "x.json", "--no-calibration")
    assert both.returncode == 2 and "not allowed with argument" in both.stderr
    study = bench("run", "tests/regimes/cpu_study_e2e.yaml", "--no-calibration")
    assert study.returncode == 2 and "apply to a new run" in study.stdout
    resumed = bench("run", "--resume", "tests/fixtures/run_v1", "--calibration-store", "store")
    assert resumed.returncode == 2 and "a resumed run keeps the calibration it started with" in resumed.stdout
