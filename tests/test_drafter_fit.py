"""Does the drafter fit its arm (harness.run.drafters.fit)? Checked on config.json files written
here in the layouts the harness builds and the hubs publish (z-lab DFlash, EAGLE-3)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.config.arms import Arm
from harness.run.drafters.fit import drafter_fit

ROOT = Path(__file__).resolve().parent.parent
TARGET = {"hidden_size": 576, "num_hidden_layers": 30, "vocab_size": 49152, "num_attention_heads": 9}
DFLASH = {
    "architectures": ["DFlashDraftModel"],
    "block_size": 16,
    "hidden_size": 576,
    "num_target_layers": 30,
    "dflash_config": {"target_layer_ids": [1, 15, 28], "mask_token_id": 0},
    "vocab_size": 49152,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
}


def _model(tmp_path: Path, name: str, config: dict) -> str:
    directory = tmp_path / name
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(config))
    return str(directory)


def _arm(method: str, k: int) -> Arm:
    return Arm(name=f"{method}_k{k}", method=method, num_speculative_tokens=k, draft_model="/x")


def test_a_drafter_that_fits_says_what_was_checked(tmp_path: Path) -> None:
    target, drafter = _model(tmp_path, "target", TARGET), _model(tmp_path, "dflash", DFLASH)
    fit = drafter_fit(_arm("dflash", 15), drafter, target, 2)
    assert fit.problems == [] and fit.unchecked is None
    assert fit.checked == [
        "K=15 <= block 16 - 1",
        "hidden size 576 = target",
        "the target layers it reads exist (30)",
        "vocabulary 49152 = target",
        "8 heads shard over TP 2",
    ]
    assert drafter_fit(Arm(name="ngram", method="ngram", num_speculative_tokens=4), None, target, 1) is None


@pytest.mark.parametrize(
    ("change", "k", "tp", "problem"),
    [
        ({}, 16, 1, "arms.dflash_k16.num_speculative_tokens: K=16 but the DFlash drafter's block holds 15"),
        ({"hidden_size": 4096}, 3, 1, "reads hidden states of size 4096, the target's are 576"),
        ({"num_target_layers": 36}, 3, 1, "made for a target with 36 layers"),
        ({"dflash_config": {"target_layer_ids": [1, 35]}}, 3, 1, "reads layers [1, 35]), the target has 30"),
        ({"vocab_size": 151936}, 3, 1, "vocabulary of 151936 tokens, the target's has 49152"),
        ({}, 3, 3, "8 attention / 2 KV heads cannot be sharded over tensor_parallel_size 3"),
    ],
)
def test_what_does_not_fit_is_named(tmp_path: Path, change: dict, k: int, tp: int, problem: str) -> None:
    target, drafter = _model(tmp_path, "target", TARGET), _model(tmp_path, "dflash", {**DFLASH, **change})
    fit = drafter_fit(_arm("dflash", k), drafter, target, tp)
    assert len(fit.problems) == 1 and problem in fit.problems[0], fit.problems


def test_hub_and_unbuilt_drafters_are_unchecked(tmp_path: Path) -> None:
    target = _model(tmp_path, "target", TARGET)
    hub = drafter_fit(_arm("dflash", 9), "z-lab/LLaMA3.1-8B-Instruct-DFlash-UltraChat", target, 8)
    assert hub.unchecked == "the drafter is a hub model: its config is read by the engine, not here"
    unbuilt = drafter_fit(_arm("eagle3", 3), str(tmp_path / "not-yet"), target, 1)
    assert unbuilt.unchecked.startswith("the drafter is not built yet")


def test_bench_run_refuses_a_drafter_that_does_not_fit_before_any_server_starts(tmp_path: Path) -> None:
    """A local DFlash drafter with a block of 4 asked for K=8: refused, nothing started or created."""
    drafter = tmp_path / "small-block"
    drafter.mkdir()
    untrained = next((Path.home() / ".cache" / "spec-bench" / "drafters").glob("dflash-untrained-*"), None)
    config = json.loads((untrained / "config.json").read_text()) if untrained else {**DFLASH}
    (drafter / "config.json").write_text(json.dumps({**config, "block_size": 4}))
    regime = tmp_path / "misfit.yaml"
    regime.write_text(
        (ROOT / "tests" / "regimes" / "cpu_faults.yaml")
        .read_text()
        .replace("../../workloads/", f"{ROOT}/workloads/")
        .split("arms:")[0]
        + f"arms:\n  - {{name: baseline, method: baseline}}\n"
        f"  - {{name: dflash_k8, method: dflash, num_speculative_tokens: 8, draft_model: {drafter}}}\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", str(regime), "--results-dir", str(tmp_path / "results")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "200"},
        timeout=600,
    )
    assert out.returncode == 2, out.stdout[-2000:]
    assert (
        "a drafter does not fit its arm" in out.stdout
        and "K=8 but the DFlash drafter's block holds 3" in out.stdout
    )
    assert not (tmp_path / "results").exists()  # refused before a run directory or a server
