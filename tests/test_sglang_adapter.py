"""The SGLang adapter's pure parts (the contract tests check its argv against SGLang's parser)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from harness.config.engines import get_adapter
from harness.config.engines.sglang import request_counters, served_from_server_info, server_figures_from_info
from harness.config.regime import load_regime
from harness.core.probes.acceptance import acceptance
from harness.run.validation import check_served

ROOT = Path(__file__).resolve().parent.parent
REGIME = load_regime(ROOT / "regimes" / "h200_tp1_qwen3_8b_sglang.yaml")


def test_request_fields_per_endpoint() -> None:
    adapter = get_adapter("sglang")
    assert adapter.acceptance_source == "per_request"
    assert adapter.request_fields("raw", 2) == {"return_token_ids": True, "return_spec_tokens_details": True}
    # streaming chat refuses return_token_ids; the ids come once, at the end, in sglext
    assert adapter.request_fields("chat", 2) == {
        "return_output_ids_in_sglext": True,
        "return_input_ids_in_sglext": True,  # the prompt's ids, for the copy share
        "return_spec_tokens_details": True,
    }


def test_options_become_flags() -> None:
    arm = next(a for a in REGIME.arms if a.name == "ngram_k4")
    arm = arm.model_copy(
        update={"options": {"speculative_ngram_max_trie_depth": 12, "speculative_ngram_capacity": 1000}}
    )
    args = get_adapter("sglang").speculative_args(arm, None)
    assert args[-4:] == ["--speculative-ngram-max-trie-depth", "12", "--speculative-ngram-capacity", "1000"]


def test_request_counters_sum_like_server_counters() -> None:
    details = [
        {
            "spec_verify_ct": 4,
            "spec_num_correct_drafts": 6,
            "spec_num_proposed_drafts": 12,
            "spec_correct_drafts_histogram": [1, 0, 1, 2],
        },  # steps accepting 0, 2, 3, 3 drafts
        {
            "spec_verify_ct": 2,
            "spec_num_correct_drafts": 1,
            "spec_num_proposed_drafts": 6,
            "spec_correct_drafts_histogram": [1, 1],
        },
    ]
    result = acceptance(request_counters(details))
    assert result.tau == pytest.approx(1 + 7 / 6) and result.acceptance_rate == pytest.approx(7 / 18)
    # position 0 accepted in 3 + 1 steps, position 1 in 3, position 2 in 2 (of 6 verify steps)
    assert result.per_position == pytest.approx([4 / 6, 3 / 6, 2 / 6])
    assert acceptance(request_counters([])).tau is None  # no drafts: no tau, never a made-up 1


def test_server_info_mismatch_is_seen() -> None:
    arm = next(a for a in REGIME.arms if a.name == "eagle3_k3")
    info = {
        "version": "0.5.23",
        "context_length": 8192,
        "dtype": "bfloat16",
        "quantization": None,
        "speculative_algorithm": "EAGLE3",
        "speculative_num_draft_tokens": 6,
    }
    found = check_served(REGIME, served_from_server_info(info), arm)
    assert [m.field for m in found] == ["arms[3].num_speculative_tokens"]  # 6 draft tokens = K 5, not 3


def test_server_wide_figure_is_kept_apart_and_labelled() -> None:
    info = {
        "internal_states": [{"avg_spec_accept_length": 2.7, "last_gen_throughput": 310.0}],
        "version": "0.5.23",
    }
    figures = server_figures_from_info(info)
    assert (
        figures["sglang_avg_spec_accept_length_lifetime"] == 2.7
        and "tau comes from the requests" in figures["note"]
    )
    assert server_figures_from_info({"internal_states": [{}]}) is None  # a no-spec server reports none


def test_the_active_steps_gauge_is_read_from_metrics() -> None:
    """SGLang's adaptive mode shows the steps it runs in ``sglang:spec_num_steps`` (0.5.23's
    metrics_collector.py: a Gauge, mode mostrecent): read from a real exposition of that gauge."""
    from prometheus_client import CollectorRegistry, Gauge, generate_latest

    from harness.config.engines import ACTIVE_STEPS
    from harness.config.engines.sglang import active_steps_from_metrics

    registry = CollectorRegistry()
    labels = ["model_name", "engine_type", "tp_rank", "pp_rank"]
    steps = Gauge(
        "sglang:spec_num_steps", "Currently active speculative_num_steps.", labels, registry=registry
    )
    tokens = Gauge("sglang:spec_num_draft_tokens", "active draft tokens", labels, registry=registry)
    for rank, value in ((0, 3), (1, 5)):  # two schedulers (TP ranks): their mean
        steps.labels("target", "unified", str(rank), "0").set(value)
        tokens.labels("target", "unified", str(rank), "0").set(value + 1)
    found = active_steps_from_metrics(generate_latest(registry).decode())
    assert found["sglang_spec_num_steps"] == 4.0 and found["sglang_spec_num_draft_tokens"] == 5.0
    assert found[ACTIVE_STEPS] == 4.0  # under the engine-neutral key the ramp reads per stage
    assert "not a mean over the window" in found["steps_note"]
    assert active_steps_from_metrics("# HELP x\nsglang:num_running_reqs 3\n") is None


def test_pip_requirement_and_no_server_counters() -> None:
    adapter = get_adapter("sglang")
    assert adapter.pip_requirement("0.5.23", "gpu") == "sglang==0.5.23"
    assert adapter.read_spec_counters("http://127.0.0.1:9") is None  # never scraped: nothing to diff


def test_chat_template_kwargs_on_chat_requests() -> None:
    fields = get_adapter("sglang").request_fields("chat", 0, {"enable_thinking": False})
    assert fields["chat_template_kwargs"] == {"enable_thinking": False}
    assert "chat_template_kwargs" not in get_adapter("sglang").request_fields(
        "raw", 0, {"enable_thinking": False}
    )


def test_sglext_fills_the_record_and_the_window_counts_from_it() -> None:
    from harness.results.records import RequestRecord, WindowRecord
    from harness.run.client import _absorb_chunk

    adapter = get_adapter("sglang")
    record = RequestRecord("w", "p", 1, "chat")
    _absorb_chunk(record, {"choices": [{"index": 0, "delta": {"content": "ab"}}]}, 0.1, adapter.absorb_chunk)
    details = {"spec_verify_ct": 2, "spec_num_correct_drafts": 3, "spec_correct_drafts_histogram": [0, 1, 1]}
    sglext = {"spec_tokens_details": [details], "output_ids": [[4, 5, 6, 7, 8]], "input_ids": [1, 2]}
    _absorb_chunk(record, {"choices": [], "sglext": sglext}, 0.2, adapter.absorb_chunk)
    assert record.token_ids == [4, 5, 6, 7, 8] and record.prompt_token_ids == [1, 2]
    assert record.spec_details == details  # the one choice's details, verbatim
    window = WindowRecord(
        workload="w",
        category="chat",
        prompt_format="chat",
        concurrency=1,
        duration_s=1.0,
        acceptance_source="per_request",
    )
    sample = RequestRecord.from_json(record.to_json())
    counters = adapter.window_counters(window, [sample, dataclasses.replace(sample, spec_details=None)])
    assert (counters.drafts, counters.accepted_tokens, counters.accepted_per_position) == (2, 3, {0: 2, 1: 1})


def test_a_tuned_adaptive_arm_names_a_file_sglang_can_read(tmp_path) -> None:
    """`bench validate` checks the tuned arm's config file as SGLang's loader would, with the field
    path and line: missing, or a tier SGLang would refuse."""
    from pathlib import Path

    import pytest

    from harness.core.errors import UserError
    from harness.run.plan import plan_regime

    root = Path(__file__).resolve().parent.parent
    text = (
        (root / "regimes" / "h200_policy_sglang.yaml")
        .read_text()
        .replace("../workloads/", f"{root}/workloads/")
    )
    regime = tmp_path / "r.yaml"
    regime.write_text(
        text.replace("regimes/sglang/qwen3_8b_adaptive_tuned.json", str(tmp_path / "none.json"))
    )
    with pytest.raises(
        UserError, match=r"r\.yaml:\d+: arms\[5\]\.options\.speculative_adaptive_config: no file"
    ):
        plan_regime(regime)
    bad = tmp_path / "bad.json"
    bad.write_text('{"1": {"candidate_steps": [3, -1]}}')
    regime.write_text(text.replace("regimes/sglang/qwen3_8b_adaptive_tuned.json", str(bad)))
    with pytest.raises(UserError, match=r"tier 1: candidate_steps must be a non-empty list of ints >= 0"):
        plan_regime(regime)
