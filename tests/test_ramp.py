"""Load that moves (``load.ramp``): the regime's stages, the client's one continuous window against
a local stream server (no engine), the formulas per stage and boundary, and the pooled metrics
with the one interval model."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from conftest import local_server

from harness.config.engines import ACTIVE_STEPS
from harness.config.load import Load, RampStage, Sampling
from harness.config.workloads import LoadedWorkload, Prompt, Workload
from harness.core.probes import ramp as formulas
from harness.results.records import RequestRecord
from harness.run.client import run_ramp

ROOT = Path(__file__).resolve().parent.parent
# each request: 10 tokens, 2 per chunk, 40 ms after each of the 6 events: ~0.24 s
CHUNK_DELAY_S = 0.04


@pytest.fixture(scope="module")
def slow_server() -> str:
    args = ("--tokens-per-chunk", "2", "--chunk-delay-s", str(CHUNK_DELAY_S))
    with local_server(ROOT / "benchmarks" / "stream_server.py", *args) as url:
        yield url


def _workload(count: int = 3) -> tuple[LoadedWorkload, list[Prompt]]:
    source = {"path": "x.jsonl", "format": "jsonl"}
    definition = Workload.model_validate(
        {"name": "w", "category": "c", "prompt_format": "raw", "source": source}
    )
    prompts = [Prompt(f"p{i}", "def f():") for i in range(count)]
    return LoadedWorkload(definition, prompts, "sha"), prompts


def _ramp(url: str, stages: list[dict], dues=None, **load_fields):
    from harness.config.engines import get_adapter

    workload, prompts = _workload()
    load = Load(
        concurrency=[1], num_prompts=3, max_output_tokens=10, ignore_eos=True, ramp=stages, **load_fields
    )
    ended: list[int] = []
    result = asyncio.run(
        run_ramp(
            url,
            workload,
            prompts,
            load.ramp,
            Sampling(temperature=0),
            load,
            engine_fields=get_adapter("vllm").request_fields("raw", 0),
            repeat=1,
            dues=dues,
            on_stage_end=ended.append,
        )
    )
    return load, result, ended


def _in_flight_at(records: list[RequestRecord], t: float) -> int:
    return sum(1 for r in records if r.t_send <= t < (r.t_done or float("inf")))


def test_a_closed_loop_ramp_holds_each_stage_s_concurrency(slow_server: str) -> None:
    """1 -> 4 -> 1: a rise sends at once, a fall waits for completions, nothing goes after the last
    stage, every stage's end is told (the runner reads the counters there), prompts cycle."""
    load, result, ended = _ramp(
        slow_server,
        [
            {"concurrency": 1, "duration_s": 1.0},
            {"concurrency": 4, "duration_s": 1.0},
            {"concurrency": 1, "duration_s": 1.0},
        ],
    )
    records = result.records
    assert not result.stalled and all(r.ok for r in records), [r.error for r in records if not r.ok]
    assert ended == [0, 1, 2]
    planned = [1.0, 2.0, 3.0]
    assert all(abs(got - want) < 0.5 for got, want in zip(result.stage_ends_s, planned, strict=True))
    assert max(r.t_send for r in records) < planned[-1] + 0.3  # the drain sends nothing
    assert {r.prompt_id for r in records} == {"p0", "p1", "p2"} and len(records) > 3  # in turn, again
    assert all(r.repeat == 1 and r.request_rate is None for r in records)
    for record in records:  # never more in flight than the stage the send fell in allows
        # a request launched just before a boundary may send just after it (a busy event loop)
        allowed = {[1, 4, 1][min(int(t), 2)] for t in (record.t_send, max(0.0, record.t_send - 0.2))}
        assert record.concurrency in allowed
        assert _in_flight_at(records, record.t_send) <= max(allowed)
    averages = [formulas.in_flight_between(records, a, b) for a, b in [(0.0, 1.0), (1.0, 2.0), (2.0, 3.0)]]
    # the load moved (bounds loose enough for a machine busy with engines: gaps between a completion
    # and the next send lower an average, never raise it past the stage's concurrency)
    assert 0.5 < averages[0] <= 1.0 and 2.0 < averages[1] <= 4.0 and averages[2] < averages[1] - 1.0
    # ~4x the requests in the second stage (each takes ~0.24 s): the load moved. Not 2.5x: on a
    # machine busy with engines a stage's requests run faster or slower than its neighbours' (a
    # suite run sent 5, 16, 7), and the averages above already hold each stage's concurrency
    sent = [sum(1 for r in records if a <= r.t_send < b) for a, b in [(0, 1), (1, 2), (2, 3)]]
    assert sent[1] > 1.5 * max(sent[0], sent[2]), sent


