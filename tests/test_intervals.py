"""The one model of a speedup (harness.derive.intervals): checked against formulas computed here,
not by it."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from harness.core import stats
from harness.core.formats import interval_text
from harness.derive.intervals import Estimate, Spread, arm_spread, cell_estimates, residual_spread


def test_two_arms_two_rounds_is_the_paired_t_on_log_ratios() -> None:
    table = {"baseline": {0: 100.0, 1: 110.0}, "ngram": {0: 150.0, 1: 154.0}}
    found = cell_estimates(table, "baseline")["ngram"]
    d = [math.log(1.5), math.log(154 / 110)]
    mean = sum(d) / 2
    se = abs(d[0] - d[1]) / math.sqrt(2) / math.sqrt(2)  # sd of the two differences / sqrt(n)
    half = 12.7062047 * se  # t(0.975, 1)
    assert found.point == pytest.approx(math.exp(mean))
    assert (found.low, found.high) == pytest.approx((math.exp(mean - half), math.exp(mean + half)), rel=1e-6)
    assert (found.rounds, found.df, found.source) == (2, 1, "server_starts")
    # one degree of freedom (t 12.7): 1.45x measured twice with a 7% spread is not yet decided
    assert found.verdict == "indistinguishable" and not found.decided


def test_a_deciding_design_widens_each_interval_for_its_looks() -> None:
    table = {"baseline": {0: 100.0, 1: 110.0, 2: 104.0}, "a": {0: 130.0, 1: 138.0, 2: 135.0}, "b": {}}
    table["b"] = {0: 120.0, 1: 133.0, 2: 121.0}
    fixed = cell_estimates(table, "baseline")
    deciding = cell_estimates(table, "baseline", looks=4, first_look=2)  # looks after rounds 2 to 5
    older = cell_estimates(table, "baseline", looks=4)  # a version-11 summary: no first look stored
    for arm in ("a", "b"):
        one, four, bonferroni = fixed[arm], deciding[arm], older[arm]
        assert (four.point, four.log_se, four.df, four.looks) == (one.point, one.log_se, one.df, 4)
        # the t interval at the level fitted to 4 looks from 2 rounds, two-sided, computed here
        level = stats.repeated_level(1, 2, 4)
        assert 0.975 < level < 1 - 0.05 / 4  # the looks share rounds: less strict than Bonferroni
        half = stats.t_quantile(1 - (1 - level) / 2, four.df) * four.log_se
        assert (four.low, four.high) == pytest.approx(
            (four.point * math.exp(-half), four.point * math.exp(half)), rel=1e-9
        )
        assert bonferroni.low < four.low < one.low and one.high < four.high < bonferroni.high
        half = stats.t_quantile(1 - 0.05 / 8, four.df) * four.log_se  # Bonferroni: 1 - 0.05 / 4
        assert bonferroni.low == pytest.approx(four.point * math.exp(-half), rel=1e-9)
        # the winner of 2 arms: the level fitted to both arms over the 4 looks
        winner = four.selected_from(2)
        half = stats.t_quantile(1 - (1 - stats.repeated_level(2, 2, 4)) / 2, four.df) * four.log_se
        assert winner.low == pytest.approx(four.point * math.exp(-half), rel=1e-9)
        assert bonferroni.selected_from(2).low < winner.low < four.low
        # one look: the two-sided Dunnett level for 2 arms at its degrees of freedom (4)
        dunnett = stats.many_to_one_level(2, one.df)
        assert one.selected_from(2).low == pytest.approx(one.bounds(dunnett)[0], rel=1e-9)
        assert one.bounds(0.975)[0] < one.selected_from(2).low < one.low
    assert fixed["a"].verdict == "pays" and deciding["a"].low < fixed["a"].low


def test_more_arms_pool_the_residual_of_the_two_way_model() -> None:
    rng = np.random.default_rng(3)
    arms, rounds = ["baseline", "a", "b", "c"], 3
    truth = {"baseline": 100.0, "a": 120.0, "b": 95.0, "c": 101.0}
    drift = rng.normal(0, 0.05, rounds)  # shared by a round's start-ups: the model absorbs it
    table = {a: {r: truth[a] * math.exp(drift[r] + rng.normal(0, 0.03)) for r in range(rounds)} for a in arms}
    found = cell_estimates(table, "baseline")
    # the additive model by least squares, independently of the module
    y = np.array([math.log(table[a][r]) for a in arms for r in range(rounds)])
    x = np.zeros((len(y), len(arms) + rounds - 1))
    for i, (a, r) in enumerate((a, r) for a in arms for r in range(rounds)):
        x[i, arms.index(a)] = 1.0
        if r > 0:
            x[i, len(arms) + r - 1] = 1.0
    coef, ss, *_ = np.linalg.lstsq(x, y, rcond=None)
    df = (len(arms) - 1) * (rounds - 1)
    se = math.sqrt(ss[0] / df * 2 / rounds)
    t = stats.t_quantile(0.975, df)
    pooled = [arm for arm in ("a", "b", "c") if not found[arm].own_spread]
    assert pooled, "three arms of one spread: at least one keeps the pooled residual"
    for arm in ("a", "b", "c"):
        effect = coef[arms.index(arm)] - coef[0]
        assert found[arm].point == pytest.approx(math.exp(effect))
        if arm in pooled:
            assert found[arm].low == pytest.approx(math.exp(effect - t * se))
            assert found[arm].high == pytest.approx(math.exp(effect + t * se))
            assert found[arm].df == df == 6
        else:  # its paired differences spread more than the others' residual (F test): its own
            d = [math.log(table[arm][r] / table["baseline"][r]) for r in range(rounds)]
            own_se = float(np.std(d, ddof=1)) / math.sqrt(rounds)
            half = stats.t_quantile(0.975, rounds - 1) * own_se
            assert (found[arm].low, found[arm].high) == pytest.approx(
                (math.exp(effect - half), math.exp(effect + half))
            )
            assert found[arm].df == rounds - 1 and found[arm].model_arms == 2


def test_an_arm_that_spreads_more_than_the_others_gets_its_own_interval() -> None:
    rng = np.random.default_rng(5)
    rounds = 4
    quiet = {
        a: {r: 100.0 * math.exp(rng.normal(0, 0.01)) for r in range(rounds)}
        for a in ("baseline", "b", "c", "d")
    }
    noisy = {r: 110.0 * math.exp(s) for r, s in enumerate([0.12, -0.10, 0.08, -0.11])}
    found = cell_estimates({**quiet, "noisy": noisy}, "baseline")
    assert found["noisy"].own_spread and found["noisy"].df == rounds - 1
    assert not any(found[a].own_spread for a in ("b", "c", "d"))
    # pooled, the quiet arms' residual would have narrowed the noisy arm's interval
    alone = cell_estimates({"baseline": quiet["baseline"], "noisy": noisy}, "baseline")["noisy"]
    assert (found["noisy"].low, found["noisy"].high) == pytest.approx((alone.low, alone.high))


def test_one_start_up_is_unverified_unless_a_calibration_gives_the_spread() -> None:
    table = {"baseline": {0: 100.0}, "ngram": {0: 120.0}}
    alone = cell_estimates(table, "baseline")["ngram"]
    assert (alone.low, alone.high, alone.verdict) == (None, None, "unverified")
    assert alone.text() == "1.20x (faster, unverified: start-up spread not measured)"
    calibrated = cell_estimates(table, "baseline", Spread(0.03, 10, "calibration"))["ngram"]
    half = stats.t_quantile(0.975, 10) * 0.03 * math.sqrt(2)
    assert (calibrated.low, calibrated.high) == pytest.approx((1.2 * math.exp(-half), 1.2 * math.exp(half)))
    assert (calibrated.source, calibrated.df) == ("calibration", 10)
    # with two rounds the run's own residual is pooled with the calibration's, where it agrees
    two = {"baseline": {0: 100.0, 1: 100.0}, "ngram": {0: 120.0, 1: 121.2}}
    both = cell_estimates(two, "baseline", Spread(0.03, 10, "calibration"))["ngram"]
    ss = (math.log(1.2) - math.log(1.212)) ** 2 / 4
    assert both.df == 11 and both.source == "server_starts+calibration" and not both.calibration_refused
    assert both.log_se == pytest.approx(math.sqrt((ss + 10 * 0.03**2) / 11 * 2 / 2))
    # a run noisier than its calibration (another day): the calibration is not pooled
    noisy = {"baseline": {0: 100.0, 1: 100.0}, "ngram": {0: 120.0, 1: 150.0}}
    own = cell_estimates(noisy, "baseline", Spread(0.03, 10, "calibration"))["ngram"]
    assert own.calibration_refused and (own.source, own.df) == ("server_starts", 1)
    assert own.log_se == cell_estimates(noisy, "baseline")["ngram"].log_se


def test_an_arm_missing_a_round_gets_its_own_model_with_the_baseline() -> None:
    table = {
        "baseline": {0: 100.0, 1: 104.0, 2: 98.0},
        "a": {0: 130.0, 1: 133.0, 2: 127.0},
        "failed_late": {0: 90.0, 1: 95.0},  # no third start-up
    }
    found = cell_estimates(table, "baseline")
    assert found["a"].rounds == 3 and found["a"].df == 2
    late = found["failed_late"]
    assert late.rounds == 2 and late.df == 1
    assert late.point == pytest.approx(math.sqrt(0.9 * 95 / 104))
    # the two were fitted apart: a winner among them is corrected at Bonferroni's level, not max-t's
    # (max-t rests on one shared variance estimate)
    assert (found["a"].model_arms, late.model_arms) == (2, 2)
    assert found["a"].selected_from(2).low == pytest.approx(found["a"].bounds(0.975)[0])


def test_verdicts_equivalence_and_the_selection_correction() -> None:
    assert Estimate(1.0, 0.99, 1.02, 3, 4, 0.005).verdict == "equivalent"
    assert Estimate(1.0, 0.95, 1.02, 3, 4, 0.01).verdict == "indistinguishable"
    assert Estimate(0.9, 0.85, 0.95, 3, 4, 0.02).verdict == "loses"
    picked = Estimate(1.05, *Estimate(1.05, rounds=3, df=4, log_se=0.015).bounds(), 3, 4, 0.015, model_arms=5)
    assert picked.verdict == "pays"
    corrected = picked.selected_from(4)  # max-t: the two-sided Dunnett value for 4 arms at 4 df
    assert (corrected.low, corrected.high) == pytest.approx(picked.bounds(stats.many_to_one_level(4, 4)))
    # candidates that were not all fitted in one model (the winner's fit had fewer arms than the
    # candidates and the baseline: another arm missed rounds), or a model not stored: Bonferroni
    for unshared in (replace(picked, model_arms=3), replace(picked, model_arms=0)):
        assert unshared.selected_from(4).low == pytest.approx(picked.bounds(1 - 0.05 / 4)[0])
    bonferroni = stats.t_quantile(1 - 0.025 / 4, 4) * 0.015  # each of 4 at 1 - 0.05 / 4: wider
    assert 1.05 * math.exp(-bonferroni) < corrected.low
    assert corrected.verdict == "indistinguishable"
    assert picked.selected_from(1) is picked


def test_calibration_spread_averages_cells_but_claims_one_cells_df() -> None:
    a = {"baseline": {0: 100.0, 1: 110.0, 2: 105.0}, "ngram": {0: 120.0, 1: 125.0, 2: 131.0}}
    b = {"baseline": {0: 50.0, 1: 52.0, 2: 49.0}, "ngram": {0: 60.0, 1: 60.0, 2: 63.0}}
    per_cell = []
    for table in (a, b):
        d = [math.log(table["ngram"][r] / table["baseline"][r]) for r in range(3)]
        per_cell.append(np.var(d, ddof=1) / 2)  # two arms: the residual variance is half the differences'
    sd, df = residual_spread([a, b])  # type: ignore[misc]
    assert sd == pytest.approx(math.sqrt(sum(per_cell) / 2)) and df == 2
    assert residual_spread([{"baseline": {0: 1.0}, "ngram": {0: 2.0}}]) is None


@pytest.mark.parametrize(
    ("others", "df", "table"),
    [(2, 10, 2.15), (2, 100_000, 1.92), (4, 20, 2.30), (3, 12, 2.29)],  # Dunnett's one-sided 5% tables
)
def test_best_of_quantile_matches_dunnetts_tables(others: int, df: int, table: float) -> None:
    assert stats.best_of_quantile(others, df) == pytest.approx(table, abs=0.006)
    assert stats.best_of_quantile(1, df) == pytest.approx(stats.t_quantile(0.95, df))


@pytest.mark.parametrize(
    ("others", "df", "table"),
    [(2, 10, 2.57), (3, 10, 2.76), (2, 20, 2.38), (3, 20, 2.54), (2, 5, 3.03), (5, 30, 2.66)],
)  # Dunnett's two-sided 5% tables
def test_the_winners_level_is_the_two_sided_dunnett_value(others: int, df: int, table: float) -> None:
    level = stats.many_to_one_level(others, df)
    assert stats.t_quantile(1 - (1 - level) / 2, df) == pytest.approx(table, abs=0.006)
    # stricter than one interval's 95%, less than Bonferroni's (the comparisons share the baseline)
    assert 0.95 < level < 1 - 0.05 / others
    assert stats.many_to_one_level(1, df) == 0.95


def test_the_looks_level_is_fitted_to_the_design_and_conservative_where_it_has_more_df() -> None:
    """``repeated_level``: with one look it is the Dunnett level its simulation approximates; with
    several, between one look's and Bonferroni's; a model with more arms or a calibration's degrees
    of freedom would allow a level no stricter (within the simulation's error), so the fewest is
    the safe one to use for every run of that design."""
    assert stats.repeated_level(2, 3, 1) == pytest.approx(stats.many_to_one_level(2, 4), abs=0.002)
    for others, first, looks in [(1, 2, 5), (2, 2, 3), (1, 3, 4)]:
        level = stats.repeated_level(others, first, looks)
        bonferroni = 1 - 0.05 / (looks * others)
        assert stats.many_to_one_level(others, others * (first - 1)) < level < bonferroni
        assert stats.repeated_level(others, first, looks, arms=others + 3) <= level + 0.001
        assert stats.repeated_level(others, first, looks, calibration_df=5) <= level + 0.001


def test_one_arms_spread_across_rounds_keeps_the_rounds_drift() -> None:
    # the same drift in both arms: the residual (a speedup's spread) is 0, one arm's is the drift's
    drift = [0.0, 0.05, -0.03]
    table = {"baseline": {r: 100 * math.exp(d) for r, d in enumerate(drift)}}
    table["ngram"] = {r: 130 * math.exp(d) for r, d in enumerate(drift)}
    residual = residual_spread([table])
    assert residual is not None and residual[0] == pytest.approx(0.0, abs=1e-12)
    sd, df = arm_spread([table, table])  # type: ignore[misc]
    assert sd == pytest.approx(float(np.std(drift, ddof=1))) and df == 4  # one cell's: 2 arms x 2
    assert arm_spread([{"baseline": {0: 100.0}}]) is None


def test_an_intervals_bounds_never_read_as_on_or_across_one_when_they_are_not() -> None:
    assert interval_text(0.9953, 1.153) == "[0.995, 1.15]"  # undecided: not "[1.00, 1.15]"
    assert interval_text(1.004, 1.2) == "[1.004, 1.20]"  # pays: not "[1.00, 1.20]"
    assert interval_text(0.8, 0.9996) == "[0.80, 0.9996]"  # loses
    assert interval_text(0.99, 1.0) == "[0.99, 1.00]" and interval_text(1.2345, 1.5) == "[1.23, 1.50]"
    assert Estimate(1.07, 0.9953, 1.153).text() == "1.07x [0.995, 1.15]"


def test_a_deciding_run_knows_when_it_used_every_round() -> None:
    """From 2 rounds with 3 looks a design may take 4 rounds: at 4 it is out of rounds (the verdict
    then says to raise the maximum, not to add rounds); a fixed number of rounds never is."""
    assert Estimate(1.1, rounds=4, looks=3, first_look=2).out_of_rounds
    assert not Estimate(1.1, rounds=3, looks=3, first_look=2).out_of_rounds
    assert not Estimate(1.1, rounds=4).out_of_rounds


def test_the_prompt_term_is_the_jackknife_of_the_cells_own_estimator() -> None:
    from harness.derive.intervals import Design, WindowPrompts, design_for, prompt_variance

    # concurrency 1, requests back to back: a window lasts its requests' summed time, so leaving a
    # prompt out leaves exactly the others' tokens over the others' time
    base = {"p0": (10, 1.0), "p1": (10, 2.0), "p2": (10, 1.5), "p3": (10, 0.5)}
    gains = {"p0": 1.5, "p1": 1.1, "p2": 1.3, "p3": 0.9}
    arm = {p: (t, s / gains[p]) for p, (t, s) in base.items()}

    def windows(prompts: dict, pace: float) -> list[WindowPrompts]:
        return [
            WindowPrompts(r, sum(s for _, s in prompts.values()) * pace * (1 + r / 10), prompts)
            for r in (0, 1)
        ]

    table = {"baseline": windows(base, 1.0), "arm": windows(arm, 1.0)}
    term = prompt_variance(table, "arm", "baseline", [0, 1])
    variance, count = term.variance, term.prompts
    left_out = [
        math.log(
            sum(s for q, (_, s) in base.items() if q != p) / sum(s for q, (_, s) in arm.items() if q != p)
        )
        for p in base
    ]
    assert count == 4
    assert variance == pytest.approx(3 / 4 * sum((v - np.mean(left_out)) ** 2 for v in left_out))
    # in a cell's estimate: the start-ups' term and the prompts' add (the interval holds both)
    found = cell_estimates(
        {"baseline": {0: 100.0, 1: 104.0}, "arm": {0: 125.0, 1: 126.0}}, "baseline", prompts=table
    )
    alone = cell_estimates({"baseline": {0: 100.0, 1: 104.0}, "arm": {0: 125.0, 1: 126.0}}, "baseline")
    assert found["arm"].prompts == 4 and found["arm"].prompt_log_se == pytest.approx(math.sqrt(variance))
    assert found["arm"].log_se == pytest.approx(math.hypot(alone["arm"].log_se, math.sqrt(variance)))
    assert found["arm"].high > alone["arm"].high
    # what would pin it to +-10%: the prompts' term shrinks as 1/prompts, the start-ups' as 1/rounds
    design = design_for(found["arm"], 10.0)
    assert isinstance(design, Design) and design.reachable and design.prompts >= 4
    z = stats.normal_quantile(0.975)
    startup_v, prompt_v = alone["arm"].log_se ** 2 * 2, variance * 4
    assert z * math.sqrt(startup_v / design.rounds + prompt_v / design.prompts) <= math.log(1.1) + 1e-9
