"""The gate statistics on synthetic samples: a real regression is caught, noise is not."""

from __future__ import annotations

import json
import random
from pathlib import Path

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


@pytest.mark.parametrize("tampered", ["0.5", "NaN", "Infinity", "0.9999", "0.9"])
def test_a_kept_level_outside_what_the_simulation_gives_is_computed_again(
    tampered, tmp_path, monkeypatch, capsys
) -> None:
    """A kept level under the right key is still a file anyone can edit: one below the nominal
    level, above Bonferroni's bound for its looks and arms, or not finite is refused with a line
    naming the file, and the simulation's level is used and kept anew."""
    import json

    from harness.core import stats

    monkeypatch.setenv("BENCH_CACHE_DIR", str(tmp_path))
    stats.repeated_level.cache_clear()
    first = stats.repeated_level(2, 2, 3)
    (kept,) = (tmp_path / "levels").glob("*.json")
    low, high = stats.repeated_level_bounds(2, 3, 0.95)
    assert low < first < high
    capsys.readouterr()
    kept.write_text(kept.read_text().replace(repr(first), tampered))
    stats.repeated_level.cache_clear()
    assert stats.repeated_level(2, 2, 3) == first
    assert f"{kept}: held {float(tampered)!r}" in capsys.readouterr().err
    assert json.loads(kept.read_text())["value"] == first  # kept anew
    stats.repeated_level.cache_clear()


def test_a_tampered_level_cache_changes_no_verdict(tmp_path) -> None:
    """``bench show`` of a run that decided over 4 looks, its kept levels set to 0.5 (which narrowed
    its intervals enough to flip code_humaneval @4 from "too noisy" to "pays") and NaN (which removed
    every interval), alternately: it prints what a sound cache gives, and names each file. The
    sound cache starts as a copy of this machine's (the golden views fill it), so only the
    tampered levels, those of the run's own looks, are simulated here (~1 s each)."""
    import os
    import shutil
    import subprocess
    import sys

    from harness.core.cache import cache_root

    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "COLUMNS": "200", "BENCH_CACHE_DIR": str(tmp_path)}
    if (cache_root() / "levels").is_dir():
        shutil.copytree(cache_root() / "levels", tmp_path / "levels")

    def show() -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "harness.cli", "show", "tests/fixtures/run_v12_decide"]
        return subprocess.run(command, capture_output=True, text=True, cwd=root, env=env, timeout=600)

    sound = show()
    assert sound.returncode == 0 and "too noisy" in sound.stdout, sound.stdout + sound.stderr
    own = []  # the levels of the run's own looks (3): the outlook's later looks do not decide its verdicts
    for path in sorted((tmp_path / "levels").glob("*.json")):
        others, first, looks = map(int, json.loads(path.read_text())["key"].split(": ")[1].split()[:3])
        own += [path] if looks <= 4 else []
    for tampered in ("0.5", "NaN"):
        for path in own:
            record = json.loads(path.read_text())
            path.write_text(f'{{"key": {json.dumps(record["key"])}, "value": {tampered}}}')
        again = show()
        assert again.stdout == sound.stdout
        named = [path for path in own if f"{path}: held {float(tampered)!r}" in again.stderr]
        assert named, again.stderr  # those this run reads: each named, computed again and kept anew
        assert all(0.95 < json.loads(path.read_text())["value"] < 1 for path in named)


def test_a_kept_dunnett_quantile_outside_its_bounds_is_computed_again(tmp_path, monkeypatch, capsys) -> None:
    """The many-to-one quantile (a second of quadrature) is kept on disk too, and used only between
    the one comparison's t quantile and Bonferroni's over the comparisons."""
    from harness.core import stats

    monkeypatch.setenv("BENCH_CACHE_DIR", str(tmp_path))
    first = stats._many_to_one_quantile(3, 6, 0.95, True)
    assert stats.t_quantile(0.975, 6) < first < stats.t_quantile(1 - 0.05 / 6, 6)
    (kept,) = (tmp_path / "quantiles").glob("*.json")
    assert stats._many_to_one_quantile(3, 6, 0.95, True) == first  # read back
    for tampered in ("0.5", "NaN", "99.0"):
        kept.write_text(kept.read_text().replace(repr(first), tampered))
        assert stats._many_to_one_quantile(3, 6, 0.95, True) == first
        assert f"{kept}: held {float(tampered)!r}" in capsys.readouterr().err
