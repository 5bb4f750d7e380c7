"""The study analysis on constructed data whose right answer is known (every number below can be
checked by hand): a crossing at a known load with its round-paired confidence set, "always pays"
and "never pays" only when every level is decided, Hsu's best-K set, a recommendation that must
pay after correcting for the arms it was picked from, and flips only between decided answers."""

from __future__ import annotations

import math

import pytest

from harness.core import stats
from harness.derive.intervals import Estimate
from harness.derive.study.analysis import (
    Observation,
    best_k,
    best_set,
    break_even,
    crossing,
    crossing_set,
    estimate,
    flips,
    recommend,
)
from harness.results.model import SpeedupEstimate

DTYPE_BF16 = (("target.dtype", "bfloat16"),)
DTYPE_FP32 = (("target.dtype", "float32"),)


def obs(
    speedup: float,
    concurrency: int = 1,
    arm: str = "ngram_k4",
    k: int | None = 4,
    point: str = "p0",
    axes: tuple = DTYPE_BF16,
    workload: str = "code",
    log_se: float | None = 0.02,
    df: int = 4,
    rounds: tuple[float, ...] | None = None,
    family: str = "ngram",
    method: str = "ngram",
    model_arms: int | None = None,
) -> Observation:
    """A cell as its run stored it: the model's point, and its t interval from ``log_se`` and
    ``df`` (None: unverified, one start-up). ``rounds``: its per-round speedups (the point is then
    their geometric mean). ``model_arms``: the arms of the fit it came from (None: not stored)."""
    if rounds is not None:
        speedup = math.exp(stats.mean([math.log(s) for s in rounds]))
    n = len(rounds) if rounds is not None else (1 if log_se is None else 3)
    found = Estimate(speedup, rounds=n, df=df if log_se is not None else 0, log_se=log_se)
    low, high = found.bounds() or (None, None)
    return Observation(
        point=point,
        axes=axes,
        arm=arm,
        family=family,
        method=method,
        k=k,
        workload=workload,
        concurrency=concurrency,
        speedup=speedup,
        tau=2.0,
        output_tok_s=10.0 * speedup,
        usd_per_mtok=1.0 / speedup,
        baseline_usd_per_mtok=1.0,
        identical_pct=100.0,
        round_speedups=tuple(enumerate(rounds)) if rounds is not None else (),
        stored=SpeedupEstimate(
            low=low,
            high=high,
            log_se=log_se,
            df=df if log_se is not None else None,
            rounds=n,
            source="server_starts" if log_se is not None else None,
            model_arms=model_arms,
        ),
    )


def test_estimate_is_rebuilt_from_the_stored_fields() -> None:
    found = estimate(obs(1.2, log_se=0.03, df=2))
    q = stats.t_quantile(0.975, 2)  # 4.303: [1.2 e^-0.129, 1.2 e^0.129] = [1.05, 1.36]
    assert found.low == pytest.approx(1.2 * math.exp(-q * 0.03)) and found.df == 2 and found.rounds == 3
    assert found.source == "server_starts" and found.verdict == "pays"
    single = estimate(obs(1.2, log_se=None))
    assert (
        single.low is None
        and single.verdict == "unverified"
        and "start-up spread not measured" in single.text()
    )


# ---- break-even ------------------------------------------------------------------------------


def test_crossing_is_interpolated_on_log2_concurrency_and_log_speedup() -> None:
    # e^0.2 at 1, e^-0.2 at 4: log speedup is 0 halfway in log2, at 2**1 = 2
    found = crossing([1, 4], [math.exp(0.2), math.exp(-0.2)])
    assert found is not None and found[0] == pytest.approx(2.0) and found[1:] == ("stops_paying", (1, 4))
    # 1.5x at 4, 0.5x at 16: log 1.5 / (log 1.5 - log 0.5) = 0.369 of the way from log2 4 to log2 16
    found = crossing([1, 4, 16], [1.6, 1.5, 0.5])
    assert found[0] == pytest.approx(2 ** (2 + 2 * math.log(1.5) / math.log(3))) and found[2] == (4, 16)  # type: ignore[index]
    assert crossing([1, 2], [0.8, 1.2])[1] == "starts_paying"  # type: ignore[index]
    assert crossing([1, 2, 4], [1.2, 1.1, 1.05]) is None


