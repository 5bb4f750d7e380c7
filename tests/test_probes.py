"""Probe arithmetic on hand-made samples, and the summary derived from raw records."""

from __future__ import annotations

import pytest

from harness.probes.acceptance import SpecCounters, acceptance
from harness.probes.cost import usd_per_mtok
from harness.probes.latency import percentile, tpot_s, ttft_s
from harness.probes.throughput import output_tokens_per_s, speedup
from harness.summary import _add_speedups, cell_metrics


def test_tau_from_counter_deltas() -> None:
    before = SpecCounters(drafts=10, draft_tokens=40, accepted_tokens=5, accepted_per_position={0: 3, 1: 2})
    after = SpecCounters(drafts=66, draft_tokens=264, accepted_tokens=118, accepted_per_position={0: 50, 1: 40, 2: 20, 3: 13})
    acc = acceptance(after.minus(before))
    assert acc.tau == pytest.approx(1 + 113 / 56)
    assert acc.acceptance_rate == pytest.approx(113 / 224)
    assert acc.per_position == pytest.approx([47 / 56, 38 / 56, 20 / 56, 13 / 56])


def test_tau_absent_without_drafts() -> None:
    acc = acceptance(SpecCounters())
    assert acc.tau is None and acc.acceptance_rate is None and acc.per_position == []


def test_ttft_tpot() -> None:
    assert ttft_s(1.0, 1.25) == pytest.approx(0.25)
    # 11 tokens: first at 1.25, done at 2.25 -> 10 inter-token intervals of 0.1 s
    assert tpot_s(1.0, 1.25, 2.25, 11) == pytest.approx(0.1)
    assert tpot_s(1.0, 1.25, 1.25, 1) is None
    assert ttft_s(1.0, None) is None


def test_percentile_matches_linear_interpolation() -> None:
    assert percentile([4, 1, 3, 2], 50) == pytest.approx(2.5)
    assert percentile([1, 2, 3, 4, 5], 90) == pytest.approx(4.6)
    assert percentile([], 50) is None


def test_throughput_speedup_cost() -> None:
    assert output_tokens_per_s(1000, 20.0) == pytest.approx(50.0)
    assert output_tokens_per_s(0, 20.0) is None
    assert speedup(60.0, 40.0) == pytest.approx(1.5)
    assert speedup(60.0, None) is None
    # 8 GPUs at $3.50 = $28/h; 10,000 tok/s -> 36M tok/h -> $0.777.../Mtok
    assert usd_per_mtok(28.0, 10_000.0) == pytest.approx(28.0 / 36.0)
    assert usd_per_mtok(28.0, None) is None


def _record(t_send: float, t_first: float, t_done: float, tokens: int, error: str | None = None) -> dict:
    return {"t_send": t_send, "t_first_token": t_first, "t_done": t_done, "token_ids": list(range(tokens)), "error": error}


def test_window_metrics_uses_token_ids_and_excludes_errors() -> None:
    window = {
        "duration_s": 4.0,
        "counters_before": SpecCounters().to_json(),
        "counters_after": SpecCounters(drafts=4, draft_tokens=16, accepted_tokens=8, accepted_per_position={0: 4, 1: 4}).to_json(),
    }
    records = [_record(0.0, 0.5, 2.5, 21), _record(0.0, 1.0, 4.0, 31), _record(0.0, 0.1, 0.2, 0, error="timeout")]
    metrics = cell_metrics([window], records, price_per_hour=0.36)
    assert (metrics["requests_total"], metrics["requests_ok"], metrics["requests_errored"]) == (3, 2, 1)
    assert metrics["output_tokens"] == 52
    assert metrics["output_tok_s"] == pytest.approx(13.0)
    assert metrics["ttft_ms_p50"] == pytest.approx(750.0)
    assert metrics["tpot_ms_p50"] == pytest.approx(100.0)  # both requests: 2.0/20 and 3.0/30
    assert metrics["tau"] == pytest.approx(3.0)
    assert metrics["per_position_acceptance"] == pytest.approx([1.0, 1.0])
    assert metrics["usd_per_mtok"] == pytest.approx(0.36 / (13.0 * 3600) * 1e6)
    assert metrics["repeats"] == 1 and metrics["per_repeat"][0]["tau"] == pytest.approx(3.0)


