"""The terminal the views print to: its width, a console of that width, prose wrapped to it, and
tables that fit it.

Piped output has no terminal to ask, so ``COLUMNS`` decides its width (as a shell sets it, and as a
user sets it for ``bench show RUN | less``), else ``DEFAULT_WIDTH``; a terminal is asked directly.
A table wider than the console is stacked: its key columns (arm, method) repeated over several
tables, each holding as many value columns as fit, so a number is never split across lines.
"""

from __future__ import annotations

import io
import os
import sys
import textwrap
from dataclasses import dataclass, field

from rich import box
from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Table
from rich.text import Text

DEFAULT_WIDTH = 100  # piped output without COLUMNS: wide enough for the verdict lines' start


def width() -> int:
    """The width the views lay out for: the terminal's, else ``COLUMNS``, else ``DEFAULT_WIDTH``."""
    if sys.stdout.isatty():
        return Console().width
    try:
        return max(int(os.environ.get("COLUMNS", "")), 20)
    except ValueError:
        return DEFAULT_WIDTH


def console() -> Console:
    """The console every command prints to, ``width()`` wide."""
    return Console() if sys.stdout.isatty() else Console(width=width())


def wrap(text: str, columns: int | None = None, indent: str = "") -> str:
    """Prose wrapped to ``columns`` (default: ``width()``), continuation lines indented by
    ``indent`` plus two spaces; words (numbers, arm names) are never broken."""
    return textwrap.fill(
        text,
        width=columns or width(),
        initial_indent=indent,
        subsequent_indent=indent + "  ",
        break_long_words=False,
        break_on_hyphens=False,
    )


@dataclass(frozen=True)
class Column:
    header: str  # "\n" between header lines
    text: bool = False  # left-aligned text (arm, method); values are right-aligned
    wraps: bool = False  # long prose that may wrap inside its column (the table's last column)


@dataclass
class FitTable:
    """A table laid out at print time for the console's width: one table when it fits, else the
    ``keys`` columns repeated over as many tables as it takes (a stacked layout)."""

    title: str
    keys: list[Column]
    columns: list[Column]
    rows: list[list[str]] = field(default_factory=list)  # keys' cells then columns' cells, rich markup

    def add_row(self, *cells: str) -> None:
        self.rows.append(list(cells))

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        # the title above the table, not in it: rich would wrap a title to the table's width
        for index, group in enumerate(self._groups(options.max_width)):
            yield Text(self.title if index == 0 else f"{self.title} (continued)")
            yield self._table(group)

    def _table(self, group: list[int]) -> Table:
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
        keys = len(self.keys)
        for column in [*self.keys, *(self.columns[i] for i in group)]:
            table.add_column(
                column.header,
                justify="left" if column.text or column.wraps else "right",
                no_wrap=not column.wraps,
                overflow="fold",
            )
        for row in self.rows:
            table.add_row(*row[:keys], *(row[keys + i] for i in group))
        return table

    def _groups(self, max_width: int) -> list[list[int]]:
        """Value columns packed in order into groups that fit ``max_width`` next to the keys; a
        wrapping column only needs room for its longest word. A last group of one column takes the
        one before it from the group before (where it still fits): a continued table of a single
        column reads as a stray, not as the rest of the table."""
        groups: list[list[int]] = [[]]
        for index in range(len(self.columns)):
            candidate = [*groups[-1], index]
            if groups[-1] and self._width(candidate) > max_width:
                groups.append([index])
            else:
                groups[-1] = candidate
        if len(groups) > 1 and len(groups[-1]) == 1 and len(groups[-2]) > 2:
            moved = [groups[-2][-1], *groups[-1]]
            if self._width(moved) <= max_width:
                groups[-2:] = [groups[-2][:-1], moved]
        return groups

    def _width(self, group: list[int]) -> int:
        """How wide the table of ``group`` prints when nothing wraps, less what its wrapping columns
        can give up (down to their longest word, at least 24 characters)."""
        probe = Console(width=10_000, file=io.StringIO(), color_system=None)
        with probe.capture() as captured:
            probe.print(self._table(group))
        natural = max((len(line.rstrip()) for line in captured.get().splitlines()), default=0)
        keys = len(self.keys)
        for index in (i for i in group if self.columns[i].wraps):
            cells = [row[keys + index] for row in self.rows]
            longest = max((len(cell) for cell in cells), default=0)
            word = max((len(w) for cell in cells for w in cell.split()), default=0)
            natural -= max(longest - max(word, 24), 0)
        return natural