# three rounds that each fall by 0.4 in log speedup from concurrency 1 to 4, offset by -0.05, 0, 0.05:
# z_r(t) = 0.2 - 0.4 t + d_r, mean 0.2 - 0.4 t, sd 0.05, se 0.05 / sqrt(3); the set is
# |0.2 - 0.4 t| <= t_{0.975, 2} se, i.e. t in [0.5 - q se / 0.4, 0.5 + q se / 0.4], x = 2 t
OFFSETS = (-0.05, 0.0, 0.05)
ROUNDS = [[math.exp(0.2 + d), math.exp(-0.2 + d)] for d in OFFSETS]


def test_crossing_set_by_hand() -> None:
    se = 0.05 / math.sqrt(3)
    half = stats.t_quantile(0.975, 2) * se / 0.4  # 0.310 of the segment
    low, high = crossing_set([1, 4], ROUNDS)  # type: ignore[misc]
    assert math.log2(low) == pytest.approx(2 * (0.5 - half), abs=1e-6)  # 2**0.379 = 1.30
    assert math.log2(high) == pytest.approx(2 * (0.5 + half), abs=1e-6)  # 2**1.621 = 3.08
    assert low == pytest.approx(1.30, abs=0.01) and high == pytest.approx(3.08, abs=0.02)
    # a looser confidence narrows it (t_{0.95, 2} = 2.920), a stricter one reaches both edges
    # (t_{0.995, 2} = 9.925: half a segment is 0.5 x 0.4 / se = 6.9 se); one round has no set
    narrower = crossing_set([1, 4], ROUNDS, confidence=0.90)
    half = stats.t_quantile(0.95, 2) * se / 0.4
    assert math.log2(narrower[0]) == pytest.approx(2 * (0.5 - half), abs=1e-6)  # type: ignore[index, arg-type]
    assert crossing_set([1, 4], ROUNDS, confidence=0.99) == (None, None)
    assert crossing_set([1, 4], ROUNDS[:1]) is None


def test_crossing_set_is_open_ended_where_it_reaches_the_measured_edge() -> None:
    # the rounds disagree about where it crosses (one at 1.4, one near 4): with 2 rounds t_{0.975,1}
    # = 12.7 and the set covers the whole range
    noisy = [[math.exp(0.1), math.exp(-0.4)], [math.exp(0.3), math.exp(-0.01)]]
    assert crossing_set([1, 4], noisy) == (None, None)
    # the lower side is placed, the upper one runs to the edge: concurrency 4 cannot be ruled out
    tilted = [[math.exp(0.3 + d), math.exp(-0.02 + d)] for d in OFFSETS]
    low, high = crossing_set([1, 4], tilted)  # type: ignore[misc]
    assert low is not None and 1 < low < 4 and high is None


def test_crossing_set_is_empty_when_the_rounds_exclude_a_crossing() -> None:
    # every round pays by 20-30% at both levels: no crossing in the range
    assert crossing_set([1, 4, 16], [[1.2, 1.25, 1.3], [1.22, 1.27, 1.31], [1.21, 1.24, 1.29]]) is None


def test_break_even_reports_the_set_and_its_bracketing_levels() -> None:
    series = [
        obs(0, 4, rounds=tuple(r[1] for r in ROUNDS)),
        obs(0, 1, rounds=tuple(r[0] for r in ROUNDS)),  # any order
    ]
    found = break_even(series)
    assert found.kind == "crosses" and found.concurrency == pytest.approx(2.0) and found.bracket == (1, 4)
    assert found.has_set and found.rounds == 3
    assert (found.low, found.high) == crossing_set([1, 4], ROUNDS)
    assert found.text() == (
        "stops paying at concurrency 2.0 [1.3, 3.1] (between the measured 1 and 4, interpolated on log2 "
        "concurrency; 95%, levels paired by 3 rounds)"
    )


