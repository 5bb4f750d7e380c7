"""The findings paragraph: why tau and the speedup came out as they did, written from the numbers.

Deterministic rules over the typed ``Summary`` (no language model, no canned text). Each rule
gives facts (``Fact``: a kind and the figures it rests on); ``harness.present.verdict_text`` words them,
so a different run gives a different paragraph and derive hands the views no English. The rules,
in the order the sentences appear:

1. **Copying** (why tau differs between workloads): per workload, the share of the baseline's
   output 3-grams found in the prompt (``copy_share_pct``) and in the prompt or the earlier
   output (``context_share_pct``: what a prompt-lookup drafter can match), next to tau of the arm
   that drafts from the sequence (ngram; else the arm with the highest tau), and which share, if
   either, orders tau across workloads (Spearman rank correlation of at least 0.7).
2. **Categories**: the spread of that arm's tau over workload categories, when a category holds
   several workloads (with one workload per category, rule 1 already says it).
3. **Where the chain breaks**: per speculative arm, the per-position acceptance pooled over its
   cells, and the position before which it drops most.
4. **Acceptance or verification**: per speculative arm, tokens per step (tau) against the
   speedup: each step costs what the cost model measured (``harness.derive.cost_model``: the engine's own
   step count), else (output tokens per target forward, else tau) / speedup baseline decode steps,
   an inference said to be one. High tau without a speedup means verification (and drafting) is
   the limit in this regime; tau near 1 means acceptance is.
4b. **Why a larger K stops paying**: per chain method and window, from the K that ran fastest to
   the next larger K run, how much its tokens per engine step grew against how much its step cost
   grew (the speedup is their ratio): acceptance that no longer grows, or a step that grows faster.
5. **Load**: how the best arm's speedup moves between the lowest and highest concurrency (and
   request rate, for open-loop windows).
6. **Cost**: per workload and load level, $/Mtok at the baseline against the fastest arm.
7. **Odd requests**: per arm, the finished requests whose stream was not decoding
   (``harness.derive.odd_requests``: all tokens in one chunk, or a burst faster than an engine
   step), by kind and cell: their TPOT is the time to read a burst, and it is in the cell's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from harness.config.methods import names
from harness.core import stats
from harness.core.probes.copying import COPY_NGRAM
from harness.derive import pooling
from harness.derive.cost_model import CostModel
from harness.derive.intervals import stored_estimate
from harness.derive.verdict import WindowVerdict
from harness.results.model import CellMetrics, Summary

STRONG_RANK = 0.7  # a rank correlation at least this high "explains" the ordering of tau
HIGH_TAU = 1.5  # tokens per step above which acceptance is not the limit
LOW_TAU = 1.2  # below: drafts are almost never accepted
LOW_FIRST_POSITION = 0.05  # a first draft token accepted less often than this: no chain to speak of


def _speculative_arms(summary: Summary) -> list[str]:
    return [a.name for a in summary.arms if a.method != "baseline" and summary.cells_of(a.name)]


def _lookup_arm(summary: Summary) -> str | None:
    """The arm whose acceptance copying explains: a prompt-lookup one (ngram), else the highest tau."""
    arms = _speculative_arms(summary)
    lookup = [a for a in arms if summary.arm(a).method in names("prompt_lookup")]  # type: ignore[union-attr]
    if lookup:
        return lookup[0]
    ranked = [(t, a) for a in arms if (t := pooling.tau(summary.cells_of(a))) is not None]
    return max(ranked)[1] if ranked else None


def _workloads(summary: Summary) -> list[str]:
    return list(dict.fromkeys(c.workload for c in summary.cells))


@dataclass(frozen=True)
class Fact:
    """One finding: its kind and the figures it rests on, plain numbers and strings."""

    kind: str
    arm: str | None = None
    values: tuple[tuple[str, str | int | float | None], ...] = ()

    def __getitem__(self, name: str) -> str | int | float | None:
        return dict(self.values)[name]


def fact(kind: str, arm: str | None = None, **values: str | int | float | None) -> Fact:
    return Fact(kind, arm, tuple(values.items()))


def copying_facts(summary: Summary) -> list[Fact]:
    """Per workload, the shares of the output copied (from the prompt; from the prompt or earlier
    output) beside the lookup arm's tau; with two or more workloads, which share orders tau."""
    arm = _lookup_arm(summary)
    if arm is None:
        return []
    rows = []
    for workload in _workloads(summary):
        base = [c for c in summary.cells_of(summary.baseline_arm) if c.workload == workload]
        first = min(base, key=lambda c: c.level.order()) if base else None
        tau = pooling.tau(c for c in summary.cells_of(arm) if c.workload == workload)
        if first and first.copy_share_pct is not None and first.context_share_pct is not None and tau:
            rows.append((workload, first.copy_share_pct, first.context_share_pct, tau))
    found = [
        fact("copy_share", arm, workload=w, copy=copy, context=ctx, tau=tau, ngram=COPY_NGRAM)
        for w, copy, ctx, tau in rows
    ]
    if len(rows) < 2:
        return found
    taus = [r[3] for r in rows]
    by_prompt = stats.rank_correlation([r[1] for r in rows], taus)
    by_context = stats.rank_correlation([r[2] for r in rows], taus)
    if by_prompt is not None and by_prompt >= STRONG_RANK and by_prompt >= (by_context or -1.0) - 0.2:
        explains = "prompt"
    elif by_context is not None and by_context >= STRONG_RANK:
        explains = "context"
    else:
        explains = "neither"
    values = {"rho_prompt": by_prompt, "rho_context": by_context, "workloads": len(rows)}
    return [*found, fact(f"copy_explains_{explains}", arm, **values)]


