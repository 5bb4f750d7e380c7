"""Probe arithmetic on hand-made samples, and the summary derived from raw records."""

from __future__ import annotations

import numpy as np
import pytest

from harness.config.arms import Arm
from harness.core.probes.acceptance import SpecCounters, acceptance
from harness.core.probes.cost import usd_per_mtok
from harness.core.probes.latency import itl_s, tpot_s, ttft_s
from harness.core.probes.throughput import output_tokens_per_s, speedup
from harness.core.stats import quantile
from harness.derive.summary import _model_estimates, _with_speedups, category_rows, cell_metrics
from harness.results import CellMetrics, ExactnessShares, RepeatMetrics, RequestRecord, WindowRecord


def _plain(tables, prompts):  # the arms x rounds model with no calibration, no looks, every arm paired
    return _model_estimates(tables, prompts, "base", None, 1, (), None)


def test_tau_from_counter_deltas() -> None:
    before = SpecCounters(drafts=10, draft_tokens=40, accepted_tokens=5, accepted_per_position={0: 3, 1: 2})
    after = SpecCounters(
        drafts=66, draft_tokens=264, accepted_tokens=118, accepted_per_position={0: 50, 1: 40, 2: 20, 3: 13}
    )
    acc = acceptance(after.minus(before))
    assert acc.tau == pytest.approx(1 + 113 / 56)
    assert acc.acceptance_rate == pytest.approx(113 / 224)
    assert acc.per_position == pytest.approx([47 / 56, 38 / 56, 20 / 56, 13 / 56])


def test_tau_absent_without_drafts() -> None:
    acc = acceptance(SpecCounters())
    assert acc.tau is None and acc.acceptance_rate is None and acc.per_position == []


def test_ttft_tpot() -> None:
    assert ttft_s(1.0, 1.25) == pytest.approx(0.25)
    # 11 tokens: first at 1.25, done at 2.25 -> 10 inter-token intervals of 0.1 s
    assert tpot_s(1.0, 1.25, 2.25, 11) == pytest.approx(0.1)
    assert tpot_s(1.0, 1.25, 1.25, 1) is None
    assert ttft_s(1.0, None) is None


def test_percentile_matches_linear_interpolation() -> None:
    assert quantile([4, 1, 3, 2], 0.5) == pytest.approx(2.5)
    assert quantile([1, 2, 3, 4, 5], 0.9) == pytest.approx(4.6)


def test_throughput_speedup_cost() -> None:
    assert output_tokens_per_s(1000, 20.0) == pytest.approx(50.0)
    assert output_tokens_per_s(0, 20.0) is None
    assert speedup(60.0, 40.0) == pytest.approx(1.5)
    assert speedup(60.0, None) is None
    # 8 GPUs at $3.50 = $28/h; 10,000 tok/s -> 36M tok/h -> $0.777.../Mtok
    assert usd_per_mtok(28.0, 10_000.0) == pytest.approx(28.0 / 36.0)
    assert usd_per_mtok(28.0, None) is None


def _record(
    t_send: float, t_first: float, t_done: float, tokens: int, error: str | None = None, repeat: int = 0
) -> RequestRecord:
    return RequestRecord.from_json(
        {
            "workload": "w",
            "prompt_id": "p",
            "concurrency": 1,
            "prompt_format": "raw",
            "repeat": repeat,
            "t_send": t_send,
            "t_first_token": t_first,
            "t_done": t_done,
            "token_ids": list(range(tokens)),
            "error": error,
        }
    )


def _window(repeat: int, duration: float, after: SpecCounters) -> WindowRecord:
    return WindowRecord(
        workload="w",
        category="code",
        prompt_format="raw",
        concurrency=1,
        repeat=repeat,
        duration_s=duration,
        counters_before=SpecCounters().to_json(),
        counters_after=after.to_json(),
    )


ARM = Arm(name="ng", method="ngram", num_speculative_tokens=4)


