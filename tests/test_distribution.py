"""The distribution check that replaces greedy exactness at temperature > 0
(harness.core.probes.distribution):
the statistics, the tests and verdicts on constructed samples (including the lossy case it must
catch), and the whole path through a stored run: summary, terminal lines, report."""

from __future__ import annotations

import json
import random
import shutil
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.config.regime import load_regime
from harness.core.errors import UserError
from harness.core.probes.distribution import SequenceStats, compare, sequence_stats, tost_z, verdict
from harness.core.stats import mann_whitney_two_sided, stratified_cliffs_delta
from harness.derive.analysis import analyze
from harness.derive.summary import summarize
from harness.present.table import answer_lines
from harness.present.verdict_text import distribution_lines
from harness.results import RequestRecord
from harness.run.client import parse_top_logprobs

GOLDEN = Path(__file__).parent / "fixtures" / "run_v1"


def test_two_sided_test_and_effect_size() -> None:
    low, high = [1.0, 2.0, 3.0, 4.0, 5.0] * 6, [6.0, 7.0, 8.0, 9.0, 10.0] * 6
    p, delta = mann_whitney_two_sided(high, low)
    assert p < 1e-6 and delta == 1.0  # every value of the first above every value of the second
    assert mann_whitney_two_sided(low, high)[1] == -1.0
    same_p, same_delta = mann_whitney_two_sided(low, list(low))
    assert same_p == pytest.approx(1.0, abs=0.05) and same_delta == 0.0


def _sample(tokens: list[int], positions: list[list[tuple[int, float]]]) -> RequestRecord:
    return RequestRecord(
        workload="w",
        prompt_id="p",
        concurrency=4,
        prompt_format="raw",
        t_send=0.0,
        t_first_token=0.1,
        t_done=1.0,
        token_ids=tokens,
        top_logprobs=positions,
    )


def test_sequence_statistics_from_the_sampled_tokens_logprobs() -> None:
    # position 1: the top-1 token sampled; position 2: a less likely one (its logprob listed beside the top-1)
    stats = sequence_stats(_sample([5, 9], [[(5, -0.1)], [(7, -0.5), (9, -2.5)]]))
    assert stats.mean_logprob == pytest.approx(-1.3) and stats.top1_share == 0.5 and stats.output_tokens == 2
    assert sequence_stats(_sample([5], [])).mean_logprob is None  # no logprobs returned: no statistic


def _brute_cliff(first: list[float], second: list[float]) -> tuple[float, float]:
    """Cliff's delta and his unbiased variance from the whole dominance matrix (the textbook recipe)."""
    n, m = len(first), len(second)
    signs = [[(x > y) - (x < y) for y in second] for x in first]
    d = sum(map(sum, signs)) / (n * m)
    rows = [sum(row) / m for row in signs]
    columns = [sum(signs[i][j] for i in range(n)) / n for j in range(m)]
    cells = sum((signs[i][j] - d) ** 2 for i in range(n) for j in range(m))
    spread = m * m * sum((r - d) ** 2 for r in rows) + n * n * sum((c - d) ** 2 for c in columns)
    return d, (spread - cells) / (n * m * (n - 1) * (m - 1))


def test_cliffs_delta_variance_is_cliffs_unbiased_estimator() -> None:
    first, second = [1.0, 2.0, 2.0, 3.0, 5.0, 5.0, 7.0], [2.0, 2.0, 4.0, 5.0, 6.0]  # ties across and within
    found = stratified_cliffs_delta([(first, second)])
    expected = _brute_cliff(first, second)
    assert found is not None and (found.delta, found.variance) == pytest.approx(expected)
    assert expected == pytest.approx((-3 / 35, 0.116871), abs=1e-6)  # -5 - 3 - 3 - 1 + 2 + 2 + 5 of 35 pairs
    # unbiased: over repeated 6 x 6 draws its mean is the variance the deltas actually have
    rng = random.Random(11)
    draws = [
        stratified_cliffs_delta(
            [([rng.gauss(0.3, 1) for _ in range(6)], [rng.gauss(0, 1) for _ in range(6)])]
        )
        for _ in range(3000)
    ]
    deltas = [d.delta for d in draws if d]
    mean_delta = sum(deltas) / len(deltas)
    spread = sum((d - mean_delta) ** 2 for d in deltas) / (len(deltas) - 1)
    assert sum(d.variance for d in draws if d) / len(deltas) == pytest.approx(spread, rel=0.06)


