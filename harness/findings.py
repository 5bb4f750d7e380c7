"""The findings paragraph: why tau and the speedup came out as they did, written from the numbers.

Deterministic rules over the typed ``Summary`` (no language model, no canned text): every
sentence is built from figures in the summary and names them, so a different run gives a
different paragraph. The rules, in the order the sentences appear:

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
   speedup: each step costs (output tokens per target forward, else tau) / speedup baseline
   decode steps. High tau without a speedup means
   verification (and drafting) is the limit in this regime; tau near 1 means acceptance is.
5. **Load**: how the best arm's speedup moves between the lowest and highest concurrency (and
   request rate, for open-loop windows).
6. **Cost**: per workload and load level, $/Mtok at the baseline against the fastest arm.
"""

from __future__ import annotations

from collections.abc import Sequence

from harness import pooling, stats
from harness.intervals import stored_estimate
from harness.probes.copying import COPY_NGRAM
from harness.results.model import CellMetrics, Summary
from harness.verdict import WindowVerdict

STRONG_RANK = 0.7  # a rank correlation at least this high "explains" the ordering of tau
HIGH_TAU = 1.5  # tokens per step above which acceptance is not the limit
LOW_TAU = 1.2  # below: drafts are almost never accepted
LOW_FIRST_POSITION = 0.05  # a first draft token accepted less often than this: no chain to speak of


def _speculative_arms(summary: Summary) -> list[str]:
    return [a.name for a in summary.arms if a.method != "baseline" and summary.cells_of(a.name)]


def _lookup_arm(summary: Summary) -> str | None:
    """The arm whose acceptance copying explains: ngram (prompt lookup), else the highest tau."""
    arms = _speculative_arms(summary)
    ngram = [a for a in arms if summary.arm(a).method == "ngram"]  # type: ignore[union-attr]
    if ngram:
        return ngram[0]
    ranked = [(t, a) for a in arms if (t := pooling.tau(summary.cells_of(a))) is not None]
    return max(ranked)[1] if ranked else None


def _workloads(summary: Summary) -> list[str]:
    return list(dict.fromkeys(c.workload for c in summary.cells))


def copying_sentence(summary: Summary) -> str | None:
    arm = _lookup_arm(summary)
    if arm is None:
        return None
    rows = []
    for workload in _workloads(summary):
        base = [c for c in summary.cells_of(summary.baseline_arm) if c.workload == workload]
        first = min(base, key=lambda c: c.level.order()) if base else None
        tau = pooling.tau(c for c in summary.cells_of(arm) if c.workload == workload)
        if first and first.copy_share_pct is not None and first.context_share_pct is not None and tau:
            rows.append((workload, first.copy_share_pct, first.context_share_pct, tau))
    if not rows:
        return None
    listed = "; ".join(
        f"{w}: {copy:.0f}% in the prompt, {ctx:.0f}% in the prompt or earlier output, tau {tau:.2f}"
        for w, copy, ctx, tau in rows
    )
    text = (
        f"Share of the output's {COPY_NGRAM}-token n-grams found earlier in the sequence, against {arm}'s "
        f"tau over all load levels: {listed}."
    )
    if len(rows) < 2:
        return text
    taus = [r[3] for r in rows]
    by_prompt = stats.rank_correlation([r[1] for r in rows], taus)
    by_context = stats.rank_correlation([r[2] for r in rows], taus)
    over = f"over {len(rows)} workloads"
    if by_prompt is not None and by_prompt >= STRONG_RANK and by_prompt >= (by_context or -1.0) - 0.2:
        return text + (
            f" Tau rises with the share copied from the prompt (rank correlation {by_prompt:.2f} {over}): "
            "prompt lookup accepts what the output copies."
        )
    if by_context is not None and by_context >= STRONG_RANK:
        return text + (
            f" Tau follows the share found in the prompt or the earlier output (rank correlation "
            f"{by_context:.2f} {over}) more than the share copied from the prompt ({_rho(by_prompt)}): "
            "the output repeating itself, not the prompt, is much of what the drafter accepts."
        )
    return text + (
        f" Neither share explains tau (rank correlation {_rho(by_prompt)} with the prompt share, "
        f"{_rho(by_context)} with the context share, {over}): acceptance here comes from text that "
        "neither the prompt nor the earlier output contains verbatim."
    )


def _rho(value: float | None) -> str:
    return "undefined" if value is None else f"{value:.2f}"


def category_sentence(summary: Summary) -> str | None:
    arm = _lookup_arm(summary)
    workloads_per_category: dict[str, set[str]] = {}
    for cell in summary.cells:
        workloads_per_category.setdefault(cell.category, set()).add(cell.workload)
    if arm is None or len(workloads_per_category) < 2:
        return None
    if all(len(w) == 1 for w in workloads_per_category.values()):
        return None
    taus = [
        (tau, category)
        for category in workloads_per_category
        if (tau := pooling.tau(c for c in summary.cells_of(arm) if c.category == category)) is not None
    ]
    if len(taus) < 2:
        return None
    (low, low_cat), (high, high_cat) = min(taus), max(taus)
    return f"By category, {arm}'s tau ranges from {low:.2f} ({low_cat}) to {high:.2f} ({high_cat})."