def test_window_metrics_uses_token_ids_and_excludes_errors() -> None:
    after = SpecCounters(drafts=4, draft_tokens=16, accepted_tokens=8, accepted_per_position={0: 4, 1: 4})
    records = [
        _record(0.0, 0.5, 2.5, 21),
        _record(0.0, 1.0, 4.0, 31),
        _record(0.0, 0.1, 0.2, 0, error="timeout", repeat=1),  # its window, all failed, is not summed
    ]
    windows = [_window(0, 4.0, after), _window(1, 1.0, after)]
    metrics = cell_metrics(ARM, None, windows, records, price_per_hour=0.36, usd_per_kwh=None, engine="vllm")
    assert (metrics.requests_total, metrics.requests_ok, metrics.requests_errored) == (3, 2, 1)
    assert metrics.output_tokens == 52
    assert metrics.output_tok_s == pytest.approx(13.0)
    assert metrics.ttft_ms_p50 == pytest.approx(750.0)
    assert metrics.tpot_ms_p50 == pytest.approx(100.0)  # both requests: 2.0/20 and 3.0/30
    assert metrics.tau == pytest.approx(3.0)
    assert metrics.per_position_acceptance == pytest.approx([1.0, 1.0])
    assert metrics.usd_per_mtok == pytest.approx(0.36 / (13.0 * 3600) * 1e6)
    assert (
        metrics.repeats == 2
        and len(metrics.per_repeat) == 1
        and metrics.per_repeat[0].tau == pytest.approx(3.0)
    )


def test_repeats_pool_into_one_cell_and_stay_apart_per_repeat() -> None:
    def window(repeat: int, duration: float, accepted: int) -> WindowRecord:
        return _window(repeat, duration, SpecCounters(drafts=4, draft_tokens=16, accepted_tokens=accepted))

    records = [_record(0.0, 0.5, 2.5, 21, repeat=0), _record(0.0, 0.5, 4.5, 41, repeat=1)]
    metrics = cell_metrics(
        ARM, None, [window(0, 2.0, 8), window(1, 4.0, 4)], records, 0.36, None, engine="vllm"
    )
    assert metrics.repeats == 2 and metrics.duration_s == pytest.approx(6.0)
    assert metrics.output_tok_s == pytest.approx(62 / 6.0)  # pooled: tokens and time add up
    assert metrics.tau == pytest.approx(1 + 12 / 8)  # pooled counters
    assert [r.tau for r in metrics.per_repeat] == pytest.approx([3.0, 2.0])
    assert [r.output_tok_s for r in metrics.per_repeat] == pytest.approx([10.5, 10.25])


def _streamed(t_send: float, chunks: list[tuple[float, int]], error: str | None = None) -> RequestRecord:
    """A request whose stream is ``chunks`` (time, tokens), done at the last chunk + 5 ms."""
    record = _record(t_send, chunks[0][0], chunks[-1][0] + 0.005, sum(n for _, n in chunks), error)
    record.chunks = [(t, n, "x" * n) for t, n in chunks]
    return record


def test_itl_is_per_chunk_pooled_over_requests_and_never_tpot() -> None:
    """vLLM's ITL: one gap per streamed chunk after a request's first, however many tokens the chunk
    carries, pooled over the cell's requests (an errored one left out); TPOT stays per token and
    per request. Every p99 and ITL statistic against numpy's (vLLM's own np.mean / np.median /
    np.percentile), never hand arithmetic."""
    rng = np.random.default_rng(62)
    kept = []
    for index in range(9):  # 9 and 1 errored: under the share of failures that leaves a window out
        times = 0.2 + index + np.cumsum(rng.uniform(0.01, 0.09, size=12 + index))  # 12..20 chunks
        tokens = rng.integers(1, 6, size=len(times))  # 1..5 tokens a chunk
        kept.append(_streamed(float(index), [(float(t), int(n)) for t, n in zip(times, tokens, strict=True)]))
    errored = _streamed(9.0, [(9.1, 1), (9.9, 3)], error="timeout")
    window = _window(0, 30.0, SpecCounters())
    metrics = cell_metrics(ARM, None, [window], [*kept, errored], 0.36, None, engine="vllm")

    gaps = np.concatenate([np.diff([t for t, _, _ in r.chunks]) for r in kept]) * 1000
    assert len(gaps) == sum(len(r.chunks) - 1 for r in kept)  # one per chunk after the first
    assert metrics.itl_ms_mean == pytest.approx(np.mean(gaps))
    assert metrics.itl_ms_p50 == pytest.approx(np.median(gaps))
    assert metrics.itl_ms_p99 == pytest.approx(np.percentile(gaps, 99))
    tpots = [(r.t_done - r.t_first_token) / (r.output_tokens - 1) * 1000 for r in kept]
    ttfts = [(r.t_first_token - r.t_send) * 1000 for r in kept]
    e2es = [(r.t_done - r.t_send) * 1000 for r in kept]
    for name, values in (("tpot", tpots), ("ttft", ttfts), ("e2e", e2es)):
        assert getattr(metrics, f"{name}_ms_p99") == pytest.approx(np.percentile(values, 99)), name
    assert metrics.e2e_ms_p50 == pytest.approx(np.median(e2es))
    assert metrics.e2e_ms_p90 == pytest.approx(np.percentile(e2es, 90))
    # a chunk carries ~3 tokens here: ITL is a step, about 3 TPOTs, never the per-token figure
    assert metrics.itl_ms_mean > 2 * metrics.tpot_ms_p50
    assert itl_s([1.0]) == [] and itl_s([]) == []
    assert kept[0].itl_s == pytest.approx(np.diff([t for t, _, _ in kept[0].chunks]))