def test_strata_weigh_by_their_pairs_and_ties_keep_a_floor() -> None:
    # stratum 1: 2 x 2, first above second (delta 1, no variance); stratum 2: 4 x 4 all tied (delta 0)
    found = stratified_cliffs_delta([([5.0, 6.0], [1.0, 2.0]), ([3.0] * 4, [3.0] * 4), ([9.0], [1.0, 2.0])])
    assert found is not None and found.strata == 2  # a stratum with one value a side is left out
    assert found.delta == pytest.approx(4 / 20 * 1 + 16 / 20 * 0)
    # Cliff's unbiased estimate is 0 in both; the floor (1 - d^2) / (nm - 1), combined, holds it up
    assert found.variance == pytest.approx((16 / 20) ** 2 / 15)
    assert (found.first_n, found.second_n) == (6, 6)
    assert stratified_cliffs_delta([([1.0], [2.0, 3.0])]) is None


SETTINGS = {"alpha": 0.01, "margin": 0.2}
RULES = {**SETTINGS, "min_effect": 0.2, "min_samples": 30}


def _prompted(seed: int, prompts: int, per_prompt: int, logprob_shift: float = 0.0) -> list[SequenceStats]:
    """Seeded sequences of ``prompts`` prompts, each with its own centre (prompts differ more than arms)."""
    rng = random.Random(seed)
    return [
        SequenceStats(
            rng.gauss(-0.6 - 0.15 * prompt + logprob_shift, 0.3),
            float(rng.choice([40 + 4 * prompt, 64, 64])),
            min(1.0, max(0.0, rng.gauss(0.9 + 0.01 * prompt, 0.05))),
            ("w", f"p{prompt}"),
        )
        for prompt in range(prompts)
        for _ in range(per_prompt)
    ]


def test_many_samples_of_one_distribution_show_equivalence() -> None:
    baseline, arm = _prompted(0, 20, 30), _prompted(1, 20, 30)
    tests = compare(baseline, arm, **SETTINGS)
    assert verdict(tests, **RULES).text() == "consistent with lossless"
    logprob = tests[0]
    assert (logprob.statistic, logprob.n_baseline, logprob.n_arm, logprob.prompts) == (
        "mean_logprob",
        600,
        600,
        20,
    )
    # the 1 - 2 alpha / 3 interval, inside (-0.2, 0.2) for every statistic
    assert (logprob.delta, logprob.low, logprob.high) == pytest.approx((-0.0546, -0.1459, 0.0368), abs=1e-4)
    assert all(t.low > -0.2 and t.high < 0.2 for t in tests)
    # delta +- z se, se from the prompts' strata (arm first: delta is arm against baseline)
    strata = [
        (
            [v for s in arm if s.stratum == key and (v := s.mean_logprob) is not None],
            [v for s in baseline if s.stratum == key and (v := s.mean_logprob) is not None],
        )
        for key in sorted({s.stratum for s in baseline})
    ]
    estimate = stratified_cliffs_delta(strata)
    assert estimate is not None and estimate.delta == pytest.approx(logprob.delta)
    assert logprob.high - logprob.delta == pytest.approx(tost_z(0.01) * estimate.se)
    assert tost_z(0.01) == pytest.approx(2.7131, abs=1e-4)  # one-sided at 0.01 / 3 each way


def test_few_samples_are_inconclusive_and_say_how_many_would_decide() -> None:
    tests = compare(_prompted(0, 8, 6), _prompted(1, 8, 6), **SETTINGS)
    decision = verdict(tests, **RULES)
    assert decision.outcome == "inconclusive"
    # not shown to be within the margin; nothing significant either
    assert all(t.p_value > 0.01 / 3 for t in tests) and not all(t.equivalent(0.2) for t in tests)
    # mean logprob decides: delta -0.118, half-width 0.329, room 0.082: (0.329 / 0.082)^2 x 48 a side
    logprob = tests[0]
    assert (logprob.delta, logprob.high - logprob.delta) == pytest.approx((-0.1181, 0.3293), abs=1e-4)
    assert logprob.needed_per_side == 776 == max(t.needed_per_side for t in tests)
    assert decision.more_per_side == 776 - 48 and decision.samples_per_prompt(6) == 97
    assert decision.text() == "inconclusive: about 728 more samples per side would decide it"


def test_a_clear_shift_within_prompts_is_shifted() -> None:
    tests = compare(_prompted(0, 8, 6), _prompted(2, 8, 6, logprob_shift=-0.3), **SETTINGS)
    assert verdict(tests, **RULES).text() == "shifted"
    logprob = tests[0]
    assert logprob.delta == pytest.approx(-0.625, abs=1e-4) and logprob.p_value < 1e-10
    assert (
        logprob.arm_median < logprob.baseline_median and logprob.needed_per_side is None
    )  # beyond the margin


