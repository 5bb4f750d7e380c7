"""The detectable change of a relative gate rule (issue 78, item 2): the formula against a
simulation of the gate's own decision, and what `bench validate` states and flags."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.core import stats
from harness.derive.gates.detectable import (
    NO_NIGHT,
    check_text,
    design_lines,
    design_se,
    detectable_change,
    starts_needed,
)


@pytest.mark.parametrize(("se", "df", "tol"), [(0.02, 22.0, 5.0), (0.05, 6.0, 5.0), (0.01, 1e6, 5.0)])
def test_detectable_change_is_failed_80_percent_of_the_time(se: float, df: float, tol: float) -> None:
    """Draw log changes N(log(1 - d), se) at the stated d and apply the gate's rule (point worse
    than the tolerance and the interval excluding no change): about 80% fail."""
    change = detectable_change(se, df, tol, higher_is_better=True)
    rng = np.random.default_rng(0)
    logs = rng.normal(math.log(1 - change), se, 40_000)
    t = stats.t_quantile(0.975, df)
    worse = -np.expm1(logs)
    failed = (worse > tol / 100) & (logs + t * se < 0)
    assert failed.mean() == pytest.approx(0.80, abs=0.01)


def test_detectable_change_lower_is_better_and_linear() -> None:
    se, df = 0.03, 10.0
    change = detectable_change(se, df, 5.0, higher_is_better=False)
    rng = np.random.default_rng(1)
    logs = rng.normal(math.log1p(change), se, 40_000)
    t = stats.t_quantile(0.975, df)
    assert ((np.expm1(logs) > 0.05) & (logs - t * se > 0)).mean() == pytest.approx(0.80, abs=0.01)
    # on the difference scale: max(tol, t se) + z se
    assert detectable_change(0.01, 1e6, 5.0, log=False) == pytest.approx(0.05 + 0.8416 * 0.01, abs=1e-4)


def test_noise_sets_it_when_the_interval_is_wider_than_the_tolerance() -> None:
    assert detectable_change(0.001, 1e6, 5.0) == pytest.approx(
        1 - math.exp(math.log(0.95) - 0.8416 * 0.001), rel=1e-3
    )
    wide = detectable_change(0.05, 6.0, 5.0)
    assert wide > 0.05 + 2 * 0.05  # t(6) se + z se, well past the limit


def test_design_se_and_starts_needed() -> None:
    se, df = design_se(0.05, 12)
    assert se == pytest.approx(math.sqrt(2 * 0.05**2 / 12)) and df == pytest.approx(22, rel=1e-3)
    needed = starts_needed(5.0, 0.05, (0.0, 1e6))
    assert needed is not None and needed > 4
    half = stats.t_quantile(0.975, 2 * (needed - 1)) * design_se(0.05, needed)[0]
    assert (
        half <= math.log1p(0.05) < stats.t_quantile(0.975, 2 * (needed - 2)) * design_se(0.05, needed - 1)[0]
    )
    assert starts_needed(5.0, 0.05, (0.05, 3.0)) is None  # the night term alone is wider


def test_check_text() -> None:
    values, reference = [100.0, 102.0, 98.0, 101.0], [100.0, 99.0, 103.0, 100.0]
    said = check_text(values, reference, 5.0, True, 0.95, None, (0.0, 1e6))
    assert said.startswith("detects ") and said.endswith("with 80% (4/4 start-ups)")
    assert check_text(values, reference, 5.0, True, 0.95, None, None) == f"detects {NO_NIGHT}"


class _Regime:
    def __init__(self, starts: int, rules: list[dict]) -> None:
        from harness.config.checks import Gates
        from harness.config.load import Load

        self.gates = Gates(rules=rules)
        self.load = Load(concurrency=[1], num_prompts=8, max_output_tokens=8, server_starts=starts)


def test_design_lines_flag_and_state() -> None:
    rules = [
        {"arm": "*", "metric": "tau", "max_regression_pct": 5},
        {"arm": "baseline", "metric": "output_tok_s", "max_regression_pct": 15},
        {"arm": "*", "metric": "identical_pct", "min": 60},
    ]
    lines = design_lines(_Regime(4, rules))
    assert len(lines) == 3 and "5% assumed" in lines[0][0]
    tau, flagged = lines[1]
    assert flagged and "detects" in tau and "start-ups a side would resolve it" in tau
    timed, flagged = lines[2]
    assert not flagged and "never fails a two-run comparison" in timed and "(assumed)" in timed
    tau12, flagged = design_lines(_Regime(12, rules))[1]
    assert not flagged and "detects 6.6%" in tau12


@pytest.mark.parametrize("regime", ["regimes/cpu_nightly.yaml", "regimes/h200_tp1_qwen3_8b.yaml"])
def test_shipped_nightly_rules_are_detectable(regime: str) -> None:
    from harness.config.regime import load_regime

    loaded = load_regime(regime)
    lines = design_lines(loaded)
    assert lines and not any(flagged for _, flagged in lines)
    assert any(g.arm == "baseline" and g.metric == "output_tok_s" for g in loaded.gates.rules)
