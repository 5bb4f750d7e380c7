"""Several start-ups of each arm's server (``load.server_starts``): what changes from one start-up to
the next (measured here: the float32 baseline at 100, 107 and 115.5 tok/s on three start-ups with
nothing else on the machine) is inside the speedup's interval, because the interval resamples
start-ups, not the repeats on one server."""

from __future__ import annotations

import io
import json
import math
import re
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from rich.console import Console

from harness.config.regime import load_regime, stored_regime
from harness.core import stats
from harness.core.errors import UserError
from harness.derive.analysis import analyze
from harness.derive.intervals import Estimate
from harness.derive.rounds import Standing, cell_estimate, completed_starts, round_line, round_order, standing
from harness.derive.summary import summarize
from harness.derive.verdict import run_caveats
from harness.present.verdict_text import basis_line, caveat_text
from harness.results import RunDir, RunTiming, append_jsonl, read_jsonl
from harness.results.model import CellMetrics, RepeatMetrics, SpeedupEstimate
from harness.results.records import ArmStatus, Round
from harness.run.plan import describe_plan, plan_regime, run_plan
from harness.run.runner import Runner
from harness.run.study.placement import time_limit_minutes


def interval_note(summary):
    return basis_line(analyze(summary).basis)


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
    record["regime"]["verdict"] = {"startup_prior_sd": None}  # the plain t (the prior: the next test)
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
    # the arms x rounds model over the two start-ups: the geometric mean; its start-up term is the
    # paired t's on the log ratios (two arms in the model: 1 df, se log(1.25) / 2), the prompts'
    # sampling added to it (a jackknife over the window's prompts)
    point = first / math.sqrt(1.25)
    assert cell.speedup == pytest.approx(point) and cell.estimate.source == "server_starts"
    assert cell.estimate.prompts == 6 and cell.estimate.prompt_log_se > 0
    startup_se = math.log(1.25) / 2
    assert cell.estimate.log_se == pytest.approx(math.hypot(startup_se, cell.estimate.prompt_log_se))
    assert cell.estimate.rounds == 2 and 1 <= cell.estimate.df <= 1 + 6 - 1
    half = stats.t_quantile(0.975, cell.estimate.df) * cell.estimate.log_se
    assert (cell.estimate.low, cell.estimate.high) == pytest.approx(
        (point * math.exp(-half), point * math.exp(half)), rel=1e-6
    )
    assert before.estimate.source is None and before.estimate.low is None  # one start-up: unverified
    assert "2 rounds of server start-ups" in interval_note(two)
    assert interval_note(one).startswith("unverified: 1 start-up per arm, no calibration")
    # arms measured on one start-up get a model of their own with the baseline: one round, no interval
    untrained = next(c for c in two.cells if c.arm == "eagle3_untrained_k3")
    assert untrained.server_starts == 1 and untrained.estimate.source is None
    assert untrained.estimate.rounds == 1


def _two_start_ups(
    run: Path, server_starts: object, ngram_slower: float, verdict: dict | None = None
) -> Path:
    """The smoke fixture copied to ``run`` with a second start-up of the baseline (as fast) and of
    ngram_k4 (``ngram_slower`` times as slow), its regime's design ``server_starts``."""
    shutil.copytree(SMOKE, run)
    record = json.loads((run / "regime.json").read_text())
    record["regime"]["load"]["server_starts"] = server_starts
    if verdict is not None:
        record["regime"]["verdict"] = verdict
    (run / "regime.json").write_text(json.dumps(record))
    _second_start_up(run, "baseline", slower=1.0)
    _second_start_up(run, "ngram_k4", slower=ngram_slower)
    return run


