"""A night that stops spending (issue 78, item 5), without servers: a baseline that fails stops the
run at once and a resume continues it where it stopped; an arm that fails after complete start-ups
keeps them in its verdicts, over the rounds it has (fewer, said), and one complete start-up stays
unverified. The servers' side (a start-up that fails, started once more) is the stand-ins' rehearsal
(tests/test_gpu_rehearsal.py, "h200_tp8 under fire")."""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from harness.core.errors import EngineError
from harness.derive.analysis import analyze
from harness.derive.intervals import Estimate
from harness.derive.rounds import Standing
from harness.derive.summary import summarize
from harness.derive.verdict import run_caveats, window_verdicts
from harness.present.verdict_text import caveat_text
from harness.results import RunTiming, read_jsonl
from harness.results.raw import RawRun
from harness.results.records import ArmStatus, Round
from harness.run.runner import Runner
from tests.test_server_starts import _rounds, _rounds_runner

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from simulated_runs import World, simulate_run  # noqa: E402


def test_a_failed_baseline_stops_the_run_and_a_resume_continues_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Round 2 runs ngram, then the baseline, which fails: no start-up after it (round 3 never
    begins), the error says what was not spent, ngram waits as interrupted; the resume runs the
    baseline's start-up 2 in round 2 (paired with ngram's), then round 3."""
    runner, run, order = _rounds_runner(tmp_path, monkeypatch, fail={(1, "baseline")})
    monkeypatch.setattr(runner, "_start_up_seconds", lambda: (600.0, 600.0, "at this run's pace"))
    with pytest.raises(EngineError) as stopped:
        runner._run_arms(run)
    assert order == [(0, "baseline"), (0, "ngram_k4"), (1, "ngram_k4"), (1, "baseline")]
    said = " ".join(str(stopped.value).split())
    assert said.startswith("the baseline (baseline) failed on start-up 2")
    # the baseline's start-up 3 and ngram's: 20 minutes at $0.10 an hour (cpu_e2e's price)
    assert "Not spent: 2 start-ups not begun, about 20 min and $0.03 at $0.10/h" in said
    assert f"bench run --resume {run.root} continues it from the baseline's start-up 2" in said
    assert run.read_status("baseline").status == "failed"
    assert run.read_status("ngram_k4").status == "interrupted"
    assert [r.done for r in _rounds(run)] == [["baseline", "ngram_k4"], ["ngram_k4", "baseline"]]

    resumed, _, again = _rounds_runner(tmp_path, monkeypatch, fail=set(), run=run)
    resumed._run_arms(run)
    assert again == [(1, "baseline"), (2, "baseline"), (2, "ngram_k4")]
    rounds = _rounds(run)
    assert [r.order for r in rounds] == [
        ["baseline", "ngram_k4"],
        ["ngram_k4", "baseline"],
        ["baseline", "ngram_k4"],
    ]
    assert [sorted(r.done) for r in rounds] == [["baseline", "ngram_k4"]] * 3
    assert RunTiming(invocations=[], rounds=rounds).unpaired_arms("baseline") == []
    for arm in ("baseline", "ngram_k4"):
        assert [w["server_start"] for w in read_jsonl(run.windows(arm))] == [0, 1, 2]
        assert run.read_status(arm).status == "ok"
    # the failed start-up's files, moved aside whole on resume
    aside = run.root / "arms" / "baseline.attempt-1"
    assert [w["server_start"] for w in read_jsonl(aside / "windows.jsonl")] == [0, 1]


def test_an_arm_that_failed_late_keeps_its_start_ups_on_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ngram failed on its third start-up; the run went on without it. A resume keeps its two
    complete start-ups and runs the third again (in a round of its own: unpaired, said)."""
    runner, run, order = _rounds_runner(tmp_path, monkeypatch, fail={(2, "ngram_k4")})
    runner._run_arms(run)
    assert order[-2:] == [(2, "baseline"), (2, "ngram_k4")]
    assert run.read_status("ngram_k4").status == "failed" and run.read_status("baseline").status == "ok"
    resumed, _, again = _rounds_runner(tmp_path, monkeypatch, fail=set(), run=run)
    resumed._run_arms(run)
    assert again == [(2, "ngram_k4")]  # its third, in the round it failed in: still the last one
    assert [w["server_start"] for w in read_jsonl(run.windows("ngram_k4"))] == [0, 1, 2]
    assert run.read_status("ngram_k4").status == "ok"


