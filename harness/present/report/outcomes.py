"""One mapping from a verdict's outcome to how the page draws it: the colour and marker of a cell in
every figure, the colour of its text in every table, and the words of the legend and the captions
(the verdict's own words, ``verdict_text.OUTCOME_WORDS``). A figure that draws something other than
a cell (an arm's tau, a TPOT box) takes its colours from ``IDENTITY``, which holds none of these, so
green and red on the page only ever mean "pays" and "loses"."""

from __future__ import annotations

from dataclasses import dataclass

from harness.derive.verdict import Outcome
from harness.present.verdict_text import OUTCOME_WORDS


@dataclass(frozen=True)
class OutcomeStyle:
    colour: str  # a figure's marker and interval, a table cell's text (CSS)
    hue: str  # the colour in words
    marker: str  # matplotlib's marker code
    form: str  # the marker in words
    filled: bool  # hollow: undecided (nothing to act on)

    @property
    def shape(self) -> str:
        """The marker in words, for captions: "hollow grey circle"."""
        return f"{'' if self.filled else 'hollow '}{self.hue} {self.form}"


OUTCOME_STYLE: dict[Outcome, OutcomeStyle] = {
    Outcome.PAYS: OutcomeStyle("#0a7a2f", "green", "^", "triangle up", True),
    Outcome.LOSES: OutcomeStyle("#b00020", "red", "v", "triangle down", True),
    Outcome.EQUIVALENT: OutcomeStyle("#4a4a4a", "grey", "s", "square", True),
    Outcome.INDISTINGUISHABLE: OutcomeStyle("#4a4a4a", "grey", "o", "circle", False),
    Outcome.UNVERIFIED: OutcomeStyle("#4a4a4a", "grey", "D", "diamond", False),
}

# a point that is no speculative cell (the baseline's own, drawn for reference): a shape no outcome has
NEUTRAL = OutcomeStyle("#000000", "black", "x", "cross", True)

# the colours that tell arms and workloads apart: no green, no red, no orange or pink near them
IDENTITY = ("#1f77b4", "#9467bd", "#8c564b", "#17becf", "#7f7f7f", "#e6ab02", "#000080")

# a table cell's CSS class by outcome (the page's style sheet colours them from OUTCOME_STYLE)
OUTCOME_CLASS = {Outcome.PAYS: "gain", Outcome.LOSES: "loss"}


def style_of(outcome: str | None) -> OutcomeStyle:
    """The style of a cell's outcome (a stored verdict string or an ``Outcome``); NEUTRAL for none."""
    return NEUTRAL if outcome is None else OUTCOME_STYLE[Outcome(outcome)]


def outcome_key(outcomes: set[str] | None = None) -> str:
    """The markers in words, in the verdict's words, for a caption: every outcome, or those drawn."""
    shown = [o for o in OUTCOME_STYLE if outcomes is None or o.value in outcomes]
    return "; ".join(f"{OUTCOME_STYLE[o].shape}: {OUTCOME_WORDS[o]}" for o in shown)