def test_the_prior_on_the_start_up_spread_narrows_a_two_round_interval(tmp_path: Path) -> None:
    """The default half-normal prior (scale 0.1) on the start-up spread: the start-up term is its
    posterior's matched t (stats.halfnormal_posterior_t), narrower than the plain t on 1 degree of
    freedom; the prompts' term is the same."""
    runs = {}
    for prior in (None, 0.1):  # a 10% spread: within the prior's scale
        run = _two_start_ups(tmp_path / f"run-{prior}", 2, 1.1, {"startup_prior_sd": prior})
        runs[prior] = next(c for c in summarize(run).cells if c.arm == "ngram_k4" and c.concurrency == 1)
    plain, prior = runs[None], runs[0.1]
    assert (plain.estimate.source, prior.estimate.source) == ("server_starts", "server_starts+prior")
    assert prior.speedup == pytest.approx(plain.speedup)
    assert prior.estimate.prompt_log_se == pytest.approx(plain.estimate.prompt_log_se)
    # 2 arms x 2 rounds: the residual sum of squares is half the squared difference of the log ratios
    variance, _ = stats.halfnormal_posterior_t(math.log(1.1) ** 2 / 4, 1, 1.0, 0.1)
    assert prior.estimate.log_se == pytest.approx(
        math.hypot(math.sqrt(variance), prior.estimate.prompt_log_se)
    )
    assert prior.estimate.low > plain.estimate.low and prior.estimate.high < plain.estimate.high
    # a 25% spread exceeds the prior's scale: that run gets the plain t
    run = _two_start_ups(tmp_path / "run-wide", 2, 1.25)
    wide = next(c for c in summarize(run).cells if c.arm == "ngram_k4" and c.concurrency == 1)
    assert wide.estimate.source == "server_starts"


def test_a_run_that_decides_corrects_its_intervals_for_its_looks(tmp_path: Path) -> None:
    """Rounds added until decided (min 2, max 6): the run may look at its intervals 5 times and stop
    on the first that decides, so each interval is at the level fitted to those looks (98.6%, where
    Bonferroni's 1 - 0.05 / 5 would be 99.0%: benchmarks/interval_coverage.py measures the false
    "pays" without any correction at 7%)."""
    run = _two_start_ups(tmp_path / "run", {"min": 2, "max": 6, "decide": True}, 1.25)
    summary = summarize(run)
    cell = next(c for c in summary.cells if c.arm == "ngram_k4" and c.concurrency == 1)
    assert (cell.estimate.rounds, cell.estimate.looks, cell.estimate.first_look) == (2, 5, 2)
    level = stats.repeated_level(1, 2, 5)
    assert level == pytest.approx(0.986, abs=0.001)
    # at that level, on the model's standard error (the start-ups' and the prompts' terms)
    half = stats.t_quantile(1 - (1 - level) / 2, cell.estimate.df) * cell.estimate.log_se
    assert (cell.estimate.low, cell.estimate.high) == pytest.approx(
        (cell.speedup * math.exp(-half), cell.speedup * math.exp(half)), rel=1e-6
    )
    # every view rebuilds it from what the summary stored: the winner's correction composes with it
    estimate = cell_estimate(cell)
    assert estimate is not None and estimate.looks == 5 and estimate.first_look == 2
    # as the winner of 2 arms: fitted to both over the 5 looks where both shared one model; here
    # ngram_k4 was fitted with the baseline alone (the other arms started once), so Bonferroni
    assert estimate.model_arms == 2 and estimate.level(2) == pytest.approx(0.995)
    shared = replace(estimate, model_arms=3)
    assert shared.level(2) == pytest.approx(stats.repeated_level(2, 2, 5)) and level < shared.level(2) < 0.995
    assert "each interval at 98.6% for the 5 looks it could take" in interval_note(summary)
    assert "looks" not in interval_note(summarize(SMOKE))
    plan = describe_plan(plan_regime(_regime(tmp_path, server_starts={"min": 2, "max": 6, "decide": True})))
    assert "until every verdict is decided (intervals over start-ups at 98.6% for 5 looks)" in plan


def test_an_arm_retried_in_rounds_of_its_own_gets_no_interval(tmp_path: Path) -> None:
    """ngram failed in round 0 and was retried on resume, alone, in rounds 2 and 3: its start-ups
    0 and 1 ran in other rounds than the baseline's 0 and 1, so the model's pairing by round does not
    hold for it: its speedup keeps its point, loses its interval, and the run says why."""
    run = _two_start_ups(tmp_path / "run", 2, 1.25)
    others = ["eagle3_untrained_k3", "dflash_untrained_k3", "self_draft_k3"]
    rounds = [
        Round(
            order=["baseline", "ngram_k4", *others],
            server_starts=dict.fromkeys(["baseline", "ngram_k4", *others], 0),
            done=["baseline", "ngram_k4", *others],
        ),
        Round(order=["baseline"], server_starts={"baseline": 1}, done=["baseline"]),
        Round(order=["ngram_k4"], server_starts={"ngram_k4": 0}, done=["ngram_k4"]),
        Round(order=["ngram_k4"], server_starts={"ngram_k4": 1}, done=["ngram_k4"]),
    ]
    timing = RunTiming.model_validate(json.loads((run / "timing.json").read_text()))
    (run / "timing.json").write_text(timing.model_copy(update={"rounds": rounds}).model_dump_json())
    assert timing.model_copy(update={"rounds": rounds}).unpaired_arms("baseline") == ["ngram_k4"]
    assert timing.model_copy(update={"rounds": rounds[:2]}).unpaired_arms("baseline") == []
    summary = summarize(run)
    cell = next(c for c in summary.cells if c.arm == "ngram_k4" and c.concurrency == 1)
    assert cell.speedup is not None and cell.estimate.rounds == 2
    assert (cell.estimate.low, cell.estimate.high, cell.estimate.df, cell.estimate.source) == (None,) * 4
    assert [c.arm for c in run_caveats(summary) if c.code == "unpaired"] == ["ngram_k4"]
    assert caveat_text(next(c for c in run_caveats(summary) if c.code == "unpaired")).startswith(
        "arm ngram_k4: its start-ups ran in other rounds"
    )
    assert not any(c.code == "unpaired" for c in run_caveats(summarize(SMOKE)))


