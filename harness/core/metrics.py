"""The metric registry: every metric a result carries, defined once.

Each entry says what a reader needs to use a metric without knowing it: the summary field it
lives in (``CellMetrics.<name>``), its unit, which direction is better, the statistic a cell
reports, and where its samples come from when a gate needs more than one number:

- ``repeat``: one value per repeat of the window (``CellMetrics.per_repeat``), statistic = mean;
- ``request``: one value per successful request (``RequestRecord.<sample_field>``, in seconds,
  shown in ms), statistic = the percentile itself, pooled over repeats;
- ``chunk``: one value per streamed chunk after a successful request's first (``RequestRecord.
  <sample_field>``, a list per request: ITL), statistic = the mean or a percentile, pooled over the
  cell's requests and repeats (vLLM's pooling); gated as a request metric is, its start-ups the unit;
- ``prompt``: one 0/100 value per prompt compared with the baseline, statistic = mean.

The gates, the terminal table (``harness.present.table``), the report's tables and highlighting
(``harness.present.report``), the comparison view and the export's data dictionary (``columns.csv``,
``harness.derive.frames``) look metrics up here; the formulas themselves live in
``harness.core.probes``. A new metric is a formula, a ``CellMetrics`` field and an entry below: the
views iterate the registry in its order, so they show it without being touched.

Names carry their unit as a suffix: ``_s`` / ``_ms`` seconds / milliseconds, ``_pct`` percent,
``_rps`` requests per second, ``_tok_s`` tokens per second (``output_tok_s``), ``_w`` watts,
``_j`` joules; ``acceptance_pos_<i>`` in the export is 0-based (draft position i + 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from harness.core.stats import STATISTICS

Statistic = Literal["mean", "p50", "p90", "p99", "min", "max", "std"]
SampleSource = Literal["repeat", "request", "chunk", "prompt"]
# when a view shows a metric's column: always, or only where the run measured what it needs
Shown = Literal["always", "slo", "power", "copy", "open_loop", "turns", "peers", "never"]


def _at(record: Any, path: str) -> Any:
    """The value at a dotted path of a record, None past a section that is absent."""
    value = record
    for part in path.split("."):
        value = getattr(value, part) if value is not None else None
    return value


@dataclass(frozen=True)
class Metric:
    """A column with a direction and a statistic: what the gates judge and the views compare."""

    name: str  # the summary field, units in the name
    label: str  # a short column header
    unit: str
    higher_is_better: bool
    statistic: Statistic
    samples: SampleSource
    description: str
    # request and chunk metrics: the RequestRecord field, in seconds (a chunk metric's: a list per request)
    sample_field: str | None = None
    scale: float = 1.0  # sample value -> metric unit (s -> ms)
    gated: bool = True  # may appear in a regime's gates
    highlighted: bool = True  # the report marks the best arm's value per table
    compared: bool = True  # a column of the two-run comparison
    # measured with a clock, so a busy neighbour moves it (the gate calls its change inconclusive
    # there); counts the engine keeps (tau) and token comparisons do not depend on who else ran
    timed: bool = True
    fmt: str = ".2f"  # format spec of a value in every view
    field: str | None = None  # where a cell holds it when not ``CellMetrics.<name>`` (dotted path)
    shown: Shown = "always"  # the report's mini-lab tables show it (see Shown)
    terminal: bool = False  # the terminal's mini-lab tables show it too (they must fit 80 columns)
    # the baseline's value by definition where its cells measure none (tau: 1): every view and the
    # export's tables show it
    baseline_value: float | None = None
    ratio: bool = False  # a ratio to the baseline: above 1 is a gain, below a loss (coloured)
    interval: tuple[str, str] | None = (
        None  # the cell fields of its 95% interval (dotted paths), shown with it
    )
    flag: tuple[str, str] | None = None  # a cell's bool field that qualifies the value, and its text

    def value(self, cell: Any) -> float | None:
        """The metric's value in one cell (``CellMetrics``), None where not measured (a section such
        as ``exactness`` absent); a misspelt field raises."""
        return _at(cell, self.field or self.name)

    def bounds(self, cell: Any) -> list[float | None]:
        """Its 95% interval in one cell (``interval``; [] without one): None where not stored."""
        return [_at(cell, path) for path in self.interval] if self.interval else []

    @property
    def baseline_text(self) -> str | None:
        """What the baseline's row shows (``baseline_value``, shortest form), None: its own value."""
        return None if self.baseline_value is None else f"{self.baseline_value:g}"

    def format(self, value: float | None) -> str:
        return "-" if value is None else format(value, self.fmt)

    def record_values(self, record: Any) -> list[float]:
        """A request or chunk metric's raw samples in one request record (``sample_field``, before
        ``scale``): the request's value (none where undefined), or one per streamed chunk after the first."""
        value = getattr(record, self.sample_field)  # type: ignore[arg-type]
        return value if self.samples == "chunk" else [] if value is None else [value]

    def pooled(self, records: list[Any]) -> list[float]:
        """The records' samples of this metric, pooled (``record_values``): shared by the metrics of
        one ``sample_field`` (a cell's p50, p90 and p99 of TTFT pool the same values)."""
        return [v for r in records for v in self.record_values(r)]

    def of_records(self, records: list[Any], pooled: list[float] | None = None) -> float | None:
        """The metric's statistic over the records' pooled samples (``pooled``, where already read),
        in its unit (a cell's value); None without any sample."""
        values = self.pooled(records) if pooled is None else pooled
        return STATISTICS[self.statistic](values) * self.scale if values else None

    @property
    def direction(self) -> str:
        return "higher is better" if self.higher_is_better else "lower is better"

    @property
    def of_baseline(self) -> bool:
        """Whether the baseline arm has this metric to gate: a timed figure of its own (tok/s, TTFT,
        TPOT, ITL, E2E, $/Mtok, SLO), where an engine regression shows; not a ratio to itself, an
        engine count that is 1 by definition (tau) or a comparison with itself (exactness)."""
        return self.timed and not self.ratio


