"""The methods without a separate drafter besides ngram: suffix decoding (vLLM's ``suffix``, Arctic
Inference's suffix tree) and MTP (the target's own multi-token-prediction layers: vLLM ``mtp``,
SGLang ``NEXTN``). What the regime takes and refuses, what each engine is asked, the MTP-layer check
on a local target, and the missing arctic-inference package; the contract tests run the shipped
GPU regimes' arms through both engines' real parsers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.config.arms import Arm
from harness.config.engines import get_adapter
from harness.config.engines.sglang import served_from_server_info
from harness.config.regime import load_regime
from harness.run.drafters.fit import drafter_fit, mtp_layers
from harness.run.validation import check_environment, check_served

ROOT = Path(__file__).resolve().parent.parent
VLLM_MTP = load_regime(ROOT / "regimes" / "h200_tp8_deepseek_mtp.yaml")
SGLANG_MTP = load_regime(ROOT / "regimes" / "h200_tp8_deepseek_mtp_sglang.yaml")


def _arm(regime, name: str) -> Arm:
    return next(a for a in regime.arms if a.name == name)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"method": "suffix", "num_speculative_tokens": 8, "draft_model": "/x"}, "method 'suffix' takes no"),
        ({"method": "mtp", "num_speculative_tokens": 2, "draft_model": "/x"}, "own multi-token-prediction"),
        ({"method": "suffix"}, "needs num_speculative_tokens"),
        (
            {"method": "suffix", "num_speculative_tokens": 4, "k_schedule": [[1, 4, 4], [5, 8, 2]]},
            "drafts a fixed K",
        ),
    ],
)
def test_the_regime_refuses_what_the_engines_would_not_run(fields: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):  # pydantic's ValidationError carries the FieldError
        Arm(name="arm", **fields)


def test_what_vllm_is_asked() -> None:
    adapter = get_adapter("vllm")
    suffix = _arm(VLLM_MTP, "suffix_k16")
    assert adapter.speculative_config(suffix, None) == {
        "method": "suffix",
        "num_speculative_tokens": 16,
        "suffix_decoding_max_tree_depth": 24,
        "suffix_decoding_max_cached_requests": 0,
    }
    # no "model": vLLM drafts with the target's own MTP layer
    assert adapter.speculative_config(_arm(VLLM_MTP, "mtp_k3"), None) == {
        "method": "mtp",
        "num_speculative_tokens": 3,
    }


def test_what_sglang_is_asked_and_what_it_refuses() -> None:
    adapter = get_adapter("sglang")
    args = adapter.speculative_args(_arm(SGLANG_MTP, "mtp_k3"), None)
    assert args == [
        "--speculative-algorithm", "NEXTN", "--speculative-num-draft-tokens", "4",
        "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
    ]  # fmt: skip
    assert "--speculative-draft-model-path" not in args
    # SGLang serves NEXTN as EAGLE (its alias): read back as the mtp arm it is
    info = {"speculative_algorithm": "EAGLE", "speculative_num_draft_tokens": 4}
    assert check_served(SGLANG_MTP, served_from_server_info(info), _arm(SGLANG_MTP, "mtp_k3")) == []
    served = served_from_server_info({"speculative_algorithm": "NGRAM", "speculative_num_draft_tokens": 4})
    assert [m.field for m in check_served(SGLANG_MTP, served, _arm(SGLANG_MTP, "mtp_k3"))] == [
        "arms[1].method"
    ]
    with_suffix = SGLANG_MTP.model_copy(
        update={"arms": [*SGLANG_MTP.arms, Arm(name="suffix_k8", method="suffix", num_speculative_tokens=8)]}
    )
    problems = adapter.option_problems(with_suffix)
    assert (("arms", 3, "method"), problems[0][1]) == problems[0] and "no 'suffix' method" in problems[0][1]


def _target(tmp_path: Path, config: dict) -> str:
    (tmp_path / "config.json").write_text(json.dumps(config))
    return str(tmp_path)


@pytest.mark.parametrize(
    ("config", "layers"),
    [
        ({"model_type": "deepseek_v3", "num_nextn_predict_layers": 1}, 1),
        ({"model_type": "qwen3_5", "text_config": {"mtp_num_hidden_layers": 2}}, 2),
        ({"model_type": "llama"}, None),
        ({"model_type": "deepseek_v3", "num_nextn_predict_layers": 0}, 0),
    ],
)
def test_an_mtp_arm_needs_a_target_that_carries_mtp_layers(tmp_path: Path, config: dict, layers) -> None:
    assert mtp_layers(config) == layers
    arm = Arm(name="mtp_k2", method="mtp", num_speculative_tokens=2)
    fit = drafter_fit(arm, None, _target(tmp_path, config), 8)
    if layers:
        assert fit.problems == [] and fit.checked == [
            f"the target carries {layers} MTP layer{'s' * (layers > 1)}"
        ]
    else:
        assert fit.problems == [
            "arms.mtp_k2.method: mtp drafts with the target's own MTP layers, and its config declares none "
            f"(num_nextn_predict_layers / mtp_num_hidden_layers: {'absent' if layers is None else 0})"
        ]
    hub = drafter_fit(arm, None, "deepseek-ai/DeepSeek-V3-0324", 8)
    assert hub.unchecked and not hub.problems  # read by the engine on the GPU machine
    suffix = Arm(name="suffix_k8", method="suffix", num_speculative_tokens=8)
    assert drafter_fit(suffix, None, _target(tmp_path, config), 8) is None  # no drafter to fit


def test_a_suffix_arm_without_arctic_inference_is_a_mismatch_before_vllm_0_34() -> None:
    """vLLM 0.33 serves suffix through arctic-inference's tree (its V1 runner); 0.34 natively."""
    on_033 = VLLM_MTP.model_copy(update={"engine": VLLM_MTP.engine.model_copy(update={"version": "0.33.0"})})
    environment = {"engine_version": "vllm 0.33.0", "arctic_inference": None}
    found = check_environment(on_033, environment)
    assert [m.field for m in found if "arctic" in m.actual] == ["arms[4].method"]
    assert not [
        m
        for m in check_environment(on_033, {**environment, "arctic_inference": "0.3.0"})
        if "arctic" in m.actual
    ]
    assert not [
        m for m in check_environment(on_033, {"engine_version": "vllm 0.33.0"}) if "arctic" in m.actual
    ]
    assert VLLM_MTP.engine.version == "0.34.0"
    native = check_environment(VLLM_MTP, {"engine_version": "vllm 0.34.0", "arctic_inference": None})
    assert not [m for m in native if "arctic" in m.actual]


