"""The step cost model (harness.derive.cost_model) on a real recorded run, and its pure parts.

The fixture is a real run of regimes/cpu_cost_model.yaml on the CPU engine (ngram K = 1, 2, 4, 8
and a self-draft K = 3, three start-ups each, concurrency 1 and 4; its server logs left out): each
number below is recomputed here from its raw windows, never copied from the code under test.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from scipy.optimize import curve_fit

from harness.config.level import LoadLevel
from harness.core.probes.acceptance import length_histogram
from harness.derive.analysis import analyze
from harness.derive.ceiling import decode_ceiling, floor_step_ms
from harness.derive.cost_model import (
    CostModel,
    StepCost,
    break_even_tau,
    cost_line,
    cost_model,
    proposing_share,
    token_share,
    tokens_per_request_step,
)
from harness.derive.frames import export, load_run
from harness.derive.summary import summarize
from harness.results.raw import read_raw

RUN = Path(__file__).parent / "fixtures" / "run_v14_cost_model"


@pytest.fixture(scope="module")
def summary():
    return summarize(read_raw(RUN))


@pytest.fixture(scope="module")
def model(summary) -> CostModel:
    return cost_model(summary)


def _windows(arm: str) -> list[dict]:
    return [json.loads(line) for line in (RUN / "arms" / arm / "windows.jsonl").read_text().splitlines()]


def _startup_steps_per_s(arm: str, concurrency: int) -> dict[int, float]:
    """Each start-up's engine steps per second, from the window's own scrapes."""
    found = {}
    for w in _windows(arm):
        if w["concurrency"] == concurrency:
            steps = w["counters_after"]["engine_steps"] - w["counters_before"]["engine_steps"]
            found[w["server_start"]] = steps / w["duration_s"]
    return found


def test_every_speculative_cell_has_a_measured_step_cost_with_an_interval(summary, model) -> None:
    speculative = [c for c in summary.cells if c.arm != summary.baseline_arm]
    assert len(model.costs) == len(speculative) == 10
    for cost in model.costs:
        assert cost.low is not None and cost.high is not None and cost.low < cost.cost < cost.high
        assert cost.df >= 1


def test_the_step_cost_is_the_geometric_mean_of_the_start_ups_step_ratios(model) -> None:
    """Recomputed from windows.jsonl: per start-up, the baseline's steps per second over the arm's."""
    for cost in model.costs:
        arm, base = (_startup_steps_per_s(a, cost.level.concurrency) for a in (cost.arm, "baseline"))
        ratios = [base[s] / arm[s] for s in sorted(arm)]
        assert cost.cost == pytest.approx(math.prod(ratios) ** (1 / len(ratios)), rel=1e-9)


def test_the_speedup_is_yield_over_step_cost(summary, model) -> None:
    """The decomposition the break-even rests on: tok/s ratio = tokens-per-step ratio / step cost,
    up to the difference between a pooled ratio and a geometric mean over start-ups."""
    for cost in model.costs:
        cell = summary.cell(cost.arm, cost.workload, cost.level)
        assert cell.speedup == pytest.approx(cost.yield_per_step / cost.cost, rel=0.03), cost.label


def test_the_self_draft_is_the_known_answer(model) -> None:
    """The target drafting for itself: every draft accepted (tau = K + 1 = 4, proposed at every
    step) and each step runs K + 1 target forwards, so it costs about 4 baseline steps."""
    for cost in (c for c in model.costs if c.arm == "self_draft_k3"):
        assert cost.tau == pytest.approx(4.0)
        assert cost.proposing_share == pytest.approx(1.0)
        assert 3.0 < cost.cost < 8.0


def test_break_even_pays_exactly_where_the_yield_meets_the_cost() -> None:
    for cost, share, occupancy in ((1.3, 1.0, 1.0), (1.1, 0.35, 0.99), (2.5, 0.6, 0.8)):
        tau = break_even_tau(cost, share, occupancy)
        assert occupancy * (1 + share * (tau - 1)) == pytest.approx(cost)
    assert break_even_tau(0.9, 1.0) == 1.0  # a step cheaper than the baseline's pays at any acceptance


def test_the_outcome_compares_the_measured_tau_with_the_break_even_interval(model) -> None:
    for cost in model.costs:
        if cost.tau > cost.break_even_high:
            assert cost.outcome == "clears it"
        elif cost.tau < cost.break_even_low:
            assert cost.outcome == "falls short"
        else:
            assert cost.outcome == "too close to tell"


def test_the_proposing_share_is_drafts_per_request_step(summary) -> None:
    cell = summary.cell("ngram_k4", "code_humaneval", 1)
    steps = cell.output_tokens - cell.requests_ok - cell.accepted_tokens
    assert proposing_share(cell) == pytest.approx(cell.drafts / steps)
    assert 0 < proposing_share(cell) < 1  # ngram finds no match at some steps


def _point(k: int, cost: float, se: float) -> StepCost:
    return StepCost(
        arm=f"a{k}", method="ngram", k=k, drafter=None, workload="w", level=LoadLevel(1), step_ms=1.0,
        baseline_step_ms=1.0, cost=cost, low=None, high=None, log_se=se / cost, df=5, tau=None,
        tokens_per_step=None, proposing_share=None, yield_per_step=1.0, occupancy=None,
        break_even_tau=None, break_even_low=None, break_even_high=None, outcome="unverified",
    )  # fmt: skip


def test_the_line_over_k_is_scipys_weighted_least_squares() -> None:
    points = [_point(1, 1.10, 0.02), _point(2, 1.14, 0.03), _point(4, 1.25, 0.02), _point(8, 1.49, 0.05)]
    line = cost_line(points)
    ks, cs, ses = [1, 2, 4, 8], [p.cost for p in points], [0.02, 0.03, 0.02, 0.05]
    (a, b), pcov = curve_fit(lambda k, a, b: a + b * k, ks, cs, sigma=ses, absolute_sigma=True)
    assert (line.intercept, line.slope) == pytest.approx((a, b))
    chi2 = sum(((c - a - b * k) / s) ** 2 for k, c, s in zip(ks, cs, ses, strict=True))
    scale = max(1.0, chi2 / 2)
    assert line.cov == pytest.approx((pcov[0][0] * scale, pcov[0][1] * scale, pcov[1][1] * scale))


def test_a_line_through_two_points_carries_both_points_errors() -> None:
    line = cost_line([_point(2, 1.1, 0.03), _point(8, 1.4, 0.06)])
    assert line.at(2)[0] == pytest.approx(1.1) and line.at(8)[0] == pytest.approx(1.4)
    assert line.at(2)[1] == pytest.approx(0.03) and line.at(8)[1] == pytest.approx(0.06)
    assert line.at(5)[1] < 0.06  # between the two, the line is known better than at its ends


def test_predictions_come_from_the_largest_k_and_only_downwards(model) -> None:
    assert model.predictions, "ngram ran four K values: K 1-7 are predicted from K = 8"
    for p in model.predictions:
        assert p.source == "ngram_k8" and 1 <= p.k < 8
    ran = {(p.k, p.level.concurrency) for p in model.checks()}
    assert ran == {(k, c) for k in (1, 2, 4) for c in (1, 4)}
    assert all(p.leave_one_out for p in model.checks())  # a check never fits the arm it checks
    assert not any(p.method == "draft_model" for p in model.predictions)  # one K: no line over K


def test_a_predicted_tau_is_the_sum_of_the_sources_first_marginals(summary, model) -> None:
    for p in model.predictions:
        source = summary.cell(p.source, p.workload, p.level)
        assert p.tau == pytest.approx(1 + sum(source.per_position_acceptance[: p.k]))


def test_a_block_drafter_is_never_extrapolated(summary) -> None:
    cells = [c.model_copy(update={"method": "dflash"}) if c.method == "ngram" else c for c in summary.cells]
    as_dflash = summary.model_copy(update={"cells": cells})
    assert cost_model(as_dflash).predictions == ()
    assert cost_model(as_dflash).lines  # its cost over K is still measured


def test_the_analysis_carries_the_cost_model_and_the_findings_use_it(summary) -> None:
    analysis = analyze(summary)
    assert analysis.cost == cost_model(summary)
    measured = [f for f in analysis.findings if f.kind in ("step_cost", "verification_limit")]
    assert measured and all(f["measured"] for f in measured)


def test_the_decode_floor_is_the_recorded_bytes_over_the_recorded_bandwidth(summary) -> None:
    ceiling = decode_ceiling(summary)
    recorded = json.loads((RUN / "environment.json").read_text())["decode_floor"]
    assert ceiling.weight_bytes == recorded["footprint"]["weight_bytes"]
    assert ceiling.floor_ms == pytest.approx(
        floor_step_ms(
            recorded["footprint"]["weight_bytes"],
            recorded["footprint"]["kv_bytes_per_token"],
            ceiling.context_tokens,
            recorded["bandwidth"]["gb_s"],
        )
    )
    assert ceiling.baseline_step_ms > ceiling.floor_ms  # no real step beats the floor
    assert {a.arm for a in ceiling.arms} == {"ngram_k1", "ngram_k2", "ngram_k4", "ngram_k8", "self_draft_k3"}


def test_the_exported_profile_speaks_specdec_benchs_terms(tmp_path: Path) -> None:
    export(load_run(RUN), tmp_path)
    profile = json.loads((tmp_path / "speculation_profile.json").read_text())
    cells = {(c["arm"], c["load"]): c for c in profile["cells"]}
    k8 = cells[("ngram_k8", "concurrency 1")]
    spec = k8["specdec_bench"]
    assert spec["Average_AR"] == k8["tau"]
    assert sum(spec["Acceptance_Length_Histogram"].values()) == pytest.approx(k8["drafts"])
    # a step emitting at least two tokens accepted its first draft: the marginal at position 0
    assert spec["Conditional_Acceptance_Rate"]["2"] == pytest.approx(k8["marginal_acceptance"][0])
    assert k8["extrapolable_down_in_k"] and k8["checks"]["al_is_one_plus_sum_of_marginals_and_non_increasing"]
    mean = sum(int(n) * v for n, v in spec["Acceptance_Length_Histogram"].items()) / k8["drafts"]
    assert mean == pytest.approx(k8["tau"])  # the histogram's mean length is tau


def test_the_length_histogram_follows_the_marginals() -> None:
    assert length_histogram([0.5, 0.25], 8) == {1: 4.0, 2: 2.0, 3: 2.0}


def test_the_break_even_outcome_is_the_yield_against_the_cost_interval(model) -> None:
    """The docs' rule, independent of tau's bookkeeping: the step pays where Y > c, so the measured
    tau clears its break-even exactly where Y exceeds c's upper bound, and falls short where Y is
    below c's lower bound (drafts accepted past a request's stop are in tau, never in Y)."""
    for cost in model.costs:
        if cost.yield_per_step > cost.high:
            assert cost.outcome == "clears it", cost.label
        elif cost.yield_per_step < cost.low:
            assert cost.outcome == "falls short", cost.label
        else:
            assert cost.outcome == "too close to tell", cost.label


def test_the_yield_model_reproduces_the_measured_yield_at_the_measured_tau(model) -> None:
    """o (1 + p (tau - 1)) = Y at the arm's own tau: a prediction from an arm at its own K would
    give back the arm's own Y / c."""
    for cost in model.costs:
        modelled = cost.occupancy * (1 + cost.proposing_share * (cost.tau - 1))
        assert modelled == pytest.approx(cost.yield_per_step, rel=1e-12), cost.label


