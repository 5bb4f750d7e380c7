"""The design of a run's start-ups (derive layer: pure): in which order the arms' servers start in
each round, and, with ``load.server_starts: {min, max, decide: true}``, whether another round would
still buy anything.

- Order: round 0 in the regime's order, round 1 reversed, round 2 in order, ... (ABBA). A drift of
  the machine over a round (it warms up, a neighbour comes and goes) then lands on the arms'
  positions in turn: over two rounds every arm has sat early and late, so a linear drift cancels
  from every speedup instead of always favouring the arm that runs first.
- Deciding: a round is added while the answer of any window the regime asks about
  (``load.server_starts.windows``; by default every one) is unsettled (``WindowVerdict.settled``:
  the chosen arm pays and every other deployable arm is shown slower, or none pays and every arm
  loses or is equivalent), read back from the summary the runner writes after every start-up. A
  window whose answer is not settled still stops once every cell of it and its verdict are decided
  (its arms' own intervals: two arms that both pay, neither shown slower). An arm near 1.00x beside
  a clear winner, which can never decide, no longer keeps a run going to ``max`` (issue 81);
  each added round is reported with what it bought: how many cells are decided, and how the widest
  undecided interval moved. The intervals are corrected for the looks this stop rule takes
  (``Estimate.looks``), so stopping on the first decided one does not make a lucky one pay.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from harness.config.level import window_parts
from harness.core.formats import interval_text
from harness.derive.intervals import CONFIDENCE, Estimate
from harness.derive.verdict import estimate_of, window_verdicts
from harness.results.model import CellMetrics, Summary
from harness.results.records import Round

# a verdict's false "pays" at a true 1.00x, whatever its design: one side of its 95% interval
FALSE_PAYS = (1 - CONFIDENCE) / 2
# over a run continued because its verdict was undecided (bench run --resume RUN --rounds N: stop if
# decided, else continue), at most the first design's side and the continued looks' (held at 95%
# among themselves, not with the look that chose to continue): a union bound, for every design (the
# default's simulated figures: docs/generated/statistics-tables.md)
CONTINUED_FALSE_PAYS = 2 * FALSE_PAYS


def round_order(arms: Sequence[str], index: int) -> list[str]:
    """The arms of round ``index`` in the order their servers start (ABBA: reversed every other round)."""
    return list(arms) if index % 2 == 0 else list(reversed(arms))


def completed_starts(arm: str, rounds: Sequence[Round]) -> int:
    """The arm's start-ups complete by the rounds recorded: one past its index in the last round
    whose start-up of it ended (0: none, or no rounds recorded: a run from before version 7)."""
    found = 0
    for entry in rounds:
        if arm in entry.done:
            found = entry.server_starts[arm] + 1
    return found


def cell_estimate(cell: CellMetrics) -> Estimate | None:
    """The estimate the summary stored for a speculative cell (None: the baseline's, or no speedup)."""
    return None if cell.method == "baseline" else estimate_of(cell)


def _key(cell: CellMetrics) -> str:
    return f"{cell.workload} {cell.level.short()} {cell.arm}"


def asked_about(window: str, asked: Sequence[str]) -> bool:
    """Whether the window "<workload> @<level>" is one of ``asked`` (``load.server_starts.windows``:
    '@LEVEL' or 'WORKLOAD @LEVEL'; none: every window)."""
    workload, level = window_parts(window)
    return not asked or any(window_parts(a) in (("", level), (workload, level)) for a in asked)


@dataclass(frozen=True)
class Standing:
    """Where a run's verdicts stand after a round: its speculative cells' estimates by cell, and
    per window the verdict's own decision (the fastest arm, corrected for the arms it was picked
    from), where there was a choice."""

    estimates: dict[str, Estimate]  # "<workload> @<level> <arm>" -> its estimate
    winners: dict[str, Estimate] = field(default_factory=dict)  # "<workload> @<level>" -> decision
    asked: tuple[str, ...] = ()  # the windows the run stops on (load.server_starts.windows; all)
    # the windows whose answer is settled (``WindowVerdict.settled``), whatever their cells' own
    settled: frozenset[str] = frozenset()

    @property
    def decided(self) -> int:
        return sum(e.decided for e in self.estimates.values())

    @property
    def all_decided(self) -> bool:
        """Every window asked about settled: its answer (``settled``), or every speculative cell of it
        decided and its verdict after the selection correction (a run without one has nothing to
        decide: also True)."""
        return not self.undecided_windows()

    def undecided_windows(self) -> list[str]:
        """The windows asked about whose answer is not settled and with a cell or a verdict still
        undecided, in order."""
        found = [key.rpartition(" ")[0] for key, e in self.estimates.items() if not e.decided]
        found += [key for key, e in self.winners.items() if not e.decided]
        return [w for w in dict.fromkeys(found) if asked_about(w, self.asked) and w not in self.settled]

    def undecided_winner(self) -> str | None:
        """A window asked about whose chosen arm is undecided, its interval held over the window's arms."""
        return next(
            (
                key
                for key, e in self.winners.items()
                if not e.decided and asked_about(key, self.asked) and key not in self.settled
            ),
            None,
        )

    def widest_undecided(self) -> str | None:
        """The undecided cell with the widest interval on the log scale (one without an interval
        is the widest of all: nothing is known of it yet)."""

        def width(estimate: Estimate) -> float:
            if estimate.low is None or estimate.high is None:
                return math.inf
            return math.log(estimate.high) - math.log(estimate.low)

        undecided = [(width(e), key) for key, e in self.estimates.items() if not e.decided]
        return max(undecided)[1] if undecided else None


def standing(summary: Summary, asked: Sequence[str] = ()) -> Standing:
    """The speculative cells' estimates as the summary stored them; ``asked``: the windows the run
    stops on (none: every one)."""
    found = {_key(c): e for c in summary.cells if (e := cell_estimate(c)) is not None}
    verdicts = window_verdicts(summary)
    winners = {
        f"{v.workload} {v.level.short()}": v.decision
        for v in verdicts
        if v.decision is not None and v.candidates > 1
    }
    settled = frozenset(f"{v.workload} {v.level.short()}" for v in verdicts if v.settled)
    return Standing(found, winners, tuple(asked), settled)


def _interval(estimate: Estimate | None) -> str:
    if estimate is None:
        return "not measured"
    if estimate.low is None or estimate.high is None:
        return f"{estimate.point:.2f}x (no interval)"
    return interval_text(estimate.low, estimate.high)


def round_line(rounds: int, before: Standing | None, after: Standing) -> str:
    """What round number ``rounds`` (counted from 1) bought, for the terminal, e.g. ``round 3: 3/4
    cells decided; chat @4 ngram_k4 [0.88, 1.19] -> [0.95, 1.09]``: the cell followed is the one that
    was the widest undecided before the round (after it, where there was none before)."""
    head = f"round {rounds}: {after.decided}/{len(after.estimates)} cells decided"
    open_cells = {key.rpartition(" ")[0] for key, e in after.estimates.items() if not e.decided}
    if settled := sorted(w for w in after.settled if w in open_cells):
        head += f"; answer settled in {', '.join(settled)} (its undecided arms cannot change it)"
    key = (before.widest_undecided() if before else None) or after.widest_undecided()
    if key is None:
        window = after.undecided_winner()
        if window is None:
            return head
        chosen = after.winners[window]
        return f"{head}; {window}: its arm not yet decided held over the window's arms, {_interval(chosen)}"
    then = before.estimates.get(key) if before else None
    now = after.estimates.get(key)
    moved = f"{_interval(then)} -> {_interval(now)}" if before else _interval(now)
    state = f" ({now.verdict})" if now is not None and now.decided else ""
    return f"{head}; {key} {moved}{state}"
