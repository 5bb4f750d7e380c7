"""Requests whose stream was not decoding are flagged (``harness.derive.odd_requests``): counted in
the cells, named in the findings, marked in the export's requests table, never dropped."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness.derive.analysis import load_analysis
from harness.derive.findings import odd_request_facts
from harness.derive.frames import load_run
from harness.derive.odd_requests import FASTER_THAN_A_STEP, ONE_CHUNK, odd_kinds, tokens_per_step
from harness.present.verdict_text import findings_text
from harness.results.records import RequestRecord

FIXTURES = Path(__file__).parent / "fixtures"
# a real run on a busy 2-core machine: 4 of the baseline's 32 requests at concurrency 1 got all
# their 24 tokens within microseconds of each other, after a first token 0.9-2.2 s late (22 such
# bursts in its 4 cells of the baseline and ngram_k2)
STALLED = FIXTURES / "run_v12_provisional"


def _streamed(prompt: str, first: float, gaps: list[float], tokens: list[int]) -> RequestRecord:
    """A finished request whose chunks arrive ``gaps`` apart after ``first`` s, carrying ``tokens``."""
    times = [first]
    for gap in gaps:
        times.append(times[-1] + gap)
    total = sum(tokens)
    return RequestRecord(
        workload="w",
        prompt_id=prompt,
        concurrency=1,
        prompt_format="raw",
        t_send=0.0,
        t_first_token=first,
        t_done=times[-1],
        chunks=[(t, n, "x" * n) for t, n in zip(times, tokens, strict=True)],
        token_ids=list(range(total)),
        finish_reason="length",
    )


def _normal(prompt: str) -> RequestRecord:
    return _streamed(prompt, 0.05, [0.05] * 19, [1] * 20)  # 20 tokens, one per 50 ms step


def test_one_chunk_and_a_burst_are_flagged_a_normal_stream_is_not() -> None:
    normal = [_normal(f"p{i}") for i in range(4)]
    one_chunk = _streamed("stalled", 0.843, [], [20])  # the issue's: 20 tokens at once after 843 ms
    burst = _streamed("burst", 0.9, [1e-5] * 19, [1] * 20)  # 20 chunks within 0.2 ms
    kinds = odd_kinds([*normal, one_chunk, burst], tokens_per_step(None))
    assert kinds == [None, None, None, None, ONE_CHUNK, FASTER_THAN_A_STEP]


def test_a_speculative_step_may_carry_k_plus_one_tokens() -> None:
    # 5 tokens a 50 ms step (K=4, every draft accepted): TPOT 10 ms, the fastest K=4 can go, not odd
    fast = _streamed("all accepted", 0.05, [0.05] * 4, [1, 5, 5, 5, 4])
    normal = [_normal(f"p{i}") for i in range(3)]
    assert odd_kinds([*normal, fast], tokens_per_step(4)) == [None] * 4
    # the same stream from a baseline (1 token a step) is faster than its engine steps
    assert odd_kinds([*normal, fast], tokens_per_step(None))[-1] == FASTER_THAN_A_STEP


def test_failed_and_single_token_requests_are_not_judged() -> None:
    one_token = _streamed("one", 0.05, [], [1])
    failed = _streamed("failed", 0.05, [], [20])
    failed.error = "timeout"
    assert odd_kinds([_normal("p"), one_token, failed], 1) == [None, None, None]


def test_a_real_stalled_run_is_flagged_in_cells_findings_and_export(tmp_path: Path) -> None:
    run = tmp_path / STALLED.name
    shutil.copytree(STALLED, run)
    summary = load_analysis(run).analysis.summary
    cell = summary.cell("baseline", "code_humaneval", next(iter(summary.levels())))
    assert cell is not None and cell.requests_odd_by == {FASTER_THAN_A_STEP: 4}
    facts = {f.arm: f for f in odd_request_facts(summary)}
    assert facts["baseline"]["odd"] == 8 and facts["baseline"]["finished"] == 64
    sentence = next(s for s in findings_text(list(facts.values())) if s.startswith("8 of baseline's"))
    assert "code_humaneval @1: 4" in sentence and "odd" in sentence
    requests = load_run(run).requests()
    flagged = requests[requests["odd"].notna()]
    assert len(flagged) == sum(f["odd"] for f in facts.values())  # type: ignore[misc]
    # the flagged are bursts: TPOT at most 7 ms where each cell's median is 27-52 ms
    assert (flagged["tpot_ms"] < 7).all() and (requests["tpot_ms"].median() > 27)
    cells = load_run(run).cells()
    assert cells["requests_odd"].sum() == len(flagged)


@pytest.mark.parametrize(
    "fixture", ["run_v1", "run_v14_default", "run_v13_default", "run_v15_slower_machine"]
)
def test_runs_that_streamed_normally_have_no_odd_request(fixture: str, tmp_path: Path) -> None:
    run = tmp_path / fixture
    shutil.copytree(FIXTURES / fixture, run)
    assert odd_request_facts(load_analysis(run).analysis.summary) == []


def test_a_stream_of_text_alone_is_judged_by_its_text_chunks() -> None:
    """SGLang's chat streams text with no token ids (0 tokens a chunk) and gives the ids at the end:
    its chunks with text are what arrived."""

    def text_only(record: RequestRecord) -> RequestRecord:
        record.chunks = [(t, 0, text) for t, _, text in record.chunks]
        return record

    normal = [text_only(_normal(f"p{i}")) for i in range(4)]
    one_chunk = text_only(_streamed("stalled", 0.843, [], [20]))
    burst = text_only(_streamed("burst", 0.9, [1e-5] * 19, [1] * 20))
    assert odd_kinds([*normal, one_chunk, burst], 1) == [None] * 4 + [ONE_CHUNK, FASTER_THAN_A_STEP]
    assert normal[0].ttst_s == pytest.approx(0.05)