def test_break_even_pairs_only_the_rounds_common_to_every_level() -> None:
    # round 2 failed at concurrency 4: only rounds 0 and 1 pair the levels
    series = [
        obs(0, 1, rounds=tuple(r[0] for r in ROUNDS)),
        obs(0, 4, rounds=tuple(r[1] for r in ROUNDS[:2])),
    ]
    found = break_even(series)
    assert found.rounds == 2 and (found.low, found.high) == crossing_set([1, 4], ROUNDS[:2])


def test_break_even_from_one_round_is_unverified() -> None:
    found = break_even([obs(0, 1, log_se=None, rounds=(1.2,)), obs(0, 4, log_se=None, rounds=(0.8,))])
    assert found.kind == "crosses" and not found.has_set and found.low is None and found.high is None
    assert found.text().endswith(
        "(between the measured 1 and 4, interpolated on log2 concurrency; unverified: 1 start-up per level)"
    )


def test_always_and_never_pays_need_every_level_decided() -> None:
    # se 0.02, df 4: each interval is the point x/ e^(2.776 x 0.02) = 5.7%
    assert break_even([obs(1.3, 1), obs(1.2, 4), obs(1.1, 16)]).kind == "always_pays"
    never = break_even([obs(0.9, 1), obs(0.8, 4)])
    assert never.kind == "never_pays" and never.text().startswith("never pays at the levels measured (1-4)")
    # 1.04x at 16 has the interval [0.98, 1.10]: not decided, so not "always"
    undecided = break_even([obs(1.3, 1), obs(1.2, 4), obs(1.04, 16)])
    assert undecided.kind == "undecided" and "not every level is decided" in undecided.text()
    # one start-up: above 1 everywhere, but no level is decided
    assert break_even([obs(1.3, 1, log_se=None), obs(1.2, 4, log_se=None)]).kind == "undecided"


# ---- best K --------------------------------------------------------------------------------


def test_best_set_is_hsus_multiple_comparisons_with_the_best() -> None:
    se, df = 0.02, 4
    h = stats.best_of_quantile(2, df)  # 2.610 for 2 comparisons at 4 df
    assert h == pytest.approx(2.61, abs=0.01)
    # K=6 is 2.4 se behind the best: a lone one-sided t (2.132) would call it slower, MCB over
    # the two others cannot; K=2 is 2.7 se behind: out
    means = [0.0, -2.7 * se, -2.4 * se]
    assert best_set(means, se, df) == [True, False, True]
    assert best_set([0.0, -2.4 * se], se, df) == [True, False]  # one comparison: h = t = 2.132


def test_best_k_finds_the_plateau() -> None:
    group = [
        obs(1.20, k=2, arm="ngram_k2"),
        obs(1.50, k=4, arm="ngram_k4"),
        obs(1.49, k=6, arm="ngram_k6"),
    ]
    (found,) = best_k(group)
    assert found.k == 4 and found.tied == (6,) and [k for k, _ in found.by_k] == [2, 4, 6]
    assert "cannot be told from the best: K=6" in found.text()
    # K=6 2.7 se behind (e^(-0.054)): better than every other K
    clear = [
        obs(1.5, k=4, arm="k4"),
        obs(1.5 * math.exp(-2.7 * 0.02), k=6, arm="k6"),
        obs(1.2, k=2, arm="k2"),
    ]
    (found,) = best_k(clear)
    assert found.tied == () and "better than every other K" in found.text()


def test_best_k_takes_the_largest_error_when_the_arms_differ() -> None:
    # K=6 is 2.4 x 0.02 behind; with its own se 0.03 (it missed a round) that is 1.6 se: tied
    group = [obs(1.5, k=4, arm="k4"), obs(1.5 * math.exp(-0.048), k=6, arm="k6", log_se=0.03)]
    assert best_k(group)[0].tied == (6,)


def test_best_k_without_an_interval_makes_no_claim() -> None:
    group = [obs(1.2, k=2, arm="a", log_se=None), obs(1.5, k=4, arm="b", log_se=None)]
    (found,) = best_k(group)
    assert found.k == 4 and found.tied is None and "cannot tell K values apart" in found.text()


# ---- recommendation ------------------------------------------------------------------------


