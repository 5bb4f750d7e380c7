"""Every number a view shows for a cell's speedup, parsed back out of the view: the check behind
``tests/test_one_answer.py`` (the stored runs) and the end-to-end test (a fresh run).

What each cell's speedup is comes from the run's summary (``harness.derive.intervals``' one estimate per
cell, stored as ``speedup`` and its ``estimate``, exported as ``speedup``, ``speedup_low``,
``speedup_high``); each view is rendered the way a user gets it (``bench show``, ``bench show
--minilab``, ``bench report``, ``bench export``) and parsed with nothing but the text it printed. A
view that writes a cell's speedup must write that point (two decimals) and, where the cell has one,
that interval (``formats.bound_text``)."""

from __future__ import annotations

import csv
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

from harness.config.level import LoadLevel
from harness.core.formats import bound_text
from harness.derive.summary import summarize
from harness.results.model import Summary

ROOT = Path(__file__).resolve().parent.parent
Shown = tuple[str, str | None, str | None]  # point "1.23", low, high as the views write them
SPEEDUP = re.compile(r"(\d+\.\d+)x\*?(?: \[(\d+\.\d+), (\d+\.\d+)\])?")


def expected(summary: Summary) -> dict[tuple[str, str, str], Shown]:
    """Per speculative cell ``(arm, workload, @level)``: its speedup as every view must write it."""
    found = {}
    for cell in summary.cells:
        if cell.arm == summary.baseline_arm or cell.speedup is None:
            continue
        low, high = (cell.estimate.low, cell.estimate.high) if cell.estimate else (None, None)
        interval = (
            (bound_text(low), bound_text(high)) if low is not None and high is not None else (None, None)
        )
        found[(cell.arm, cell.workload, cell.level.short())] = (f"{cell.speedup:.2f}", *interval)
    return found


def bench(*args: str) -> str:
    env = {**os.environ, "COLUMNS": "1000", "TERM": "dumb", "NO_COLOR": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", *args], capture_output=True, text=True, cwd=ROOT, env=env
    )
    assert proc.returncode in (0, 3), proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.stdout


def shown_numbers(text: str) -> Shown:
    match = SPEEDUP.search(text)
    assert match, f"no speedup in {text!r}"
    return match.group(1), match.group(2), match.group(3)


def _level(label: str) -> str:
    """``concurrency 4`` or ``0.5 req/s (<= 8 in flight)`` as ``@4`` / ``@0.5req/s``."""
    closed = re.match(r"concurrency (\d+)", label)
    if closed:
        return LoadLevel(int(closed.group(1))).short()
    rate = re.match(r"([\d.]+) req/s \(<= (\d+)", label)
    assert rate, label
    return LoadLevel(int(rate.group(2)), float(rate.group(1))).short()


def terminal_cells(text: str, arms: list[str]) -> dict[tuple[str, str, str], Shown]:
    """The speedup column of each mini-lab table ``bench show`` prints."""
    found, window = {}, None
    for line in text.splitlines():
        title = re.match(r"(\S+) \(.*?\) @ (.*?); times in ms", line)
        if title:
            window = (title.group(1), _level(title.group(2)))
            continue
        words = line.split()
        if window and words and words[0] in arms[1:] and SPEEDUP.search(line):  # arms[0]: the baseline
            found[(words[0], *window)] = shown_numbers(line)
        if line.startswith(("Verdict:", "per category", "greedy exactness")):  # the mini-lab tables end
            window = None
    return found


def terminal_verdicts(text: str, arms: list[str]) -> dict[tuple[str, str, str], Shown]:
    """Each window's verdict: the arm it is about, and the number and range of its plain line."""
    found = {}
    for line in text.splitlines():
        head = re.match(r"  (?:PROVISIONAL \(.*?\): )?(\S+) (@\S+): (.*)", line)
        if not head or line.startswith("   "):
            continue
        rest = head.group(3)
        found_at = [(m.start(), a) for a in arms if (m := re.search(rf"\b{a}\b", rest))]
        if not found_at:
            continue
        arm = min(found_at)[1]  # the first arm the line names is the one it is about
        after = rest[rest.index(arm) + len(arm) :]
        point = re.search(r"(\d+\.\d+)x", after)
        own = re.search(r"\(95%: (\d+\.\d+)-(\d+\.\d+)x\)", after)
        assert point, line
        found[(arm, head.group(1), head.group(2))] = (
            point.group(1),
            own.group(1) if own else None,
            own.group(2) if own else None,
        )
    return found


