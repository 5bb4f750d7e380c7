"""SLO attainment and goodput (harness.core.probes.slo): the formula on constructed requests, then the
summary, tables, report and gates of the stored fixture run with SLO targets added to its regime."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from harness.config.load import Slo
from harness.core.probes.slo import attainment_pct, goodput_rps, meets
from harness.derive.gates.evaluate import evaluate
from harness.derive.samples import RunView
from harness.derive.summary import summarize
from harness.present.table import minilab_tables
from harness.results import RequestRecord, read_jsonl

GOLDEN = Path(__file__).parent / "fixtures" / "run_v1"


def _request(ttft: float | None, done: float | None, tokens: int, error: str | None = None) -> RequestRecord:
    return RequestRecord(
        workload="w",
        prompt_id="p",
        concurrency=1,
        prompt_format="raw",
        t_send=1.0,
        t_first_token=None if ttft is None else 1.0 + ttft,
        t_done=None if done is None else 1.0 + done,
        token_ids=list(range(tokens)),
        error=error,
    )


def test_a_request_meets_the_slo_only_within_every_target() -> None:
    fast = _request(0.1, 1.1, 11)  # TTFT 100 ms, TPOT 100 ms, E2E 1.1 s
    slow_start = _request(0.6, 1.6, 11)  # TTFT 600 ms
    slow_tokens = _request(0.1, 3.1, 11)  # TPOT 300 ms
    failed = _request(0.1, None, 3, error="HTTP 500")
    single = _request(0.1, 0.1, 1)  # one token: no TPOT, so no TPOT to miss
    slo = Slo(ttft_ms=500, tpot_ms=200)
    assert [meets(r, slo) for r in (fast, slow_start, slow_tokens, failed, single)] == [
        True,
        False,
        False,
        False,
        True,
    ]
    assert meets(slow_tokens, Slo(ttft_ms=500))  # no TPOT target: no TPOT limit
    assert not meets(fast, Slo(e2e_ms=1000))
    requests = [fast, slow_start, slow_tokens, failed, single]
    assert attainment_pct(requests, slo) == pytest.approx(40.0)  # 2 of 5 sent; the failed one counts
    assert goodput_rps(requests, slo, duration_s=4.0) == pytest.approx(0.5)
    assert attainment_pct([], slo) is None and goodput_rps(requests, slo, 0.0) is None


def _with_slo(tmp_path: Path, slo: dict, gates: dict | None = None) -> Path:
    run = tmp_path / f"run-{len(list(tmp_path.iterdir()))}"
    shutil.copytree(GOLDEN, run)
    record = json.loads((run / "regime.json").read_text())
    record["regime"]["slo"] = slo
    if gates is not None:
        record["regime"]["gates"] = gates
    (run / "regime.json").write_text(json.dumps(record))
    return run


def test_the_summary_derives_slo_share_and_goodput_from_the_samples(tmp_path: Path) -> None:
    assert summarize(GOLDEN).slo is None and summarize(GOLDEN).cells[0].slo_pct is None  # no targets: none
    samples = [RequestRecord.from_json(r) for r in read_jsonl(GOLDEN / "arms" / "ngram_k4" / "samples.jsonl")]
    mine = [s for s in samples if (s.workload, s.concurrency) == ("code_humaneval", 1)]
    tpots = sorted(s.tpot_s for s in mine if s.tpot_s is not None)
    assert tpots[0] < tpots[-1]
    limit_ms = 500 * (tpots[0] + tpots[-1])  # between the fastest and the slowest request
    summary = summarize(_with_slo(tmp_path, {"tpot_ms": limit_ms}))
    cell = summary.cell("ngram_k4", "code_humaneval", 1)
    within = sum(1 for s in mine if s.ok and s.tpot_s is not None and s.tpot_s * 1000 <= limit_ms)
    assert summary.slo == Slo(tpot_ms=limit_ms)
    assert cell.slo_pct == pytest.approx(100 * within / len(mine))
    assert cell.goodput_rps == pytest.approx(within / cell.duration_s)
    assert [r.slo_pct for r in cell.per_repeat] == [cell.slo_pct]  # one repeat: the same share
    assert 0 < cell.slo_pct < 100
    loose = summarize(_with_slo(tmp_path, {"tpot_ms": 10_000})).cell("ngram_k4", "code_humaneval", 1)
    tight = summarize(_with_slo(tmp_path, {"tpot_ms": 1})).cell("ngram_k4", "code_humaneval", 1)
    assert (loose.slo_pct, tight.slo_pct, tight.goodput_rps) == (100.0, 0.0, 0.0)
    assert loose.goodput_rps == pytest.approx(cell.requests_ok / cell.duration_s)


def test_tables_report_and_gates_carry_the_slo(tmp_path: Path) -> None:
    from harness.derive.analysis import analyze
    from tests.views import render_report

    gates = {"rules": [{"arm": "ngram_k4", "metric": "slo_pct", "min": 50}]}
    run = _with_slo(tmp_path, {"ttft_ms": 400, "tpot_ms": 90}, gates)
    summary = summarize(run)
    console = Console(width=400, record=True)
    for table in minilab_tables(analyze(summary)):
        console.print(table)
    text = " ".join(console.export_text().split())  # titles wrap at the table's width
    assert "SLO TTFT <= 400 ms, TPOT <= 90 ms, goodput in requests/s" in text and "in SLO" in text
    html = render_report(run)
    assert ">goodput</th>" in html and "SLO: TTFT &lt;= 400 ms, TPOT &lt;= 90 ms" in html
    checks = evaluate(RunView(run))
    assert {c.metric for c in checks} == {"slo_pct"}
    for check in checks:
        cell = summary.cell(check.arm, check.workload, check.concurrency)
        # one start-up: below the floor is "inconclusive" (its spread across start-ups is unmeasured)
        assert check.verdict == ("pass" if cell.slo_pct >= 50 else "inconclusive"), check.message
    assert "in SLO" not in " ".join(str(t.title) for t in minilab_tables(analyze(summarize(GOLDEN))))
    # notebooks: per request whether it met the targets, per repeat the share and the goodput
    from harness import load_run

    loaded = load_run(run)
    requests, repeats = loaded.requests(), loaded.repeats()
    mine = requests[
        (requests.arm == "ngram_k4") & (requests.workload == "code_humaneval") & (requests.concurrency == 1)
    ]
    cell = summary.cell("ngram_k4", "code_humaneval", 1)
    assert 100 * mine.within_slo.mean() == pytest.approx(cell.slo_pct)
    assert set(repeats.goodput_rps) == {c.goodput_rps for c in summary.cells}
    assert load_run(GOLDEN).requests().within_slo.isna().all()


def test_slo_capacity_is_the_highest_rate_that_still_met_the_target() -> None:
    """From open-loop cells: interpolated between the last rate that met the target share and the first
    that missed it; a bound when every rate (or none) met it."""
    from harness.derive.analysis import analyze
    from harness.derive.verdict import slo_capacity
    from harness.present.verdict_text import capacity_lines, capacity_text

    base = summarize(GOLDEN)

    def at_rates(shares: dict[str, tuple[float, float]]) -> list[str]:
        cells = []
        for cell in base.cells:
            if cell.workload != "code_humaneval":
                continue
            rate = 0.5 if cell.concurrency == 1 else 1.0
            pct = shares[cell.arm][0 if rate == 0.5 else 1]
            cells.append(cell.model_copy(update={"request_rate": rate, "slo_pct": pct}))
        summary = base.model_copy(update={"cells": cells, "slo": Slo(ttft_ms=500, target_pct=90)})
        return [capacity_text(c) for c in slo_capacity(summary)] + capacity_lines(analyze(summary))[:1]

    found = at_rates({"baseline": (100.0, 80.0), "ngram_k4": (100.0, 95.0)})
    # baseline: 100% at 0.5, 80% at 1.0 -> 90% reached at 0.5 + (100 - 90) / (100 - 80) x 0.5 = 0.75
    assert "baseline on code_humaneval: about 0.75 req/s (interpolated between 0.5 and 1)" in found
    assert "ngram_k4 on code_humaneval: at least 1 req/s (every rate measured met it)" in found
    assert "SLO capacity (the highest request rate with 90% of requests within TTFT <= 500 ms):" in found
    missed = at_rates({"baseline": (50.0, 10.0), "ngram_k4": (100.0, 95.0)})
    assert "baseline on code_humaneval: below 0.5 req/s (the lowest rate measured missed it)" in missed
    assert slo_capacity(base) == []  # no SLO, no rates: nothing to say


def _open_loop(due: float, dispatched: float, send: float, first: float, done: float) -> RequestRecord:
    """An open-loop request: due, got to by the client, sent once a max_concurrency slot freed."""
    return RequestRecord(
        workload="w",
        prompt_id="p",
        concurrency=2,
        prompt_format="raw",
        request_rate=4.0,
        t_scheduled=due,
        t_dispatched=dispatched,
        t_send=send,
        t_first_token=first,
        t_done=done,
        token_ids=list(range(11)),
    )


def test_open_loop_latency_counts_from_the_due_time() -> None:
    # due at 1.0, the client got to it at 1.02 (its own lag, not counted), sent at 1.52 after
    # waiting 0.5 s for a slot, first token at 1.82, done at 2.82
    queued = _open_loop(1.0, 1.02, 1.52, 1.82, 2.82)
    assert queued.queueing_s == pytest.approx(0.5)
    assert queued.ttft_s == pytest.approx(0.3) and queued.scheduled_ttft_s == pytest.approx(0.8)
    assert queued.e2e_s == pytest.approx(1.3) and queued.scheduled_e2e_s == pytest.approx(1.8)
    assert queued.tpot_s == pytest.approx(0.1)  # per token after the first: no queue changes it
    # closed loop: no queue, the same figure both ways
    closed = _request(0.1, 1.1, 11)
    assert closed.queueing_s is None
    assert (closed.scheduled_ttft_s, closed.scheduled_e2e_s) == (closed.ttft_s, closed.e2e_s)
    assert closed.scheduled_ttft_s == pytest.approx(0.1)
    # the record's stored line carries neither (they are recomputed from the raw times)
    assert RequestRecord.from_json(queued.to_json()).scheduled_ttft_s == pytest.approx(0.8)


def test_open_loop_slo_attainment_counts_the_queue() -> None:
    slo = Slo(ttft_ms=500, e2e_ms=1500)
    unqueued = _open_loop(1.0, 1.0, 1.0, 1.3, 2.3)  # TTFT 300 ms, E2E 1.3 s: within both
    queued = _open_loop(1.0, 1.0, 1.5, 1.8, 2.8)  # the same from the send, 500 ms in the queue before
    late_end = _open_loop(1.0, 1.0, 1.1, 1.3, 2.65)  # TTFT 300 ms from due; E2E 1.65 s: misses E2E
    assert [meets(r, slo) for r in (unqueued, queued, late_end)] == [True, False, False]
    assert queued.ttft_s == pytest.approx(unqueued.ttft_s)  # from the send it would have met the SLO
    assert attainment_pct([unqueued, queued, late_end], slo) == pytest.approx(100 / 3)
    assert goodput_rps([unqueued, queued, late_end], slo, duration_s=2.0) == pytest.approx(0.5)


def test_the_send_based_ttft_is_registered_beside_the_due_based_one() -> None:
    from harness.core.metrics import GATED, METRICS, shown

    assert METRICS["ttft_ms_p50"].sample_field == "scheduled_ttft_s"
    assert METRICS["ttft_ms_p90"].sample_field == "scheduled_ttft_s"
    for name in ("ttft_ms_p50_sent", "ttft_ms_p90_sent"):
        metric = METRICS[name]
        assert (metric.sample_field, metric.scale, metric.shown) == ("ttft_s", 1000.0, "open_loop")
        assert name not in GATED
    report = [m.name for m in shown("report", {"open_loop"})]
    assert report.index("ttft_ms_p50_sent") < report.index("queueing_ms_p50")
    assert "ttft_ms_p50_sent" not in [m.name for m in shown("report", set())]  # closed loop: not shown
