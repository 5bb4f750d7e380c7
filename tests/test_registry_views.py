"""A metric added through the registry alone (a formula on the cell + a registry entry, no view
touched) appears in `bench show`, `bench report` and `bench export`, with its label, its format
and, in the export's data dictionary, its unit, direction and definition."""

from __future__ import annotations

import csv
import re
import signal
from pathlib import Path

import pytest

from harness import cli
from harness.core.metrics import METRICS, Metric
from harness.derive.summary import summarize
from harness.results.model import CellMetrics, Summary
from harness.results.raw import read_raw

RUN = Path(__file__).parent / "fixtures" / "run_v1"

NEW = Metric(
    "output_tokens_per_request",
    "tok/req",
    "tokens/request",
    True,
    "mean",
    "repeat",
    "output tokens of successful requests / successful requests",
    gated=False,
    highlighted=False,
    compared=False,
    fmt=".1f",
    terminal=True,
)


def _formula(cell: CellMetrics) -> float | None:
    """The new metric's formula, from what every cell already stores."""
    return cell.output_tokens / cell.requests_ok if cell.requests_ok else None


@pytest.fixture
def new_metric(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(CellMetrics, NEW.name, property(_formula), raising=False)  # the model field
    monkeypatch.setitem(METRICS, NEW.name, NEW)  # the registry entry


@pytest.fixture
def summary() -> Summary:
    return summarize(read_raw(RUN))


def _bench(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setattr(signal, "signal", lambda *_: None)  # main's handlers stay out of pytest
    assert cli.main(list(args)) == 0
    return capsys.readouterr().out


def _expected(summary: Summary) -> list[str]:
    """The new metric's values, formatted, in the views' row order (window by window)."""
    return [
        f"{_formula(c):.1f}"
        for key in summary.window_keys()
        for c in summary.cells
        if (c.workload, c.level) == key
    ]


@pytest.mark.usefixtures("new_metric")
def test_a_registry_metric_appears_in_show(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], summary: Summary
) -> None:
    out = _bench(monkeypatch, capsys, "show", str(RUN))
    assert out.count("tok/req") == len(summary.window_keys())  # one column header per table
    arms = {a.name for a in summary.arms}
    # the registry's last entry is each mini-lab row's last column
    rows = [line.split() for line in out.splitlines() if line.split() and line.split()[0] in arms]
    assert [row[-1] for row in rows[: len(summary.cells)]] == _expected(summary)


@pytest.mark.usefixtures("new_metric")
def test_a_registry_metric_appears_in_the_report(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path, summary: Summary
) -> None:
    _bench(monkeypatch, capsys, "report", str(RUN), "-o", str(tmp_path / "r.html"))
    html = (tmp_path / "r.html").read_text()
    header = f'<th title="{NEW.description} (tokens/request, higher is better)">tok/req</th>'
    assert html.count(header) == len(summary.window_keys())
    # the last column of each window's first mini-lab table (speedup, throughput and cost), in order
    first_tables = [
        t.split("</table>")[0] for t in html.split('id="minilab"')[1].split('<table class="minilab"')[1:]
    ]
    lasts = [v for table in first_tables for v in re.findall(r"<td>([^<]*)</td>\s*</tr>", table)]
    assert lasts[: len(summary.cells)] == _expected(summary)


@pytest.mark.usefixtures("new_metric")
def test_a_registry_metric_appears_in_the_export(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path, summary: Summary
) -> None:
    _bench(monkeypatch, capsys, "export", str(RUN), "-o", str(tmp_path))
    with (tmp_path / "cells.csv").open() as handle:
        cells = list(csv.DictReader(handle))
    by_key = {(r["arm"], r["workload"], r["concurrency"]): float(r[NEW.name]) for r in cells}
    for cell in summary.cells:
        assert by_key[(cell.arm, cell.workload, str(cell.concurrency))] == pytest.approx(_formula(cell))
    with (tmp_path / "columns.csv").open() as handle:
        entry = next(r for r in csv.DictReader(handle) if r["column"] == NEW.name)
    assert (entry["unit"], entry["direction"], entry["definition"]) == (
        "tokens/request",
        "higher is better",
        NEW.description,
    )


def test_without_the_entry_no_view_shows_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The three tests above fail for want of the entry, not for a column that was always there."""
    assert "tok/req" not in _bench(monkeypatch, capsys, "show", str(RUN))


def test_export_carries_identity_verdict_and_a_full_data_dictionary(tmp_path: Path, summary: Summary) -> None:
    from harness.derive.frames import IDENTITY, TABLES, export, load_run

    export(load_run(RUN), tmp_path)
    with (tmp_path / "columns.csv").open() as handle:
        dictionary = {(r["table"], r["column"]): r for r in csv.DictReader(handle)}
    written = [t for t in TABLES if (tmp_path / f"{t}.csv").exists()]
    assert written == [t for t in TABLES if t != "ramp"]  # a run without a ramp has no ramp table
    for table in written:
        with (tmp_path / f"{table}.csv").open() as handle:
            reader = csv.DictReader(handle)
            rows, columns = list(reader), reader.fieldnames or []
        assert columns[: len(IDENTITY)] == IDENTITY
        assert {r["run_id"] for r in rows} == {summary.run_id}
        assert {r["regime_fingerprint"] for r in rows} == {summary.regime_fingerprint}
        # every column is defined, and its unit stated where it has one
        assert all(dictionary[(table, c)]["definition"] for c in columns)
    assert dictionary[("cells", "output_tok_s")]["unit"] == "tokens/s"
    assert dictionary[("cells", "tpot_ms_p50")]["direction"] == "lower is better"
    assert "position i + 1" in dictionary[("cells", "acceptance_pos_0")]["definition"]
    from harness.derive.verdict import window_verdicts

    with (tmp_path / "cells.csv").open() as handle:
        cells = list(csv.DictReader(handle))
    for verdict in window_verdicts(summary):
        window = [
            r
            for r in cells
            if (r["workload"], r["concurrency"]) == (verdict.workload, str(verdict.concurrency))
        ]
        # the verdict on the row of the arm it is about only (filtering verdict == "pays" finds that
        # arm, not every arm of the window); deploy on the row of the arm to deploy
        assert [(r["arm"], r["verdict"]) for r in window if r["verdict"]] == [
            (verdict.best.arm, verdict.outcome)
        ]
        assert [r["arm"] for r in window if r["deploy"] == "True"] == [verdict.deploy]
