"""Figures pooled over several cells, each defined once (derive layer: pure, no I/O).

A view that shows a figure for more than one cell (an arm over all its workloads, a category over
its load levels) asks here; it never sums or divides itself:

- tau pooled = 1 + sum(accepted) / sum(drafts): the cells' draft counts add up, their taus do not;
- per-position acceptance pooled = per position, the rates weighted by each cell's drafts;
- identical % pooled = identical prompts / compared prompts over the cells;
- a share of output n-grams pooled (copy, context) = weighted by each cell's output n-grams;
- the $/Mtok saving = (before - after) / before, in percent (negative: it costs more);
- the category order = categories by one arm's tau pooled over every load level, highest first.

Anything with the counting fields of ``CellMetrics`` (drafts, accepted_tokens, ...) pools: a
cell of the summary, a category row, a study's cell.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Protocol, TypeVar

from harness.core.probes.acceptance import mean_acceptance_length


class Counted(Protocol):
    drafts: float
    accepted_tokens: float


class Positioned(Counted, Protocol):
    per_position_acceptance: list[float]


Key = TypeVar("Key", bound=Hashable)
Item = TypeVar("Item")


def tau(cells: Iterable[Counted]) -> float | None:
    """Mean acceptance length over the cells, from their summed draft counts."""
    cells = list(cells)
    return mean_acceptance_length(sum(c.drafts for c in cells), sum(c.accepted_tokens for c in cells))


def per_position(cells: Iterable[Positioned]) -> list[float]:
    """Acceptance rate per draft position (0-based index; position 1 first) over the cells, each
    cell's rates weighted by its drafts; [] without drafts."""
    cells = list(cells)
    drafts = sum(c.drafts for c in cells)
    if not drafts:
        return []
    width = max((len(c.per_position_acceptance) for c in cells), default=0)
    return [
        sum(c.per_position_acceptance[i] * c.drafts for c in cells if i < len(c.per_position_acceptance))
        / drafts
        for i in range(width)
    ]


def identical_pct(shares: Iterable[tuple[float | None, int]]) -> tuple[float | None, int]:
    """(identical %, prompts compared) from (identical %, prompts compared) of each cell, over
    the cells that compared any; (None, 0) without."""
    pairs, same = 0, 0.0
    for pct, compared in shares:
        if pct is not None:
            pairs += compared
            same += pct * compared / 100
    return (100 * same / pairs if pairs else None), pairs


def share_pct(cells: Iterable[object], name: str, weight: str = "output_ngrams") -> float | None:
    """A percentage field of the cells (``copy_share_pct``, ...) weighted by ``weight``."""
    counted = [(getattr(c, name), getattr(c, weight)) for c in cells if getattr(c, name) is not None]
    total = sum(n for _, n in counted)
    return sum(pct * n for pct, n in counted) / total if total else None


def saving_pct(before: float | None, after: float | None) -> float | None:
    """$/Mtok saved going from ``before`` to ``after`` (negative: it costs more); None unpriced."""
    return 100.0 * (before - after) / before if before and after is not None else None


def grouped(items: Iterable[Item], key: Callable[[Item], Key]) -> dict[Key, list[Item]]:
    """Items by key, keys and members in first-seen order (what every pooling groups by)."""
    groups: dict[Key, list[Item]] = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    return groups


class Categorized(Counted, Protocol):
    arm: str
    category: str


def category_order(rows: Sequence[Categorized], arm: str) -> list[str]:
    """Categories ordered by ``arm``'s tau pooled over every load level, highest first (the
    ordering is the finding); a category ``arm`` has no tau in sorts last, ties keep first-seen."""
    by_category = grouped((r for r in rows if r.arm == arm), lambda r: r.category)
    categories = list(dict.fromkeys(r.category for r in rows))
    return sorted(categories, key=lambda c: -(tau(by_category.get(c, [])) or 0))