def terminal_categories(text: str, summary: Summary) -> dict[tuple[str, str, str], Shown]:
    """The per-category table, for categories of one workload (their speedup is that cell's)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("per category")), None)
    if start is None:
        return {}
    levels = sorted({c.level for c in summary.categories}, key=LoadLevel.order)
    single = {c.category: c.workloads[0] for c in summary.categories if len(c.workloads) == 1}
    found = {}
    for line in lines[start + 1 :]:
        words = line.split()
        if not words or words[0] not in single or len(words) < 3:
            if found and not line.strip():
                break
            continue
        texts = [m.group(0) for m in SPEEDUP.finditer(line)]
        for level, text in zip(levels, texts, strict=True):
            found[(words[1], single[words[0]], level.short())] = shown_numbers(text)
    return found


def markdown_cells(text: str, level: str) -> dict[tuple[str, str, str], Shown]:
    """``bench show --minilab``: the ``<workload>: speedup`` columns."""
    rows = [line.strip("|").split(" | ") for line in text.splitlines() if line.startswith("| ")]
    header = [h.strip() for h in rows[0]]
    found = {}
    for row in rows[1:]:
        for index, name in enumerate(header):
            if name.endswith(": speedup") and row[index].strip() not in ("-", "1.00x"):
                found[(row[0].strip(), name.removesuffix(": speedup"), level)] = shown_numbers(row[index])
    return found


class _Tables(HTMLParser):
    """Every table of a page: its attributes and its rows of cell texts."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[tuple[dict[str, str | None], list[list[str]]]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self.tables.append((dict(attrs), []))
        elif tag == "tr" and self.tables:
            self.tables[-1][1].append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "br" and self._cell is not None:
            self._cell.append(" ")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self.tables:
            self.tables[-1][1][-1].append(" ".join("".join(self._cell).split()))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def _minilab_rows(attrs: dict[str, str | None], header: list[str], body: list[list[str]]) -> dict:
    rate = attrs.get("data-request-rate")
    level = LoadLevel(int(attrs["data-concurrency"] or 0), float(rate) if rate else None).short()
    column = next(i for i, h in enumerate(header) if h.startswith("speedup"))
    return {
        (r[0], str(attrs["data-workload"]), level): shown_numbers(r[column])
        for r in body
        if r[column] not in ("1.00x", "–")
    }


def _verdict_rows(header: list[str], body: list[list[str]]) -> dict:
    if "speedup [95%]" not in header:
        return {}
    column = header.index("speedup [95%]")
    return {
        (r[2].split(" ")[0], *r[0].split(" ")): shown_numbers(r[column]) for r in body if r[column] != "–"
    }


def _lab_rows(attrs: dict[str, str | None], header: list[str], body: list[list[str]], level: str) -> dict:
    if "speedup" not in header:
        return {}
    column = header.index("speedup")
    workload = str(attrs["data-workload"])
    return {
        (r[0], workload, level): shown_numbers(r[column]) for r in body if r[column] not in ("1.00x", "-")
    }


def _category_rows(body: list[list[str]], summary: Summary) -> dict:
    levels = sorted({c.level for c in summary.categories}, key=LoadLevel.order)
    single = {c.category: c.workloads[0] for c in summary.categories if len(c.workloads) == 1}
    found = {}
    for row in body:
        if row[0] in single:
            texts = [t for t in row[2:] if SPEEDUP.fullmatch(t)]
            for level, text in zip(levels, texts, strict=True):
                found[(row[1], single[row[0]], level.short())] = shown_numbers(text)
    return found


