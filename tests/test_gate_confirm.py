"""The relative gate's statistics on plain lists, the self-baseline refusal, the Markdown's order
and ``bench gate --confirm``'s decision (a confirmation run made of fixture copies: no engine)."""

from __future__ import annotations

import argparse
import json
import math
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from harness.commands import gate as gate_command
from harness.config.regime import load_regime
from harness.core import stats
from harness.core.errors import UserError
from harness.derive.gates.confirm import arms_to_confirm, confirm, confirmation_regime
from harness.derive.gates.evaluate import evaluate, exit_code
from harness.derive.gates.relative import ONE_STARTUP, open_views, relative_check
from harness.present.gate_report import markdown, ordered
from harness.results.gate import Check, read_gate
from tests.test_gates import _calibrate, _copy, _scale_ngram_acceptance, _startups

T_975_2 = 4.302652729749464  # Student's t, 0.975 quantile, 2 and 8 degrees of freedom (scipy's)
T_975_8 = 2.306004135204166


def test_log_ratio_interval_by_hand() -> None:
    """Every current start-up at 0.9x its baseline: the point is -10%; the pooled sd over 2 df is
    log(1.1) / sqrt(2), the standard error sd x sqrt(1/2 + 1/2)."""
    found = stats.log_ratio_interval([100.0, 110.0], [90.0, 99.0])
    half = T_975_2 * math.log(1.1) / math.sqrt(2)
    assert found.point == pytest.approx(-0.1)
    assert (found.low, found.high) == pytest.approx((0.9 * math.exp(-half) - 1, 0.9 * math.exp(half) - 1))
    assert (found.low, found.high) == pytest.approx((-0.3266, 0.2028), abs=1e-4)
    # a known spread (a calibration: sd 0.05 over 8 df) makes one value per side enough
    known = stats.log_ratio_interval([100.0], [90.0], sd=0.05, df=8)
    half = T_975_8 * 0.05 * math.sqrt(2)
    assert (known.low, known.high) == pytest.approx((0.9 * math.exp(-half) - 1, 0.9 * math.exp(half) - 1))
    assert (known.low, known.high) == pytest.approx((-0.2354, 0.0594), abs=1e-4)
    with pytest.raises(ValueError):
        stats.log_ratio_interval([100.0], [90.0])  # no degrees of freedom
    with pytest.raises(ValueError):
        stats.log_ratio_interval([0.0, 1.0], [1.0, 2.0])


def test_difference_interval_for_shares_that_may_be_zero() -> None:
    """Identical-prompt shares (0/100 per prompt): the difference of means over |baseline mean|."""
    found = stats.difference_interval([100.0, 100.0, 100.0, 0.0], [100.0, 0.0, 100.0, 0.0])
    ss = 3 * 25.0**2 + 75.0**2 + 4 * 50.0**2  # about the means 75 and 50
    half = 2.4469118511449692 * math.sqrt(ss / 6 * (1 / 4 + 1 / 4))  # t(0.975, 6)
    assert found.point == pytest.approx(-25 / 75)
    assert (found.low, found.high) == pytest.approx(((-25 - half) / 75, (-25 + half) / 75))
    with pytest.raises(ValueError, match="mean is 0"):
        stats.difference_interval([0.0, 0.0], [0.0, 100.0])


def test_relative_check_verdicts() -> None:
    # 20% slower at every start-up, tight, the nights' own spread known (2%, 5 df): a regression
    fail = relative_check(
        [80.0, 82.0, 79.0], [100.0, 102.0, 99.0], 10, higher_is_better=True, night=(0.02, 5)
    )
    assert fail.verdict == "fail" and fail.high < -0.1 and fail.reason == ""
    assert fail.change == pytest.approx(
        math.exp(sum(math.log(v / 100) for v in (80, 82 / 1.02, 79 / 0.99)) / 3) - 1
    )
    # the same 20% but a 40% spread between two start-ups: cannot see a 10% regression
    wide = relative_check([60.0, 100.0], [100.0, 101.0], 10, higher_is_better=True)
    assert wide.verdict == "inconclusive" and wide.reason.startswith(
        "cannot detect a regression of this size"
    )
    assert (wide.high - wide.low) / 2 > 0.1 and "limit 10%" in wide.reason
    # no change, tight: a pass (its half-width within the tolerance)
    same = relative_check([99.0, 101.0, 100.0], [100.0, 100.5, 99.5], 5, higher_is_better=True)
    assert same.verdict == "pass" and (same.high - same.low) / 2 < 0.05
    # faster at every start-up, widely: the interval (+14%..+127%) rules out any regression: a pass
    better = relative_check([130.0, 200.0, 160.0], [100.0, 101.0, 99.0], 10, higher_is_better=True)
    assert better.verdict == "pass" and (better.high - better.low) / 2 > 0.1 and better.low > 0.1
    # lower is better (latency): 20% higher is worse
    slower = relative_check(
        [120.0, 121.0, 119.0], [100.0, 101.0, 99.0], 10, higher_is_better=False, night=(0.02, 5)
    )
    assert slower.verdict == "fail" and slower.low > 0.1
    # one start-up per side: inconclusive, unless a spread is known
    one = relative_check([80.0], [100.0, 101.0], 10, higher_is_better=True)
    assert one == ("inconclusive", None, None, None, ONE_STARTUP)
    known = relative_check([80.0], [100.0], 10, higher_is_better=True, spread=(0.02, 8), night=(0.0, 8))
    assert known.verdict == "fail" and known.change == pytest.approx(-0.2)
    # without a night term, what the within-run spread alone would fail is not failed: two runs are
    # two nights, and the night's shared effect is unknown
    unknown = relative_check([80.0, 82.0, 79.0], [100.0, 102.0, 99.0], 10, higher_is_better=True)
    assert unknown.verdict == "inconclusive" and "night term is unknown" in unknown.reason
    assert relative_check([0.0], [100.0], 10, True, unit="prompt").reason.startswith("one prompt")
    assert relative_check([], [100.0], 10, True).verdict == "inconclusive"