def test_a_start_up_that_fails_while_measuring_is_set_aside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An engine that dies in its third start-up's windows: the arm keeps the two complete start-ups'
    lines, the failed one's are moved aside whole (its log copied back, where the error names it)."""
    runner, run, _ = _rounds_runner(tmp_path, monkeypatch, fail=set())
    arm = next(a for a in runner.plan.regime.arms if a.name == "ngram_k4")
    run.arm_dir(arm.name).mkdir(parents=True)
    for start in range(3):
        run.windows(arm.name).open("a").write(f'{{"server_start": {start}, "repeat": {start}}}\n')
        run.samples(arm.name).open("a").write(f'{{"repeat": {start}, "prompt_id": "p"}}\n')
        run.server_log(arm.name, start).write_text(f"start-up {start}\n")
    startups = [1.0, 1.0, 1.0]
    Runner._arm_failed(runner, run, arm, "measuring", "engine exited", startups, 2)
    assert [w["server_start"] for w in read_jsonl(run.windows(arm.name))] == [0, 1]
    assert [s["repeat"] for s in read_jsonl(run.samples(arm.name))] == [0, 1]
    assert run.server_log(arm.name, 2).read_text() == "start-up 2\n"
    aside = run.root / "arms" / "ngram_k4.attempt-1"
    assert [w["server_start"] for w in read_jsonl(aside / "windows.jsonl")] == [0, 1, 2]
    status = run.read_status(arm.name)
    assert (status.status, status.startups_s) == ("failed", [1.0, 1.0])


def _failed_late(completed: int, partial: bool = False, rounds: int = 3) -> RawRun:
    """A simulated run of a baseline and two arms over ``rounds`` rounds (a true 1.3x), in which a2
    failed on start-up ``completed`` + 1: its files hold the ``completed`` start-ups before it (and,
    with ``partial``, the failed one's windows, as runs written before this change kept them)."""
    raw = simulate_run(np.random.default_rng(3), World(arms=3, rounds=rounds, truth=1.3, windows=2))
    kept = completed + 1 if partial else completed
    # the failed start-up's windows, where kept, in the first workload only (it died in the next one's)
    windows = {
        (w.workload, w.repeat)
        for w in raw.arms["a2"].windows
        if w.server_start < completed or (w.server_start < kept and w.workload == "w0")
    }
    failed = replace(
        raw.arms["a2"],
        samples=[s for s in raw.arms["a2"].samples if (s.workload, s.repeat) in windows],
        windows=[w for w in raw.arms["a2"].windows if (w.workload, w.repeat) in windows],
        status=ArmStatus(
            status="failed", phase="measuring", error="engine exited", startups_s=[1.0] * completed
        ),
    )
    names, entries = list(raw.arms), []
    for r in range(rounds):  # a2's failed start-up ended its round's part (done); it sat out the rounds after
        order = [n for n in (names if r % 2 == 0 else names[::-1]) if n != "a2" or r <= completed]
        entries.append(Round(order=order, server_starts=dict.fromkeys(order, r), done=order))
    timing = RunTiming(invocations=[], rounds=entries)
    return replace(raw, arms={**raw.arms, "a2": failed}, timing=timing)