def chain_sentence(summary: Summary, arm: str) -> str | None:
    rates = pooling.per_position(summary.cells_of(arm))
    if len(rates) < 2 or rates[0] < LOW_FIRST_POSITION:
        return None  # nothing accepted to speak of: the cost-of-step sentence says acceptance is the limit
    drops = [previous - rate for previous, rate in zip([1.0, *rates], rates, strict=False)]
    worst = max(range(len(drops)), key=lambda i: drops[i])
    if drops[worst] < 0.01:
        lowest = 100 * min(rates)
        return f"{arm}'s chain does not break: every draft position is accepted in {lowest:.0f}% of steps."
    return (
        f"{arm} accepts its draft token at position 1 in {100 * rates[0]:.0f}% of steps and at position "
        f"{len(rates)} in {100 * rates[-1]:.0f}%; the chain breaks most often at position {worst + 1} "
        f"({100 * drops[worst]:.0f} points lost there)."
    )


def _speed(cell: CellMetrics, verdicts: list[WindowVerdict]) -> str:
    """A cell's speedup as a finding may state it: a number a window's verdict did not decide, or
    that a busy neighbour may have made, is said to be so, never stated as a fact."""
    text = f"{cell.speedup:.2f}x"
    window = next((v for v in verdicts if (v.workload, v.level) == (cell.workload, cell.level)), None)
    if window is not None and window.provisional:
        return f"{text} (provisional: measured beside a busy neighbour)"
    estimate = stored_estimate(cell, rounds=cell.server_starts)
    if estimate is None or not estimate.decided:
        return f"{text} ({estimate.verdict if estimate else 'unverified'})"
    return text


def cost_of_step_sentence(summary: Summary, arm: str, verdicts: list[WindowVerdict]) -> str | None:
    """Tokens per step against the speedup, at the cell where this arm accepted the most. A step
    that would cost less than one baseline decode step cannot be (a speculative step runs at least
    one target forward): the sentence says what it saw instead of stating it."""
    cells = [c for c in summary.cells_of(arm) if c.tau is not None and c.speedup]
    if not cells:
        return None
    cell = max(cells, key=lambda c: (c.tau, -c.concurrency))
    tau, speed = cell.tau, cell.speedup
    assert tau is not None and speed is not None
    where = f"{cell.workload} {cell.level.short()}"
    # what a step yields is output tokens per target forward where the engine's counters give it
    # (tau counts only the steps that drafted on some engines); tau where they do not
    per_step = cell.tokens_per_forward or tau
    cost = per_step / speed
    yields = f" ({cell.tokens_per_forward:.2f} tokens per target forward)" if cell.tokens_per_forward else ""
    said = _speed(cell, verdicts)
    if tau < LOW_TAU:
        return (
            f"Acceptance is {arm}'s limit: its best tau is {tau:.2f} ({where}), so each step pays for "
            f"drafting and verification and yields about one token: {said}."
        )
    if cost < 1.0:
        return (
            f"{arm}'s {said} on {where} is more than its {per_step:.2f} tokens per step allow (a speculative "
            f"step costs at least one target forward, so at most {per_step:.2f}x): the baseline's windows "
            "there ran slower than its engine does, a disturbed measurement, not a cheap step."
        )
    if speed < 1.0 and tau >= HIGH_TAU:
        return (
            f"Verification, not acceptance, is {arm}'s limit in this regime: it emits {tau:.2f} tokens per "
            f"step on {where} yet runs at {said}, so each of its steps{yields} costs {cost:.1f} "
            "baseline decode steps."
        )
    return (
        f"{arm} turns tau {tau:.2f} into {said} on {where}: each of its steps{yields} costs "
        f"{cost:.1f} baseline decode steps."
    )


def load_sentence(summary: Summary, verdicts: list[WindowVerdict]) -> str | None:
    """The best arm's speedup at the lightest and heaviest load, closed loop (by concurrency) and
    open loop (by request rate) each."""
    parts = []
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
            parts.append(
                f"{first.best.arm} on {workload} goes from {_speed(first.best, verdicts)} at {low} "
                f"to {_speed(last, verdicts)} at {high}"
            )
    return ("With load, " + "; ".join(parts) + ".") if parts else None


def cost_sentence(verdicts: list[WindowVerdict]) -> str | None:
    parts = []
    for verdict in verdicts:
        before = verdict.baseline.usd_per_mtok
        where = f"{verdict.workload} {verdict.level.short()}"
        if before is None:
            continue
        if verdict.outcome == "pays" and verdict.best and verdict.best.usd_per_mtok is not None:
            parts.append(
                f"{where} {before:.2f} -> {verdict.best.usd_per_mtok:.2f} with {verdict.best.arm} "
                f"(-{verdict.saving_pct:.0f}%)"
            )
        else:
            parts.append(f"{where} stays at the baseline's {before:.2f} (no arm shown to pay)")
    return ("$/Mtok: " + "; ".join(parts) + ".") if parts else None


def findings(summary: Summary, verdicts: Sequence[WindowVerdict]) -> list[str]:
    """The paragraph's sentences, in order; empty when the run measured no speculative arm.
    ``verdicts``: the run's window verdicts (``harness.analysis`` computes them once)."""
    arms, verdicts = _speculative_arms(summary), list(verdicts)
    sentences = [copying_sentence(summary), category_sentence(summary)]
    sentences += [chain_sentence(summary, arm) for arm in arms]
    sentences += [cost_of_step_sentence(summary, arm, verdicts) for arm in arms]
    sentences += [load_sentence(summary, verdicts), cost_sentence(verdicts)]
    return [s for s in sentences if s]