def _check(name: str, arm: str, verdict: str, gate: str = "rules[0]") -> Check:
    return Check(name, gate, arm, "tau", "w", 1, verdict, f"{verdict} first")


def test_confirm_fails_only_what_fails_twice() -> None:
    first = [
        _check("a tau", "ngram_k4", "fail"),
        _check("b tau", "ngram_k4", "fail"),
        _check("c tau", "ngram_k4", "pass"),
        _check("d tau", "eagle", "fail"),
        _check("eagle2 ran", "eagle2", "fail", gate="arm"),
        _check("e tau", "ngram_k8", "fail"),
    ]
    second = [
        _check("a tau", "ngram_k4", "fail"),
        _check("b tau", "ngram_k4", "pass"),
        _check("c tau", "ngram_k4", "fail"),  # passed in the run: a new failure is not the question
        _check("eagle ran", "eagle", "error", gate="arm"),  # its engine did not start this time
        _check("f tau", "eagle2", "pass"),  # broke in the run, measured fine in the confirmation
    ]
    combined = confirm(first, second, "run-confirm")
    verdicts = [c.verdict for c in combined]
    assert verdicts == ["fail", "inconclusive", "pass", "error", "inconclusive", "inconclusive"]
    assert combined[0].message == ("fail first; confirmed by the confirmation run run-confirm (fail first)")
    assert combined[1].message.endswith(
        "not confirmed by the confirmation run run-confirm (pass: pass first)"
    )
    assert "has no such check" in combined[5].message
    assert exit_code(combined) == 3 and exit_code(combined[:3]) == 1 and exit_code(combined[1:3]) == 4
    assert exit_code(combined[2:3]) == 0
    assert first[1].verdict == "fail"  # the first run's checks are kept as they were


def test_confirm_decides_what_the_first_run_left_inconclusive() -> None:
    """An inconclusive check's arm is re-measured too (issue 78: the nightly confirms on
    inconclusive), and the fresh start-ups' verdict stands, whichever it is."""
    first = [
        _check("a tau", "ngram_k4", "inconclusive"),
        _check("b tau", "ngram_k4", "inconclusive"),
        _check("c tau", "eagle", "inconclusive"),
        _check("d tau", "eagle", "inconclusive"),
        _check("e tau", "dflash", "pass"),
    ]
    regime = load_regime(Path(__file__).parent.parent / "regimes" / "cpu_default.yaml")
    names = [a.name for a in regime.arms]
    assert arms_to_confirm([_check("x", names[1], "inconclusive")], regime) == names[:2]
    second = [
        _check("a tau", "ngram_k4", "pass"),
        _check("b tau", "ngram_k4", "fail"),
        _check("c tau", "eagle", "inconclusive"),
    ]
    combined = confirm(first, second, "run-confirm")
    assert [c.verdict for c in combined] == ["pass", "fail", "inconclusive", "inconclusive", "pass"]
    said = "inconclusive first; re-measured in the confirmation run run-confirm: fail first"
    assert combined[1].message == said
    assert combined[3].message.endswith("no such check there")


def test_what_a_confirmation_runs(tmp_path: Path) -> None:
    rules = {
        "rules": [
            {"arm": "ngram_k4", "metric": "tau", "min": 2.0},
            {"arm": "baseline", "metric": "output_tok_s", "min": 1.0},
        ]
    }
    view, _ = open_views(_copy(tmp_path, "run", rules), None)
    checks = [_check("x", "ngram_k4", "fail"), _check("y", "baseline", "pass")]
    assert arms_to_confirm(checks, view.regime) == ["baseline", "ngram_k4"]
    only_baseline = confirmation_regime(view.regime, ["baseline"])
    assert [a.name for a in only_baseline.arms] == ["baseline"]
    assert [g.arm for g in only_baseline.gates.rules] == ["baseline"]  # a rule naming a dropped arm goes
    record = view.record
    assert only_baseline.conditions_fingerprint(record.prompts()) == view.regime.conditions_fingerprint(
        record.prompts()
    )