def report_cells(html: str, summary: Summary) -> dict[str, dict[tuple[str, str, str], Shown]]:
    """``bench report``: the mini-lab tables' speedup column, the verdict table, the lab tables (at
    the lab's level) and the per-category table (categories of one workload)."""
    parser = _Tables()
    parser.feed(html)
    views: dict[str, dict[tuple[str, str, str], Shown]] = {
        "minilab": {},
        "verdict": {},
        "lab": {},
        "categories": {},
    }
    lab = re.search(r"One row per arm at (.*?) \(", html)
    for attrs, rows in parser.tables:
        kind, header, body = attrs.get("class"), rows[0], rows[1:]
        if kind == "minilab":
            views["minilab"] |= _minilab_rows(attrs, header, body)
        elif kind == "verdict":
            views["verdict"] |= _verdict_rows(header, body)
        elif kind == "lab" and lab:
            views["lab"] |= _lab_rows(attrs, header, body, _level(lab.group(1)))
        elif kind == "categories":
            views["categories"] |= _category_rows(body, summary)
    return views


def export_cells(folder: Path, summary: Summary) -> dict[tuple[str, str, str], Shown]:
    """``bench export``: cells.csv's speedup and interval columns, written as the views write them."""
    found = {}
    with (folder / "cells.csv").open() as handle:
        for row in csv.DictReader(handle):
            if row["arm"] == summary.baseline_arm or not row["speedup"]:
                continue
            rate = float(row["request_rate"]) if row["request_rate"] else None
            level = LoadLevel(int(row["concurrency"]), rate).short()
            low, high = row["speedup_low"], row["speedup_high"]
            found[(row["arm"], row["workload"], level)] = (
                f"{float(row['speedup']):.2f}",
                bound_text(float(low)) if low else None,
                bound_text(float(high)) if high else None,
            )
    return found


def every_view(run_dir: Path, tmp_path: Path) -> dict[str, dict[tuple[str, str, str], Shown]]:
    """Each view of a run, rendered by the commands and parsed back."""
    summary = summarize(run_dir)
    speculative = [a.name for a in summary.arms if a.name != summary.baseline_arm]
    shown = bench("show", str(run_dir))
    views = {
        "bench show: tables": terminal_cells(shown, [summary.baseline_arm, *speculative]),
        "bench show: verdict": terminal_verdicts(shown, speculative),
        "bench show: categories": terminal_categories(shown, summary),
    }
    lab_level = summary.levels()[0]
    views["bench show --minilab"] = markdown_cells(
        bench("show", str(run_dir), "--minilab"), lab_level.short()
    )
    page = tmp_path / "report.html"
    bench("report", str(run_dir), "-o", str(page))
    views |= {f"bench report: {k}": v for k, v in report_cells(page.read_text(), summary).items()}
    bench("export", str(run_dir), "-o", str(tmp_path / "export"))
    views["bench export"] = export_cells(tmp_path / "export", summary)
    return views


def disagreements(run_dir: Path, tmp_path: Path) -> list[str]:
    """Every cell a view shows with another speedup or interval than the run's one estimate. The views
    read a copy of the run with its ``analysis.json`` as a finished run has it (the runner writes
    it; each command checks it against the raw files), so the verdicts' simulations run once here,
    not once per command (tests/test_one_answer.py derives without it)."""
    from harness.derive.analysis import analyze, write_analysis

    copy = tmp_path / "runs" / run_dir.name
    shutil.copytree(run_dir, copy)
    write_analysis(copy, analyze(summarize(copy)))
    run_dir = copy
    truth = expected(summarize(run_dir))
    problems = []
    for view, cells in every_view(run_dir, tmp_path).items():
        if not cells:
            problems.append(f"{view}: shows no speedup at all")
        for key, shown in cells.items():
            if key not in truth:
                problems.append(f"{view}: {key} shows {shown}, a cell with no speedup")
            elif shown != truth[key]:
                problems.append(f"{view}: {key} shows {shown}, the estimate is {truth[key]}")
    return problems
