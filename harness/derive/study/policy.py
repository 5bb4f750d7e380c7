"""The speculation policy a study supports: the K to run at each batch size, per method family and
workload (and for the study's workload mix), from decided cells only.

At each measured load level, the family's K values are compared with ``analysis.best_k`` (Hsu's
multiple comparisons with the best): the K run there is the best one, or, where others cannot be
told from it, the cheapest of those (the fewest drafted tokens to verify). It is run only where its
speedup pays after correcting for the number of K values it was picked from (the winner's curse,
``analysis.corrected``); a level where no K pays is K = 0 (drafting off), and one that is not
decided either way is off too, said so ("undecided"): a policy never speculates on a guess.

Between two measured levels whose K differs, the boundary is the break-even concurrency where the
lower level's arm stops paying (``analysis.break_even``) when it lies between them, otherwise the
midpoint on log2 concurrency: interpolated, and the table says so. Below the lowest level and above
the highest the end levels' K is carried (vLLM carries the last K through its tail the same way).

The mix: per K and level, the workloads' speedups combined as a weighted geometric mean, each
start-up's the same way; its log standard error is the weighted sum of theirs (the workloads ran
on the same start-ups, so their errors are not independent: the sum is the conservative bound).

Pure: ``harness.derive.study.collect`` gives the observations, ``harness.results.study.policy_file``
the file.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from harness.config.arms import Arm
from harness.core import stats
from harness.derive.intervals import design_level
from harness.derive.study import analysis
from harness.derive.study.analysis import Observation
from harness.results.model import SpeedupEstimate
from harness.results.study.policy_file import PolicyBoundary, PolicyFile, PolicyLevel, PolicySchedule

MIX = "mix"  # the workload name of the weighted mix's schedule
# the last range's end: vLLM carries the last K through every batch size above it anyway
# (build_dynamic_sd_schedule_lookup), and SGLang's adaptive tiers end open too
TOP_BATCH_SIZE = 1024


@dataclass(frozen=True)
class LevelChoice:
    """What the policy runs at one measured load level."""

    concurrency: int
    k: int  # 0: drafting off
    arm: str | None  # the study arm measured with that K; None when off
    decided: bool  # K > 0 pays after correction, or 0 because the best K loses / is equivalent
    why: str
    speedup: analysis.Estimate | None  # the chosen arm's (K > 0) or the best arm's (off)


@dataclass(frozen=True)
class Boundary:
    """Where the schedule changes K between two measured levels."""

    last: int  # the last batch size of the lower range
    between: tuple[int, int]  # the measured levels on either side
    how: str  # "break-even" | "interpolated"
    break_even: float | None = None


@dataclass(frozen=True)
class Schedule:
    point: str
    axes: tuple[tuple[str, object], ...]
    family: str
    method: str
    workload: str  # a workload's name, or MIX
    weights: tuple[tuple[str, float], ...]  # the mix's (workload, weight); () for one workload
    levels: tuple[LevelChoice, ...]
    ranges: tuple[tuple[int, int, int], ...]  # (first batch size, last batch size, K), inclusive
    boundaries: tuple[Boundary, ...]

    @property
    def k_max(self) -> int:
        return max((k for _, _, k in self.ranges), default=0)

    @property
    def speculates(self) -> bool:
        return self.k_max > 0


def _choose(members: Sequence[Observation], best: analysis.BestK | None) -> LevelChoice:
    """One level of one family: the K to run, or 0."""
    level = members[0].concurrency
    by_k = {o.k: o for o in members}
    ks = sorted(by_k)  # type: ignore[type-var]
    if best is None:  # one K measured: it is its own best, nothing to tell it from
        top, tied = members[0], ()
    else:
        top, tied = by_k[best.k], best.tied
    if tied is None:  # no interval: K values cannot be compared, nor the best decided
        top_estimate = analysis.estimate(top)
        return LevelChoice(level, 0, None, False, "undecided: no interval (off)", top_estimate)
    candidates = sorted({top.k, *tied})  # type: ignore[type-var]
    chosen = by_k[candidates[0]]  # the cheapest K that cannot be told from the best
    found = analysis.estimate(chosen)
    assert found is not None
    selected = analysis.corrected(found, len(ks))
    pick = f"K={chosen.k}"
    if chosen.k != top.k:
        pick += f", cheapest of K={', '.join(map(str, candidates))} (not told apart)"
    if selected.verdict == "pays":
        return LevelChoice(level, chosen.k, chosen.arm, True, f"{pick}: pays", found)  # type: ignore[arg-type]
    top_estimate = analysis.estimate(top)
    worst = analysis.corrected(top_estimate, len(ks)) if top_estimate is not None else None
    if worst is not None and worst.verdict in ("loses", "equivalent"):
        return LevelChoice(level, 0, None, True, f"off: the best K={top.k} {worst.verdict}", top_estimate)
    corrected = f" after correcting for {len(ks)} K values" if len(ks) > 1 else ""
    why = f"undecided: K={chosen.k} {found.text()} is {selected.verdict}{corrected} (off)"
    return LevelChoice(level, 0, None, False, why, top_estimate)


def _boundary(low: LevelChoice, high: LevelChoice, crossing: analysis.BreakEven | None) -> Boundary:
    """The last batch size of ``low``'s range, between the two measured levels."""
    a, b = low.concurrency, high.concurrency
    if (
        crossing is not None
        and crossing.kind == "crosses"
        and crossing.direction == "stops_paying"
        and crossing.concurrency is not None
        and a <= crossing.concurrency < b
    ):
        return Boundary(int(math.floor(crossing.concurrency)), (a, b), "break-even", crossing.concurrency)
    return Boundary(min(b - 1, max(a, int(math.floor(math.sqrt(a * b))))), (a, b), "interpolated")