def _cell(arm: str, workload: str, concurrency: int, tok_s: float, **fields: object) -> CellMetrics:
    """A cell with only what a test sets; the rest empty."""
    base = dict(
        arm=arm,
        method="baseline" if arm == "base" else "ngram",
        num_speculative_tokens=None,
        drafter=None,
        workload=workload,
        category="code",
        prompt_format="raw",
        concurrency=concurrency,
        repeats=1,
        requests_total=1,
        requests_ok=1,
        requests_errored=0,
        output_tokens=0,
        duration_s=1.0,
        output_tok_s=tok_s,
        ttft_ms_p50=None,
        ttft_ms_p90=None,
        tpot_ms_p50=None,
        tpot_ms_p90=None,
        acceptance_source="server_counters",
        server_reported=None,
        tau=None,
        acceptance_rate=None,
        per_position_acceptance=[],
        drafts=0.0,
        draft_tokens=0.0,
        accepted_tokens=0.0,
        usd_per_mtok=None,
        power_source=None,
        power_note="",
        mean_w=None,
        peak_w=None,
        energy_j=None,
        j_per_token=None,
        throttled=None,
        energy_usd_per_mtok=None,
        per_repeat=[
            RepeatMetrics(
                repeat=0, duration_s=1.0, output_tokens=0, output_tok_s=tok_s, tau=None, usd_per_mtok=None
            )
        ],
        speedup=None,
        exactness=None,
    )
    return CellMetrics(**{**base, **fields})


def test_speedup_pairs_same_workload_and_concurrency() -> None:
    rows = [
        _cell("base", "w", 1, 40.0),
        _cell("base", "w", 4, 100.0),
        _cell("ng", "w", 1, 60.0),
        _cell("ng", "w", 4, 90.0),
        _cell("ng", "other", 1, 90.0),
    ]
    rows = _with_speedups(rows, "base", _plain, {})
    assert [r.speedup for r in rows] == pytest.approx([1.0, 1.0, 1.5, 0.9, None])
    assert [r.per_repeat[0].speedup for r in rows] == pytest.approx([1.0, 1.0, 1.5, 0.9, None])


def test_categories_pool_their_workloads() -> None:
    def row(
        arm: str,
        workload: str,
        category: str,
        tokens: int,
        duration: float,
        drafts: float,
        accepted: float,
        same: float | None,
    ) -> CellMetrics:
        exactness = (
            None
            if same is None
            else ExactnessShares(
                compared=2, identical_pct=same, near_tie_pct=None, diverged_pct=None, unknown_pct=None
            )
        )
        return _cell(
            arm,
            workload,
            1,
            0.0,
            category=category,
            output_tokens=tokens,
            duration_s=duration,
            drafts=drafts,
            accepted_tokens=accepted,
            exactness=exactness,
            per_repeat=[
                RepeatMetrics(
                    repeat=0,
                    duration_s=duration,
                    output_tokens=tokens,
                    output_tok_s=tokens / duration,
                    tau=None,
                    usd_per_mtok=None,
                )
            ],
        )

    rows = [
        row("base", "a", "extract", 100, 10.0, 0, 0, 100),
        row("base", "b", "extract", 100, 10.0, 0, 0, 100),
        row("ng", "a", "extract", 100, 5.0, 10, 20, 100),
        row("ng", "b", "extract", 100, 15.0, 30, 20, 50),
        row("ng", "c", "chat", 50, 10.0, 10, 5, None),
    ]
    # the category's speedup: the cells' model over its per-start-up tok/s (tokens over time per repeat)
    cells = {(r.arm, r.category): r for r in category_rows(rows, "base", _plain, {})}
    extract = cells[("ng", "extract")]
    assert extract.workloads == ["a", "b"] and extract.output_tok_s == pytest.approx(10.0)
    assert extract.tau == pytest.approx(1 + 40 / 40) and extract.speedup == pytest.approx(1.0)
    assert extract.identical_pct == pytest.approx(75.0) and extract.exactness_pairs == 4
    assert cells[("ng", "chat")].speedup is None  # no baseline measured that category


