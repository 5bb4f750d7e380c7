"""What both sides of a self-distilled drafter build share: the parent (``distill``, which runs the
engine and publishes) and its torch stages (``train_stages``, child processes) read and write the
same files in the build's work directory and draw the same progress bars. Kept here, apart from
both, so that neither imports the other."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from harness.results.files import read_jsonl

TRUNCATION_FILE = "truncation.json"  # the data stage's account of what total_seq_len cut
WARM_START_FILE = "warm_start.json"  # a warm start's source and the first loss that proved it loaded
METRICS_FILE = "train_metrics.jsonl"  # the trainer's logged steps (losses, accuracies)


def progress_bar(console: Console) -> Progress:
    """One bar per stage: done / total, a note (tokens, loss), elapsed and remaining time."""
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[note]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
    )


def read_answers(path: Path) -> list[dict[str, Any]]:
    """The answers on disk, one per prompt index, in index order. A line cut by a crash is
    ignored: that prompt is asked again."""
    rows: dict[int, dict[str, Any]] = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
                rows[int(row["index"])] = row
            except (ValueError, KeyError, TypeError):
                continue
    return [rows[i] for i in sorted(rows)]


def train_losses(metrics_file: Path) -> list[float]:
    """The training loss of every logged step, in order (the trainer appends a line per step: a
    last line cut by a crash is not read, as in the result files)."""
    if not metrics_file.is_file():
        return []
    rows = read_jsonl(metrics_file)  # the result files' reader: a torn last line skipped
    return [r["train"]["loss"] for r in rows if isinstance(r.get("train"), dict) and "loss" in r["train"]]