def test_the_baseline_cannot_be_the_run_itself(tmp_path: Path) -> None:
    run = _copy(tmp_path, "20261201-093000-a1b2c3", {})
    with pytest.raises(UserError, match="the baseline is the run itself"):
        open_views(run, run)
    with pytest.raises(UserError, match="the baseline is the run itself"):
        open_views(run, tmp_path / "." / run.name)
    elsewhere = tmp_path / "copied"
    elsewhere.mkdir()
    shutil.copytree(run, elsewhere / run.name)  # a copy keeps its run id
    with pytest.raises(UserError, match="run id 20261201-093000-a1b2c3"):
        open_views(run, elsewhere / run.name)
    # two studies' point p0 are different runs
    for study in ("study-a", "study-b"):
        shutil.copytree(run, tmp_path / study / "points" / "p0")
    open_views(tmp_path / "study-a" / "points" / "p0", tmp_path / "study-b" / "points" / "p0")


def test_markdown_shows_failures_first() -> None:
    checks = [
        _check("p", "a", "pass"),
        _check("i", "a", "inconclusive"),
        _check("s", "a", "skipped"),
        _check("f", "a", "fail"),
        _check("e", "a", "error"),
        _check("f2", "a", "fail"),
    ]
    assert [c.name for c in ordered(checks)] == ["f", "f2", "e", "i", "s", "p"]
    rows = [line.split(" | ")[1] for line in markdown(checks, "t", 3).splitlines() if line.startswith("| ")]
    assert rows == ["gate", "f", "f2", "e", "i", "s"]  # passes are left out while anything else is shown


def _args(run: Path, baseline: Path, confirm_flag: bool) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    gate_command.add_arguments(parser)
    return parser.parse_args(
        [str(run), "--baseline", str(baseline), *(["--confirm"] if confirm_flag else [])]
    )


def test_bench_gate_confirm_keeps_the_failures_the_confirmation_repeats(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tau halved and tok/s 20% down, both significant; the confirmation run (fresh start-ups,
    here a prepared copy) repeats the halved tau but not the slowdown: tau fails, tok/s is
    inconclusive, and both runs' checks are stored."""
    rules = {
        "rules": [
            {"arm": "ngram_k4", "metric": "tau", "workload": "code_humaneval", "max_regression_pct": 10},
            {
                "arm": "ngram_k4",
                "metric": "output_tok_s",
                "workload": "code_humaneval",
                "max_regression_pct": 10,
            },
        ]
    }
    good = _startups(_copy(tmp_path, "good", rules), [1.0, 1.03, 0.98])
    worse = _copy(tmp_path, "worse", rules)
    _scale_ngram_acceptance(worse, 0.5)
    _startups(worse, [1.25, 1.21, 1.27])
    fresh = _copy(tmp_path / "prepared", "fresh", rules)
    _scale_ngram_acceptance(fresh, 0.5)
    _startups(fresh, [1.01, 0.99, 1.02])
    for run in (worse, fresh):  # a machine calibration gives the comparison its night term
        _calibrate(run)
    asked = []

    def fake_run(view, regime, run_dir, console):  # what would start the servers
        asked.append([a.name for a in regime.arms])
        target = run_dir.parent / f"{run_dir.name}-confirm"
        shutil.copytree(fresh, target)
        return target

    monkeypatch.setattr(gate_command, "confirmation_run", fake_run)
    console = Console(width=200, record=True)
    assert gate_command.run(_args(worse, good, False), console) == 1
    assert asked == []  # without --confirm nothing runs
    assert gate_command.run(_args(worse, good, True), console) == 1
    assert asked == [["baseline", "ngram_k4"]]
    stored = read_gate(worse)
    assert stored is not None and stored.confirmation_run == str(tmp_path / "worse-confirm")
    verdicts = {c.metric: c.verdict for c in stored.checks}
    assert verdicts == {"tau": "fail", "output_tok_s": "inconclusive"} and stored.exit_code == 1
    assert {c.metric: c.verdict for c in stored.confirmation_checks} == {
        "tau": "fail",
        "output_tok_s": "pass",
    }
    own = json.loads((tmp_path / "worse-confirm" / "gate" / "checks.json").read_text())
    assert own["exit_code"] == 1 and len(own["checks"]) == 4  # 2 rules x 2 load levels
    summary = (worse / "gate" / "summary.md").read_text()
    assert "confirmation worse-confirm: REGRESSION" in summary and "not confirmed by" in summary
    assert evaluate(*open_views(worse, good))[1].verdict == "fail"  # the run alone still fails it