def test_a_delta_at_the_margin_without_significance_cannot_be_decided() -> None:
    tests = compare(_prompted(0, 2, 6), _prompted(6, 2, 6, logprob_shift=-0.1), **SETTINGS)
    logprob = tests[0]
    assert logprob.delta == pytest.approx(-0.3056, abs=1e-4) and logprob.p_value > 0.2
    assert verdict(tests, **RULES).text() == "inconclusive: cannot decide at this margin"
    # significant but below min_effect: neither shifted nor (at this margin) consistent
    assert verdict(tests, alpha=0.9, margin=0.2, min_effect=0.5, min_samples=2).outcome == "inconclusive"


def test_one_sample_per_prompt_cannot_be_compared_within_prompts() -> None:
    tests = compare(_prompted(0, 40, 1), _prompted(1, 40, 1), **SETTINGS)
    assert [(t.delta, t.prompts, t.n_arm) for t in tests] == [(None, 0, 0)] * 3
    assert verdict(tests, **RULES).text() == "inconclusive: too few samples per prompt"


def _two_prompts(seed: int, counts: tuple[int, int]) -> list[SequenceStats]:
    """Prompt a answers short, likely and mostly top-1; prompt b long, unlikely and often not."""
    rng = random.Random(seed)
    kinds = (("a", -0.5, 40.0, 0.9), ("b", -2.0, 200.0, 0.5))
    return [
        SequenceStats(rng.gauss(centre, 0.3), rng.gauss(length, 5.0), rng.gauss(top1, 0.05), ("w", prompt))
        for (prompt, centre, length, top1), n in zip(kinds, counts, strict=True)
        for _ in range(n)
    ]


def test_stratified_and_pooled_disagree_when_prompts_differ() -> None:
    """Same distribution per prompt, but the arm kept fewer of prompt b's samples (failures): pooled, its
    sequences look likelier, shorter and more top-1 (Simpson); within prompts nothing moved."""
    baseline, arm = _two_prompts(0, (300, 300)), _two_prompts(1, (300, 60))
    stratified = compare(baseline, arm, **SETTINGS)
    assert verdict(stratified, **RULES).text() == "consistent with lossless"
    assert [round(t.delta, 4) for t in stratified] == [-0.0251, 0.018, 0.0203]
    pooled = compare(
        [replace(s, stratum=()) for s in baseline], [replace(s, stratum=()) for s in arm], **SETTINGS
    )
    assert verdict(pooled, **RULES).text() == "shifted"
    assert [round(t.delta, 4) for t in pooled] == [0.3203, -0.3243, 0.3435] and pooled[0].prompts == 1


def test_chat_logprobs_keep_the_sampled_token_outside_the_top_k() -> None:
    chunk = {
        "content": [
            {
                "token": "token_id:9",
                "logprob": -2.5,
                "top_logprobs": [{"token": "token_id:7", "logprob": -0.5}],
            }
        ]
    }
    assert parse_top_logprobs(chunk) == [[(7, -0.5), (9, -2.5)]]
    top = {
        "content": [
            {
                "token": "token_id:7",
                "logprob": -0.5,
                "top_logprobs": [{"token": "token_id:7", "logprob": -0.5}],
            }
        ]
    }
    assert parse_top_logprobs(top) == [[(7, -0.5)]]  # sampled = top-1: listed once


def _sampled_run(tmp_path: Path, shift: float, seeds: int = 6) -> Path:
    """The stored fixture as if sampled at temperature 0.7: distribution samples for both arms."""
    run = tmp_path / f"run{shift}_{seeds}"
    shutil.copytree(GOLDEN, run)
    record = json.loads((run / "regime.json").read_text())
    record["regime"]["sampling"]["temperature"] = 0.7
    if seeds != 6:
        record["regime"]["distribution_check"] = {"samples_per_prompt": seeds}
    (run / "regime.json").write_text(json.dumps(record))
    rng = random.Random(5)
    for arm, offset in (("baseline", 0.0), ("ngram_k4", shift)):
        lines = []
        for prompt in range(8):
            for seed in range(seeds):
                tokens = [rng.randrange(100) for _ in range(32)]
                positions = [[(t, min(-0.01, rng.gauss(-1.0 + offset, 0.4)))] for t in tokens]
                sample = replace(_sample(tokens, positions), prompt_id=f"p{prompt}", seed=seed)
                lines.append(json.dumps(sample.to_json()) + "\n")
        (run / "arms" / arm / "distribution.jsonl").write_text("".join(lines))
    return run