def test_repeats_on_one_start_up_are_averaged_into_one_sample() -> None:
    cell = next(c for c in summarize(SMOKE).cells if c.arm == "ngram_k4")
    repeat = cell.per_repeat[0]

    def at(start: int, index: int, tok_s: float) -> RepeatMetrics:
        return repeat.model_copy(update={"server_start": start, "repeat": index, "output_tok_s": tok_s})

    one_server = cell.model_copy(update={"per_repeat": [at(0, 0, 10.0), at(0, 1, 12.0), at(0, 2, 14.0)]})
    assert one_server.independent_samples("output_tok_s") == [10.0, 12.0, 14.0]
    starts = [at(0, 0, 10.0), at(0, 1, 12.0), at(1, 2, 20.0), at(1, 3, 22.0)]
    assert cell.model_copy(update={"per_repeat": starts}).independent_samples("output_tok_s") == [11.0, 21.0]


def _rounds_runner(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fail: set[tuple[int, str]],
    server_starts: object = 3,
    run: RunDir | None = None,
    console: Console | None = None,
):
    """A runner whose start-ups only record their order and write a window, a sample and a log line
    per start-up (and fail where ``fail`` says), so the orchestration is tested without servers; the
    real start-ups are the engine test's."""
    regime = _regime(tmp_path, server_starts=server_starts)
    runner = Runner(run_plan(plan_regime(regime), "model"), tmp_path, console or Console(quiet=True))
    runner.started = 0.0
    order: list[tuple[int, str]] = []

    def start_up(run, arm, start, startups):
        order.append((start, arm.name))
        startups.append(1.0)
        append_jsonl(run.windows(arm.name), {"server_start": start, "repeat": start})
        append_jsonl(run.samples(arm.name), {"repeat": start, "prompt_id": "p"})
        run.server_log(arm.name, start).write_text(f"start-up {start}\n")
        state = "failed" if (start, arm.name) in fail else "running"
        run.write_status(arm.name, ArmStatus(status=state, startups_s=startups))

    monkeypatch.setattr(runner, "_run_start_up", start_up)
    monkeypatch.setattr("harness.run.runner._write_summary", lambda run: None)
    monkeypatch.setattr(runner, "_write_timing", lambda run, interrupted: None)
    return runner, run or RunDir.create_at(tmp_path / "run"), order


def _rounds(run: RunDir) -> list[Round]:
    return RunTiming.model_validate(json.loads((run.root / "timing.json").read_text())).rounds


def test_round_order_alternates() -> None:
    arms = ["baseline", "ngram_k4", "eagle3_k3"]
    assert [round_order(arms, index) for index in range(3)] == [arms, arms[::-1], arms]
    assert round_order(arms[:1], 1) == ["baseline"]


def test_start_ups_go_in_rounds_abba_and_a_failed_arm_sits_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner, run, order = _rounds_runner(tmp_path, monkeypatch, fail={(1, "ngram_k4")})
    runner._run_arms(run)
    # start-up 1 of every arm, then start-up 2 in the reverse order, ...: a drift of the machine is
    # spread over the arms and their positions; ngram failed in round 2 and sits out round 3 (a failed
    # baseline stops the run: tests/test_startup_retry.py)
    assert order == [(0, "baseline"), (0, "ngram_k4"), (1, "ngram_k4"), (1, "baseline"), (2, "baseline")]
    assert run.read_status("ngram_k4").status == "failed" and run.read_status("baseline").status == "ok"
    rounds = _rounds(run)
    assert [r.order for r in rounds] == [["baseline", "ngram_k4"], ["ngram_k4", "baseline"], ["baseline"]]
    assert [r.done for r in rounds] == [r.order for r in rounds]
    assert rounds[2].server_starts == {"baseline": 2}


