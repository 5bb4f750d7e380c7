"""A scheduled arm's checks in words (present layer): against the best static K of its method at
each level, over every level, and on a ramp (``harness.derive.schedule`` derives them)."""

from __future__ import annotations

from harness.core.formats import speedup_text
from harness.derive.schedule import LevelCheck, RampCheck, ScheduleCheck


def level_verdict(level: LevelCheck) -> str:
    """The scheduled arm against the fastest static arm of its method at one level (or ramp span)."""
    found = level.against_best
    if found is None:
        return "no static arm measured"
    if found.low is None or found.high is None:
        return f"{speedup_text(found.point)} the best static ({level.best_static}), unverified: no interval"
    bounds = speedup_text(found.point, found.low, found.high)
    if found.high < 1:
        return f"loses to the best static ({level.best_static}) by {100 * (1 - found.point):.0f}%: {bounds}"
    if found.low > 1:
        return f"beats the best static ({level.best_static}): {bounds}"
    return f"within noise of the best static ({level.best_static}): {bounds}"


def schedule_lines(check: ScheduleCheck) -> list[str]:
    """Over the levels: against each static arm, whether it trails the best static anywhere, and
    whether it ever loses to the baseline."""
    out = []
    for static, found in sorted(check.over.items()):
        if found.low is None or found.high is None:
            point = speedup_text(found.point)
            out.append(f"{check.arm} / {static} over the levels: {point} (unverified: no interval)")
            continue
        word = "beats" if found.low > 1 else "loses to" if found.high < 1 else "is within noise of"
        bounds = speedup_text(found.point, found.low, found.high)
        out.append(f"{check.arm} {word} {static} over the levels (geometric mean): {bounds}")
    losing = [
        lv
        for lv in check.levels
        if lv.against_best is not None and lv.against_best.high is not None and lv.against_best.high < 1
    ]
    baseline = [lv for lv in check.levels if lv.speedup is not None and lv.speedup.verdict == "loses"]
    out.append(
        "within noise of the best static arm, or better, at every level"
        if not losing
        else "behind the best static arm at "
        + ", ".join(f"{lv.workload}@{lv.concurrency} ({level_verdict(lv)})" for lv in losing)
    )
    out.append(
        "never loses to the baseline"
        if not baseline
        else "loses to the baseline at "
        + ", ".join(f"{lv.workload}@{lv.concurrency} ({lv.speedup.text()})" for lv in baseline)  # type: ignore[union-attr]
    )
    return out


def ramp_line(check: RampCheck) -> str:
    """The scheduled arm over the whole ramp: over the baseline, against each static arm, and the verdict."""
    whole = next((level for label, level in check.spans if label == "whole ramp"), None)
    if whole is None:
        return f"{check.arm} on the ramp ({check.workload}): not measured"
    against = "; ".join(f"vs {static} {found.text()}" for static, found in sorted(whole.against.items()))
    speed = whole.speedup.text() if whole.speedup is not None else "unmeasured"
    return (
        f"{check.arm} on the whole ramp ({check.workload}): {speed} over the baseline"
        + (f"; {against}" if against else "")
        + f"; {level_verdict(whole)}"
    )