def test_an_arm_that_failed_late_keeps_its_rounds_in_its_verdicts() -> None:
    summary = summarize(_failed_late(completed=2))
    verdicts = window_verdicts(summary)
    assert len(verdicts) == 2
    for verdict in verdicts:
        arms = {verdict.best.arm, *(r.arm for r in verdict.rivals)} if verdict.best else set()
        assert arms == {"a1", "a2"}  # on today's main a2 is in no verdict
        a2 = verdict.best if verdict.best.arm == "a2" else None
        rival = next((r for r in verdict.rivals if r.arm == "a2"), None)
        estimate = a2 and verdict.estimate or rival.estimate  # type: ignore[union-attr]
        # the two-arm model over the two rounds a2 has with the baseline: 1 degree of freedom
        assert (estimate.rounds, estimate.model_arms) == (2, 2)
        if a2 is not None:
            (fewer,) = [c for c in verdict.caveats if c.code == "fewer_rounds"]
            assert caveat_text(fewer) == (
                "a2: 2 of the baseline's 3 rounds (it failed on start-up 3): its interval rests on the "
                "rounds both completed"
            )
    a1 = [c for c in summary.cells if c.arm == "a1"]
    assert all(c.server_starts == 3 and c.estimate.rounds == 3 for c in a1)  # the others' model: untouched
    codes = [c.code for c in run_caveats(summary)]
    assert "arm_not_ok" not in codes
    (late,) = [c for c in run_caveats(summary) if c.code == "arm_failed_late"]
    assert caveat_text(late).startswith(
        "arm a2 failed on start-up 3 (engine exited): the start-ups it completed"
    )
    assert analyze(summary).verdicts  # every view derives from this analysis


def test_one_complete_start_up_is_unverified_not_an_interval() -> None:
    summary = summarize(_failed_late(completed=1))
    for verdict in window_verdicts(summary):
        found = [r.estimate for r in verdict.rivals if r.arm == "a2"]
        estimate = verdict.estimate if verdict.best and verdict.best.arm == "a2" else found[0]
        assert estimate.rounds == 1 and estimate.low is None and estimate.verdict == "unverified"


def test_a_failed_start_up_still_in_the_files_keeps_its_cells_out() -> None:
    """A run written before the runner set a failed start-up aside: a2's cell that holds windows of
    the start-up it failed on stays out of the verdicts (nothing of a failed start-up is counted);
    its other cell is in them."""
    summary = summarize(_failed_late(completed=2, partial=True))
    arms = {v.workload: {v.best.arm, *(r.arm for r in v.rivals)} for v in window_verdicts(summary)}
    assert arms == {"w0": {"a1"}, "w1": {"a1", "a2"}}  # it died in w1's windows of its third start-up


@dataclass(frozen=True)
class _Cells:
    """A summary as the stop rule reads it: its cells (each with its arm)."""

    cells: list[SimpleNamespace]

    def model_copy(self, update: dict) -> _Cells:
        return _Cells(update["cells"])


def test_a_deciding_run_adds_no_round_for_an_arm_that_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ngram's cell is undecided after round 2, where ngram failed: no round can decide it (ngram sits
    out the rest), so the run stops at min instead of running the baseline alone to max."""
    decide = {"min": 2, "max": 4, "decide": True}
    runner, run, order = _rounds_runner(tmp_path, monkeypatch, fail={(1, "ngram_k4")}, server_starts=decide)
    monkeypatch.setattr(
        "harness.run.runner._write_summary", lambda run: _Cells([SimpleNamespace(arm="ngram_k4")])
    )
    undecided = Standing({"chat @4 ngram_k4": Estimate(1.0, 0.9, 1.2, rounds=2, df=1)})
    monkeypatch.setattr(
        "harness.run.runner.standing", lambda summary, asked=(): undecided if summary.cells else Standing({})
    )
    runner._run_arms(run)
    assert order == [(0, "baseline"), (0, "ngram_k4"), (1, "ngram_k4"), (1, "baseline")]
    assert run.read_status("baseline").status == "ok" and run.read_status("ngram_k4").status == "failed"


def test_a_server_that_refused_its_own_arguments_is_not_started_again() -> None:
    """Only a start-up that failed where another try may not (an NCCL hang, a timeout, a crash) is
    started once more; the argument parser's usage error (exit 2) refuses the same argv again."""
    from harness.run.runner import refused_its_arguments

    assert refused_its_arguments("engine exited with status 2 during start-up; log x:\nerror: unrecognized")
    assert not refused_its_arguments("engine exited with status 1 during start-up; log x:\nNCCL error")
    assert not refused_its_arguments("engine not ready after 600 s; log x:\n")
