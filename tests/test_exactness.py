"""The exactness diff and classifier on hand-made token sequences."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.core.probes.exactness import (
    compare,
    compare_records,
    first_divergence,
    shares,
    text_around,
    top2_margin,
)
from harness.results import RequestRecord
from harness.run.client import parse_top_logprobs

EOS = 2
MARGIN = 0.5


def _lp(*margins: float) -> list[list[float]]:
    """Top-2 logprobs per position with the given top-1 minus top-2 margins."""
    return [[-0.1, -0.1 - m] for m in margins]


def test_identical() -> None:
    assert compare([5, 6, 7, EOS], [5, 6, 7, EOS], _lp(1, 1, 1, 1), MARGIN).status == "identical"
    assert compare([], [], None, MARGIN).status == "identical"


def test_diverge_at_zero_wide_margin_is_diverged() -> None:
    result = compare([5, 6, 7], [9, 6, 7], _lp(3.0, 1, 1), MARGIN)
    assert (result.status, result.position, result.reference_token, result.candidate_token) == (
        "diverged",
        0,
        5,
        9,
    )
    assert result.margin == pytest.approx(3.0)


def test_diverge_at_last_token_near_tie() -> None:
    result = compare([5, 6, 7], [5, 6, 8], _lp(1, 1, 0.0625), MARGIN)
    assert (result.status, result.position, result.margin) == ("near_tie", 2, pytest.approx(0.0625))


def test_margin_exactly_at_threshold_is_diverged() -> None:
    assert compare([5], [6], _lp(MARGIN), MARGIN).status == "diverged"


def test_eos_on_one_side() -> None:
    # the reference stopped at position 2; the candidate went on
    result = compare([5, 6, EOS], [5, 6, 7, 8], _lp(1, 1, 0.1), MARGIN)
    assert (result.status, result.position, result.reference_token, result.candidate_token) == (
        "near_tie",
        2,
        EOS,
        7,
    )


def test_different_lengths_strict_prefix() -> None:
    assert first_divergence([5, 6], [5, 6, 7]) == 2
    result = compare([5, 6], [5, 6, 7], _lp(1, 1), MARGIN)
    # no logprob where the reference has no token: say unknown, never guess
    assert (result.status, result.position, result.reference_token, result.candidate_token) == (
        "unknown",
        2,
        None,
        7,
    )


def test_without_logprobs_is_unknown() -> None:
    result = compare([5, 6], [5, 7], None, MARGIN)
    assert (result.status, result.position, result.margin) == ("unknown", 1, None)
    assert compare([5, 6], [5, 7], [[-0.1]] * 2, MARGIN).status == "unknown"  # only one logprob


def test_top2_margin_is_order_free() -> None:
    assert top2_margin([-2.0, -0.5, -1.0]) == pytest.approx(0.5)
    assert top2_margin([-1.0]) is None


def test_shares() -> None:
    out = shares(["identical", "identical", "near_tie", "unknown"])
    assert out == {
        "compared": 4,
        "identical_pct": 50.0,
        "near_tie_pct": 25.0,
        "diverged_pct": 0.0,
        "unknown_pct": 25.0,
    }
    assert shares([])["identical_pct"] is None


def test_text_around_uses_chunk_boundaries() -> None:
    chunks = [(0.1, 1, "def"), (0.2, 3, " f(x):"), (0.3, 1, "\n")]
    assert text_around(chunks, 0) == ("", "def f(x):\n")
    assert text_around(chunks, 2) == ("def", " f(x):\n")  # inside a 3-token chunk: split before it
    assert text_around(chunks, 4) == ("def f(x):", "\n")


def test_parse_both_logprob_shapes() -> None:
    completion = {
        "tokens": ["token_id:5"],
        "token_logprobs": [-0.1],
        "top_logprobs": [{"token_id:5": -0.1, "token_id:9": -0.3}],
    }
    assert parse_top_logprobs(completion) == [[(5, -0.1), (9, -0.3)]]
    chat = {
        "content": [
            {
                "token": "token_id:5",
                "logprob": -0.1,
                "top_logprobs": [
                    {"token": "token_id:5", "logprob": -0.1},
                    {"token": "token_id:9", "logprob": -0.3},
                ],
            }
        ]
    }
    assert parse_top_logprobs(chat) == [[(5, -0.1), (9, -0.3)]]
    assert parse_top_logprobs(None) == []


def _rec(
    prompt: str, concurrency: int, ids: list[int], error: str | None = None, margins=None
) -> RequestRecord:
    return RequestRecord(
        workload="w",
        prompt_id=prompt,
        concurrency=concurrency,
        prompt_format="raw",
        t_send=0.0,
        token_ids=ids,
        error=error,
        chunks=[(0.0, 1, f"<{t}>") for t in ids],
        top_logprobs=[
            [(t, -0.1), (0, -0.1 - m)] for t, m in zip(ids, margins or [1.0] * len(ids), strict=True)
        ],
    )


def test_compare_records_pairs_same_prompt_and_concurrency_only() -> None:
    reference = [
        _rec("a", 1, [1, 2, 3]),
        _rec("a", 4, [1, 2, 4], margins=[1, 1, 0.1]),
        _rec("b", 1, [7], error="timeout"),
    ]
    candidate = [_rec("a", 1, [1, 2, 3]), _rec("a", 4, [1, 2, 3]), _rec("b", 1, [7]), _rec("c", 1, [1])]
    entries = {(e["prompt_id"], e["concurrency"]): e for e in compare_records(reference, candidate, MARGIN)}
    assert set(entries) == {("a", 1), ("a", 4)}  # b failed on the reference side, c has no reference
    assert entries[("a", 1)]["status"] == "identical"
    near = entries[("a", 4)]
    assert (near["status"], near["position"], near["reference_token"], near["candidate_token"]) == (
        "near_tie",
        2,
        4,
        3,
    )
    assert near["reference_text_before"] == "<1><2>" and near["reference_text_after"] == "<4>"
    assert near["candidate_text_after"] == "<3>"


def test_margins_come_from_the_second_pass_where_it_saw_the_same_prefix() -> None:
    from harness.core.probes.exactness import with_logprobs_from
    from harness.results import RequestRecord

    def sample(ids: list[int], logprobs: list | None = None, prompt: str = "p") -> RequestRecord:
        top = [[(t, -0.1), (t + 1, -0.3)] for t in ids] if logprobs is None else logprobs
        return RequestRecord(
            workload="w",
            prompt_id=prompt,
            concurrency=1,
            prompt_format="raw",
            t_send=0.0,
            token_ids=ids,
            top_logprobs=top,
        )

    first = [sample([1, 2, 3, 4], []), sample([5, 6], [], prompt="q"), sample([7], [], prompt="r")]
    second = [
        sample([1, 2, 9, 9]),
        sample([5, 6], prompt="q"),
    ]  # p diverges at position 2; r has no second pass
    merged = with_logprobs_from(first, second)
    # positions 0..2 are valid for p: the prefix before position 2 is the same in both passes
    assert len(merged[0].top_logprobs) == 3 and merged[1].top_logprobs == second[1].top_logprobs
    assert merged[2].top_logprobs == []  # nothing to borrow: its margins stay unknown
    own = sample([1, 2], [[(1, -0.5), (2, -0.6)], [(2, -0.1), (3, -0.2)]])
    assert with_logprobs_from([own], second)[0] is own  # a record with its own logprobs keeps them
    # classified with the borrowed margin: the candidate flips p at position 2, a near tie there
    candidate = [sample([1, 2, 8, 4], [])]
    [entry] = compare_records(merged[:1], candidate, 0.5)
    assert entry["status"] == "near_tie" and entry["margin"] == pytest.approx(0.2)


def test_a_divergence_with_the_speculative_path_compiled_says_so() -> None:
    """run_v3_smoke ran compiled (engine.enforce_eager: false): every speculative arm matched the
    baseline on 75% of prompts where the baseline's 2nd pass matched itself on 100%. The exactness
    section records the mode; the run's caveats say the floor cannot tell compiled from speculative
    divergence; in eager mode the same shares are no such caveat."""
    from harness.derive.summary import summarize
    from harness.derive.verdict import compiled_divergence
    from harness.present.verdict_text import caveat_text

    summary = summarize(Path(__file__).parent / "fixtures" / "run_v3_smoke")
    assert summary.exactness.compile_mode == "compiled"
    (found,) = compiled_divergence(summary)
    assert found["floor"] == 100.0 and found["arms"].startswith("ngram_k4 75%")
    assert "cannot tell a divergence of the compiled verify pass" in caveat_text(found)
    eager = summary.exactness.model_copy(update={"compile_mode": "eager"})
    assert compiled_divergence(summary.model_copy(update={"exactness": eager})) == []
