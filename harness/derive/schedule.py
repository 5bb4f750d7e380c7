"""The proof of a K schedule: an arm with a ``k_schedule`` against every static-K arm of its method
and the baseline, in one run (the same start-ups, the same baseline).

Per cell (workload, load level): the schedule's speedup over the baseline, and its ratio to each
static arm's. Two arms measured against one baseline share its start-ups, so the baseline cancels in
their ratio; in the balanced arms x rounds model the standard error of a difference of two arms' log
speedups is the cell's own (``harness.derive.intervals``), and where their stored errors differ the larger
is taken, with the fewer degrees of freedom (conservative, as ``study.analysis.best_k``). Over the
levels, the geometric mean of the ratios with the mean of the errors: the levels ran on the same
start-ups, so their errors are not independent, and the mean is the bound that assumes nothing.

The verdict per level: within noise of the best static arm (the ratio's interval holds 1), better,
or worse (by how much); and whether the schedule loses to the baseline there. What the engine ran
is read back from its counters: drafted tokens per draft (vLLM counts each proposal; a window whose
batch stayed where the schedule says 0 drafts nothing).

Pure: the run's summary cells and its arms' schedules in, the checks out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from harness.derive.intervals import Estimate, stored_estimate
from harness.results.model import ArmSummary, CellMetrics, RampStageMetrics


def scheduled_k(schedule: Sequence[Sequence[int]], batch_size: int) -> int:
    """The K a schedule gives ``batch_size`` (the last range's K above it, as vLLM carries it)."""
    for start, end, k in schedule:
        if start <= batch_size <= end:
            return k
    return schedule[-1][2] if schedule else 0


def _estimate(cell: CellMetrics | RampStageMetrics) -> Estimate | None:
    return stored_estimate(cell.speedup, cell.estimate)


def _with_interval(
    point: float, rounds: int, df: int, log_se: float, looks: int, first_look: int | None
) -> Estimate:
    """An estimate with its t interval at its level (``Estimate.level``: the design's looks)."""
    found = Estimate(point, rounds=rounds, df=df, log_se=log_se, looks=looks, first_look=first_look)
    low, high = found.bounds()  # type: ignore[misc]
    return replace(found, low=low, high=high)


def ratio(a: Estimate, b: Estimate) -> Estimate:
    """a / b for two arms against one baseline in one cell, with the interval of the difference."""
    point = a.point / b.point
    if a.log_se is None or b.log_se is None or a.df < 1 or b.df < 1:
        return Estimate(point, rounds=min(a.rounds, b.rounds))
    log_se, df = max(a.log_se, b.log_se), min(a.df, b.df)
    design = max(a, b, key=lambda e: e.looks)  # one run: both arms had the same design
    return _with_interval(point, min(a.rounds, b.rounds), df, log_se, design.looks, design.first_look)


def over_levels(ratios: Sequence[Estimate]) -> Estimate | None:
    """The geometric mean of per-level ratios, with the mean of their errors (see the module)."""
    if not ratios:
        return None
    point = math.exp(sum(math.log(r.point) for r in ratios) / len(ratios))
    if any(r.log_se is None or r.df < 1 for r in ratios):
        return Estimate(point, rounds=min(r.rounds for r in ratios))
    log_se = sum(r.log_se for r in ratios) / len(ratios)  # type: ignore[misc]
    df = min(r.df for r in ratios)
    design = max(ratios, key=lambda r: r.looks)
    return _with_interval(point, min(r.rounds for r in ratios), df, log_se, design.looks, design.first_look)


def drafted_per_draft(cell: CellMetrics) -> float | None:
    """Drafted tokens per draft in the window: the K the engine ran, on average (0: no draft)."""
    if cell.method == "baseline":
        return None
    return cell.draft_tokens / cell.drafts if cell.drafts > 0 else 0.0


@dataclass(frozen=True)
class LevelCheck:
    workload: str
    concurrency: int
    scheduled_k: int
    drafted_per_draft: float | None
    speedup: Estimate | None  # the schedule's, over the baseline
    best_static: str | None  # the fastest static arm of the method at this level
    against: dict[str, Estimate]  # static arm -> schedule / static

    @property
    def against_best(self) -> Estimate | None:
        return self.against.get(self.best_static) if self.best_static else None

    def baseline_verdict(self) -> str:
        return self.speedup.verdict if self.speedup is not None else "unmeasured"


@dataclass(frozen=True)
class ScheduleCheck:
    arm: str
    method: str
    schedule: list[tuple[int, int, int]]
    source: str | None
    levels: list[LevelCheck]
    over: dict[str, Estimate]  # static arm -> geometric mean over the levels of schedule / static


def schedule_checks(arms: Sequence[ArmSummary], cells: Sequence[CellMetrics]) -> list[ScheduleCheck]:
    """One check per scheduled arm that has static arms of its method (or a baseline) in the run."""
    out = []
    by_arm: dict[str, dict[tuple[str, int], CellMetrics]] = {}
    for cell in cells:
        if cell.request_rate is None:  # closed-loop levels: the batch size is the concurrency
            by_arm.setdefault(cell.arm, {})[(cell.workload, cell.concurrency)] = cell
    for arm in arms:
        if not arm.k_schedule or arm.name not in by_arm:
            continue
        statics = [a.name for a in arms if a.method == arm.method and not a.k_schedule and a.name in by_arm]
        levels = []
        ratios: dict[str, list[Estimate]] = {s: [] for s in statics}
        for key, cell in sorted(by_arm[arm.name].items()):
            mine = _estimate(cell)
            against = {}
            for static in statics:
                theirs = by_arm[static].get(key)
                found = _estimate(theirs) if theirs is not None else None
                if mine is not None and found is not None:
                    against[static] = ratio(mine, found)
                    ratios[static].append(against[static])
            speeds = {
                s: by_arm[s][key].speedup for s in statics if key in by_arm[s] and by_arm[s][key].speedup
            }
            best = max(speeds, key=lambda s: speeds[s]) if speeds else None  # type: ignore[arg-type, return-value]
            levels.append(
                LevelCheck(
                    key[0],
                    key[1],
                    scheduled_k(arm.k_schedule, key[1]),
                    drafted_per_draft(cell),
                    mine,
                    best,
                    against,
                )
            )
        over = {s: found for s, r in ratios.items() if (found := over_levels(r)) is not None}
        out.append(
            ScheduleCheck(arm.name, arm.method, list(arm.k_schedule), arm.k_schedule_source, levels, over)
        )
    return out


@dataclass(frozen=True)
class RampCheck:
    """A scheduled arm on the ramp (``load.ramp``): per stage and over the whole ramp, its speedup
    and its ratio to every static arm of its method, from the same start-ups (as ``LevelCheck``:
    ``concurrency`` is the stage's, 0 for an open-loop stage and for the whole ramp)."""

    arm: str
    workload: str
    spans: list[tuple[str, LevelCheck]]  # (label: "@4, 20-40 s" or "whole ramp", check)


def ramp_checks(arms: Sequence[ArmSummary], ramp: Sequence[RampStageMetrics]) -> list[RampCheck]:
    """One check per scheduled arm and workload with a ramp measured."""
    by_key = {(m.arm, m.workload, m.stage): m for m in ramp}
    out = []
    for arm in arms:
        if not arm.k_schedule:
            continue
        statics = [a.name for a in arms if a.method == arm.method and not a.k_schedule]
        for workload in dict.fromkeys(m.workload for m in ramp if m.arm == arm.name):
            spans = []
            for mine in (m for m in ramp if (m.arm, m.workload) == (arm.name, workload)):
                found = _estimate(mine)
                theirs = {s: by_key.get((s, workload, mine.stage)) for s in statics}
                against = {
                    s: ratio(found, other)
                    for s, m in theirs.items()
                    if m is not None and found is not None and (other := _estimate(m)) is not None
                }
                speeds = {s: m.speedup for s, m in theirs.items() if m is not None and m.speedup}
                best = max(speeds, key=lambda s: speeds[s]) if speeds else None  # type: ignore[arg-type, return-value]
                concurrency = mine.concurrency or 0
                k = scheduled_k(arm.k_schedule, concurrency) if concurrency else -1
                label = (
                    "whole ramp" if mine.stage is None else f"{mine.label}, {mine.start_s:g}-{mine.end_s:g} s"
                )
                spans.append(
                    (
                        label,
                        LevelCheck(workload, concurrency, k, mine.drafted_per_draft, found, best, against),
                    )
                )
            out.append(RampCheck(arm.name, workload, spans))
    return out
