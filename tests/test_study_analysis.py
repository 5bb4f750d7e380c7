"""The study analysis on constructed data whose right answer is known: a crossing at a known load,
"always pays" and "never pays", a K plateau, a recommendation that needs its interval above 1,
and flips between two points that differ in one axis."""

from __future__ import annotations

import pytest

from harness.study.analysis import Observation, best_k, break_even, crossing, estimate, flips, recommend

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
    repeats: tuple[float, ...] | None = None,
    family: str = "ngram",
    method: str = "ngram",
) -> Observation:
    spread = repeats if repeats is not None else (speedup - 0.01, speedup, speedup + 0.01)
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
        speedup_repeats=tuple(spread),
        tau=2.0,
        output_tok_s=10.0 * speedup,
        usd_per_mtok=1.0 / speedup,
        baseline_usd_per_mtok=1.0,
        identical_pct=100.0,
    )


def test_crossing_is_interpolated_on_log2_concurrency() -> None:
    # 1.5x at 4, 0.5x at 16: halfway in log2 between 2 and 4 -> 2**3 = 8
    found = crossing([1, 4, 16], [1.6, 1.5, 0.5])
    assert found is not None and found[0] == pytest.approx(8.0) and found[1] == "stops_paying"
    assert crossing([1, 2], [0.8, 1.2])[1] == "starts_paying"  # type: ignore[index]
    assert crossing([1, 2, 4], [1.2, 1.1, 1.05]) is None


def test_break_even_at_a_known_load_with_an_interval_around_it() -> None:
    series = [obs(1.5, 4), obs(0.5, 16), obs(1.6, 1)]  # any order
    found = break_even(series)
    assert found.kind == "crosses" and found.concurrency == pytest.approx(8.0)
    assert found.low is not None and found.high is not None and found.low <= 8.0 <= found.high
    assert "stops paying at concurrency 8.0" in found.text()


def test_always_and_never_pays() -> None:
    assert break_even([obs(1.3, 1), obs(1.2, 4), obs(1.1, 16)]).kind == "always_pays"
    never = break_even([obs(0.9, 1), obs(0.8, 4)])
    assert never.kind == "never_pays" and never.text() == "never pays at the levels measured (1-4)"


def test_a_noisy_crossing_has_an_open_ended_interval() -> None:
    # each level's repeats straddle 1: resamples often do not cross at all
    series = [obs(1.02, 1, repeats=(0.8, 1.25)), obs(0.98, 2, repeats=(0.75, 1.2))]
    found = break_even(series)
    assert found.kind == "crosses" and found.high is None


def test_best_k_finds_the_plateau() -> None:
    # K=4 and K=6 are the same within noise; K=2 is clearly slower
    group = [
        obs(1.20, k=2, arm="ngram_k2"),
        obs(1.50, k=4, arm="ngram_k4", repeats=(1.45, 1.5, 1.55)),
        obs(1.49, k=6, arm="ngram_k6", repeats=(1.44, 1.49, 1.54)),
    ]
    (found,) = best_k(group)
    assert found.k == 4 and found.tied == (6,) and [k for k, _ in found.by_k] == [2, 4, 6]


def test_best_k_with_one_repeat_makes_no_claim() -> None:
    group = [obs(1.2, k=2, arm="a", repeats=(1.2,)), obs(1.5, k=4, arm="b", repeats=(1.5,))]
    (found,) = best_k(group)
    assert found.k == 4 and found.tied is None and "cannot tell" in found.text()


def test_recommendation_needs_the_interval_above_one() -> None:
    clear = obs(1.30, repeats=(1.28, 1.30, 1.32))
    noisy = obs(
        1.05, arm="eagle", family="eagle", method="eagle3", k=3, repeats=(0.8, 1.05, 1.3), concurrency=4
    )
    loses = obs(0.7, concurrency=16)
    recs = {r.concurrency: r for r in recommend([clear, noisy, loses])}
    assert recs[1].arm == "ngram_k4" and recs[1].saving_pct == pytest.approx(100 * (1 - 1 / 1.3))
    assert (
        recs[4].arm is None and recs[4].best_arm == "eagle" and recs[4].speedup.verdict == "indistinguishable"
    )
    assert recs[16].arm is None and recs[16].speedup.verdict == "loses"
    assert "no speculation" in recs[16].text()


def test_flips_between_points_that_differ_in_one_axis() -> None:
    bf16 = [obs(1.8, k=4, arm="ngram_k4"), obs(1.2, k=2, arm="ngram_k2")]
    fp32 = [
        obs(0.9, k=4, arm="ngram_k4", point="p1", axes=DTYPE_FP32),
        obs(1.0 - 0.05, k=2, arm="ngram_k2", point="p1", axes=DTYPE_FP32),
    ]
    found = flips(bf16 + fp32)
    kinds = sorted(f.what for f in found)
    assert kinds == ["best_k", "recommendation", "sign", "sign"]  # fp32: K=2 is the (losing) best
    rec = next(f for f in found if f.what == "recommendation")
    assert rec.axis == "target.dtype" and rec.values == ("bfloat16", "float32")
    assert "flips from ngram_k4" in rec.text and "to no speculation" in rec.text


def test_best_k_flip_and_no_flip_across_two_axes() -> None:
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


def test_estimate_without_repeats_says_so() -> None:
    single = estimate(obs(1.2, repeats=(1.2,)))
    assert single.low is None and single.verdict == "pays" and "no interval" in single.text()


def test_a_different_k_of_the_same_method_is_not_a_recommendation_flip() -> None:
    # bf16 deploys ngram K=8, fp32 ngram K=4, and at fp32 the two K are tied: no flip at all
    bf16 = [obs(1.33, k=8, arm="ngram_k8"), obs(1.29, k=4, arm="ngram_k4", repeats=(1.28, 1.29, 1.30))]
    fp32 = [
        obs(1.21, k=4, arm="ngram_k4", point="p1", axes=DTYPE_FP32),
        obs(1.209, k=8, arm="ngram_k8", point="p1", axes=DTYPE_FP32, repeats=(1.199, 1.209, 1.219)),
    ]
    found = flips(bf16 + fp32)
    assert all(f.what != "recommendation" for f in found)
    assert not [f for f in found if f.what == "best_k"]  # K=4 at fp32 cannot be told from K=8


def test_a_point_without_a_speculative_arm_measured_flips_nothing() -> None:
    # p1's job died after its baseline: no speculative arm has results there, so there is no
    # recommendation to compare with p0's, only a missing one
    baseline_only = obs(1.0, arm="baseline", k=None, family="baseline", method="baseline", point="p1")
    found = flips([obs(1.8), Observation(**{**baseline_only.__dict__, "axes": DTYPE_FP32})])
    assert found == []
