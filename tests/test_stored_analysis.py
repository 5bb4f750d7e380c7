"""One source per cell (issue 70, part 4): a stored ``analysis.json`` cannot make a view say what its
own table contradicts.

The cache is keyed by a digest of the raw files and the code, and the digest sits in the file it
keys: whoever edits the file can keep it. On the main this issue started from, ``analysis.json``
with its verdict's estimate edited to 3.33x [3.10, 3.50] (the digest kept) made ``bench show``,
``report`` and ``export`` say "ngram_k4 pays: 3.33x" beside a table of the cell's own 1.18x, and a
3 GB file was read whole (a MemoryError). Now every stored analysis is checked against what the raw
files give (the summary summarised again, every cheap part derived again, each verdict's figures
and choice against the cells) and derived again, with one line on stderr, on any difference; a file
over the size limit is never read.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import pytest

from harness.cli import main
from harness.derive import analysis as cache
from harness.derive import verdict as verdicts_of
from harness.derive.analysis import (
    ANALYSIS_FILE,
    ANALYSIS_VERSION,
    analyze,
    load_analysis,
    raw_digest,
    write_analysis,
)
from harness.derive.summary import summarize
from harness.results.files import line_digest, sums_path

FIXTURES = Path(__file__).parent / "fixtures"
RUN = FIXTURES / "run_v14_default"  # one window: ngram_k4 1.18x [1.05, 1.32] pays, 4 rounds
MISMATCH = "analysis.json did not match the raw files: derived again"


def _stored(tmp_path: Path, source: Path = RUN) -> Path:
    """A copy of a stored run with a fresh ``analysis.json`` and its raw lines counted (as the
    runner leaves them: this file's tests read every line on stderr)."""
    run = _counted(tmp_path, source)
    write_analysis(run, analyze(summarize(run)))
    return run


def _counted(tmp_path: Path, source: Path = RUN) -> Path:
    """A copy of a stored run with its raw lines counted, as the runner now writes them."""
    run = tmp_path / "run"
    shutil.copytree(source, run)
    for path in run.glob("arms/*/*.jsonl"):
        lines = [line for line in path.read_text().splitlines() if line.strip()]
        sums_path(path).write_text("".join(line_digest(line) + "\n" for line in lines))
    return run


def _edit(run: Path, change) -> None:
    """Edit the stored analysis in place, keeping its version and digest (what a tamperer can do)."""
    path = run / ANALYSIS_FILE
    stored = json.loads(path.read_text())
    change(stored["analysis"])
    path.write_text(json.dumps(stored))


def _views(run: Path, tmp_path: Path, capsys) -> tuple[dict[str, str], str]:
    """What show, show --minilab, report and export write of a run (stdout and the files), and
    everything they said on stderr."""
    shown, errors = {}, ""
    for name, args in (
        ("show", ["show", str(run)]),
        ("minilab", ["show", str(run), "--minilab"]),
        ("report", ["report", str(run), "-o", str(tmp_path / "page.html")]),
        ("export", ["export", str(run), "-o", str(tmp_path / "export"), "--force"]),
    ):
        assert main(args) == 0
        out = capsys.readouterr()
        shown[name], errors = out.out.replace(str(tmp_path), "TMP"), errors + out.err
    shown["page"] = (tmp_path / "page.html").read_text()
    shown["cells"] = (tmp_path / "export" / "cells.csv").read_text()
    return shown, errors


def _verdict_estimate(analysis: dict) -> None:
    analysis["verdicts"][0]["estimate"].update(point=3.33, low=3.10, high=3.50)


def _cell_and_verdict(analysis: dict) -> None:
    """The issue's case: the cell's figures (the table's) and the verdict's made to disagree."""
    (cell,) = [c for c in analysis["summary"]["cells"] if c["arm"] == "ngram_k4"]
    cell.update(speedup=1.67, estimate={**(cell["estimate"] or {}), "low": 0.0, "high": 4826.69})
    _verdict_estimate(analysis)


def _rival(analysis: dict) -> None:
    """A verdict that names a rival the window never measured."""
    (verdict,) = analysis["verdicts"]
    verdict["rivals"] = [{"arm": "ngram_k9", "estimate": verdict["estimate"], "pays": True, "slower": False}]


def _findings(analysis: dict) -> None:
    analysis["ratio_differs"] = ["ngram_k4 code_humaneval @1"]


def _to_decide(analysis: dict) -> None:
    """A decided window given rounds to decide it (the one figure not derived again on reading)."""
    analysis["verdicts"][0]["to_decide"] = 9


@pytest.mark.parametrize("change", [_verdict_estimate, _cell_and_verdict, _rival, _findings, _to_decide])
def test_a_tampered_analysis_is_derived_again_in_every_view(change, tmp_path: Path, capsys) -> None:
    """Every view of a run whose ``analysis.json`` was edited (its digest kept) shows what the raw
    files give, byte for byte as from a fresh one, and says once per command that it derived it
    again; the export's row carries the speedup its verdict rests on."""
    run = _stored(tmp_path)
    truth, quiet = _views(run, tmp_path, capsys)
    assert quiet == ""  # a fresh analysis: read, nothing to say
    _edit(run, change)
    shown, said = _views(run, tmp_path, capsys)
    assert shown == truth
    assert "3.33" not in shown["show"] and "4826.69" not in shown["show"]
    assert said.splitlines() == [MISMATCH] * 4  # one line per command
    (row,) = [r for r in csv.DictReader(io.StringIO(shown["cells"])) if r["arm"] == "ngram_k4"]
    assert (round(float(row["speedup"]), 2), row["verdict"]) == (1.18, "pays")


@pytest.mark.parametrize(
    "source", ["run_v14_default", "run_v14_slower_pays", "run_v14_undecided", "run_v12_default"]
)
def test_a_fresh_analysis_is_read_not_derived(
    source: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check never fails a true analysis: a fresh one is read as stored, with no note, and the
    costly part of deriving (the rounds an undecided window would need: a simulation of seconds)
    is not done again."""
    run = _stored(tmp_path, FIXTURES / source)
    stored = json.loads((run / ANALYSIS_FILE).read_text())
    calls: list[object] = []
    monkeypatch.setattr(verdicts_of, "_to_decide", lambda *a: calls.append(a))
    monkeypatch.setattr(verdicts_of, "rounds_to_decide", lambda *a, **k: calls.append(a))
    loaded = load_analysis(run)
    monkeypatch.undo()
    assert loaded.note is None and calls == []
    assert json.loads((run / ANALYSIS_FILE).read_text()) == stored
    assert loaded.analysis == analyze(summarize(run))


def test_a_3gb_analysis_is_derived_again_never_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """A 3 GB ``analysis.json`` (sparse: a valid head, then zeros; nothing of 3 GB is allocated)
    is not read: its size is looked at first and the analysis derived again, with the line."""
    run = _counted(tmp_path)
    path = run / ANALYSIS_FILE
    head = f'{{"analysis_version": {ANALYSIS_VERSION}, "digest": "{raw_digest(run)}", "analysis": '
    with path.open("w") as handle:
        handle.write(head)
        handle.truncate(3 * 2**30)
    assert path.stat().st_size == 3 * 2**30
    read: list[int] = []
    real_open = io.open

    def guarded(file, mode="r", *args, **kwargs):
        handle = real_open(file, mode, *args, **kwargs)
        if Path(str(file)).name != ANALYSIS_FILE or "r" not in mode:
            return handle
        real_read = handle.read

        def read_some(size=-1):
            if size is None or size < 0:
                raise AssertionError(f"{file} read whole")
            data = real_read(size)
            read.append(len(data))
            return data

        handle.read = read_some  # type: ignore[method-assign]
        return handle

    monkeypatch.setattr(io, "open", guarded)
    monkeypatch.setattr("builtins.open", guarded)
    loaded = load_analysis(run)
    assert sum(read) <= cache.MAX_ANALYSIS_BYTES + 1 < 3 * 2**30
    assert loaded.analysis == analyze(summarize(run))
    assert loaded.note is not None and "derived again" in loaded.note
    assert main(["show", str(run)]) == 0
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "over" in err and "derived again" in err


def test_an_unreadable_analysis_is_derived_again_with_a_line(tmp_path: Path, capsys) -> None:
    """A stored analysis cut short, or one whose JSON is not the analysis's type, is derived again;
    the command says so on stderr, and stdout is what a fresh analysis gives."""
    run = _stored(tmp_path)
    assert main(["show", str(run)]) == 0
    truth = capsys.readouterr()
    assert truth.err == ""
    text = (run / ANALYSIS_FILE).read_text()
    for broken in (text[: len(text) // 2], text.replace('"verdicts":[', '"verdicts":[7,')):
        assert broken != text
        (run / ANALYSIS_FILE).write_text(broken)
        assert main(["show", str(run)]) == 0
        out = capsys.readouterr()
        assert out.out == truth.out
        assert len(out.err.splitlines()) == 1 and "derived again" in out.err


def test_a_stale_analysis_is_derived_again_quietly(tmp_path: Path, capsys) -> None:
    """A raw file changed after the analysis was stored (the runner's next start-up, a resumed run)
    or another harness wrote it: derived again, and nothing to warn about."""
    run = _stored(tmp_path)
    assert main(["show", str(run)]) == 0
    truth = capsys.readouterr().out
    with (run / "timing.json").open("a") as handle:
        handle.write("\n")
    assert main(["show", str(run)]) == 0
    out = capsys.readouterr()
    assert (out.out, out.err) == (truth, "")


@pytest.mark.parametrize(
    "name", ["workload_pass.json", "arms/baseline/workload_pass.jsonl", "arms/baseline/margins.jsonl"]
)
def test_the_covariates_and_the_margins_files_are_raw_files_of_the_analysis(
    tmp_path: Path, name: str
) -> None:
    """The workload pass (issue 81: the covariate's workload mean) and the margins' logprobs change
    what derive says: a stored analysis is not kept where one of them was written or edited."""
    from harness.derive.analysis import raw_digest

    run = _stored(tmp_path)
    before = raw_digest(run)
    (run / name).write_text("{}\n")
    assert raw_digest(run) != before
