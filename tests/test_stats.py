"""The gate statistics on synthetic samples: a real regression is caught, noise is not."""

from __future__ import annotations

import random

import pytest

from harness.config.checks import Gates
from harness.core import stats
from harness.derive.gates.relative import _relative
from harness.results.gate import Check

GATES = Gates()


def _check(metric: str) -> Check:
    return Check("g", "rules[0]", "arm", metric, "w", 1, "pass", "")


def _normal(mean: float, sd: float, n: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [rng.gauss(mean, sd) for _ in range(n)]


def test_real_ten_percent_regression_with_low_noise_is_caught() -> None:
    baseline, current = _normal(100.0, 1.0, 20, 1), _normal(90.0, 1.0, 20, 2)  # tok/s 10% lower
    # the night's own effect, from earlier nights in the history (1% apart): two runs are two nights
    nights = [_normal(m, 1.0, 20, 10 + i) for i, m in enumerate((100.0, 101.0, 99.0, 100.5))]
    check = _relative(_check("output_tok_s"), current, baseline, GATES, tolerance_pct=5, nights=nights)
    assert check.verdict == "fail" and check.low > 0.05 and check.p_value < 0.001
    # without a night term a tok/s change cannot be failed on the within-run spread alone
    alone = _relative(_check("output_tok_s"), current, baseline, GATES, tolerance_pct=5)
    assert alone.verdict == "inconclusive"
    # the same on a lower-is-better metric: TPOT 10% higher
    check = _relative(
        _check("tpot_ms_p50"),
        _normal(55.0, 0.5, 20, 3),
        _normal(50.0, 0.5, 20, 4),
        GATES,
        tolerance_pct=5,
        nights=[_normal(m, 0.5, 20, 20 + i) for i, m in enumerate((50.0, 50.5, 49.5, 50.2))],
    )
    assert check.verdict == "fail" and check.message.startswith("regression")


def test_same_shift_buried_in_noise_is_not_called() -> None:
    baseline, current = _normal(100.0, 30.0, 6, 5), _normal(90.0, 30.0, 6, 6)
    check = _relative(_check("output_tok_s"), current, baseline, GATES, tolerance_pct=5)
    assert check.verdict in ("pass", "inconclusive") and check.low <= 0 <= check.high


def test_identical_runs_pass() -> None:
    sample = _normal(100.0, 5.0, 10, 7)
    check = _relative(_check("output_tok_s"), list(sample), list(sample), GATES, tolerance_pct=5)
    assert check.verdict == "pass" and check.value == check.baseline_value


def test_improvement_is_never_a_regression() -> None:
    check = _relative(_check("tau"), [3.4, 3.5, 3.45], [2.0, 2.1, 2.05], GATES, tolerance_pct=5)
    assert check.verdict == "pass" and check.high < 0  # "worse" is negative: it got better


def test_small_exact_cases() -> None:
    u, p = stats.mann_whitney_greater([4, 5, 6], [1, 2, 3])
    assert u == 9 and p == pytest.approx(1 / 20)  # one ordering of 20 is this extreme
    # R: wilcox.test(x, y, alternative = "greater") gives W = 58, p = 0.06646 (normal approx, ties)
    x = [1.83, 0.50, 1.62, 2.48, 1.68, 1.88, 1.55, 3.06, 1.30]
    y = [0.878, 0.647, 0.598, 2.05, 1.06, 1.29, 1.06, 3.14, 1.29]
    u, p = stats.mann_whitney_greater(x, y)
    assert u == 58 and p == pytest.approx(0.06646, abs=5e-5)
    assert stats.mann_whitney_greater([1, 1], [1, 1])[1] == 1.0
    assert stats.quantile([1, 2, 3, 4], 0.5) == 2.5 and stats.p90(list(range(11))) == pytest.approx(9.0)


def test_bootstrap_is_deterministic_and_covers_the_point() -> None:
    a = _normal(10, 1, 15, 8)
    first = stats.bootstrap_statistic(a, stats.mean, 500)
    assert first == stats.bootstrap_statistic(a, stats.mean, 500)
    assert first.low <= first.point <= first.high
    single = stats.bootstrap_statistic([2.5])
    assert (single.point, single.low, single.high) == (2.5, 2.5, 2.5)
    with pytest.raises(ValueError):
        stats.bootstrap_statistic([])


def test_rank_correlation_known_values() -> None:
    from harness.core.stats import rank_correlation, ranks

    assert ranks([10, 30, 20, 20]) == [1.0, 4.0, 2.5, 2.5]  # ties share their average rank
    assert rank_correlation([1, 2, 3, 4], [10, 20, 30, 45]) == pytest.approx(1.0)  # monotone, not linear
    assert rank_correlation([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # scipy.stats.spearmanr([1, 2, 3, 4, 5], [2, 1, 4, 3, 5]) = 0.8
    assert rank_correlation([1, 2, 3, 4, 5], [2, 1, 4, 3, 5]) == pytest.approx(0.8)
    assert rank_correlation([1, 2, 3], [5, 5, 5]) is None  # a constant side: undefined


def test_a_simulated_level_is_kept_for_the_next_process(tmp_path, monkeypatch) -> None:
    """``repeated_level`` simulates for a second; the next process reads the same number from the
    cache, keyed by everything it depends on, and a file holding another key is computed again."""
    import json

    from harness.core import stats

    monkeypatch.setenv("BENCH_CACHE_DIR", str(tmp_path))
    stats.repeated_level.cache_clear()
    first = stats.repeated_level(1, 2, 3)
    (kept,) = (tmp_path / "levels").glob("*.json")
    assert json.loads(kept.read_text())["value"] == first
    assert "numpy" in json.loads(kept.read_text())["key"]
    stats.repeated_level.cache_clear()
    assert stats.repeated_level(1, 2, 3) == first  # read back
    kept.write_text(json.dumps({"key": "another design", "value": 0.5}))
    stats.repeated_level.cache_clear()
    assert stats.repeated_level(1, 2, 3) == first  # not another key's number
    stats.repeated_level.cache_clear()
