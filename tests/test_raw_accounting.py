"""Every raw line accounted for (issue 79, item 5): each JSONL line's digest is written beside it
(``<file>.sums``), and every reader names a line missing, edited or added since, per file, leaving
the damaged arm's lines out of every figure; a continuation refuses such a run. A stored run is
sealed here by writing its lines again through the harness's own writer (``append_jsonl``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.results.files import RunDir, append_jsonl, check_lines, read_jsonl, sums_path
from harness.results.raw import raw_damage, read_raw, unchecked_note

ROOT = Path(__file__).resolve().parent.parent
STORED = ROOT / "tests" / "fixtures" / "run_v14_default"  # baseline + ngram_k4, 120 requests, 4 windows each


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "TERM": "dumb", "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *args], capture_output=True, text=True, cwd=ROOT, env=env
    )


@pytest.fixture
def sealed(tmp_path: Path) -> Path:
    """A copy of the stored run whose JSONL lines were written by ``append_jsonl`` (with sums)."""
    run = tmp_path / "run"
    shutil.copytree(STORED, run)
    (run / "analysis.json").unlink()
    for path in sorted(run.glob("arms/*/*.jsonl")):
        rows = read_jsonl(path)
        path.unlink()
        for row in rows:
            append_jsonl(path, row)
    return run


def _drop_line(path: Path, number: int) -> None:
    lines = path.read_text().splitlines(keepends=True)
    del lines[number - 1]
    path.write_text("".join(lines))


def test_every_appended_line_has_its_digest(tmp_path: Path) -> None:
    path = tmp_path / "samples.jsonl"
    for n in range(3):
        append_jsonl(path, {"n": n})
    assert len(sums_path(path).read_text().splitlines()) == 3
    assert check_lines(path).problems(finished=True) == []


def test_show_names_a_missing_middle_samples_line_and_sums_nothing_of_it(sealed: Path) -> None:
    _drop_line(sealed / "arms" / "ngram_k4" / "samples.jsonl", 57)
    proc = _bench("show", str(sealed))
    said = proc.stdout + proc.stderr
    assert "ngram_k4/samples.jsonl: line 57 of 120 written missing" in said
    raw = read_raw(sealed)
    assert raw.arms["ngram_k4"].samples == [] and raw.arms["ngram_k4"].windows == []  # left out whole
    assert len(raw.arms["baseline"].samples) == 120


def test_a_lost_windows_line_is_named_not_a_round_fewer(sealed: Path) -> None:
    _drop_line(sealed / "arms" / "baseline" / "windows.jsonl", 2)
    notes = read_raw(sealed).unread.notes
    assert any("baseline/windows.jsonl: line 2 of 4 written missing" in n for n in notes), notes


def test_an_edited_and_an_added_line_are_named(sealed: Path) -> None:
    path = sealed / "arms" / "ngram_k4" / "samples.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    lines[9] = lines[9].replace('"repeat": 0', '"repeat": 1', 1)
    lines.insert(20, lines[30])
    path.write_text("".join(lines))
    problems = check_lines(path).problems(finished=True)
    assert "line 10 edited since written" in problems
    assert "line 21 not written by the harness (added since)" in problems


def test_a_continuation_of_a_damaged_run_refuses_naming_file_and_line(sealed: Path) -> None:
    _drop_line(sealed / "arms" / "ngram_k4" / "samples.jsonl", 57)
    assert raw_damage(RunDir(sealed))
    proc = _bench("run", "--resume", str(sealed), "--rounds", "7")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    said = proc.stdout + proc.stderr
    assert "samples.jsonl: line 57 of 120 written missing" in said and "--remeasure-damaged" in said
    assert "Traceback" not in said


def test_a_crash_mid_write_stays_a_torn_line_not_damage(tmp_path: Path) -> None:
    """A torn last line (a write cut by a crash) is what it was: skipped and noted, and an arm that
    did not finish is not damaged by it, nor by a line whose digest the crash cut off."""
    path = tmp_path / "samples.jsonl"
    append_jsonl(path, {"n": 0})
    with open(path, "a") as handle:  # a line written whole, its digest never
        handle.write('{"n": 1}\n{"n": 2, "cut')
    check = check_lines(path)
    assert check.problems(finished=False) == []
    assert check.problems(finished=True) == [
        "line 2 without a digest (written as the run was cut, or added since)",
        "line 3 torn (cut short)",
    ]


def test_a_run_written_before_lines_were_counted_loads_with_one_line(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(STORED, run)
    assert read_raw(run).unread.notes == []  # read as today: nothing named damaged
    note = unchecked_note(run)
    assert note is not None and "cannot be named" in note
    proc = _bench("show", str(run))
    assert proc.returncode == 0 and proc.stderr.count("cannot be named") == 1


def test_continuing_an_old_file_keeps_its_lines_said_unchecked(tmp_path: Path) -> None:
    path = tmp_path / "arms" / "a" / "samples.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text('{"n": 0}\n{"n": 1}\n')  # written before lines were counted
    append_jsonl(path, {"n": 2})
    check = check_lines(path)
    assert check.unchecked == 2 and check.problems(finished=True) == []
    assert unchecked_note(tmp_path) is not None  # the continuation removed no notice
