"""Result files: a stored v1 run (recorded from the real CPU engine) loads and re-derives to the
same summary; unknown schema versions are refused; writes are atomic; only a torn LAST line is
ever skipped, and it is reported; the pandas view and the export read back equal."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import yaml
from pydantic import ValidationError
from rich.console import Console

import harness
from harness.cli import main
from harness.config.level import LoadLevel
from harness.core.errors import UserError
from harness.core.probes.acceptance import SpecCounters
from harness.derive.analysis import analyze
from harness.derive.frames import export, load_run
from harness.derive.summary import summarize
from harness.present.table import minilab_tables
from harness.results import (
    SCHEMA_VERSION,
    RequestRecord,
    RunDir,
    Summary,
    WindowCpu,
    WindowRecord,
    append_jsonl,
    load_summary,
    parse_summary,
    read_jsonl,
    read_records,
    write_json_atomic,
)
from harness.run.client import WindowResult
from harness.run.plan import plan_regime, run_plan
from harness.run.runner import Runner

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).parent / "fixtures" / "run_v1"
V3 = Path(__file__).parent / "fixtures" / "run_v3_smoke"


@pytest.fixture
def run_copy(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(GOLDEN, run)
    return run


def test_golden_v1_summary_loads_and_equals_the_rederived_one() -> None:
    stored = load_summary(GOLDEN / "summary.json")  # a version-1 file
    derived = summarize(GOLDEN)
    # JSON floats round-trip exactly; cells gained fields since v1 (compared key by key below)
    # (and the summary its regime's verdict settings, version 13: absent from a v1 file, the defaults)
    # (and, issue 81, each workload's covariate or why none: absent from a v1 file)
    update = {
        "cells": stored.cells,
        "arms": stored.arms,
        "categories": stored.categories,
        "verdict": None,
        "covariates": [],
    }
    assert {c.missing for c in derived.covariates} == {"no workload pass"}
    # the exactness section gained the servers' compile mode (issue 61): absent from a v1 file
    exactness = derived.exactness.model_copy(update={"compile_mode": None})
    assert derived.exactness.compile_mode in ("eager", "compiled")
    assert derived.model_copy(update={**update, "exactness": exactness}) == stored
    # categories gained their speedup's model fields; one start-up of one repeat: the same ratio
    assert [c.speedup for c in derived.categories] == pytest.approx([c.speedup for c in stored.categories])
    assert all(c.estimate is None or c.estimate.low is None for c in derived.categories)
    # arms gained how their drafts were verified and sampled (v8): re-derived from the regime, absent
    # from the stored file ("not recorded")
    unrecorded = {"verification": None, "draft_sampling": None}
    assert [a.model_copy(update=unrecorded) for a in derived.arms] == stored.arms
    assert [(a.verification, a.draft_sampling) for a in derived.arms] == [
        (None, None),
        ("standard", "greedy"),
    ]
    assert all(
        c.estimate is None or c.estimate.source is None for c in derived.cells
    )  # 1 repeat, 2 prompts: too few for one
    assert all(c.copy_share_pct is None for c in derived.cells)  # v1 samples hold no prompt token ids
    assert [a.status for a in derived.arms] == ["ok", "ok"]
    assert len(minilab_tables(analyze(derived))) == 4
    stored_cells = json.loads((GOLDEN / "summary.json").read_text())["windows"]
    dumped = [
        c.model_dump(mode="json") for c in derived.cells
    ]  # later versions add fields; v1's are unchanged
    assert stored_cells == [_as_old(cell, old) for cell, old in zip(dumped, stored_cells, strict=True)]


def _as_old(new: object, old: object) -> object:
    """``new`` with only the keys ``old`` has, at every depth (later versions add fields)."""
    if isinstance(old, dict) and isinstance(new, dict):
        return {key: _as_old(new[key], value) for key, value in old.items()}
    if isinstance(old, list) and isinstance(new, list):
        return [_as_old(n, o) for n, o in zip(new, old, strict=True)]
    return new


def test_current_summary_round_trips_and_is_frozen() -> None:
    summary = summarize(GOLDEN)
    dumped = summary.model_dump(mode="json")
    assert dumped["schema_version"] == SCHEMA_VERSION == 16 and "cells" in dumped and "windows" not in dumped
    assert parse_summary(json.loads(json.dumps(dumped)), "test") == summary
    with pytest.raises(ValidationError):
        summary.cells[0].tau = 9.0  # type: ignore[misc]


def test_unknown_schema_version_is_refused(run_copy: Path) -> None:
    record = json.loads((run_copy / "regime.json").read_text())
    record["schema_version"] = 99
    (run_copy / "regime.json").write_text(json.dumps(record))
    with pytest.raises(UserError, match="schema_version 99 is not supported .* written by a newer harness"):
        summarize(run_copy)
    with pytest.raises(UserError, match="schema_version 99 is not supported"):
        parse_summary({"schema_version": 99}, "summary.json")


def test_v1_samples_get_ttft_and_tpot_from_the_one_formula() -> None:
    line = json.loads((GOLDEN / "arms" / "baseline" / "samples.jsonl").read_text().splitlines()[0])
    assert "ttft_s" not in line
    sample = RequestRecord.from_json(line)
    assert sample.ttft_s == pytest.approx(line["t_first_token"] - line["t_send"])
    assert sample.tpot_s == pytest.approx(
        (line["t_done"] - line["t_first_token"]) / (len(line["token_ids"]) - 1)
    )
    assert sample.e2e_s == pytest.approx(line["t_done"] - line["t_send"])


def test_a_stored_request_line_reads_back_and_is_written_again_as_it_was() -> None:
    """The client's record is the store's: a version-3 line (with the TTFT/TPOT it was written with)
    reads as a RequestRecord whose own TTFT/TPOT are the stored ones, bit for bit, and writes back the
    same line plus the fields added since (at their defaults)."""
    for line in read_jsonl(V3 / "arms" / "ngram_k4" / "samples.jsonl"):
        record = RequestRecord.from_json(line)
        assert (record.ttft_s, record.tpot_s) == (line["ttft_s"], line["tpot_s"])
        written = json.loads(json.dumps(record.to_json()))
        assert {k: written[k] for k in line} == line
        assert {k: v for k, v in written.items() if k not in line} == {
            "t_scheduled": None, "t_dispatched": None, "seed": None, "request_rate": None
        }  # fmt: skip
        assert RequestRecord.from_json(written) == record


def test_a_request_line_of_the_wrong_shape_is_refused(run_copy: Path) -> None:
    samples = run_copy / "arms" / "baseline" / "samples.jsonl"
    line = json.loads(samples.read_text().splitlines()[0])
    with pytest.raises(ValidationError, match="ttft_ms"):
        RequestRecord.from_json({**line, "ttft_ms": 1.0})  # unknown keys are errors, as in every record
    samples.write_text(samples.read_text() + json.dumps({**line, "token_ids": "none"}) + "\n")
    with pytest.raises(UserError, match=r"samples.jsonl: record 9: token_ids: Input should be a valid list"):
        summarize(run_copy)


def test_run_dirs_are_never_reused(tmp_path: Path) -> None:
    first = RunDir.create(tmp_path, "r")
    second = RunDir.create(tmp_path, "r")
    assert first.root != second.root and first.root.parent == second.root.parent


def test_atomic_json_and_torn_jsonl(tmp_path: Path) -> None:
    write_json_atomic(tmp_path / "a.json", {"x": 1})
    assert json.loads((tmp_path / "a.json").read_text()) == {"x": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]  # no temp file left
    append_jsonl(tmp_path / "s.jsonl", {"i": 1})
    with open(tmp_path / "s.jsonl", "a") as handle:
        handle.write('{"i": 2, "trunc')  # a crash mid-write
    assert read_jsonl(tmp_path / "s.jsonl") == [{"i": 1}]


def test_a_torn_last_sample_is_skipped_and_reported_everywhere(
    run_copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    samples = run_copy / "arms" / "ngram_k4" / "samples.jsonl"
    with open(samples, "a") as handle:
        handle.write('{"workload": "code_humaneval", "prompt_id": "cut')
    summary = summarize(run_copy)
    assert summary.cells == summarize(GOLDEN).cells  # the torn line never reached the numbers
    assert len(summary.unread_lines) == 1 and "samples.jsonl: line 9 not read" in summary.unread_lines[0]
    assert main(["show", str(run_copy)]) == 0
    assert "raw data not read" in capsys.readouterr().out
    assert main(["report", str(run_copy), "-o", str(tmp_path / "r.html")]) == 0
    assert "raw data not read" in capsys.readouterr().out
    assert "Raw data not read" in (tmp_path / "r.html").read_text()


def test_a_corrupt_line_in_the_middle_is_an_error_not_a_lost_request(
    run_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    samples = run_copy / "arms" / "ngram_k4" / "samples.jsonl"
    lines = samples.read_text().splitlines(keepends=True)
    lines[3] = lines[3][:40] + "\n"
    samples.write_text("".join(lines))
    with pytest.raises(UserError, match=r"samples.jsonl:4: not valid JSON"):
        summarize(run_copy)
    assert main(["show", str(run_copy)]) == 2
    assert "samples.jsonl:4" in capsys.readouterr().out


def test_a_corrupt_last_line_that_was_fully_written_is_an_error(run_copy: Path) -> None:
    windows = run_copy / "arms" / "baseline" / "windows.jsonl"
    windows.write_text(windows.read_text() + "not json\n")
    with pytest.raises(UserError, match=r"windows.jsonl:5: not valid JSON"):
        summarize(run_copy)


def test_a_record_of_the_wrong_shape_names_its_file_and_field(run_copy: Path) -> None:
    windows = run_copy / "arms" / "baseline" / "windows.jsonl"
    windows.write_text(windows.read_text() + json.dumps({"workload": "w"}) + "\n")
    with pytest.raises(UserError, match=r"windows.jsonl: record 5: category: Field required"):
        summarize(run_copy)


def test_a_summary_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    path.write_bytes(b'{"schema_version": 2, "run_id": "\xff"}')
    with pytest.raises(UserError, match="not UTF-8"):
        load_summary(path)


def test_pandas_view_of_the_v1_fixture() -> None:
    run = harness.load_run(GOLDEN)
    assert isinstance(run.summary, Summary)
    cells = run.cells()
    assert len(cells) == 8 and {
        "arm",
        "workload",
        "concurrency",
        "tau",
        "output_tok_s",
        "tpot_ms_p50",
        "acceptance_pos_0",
        "identical_pct",
    } <= set(cells.columns)
    ngram = cells[(cells.arm == "ngram_k4") & (cells.workload == "code_humaneval") & (cells.concurrency == 1)]
    assert ngram.tau.item() == pytest.approx(run.summary.cell("ngram_k4", "code_humaneval", 1).tau)
    requests = run.requests()
    assert len(requests) == 16 and requests.ok.all()
    assert requests.ttft_ms.notna().all() and (requests.e2e_ms >= requests.ttft_ms).all()
    assert len(run.categories()) == 8 and len(run.repeats()) == 8


@pytest.mark.parametrize("fmt", ["csv", "parquet", "jsonl"])
def test_export_reads_back_equal(tmp_path: Path, fmt: str) -> None:
    run = load_run(GOLDEN)
    files = export(run, tmp_path, fmt)  # type: ignore[arg-type]
    tables = [f"{t}.{fmt}" for t in ("cells", "requests", "categories", "repeats")]
    # the speculation profile (JSON), then the data dictionary last, always CSV
    assert [f.name for f in files] == [*tables, "speculation_profile.json", "columns.csv"]
    for path in files[:-2]:
        frame = run.table(path.stem)
        if fmt == "csv":
            back = pd.read_csv(path)
        elif fmt == "parquet":
            back = pd.read_parquet(path)
        else:
            back = pd.read_json(path, orient="records", lines=True)
        assert list(back.columns) == list(frame.columns) and len(back) == len(frame)
        pd.testing.assert_frame_equal(
            _missing_as_none(back), _missing_as_none(frame), check_dtype=False, check_exact=fmt == "parquet"
        )


def _missing_as_none(frame: pd.DataFrame) -> pd.DataFrame:
    """CSV has no null: an empty field reads back as NaN where the frame held None."""
    return frame.astype(object).where(frame.notna(), None)


def test_bench_export_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", str(GOLDEN), "--format", "parquet", "-o", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "categories.parquet",
        "cells.parquet",
        "columns.csv",
        "repeats.parquet",
        "requests.parquet",
        "speculation_profile.json",
    ]
    assert main(["export", str(tmp_path / "nope")]) == 2
    assert "not a run directory" in capsys.readouterr().out


def test_the_runner_writes_its_window_as_a_window_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runner builds a WindowRecord (validated as it is written) and a request line per record; both
    read back equal. The engine, the server and the sensors are stand-ins: the real ones are the engine
    tests'."""
    data = yaml.safe_load((ROOT / "tests" / "regimes" / "cpu_e2e.yaml").read_text())
    data["workloads"] = [str(ROOT / "workloads" / "code_humaneval.yaml")]
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(data))
    runner = Runner(run_plan(plan_regime(tmp_path / "r.yaml"), "model"), tmp_path, Console(quiet=True))
    runner.power_reader, runner.power_note, runner.gpu_reader = None, "not available (test)", None
    adapter, workload = runner.plan.adapter, runner.plan.workloads[0]
    monkeypatch.setattr(adapter, "reset_prefix_cache", lambda url: True)
    # before; after: the last step's counters arrive after the first read, and two reads agree then
    final = SpecCounters(drafts=5, accepted_tokens=6)
    scrapes = iter(
        [SpecCounters(drafts=3, accepted_tokens=2), SpecCounters(drafts=4, accepted_tokens=4), final, final]
    )
    monkeypatch.setattr(adapter, "read_spec_counters", lambda url: next(scrapes))
    monkeypatch.setattr("harness.run.window.SETTLE_INTERVAL_S", 0.0)
    cpu_used = {"engine_s": 1.5, "client_s": 0.25, "others_s": 0.0, "steal_s": 0.0, "cores": 2.0}
    monkeypatch.setattr("harness.run.window.window_cpu", lambda before, after: cpu_used)
    monkeypatch.setattr(runner, "_check_alive", lambda server, result: None)
    sent = []

    def send(server, workload, prompts, level, label, keep, repeat=0, schedule=None, **_):
        for i, prompt in enumerate(prompts):
            due = schedule[i]
            record = RequestRecord(workload.name, prompt.prompt_id, level.concurrency, "raw", repeat,
                                   level.request_rate, due, due, t_send=due + 0.01, t_first_token=1.0,
                                   t_done=2.0, token_ids=[1, 2, 3], finish_reason="length")  # fmt: skip
            keep(record)
            sent.append(record)
        return WindowResult(records=sent, duration_s=2.5)

    monkeypatch.setattr(runner, "_send", send)
    run, level = RunDir.create_at(tmp_path / "run"), LoadLevel(2, 4.0)
    precision = {"metric": "output_tok_s", "rel_half_width": 0.1, "target": 0.05}
    server = SimpleNamespace(
        base_url="http://127.0.0.1:1", process=SimpleNamespace(pid=os.getpid()), served_model=None
    )
    arm = runner.plan.regime.arms[1]
    runner._measure_window(run, arm, server, workload, level, 3, lambda repeat, tok_s: precision, start=1)
    (window,) = read_records(run.windows(arm.name), WindowRecord)
    assert (window.workload, window.level, window.repeat, window.server_start) == (workload.name, level, 3, 1)
    assert window.duration_s == 2.5 and window.prefix_cache_reset and len(window.schedule) == len(sent)
    assert window.counter_delta() == SpecCounters(drafts=2, accepted_tokens=4)
    assert window.cpu == WindowCpu(**cpu_used)
    assert window.precision.model_dump() == precision and window.power.note == "not available (test)"
    assert window.arrival == runner.plan.regime.load.arrival and window.gpu is None
    assert set(read_jsonl(run.windows(arm.name))[0]) == set(WindowRecord.model_fields)  # every field, said
    assert read_records(run.samples(arm.name), RequestRecord) == sent