def test_an_open_loop_stage_sends_at_its_due_times(slow_server: str) -> None:
    """A rate stage between closed-loop ones: its requests go at their due times, recorded as such."""
    dues = [[], [1.0, 1.1, 1.2, 1.5], []]
    _, result, ended = _ramp(
        slow_server,
        [
            {"concurrency": 1, "duration_s": 1.0},
            {"request_rate": 4.0, "duration_s": 1.0},
            {"concurrency": 2, "duration_s": 0.5},
        ],
        dues=dues,
        max_concurrency=8,
    )
    assert ended == [0, 1, 2]
    rated = sorted((r for r in result.records if r.request_rate == 4.0), key=lambda r: r.t_scheduled)
    assert [r.t_scheduled for r in rated] == dues[1]
    assert all(r.t_scheduled <= r.t_dispatched <= r.t_send and r.t_send - r.t_scheduled < 0.2 for r in rated)
    assert all(r.concurrency == 8 for r in rated)  # at most the cap in flight


def test_stage_formulas_count_chunks_inside_the_span() -> None:
    """Tokens by the time their chunk arrived, in flight as a time average, TPOT inside a stage and
    across its start."""
    a = RequestRecord("w", "p0", 1, "raw", t_send=0.0, t_first_token=0.5, t_done=1.5)
    a.chunks, a.token_ids = [(0.5, 2, ""), (0.9, 2, ""), (1.5, 2, "")], list(range(6))
    b = RequestRecord("w", "p1", 1, "raw", t_send=1.1, t_first_token=1.2, t_done=1.8)
    b.chunks, b.token_ids = [(1.2, 3, ""), (1.8, 1, "")], list(range(4))
    failed = RequestRecord("w", "p2", 1, "raw", t_send=1.0, t_done=1.2, error="x")
    failed.chunks = [(1.1, 5, "")]
    records = [a, b, failed]
    assert formulas.tokens_between(records, 0.0, 1.0) == 4
    assert formulas.tokens_between(records, 1.0, 2.0) == 6  # a's last chunk and b's; the failure's not
    assert formulas.in_flight_between(records, 0.0, 1.0) == pytest.approx(1.0)
    assert formulas.in_flight_between(records, 1.0, 2.0) == pytest.approx((0.5 + 0.7 + 0.2) / 1.0)
    assert formulas.tpot_inside(records, 1.0, 2.0) == [pytest.approx(0.6 / 3)]  # b only
    assert formulas.tpot_across(records, 1.0) == [pytest.approx(1.0 / 5)]  # a spans the boundary
    assert formulas.in_flight_between(records, 1.0, 1.0) is None


def test_ramp_stages_are_checked_with_their_field_path(tmp_path: Path) -> None:
    from harness.config.regime import load_regime
    from harness.core.errors import UserError

    text = (ROOT / "regimes" / "cpu_default.yaml").read_text()
    bad = text.replace(
        "load:\n", "load:\n  ramp:\n    - {concurrency: 2, request_rate: 1.0, duration_s: 5}\n", 1
    )
    path = tmp_path / "r.yaml"
    path.write_text(bad)
    with pytest.raises(UserError, match=r"load\.ramp\[0\].*exactly one of concurrency or request_rate"):
        load_regime(path)
    path.write_text(text.replace("load:\n", "load:\n  ramp:\n    - {concurrency: 2, duration_s: 0}\n", 1))
    with pytest.raises(UserError, match=r"load\.ramp\[0\]\.duration_s"):
        load_regime(path)
    assert RampStage(request_rate=2.0, duration_s=1).label() == "@2req/s"


def test_a_regime_without_a_ramp_keeps_its_fingerprint() -> None:
    """``ramp`` is left out of the hashes while empty; a ramp changes the regime."""
    from harness.config.regime import load_regime

    regime = load_regime(ROOT / "regimes" / "cpu_default.yaml")
    load = regime.load.model_copy(update={"ramp": [RampStage(concurrency=2, duration_s=5)]})
    assert regime.model_copy(update={"load": load}).fingerprint() != regime.fingerprint()