def category_facts(summary: Summary) -> list[Fact]:
    arm = _lookup_arm(summary)
    workloads_per_category: dict[str, set[str]] = {}
    for cell in summary.cells:
        workloads_per_category.setdefault(cell.category, set()).add(cell.workload)
    if arm is None or len(workloads_per_category) < 2:
        return []
    if all(len(w) == 1 for w in workloads_per_category.values()):
        return []
    taus = [
        (tau, category)
        for category in workloads_per_category
        if (tau := pooling.tau(c for c in summary.cells_of(arm) if c.category == category)) is not None
    ]
    if len(taus) < 2:
        return []
    (low, low_cat), (high, high_cat) = min(taus), max(taus)
    return [fact("category_tau", arm, low=low, low_category=low_cat, high=high, high_category=high_cat)]


def chain_facts(summary: Summary, arm: str) -> list[Fact]:
    rates = pooling.per_position(summary.cells_of(arm))
    if len(rates) < 2 or rates[0] < LOW_FIRST_POSITION:
        return []  # nothing accepted to speak of: the cost-of-step fact says acceptance is the limit
    drops = [previous - rate for previous, rate in zip([1.0, *rates], rates, strict=False)]
    worst = max(range(len(drops)), key=lambda i: drops[i])
    if drops[worst] < 0.01:
        return [fact("chain_holds", arm, lowest_pct=100 * min(rates))]
    return [
        fact(
            "chain_breaks",
            arm,
            first_pct=100 * rates[0],
            last_position=len(rates),
            last_pct=100 * rates[-1],
            worst_position=worst + 1,
            lost=100 * drops[worst],
        )
    ]


def _state(cell: CellMetrics, verdicts: list[WindowVerdict]) -> str:
    """What a finding says of a cell's speedup beside its number: a number a window's verdict did
    not decide, or that a busy neighbour may have made, is said to be so, never stated as a fact
    ("" where it was decided)."""
    window = next((v for v in verdicts if (v.workload, v.level) == (cell.workload, cell.level)), None)
    if window is not None and window.provisional:
        return "provisional"
    if window is not None and window.best is not None and window.best.arm == cell.arm:
        # the window's own verdict, its interval held over the window's arms: what was decided of it
        return "" if window.outcome in ("pays", "loses", "equivalent") else str(window.outcome)
    estimate = stored_estimate(cell.speedup, cell.estimate, rounds=cell.server_starts)
    if estimate is not None and window is not None:  # every arm read as the verdict reads them
        estimate = estimate.selected_from(window.candidates, window.windows)
    if estimate is None or not estimate.decided:
        return estimate.verdict if estimate else "unverified"
    return ""


