"""Sweeps expand into validated points before anything starts; bad axes are refused with the file,
line and point; `bench validate` lists the points and their server start-ups."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.config.regime import load_regime
from harness.core.errors import UserError
from harness.run.study.sweep import expand

ROOT = Path(__file__).resolve().parent.parent
GPU_STUDY = ROOT / "regimes" / "h200_tp_study.yaml"


def _study(tmp_path: Path, sweep: dict, **changes: object) -> Path:
    data = yaml.safe_load(GPU_STUDY.read_text())
    data["sweep"] = sweep
    data["workloads"] = [str(ROOT / "workloads" / "code_humaneval.yaml")]
    data.update(changes)
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_gpu_study_expands_tp_points_and_k_arms() -> None:
    study = expand(load_regime(GPU_STUDY), GPU_STUDY)
    assert [p.label() for p in study.points] == [f"tensor_parallel_size={tp}" for tp in (1, 2, 4, 8)]
    arms = [a.name for a in study.points[0].regime.arms]
    assert arms == ["baseline", "eagle3_k1", "eagle3_k2", "eagle3_k3", "eagle3_k5", "dflash_k7", "dflash_k15"]
    assert study.server_starts() == 112 and study.families["dflash_k7"] == "dflash"
    fingerprints = {p.regime.fingerprint() for p in study.points}
    assert len(fingerprints) == 4  # each point is its own regime
    assert all(p.regime.sweep is None for p in study.points)
    # $/Mtok counts the GPUs each point's server uses
    assert [p.regime.price_per_hour() for p in study.points] == [3.5, 7.0, 14.0, 28.0]


def test_a_tp_that_does_not_divide_the_gpus_fails_the_whole_study(tmp_path: Path) -> None:
    path = _study(tmp_path, {"regime": {"tensor_parallel_size": [2, 3]}})
    with pytest.raises(
        UserError,
        match=r"study.yaml:\d+: sweep point p1 \(tensor_parallel_size=3\): "
        r".*tensor_parallel_size 3 must divide hardware.gpu_count 8",
    ):
        expand(load_regime(path), path)


@pytest.mark.parametrize(
    ("sweep", "expected"),
    [
        ({"regime": {"load.concurrency": [[1], [2]]}}, "cannot be swept .*within-run load axes"),
        ({"regime": {"target.dtyp": ["float16"]}}, "no such field; did you mean 'target.dtype'"),
        ({"regime": {"target.dtype": []}}, "give at least one value"),
        ({"regime": {"target.dtype": ["bfloat16", "bfloat16"]}}, "values must be distinct"),
        ({"arms": {"nope": {"num_speculative_tokens": [1]}}}, "no arm named 'nope'"),
        ({"arms": {"baseline": {"num_speculative_tokens": [1]}}}, "the baseline has nothing to sweep"),
        ({"arms": {"eagle3": {"method": ["dflash"]}}}, "sweepable arm fields are"),
    ],
)
def test_bad_sweeps_are_refused_with_file_and_line(tmp_path: Path, sweep: dict, expected: str) -> None:
    with pytest.raises(UserError, match=r"study.yaml:\d+: .*" + expected):
        load_regime(_study(tmp_path, sweep))


def test_a_bad_arm_value_names_the_point(tmp_path: Path) -> None:
    path = _study(tmp_path, {"arms": {"eagle3": {"num_speculative_tokens": [2, 0]}}})
    with pytest.raises(
        UserError,
        match=r"sweep point p0 \(arm-level axes only\): arms\[2\]\.num_speculative_tokens \(arm eagle3_k0\)",
    ):
        expand(load_regime(path), path)


def test_options_and_several_arm_axes_multiply(tmp_path: Path) -> None:
    data = yaml.safe_load((ROOT / "tests" / "regimes" / "cpu_study_e2e.yaml").read_text())
    data["sweep"] = {
        "arms": {"ngram": {"num_speculative_tokens": [2, 4], "options.prompt_lookup_max": [3, 5]}}
    }
    data["workloads"] = [str(ROOT / "workloads" / "code_humaneval.yaml")]
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    (point,) = expand(load_regime(path), path).points
    arms = {a.name: a for a in point.regime.arms}
    assert list(arms) == [
        "baseline",
        "ngram_k2_prompt_lookup_max3",
        "ngram_k2_prompt_lookup_max5",
        "ngram_k4_prompt_lookup_max3",
        "ngram_k4_prompt_lookup_max5",
    ]
    assert arms["ngram_k4_prompt_lookup_max5"].options == {"prompt_lookup_min": 2, "prompt_lookup_max": 5}


def test_validate_prints_every_point_and_its_commands() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "harness.cli", "validate", str(GPU_STUDY)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "valid study" in out.stdout and "4 points, 112 server start-ups" in out.stdout
    assert out.stdout.count("--tensor-parallel-size 8") == 7  # p3's seven arms
    assert '"num_speculative_tokens": 5' in out.stdout


def test_a_study_regime_never_runs_unexpanded(tmp_path: Path) -> None:
    from rich.console import Console

    from harness.run.plan import plan_regime, prepare_run

    plan = plan_regime(GPU_STUDY)
    with pytest.raises(UserError, match="is a study"):
        prepare_run(plan, Console())