# entries the views show but the gates, the highlighting and the comparison leave alone
_VIEW_ONLY: dict[str, Any] = {"gated": False, "highlighted": False, "compared": False}

_ALL = (
    Metric(
        name="tau",
        label="tau",
        unit="tokens/step",
        higher_is_better=True,
        statistic="mean",
        samples="repeat",
        description="mean acceptance length: 1 + accepted / drafts over the window (baseline: 1)",
        timed=False,
        terminal=True,
        baseline_value=1.0,
    ),
    Metric(
        name="tokens_per_forward",
        label="tok/fwd",
        unit="tokens/forward",
        higher_is_better=True,
        statistic="mean",
        samples="repeat",
        description="output tokens per forward pass of the target, prefill token excluded: engine-neutral, "
        "unlike tau "
        "(baseline: 1)",
        timed=False,
        terminal=True,
    ),
    Metric(
        name="output_tok_s",
        label="tok/s",
        unit="tokens/s",
        higher_is_better=True,
        statistic="mean",
        samples="repeat",
        description="output tokens of successful requests / window wall time",
        fmt=".1f",
        terminal=True,
    ),
    Metric(
        name="speedup",
        label="speedup",
        unit="x",
        higher_is_better=True,
        statistic="mean",
        samples="repeat",
        description="arm tok/s / baseline tok/s, same prompts and concurrency",
        terminal=True,
        ratio=True,
        interval=("estimate.low", "estimate.high"),
    ),
    Metric(
        name="ttft_ms_p50",
        label="TTFT p50",
        unit="ms",
        higher_is_better=False,
        statistic="p50",
        samples="request",
        description="median time to first token (open loop: from when the request was due, its wait for a "
        "max_concurrency slot inside)",
        sample_field="scheduled_ttft_s",
        scale=1000.0,
        fmt=".0f",
        terminal=True,
    ),
    Metric(
        name="ttft_ms_p90",
        label="TTFT p90",
        unit="ms",
        higher_is_better=False,
        statistic="p90",
        samples="request",
        description="90th percentile time to first token (open loop: from when the request was due)",
        sample_field="scheduled_ttft_s",
        scale=1000.0,
        fmt=".0f",
    ),
    # the tails and ITL are the report's and the export's: the terminal's table must fit 80 columns
    Metric(
        name="ttft_ms_p99",
        label="TTFT p99",
        unit="ms",
        higher_is_better=False,
        statistic="p99",
        samples="request",
        description="99th percentile time to first token (open loop: from when the request was due)",
        sample_field="scheduled_ttft_s",
        scale=1000.0,
        fmt=".0f",
    ),
    Metric(
        name="tpot_ms_p50",
        label="TPOT p50",
        unit="ms",
        higher_is_better=False,
        statistic="p50",
        samples="request",
        description="median time per output token after the first",
        sample_field="tpot_s",
        scale=1000.0,
        fmt=".1f",
        terminal=True,
    ),
    Metric(
        name="tpot_ms_p90",
        label="TPOT p90",
        unit="ms",
        higher_is_better=False,
        statistic="p90",
        samples="request",
        description="90th percentile time per output token after the first",
        sample_field="tpot_s",
        scale=1000.0,
        fmt=".1f",
        terminal=True,
    ),
    Metric(
        name="tpot_ms_p99",
        label="TPOT p99",
        unit="ms",
        higher_is_better=False,
        statistic="p99",
        samples="request",
        description="99th percentile time per output token after the first",
        sample_field="tpot_s",
        scale=1000.0,
        fmt=".1f",
    ),
    # vLLM's ITL: per streamed chunk, which carries ~tau tokens under speculation (never TPOT)
    Metric(
        name="itl_ms_mean",
        label="ITL mean",
        unit="ms",
        higher_is_better=False,
        statistic="mean",
        samples="chunk",
        description="mean inter-token latency (vLLM's ITL): the gap between successive streamed chunks after "
        "a request's first, pooled over the cell's chunks; one chunk carries ~tau tokens, so it is not TPOT",
        sample_field="itl_s",
        scale=1000.0,
        fmt=".1f",
    ),
    Metric(
        name="itl_ms_p50",
        label="ITL p50",
        unit="ms",
        higher_is_better=False,
        statistic="p50",
        samples="chunk",
        description="median inter-token latency (vLLM's ITL): gap between successive streamed chunks, "
        "pooled over the cell's chunks",
        sample_field="itl_s",
        scale=1000.0,
        fmt=".1f",
    ),
    Metric(
        name="itl_ms_p99",
        label="ITL p99",
        unit="ms",
        higher_is_better=False,
        statistic="p99",
        samples="chunk",
        description="99th percentile inter-token latency (vLLM's ITL): gap between successive streamed "
        "chunks, pooled over the cell's chunks",
        sample_field="itl_s",
        scale=1000.0,
        fmt=".1f",
    ),
    Metric(
        name="e2e_ms_p50",
        label="E2E p50",
        unit="ms",
        higher_is_better=False,
        statistic="p50",
        samples="request",
        description="median end-to-end latency, send to the end of the stream (vLLM's E2EL; open loop: from "
        "when the request was due)",
        sample_field="scheduled_e2e_s",
        scale=1000.0,
        fmt=".0f",
    ),
    Metric(
        name="e2e_ms_p90",
        label="E2E p90",
        unit="ms",
        higher_is_better=False,
        statistic="p90",
        samples="request",
        description="90th percentile end-to-end latency (open loop: from when the request was due)",
        sample_field="scheduled_e2e_s",
        scale=1000.0,
        fmt=".0f",
    ),
    Metric(
        name="e2e_ms_p99",
        label="E2E p99",
        unit="ms",
        higher_is_better=False,
        statistic="p99",
        samples="request",
        description="99th percentile end-to-end latency (open loop: from when the request was due)",
        sample_field="scheduled_e2e_s",
        scale=1000.0,
        fmt=".0f",
    ),
    Metric(
        name="usd_per_mtok",
        label="$/Mtok",
        unit="USD/Mtok",
        higher_is_better=False,
        statistic="mean",
        samples="repeat",
        description="hardware price per hour / (output tok/s x 3600) x 1e6",
        terminal=True,
    ),
    Metric(
        name="slo_pct",
        label="in SLO %",
        unit="%",
        higher_is_better=True,
        statistic="mean",
        samples="repeat",
        description="requests that succeeded within every SLO target of the regime (TTFT, TPOT, E2E) / "
        "requests sent",
        fmt=".0f",
        shown="slo",
        terminal=True,
    ),
    Metric(
        name="goodput_rps",
        label="goodput",
        unit="requests/s",
        higher_is_better=True,
        statistic="mean",
        samples="repeat",
        description="requests within every SLO target / window wall time",
        shown="slo",
        terminal=True,
    ),
    # shown only in the report (the terminal's table must fit 80 columns), never gated
    Metric(
        name="energy_usd_per_mtok",
        label="energy $/Mtok",
        unit="USD/Mtok",
        higher_is_better=False,
        statistic="mean",
        samples="repeat",
        description="measured joules per output token x the regime's electricity price, per million tokens",
        fmt=".4f",
        shown="power",
        **_VIEW_ONLY,
    ),
    Metric(
        name="mean_w",
        label="W mean",
        unit="W",
        higher_is_better=False,
        statistic="mean",
        samples="repeat",
        description="mean power over the cell's windows (NVML, or RAPL on a CPU machine)",
        fmt=".0f",
        shown="power",
        **_VIEW_ONLY,
    ),
    Metric(
        name="peak_w",
        label="W peak",
        unit="W",
        higher_is_better=False,
        statistic="mean",
        samples="repeat",
        description="highest power sample of the cell's windows",
        fmt=".0f",
        shown="power",
        **_VIEW_ONLY,
    ),
    Metric(
        name="j_per_token",
        label="J/token",
        unit="J/token",
        higher_is_better=False,
        statistic="mean",
        samples="repeat",
        description="energy over the windows / output tokens (throttled: the chip slowed for heat or power)",
        fmt=".3f",
        shown="power",
        flag=("throttled", "throttled"),
        **_VIEW_ONLY,
    ),
    Metric(
        name="copy_share_pct",
        label="copy %",
        unit="%",
        higher_is_better=True,
        statistic="mean",
        samples="request",
        description="output 3-token n-grams that occur in the prompt / output 3-grams, pooled over the "
        "cell's requests",
        fmt=".0f",
        shown="copy",
        **_VIEW_ONLY,
    ),
    Metric(
        name="prompt_tokens_mean",
        label="prompt tok",
        unit="tokens",
        higher_is_better=False,
        statistic="mean",
        samples="request",
        description="prompt tokens per request as the engine counted them (chat template included), mean "
        "over the "
        "cell's requests: a later turn carries the turns before it",
        fmt=".0f",
        shown="turns",
        **_VIEW_ONLY,
    ),
    Metric(
        name="prefix_cache_hit_pct",
        label="prefix hit %",
        unit="%",
        higher_is_better=True,
        statistic="mean",
        samples="repeat",
        description="prompt tokens the engine served from its prefix cache / prompt tokens looked up, over "
        "the cell's "
        "windows (probes.prefix_cache): emptied before a conversation's first turn, kept between its turns",
        fmt=".0f",
        shown="turns",
        **_VIEW_ONLY,
    ),
    Metric(
        name="identical_pct",
        label="same %",
        unit="%",
        higher_is_better=True,
        statistic="mean",
        samples="prompt",
        description="prompts whose greedy output token ids equal the baseline's",
        highlighted=False,
        compared=False,
        timed=False,
        fmt=".0f",
        field="exactness.identical_pct",
        terminal=True,
    ),
    Metric(
        name="diverged_pct",
        label="diverged %",
        unit="%",
        higher_is_better=False,
        statistic="mean",
        samples="prompt",
        description="prompts whose greedy output left the baseline's where the baseline's top-2 margin "
        "exceeded the "
        "near-tie margin: a suspected bug, not numerics (near ties are not counted)",
        highlighted=False,
        compared=False,
        timed=False,
        fmt=".0f",
        field="exactness.diverged_pct",
        shown="never",
    ),
    # open-loop windows (load.request_rate): did the client keep to its schedule
    Metric(
        name="achieved_rate_rps",
        label="sent req/s",
        unit="requests/s",
        higher_is_better=True,
        statistic="mean",
        samples="repeat",
        description="requests sent / window wall time (behind schedule: the client, not the server, set the "
        "load)",
        shown="open_loop",
        terminal=True,
        flag=("behind_schedule", "behind schedule"),
        **_VIEW_ONLY,
    ),
    Metric(
        name="schedule_lag_ms_p90",
        label="client lag p90",
        unit="ms",
        higher_is_better=False,
        statistic="p90",
        samples="request",
        description="90th percentile of how late the client sent a request after its scheduled time",
        fmt=".1f",
        shown="open_loop",
        **_VIEW_ONLY,
    ),
    # the send-based TTFT beside the due-based one (probes.latency): the difference is the queue
    Metric(
        name="ttft_ms_p50_sent",
        label="TTFT p50 sent",
        unit="ms",
        higher_is_better=False,
        statistic="p50",
        samples="request",
        description="open loop: median time to first token from the send, the wait for a max_concurrency "
        "slot left out",
        sample_field="ttft_s",
        scale=1000.0,
        fmt=".0f",
        shown="open_loop",
        **_VIEW_ONLY,
    ),
    Metric(
        name="ttft_ms_p90_sent",
        label="TTFT p90 sent",
        unit="ms",
        higher_is_better=False,
        statistic="p90",
        samples="request",
        description="open loop: 90th percentile time to first token from the send (the slot's wait left out)",
        sample_field="ttft_s",
        scale=1000.0,
        fmt=".0f",
        shown="open_loop",
        **_VIEW_ONLY,
    ),
    Metric(
        name="ttft_ms_p99_sent",
        label="TTFT p99 sent",
        unit="ms",
        higher_is_better=False,
        statistic="p99",
        samples="request",
        description="open loop: 99th percentile time to first token from the send (the slot's wait left out)",
        sample_field="ttft_s",
        scale=1000.0,
        fmt=".0f",
        shown="open_loop",
        **_VIEW_ONLY,
    ),
    Metric(
        name="queueing_ms_p50",
        label="queueing p50",
        unit="ms",
        higher_is_better=False,
        statistic="p50",
        samples="request",
        description="median wait of a request for a max_concurrency slot before it was sent",
        fmt=".0f",
        shown="open_loop",
        **_VIEW_ONLY,
    ),
    # the peers' throughputs (vllm bench serve's request and total token throughput)
    Metric(
        name="request_rps",
        label="req/s",
        unit="requests/s",
        higher_is_better=True,
        statistic="mean",
        samples="repeat",
        description="successful requests / window wall time (vLLM's request throughput)",
        fmt=".2f",
        shown="peers",
        **_VIEW_ONLY,
    ),
    Metric(
        name="total_tok_s",
        label="total tok/s",
        unit="tokens/s",
        higher_is_better=True,
        statistic="mean",
        samples="repeat",
        description="(prompt + output tokens of successful requests) / window wall time (vLLM's total "
        "token throughput; the prompt tokens as the engine counted them)",
        fmt=".1f",
        shown="peers",
        **_VIEW_ONLY,
    ),
)