def step_facts(
    summary: Summary, arm: str, verdicts: list[WindowVerdict], cost: CostModel | None = None
) -> list[Fact]:
    """Tokens per step against the speedup, at the cell where this arm accepted the most, and the
    step's cost: measured where the engine counted its steps (``cost``), else inferred as tokens per
    step / speedup. An inferred step that would cost less than one baseline decode step cannot be (a
    speculative step runs at least one target forward): the fact is then what was seen."""
    cells = [c for c in summary.cells_of(arm) if c.tau is not None and c.speedup]
    if not cells:
        return []
    cell = max(cells, key=lambda c: (c.tau, -c.concurrency))
    tau, speed = cell.tau, cell.speedup
    assert tau is not None and speed is not None
    # what a step yields is output tokens per target forward where the engine's counters give it
    # (tau counts only the steps that drafted on some engines); tau where they do not
    per_step = cell.tokens_per_forward or tau
    measured = cost.cost_of(cell) if cost is not None else None
    values = {
        "tau": tau,
        "where": f"{cell.workload} {cell.level.short()}",
        "speedup": speed,
        "state": _state(cell, verdicts),
        "per_forward": cell.tokens_per_forward,
        "per_step": per_step,
        "cost": measured.cost if measured else per_step / speed,
        "measured": measured is not None,
        "cost_low": measured.low if measured else None,
        "cost_high": measured.high if measured else None,
        "needs": measured.break_even_tau if measured else None,
        "needs_low": measured.break_even_low if measured else None,
        "needs_high": measured.break_even_high if measured else None,
    }
    if tau < LOW_TAU:
        return [fact("acceptance_limit", arm, **values)]
    if measured is None and per_step / speed < 1.0:
        return [fact("impossible_step", arm, **values)]
    if speed < 1.0 and tau >= HIGH_TAU:
        return [fact("verification_limit", arm, **values)]
    return [fact("step_cost", arm, **values)]


GROWTH_FLAT = 0.05  # a larger K whose tokens per engine step grew less than this barely added any


def k_limit_facts(summary: Summary, cost: CostModel, verdicts: Sequence[WindowVerdict]) -> list[Fact]:
    """Per method, drafter and window with two or more K run: from the fastest K to the next larger
    one, the growth of its tokens per engine step against that of its step cost (the speedup is
    their ratio), each speedup with what its window decided of it."""
    families: dict[tuple, list] = {}
    for c in cost.costs:
        if c.k and not c.forced:
            families.setdefault((c.method, c.drafter, c.workload, c.level), []).append(c)
    found = []
    for members in families.values():
        speed = {c.arm: summary.cell(c.arm, c.workload, c.level) for c in members}
        ranked = [c for c in members if (cell := speed[c.arm]) is not None and cell.speedup]
        if len(ranked) < 2:
            continue
        best = max(ranked, key=lambda c: speed[c.arm].speedup)  # type: ignore[union-attr]
        above = sorted((c for c in ranked if (c.k or 0) > (best.k or 0)), key=lambda c: c.k or 0)
        if not above:
            continue
        nxt = above[0]
        grew, costlier = nxt.yield_per_step / best.yield_per_step - 1, nxt.cost / best.cost - 1
        slower, faster = speed[nxt.arm], speed[best.arm]
        assert slower is not None and faster is not None and slower.speedup and faster.speedup
        found.append(
            fact(
                "k_limit_yield" if grew < GROWTH_FLAT else "k_limit_cost",
                nxt.arm,
                best=best.arm,
                where=f"{best.workload} {best.level.short()}",
                speedup=slower.speedup,
                state=_state(slower, list(verdicts)),
                best_speedup=faster.speedup,
                best_state=_state(faster, list(verdicts)),
                grew_pct=100 * grew,
                costlier_pct=100 * costlier,
            )
        )
    return found