def test_cpu_accounting_splits_the_machine_by_whom() -> None:
    import os

    from harness.core.probes import cpu
    from harness.run.sensors import cpu as cpu_sensor

    before = cpu.CpuSnapshot(busy_s=100.0, steal_s=1.0, engine_s=10.0, client_s=2.0, cores=4)
    after = cpu.CpuSnapshot(busy_s=110.0, steal_s=1.5, engine_s=17.0, client_s=2.5, cores=4)
    used = cpu.window_cpu(before, after)
    assert used is not None
    assert (used["engine_s"], used["client_s"], used["others_s"], used["steal_s"]) == pytest.approx(
        (7, 0.5, 2.5, 0.5)
    )
    assert used["cores"] == 4.0  # the machine's, as the snapshot recorded it
    # tick-granular counters can disagree by a tick: a neighbour is never negative
    assert cpu.window_cpu(before, cpu.CpuSnapshot(100.0, 1.0, 10.02, 2.0, 4))["others_s"] == 0.0
    assert cpu.window_cpu(None, after) is None
    # on this Linux machine: the real /proc, with this process's own group as the "engine"
    start = cpu_sensor.snapshot(os.getpgid(0))
    sum(i * i for i in range(300_000))  # burn some CPU in this process
    end = cpu_sensor.snapshot(os.getpgid(0))
    assert start is not None and end is not None and end.cores == os.cpu_count()
    assert end.client_s > start.client_s and end.engine_s >= start.engine_s and end.busy_s >= start.busy_s


def test_per_position_acceptance_marginal_conditional_and_its_checks() -> None:
    """vLLM's per-position counters are marginal (the share of drafts whose first i + 1 tokens
    were accepted); conditional = marginal_i / marginal_(i-1). Every cell's counters must give
    tau = 1 + the sum of the marginals, with marginals that never rise."""
    from harness.core.probes.acceptance import (
        SpecCounters,
        acceptance,
        acceptance_problems,
        conditional_rates,
    )

    delta = SpecCounters(
        drafts=10, draft_tokens=30, accepted_tokens=12, accepted_per_position={0: 6, 1: 4, 2: 2}
    )
    acc = acceptance(delta)
    assert acc.per_position == pytest.approx([0.6, 0.4, 0.2]) and acc.tau == pytest.approx(2.2)
    assert conditional_rates(acc.per_position) == pytest.approx([0.6, 4 / 6, 0.5])
    assert conditional_rates([0.5, 0.0, 0.0]) == [0.5, 0.0, None]  # nothing got past position 1
    assert acceptance_problems(acc.tau, acc.per_position) == []
    # a scrape that missed the last step's per-position counters: tau and the positions disagree
    short = acceptance(SpecCounters(10, 30, 12, {0: 6, 1: 4, 2: 1}))
    assert acceptance_problems(short.tau, short.per_position) == [
        "tau 2.2000 is not 1 + the sum of the per-position rates (2.1000)"
    ]
    rising = [0.3, 0.5]
    assert acceptance_problems(1.8, rising) == [
        "the per-position rate rises from position 0 to 1 (0.300 -> 0.500)"
    ]
    assert acceptance_problems(None, []) == [] and acceptance_problems(1.0, []) == []


def test_drafts_accepted_past_a_stop_are_measured_from_the_stream() -> None:
    """A verify step accepts its drafts before the stop is checked: the counters can count drafts
    never output. The stream shows the ones that were: each step's chunk is its own token plus the
    drafts it accepted."""
    from harness.core.probes.acceptance import accepted_past_stop, streamed_steps

    # 1 prefill token, then steps emitting 3, 1, 4 and (the last, cut at max_tokens) 2 tokens:
    # 6 drafts output; the last step had accepted 3 (4 tokens) of which 1 went out -> 2 past the stop
    chunks = [(0.0, 1, "a"), (0.1, 3, "b"), (0.2, 1, "c"), (0.3, 4, "d"), (0.4, 2, "e")]
    output = sum(n for _, n, _ in chunks)
    assert streamed_steps(chunks) == 4
    assert accepted_past_stop(output, 1, 8, streamed_steps(chunks)) == 2
    assert accepted_past_stop(output, 1, 6, streamed_steps(chunks)) == 0  # everything accepted went out
    assert accepted_past_stop(output, 1, 0, streamed_steps(chunks)) is None  # nothing accepted
    # steps merged into fewer chunks (a slow reader) make it a lower bound, never negative
    assert accepted_past_stop(output, 1, 8, 2) == 0