def test_a_fixed_count_runs_in_alternating_rounds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner, run, order = _rounds_runner(tmp_path, monkeypatch, fail=set(), server_starts=4)
    runner._run_arms(run)
    assert [name for _, name in order] == ["baseline", "ngram_k4", "ngram_k4", "baseline"] * 2
    assert [start for start, _ in order] == [0, 0, 1, 1, 2, 2, 3, 3]
    # every arm measured each start-up once: its windows by start-up
    assert [w["server_start"] for w in read_jsonl(run.windows("baseline"))] == [0, 1, 2, 3]


def test_an_interrupt_between_start_ups_leaves_no_arm_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner, run, order = _rounds_runner(tmp_path, monkeypatch, fail=set())
    real = runner._run_start_up

    def interrupted(run, arm, start, startups):
        if (start, arm.name) == (2, "ngram_k4"):
            raise KeyboardInterrupt
        real(run, arm, start, startups)

    monkeypatch.setattr(runner, "_run_start_up", interrupted)
    with pytest.raises(KeyboardInterrupt):
        runner._run_arms(run)
    # the baseline had finished start-up 3 of 3 and waited for ngram's: interrupted, not running
    baseline = run.read_status("baseline")
    assert baseline.status == "interrupted" and baseline.startups_s == [1.0, 1.0, 1.0]


def test_a_resume_continues_the_round_it_stopped_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner, run, _ = _rounds_runner(tmp_path, monkeypatch, fail=set())
    real = runner._run_start_up

    def cut_short(run, arm, start, startups):
        if (start, arm.name) == (1, "baseline"):  # round 2 runs ngram first, then the baseline
            startups.append(1.0)
            append_jsonl(run.windows(arm.name), {"server_start": 1, "repeat": 1})  # a partial start-up
            run.server_log(arm.name, 1).write_text("cut short\n")
            run.write_status(arm.name, ArmStatus(status="interrupted", startups_s=startups))
            raise KeyboardInterrupt
        real(run, arm, start, startups)

    monkeypatch.setattr(runner, "_run_start_up", cut_short)
    with pytest.raises(KeyboardInterrupt):
        runner._run_arms(run)
    assert _rounds(run)[1].done == ["ngram_k4"]

    resumed, _, order = _rounds_runner(tmp_path, monkeypatch, fail=set(), run=run)
    resumed._run_arms(run)
    # the baseline's cut-short start-up 2 again, then round 3 in the regime's order
    assert order == [(1, "baseline"), (2, "baseline"), (2, "ngram_k4")]
    for arm in ("baseline", "ngram_k4"):
        assert [w["server_start"] for w in read_jsonl(run.windows(arm))] == [0, 1, 2]
        assert [s["repeat"] for s in read_jsonl(run.samples(arm))] == [0, 1, 2]
        status = run.read_status(arm)
        assert status.status == "ok" and status.startups_s == [1.0, 1.0, 1.0]
    # nothing measured is lost: the files as they were are moved aside whole
    aside = run.root / "arms" / "baseline.attempt-1"
    assert [w["server_start"] for w in read_jsonl(aside / "windows.jsonl")] == [0, 1]
    assert (run.server_log("baseline", 1)).read_text() == "start-up 1\n"  # the new one
    assert (aside / "server.start-2.log").read_text() == "cut short\n"
    assert [r.order for r in _rounds(run)] == [["baseline", "ngram_k4"], ["ngram_k4", "baseline"]] + [
        ["baseline", "ngram_k4"]
    ]


def _standing(low: float, high: float) -> Standing:
    return Standing({"chat @4 ngram_k4": Estimate(1.0, low, high, rounds=2, df=1)})