def load_facts(summary: Summary, verdicts: list[WindowVerdict]) -> list[Fact]:
    """The best arm's speedup at the lightest and heaviest load, closed loop (by concurrency) and
    open loop (by request rate) each."""
    found = []
    by_window = {(v.workload, v.level): v for v in verdicts}
    for open_loop in (False, True):
        levels = [lv for lv in summary.levels() if (lv.request_rate is not None) == open_loop]
        if len(levels) < 2:
            continue
        for workload in _workloads(summary):
            first = by_window.get((workload, levels[0]))
            if first is None or first.best is None:
                continue
            last = summary.cell(first.best.arm, workload, levels[-1])
            if last is None or last.speedup is None or first.best.speedup is None:
                continue
            low, high = (
                (f"{levels[0].request_rate:g} req/s", f"{levels[-1].request_rate:g} req/s")
                if open_loop
                else (f"concurrency {levels[0].concurrency}", str(levels[-1].concurrency))
            )
            found.append(
                fact(
                    "load",
                    first.best.arm,
                    workload=workload,
                    low=low,
                    low_speedup=first.best.speedup,
                    low_state=_state(first.best, verdicts),
                    high=high,
                    high_speedup=last.speedup,
                    high_state=_state(last, verdicts),
                )
            )
    return found


def cost_facts(verdicts: list[WindowVerdict]) -> list[Fact]:
    found = []
    for verdict in verdicts:
        before = verdict.baseline.usd_per_mtok
        where = f"{verdict.workload} {verdict.level.short()}"
        if before is None:
            continue
        saving = verdict.saving_pct
        if (
            verdict.outcome == "pays"
            and verdict.best
            and verdict.best.usd_per_mtok is not None
            and saving is not None
        ):
            after = verdict.best.usd_per_mtok
            found.append(
                fact("cost_pays", verdict.best.arm, where=where, before=before, after=after, saving=saving)
            )
        else:
            found.append(fact("cost_stays", where=where, before=before))
    return found


def findings(
    summary: Summary, verdicts: Sequence[WindowVerdict], cost: CostModel | None = None
) -> list[Fact]:
    """The paragraph's facts, in order; empty when the run measured no speculative arm.
    ``verdicts``: the run's window verdicts and ``cost`` its cost model (``harness.derive.analysis``
    computes both once)."""
    arms, verdicts = _speculative_arms(summary), list(verdicts)
    found = copying_facts(summary) + category_facts(summary)
    for arm in arms:
        found += chain_facts(summary, arm)
    for arm in arms:
        found += step_facts(summary, arm, verdicts, cost)
    found += k_limit_facts(summary, cost, verdicts) if cost is not None else []
    return found + load_facts(summary, verdicts) + cost_facts(verdicts) + odd_request_facts(summary)


def odd_request_facts(summary: Summary) -> list[Fact]:
    """Per arm with any, its odd requests: how many of its finished ones, by kind, and where."""
    found = []
    for arm in summary.arms:
        cells = [c for c in summary.cells_of(arm.name) if c.requests_odd_by]
        if not cells:
            continue
        kinds: dict[str, int] = {}
        for cell in cells:
            for kind, n in cell.requests_odd_by.items():
                kinds[kind] = kinds.get(kind, 0) + n
        values = {
            "odd": sum(kinds.values()),
            "finished": sum(c.requests_ok for c in summary.cells_of(arm.name)),
            "kinds": ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items(), key=lambda kv: -kv[1])),
            "where": ", ".join(
                f"{c.workload} {c.level.short()}: {sum(c.requests_odd_by.values())}" for c in cells
            ),
        }
        found.append(fact("odd_requests", arm.name, **values))
    return found
