"""The distribution check that replaces greedy exactness at temperature > 0 (harness.probes.distribution):
the statistics, the tests and verdicts on constructed samples (including the lossy case it must
catch), and the whole path through a stored run: summary, terminal lines, report."""

from __future__ import annotations

import json
import random
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from harness.client import parse_top_logprobs
from harness.errors import UserError
from harness.probes.distribution import SequenceStats, compare, sequence_stats, verdict
from harness.regime import load_regime
from harness.results import RequestRecord
from harness.stats import mann_whitney_two_sided
from harness.summary import summarize
from harness.table import answer_lines

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


def _draws(seed: int, n: int, logprob_shift: float = 0.0) -> list[SequenceStats]:
    rng = random.Random(seed)
    return [
        SequenceStats(
            rng.gauss(-1.2 + logprob_shift, 0.3), float(rng.choice([40, 64, 64, 64])), rng.uniform(0.5, 0.8)
        )
        for _ in range(n)
    ]


def test_verdicts_consistent_shifted_and_inconclusive() -> None:
    baseline = _draws(0, 72)
    settings = {"alpha": 0.01, "min_effect": 0.2, "min_samples": 30}
    assert verdict(compare(baseline, _draws(1, 72)), **settings) == "consistent with lossless"
    # a lossy acceptance rule accepts drafts the target would rarely sample: lower logprobs
    lossy = compare(baseline, _draws(2, 72, logprob_shift=-0.4))
    assert verdict(lossy, **settings) == "shifted"
    test = next(t for t in lossy if t.statistic == "mean_logprob")
    assert test.p_value < 0.001 and test.delta < -0.5 and test.arm_median < test.baseline_median
    assert verdict(compare(baseline[:10], _draws(1, 10)), **settings) == "inconclusive"  # too few to say
    # significant but tiny: not called shifted, not called consistent either
    nudged = compare(_draws(0, 1500), _draws(3, 1500, logprob_shift=-0.05))
    assert verdict(nudged, alpha=0.5, min_effect=0.2, min_samples=30) == "inconclusive"


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


def _sampled_run(tmp_path: Path, shift: float) -> Path:
    """The stored fixture as if sampled at temperature 0.7: distribution samples for both arms."""
    run = tmp_path / f"run{shift}"
    shutil.copytree(GOLDEN, run)
    record = json.loads((run / "regime.json").read_text())
    record["regime"]["sampling"]["temperature"] = 0.7
    (run / "regime.json").write_text(json.dumps(record))
    rng = random.Random(5)
    for arm, offset in (("baseline", 0.0), ("ngram_k4", shift)):
        lines = []
        for prompt in range(8):
            for seed in range(6):
                tokens = [rng.randrange(100) for _ in range(32)]
                positions = [[(t, min(-0.01, rng.gauss(-1.0 + offset, 0.4)))] for t in tokens]
                sample = replace(_sample(tokens, positions), prompt_id=f"p{prompt}", seed=seed)
                lines.append(json.dumps(sample.to_json()) + "\n")
        (run / "arms" / arm / "distribution.jsonl").write_text("".join(lines))
    return run


def test_a_sampled_run_reports_the_distribution_check(tmp_path: Path) -> None:
    from harness.report import render_report

    summary = summarize(_sampled_run(tmp_path, 0.0))
    assert summary.exactness.applicable is False and summary.distribution is not None
    assert summary.distribution.arms["ngram_k4"].verdict == "consistent with lossless"
    text = " ".join(" ".join(answer_lines(summary)).split())  # wrapped to the terminal: joined again
    assert "Distribution check (6 seeded samples per prompt per arm" in text
    assert (
        "ngram_k4: consistent with lossless: mean logprob" in text
        and "output distribution consistent" in text
    )
    shifted = _sampled_run(tmp_path, -0.5)
    assert summarize(shifted).distribution.arms["ngram_k4"].verdict == "shifted"
    html = render_report(shifted)
    assert 'id="distribution"' in html and ">shifted<" in html
    assert summarize(GOLDEN).distribution is None  # greedy: exactness, not this check


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