def _ranges(
    choices: Sequence[LevelChoice], boundaries: Sequence[Boundary]
) -> tuple[tuple[int, int, int], ...]:
    out: list[tuple[int, int, int]] = []
    start = 1
    for choice, boundary in zip(choices, [*boundaries, None], strict=True):
        end = TOP_BATCH_SIZE if boundary is None else boundary.last
        end = max(end, start)
        if out and out[-1][2] == choice.k:
            out[-1] = (out[-1][0], end, choice.k)
        else:
            out.append((start, end, choice.k))
        start = end + 1
    return tuple(out)


def _schedule(
    series: Sequence[Observation],
    bests: Mapping[int, analysis.BestK],
    crossings: Mapping[str, analysis.BreakEven],
    weights: tuple[tuple[str, float], ...] = (),
) -> Schedule:
    first = series[0]
    by_level: dict[int, list[Observation]] = {}
    for o in series:
        by_level.setdefault(o.concurrency, []).append(o)
    choices = [_choose(by_level[c], bests.get(c)) for c in sorted(by_level)]
    boundaries = []
    for low, high in zip(choices, choices[1:], strict=False):
        if low.k != high.k:
            crossing = crossings.get(low.arm) if low.arm is not None and high.k == 0 else None
            boundaries.append(_boundary(low, high, crossing))
        else:
            boundaries.append(Boundary(high.concurrency - 1, (low.concurrency, high.concurrency), "same K"))
    return Schedule(
        first.point,
        first.axes,
        first.family,
        first.method,
        first.workload,
        weights,
        tuple(choices),
        _ranges(choices, boundaries),
        tuple(b for b in boundaries if b.how != "same K"),
    )


def mixed(observations: Sequence[Observation], weights: Mapping[str, float]) -> list[Observation]:
    """Each (point, arm, level) measured on every workload of ``weights``, as one observation of
    the workload MIX: the weighted geometric mean of the speedups and of each common start-up's."""
    total = sum(weights.values())
    share = {w: v / total for w, v in weights.items()}
    cells: dict[tuple[str, str, int], dict[str, Observation]] = {}
    for o in observations:
        if o.workload in share:
            cells.setdefault((o.point, o.arm, o.concurrency), {})[o.workload] = o
    out = []
    for members in cells.values():
        if set(members) != set(share) or any(o.speedup is None for o in members.values()):
            continue
        first = next(iter(members.values()))
        speedup = math.exp(sum(share[w] * math.log(o.speedup) for w, o in members.items()))  # type: ignore[arg-type]
        rounds = [dict(o.round_speedups) for o in members.values()]
        common = sorted(set.intersection(*(set(r) for r in rounds)))
        per_round = tuple(
            (r, math.exp(sum(share[w] * math.log(dict(o.round_speedups)[r]) for w, o in members.items())))
            for r in common
        )
        estimates = {w: analysis.estimate(o) for w, o in members.items()}
        found = list(estimates.values())
        log_se = df = low = high = None
        looks = max((f.looks for f in found if f is not None), default=1)  # the design's looks
        first_look = next((f.first_look for f in found if f is not None and f.looks == looks), None)
        if all(f is not None and f.log_se is not None and f.df >= 1 for f in found):
            log_se = sum(share[w] * f.log_se for w, f in estimates.items())  # type: ignore[union-attr,operator]
            df = min(f.df for f in found)  # type: ignore[union-attr]
            level = design_level(looks, 1, df, first_look)
            half = stats.t_quantile(1 - (1 - level) / 2, df) * log_se
            low, high = speedup * math.exp(-half), speedup * math.exp(half)
        out.append(
            replace(
                first,
                workload=MIX,
                speedup=speedup,
                round_speedups=per_round,
                # the first member's source and model arms, the mix's own interval and design
                stored=(first.stored or SpeedupEstimate()).model_copy(
                    update={
                        "low": low,
                        "high": high,
                        "log_se": log_se,
                        "df": df,
                        "rounds": min(f.rounds for f in found if f is not None),
                        "looks": looks if looks > 1 else None,
                        "first_look": first_look if looks > 1 else None,
                    }
                ),
                tau=None,
                output_tok_s=None,
                usd_per_mtok=None,
                baseline_usd_per_mtok=None,
                identical_pct=None,
            )
        )
    return out