def test_requests_own_acceptance_gives_tau_per_prompt_and_checks_the_counters() -> None:
    """vLLM 0.33's per-request metrics (the response's metrics.speculative_decoding): tau per
    prompt over the cell's repeats, and the counters checked against the requests' sum."""

    def record(prompt: str, steps: int, accepted: int, histogram: list[int]) -> RequestRecord:
        r = _record(0.0, 0.5, 2.5, 1 + steps + accepted)
        r.prompt_id = prompt
        r.chunks = [(0.0, 1, "x")] + [(0.1, 1, "y")] * steps  # merged: no past-stop evidence needed
        r.spec_details = {
            "num_spec_steps": steps,
            "num_accepted_draft_tokens": accepted,
            "num_draft_tokens": 4 * steps,
            "acceptance_histogram": histogram,
        }
        return r

    records = [record("a", 2, 4, [0, 0, 2]), record("b", 4, 2, [2, 2])]
    agree = SpecCounters(drafts=6, draft_tokens=24, accepted_tokens=6, accepted_per_position={0: 4, 1: 2})
    cell = cell_metrics(ARM, None, [_window(0, 4.0, agree)], records, 0.36, None, engine="vllm")
    assert cell.prompt_tau == pytest.approx({"a": 3.0, "b": 1.5})
    assert cell.acceptance_checks == [] and cell.tau == pytest.approx(2.0)
    missed = SpecCounters(drafts=5, draft_tokens=20, accepted_tokens=5, accepted_per_position={0: 3, 1: 2})
    short = cell_metrics(ARM, None, [_window(0, 4.0, missed)], records, 0.36, None, engine="vllm")
    assert "the requests' own drafts (6) differ from the server's counters (5)" in short.acceptance_checks
    for r in records:
        r.spec_details = None  # vLLM 0.32 (no per-request metrics): no tau per prompt, no check
    plain = cell_metrics(ARM, None, [_window(0, 4.0, missed)], records, 0.36, None, engine="vllm")
    assert plain.prompt_tau is None and plain.acceptance_checks == []


def test_prefix_cache_share_pools_a_turns_windows() -> None:
    """A conversation turn's cell: its turn, and the prefix cache's hits over lookups added up over
    its windows (not averaged per window); a window the engine reported nothing for counts nothing."""
    from harness.core.probes.prefix_cache import PrefixCacheCounts, hit_pct

    assert hit_pct([PrefixCacheCounts(100, 0), PrefixCacheCounts(300, 256)]) == pytest.approx(64.0)
    assert hit_pct([]) is None and hit_pct([PrefixCacheCounts(0, 0)]) is None
    assert PrefixCacheCounts(500, 300).minus(PrefixCacheCounts(200, 44)) == (300, 256)
    after = SpecCounters(drafts=4, draft_tokens=16, accepted_tokens=8, accepted_per_position={0: 4, 1: 4})
    windows = [
        _window(0, 4.0, after).model_copy(
            update={"workload": "w.turn2", "turn": 2, "prefix_cache": {"queries": 100.0, "hits": 0.0}}
        ),
        _window(1, 4.0, after).model_copy(
            update={"workload": "w.turn2", "turn": 2, "prefix_cache": {"queries": 300.0, "hits": 256.0}}
        ),
        _window(2, 4.0, after).model_copy(update={"workload": "w.turn2", "turn": 2}),
    ]
    records = [_record(0.0, 0.5, 2.5, 21), _record(0.0, 0.5, 2.5, 21), _record(0.0, 0.5, 2.5, 21)]
    records[0].prompt_token_count, records[1].prompt_token_count = 100, 300  # the third: not said
    cell = cell_metrics(ARM, None, windows, records, price_per_hour=0.36, usd_per_kwh=None, engine="vllm")
    assert (cell.workload, cell.turn, cell.prefix_cache_hit_pct) == ("w.turn2", 2, pytest.approx(64.0))
    assert cell.prompt_tokens_mean == pytest.approx(200.0)
    single = cell_metrics(
        ARM, None, [_window(0, 4.0, after)], [_record(0.0, 0.5, 2.5, 21)], 0.36, None, engine="vllm"
    )
    assert single.turn is None and single.prefix_cache_hit_pct is None and single.prompt_tokens_mean is None
