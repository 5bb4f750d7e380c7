"""Several start-ups of each arm's server (``load.server_starts``): what changes from one start-up to
the next (measured here: the float32 baseline at 100, 107 and 115.5 tok/s on three start-ups with
nothing else on the machine) is inside the speedup's interval, because the interval resamples
start-ups, not the repeats on one server."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from harness.errors import UserError
from harness.plan import describe_plan, plan_regime, run_plan
from harness.regime import load_regime
from harness.results import RunDir, read_jsonl
from harness.results.model import RepeatMetrics
from harness.results.records import ArmStatus
from harness.runner import Runner
from harness.study.placement import time_limit_minutes
from harness.summary import summarize
from harness.verdict import interval_note

ROOT = Path(__file__).resolve().parent.parent
SMOKE = ROOT / "tests" / "fixtures" / "run_v3_smoke"
E2E = ROOT / "tests" / "regimes" / "cpu_e2e.yaml"


def _regime(tmp_path: Path, **load: object) -> Path:
    data = yaml.safe_load(E2E.read_text())
    data["workloads"] = [str(ROOT / "workloads" / "code_humaneval.yaml")]
    data["load"].update(load)
    path = tmp_path / "starts.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_server_starts_in_the_regime(tmp_path: Path) -> None:
    one = load_regime(_regime(tmp_path))
    assert one.load.server_starts == 1
    # a regime that does not set it keeps its fingerprint; one that starts servers twice is another regime
    assert load_regime(_regime(tmp_path, server_starts=1)).fingerprint() == one.fingerprint()
    two = load_regime(_regime(tmp_path, server_starts=2, repeats=3))
    assert two.fingerprint() != one.fingerprint()
    assert [two.load.repeat_index(s, r) for s in range(2) for r in range(3)] == [0, 1, 2, 3, 4, 5]
    assert time_limit_minutes(two) == 2 * time_limit_minutes(load_regime(_regime(tmp_path, repeats=3)))
    assert "each arm's server started 2 times, each window 3 times per start-up" in describe_plan(
        plan_regime(_regime(tmp_path, server_starts=2, repeats=3))
    )
    with pytest.raises(UserError, match=r"load\.server_starts: server_starts > 1 needs a fixed repeats"):
        load_regime(
            _regime(tmp_path, server_starts=2, repeats={"min": 2, "max": 4, "target_rel_half_width": 0.05})
        )
    with pytest.raises(UserError, match=r"load\.server_starts"):
        load_regime(_regime(tmp_path, server_starts=0))


def _second_start_up(run: Path, arm: str, slower: float) -> None:
    """Append a second start-up of ``arm``'s server to a real run's files: the same requests and
    counters, every window ``slower`` times as long (what a slower start-up looks like)."""
    directory = run / "arms" / arm
    windows = read_jsonl(directory / "windows.jsonl")
    samples = read_jsonl(directory / "samples.jsonl")
    with open(directory / "windows.jsonl", "a") as out:
        for window in windows:
            again = {**window, "repeat": 1, "server_start": 1, "duration_s": window["duration_s"] * slower}
            out.write(json.dumps(again) + "\n")
    with open(directory / "samples.jsonl", "a") as out:
        for sample in samples:
            out.write(json.dumps({**sample, "repeat": 1}) + "\n")


def test_the_interval_resamples_start_ups(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(SMOKE, run)
    record = json.loads((run / "regime.json").read_text())
    record["regime"]["load"]["server_starts"] = 2
    (run / "regime.json").write_text(json.dumps(record))
    one = summarize(SMOKE)
    _second_start_up(run, "baseline", slower=1.0)
    _second_start_up(run, "ngram_k4", slower=1.25)  # ngram's second start-up is 25% slower
    two = summarize(run)

    before = next(c for c in one.cells if c.arm == "ngram_k4" and c.concurrency == 1)
    cell = next(
        c for c in two.cells if (c.arm, c.workload, c.level) == ("ngram_k4", before.workload, before.level)
    )
    assert cell.server_starts == 2 and [r.server_start for r in cell.per_repeat] == [0, 1]
    first, second = (r.speedup for r in cell.per_repeat)
    assert first == pytest.approx(before.speedup, rel=1e-6) and second == pytest.approx(first / 1.25)
    # the interval is over the two start-ups, not over the requests of one
    assert cell.speedup_interval == "server_starts"
    assert cell.speedup_low == pytest.approx(second, rel=0.02) and cell.speedup_high == pytest.approx(
        first, rel=0.02
    )
    assert before.speedup_interval == "requests"
    assert "2 server start-ups per arm" in interval_note(two)
    assert interval_note(one).endswith("one server start-up per arm (load.server_starts)")
    # arms measured on one start-up keep their own interval from the requests
    untrained = next(c for c in two.cells if c.arm == "eagle3_untrained_k3")
    assert untrained.server_starts == 1 and untrained.speedup_interval == "requests"


def test_repeats_on_one_start_up_are_averaged_into_one_sample() -> None:
    cell = next(c for c in summarize(SMOKE).cells if c.arm == "ngram_k4")
    repeat = cell.per_repeat[0]

    def at(start: int, index: int, tok_s: float) -> RepeatMetrics:
        return repeat.model_copy(update={"server_start": start, "repeat": index, "output_tok_s": tok_s})

    one_server = cell.model_copy(update={"per_repeat": [at(0, 0, 10.0), at(0, 1, 12.0), at(0, 2, 14.0)]})
    assert one_server.independent_samples("output_tok_s") == [10.0, 12.0, 14.0]
    starts = [at(0, 0, 10.0), at(0, 1, 12.0), at(1, 2, 20.0), at(1, 3, 22.0)]
    assert cell.model_copy(update={"per_repeat": starts}).independent_samples("output_tok_s") == [11.0, 21.0]


def _rounds_runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail: set[tuple[int, str]]):
    """A runner whose start-ups only record their order (and fail where ``fail`` says), so the
    orchestration is tested without servers; the real start-ups are the engine test's."""
    regime = _regime(tmp_path, server_starts=3)
    runner = Runner(run_plan(plan_regime(regime), "model"), tmp_path, Console(quiet=True))
    runner.started = 0.0
    order: list[tuple[int, str]] = []

    def start_up(run, arm, start, startups):
        order.append((start, arm.name))
        startups.append(1.0)
        failed = (start, arm.name) in fail
        last = start == 2
        state = "failed" if failed else ("ok" if last else "running")
        run.write_status(arm.name, ArmStatus(status=state, startups_s=startups))

    monkeypatch.setattr(runner, "_run_start_up", start_up)
    monkeypatch.setattr("harness.runner._write_summary", lambda run: None)
    monkeypatch.setattr(runner, "_write_timing", lambda run, interrupted: None)
    return runner, RunDir.create_at(tmp_path / "run"), order