# ---- pooled over start-ups: the one interval model per stage, the schedule on the ramp, the views ----

STAGES = [RampStage(concurrency=1, duration_s=10), RampStage(concurrency=4, duration_s=10)]


def _streaming(prompt: str, t_send: float, t_done: float, tokens: int, start: int) -> RequestRecord:
    """A request whose ``tokens`` chunks (one token each) arrive evenly from t_send to t_done."""
    record = RequestRecord("code", prompt, 1, "raw", repeat=start, t_send=t_send, t_done=t_done)
    step = (t_done - t_send) / tokens
    record.chunks = [(t_send + step * (i + 1), 1, "") for i in range(tokens)]
    record.t_first_token, record.token_ids = record.chunks[0][0], list(range(tokens))
    return record


def _ramp_arm(name: str, rates: tuple[float, float], starts: list[float], drafted: int = 0):
    """One arm's ramp windows: in each 10 s stage, back-to-back 1 s requests whose tokens make
    ``rates`` tok/s, scaled per start-up by ``starts`` (the start-up spread); counters read at the
    stage ends draft ``drafted`` tokens per draft, 2 accepted."""
    from harness.results.raw import RawArm
    from harness.results.records import ArmStatus, RampWindowRecord

    windows, records = [], []
    for start, scale in enumerate(starts):
        for stage, rate in enumerate(rates):
            for second in range(10):
                t = stage * 10 + second
                records.append(_streaming(f"p{t}", t, t + 1, round(rate * scale), start))
        count = {"drafts": 0.0, "draft_tokens": 0.0, "accepted_tokens": 0.0, "accepted_per_position": {}}
        counters = [count]
        for stage in range(2):
            drafts = 100.0 * (stage + 1) if drafted else 0.0
            last = counters[-1]
            counters.append(
                {
                    "drafts": last["drafts"] + drafts,
                    "draft_tokens": last["draft_tokens"] + drafts * drafted,
                    "accepted_tokens": last["accepted_tokens"] + drafts * 2,
                    "accepted_per_position": {},
                }
            )
        windows.append(
            RampWindowRecord(
                workload="code",
                prompt_format="raw",
                repeat=start,
                server_start=start,
                stages=STAGES,
                stage_ends_s=[10.0, 20.0],
                duration_s=21.0,
                counters=counters,
                # what SGLang's adaptive mode would show as each stage ends (vLLM reports nothing)
                stage_reported=[{ACTIVE_STEPS: 3}, {ACTIVE_STEPS: 1}] if drafted else [],
            )
        )
    return RawArm(name, ArmStatus(status="ok"), [], [], [], ramp=records, ramp_windows=windows)


def _ramp_run():
    from harness.config.regime import load_regime
    from harness.results.raw import RawRun

    regime = load_regime(ROOT / "tests" / "regimes" / "cpu_schedule_contract.yaml")
    names = [a.name for a in regime.arms]
    spread = [1.0, 1.05, 0.97]
    arms = {
        names[0]: _ramp_arm(names[0], (20, 40), spread),
        **{
            name: _ramp_arm(name, (40, 40), [s * (1 + 0.01 * i) for s in spread], drafted=4)
            for i, name in enumerate(names[1:])
        },
    }
    return RawRun(run=None, record={}, regime=regime, environment={}, arms=arms)  # type: ignore[arg-type]


def test_a_stage_s_speedup_is_the_one_model_over_its_start_ups() -> None:
    from harness.derive.intervals import cell_estimates
    from harness.derive.ramp import ramp_metrics

    raw = _ramp_run()
    found = ramp_metrics(raw)
    baseline = raw.baseline_arm
    other = next(name for name in raw.arms if name != baseline)
    first = next(m for m in found if (m.arm, m.stage) == (other, 0))
    assert first.output_tok_s == pytest.approx(40 * sum([1.0, 1.05, 0.97]) / 3, rel=0.02)
    table = {m.arm: dict(enumerate(m.startup_tok_s)) for m in found if (m.workload, m.stage) == ("code", 0)}
    expected = cell_estimates(table, baseline)[other]
    assert (first.speedup, first.estimate.low, first.estimate.high) == (
        expected.point,
        expected.low,
        expected.high,
    )
    assert first.speedup == pytest.approx(2.0, rel=0.03) and first.estimate.low > 1.5  # it pays at 1
    second = next(m for m in found if (m.arm, m.stage) == (other, 1))
    assert second.speedup == pytest.approx(1.0, rel=0.03)  # the same at 4
    assert (first.engine_steps, second.engine_steps) == (3, 1)
    assert first.drafted_per_draft == 4.0 and first.tau == pytest.approx(3.0)
    whole = next(m for m in found if (m.arm, m.stage) == (other, None))
    assert whole.label == "ramp" and (whole.start_s, whole.end_s) == (0.0, 20.0)
    assert whole.speedup == pytest.approx(80 / 60, rel=0.03)
    base = next(m for m in found if (m.arm, m.stage) == (baseline, 0))
    assert base.speedup == 1.0 and base.tau is None and base.drafted_per_draft is None
    assert base.mean_in_flight == pytest.approx(1.0) and base.requests_sent == 30  # 10 per start-up
    # requests end exactly where the next begins: none spans the boundary, every one is inside
    assert second.tpot_ms_p90_across is None and second.tpot_ms_p90_inside is not None