def test_recommendation_must_pay_after_correcting_for_the_candidates() -> None:
    se, df = 0.02, 4
    t1 = stats.t_quantile(0.975, df)  # 2.776: one arm
    t3 = stats.t_quantile(1 - (1 - stats.many_to_one_level(3, df)) / 2, df)  # 3.62: the fastest of 3
    assert t3 == pytest.approx(3.62, abs=0.01)  # two-sided Dunnett (Bonferroni's would be 3.96)
    # 1.07x: pays alone (e^(-2.776 x 0.02) x 1.07 = 1.012), not as the fastest of three (0.994)
    edge = 1.07
    assert edge * math.exp(-t1 * se) > 1 > edge * math.exp(-t3 * se)
    alone = recommend([obs(edge)])[0]
    assert alone.arm == "ngram_k4" and alone.candidates == 1 and "(pays)" in alone.text()
    three = [  # fitted in one model of the baseline and the three arms: max-t
        obs(edge, model_arms=4),
        obs(1.0, arm="ngram_k2", k=2, model_arms=4),
        obs(0.98, arm="eagle", family="eagle", method="eagle3", model_arms=4),
    ]
    (rec,) = recommend(three)
    assert rec.arm is None and rec.best_arm == "ngram_k4" and rec.candidates == 3
    assert rec.selected.low == pytest.approx(edge * math.exp(-t3 * se))  # type: ignore[union-attr]
    # a bound of 0.995 is shown with three decimals: "1.00" would read as touching 1
    assert "faster, but not after correcting for the 3 arms it was picked from: [0.995, 1.15]" in rec.text()
    assert not rec.decided  # neither deploy nor a decided "no speculation"
    # without the model stored (a version-11 summary), Bonferroni's correction: 3.96 at 4 df
    (older,) = recommend([obs(edge), obs(1.0, arm="ngram_k2", k=2), obs(0.98, arm="eagle", family="e")])
    bonferroni = stats.t_quantile(1 - 0.025 / 3, df)
    assert older.selected.low == pytest.approx(edge * math.exp(-bonferroni * se))  # type: ignore[union-attr]
    # 1.2x pays even as the fastest of three
    (clear,) = recommend(
        [obs(1.2, model_arms=4), obs(1.0, arm="ngram_k2", k=2), obs(0.98, arm="e", family="e")]
    )
    assert clear.arm == "ngram_k4" and clear.saving_pct == pytest.approx(100 * (1 - 1 / 1.2))
    assert "(pays after correcting for 3 candidates: [1.12, 1.29])" in clear.text()


def test_a_slower_arm_that_pays_is_recommended_over_a_faster_one_that_does_not() -> None:
    """The verdict's decision over all the arms: the fastest (1.5x) is too noisy held over the two
    arms; the slower (1.2x) pays, so it is the one deployed."""
    (rec,) = recommend([obs(1.5, log_se=0.3, model_arms=3), obs(1.2, arm="ngram_k2", k=2, model_arms=3)])
    assert rec.arm == "ngram_k2" and rec.best_arm == "ngram_k2" and rec.decided


def test_recommendation_without_an_interval_is_unverified_and_never_deploys() -> None:
    (rec,) = recommend([obs(1.4, log_se=None), obs(1.1, arm="ngram_k2", k=2, log_se=None)])
    assert rec.arm is None and rec.selected.verdict == "unverified" and not rec.decided  # type: ignore[union-attr]
    assert "unverified, not deployed" in rec.text()


def test_a_losing_best_arm_is_a_decided_no_speculation() -> None:
    (rec,) = recommend([obs(0.8), obs(0.7, arm="ngram_k2", k=2)])
    assert rec.arm is None and rec.decided and rec.status() == "loses"


# ---- flips ---------------------------------------------------------------------------------


def test_flips_between_points_that_differ_in_one_axis() -> None:
    bf16 = [obs(1.8, k=4, arm="ngram_k4"), obs(1.2, k=2, arm="ngram_k2")]
    fp32 = [
        obs(0.9, k=4, arm="ngram_k4", point="p1", axes=DTYPE_FP32),
        obs(0.8, k=2, arm="ngram_k2", point="p1", axes=DTYPE_FP32),
    ]
    found = flips(bf16 + fp32)
    assert sorted(f.what for f in found) == ["recommendation", "sign", "sign"]  # best K stays K=4
    rec = next(f for f in found if f.what == "recommendation")
    assert rec.axis == "target.dtype" and rec.values == ("bfloat16", "float32")
    assert "flips from ngram_k4" in rec.text and "to no speculation" in rec.text and "; loses)" in rec.text