def test_a_suffix_tree_that_would_remember_the_run_s_own_prompts_is_refused() -> None:
    """vLLM keeps finished responses in a global suffix tree: a server that sees a measured prompt
    twice (warm-up, a second load level or repeat) would draft the answer it gave before."""
    adapter = get_adapter("vllm")
    arm = _arm(VLLM_MTP, "suffix_k16")
    cached = arm.model_copy(update={"options": {**arm.options, "suffix_decoding_max_cached_requests": 100}})
    regime = VLLM_MTP.model_copy(update={"arms": [*VLLM_MTP.arms[:4], cached]})
    ((where, message),) = [p for p in adapter.option_problems(regime) if p[0][1] == 4]
    assert where == ("arms", 4, "options", "suffix_decoding_max_cached_requests")
    assert "8 warm-up requests" in message and "in 3 windows" in message
    one_window = regime.model_copy(
        update={"load": regime.load.model_copy(update={"concurrency": [4], "warmup_requests": 0})}
    )
    assert not [p for p in adapter.option_problems(one_window) if p[0][1] == 4]  # nothing seen twice
    assert not [p for p in adapter.option_problems(VLLM_MTP) if p[0][1] == 4]  # the shipped arm: no cache
    default = regime.model_copy(update={"arms": [*VLLM_MTP.arms[:4], arm.model_copy(update={"options": {}})]})
    ((_, message),) = [p for p in adapter.option_problems(default) if p[0][1] == 4]
    assert "10000, vLLM's default" in message


def test_a_study_policy_for_suffix_never_asks_for_a_k_per_batch_size() -> None:
    """A policy that runs suffix at some batch sizes and not others cannot be one vLLM configuration
    (its suffix proposer asserts a fixed K): the engine line says how to serve it instead; one K
    everywhere is the plain configuration."""
    vllm = get_adapter("vllm")
    arm = Arm.model_construct(
        name="suffix_k8", method="suffix", num_speculative_tokens=8, options={}, draft_model=None,
        k_schedule=[(1, 2, 8), (3, 1024, 0)],
    )  # fmt: skip
    found = vllm.schedule_config(arm, "p0.suffix_k8.code")
    assert found.speculative_config is None and "serve suffix at 1-2: K=8 and no speculation" in found.note
    everywhere = vllm.schedule_config(arm.model_copy(update={"k_schedule": [(1, 1024, 8)]}), "p0")
    assert everywhere.speculative_config == {"method": "suffix", "num_speculative_tokens": 8}