def test_the_views_show_the_ramp_and_a_schedule_on_it() -> None:
    from harness.derive.ramp import ramp_metrics
    from harness.derive.schedule import ramp_checks
    from harness.present.ramp_table import ramp_sections
    from harness.present.schedule_text import ramp_line
    from harness.results.model import ArmSummary

    raw = _ramp_run()
    found = ramp_metrics(raw)
    arms = [
        ArmSummary(
            name=a.name,
            method=a.method,
            num_speculative_tokens=a.num_speculative_tokens,
            drafter=None,
            status="ok",
            k_schedule=[tuple(r) for r in a.k_schedule] if isinstance(a.k_schedule, list) else None,
        )
        for a in raw.regime.arms
    ]
    checks = ramp_checks(arms, found)
    scheduled = [a for a in arms if a.k_schedule]
    assert [c.arm for c in checks] == [a.name for a in scheduled]
    for check in checks:
        labels = [label for label, _ in check.spans]
        assert labels == ["@1, 0-10 s", "@4, 10-20 s", "whole ramp"]
        assert check.spans[0][1].scheduled_k >= 0 and check.spans[-1][1].scheduled_k == -1
        assert "on the whole ramp (code)" in ramp_line(check)
    from harness.results.model import Summary

    summary = Summary.model_construct(arms=arms, ramp=found, baseline_arm=raw.baseline_arm)
    (section,) = ramp_sections(summary)
    assert len(section["rows"]) == 3 * len(arms) and section["rows"][0][0] == "1: @1"
    assert section["rows"][-1][0] == "whole ramp"
    from types import SimpleNamespace

    from harness.present.ramp_table import ramp_schedule_sections

    proofs = ramp_schedule_sections(SimpleNamespace(ramp_checks=checks))  # type: ignore[arg-type]
    assert [len(p["rows"]) for p in proofs] == [3] * len(scheduled)  # 2 stages and the whole ramp
    assert all(p["rows"][0][1] != "-" and p["rows"][-1][1] == "-" for p in proofs)  # K per stage, none whole
    assert all("on the whole ramp" in p["lines"][0] for p in proofs)


def test_an_engine_without_counters_counts_the_requests_sent_in_the_stage() -> None:
    """SGLang has no draft counters: a stage's tau and drafted per draft come from the requests
    sent in it (each one's spec details), as a cell's do."""
    from harness.derive.ramp import _span_metrics
    from harness.results.records import RampWindowRecord

    records = [_streaming(f"p{t}", t, t + 1, 8, 0) for t in range(20)]
    for record in records:  # 4 verify steps, 3 drafts proposed per step, 2 accepted per step
        steps = 4 if record.t_send < 10 else 8
        record.spec_details = {
            "spec_verify_ct": steps,
            "spec_num_proposed_drafts": 3 * steps,
            "spec_num_correct_drafts": 2 * steps,
            "spec_correct_drafts_histogram": [0, 0, steps],
        }
    window = RampWindowRecord(
        workload="code",
        prompt_format="raw",
        stages=STAGES,
        stage_ends_s=[10.0, 20.0],
        duration_s=21.0,
        acceptance_source="per_request",
        counters=[None, None, None],
    )
    found = _span_metrics("eagle3", "code", (0, STAGES[0]), (0.0, 10.0), [(window, records)], True, "sglang")
    assert found.tau == pytest.approx(3.0) and found.drafted_per_draft == pytest.approx(3.0)
    assert found.requests_sent == 10