def policies(
    observations: Sequence[Observation], weights: Mapping[str, float] | None = None
) -> list[Schedule]:
    """A schedule per (point, family, workload) with a K swept or measured, and per (point, family)
    for the mix of ``weights`` (workload -> weight) when the study has more than one workload."""
    speculative = [
        o
        for o in observations
        if o.method != "baseline" and o.k is not None and o.speedup is not None and not o.scheduled
    ]
    workloads = sorted({o.workload for o in speculative})
    mix: tuple[tuple[str, float], ...] = ()
    pool = list(speculative)
    if len(workloads) > 1:
        chosen = dict(weights) if weights else dict.fromkeys(workloads, 1.0)
        mix = tuple(sorted(chosen.items()))
        pool += mixed(speculative, chosen)
    bests = {(b.point, b.family, b.workload, b.concurrency): b for b in analysis.best_k(pool)}
    series: dict[tuple[str, str, str], list[Observation]] = {}
    by_arm: dict[tuple[str, str, str], list[Observation]] = {}
    for o in pool:
        series.setdefault((o.point, o.family, o.workload), []).append(o)
        by_arm.setdefault((o.point, o.arm, o.workload), []).append(o)
    out = []
    for (point, family, workload), members in series.items():
        crossings = {
            arm: analysis.break_even(found)
            for (p, arm, w), found in by_arm.items()
            if p == point and w == workload
        }
        level_bests = {c: b for (p, f, w, c), b in bests.items() if (p, f, w) == (point, family, workload)}
        out.append(_schedule(members, level_bests, crossings, mix if workload == MIX else ()))
    return sorted(out, key=lambda s: (s.point, s.family, s.workload == MIX, s.workload))


RULE = (
    "per level, the best K or, where others cannot be told from it (95%, multiple comparisons with the "
    "best), the cheapest of those; run only where it pays after correcting for the K values it was "
    "picked from, else K=0 (drafting off; 'undecided' where the data decided neither); a K change "
    "between two measured levels at the break-even where the arm stops paying between them, else at "
    "the midpoint on log2 concurrency (interpolated); the end levels' K carried below and above"
)


def _file_schedule(schedule: Schedule, arm: Arm | None, engine: str) -> PolicySchedule:
    from harness.config.engines import ScheduleConfig, get_adapter

    ranges = [list(r) for r in schedule.ranges]
    found = ScheduleConfig(note="no K runs at any batch size: serve without speculation")
    if schedule.speculates:
        # not re-validated: every field comes from a validated arm (a drafter arm unknown here has none)
        template = Arm.model_construct(
            name=schedule.family,
            method=schedule.method,  # type: ignore[arg-type]
            num_speculative_tokens=schedule.k_max,
            draft_model=arm.draft_model if arm is not None else None,
            options=arm.options if arm is not None else {},
            k_schedule=[tuple(r) for r in schedule.ranges],  # type: ignore[misc]
        )
        found = get_adapter(engine).schedule_config(
            template, f"{schedule.point}.{schedule.family}.{schedule.workload}"
        )
    return PolicySchedule(
        point=schedule.point,
        axes=[list(a) for a in schedule.axes],  # type: ignore[misc]
        family=schedule.family,
        method=schedule.method,
        workload=schedule.workload,
        weights=dict(schedule.weights),
        k_max=schedule.k_max,
        ranges=ranges,  # type: ignore[arg-type]
        levels=[
            PolicyLevel(
                concurrency=c.concurrency,
                k=c.k,
                arm=c.arm,
                decided=c.decided,
                why=c.why,
                speedup=c.speedup.point if c.speedup else None,
                low=c.speedup.low if c.speedup else None,
                high=c.speedup.high if c.speedup else None,
            )
            for c in schedule.levels
        ],
        boundaries=[
            PolicyBoundary(last=b.last, between=b.between, how=b.how, break_even=b.break_even)  # type: ignore[arg-type]
            for b in schedule.boundaries
        ],
        undecided=[c.concurrency for c in schedule.levels if not c.decided],
        engine=engine,
        speculative_config=found.speculative_config,
        adaptive_config=found.config_file_content,
        adaptive_config_file=found.config_file,
        note=found.note,
    )


def document(
    schedules: Sequence[Schedule],
    study: str,
    regime: str,
    engine: str,
    arms: Mapping[tuple[str, str], Arm],
) -> PolicyFile:
    """The policy file: each schedule with the engine configuration that runs it. ``arms`` gives
    each point's measured arms (its options and drafter go into the configuration)."""

    def template(s: Schedule) -> Arm | None:
        chosen = [c.arm for c in s.levels if c.arm is not None]
        named = [arms.get((s.point, name)) for name in chosen]
        return next((a for a in named if a is not None), arms.get((s.point, s.family)))

    return PolicyFile(
        study=study,
        regime=regime,
        rule=RULE,
        schedules=[_file_schedule(s, template(s), engine) for s in schedules],
    )
