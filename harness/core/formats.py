"""How a speedup and its interval are written, in every view, and text from outside made inert
(foundations: plain values in, text out)."""

from __future__ import annotations

import re
from typing import Any


def bound_text(value: float) -> str:
    """An interval's bound for the reader: two decimals, more where two would put it on 1 or across
    it (0.9953 as "0.995", not "1.00", which would read as "touches 1" under an interval that does
    not; 1.004 as "1.004" under "pays"), so that the verdict can be read off the numbers shown."""
    for decimals in (2, 3, 4, 5, 6):
        shown = round(value, decimals)
        if value == 1.0 or (shown - 1.0) * (value - 1.0) > 0:
            break
    return f"{value:.{decimals}f}"


def interval_text(low: float, high: float) -> str:
    """``[low, high]`` with ``bound_text``: every view writes a speedup's interval with it."""
    return f"[{bound_text(low)}, {bound_text(high)}]"


def speedup_text(point: float, low: float | None = None, high: float | None = None) -> str:
    """``1.28x [1.22, 1.33]``, or ``1.28x`` without an interval: a cell's speedup wherever it is shown."""
    head = f"{point:.2f}x"
    return head if low is None or high is None else f"{head} {interval_text(low, high)}"


def estimate_text(point: float, low: float | None, high: float | None, rounds: int) -> str:
    """A stored speedup estimate in words: ``speedup_text`` with its interval, else the point, its
    side of 1 and why it is unverified (``rounds`` of start-ups: 1 never measured their spread)."""
    if low is None or high is None:
        side = "faster" if point > 1.0 else "slower" if point < 1.0 else "no change"
        why = "start-up spread not measured" if rounds <= 1 else "no interval"
        return f"{point:.2f}x ({side}, unverified: {why})"
    return speedup_text(point, low, high)


def change_text(change: float, higher_is_better: bool) -> str:
    """A relative change against a reference in words, its direction read for the metric:
    ``2.6% lower (better)`` for a latency, ``2.6% lower (worse)`` for a throughput; never a signed
    "worse" that a minus sign turns into "better"."""
    if round(100 * change, 1) == 0:
        return "no change (0.0%)"
    better = (change > 0) == higher_is_better
    return (
        f"{abs(100 * change):.1f}% {'higher' if change > 0 else 'lower'} ({'better' if better else 'worse'})"
    )


def k_text(k: int | None, without: str = "") -> str:
    """An arm's draft depth, ``K=4``, wherever it is shown; ``without`` where it drafts nothing."""
    return f"K={k}" if k else without


def arm_label(method: str, k: int | None) -> str:
    """``eagle3 K=4``: an arm's method and draft depth (the method alone where it drafts nothing)."""
    return f"{method} {k_text(k)}" if k else method


def range_text(low: float, high: float) -> str:
    """An interval in words for the plain verdict: ``1.22-1.33x``."""
    return f"{bound_text(low)}-{bound_text(high)}x"


# Control characters (C0 but newline and tab, DEL, C1) in text from outside (an engine's log or
# error body, a server's reply): written as escapes, so that no terminal, Markdown page, JUnit file
# or log line acts on them (an ESC sequence recolours a terminal; a NUL truncates a C string).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def inert(text: str) -> str:
    """``text`` with its control characters as visible escapes (``\\x1b``), newlines and tabs kept."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def inert_tree(value: Any) -> Any:
    """A JSON value (a server's reply) with every string in it, keys too, made ``inert``."""
    if isinstance(value, str):
        return inert(value)
    if isinstance(value, dict):
        return {inert(str(k)): inert_tree(v) for k, v in value.items()}
    if isinstance(value, list):
        return [inert_tree(v) for v in value]
    return value


# A spreadsheet reads a cell that starts with one of these as a formula (=HYPERLINK(...), +cmd|'...',
# @SUM(...)), a tab or carriage return before one too: OWASP's CSV injection
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return text == text.strip()


def csv_cell(value: Any) -> Any:
    """A CSV cell: text ``inert``, and prefixed with a single quote where a spreadsheet would read it
    as a formula (OWASP); a number, a text that is one (``-1.5``) and a lone ``-`` stay as they are,
    so that a negative number is still a number."""
    if not isinstance(value, str):
        return value
    if value.startswith(_FORMULA_START) and value != "-" and not _is_number(value):
        value = "'" + value
    return inert(value)