def test_a_window_whose_baseline_output_nothing_has_no_step_cost(summary) -> None:
    """Every baseline request failed, though its engine stepped: no yield to compare, not a crash."""
    cells = [
        c.model_copy(update={"output_tokens": 0, "requests_ok": 0})
        if c.arm == summary.baseline_arm and c.level.concurrency == 4
        else c
        for c in summary.cells
    ]
    costs = cost_model(summary.model_copy(update={"cells": cells})).costs
    assert costs and all(c.level.concurrency == 1 for c in costs)


def test_the_token_share_gives_back_the_step_share_at_the_measured_tau() -> None:
    """s = p tau / (1 + p (tau - 1)) and back: at the arm's own tau the prediction's tokens per
    request step are 1 + p (tau - 1); with fewer tokens a proposing step, the same copied text takes
    more steps, so the share of steps that propose rises (as ngram's does at a smaller K)."""
    for p, tau in ((0.23, 3.75), (1.0, 4.0), (0.35, 1.77)):
        assert tokens_per_request_step(token_share(p, tau), tau) == pytest.approx(1 + p * (tau - 1))
    s = token_share(0.23, 3.75)
    fewer = 1.7
    per_step = tokens_per_request_step(s, fewer)
    steps_share = (s / fewer) * per_step  # proposing steps per request step
    assert steps_share > 0.23


def test_the_predictions_are_within_ten_percent_of_the_k_values_that_ran(model) -> None:
    """What the docs report of the recorded run: every check consistent, each prediction within
    10% of the speedup measured at its K."""
    checks = model.checks()
    assert len(checks) == 6 and all(p.inside for p in checks)
    for p in checks:
        assert p.speedup == pytest.approx(p.measured_speedup, rel=0.10), (p.k, p.level)


def test_the_floor_says_when_an_untied_input_embedding_was_left_out(summary) -> None:
    from harness.present.cost_text import ceiling_lines

    floor = summary.decode_floor
    footprint = floor.footprint.model_copy(update={"unread_embedding": 7})
    untied = floor.model_copy(update={"footprint": footprint})
    said = ceiling_lines(decode_ceiling(summary.model_copy(update={"decode_floor": untied})))[0]
    assert "untied input embedding" in said
    assert "untied" not in ceiling_lines(decode_ceiling(summary))[0]