def test_no_recommendation_flip_from_an_undecided_side() -> None:
    # fp32's best arm is 0.99x [0.94, 1.05]: not "no speculation" decided, so nothing flips
    bf16 = [obs(1.8, k=4, arm="ngram_k4")]
    fp32 = [obs(0.99, k=4, arm="ngram_k4", point="p1", axes=DTYPE_FP32)]
    assert flips(bf16 + fp32) == []
    # one start-up on both sides, 1.04x and 0.96x: nothing is decided, nothing flips
    a = [obs(1.04, log_se=None)]
    b = [obs(0.96, point="p1", axes=DTYPE_FP32, log_se=None)]
    assert flips(a + b) == []


def test_no_flip_where_both_sides_are_decided_but_one_truth_fits_both() -> None:
    # "pays" at 1.018x [1.003, 1.033] and "within 3%" at 1.00x [0.974, 1.026]: both decided, and
    # a true 1.01x fits both sides (their ratio's interval holds 1): no flip
    pays = [obs(1.018, log_se=0.007, df=20)]
    equivalent = [obs(1.0, point="p1", axes=DTYPE_FP32, log_se=0.0125, df=20)]
    assert (estimate(pays[0]).verdict, estimate(equivalent[0]).verdict) == ("pays", "equivalent")
    assert flips(pays + equivalent) == []
    # the same two sides told apart (1.30x against 1.00x): the recommendation flips
    apart = [obs(1.3, log_se=0.008, df=20)]
    assert [f.what for f in flips(apart + equivalent)] == ["recommendation"]


def test_best_k_flips_only_between_singleton_sets() -> None:
    a = [obs(1.5, k=4, arm="k4"), obs(1.2, k=2, arm="k2")]
    b = [
        obs(1.2, k=4, arm="k4", point="p1", axes=DTYPE_FP32),
        obs(1.5, k=2, arm="k2", point="p1", axes=DTYPE_FP32),
    ]
    two_axes = (("target.dtype", "float32"), ("engine.enforce_eager", True))
    c = [
        obs(1.2, k=4, arm="k4", point="p2", axes=two_axes),
        obs(1.5, k=2, arm="k2", point="p2", axes=two_axes),
    ]
    found = [f for f in flips(a + b + c) if f.what == "best_k"]
    assert len(found) == 1 and found[0].points == ("p0", "p1")  # p2 differs from p0 in two axes
    assert "best K flips from K=4" in found[0].text and "to K=2" in found[0].text
    # at fp32 K=2 leads K=4 by only 2 se (tied): no flip
    close = [
        obs(1.5 * math.exp(-0.04), k=4, arm="k4", point="p1", axes=DTYPE_FP32),
        obs(1.5, k=2, arm="k2", point="p1", axes=DTYPE_FP32),
    ]
    assert [f for f in flips(a + close) if f.what == "best_k"] == []


def test_a_different_k_of_the_same_method_is_not_a_recommendation_flip() -> None:
    bf16 = [obs(1.33, k=8, arm="ngram_k8"), obs(1.29, k=4, arm="ngram_k4")]
    fp32 = [
        obs(1.21, k=4, arm="ngram_k4", point="p1", axes=DTYPE_FP32),
        obs(1.209, k=8, arm="ngram_k8", point="p1", axes=DTYPE_FP32),
    ]
    found = flips(bf16 + fp32)
    assert all(f.what != "recommendation" for f in found)
    assert not [f for f in found if f.what == "best_k"]  # K=4 at fp32 cannot be told from K=8


def test_a_point_without_a_speculative_arm_measured_flips_nothing() -> None:
    baseline_only = obs(1.0, arm="baseline", k=None, family="baseline", method="baseline", point="p1")
    found = flips([obs(1.8), Observation(**{**baseline_only.__dict__, "axes": DTYPE_FP32})])
    assert found == []