def test_repeats_pool_into_one_cell_and_stay_apart_per_repeat() -> None:
    def window(repeat: int, duration: float, accepted: int) -> dict:
        return {"repeat": repeat, "duration_s": duration, "counters_before": SpecCounters().to_json(),
                "counters_after": SpecCounters(drafts=4, draft_tokens=16, accepted_tokens=accepted).to_json()}
    records = [{**_record(0.0, 0.5, 2.5, 21), "repeat": 0}, {**_record(0.0, 0.5, 4.5, 41), "repeat": 1}]
    metrics = cell_metrics([window(0, 2.0, 8), window(1, 4.0, 4)], records, price_per_hour=0.36)
    assert metrics["repeats"] == 2 and metrics["duration_s"] == pytest.approx(6.0)
    assert metrics["output_tok_s"] == pytest.approx(62 / 6.0)  # pooled: tokens and time add up
    assert metrics["tau"] == pytest.approx(1 + 12 / 8)  # pooled counters
    assert [r["tau"] for r in metrics["per_repeat"]] == pytest.approx([3.0, 2.0])
    assert [r["output_tok_s"] for r in metrics["per_repeat"]] == pytest.approx([10.5, 10.25])


def test_speedup_pairs_same_workload_and_concurrency() -> None:
    def row(arm: str, workload: str, concurrency: int, tok_s: float) -> dict:
        return {"arm": arm, "workload": workload, "concurrency": concurrency, "output_tok_s": tok_s,
                "per_repeat": [{"repeat": 0, "output_tok_s": tok_s}]}
    rows = [row("base", "w", 1, 40.0), row("base", "w", 4, 100.0), row("ng", "w", 1, 60.0), row("ng", "w", 4, 90.0),
            row("ng", "other", 1, 90.0)]
    _add_speedups(rows, baseline="base")
    assert [r["speedup"] for r in rows] == pytest.approx([1.0, 1.0, 1.5, 0.9, None])
    assert [r["per_repeat"][0]["speedup"] for r in rows] == pytest.approx([1.0, 1.0, 1.5, 0.9, None])


def test_categories_pool_their_workloads() -> None:
    from harness.summary import category_rows

    def row(arm: str, workload: str, category: str, tokens: int, duration: float, drafts: float, accepted: float,
            same: float | None) -> dict:
        return {"arm": arm, "method": "baseline" if arm == "base" else "ngram", "num_speculative_tokens": None,
                "workload": workload, "category": category, "concurrency": 1, "output_tokens": tokens,
                "duration_s": duration, "drafts": drafts, "accepted_tokens": accepted,
                "exactness": None if same is None else {"compared": 2, "identical_pct": same}}
    rows = [row("base", "a", "extract", 100, 10.0, 0, 0, 100), row("base", "b", "extract", 100, 10.0, 0, 0, 100),
            row("ng", "a", "extract", 100, 5.0, 10, 20, 100), row("ng", "b", "extract", 100, 15.0, 30, 20, 50),
            row("ng", "c", "chat", 50, 10.0, 10, 5, None)]
    cells = {(r["arm"], r["category"]): r for r in category_rows(rows, "base")}
    extract = cells[("ng", "extract")]
    assert extract["workloads"] == ["a", "b"] and extract["output_tok_s"] == pytest.approx(10.0)
    assert extract["tau"] == pytest.approx(1 + 40 / 40) and extract["speedup"] == pytest.approx(1.0)
    assert extract["identical_pct"] == pytest.approx(75.0) and extract["exactness_pairs"] == 4
    assert cells[("ng", "chat")]["speedup"] is None  # no baseline measured that category