def test_a_sampled_run_reports_the_distribution_check(tmp_path: Path) -> None:
    from tests.views import render_report

    summary = summarize(_sampled_run(tmp_path, 0.0))
    assert summary.exactness.applicable is False and summary.distribution is not None
    section = summary.distribution
    assert section.margin == 0.2 and section.confidence == pytest.approx(1 - 0.02 / 3)
    found = section.arms["ngram_k4"]
    # 48 sequences a side over 8 prompts: the same distribution, but not shown to be within 0.2
    assert found.verdict == "inconclusive: about 113 more samples per side would decide it"
    assert found.outcome == "inconclusive" and found.more_samples_per_side == 113
    assert found.samples_per_prompt_needed == 21
    logprob = found.tests[0]
    assert (logprob.prompts, logprob.n_arm, logprob.needed_per_side) == (8, 48, 161)
    text = " ".join(" ".join(answer_lines(analyze(summary))).split())  # wrapped to the terminal: joined again
    assert "Distribution check (6 seeded samples per prompt per arm" in text
    assert "99.3% interval inside +-0.2" in text
    assert (
        f"ngram_k4: {found.verdict}: mean logprob" in text
        and f"(delta {logprob.delta:+.2f} [{logprob.low:+.2f}, {logprob.high:+.2f}], p " in text
        and "; i.e. samples_per_prompt: 21" in text
        and "output distribution inconclusive: about 113 more samples per side would decide it" in text
    )
    # the N it named, measured: 24 samples per prompt a side decide it
    enough = summarize(_sampled_run(tmp_path, 0.0, seeds=24)).distribution
    assert enough is not None and enough.arms["ngram_k4"].verdict == "consistent with lossless"
    shifted = _sampled_run(tmp_path, -0.5)
    assert summarize(shifted).distribution.arms["ngram_k4"].verdict == "shifted"
    html = render_report(shifted)
    assert 'id="distribution"' in html and ">shifted<" in html
    assert summarize(GOLDEN).distribution is None  # greedy: exactness, not this check


def test_a_summary_from_before_the_equivalence_test_still_reads() -> None:
    from harness.results.model import DistributionSection

    old = {
        "samples_per_prompt": 6,
        "alpha": 0.01,
        "min_effect": 0.2,
        "min_samples": 30,
        "arms": {
            "ngram_k4": {
                "verdict": "consistent with lossless",
                "tests": [
                    {
                        "statistic": "mean_logprob",
                        "n_baseline": 48,
                        "n_arm": 48,
                        "baseline_median": -1.0,
                        "arm_median": -1.01,
                        "p_value": 0.6,
                        "delta": 0.05,
                    }
                ],
            }
        },
    }
    section = DistributionSection.model_validate(old)
    assert section.margin is None and section.arms["ngram_k4"].tests[0].low is None
    lines = distribution_lines(SimpleNamespace(distribution=section, baseline_arm="baseline"))  # type: ignore[arg-type]
    assert "two-sided Mann-Whitney at 0.01 / 3" in lines[0]
    assert lines[1] == "  ngram_k4: consistent with lossless: mean logprob -1.01 vs -1 (delta +0.05, p 0.6)"
    with pytest.raises(ValueError, match="verdict"):
        DistributionSection.model_validate({**old, "arms": {"x": {"verdict": "lossless", "tests": []}}})


def test_sampling_settings_are_checked(tmp_path: Path) -> None:
    regime = (Path(__file__).parent.parent / "regimes" / "cpu_smoke.yaml").read_text()
    regime = regime.replace("../workloads/", str(Path(__file__).parent.parent / "workloads") + "/")
    greedy_top_p = tmp_path / "a.yaml"
    greedy_top_p.write_text(
        regime.replace("  temperature: 0             # greedy", "  temperature: 0\n  top_p: 0.9")
    )
    with pytest.raises(
        UserError, match="sampling.top_p: top_p and top_k shape sampling: they need temperature > 0"
    ):
        load_regime(greedy_top_p)
    sampled_margin = tmp_path / "b.yaml"
    sampled_margin.write_text(
        regime.replace("  temperature: 0             # greedy", "  temperature: 0.7").replace(
            "cost:\n", "exactness: {near_tie_margin: 0.5}\ncost:\n", 1
        )
    )
    with pytest.raises(UserError, match="exactness.near_tie_margin: a greedy-only setting"):
        load_regime(sampled_margin)


def test_the_margin_is_a_setting_left_out_of_fingerprints_at_its_default() -> None:
    regime = load_regime(Path(__file__).parent.parent / "regimes" / "cpu_production.yaml")
    check = regime.distribution_check
    assert check.samples_per_prompt == 4 and check.equivalence_margin == 0.2
    assert check.unset() == {"equivalence_margin"}  # at its default: regimes keep their fingerprints
    wider = regime.model_copy(
        update={"distribution_check": check.model_copy(update={"equivalence_margin": 0.3})}
    )
    assert wider.fingerprint() != regime.fingerprint()
