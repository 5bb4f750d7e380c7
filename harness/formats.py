"""How a speedup and its interval are written, in every view (foundations: plain values in, text out)."""

from __future__ import annotations


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


def range_text(low: float, high: float) -> str:
    """An interval in words for the plain verdict: ``1.22-1.33x``."""
    return f"{bound_text(low)}-{bound_text(high)}x"
