"""The metric registry: every metric a result carries, defined once.

Each entry says what a reader needs to use a metric without knowing it: the summary field it
lives in (``CellMetrics.<name>``), its unit, which direction is better, the statistic a cell
reports, and where its samples come from when a gate needs more than one number:

- ``repeat``: one value per repeat of the window (``CellMetrics.per_repeat``), statistic = mean;
- ``request``: one value per successful request (``RequestRecord.<sample_field>``, in seconds,
  shown in ms), statistic = the percentile itself, pooled over repeats;
- ``prompt``: one 0/100 value per prompt compared with the baseline, statistic = mean.

The gates, the terminal table, the report's highlighting and the comparison view look metrics
up here; the formulas themselves live in ``harness.probes``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Statistic = Literal["mean", "p50", "p90"]
SampleSource = Literal["repeat", "request", "prompt"]


@dataclass(frozen=True)
class Metric:
    name: str  # the summary field, units in the name
    label: str  # a short column header
    unit: str
    higher_is_better: bool
    statistic: Statistic
    samples: SampleSource
    description: str
    sample_field: str | None = None  # per-request metrics: the RequestRecord field, in seconds
    scale: float = 1.0  # sample value -> metric unit (s -> ms)
    gated: bool = True  # may appear in a regime's gates
    highlighted: bool = True  # the report marks the best arm's value per table
    compared: bool = True  # a column of the two-run comparison
    # measured with a clock, so a busy neighbour moves it (the gate calls its change inconclusive
    # there); counts the engine keeps (tau) and token comparisons do not depend on who else ran
    timed: bool = True


_ALL = (
    Metric(
        "tau",
        "tau",
        "tokens/step",
        True,
        "mean",
        "repeat",
        "mean acceptance length: 1 + accepted / drafts over the window (baseline: 1)",
        timed=False,
    ),
    Metric(
        "tokens_per_forward",
        "tok/fwd",
        "tokens/forward",
        True,
        "mean",
        "repeat",
        "output tokens per forward pass of the target, prefill token excluded: engine-neutral, unlike tau "
        "(baseline: 1)",
        timed=False,
    ),
    Metric(
        "output_tok_s",
        "tok/s",
        "tokens/s",
        True,
        "mean",
        "repeat",
        "output tokens of successful requests / window wall time",
    ),
    Metric(
        "speedup",
        "speedup",
        "x",
        True,
        "mean",
        "repeat",
        "arm tok/s / baseline tok/s, same prompts and concurrency",
    ),
    Metric(
        "ttft_ms_p50",
        "TTFT p50",
        "ms",
        False,
        "p50",
        "request",
        "median time to first token",
        sample_field="ttft_s",
        scale=1000.0,
    ),
    Metric(
        "ttft_ms_p90",
        "TTFT p90",
        "ms",
        False,
        "p90",
        "request",
        "90th percentile time to first token",
        sample_field="ttft_s",
        scale=1000.0,
    ),
    Metric(
        "tpot_ms_p50",
        "TPOT p50",
        "ms",
        False,
        "p50",
        "request",
        "median time per output token after the first",
        sample_field="tpot_s",
        scale=1000.0,
    ),
    Metric(
        "tpot_ms_p90",
        "TPOT p90",
        "ms",
        False,
        "p90",
        "request",
        "90th percentile time per output token after the first",
        sample_field="tpot_s",
        scale=1000.0,
    ),
    Metric(
        "usd_per_mtok",
        "$/Mtok",
        "USD/Mtok",
        False,
        "mean",
        "repeat",
        "hardware price per hour / (output tok/s x 3600) x 1e6",
    ),
    Metric(
        "slo_pct",
        "in SLO %",
        "%",
        True,
        "mean",
        "repeat",
        "requests that succeeded within every SLO target of the regime (TTFT, TPOT, E2E) / requests sent",
    ),
    Metric(
        "goodput_rps",
        "goodput",
        "requests/s",
        True,
        "mean",
        "repeat",
        "requests within every SLO target / window wall time",
    ),
    Metric(
        "identical_pct",
        "same %",
        "%",
        True,
        "mean",
        "prompt",
        "prompts whose greedy output token ids equal the baseline's",
        highlighted=False,
        compared=False,
        timed=False,
    ),
    Metric(
        "diverged_pct",
        "diverged %",
        "%",
        False,
        "mean",
        "prompt",
        "prompts whose greedy output left the baseline's where the baseline's top-2 margin exceeded the "
        "near-tie margin: a suspected bug, not numerics (near ties are not counted)",
        highlighted=False,
        compared=False,
        timed=False,
    ),
)

# prompt-sourced metrics: the exactness status each 100-valued sample counts
PROMPT_STATUS = {"identical_pct": "identical", "diverged_pct": "diverged"}

METRICS: dict[str, Metric] = {metric.name: metric for metric in _ALL}
GATED = tuple(name for name, metric in METRICS.items() if metric.gated)
HIGHLIGHTED = tuple(name for name, metric in METRICS.items() if metric.highlighted)
COMPARED = tuple(name for name, metric in METRICS.items() if metric.compared)


def best(name: str, values: list[float]) -> float:
    """The best of several values of one metric, in the metric's direction."""
    return max(values) if METRICS[name].higher_is_better else min(values)