def test_rounds_are_added_until_every_cell_is_decided(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = io.StringIO()
    decide = {"min": 2, "max": 5, "decide": True}
    console = Console(file=out, width=200)
    runner, run, order = _rounds_runner(tmp_path, monkeypatch, set(), server_starts=decide, console=console)
    no_interval = Standing({"chat @4 ngram_k4": Estimate(1.0)})  # one round: no interval yet
    after = iter([no_interval, _standing(0.80, 1.25), _standing(0.88, 1.19), _standing(1.01, 1.09)])
    monkeypatch.setattr("harness.run.runner.standing", lambda summary, asked=(): next(after))
    runner._run_arms(run)
    # round 2 left the cell undecided, round 3 too, round 4 decided it: no round 5
    assert len(order) == 8 and {start for start, _ in order} == {0, 1, 2, 3}
    lines = [line for line in out.getvalue().splitlines() if line.startswith("round ")]
    # the windows still undecided and the most time left (at the rounds' pace: instant here)
    lines = [re.sub(r" \(at most [0-9.]+ min left\)", "", line) for line in lines]
    assert lines == [
        "round 2: 0/1 cells decided; chat @4 ngram_k4 1.00x (no interval) -> [0.80, 1.25]; "
        "undecided: chat @4",
        "round 3: 0/1 cells decided; chat @4 ngram_k4 [0.80, 1.25] -> [0.88, 1.19]; undecided: chat @4",
        "round 4: 1/1 cells decided; chat @4 ngram_k4 [0.88, 1.19] -> [1.01, 1.09] (pays)",
    ]
    assert run.read_status("ngram_k4").status == "ok" and run.read_status("baseline").status == "ok"


def test_undecided_rounds_stop_at_the_maximum(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    decide = {"min": 2, "max": 3}
    runner, run, order = _rounds_runner(tmp_path, monkeypatch, set(), server_starts=decide)
    monkeypatch.setattr("harness.run.runner.standing", lambda summary, asked=(): _standing(0.9, 1.2))
    runner._run_arms(run)
    assert [start for start, _ in order] == [0, 0, 1, 1, 2, 2]
    assert [r.order for r in _rounds(run)][-1] == ["baseline", "ngram_k4"]


def _stored(cell: CellMetrics, point: float, **fields: Any) -> CellMetrics:
    """The cell with its point and some of its stored estimate's fields changed."""
    stored = (cell.estimate or SpeedupEstimate()).model_copy(update=fields)
    return cell.model_copy(update={"speedup": point, "estimate": stored})


def test_what_a_round_bought_and_whether_the_cells_are_decided() -> None:
    summary = summarize(SMOKE)
    cells = [c for c in summary.cells if c.method != "baseline"]
    first, second = cells[0], cells[1]
    wide = _stored(first, 1.02, low=0.88, high=1.19)
    narrow = _stored(first, 1.02, low=0.95, high=1.09)
    pays = _stored(second, 1.2, low=1.1, high=1.3)
    unverified = _stored(second, 1.2, low=None, high=None)
    baseline = next(c for c in summary.cells if c.method == "baseline")
    assert cell_estimate(baseline) is None
    estimate = cell_estimate(_stored(pays, 1.2, rounds=3, df=2))
    assert estimate is not None and estimate.decided and (estimate.rounds, estimate.df) == (3, 2)

    def of(*found: CellMetrics) -> Standing:
        return standing(summary.model_copy(update={"cells": [baseline, *found]}))

    before, after = of(wide, unverified), of(narrow, pays)
    key = f"{first.workload} {first.level.short()} {first.arm}"
    # the unverified cell has no interval: the widest of all, until it gets one
    assert before.widest_undecided() == f"{second.workload} {second.level.short()} {second.arm}"
    assert after.widest_undecided() == key and (before.decided, after.decided) == (0, 1)
    assert not after.all_decided
    assert (
        round_line(3, of(wide, pays), after)
        == f"round 3: 1/2 cells decided; {key} [0.88, 1.19] -> [0.95, 1.09]"
    )
    assert round_line(2, None, of(pays)) == "round 2: 1/1 cells decided"
    # every arm decided, but the window's fastest arm not once corrected for the selection: no stop
    both = Estimate(1.2, 1.02, 1.40, rounds=3, df=2, log_se=0.04)
    undecided = Standing({"chat @4 a": both, "chat @4 b": both}, {"chat @4": both.selected_from(2)})
    assert undecided.undecided_winner() == "chat @4" and not undecided.all_decided
    low, high = both.selected_from(2).low, both.selected_from(2).high
    assert round_line(3, None, undecided) == (
        f"round 3: 2/2 cells decided; chat @4: its arm not yet decided held over the window's arms, "
        f"[{low:.2f}, {high:.2f}]"
    )
    assert Standing({"chat @4 a": both}, {"chat @4": both}).all_decided
    # the run's standing holds the verdict's decision of every window with a choice of arms
    windows = {f"{workload} {level.short()}" for workload, level in summary.window_keys()}
    assert set(standing(summary).winners) == windows


def test_a_run_stops_when_the_answer_is_settled_not_when_every_arm_is() -> None:
    """Issue 81: a clear winner beside an arm near 1.00x settles the window (the near arm is shown
    slower and can never decide); none paying settles it only where every arm loses or is
    equivalent; two paying arms, neither shown slower, leave the choice open."""
    summary = summarize(SMOKE)
    baseline = next(c for c in summary.cells if c.method == "baseline")
    first = next(c for c in summary.cells if c.method != "baseline")
    key = (first.workload, first.level)
    second = next(
        c for c in summary.cells if c.method != "baseline" and c is not first and (c.workload, c.level) == key
    )
    baseline = next(c for c in summary.cells if c.method == "baseline" and (c.workload, c.level) == key)
    window = f"{first.workload} {first.level.short()}"

    def cell(base: CellMetrics, point: float, log_se: float) -> CellMetrics:
        found = Estimate(point, rounds=4, df=6, log_se=log_se, looks=3, first_look=2, model_arms=3)
        low, high = found.bounds()  # type: ignore[misc]
        return _stored(base, point, **replace(found, low=low, high=high).stored()["estimate"].model_dump())

    def of(*found: CellMetrics) -> Standing:
        return standing(summary.model_copy(update={"cells": [baseline, *found]}))

    near_one = cell(second, 1.01, 0.03)
    clear = of(cell(first, 1.30, 0.03), near_one)
    assert not near_one.estimate or not cell_estimate(near_one).decided  # type: ignore[union-attr]
    assert window in clear.settled and clear.all_decided and clear.undecided_windows() == []
    assert f"answer settled in {window}" in round_line(2, None, clear)
    # two arms that both pay, neither shown slower: which to deploy is open (the run still stops
    # once both are decided, as before: the verdict names the tie)
    tie = of(cell(first, 1.30, 0.03), cell(second, 1.28, 0.03))
    assert window not in tie.settled and tie.all_decided
    assert window not in of(cell(first, 1.30, 0.03), cell(second, 1.22, 0.06)).settled
    # none pays: settled where each loses or is equivalent, not where one is indistinguishable
    assert of(cell(first, 1.005, 0.004), cell(second, 0.80, 0.03)).all_decided
    undecided = of(cell(first, 1.02, 0.03), cell(second, 0.80, 0.03))
    assert not undecided.all_decided and undecided.undecided_windows() == [window]


def test_completed_start_ups_from_the_rounds() -> None:
    rounds = [
        Round(order=["a", "b"], server_starts={"a": 0, "b": 0}, done=["a", "b"]),
        Round(order=["b", "a"], server_starts={"b": 1, "a": 1}, done=["b"]),
    ]
    assert completed_starts("a", rounds) == 1 and completed_starts("b", rounds) == 2
    assert completed_starts("c", rounds) == 0 and completed_starts("a", []) == 0
    # an arm retried from scratch restarts its count
    retried = [*rounds, Round(order=["a", "b"], server_starts={"a": 0, "b": 2}, done=["a", "b"])]
    assert completed_starts("a", retried) == 1 and completed_starts("b", retried) == 3


@pytest.mark.parametrize(
    ("starts", "expected"),
    [
        ({"min": 3, "max": 2}, r"load\.server_starts\.max: max \(2\) must be at least min \(3\)"),
        ({"min": 2, "max": 21}, r"load\.server_starts\.max: Input should be less than or equal to 20"),
        ({"min": 0, "max": 4}, r"load\.server_starts\.min: Input should be greater than or equal to 1"),
        (
            {"max": 4, "decided": True},
            r"load\.server_starts\.decided: unknown key 'decided'; did you mean 'decide'",
        ),
        ({"min": 2}, r"load\.server_starts\.max: required field is missing"),
        ({"max": 4, "decide": "yes"}, r"load\.server_starts\.decide: Input should be a valid boolean"),
    ],
)
def test_decided_server_starts_errors_name_the_field(tmp_path: Path, starts: dict, expected: str) -> None:
    with pytest.raises(UserError, match=expected):
        load_regime(_regime(tmp_path, server_starts=starts))


def test_decided_server_starts_in_the_regime(tmp_path: Path) -> None:
    decide = load_regime(_regime(tmp_path, server_starts={"max": 6}))
    load = decide.load
    assert (load.min_server_starts(), load.max_server_starts(), load.decides()) == (2, 6, True)
    fixed = load_regime(_regime(tmp_path, server_starts={"min": 2, "max": 4, "decide": False})).load
    assert (fixed.min_server_starts(), fixed.max_server_starts(), fixed.decides()) == (4, 4, False)
    two = load_regime(_regime(tmp_path, server_starts=2))
    assert (two.load.min_server_starts(), two.load.max_server_starts(), two.load.decides()) == (2, 2, False)
    assert decide.fingerprint() != two.fingerprint()
    # a resume reads the stored regime back: the same model, the same fingerprint
    assert type(decide).model_validate(decide.model_dump(mode="json")).fingerprint() == decide.fingerprint()
    assert time_limit_minutes(decide) == 3 * time_limit_minutes(two)
    text = describe_plan(plan_regime(_regime(tmp_path, server_starts={"max": 6})))
    assert "each arm's server started 2 to 6 times, until every verdict is decided" in text
    with pytest.raises(UserError, match=r"load\.server_starts: server_starts > 1 needs a fixed repeats"):
        load_regime(
            _regime(
                tmp_path,
                server_starts={"max": 3},
                repeats={"min": 2, "max": 4, "target_rel_half_width": 0.05},
            )
        )


def test_a_deciding_run_stops_on_the_windows_it_was_asked_about(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``server_starts.windows: ['@1']``: the concurrency-2 window sits at 1.00x and can never
    decide; the run stops when the concurrency-1 window is decided (round 3), not at ``max``."""
    decide = {"min": 2, "max": 6, "windows": ["@1"]}
    runner, run, order = _rounds_runner(tmp_path, monkeypatch, set(), server_starts=decide)
    never = Estimate(1.0, 0.9, 1.1, rounds=2, df=1)

    def at(low: float) -> dict[str, Estimate]:
        return {"code @1 ngram_k4": Estimate(1.2, low, 1.4, rounds=2, df=1), "code @2 ngram_k4": never}

    after = iter([at(0.8), at(0.95), at(1.05)])  # after rounds 1, 2 and 3
    monkeypatch.setattr(
        "harness.run.runner.standing", lambda summary, asked=(): Standing(next(after), {}, tuple(asked))
    )
    runner._run_arms(run)
    assert {start for start, _ in order} == {0, 1, 2}
    # asked about every window, the same run would have gone on: @2 is undecided
    assert not Standing(at(1.05)).all_decided and Standing(at(1.05), {}, ("@1",)).all_decided
    assert (
        Standing(at(1.05), {}, ("code @1",)).all_decided and Standing(at(1.05), {}, ("code@1",)).all_decided
    )
    assert Standing(at(1.05), {}, ("@2",)).undecided_windows() == ["code @2"]


def test_the_windows_asked_about_must_be_load_levels_of_the_regime(tmp_path: Path) -> None:
    with pytest.raises(
        UserError, match=r"load\.server_starts\.windows\[0\]: '@8' names no load level.*@1, @2"
    ):
        load_regime(_regime(tmp_path, server_starts={"min": 2, "max": 4, "windows": ["@8"]}))


def test_a_deciding_run_begins_no_round_past_its_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The clock moves 50 s at every reading: after round 2, the rounds' pace and the time spent
    say that a third round would end past the 4-minute budget, so none begins (``max`` is 6)."""
    out = io.StringIO()
    decide = {"min": 2, "max": 6, "budget_minutes": 4}
    runner, run, order = _rounds_runner(
        tmp_path, monkeypatch, set(), server_starts=decide, console=Console(file=out, width=200)
    )
    clock = iter(range(0, 10_000, 50))
    monkeypatch.setattr("harness.run.runner.time.monotonic", lambda: float(next(clock)))
    runner.started = 0.0
    monkeypatch.setattr("harness.run.runner.standing", lambda summary, asked=(): _standing(0.9, 1.2))
    runner._run_arms(run)
    assert {start for start, _ in order} == {0, 1}
    assert "would end past the budget of 4 min" in out.getvalue()


def test_an_undecided_run_says_how_many_rounds_would_decide_it() -> None:
    from harness.derive.intervals import rounds_to_decide

    # a start-up term of 0.06 over 2 rounds and a prompts' term of 0.02: 1.15x needs more rounds
    e = Estimate(
        1.15,
        0.9,
        1.5,
        rounds=2,
        df=1,
        log_se=math.hypot(0.06, 0.02),
        prompts=20,
        prompt_log_se=0.02,
        model_arms=2,
    )
    needed = rounds_to_decide(e)
    assert needed is not None and needed > 2
    # at that many rounds the interval (its looks from round 2 on) excludes 1; one fewer does not
    assert rounds_to_decide(e, most_rounds=needed - 1) is None
    # the prompts' term alone wider than the effect: no number of rounds decides it
    assert (
        rounds_to_decide(Estimate(1.05, 0.8, 1.3, rounds=2, df=1, log_se=0.1, prompts=20, prompt_log_se=0.05))
        is None
    )
    assert rounds_to_decide(Estimate(1.2)) is None  # no interval to scale


def test_a_finished_run_is_continued_to_more_rounds(tmp_path: Path) -> None:
    """``bench run --resume RUN --rounds N``: the stored design becomes a deciding one from the run's
    first look to N (its intervals corrected for every look), the change recorded among the
    overrides; nothing is written until the run is ready to continue."""
    import sys

    import numpy as np

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from simulated_runs import World, simulate_run, write_run

    from harness.run.run_record import continued_record

    raw = simulate_run(np.random.default_rng(0), World(arms=2, rounds=2))
    root = write_run(raw, tmp_path / "sim" / "run")
    record = json.loads((root / "regime.json").read_text())
    record["regime"]["load"]["server_starts"] = 2
    record["source_path"] = str(ROOT / "regimes" / "cpu_default.yaml")
    (root / "regime.json").write_text(json.dumps(record))
    run = RunDir(root)
    with pytest.raises(UserError, match="already allows 2 rounds"):
        continued_record(run, 2)
    continued = continued_record(run, 5)
    assert continued.regime["load"]["server_starts"] == {"min": 2, "max": 5, "decide": True}
    assert continued.overrides[-1]["given"] == "--rounds 5"
    assert json.loads((root / "regime.json").read_text()) == record  # not written yet
    regime = stored_regime(continued.regime, ROOT / "regimes" / "cpu_default.yaml")
    assert (regime.load.looks(), regime.load.first_look()) == (4, 2)  # looks at rounds 2, 3, 4 and 5


def test_a_continued_run_adds_rounds_to_its_complete_arms(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run of 2 rounds, finished, continued to 4: both arms keep their 2 start-ups and take
    start-ups 3 and 4 (the verdict stays undecided), in the ABBA order the rounds go on in."""
    runner, run, order = _rounds_runner(tmp_path, monkeypatch, set(), server_starts=2)
    runner._run_arms(run)
    assert [start for start, _ in order] == [0, 0, 1, 1]
    more, _, later = _rounds_runner(tmp_path, monkeypatch, set(), server_starts={"min": 2, "max": 4}, run=run)
    more.continuing = True
    monkeypatch.setattr("harness.run.runner.standing", lambda summary, asked=(): _standing(0.9, 1.2))
    more._run_arms(run)
    assert later == [(2, "baseline"), (2, "ngram_k4"), (3, "ngram_k4"), (3, "baseline")]
    for arm in ("baseline", "ngram_k4"):
        assert [w["server_start"] for w in read_jsonl(run.windows(arm))] == [0, 1, 2, 3]
        assert run.read_status(arm).status == "ok"


def test_a_window_asked_about_must_name_a_workload_of_the_regime(tmp_path: Path) -> None:
    """A misspelt workload would match no window and stop a deciding run at its minimum."""
    decide = {"min": 2, "max": 4, "windows": ["code_humaneval @1", "code_humanevl @2"]}
    with pytest.raises(
        UserError, match=r"load\.server_starts\.windows\[1\]: no workload named 'code_humanevl'"
    ):
        plan_regime(_regime(tmp_path, server_starts=decide))
    plan_regime(_regime(tmp_path, server_starts={**decide, "windows": ["code_humaneval @1", "@2"]}))


def test_the_outlook_counts_only_the_rounds_the_budget_lets_begin(tmp_path: Path) -> None:
    """A deciding design of 2 to 6 rounds with a budget of 2.5 rounds' minutes: the outlook plans
    for the 2 rounds the budget lets begin, and says the budget."""
    from harness.run.outlook import outlook_text

    regime = plan_regime(_regime(tmp_path, server_starts={"min": 2, "max": 6, "budget_minutes": 25})).regime
    text = outlook_text(regime, pace=(10.0, "an earlier run"))
    assert "by round 2 " in text and "at most 2 rounds (20 min, the budget 25 min)" in text
    unbounded = plan_regime(_regime(tmp_path, server_starts={"min": 2, "max": 6})).regime
    assert "at most 6 rounds (60 min)" in outlook_text(unbounded, pace=(10.0, "an earlier run"))