# The peers' block: each latency as ``vllm bench serve`` and AIPerf print it (mean, median, min, max,
# std, p90, p99), beside the harness's own columns; the entries the registry has not already are
# made here, one per statistic, view-only (``shown="peers"``: the block's tables, the export, never
# a gate). The throughputs of the block are entries above this.
PEER_STATISTICS: tuple[Statistic, ...] = ("mean", "p50", "min", "max", "std", "p90", "p99")
_STATISTIC_WORDS = {
    "mean": "mean",
    "p50": "median",
    "min": "least",
    "max": "greatest",
    "std": "standard deviation (n in the denominator, as vLLM's and AIPerf's)",
    "p90": "90th percentile",
    "p99": "99th percentile",
}
# (name prefix, label, the request record's field in seconds, request or chunk, what it is)
PEER_LATENCIES = (
    ("ttft_ms", "TTFT", "scheduled_ttft_s", "request", "time to first token (from when it was due)"),
    ("ttst_ms", "TTST", "ttst_s", "request", "time to second token: the first two chunks' gap (AIPerf's)"),
    ("tpot_ms", "TPOT", "tpot_s", "request", "time per output token after the first"),
    ("itl_ms", "ITL", "itl_s", "chunk", "gap between streamed chunks after the first (vLLM's ITL)"),
    ("e2e_ms", "E2E", "scheduled_e2e_s", "request", "end-to-end latency (from when it was due)"),
)


