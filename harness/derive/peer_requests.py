"""Each cell's requests as AIPerf's files hold them, and their distributions (``bench export
--format aiperf``, issue 80).

AIPerf keeps one record per request (``profile_export.jsonl``) and, per metric, a block over them
(``profile_export_aiperf.json``: count, sum, avg, min, max, std, p1 ... p99). Here both come from
the run's raw request records, the cell's own (its arm, workload and load level, every repeat, the
warm-up left out), in AIPerf's definitions where they differ from the harness's:

- every latency is timed from the send (AIPerf's), also in open loop, where the cell counts TTFT
  and E2E from when the request was due;
- AIPerf's ``time_to_second_token`` is the gap between the first two streamed chunks (its
  ``TTSTMetric``: second response - first response), the harness's TTST (``probes.latency.ttst_s``);
- its ``output_token_throughput_per_user`` is 1 / its ITL, the harness's TPOT, per request.

A distribution pools the successful requests' values (a chunk metric: every chunk gap), and its
percentiles are the harness's one quantile (``harness.core.stats.quantile``, numpy's default and
AIPerf's), so where the definitions agree a closed-loop cell's p50/p90/p99 are these exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.config.level import LoadLevel
from harness.core.stats import mean, population_std, quantile
from harness.results.model import Summary
from harness.results.raw import RawRun
from harness.results.records import RequestRecord

PERCENTILES = (1, 5, 10, 25, 50, 75, 90, 95, 99)  # AIPerf's JsonMetricResult's p-fields
MS = 1000.0


@dataclass(frozen=True)
class Distribution:
    """One metric's values over a cell's requests, in the metric's unit."""

    count: int
    sum: float
    mean: float
    min: float
    max: float
    std: float  # the population's (n), AIPerf's and vLLM's
    percentiles: dict[int, float]

    @classmethod
    def of(cls, values: list[float]) -> Distribution | None:
        if not values:
            return None
        return cls(
            count=len(values),
            sum=sum(values),
            mean=mean(values),
            min=min(values),
            max=max(values),
            std=population_std(values),
            percentiles={p: quantile(values, p / 100) for p in PERCENTILES},
        )


@dataclass(frozen=True)
class RequestValues:
    """One request of a cell: when it ran and what it measured (None: undefined for it)."""

    repeat: int
    prompt_id: str
    start_s: float  # the send, seconds from its window's start (the harness's monotonic clock)
    end_s: float  # the end of its stream (or its error), likewise
    error: str | None
    ttft_ms: float | None
    e2e_ms: float | None
    tpot_ms: float | None
    ttst_ms: float | None  # AIPerf's TTST: the first two chunks' gap
    chunk_gaps_ms: tuple[float, ...]  # vLLM's ITL, AIPerf's inter_chunk_latency
    tok_s_per_user: float | None  # AIPerf's output_token_throughput_per_user: 1 / TPOT
    input_tokens: int | None
    output_tokens: int


@dataclass(frozen=True)
class CellRequests:
    """A cell's requests in the order they were sent (by repeat), and each metric's distribution
    over the successful ones, keyed by ``RequestValues``' field name."""

    arm: str
    workload: str
    level: LoadLevel
    requests: tuple[RequestValues, ...]
    distributions: dict[str, Distribution] = field(default_factory=dict)
    # requests left out of ``requests``: failed ones with no end time to place them by
    unplaced: int = 0


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * MS


def _values(record: RequestRecord) -> RequestValues:
    gaps = record.itl_s
    tpot = record.tpot_s
    return RequestValues(
        repeat=record.repeat,
        prompt_id=record.prompt_id,
        start_s=record.t_send,
        end_s=record.t_done,  # type: ignore[arg-type]  # only records with an end come here
        error=record.failure,
        ttft_ms=_ms(record.ttft_s),
        e2e_ms=_ms(record.e2e_s),
        tpot_ms=_ms(tpot),
        ttst_ms=_ms(record.ttst_s),
        chunk_gaps_ms=tuple(g * MS for g in gaps),
        tok_s_per_user=1.0 / tpot if tpot else None,
        input_tokens=record.prompt_token_count,
        output_tokens=record.output_tokens,
    )


# the distributions a cell's requests give: RequestValues' measured fields
DISTRIBUTIONS = (
    "ttft_ms",
    "e2e_ms",
    "tpot_ms",
    "ttst_ms",
    "chunk_gaps_ms",
    "tok_s_per_user",
    "input_tokens",
    "output_tokens",
)


def _samples(requests: list[RequestValues], name: str) -> list[float]:
    """A field's values over the requests, pooled (a chunk field: every chunk's), None left out."""
    values = (getattr(r, name) for r in requests)
    return [x for v in values if v is not None for x in (v if isinstance(v, tuple) else (v,))]


def cell_requests(summary: Summary, raw: RawRun) -> list[CellRequests]:
    """Every cell of the summary with its requests, in the summary's cell order."""
    out = []
    for cell in summary.cells:
        arm = raw.arms.get(cell.arm)
        level = LoadLevel(cell.concurrency, cell.request_rate)
        records = [
            r for r in (arm.samples if arm else []) if r.workload == cell.workload and r.level == level
        ]
        placed = sorted((r for r in records if r.t_done is not None), key=lambda r: (r.repeat, r.t_send))
        requests = tuple(_values(r) for r in placed)
        ok = [v for v in requests if v.error is None]
        distributions = {name: d for name in DISTRIBUTIONS if (d := Distribution.of(_samples(ok, name)))}
        out.append(
            CellRequests(cell.arm, cell.workload, level, requests, distributions, len(records) - len(placed))
        )
    return out