def test_start_ups_go_in_rounds_and_a_failed_arm_sits_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner, run, order = _rounds_runner(tmp_path, monkeypatch, fail={(1, "baseline")})
    runner._run_arms(run)
    # start-up 1 of every arm, then start-up 2, ...: a drift of the machine is spread over the arms
    assert order == [(0, "baseline"), (0, "ngram_k4"), (1, "baseline"), (1, "ngram_k4"), (2, "ngram_k4")]
    assert run.read_status("baseline").status == "failed" and run.read_status("ngram_k4").status == "ok"


def test_an_interrupt_between_start_ups_leaves_no_arm_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner, run, order = _rounds_runner(tmp_path, monkeypatch, fail=set())
    real = runner._run_start_up

    def interrupted(run, arm, start, startups):
        if (start, arm.name) == (1, "ngram_k4"):
            raise KeyboardInterrupt
        real(run, arm, start, startups)

    monkeypatch.setattr(runner, "_run_start_up", interrupted)
    with pytest.raises(KeyboardInterrupt):
        runner._run_arms(run)
    # the baseline had finished start-up 2 of 3 and waited for its third: interrupted, not running
    baseline = run.read_status("baseline")
    assert baseline.status == "interrupted" and baseline.startups_s == [1.0, 1.0]
