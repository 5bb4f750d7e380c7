"""The schedule check on constructed cells whose answer is known: per level the scheduled K, the
drafted tokens per draft, the ratio to each static arm with the interval of a difference of two
arms, the verdicts, and the geometric mean over the levels."""

from __future__ import annotations

import math

import pytest

from harness.core import stats
from harness.derive.intervals import Estimate
from harness.derive.schedule import over_levels, ratio, schedule_checks, scheduled_k
from harness.present.schedule_text import level_verdict, schedule_lines
from harness.results.model import ArmSummary, SpeedupEstimate
from tests.test_probes import _cell

SCHEDULE = [(1, 2, 4), (3, 5, 2), (6, 1024, 0)]


def _arm(name: str, k: int | None, schedule=None) -> ArmSummary:
    return ArmSummary(
        name=name,
        method="baseline" if name == "base" else "ngram",
        num_speculative_tokens=k,
        drafter=None,
        status="ok",
        k_schedule=schedule,
    )


def _speed(
    arm: str, level: int, speedup: float, log_se: float = 0.02, drafts: float = 0.0, tokens: float = 0.0
):
    q = stats.t_quantile(0.975, 4)
    return _cell(
        arm,
        "code",
        level,
        10.0 * speedup,
        speedup=speedup,
        estimate=SpeedupEstimate(
            low=speedup * math.exp(-q * log_se),
            high=speedup * math.exp(q * log_se),
            rounds=3,
            df=4,
            log_se=log_se,
        ),
        drafts=drafts,
        draft_tokens=tokens,
    )


def test_scheduled_k_reads_the_ranges_and_carries_the_last() -> None:
    assert [scheduled_k(SCHEDULE, b) for b in (1, 2, 3, 5, 6, 4096)] == [4, 4, 2, 2, 0, 0]


def test_ratio_takes_the_larger_error_and_the_fewer_degrees_of_freedom() -> None:
    found = ratio(Estimate(1.2, rounds=3, df=4, log_se=0.02), Estimate(1.0, rounds=3, df=2, log_se=0.03))
    q = stats.t_quantile(0.975, 2)
    assert found.point == pytest.approx(1.2) and (found.df, found.log_se) == (2, 0.03)
    assert found.low == pytest.approx(1.2 * math.exp(-q * 0.03))
    assert ratio(Estimate(1.2), Estimate(1.0)).low is None  # no interval on one side: none on the ratio
    mean = over_levels([Estimate(1.1, 1.0, 1.2, 3, 4, 0.02), Estimate(0.9, 0.8, 1.0, 3, 4, 0.04)])
    assert mean.point == pytest.approx(math.sqrt(1.1 * 0.9)) and mean.log_se == pytest.approx(0.03)


def test_the_schedule_against_every_static_k_per_level_and_over_the_levels() -> None:
    arms = [_arm("base", None), _arm("ngram_k2", 2), _arm("ngram_k4", 4), _arm("policy", 4, SCHEDULE)]
    cells = [_cell("base", "code", c, 10.0, speedup=1.0) for c in (1, 4, 8)]
    cells += [_speed("ngram_k4", 1, 1.50), _speed("ngram_k4", 4, 1.10), _speed("ngram_k4", 8, 0.80)]
    cells += [_speed("ngram_k2", 1, 1.30), _speed("ngram_k2", 4, 1.15), _speed("ngram_k2", 8, 0.90)]
    cells += [
        _speed("policy", 1, 1.49, drafts=100, tokens=390),  # K=4: the ngram proposer may draft fewer
        _speed("policy", 4, 1.15, drafts=50, tokens=100),
        _speed("policy", 8, 0.70),  # off, yet slower than the baseline: caught
    ]
    (check,) = schedule_checks(arms, cells)
    one, four, eight = check.levels
    assert [lv.scheduled_k for lv in check.levels] == [4, 2, 0]
    assert [lv.drafted_per_draft for lv in check.levels] == [3.9, 2.0, 0.0]
    assert (one.best_static, four.best_static, eight.best_static) == ("ngram_k4", "ngram_k2", "ngram_k2")
    assert level_verdict(one).startswith("within noise of the best static (ngram_k4): 0.99x")
    assert level_verdict(eight).startswith("loses to the best static (ngram_k2) by 22%")
    assert eight.baseline_verdict() == "loses"
    lines = schedule_lines(check)
    assert lines[-2].startswith("behind the best static arm at code@8")
    assert lines[-1].startswith("loses to the baseline at code@8 (0.70x")
    k4 = check.over["ngram_k4"]
    assert k4.point == pytest.approx((1.49 / 1.5 * 1.15 / 1.10 * 0.70 / 0.80) ** (1 / 3))
    assert any(line.startswith("policy is within noise of ngram_k4 over the levels") for line in lines)
