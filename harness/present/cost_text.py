"""The cost model in words and rows (present layer: renders ``harness.derive.cost_model``; computes
nothing): the terminal's lines, the report's tables. Every number is the analysis's."""

from __future__ import annotations

from typing import Any

from harness.core.formats import interval_text, speedup_text
from harness.derive.ceiling import Ceiling
from harness.derive.cost_model import CostModel, Prediction, StepCost

COST_NOTE = (
    "Step cost: the arm's mean engine step (window time / the engine's own step count) over the "
    "baseline's in the same window, geometric mean over start-ups, 95% interval from the speedup's "
    "model (about these prompts). Break-even tau: the acceptance at which a step of that cost would "
    "pay, at the arm's proposing share and batch occupancy; it clears it or falls short on these "
    "prompts (whether the arm pays on the workload is the verdict's: docs/cost-model.md)."
)


def cost_text(cost: StepCost) -> str:
    """``1.11 [1.05, 1.17]``: a relative step cost wherever it is shown."""
    if cost.low is None or cost.high is None:
        return f"{cost.cost:.2f}"
    return f"{cost.cost:.2f} {interval_text(cost.low, cost.high)}"


def break_even_text(cost: StepCost) -> str:
    """``needs 1.31 [1.22, 1.40], has 1.77: clears it``."""
    if cost.break_even_tau is None:
        return "-"
    needs = f"needs {cost.break_even_tau:.2f}"
    if cost.break_even_low is not None and cost.break_even_high is not None:
        needs += f" {interval_text(cost.break_even_low, cost.break_even_high)}"
    has = f", has {cost.tau:.2f}" if cost.tau is not None else ""
    return f"{needs}{has}: {cost.outcome}"


def prediction_text(p: Prediction) -> str:
    predicted = speedup_text(p.speedup, p.low, p.high)
    if p.measured_speedup is None:
        return f"{p.method} K={p.k} predicted {predicted} (not run)"
    measured = speedup_text(p.measured_speedup, p.measured_low, p.measured_high)
    verdict = {True: "consistent", False: "OUTSIDE", None: "untested (no interval)"}[p.inside]
    return f"{p.method} K={p.k} predicted {predicted}, measured {measured}: {verdict}"


def cost_lines(model: CostModel) -> list[str]:
    """The terminal's block: one line per speculative cell, then the checked predictions."""
    if not model.costs:
        return []
    lines = ["Step cost (x the baseline's step) and break-even tau:"]
    for c in model.costs:
        lines.append(
            f"  {c.label}: step {c.step_ms:.1f} ms vs {c.baseline_step_ms:.1f}, cost {cost_text(c)}; "
            f"{break_even_text(c)}"
        )
    checks = model.checks()
    if checks:
        inside, tested = sum(1 for p in checks if p.inside), len(checks)
        lines.append(
            f"Predicted from the largest K's acceptance (interval: the cost line's only), checked "
            f"against the K values run ({inside}/{tested} consistent at 95%):"
        )
        lines += [f"  {prediction_text(p)} ({p.workload} {p.level.short()}, from {p.source})" for p in checks]
    return lines


def cost_rows(model: CostModel) -> list[dict[str, Any]]:
    """The report's table of step costs."""
    return [
        {
            "arm": c.arm,
            "where": f"{c.workload} {c.level.short()}",
            "k": "-" if c.k is None else str(c.k),
            "step_ms": f"{c.step_ms:.1f} / {c.baseline_step_ms:.1f}",
            "cost": cost_text(c),
            "per_step": "-" if c.tokens_per_step is None else f"{c.tokens_per_step:.2f}",
            "share": "-" if c.proposing_share is None else f"{c.proposing_share:.2f}",
            "occupancy": "-" if c.occupancy is None else f"{c.occupancy:.2f}",
            "break_even": break_even_text(c),
            "class": {"clears it": "gain", "falls short": "loss"}.get(c.outcome, ""),
        }
        for c in model.costs
    ]


def prediction_rows(model: CostModel) -> list[dict[str, Any]]:
    """The report's table of predictions, the checked ones first."""
    ordered = sorted(model.predictions, key=lambda p: (p.measured_speedup is None, p.workload, p.k))
    return [
        {
            "source": p.source,
            "where": f"{p.workload} {p.level.short()}",
            "k": p.k,
            "tau": f"{p.tau:.2f}" + ("" if p.measured_tau is None else f" (run: {p.measured_tau:.2f})"),
            "cost": f"{p.cost:.2f}",
            "predicted": speedup_text(p.speedup, p.low, p.high),
            "measured": "not run"
            if p.measured_speedup is None
            else speedup_text(p.measured_speedup, p.measured_low, p.measured_high),
            "check": {True: "consistent", False: "outside", None: "-"}[p.inside],
            "class": "loss" if p.inside is False else "",
        }
        for p in ordered
    ]


CEILING_NOTE = (
    "An estimate: the floor is the bytes a batch-1 step must read (the weights at the served dtype "
    "and the KV cache of the mean context) over the memory bandwidth; compute, launch overhead and "
    "communication are left out, so no real step reaches it. A speculative arm's ceiling is its "
    "tokens per engine step over the baseline's: what it would reach if verifying its drafts cost "
    "one decode step, as at batch 1 on a memory-bound machine (docs/cost-model.md)."
)


def ceiling_lines(ceiling: Ceiling | None) -> list[str]:
    """The floor, the measured step's distance from it, and each arm's ceiling beside its speedup."""
    if ceiling is None:
        return []
    measured = (
        f"; the baseline's measured step {ceiling.baseline_step_ms:.1f} ms is {ceiling.times_floor:.1f}x it"
        if ceiling.baseline_step_ms and ceiling.times_floor
        else ""
    )
    untied = (
        " (an untied input embedding, looked up a row a step, left out)" if ceiling.unread_embedding else ""
    )
    lines = [
        f"Decode floor (estimate) at batch 1: {ceiling.floor_ms:.1f} ms a step "
        f"({ceiling.weight_bytes / 1e9:.2f} GB of {ceiling.dtype} weights{untied}, "
        f"{ceiling.parameters / 1e6:.0f}M parameters, and "
        f"{ceiling.context_tokens:.0f} tokens of KV at {ceiling.kv_bytes_per_token} B each, over "
        f"{ceiling.bandwidth_gb_s:.1f} GB/s x TP {ceiling.tensor_parallel}, {ceiling.bandwidth_source})"
        f"{measured}."
    ]
    lines += [
        f"  {a.arm} {a.workload} @1: {speedup_text(a.speedup, a.low, a.high)} of a "
        f"{a.tokens_per_step:.2f}x ceiling (its tokens per engine step over the baseline's)"
        for a in ceiling.arms
    ]
    return lines
