"""Result files: a stored v1 run (recorded from the real CPU engine) re-derives to the same
summary; unknown schema versions are refused; writes are atomic and torn lines tolerated."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness.errors import UserError
from harness.results import RunDir, append_jsonl, read_jsonl, write_json_atomic
from harness.summary import summarize
from harness.table import minilab_tables

GOLDEN = Path(__file__).parent / "fixtures" / "run_v1"


def test_golden_run_rederives_its_summary() -> None:
    stored = json.loads((GOLDEN / "summary.json").read_text())
    derived = summarize(RunDir(GOLDEN))
    assert derived["windows"] == stored["windows"]  # JSON floats round-trip exactly
    assert [a["status"] for a in derived["arms"]] == ["ok", "ok"]
    assert len(minilab_tables(derived)) == 4


def test_unknown_schema_version_is_refused(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(GOLDEN, run)
    record = json.loads((run / "regime.json").read_text())
    record["schema_version"] = 99
    (run / "regime.json").write_text(json.dumps(record))
    with pytest.raises(UserError, match="schema_version 99 is not supported"):
        summarize(RunDir(run))


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