def _peer_entries(present: set[str]) -> tuple[Metric, ...]:
    return tuple(
        Metric(
            name=f"{prefix}_{statistic}",
            label=f"{label} {statistic}",
            unit="ms",
            higher_is_better=False,
            statistic=statistic,
            samples=samples,  # type: ignore[arg-type]
            description=f"{_STATISTIC_WORDS[statistic]} {what}, per request (ITL: per chunk)",
            sample_field=field,
            scale=1000.0,
            fmt=".1f",
            shown="peers",
            **_VIEW_ONLY,
        )
        for prefix, label, field, samples, what in PEER_LATENCIES
        for statistic in PEER_STATISTICS
        if f"{prefix}_{statistic}" not in present
    )


_ALL = _ALL + _peer_entries({metric.name for metric in _ALL})

# prompt-sourced metrics: the exactness status each 100-valued sample counts
PROMPT_STATUS = {"identical_pct": "identical", "diverged_pct": "diverged"}

METRICS: dict[str, Metric] = {metric.name: metric for metric in _ALL}
GATED = tuple(name for name, metric in METRICS.items() if metric.gated)
HIGHLIGHTED = tuple(name for name, metric in METRICS.items() if metric.highlighted)
COMPARED = tuple(name for name, metric in METRICS.items() if metric.compared)


def shown(view: Literal["terminal", "report"], measured: set[str]) -> list[Metric]:
    """The metric columns of a view's mini-lab table, in registry order: those the view shows whose
    condition (``Metric.shown``) the run meets; ``measured`` holds the conditions met (slo, power,
    copy, open_loop, turns). Read at call time, so an entry added to ``METRICS`` appears in every view."""
    return [
        metric
        for metric in METRICS.values()
        if (metric.terminal or view == "report")
        and metric.shown != "never"
        and (metric.shown == "always" or metric.shown in measured)
    ]


def best(name: str, values: list[float]) -> float:
    """The best of several values of one metric, in the metric's direction."""
    return max(values) if METRICS[name].higher_is_better else min(values)


# request and chunk metrics: a cell computes each from its requests' samples (``Metric.of_records``)
PER_REQUEST = tuple(metric for metric in METRICS.values() if metric.sample_field is not None)
