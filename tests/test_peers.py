"""The peers' block (issue 73, items 1 and 2): each window as ``vllm bench serve`` and AIPerf report
it, computed once in the summary from the registry's entries and checked here against numpy on the
raw records; shown by ``bench show --peers`` within 100 columns, in the report and in the export
(with the cost model's step cost and break-even tau), in the peers' words."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.core.probes.latency import ttst_s
from harness.derive.analysis import load_analysis
from harness.derive.summary import summarize
from harness.results.raw import read_raw

ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / "tests" / "fixtures" / "run_v14_default"
COST = ROOT / "tests" / "fixtures" / "run_v14_cost_model"


def test_time_to_second_token_is_aiperfs_the_first_two_chunks_gap() -> None:
    # AIPerf 0.13's TTSTMetric: the second content response's timestamp - the first's
    assert ttst_s([(1.2, 1, "a"), (1.5, 1, "b"), (1.7, 1, "c")]) == pytest.approx(0.3)
    assert ttst_s([(1.2, 3, "abc"), (1.5, 1, "d")]) == pytest.approx(0.3)  # however many each carried
    assert ttst_s([(1.1, 0, ""), (1.2, 1, "a"), (1.5, 1, "b")]) == pytest.approx(0.3)  # content only
    assert ttst_s([(1.2, 1, "a")]) is None


def test_the_statistics_are_numpys_on_the_raw_records() -> None:
    raw = read_raw(RUN)
    summary = summarize(raw)
    for cell in summary.cells:
        ok = [
            r
            for r in raw.arms[cell.arm].samples
            if r.ok and (r.workload, r.level) == (cell.workload, cell.level)
        ]
        ttft = np.array([r.scheduled_ttft_s for r in ok]) * 1000
        itl = np.array([gap for r in ok for gap in r.itl_s]) * 1000
        e2e = np.array([r.scheduled_e2e_s for r in ok]) * 1000
        ttst = np.array([r.ttst_s for r in ok if r.ttst_s is not None]) * 1000
        assert cell.ttft_ms_mean == pytest.approx(ttft.mean())
        assert cell.ttft_ms_std == pytest.approx(ttft.std())  # numpy's, n in the denominator: vLLM's std
        assert (cell.ttft_ms_min, cell.ttft_ms_max) == pytest.approx((ttft.min(), ttft.max()))
        assert cell.itl_ms_p90 == pytest.approx(np.percentile(itl, 90))
        assert cell.itl_ms_std == pytest.approx(itl.std())
        assert cell.e2e_ms_mean == pytest.approx(e2e.mean()) and cell.e2e_ms_max == pytest.approx(e2e.max())
        assert cell.ttst_ms_p99 == pytest.approx(np.percentile(ttst, 99))
        prompt = sum(r.prompt_token_count for r in ok)
        assert cell.input_tokens == prompt
        assert cell.request_rps == pytest.approx(len(ok) / cell.duration_s)
        assert cell.total_tok_s == pytest.approx((prompt + cell.output_tokens) / cell.duration_s)


def _show_peers() -> str:
    env = {**os.environ, "COLUMNS": "100", "TERM": "dumb", "NO_COLOR": "1"}
    out = subprocess.run(
        [sys.executable, "-m", "harness.cli", "show", str(RUN), "--peers"],
        capture_output=True, text=True, cwd=ROOT, env=env,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_bench_show_peers_fits_100_columns_in_their_words() -> None:
    text = _show_peers()
    assert max(len(line) for line in text.splitlines()) <= 100
    assert "(continued)" not in text  # one table each, not stacked
    assert "vLLM's acceptance length, the harness's tau" in text
    summary = summarize(RUN)
    spec = summary.cell("ngram_k4", "code_humaneval", 1)
    assert spec is not None
    row = next(line for line in text.splitlines() if line.lstrip().startswith("ngram_k4") and "/" not in line)
    assert row.split()[1:] == [
        f"{spec.request_rps:.2f}",
        f"{spec.output_tok_s:.1f}",
        f"{spec.total_tok_s:.1f}",
        str(spec.input_tokens),
        str(spec.output_tokens),
        f"{spec.duration_s:.1f}",
        f"{spec.tau:.2f}",
        f"{spec.acceptance_rate * 100:.1f}",
        f"{spec.drafts:.0f}",
        f"{spec.draft_tokens:.0f}",
        f"{spec.accepted_tokens:.0f}",
    ]


def test_the_report_and_the_export_carry_the_block_and_the_cost_model(tmp_path: Path) -> None:
    from harness.present.report import render_report

    run = load_analysis(COST)
    page = render_report(run)
    assert 'id="peers"' in page and '<td class="text">TTST</td>' in page
    assert (
        subprocess.run(
            [sys.executable, "-m", "harness.cli", "export", str(COST), "-o", str(tmp_path)], cwd=ROOT
        ).returncode
        == 0
    )
    rows = list(csv.DictReader((tmp_path / "cells.csv").open()))
    documented = {r["column"] for r in csv.DictReader((tmp_path / "columns.csv").open())}
    for column in ("ttft_ms_std", "ttst_ms_p50", "itl_ms_max", "request_rps", "total_tok_s", "step_cost",
                   "break_even_tau_low"):  # fmt: skip
        assert column in rows[0] and column in documented
    costs = {(c.arm, c.workload, c.level.concurrency): c for c in run.analysis.cost.costs}
    assert costs
    for row in rows:
        cost = costs.get((row["arm"], row["workload"], int(row["concurrency"])))
        if cost is None:
            assert row["step_cost"] == "" and row["break_even_tau"] == ""
        else:
            assert float(row["step_cost"]) == pytest.approx(cost.cost)
            if cost.break_even_tau is not None:
                assert float(row["break_even_tau"]) == pytest.approx(cost.break_even_tau)
