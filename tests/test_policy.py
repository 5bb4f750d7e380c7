"""The speculation policy on constructed data whose right answer is known: the K per measured level
(the best, or the cheapest that cannot be told from it; only where it pays after correction),
batch-size ranges with their boundaries (at the break-even, else interpolated), the workload mix,
the policy file, the engines' configurations (vLLM's schedule, SGLang's adaptive tiers), and
``k_schedule: {from: STUDY}`` resolved into an arm the regime checks like any other."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.config.arms import KScheduleSource, schedule_problems
from harness.config.regime import load_regime
from harness.core.errors import UserError
from harness.derive.study.analysis import crossing
from harness.derive.study.policy import MIX, TOP_BATCH_SIZE, document, mixed, policies
from harness.results.files import write_json_atomic
from harness.results.study.policy_file import POLICY_JSON, read_policy, resolve_schedules
from tests.test_study_analysis import obs

ROOT = Path(__file__).resolve().parent.parent
LEVELS = (1, 2, 4, 8, 16, 32)
# speedup per level for K = 2, 4, 8 (log_se 0.02, 4 df: differences of ~0.1 are told apart)
SPEEDUPS = {
    1: (1.30, 1.50, 1.20),  # K=4 best, pays
    2: (1.28, 1.45, 1.10),  # K=4
    4: (1.20, 1.21, 1.00),  # K=2 and K=4 cannot be told apart: the cheaper, K=2
    8: (1.10, 1.02, 0.90),  # K=2 pays
    16: (0.90, 0.85, 0.70),  # every K loses: off
    32: (0.80, 0.75, 0.60),
}


def _study(log_se: float | None = 0.02, workload: str = "code", scale: float = 1.0) -> list:
    return [
        obs(s * scale, concurrency=c, arm=f"ngram_k{k}", k=k, log_se=log_se, workload=workload)
        for c in LEVELS
        for k, s in zip((2, 4, 8), SPEEDUPS[c], strict=True)
    ]


def test_each_level_runs_the_cheapest_k_that_cannot_be_told_from_the_best_and_only_where_it_pays() -> None:
    (schedule,) = policies(_study())
    ks = {level.concurrency: level.k for level in schedule.levels}
    assert ks == {1: 4, 2: 4, 4: 2, 8: 2, 16: 0, 32: 0}
    why = {level.concurrency: level.why for level in schedule.levels}
    assert why[4] == "K=2, cheapest of K=2, 4 (not told apart): pays"
    assert why[16] == "off: the best K=2 loses" and all(level.decided for level in schedule.levels)
    # K=4 -> K=2 between 2 and 4: interpolated at the log2 midpoint (floor sqrt(8) = 2); K=2 -> off
    # between 8 and 16 at ngram_k2's break-even (log-speedup linear in log2 concurrency)
    point, _, _ = crossing([8, 16], [1.10, 0.90])
    assert 11 < point < 12
    assert schedule.ranges == ((1, 2, 4), (3, 11, 2), (12, TOP_BATCH_SIZE, 0))
    (k4_to_k2, off) = schedule.boundaries
    assert (k4_to_k2.last, k4_to_k2.between, k4_to_k2.how) == (2, (2, 4), "interpolated")
    assert (off.last, off.between, off.how) == (11, (8, 16), "break-even")
    assert off.break_even == pytest.approx(point)
    assert schedule.k_max == 4


def test_cells_without_an_interval_are_off_and_said_undecided() -> None:
    (schedule,) = policies(_study(log_se=None))
    assert {level.k for level in schedule.levels} == {0} and not schedule.speculates
    assert all(not level.decided and level.why.startswith("undecided") for level in schedule.levels)
    found = document([schedule], "study-x", "cpu_policy", "vllm", {})
    assert found.schedules[0].speculative_config is None
    assert found.schedules[0].undecided == list(LEVELS)
    assert "serve without speculation" in found.schedules[0].note


def test_a_winner_that_pays_only_before_correcting_for_the_k_values_is_not_run() -> None:
    # 1.05 with log_se 0.02 at 4 df: its 95% interval lies above 1, its 98.3% one (3 K values) does not
    cells = [
        obs(s, concurrency=1, arm=f"ngram_k{k}", k=k, log_se=0.02)
        for k, s in ((2, 0.80), (4, 1.05), (8, 0.7))
    ]
    (schedule,) = policies(cells)
    (level,) = schedule.levels
    assert level.k == 0 and not level.decided
    assert (
        level.why.startswith("undecided: K=4 1.05x [")
        and "is indistinguishable after correcting for 3 K values" in level.why
    )


def test_the_mix_is_the_weighted_geometric_mean_with_the_conservative_error() -> None:
    code = _study(workload="code")
    chat = _study(workload="chat", scale=0.8)
    merged = mixed(code + chat, {"code": 3.0, "chat": 1.0})
    one = next(o for o in merged if o.concurrency == 1 and o.k == 4)
    assert one.workload == MIX
    assert one.speedup == pytest.approx(math.exp(0.75 * math.log(1.5) + 0.25 * math.log(1.2)))
    assert one.stored.log_se == pytest.approx(0.02)  # 0.75 * 0.02 + 0.25 * 0.02: the sum, not the root
    found = policies(code + chat, {"code": 3.0, "chat": 1.0})
    assert [s.workload for s in found] == ["chat", "code", MIX]
    mix = found[-1]
    assert dict(mix.weights) == {"chat": 1.0, "code": 3.0}
    assert mix.levels[0].k == 4 and mix.levels[-1].k == 0


def test_the_policy_file_carries_each_engines_configuration(tmp_path: Path) -> None:
    (schedule,) = policies(_study())
    arm = load_regime(ROOT / "regimes" / "cpu_study.yaml").arms[1]  # ngram with its lookup options
    found = document([schedule], "study-x", "cpu_policy", "vllm", {("p0", "ngram_k4"): arm})
    (entry,) = found.schedules
    assert entry.speculative_config == {
        "method": "ngram",
        "num_speculative_tokens": 4,
        "prompt_lookup_min": 2,
        "prompt_lookup_max": 4,
        "num_speculative_tokens_per_batch_size": [[1, 2, 4], [3, 11, 2], [12, TOP_BATCH_SIZE, 0]],
    }
    # SGLang: EAGLE-3 only, one fixed tier per range
    eagle = [
        obs(s, concurrency=c, arm=f"eagle3_k{k}", k=k, family="eagle3", method="eagle3")
        for c in (1, 16)
        for k, s in ((1, 1.3 if c == 1 else 0.8), (3, 1.6 if c == 1 else 0.7))
    ]
    (sgl,) = document(policies(eagle), "study-y", "gpu", "sglang", {}).schedules
    assert sgl.speculative_config is None
    assert sgl.adaptive_config == {"1": {"candidate_steps": [3]}, "5": {"candidate_steps": [0]}}
    assert "--speculative-adaptive-config p0.eagle3.code.sglang_adaptive_config.json" in sgl.note
    (ngram_sgl,) = document([schedule], "study-x", "cpu_policy", "sglang", {}).schedules
    assert ngram_sgl.adaptive_config is None and "EAGLE/EAGLE3 steps only" in ngram_sgl.note
    write_json_atomic(tmp_path / POLICY_JSON, found.model_dump(mode="json"))
    assert read_policy(tmp_path) == found


def _policy_dir(tmp_path: Path, engine: str = "vllm") -> Path:
    study = tmp_path / "results" / "cpu_policy" / "study-1"
    study.mkdir(parents=True)
    (schedule,) = policies(_study())
    write_json_atomic(
        study / POLICY_JSON,
        document([schedule], study.name, "cpu_policy", engine, {}).model_dump(mode="json"),
    )
    return study


def _regime(tmp_path: Path, arm: dict) -> Path:
    data = yaml.safe_load((ROOT / "regimes" / "cpu_smoke.yaml").read_text())
    data["workloads"] = [str((ROOT / "regimes" / w).resolve()) for w in data["workloads"]]
    data["arms"] = [{"name": "baseline", "method": "baseline"}, arm]
    data.pop("gates", None)
    path = tmp_path / "policy_arm.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_k_schedule_from_a_study_resolves_to_its_schedule(tmp_path: Path) -> None:
    study = _policy_dir(tmp_path)
    arm = {
        "name": "policy",
        "method": "ngram",
        "num_speculative_tokens": 4,
        "k_schedule": {"from": "results/cpu_policy/study-1"},
    }
    path = _regime(tmp_path, arm)
    regime = resolve_schedules(load_regime(path), path)
    resolved = regime.arms[1]
    assert resolved.k_schedule == [(1, 2, 4), (3, 11, 2), (12, TOP_BATCH_SIZE, 0)]
    assert resolved.k_schedule_source == f"{study / POLICY_JSON}: p0/ngram/code"
    # the schedule is a condition, its source is not: the same list written by hand hashes the same
    by_hand = _regime(tmp_path, {**arm, "k_schedule": [list(r) for r in resolved.k_schedule]})
    assert load_regime(by_hand).fingerprint() == regime.fingerprint()
    # a K above the arm's maximum, from the study, is refused with the arm's path
    small = _regime(tmp_path, {**arm, "num_speculative_tokens": 2})
    with pytest.raises(
        UserError,
        match=r"arms\[1\]\.k_schedule: from .*policy.json: .*outside \[0, the arm.s num_speculative_tokens 2",
    ):
        resolve_schedules(load_regime(small), small)
    for bad, said in (
        (
            {"from": "results/cpu_policy/study-1", "workload": "chat"},
            "no schedule for family=ngram, workload=chat",
        ),
        ({"from": "results/nowhere"}, "no policy here"),
    ):
        path = _regime(tmp_path, {**arm, "k_schedule": bad})
        with pytest.raises(UserError, match=said):
            resolve_schedules(load_regime(path), path)


def test_a_policy_a_study_beside_the_regime_will_write_is_pending_to_validate_and_refused_to_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """cpu_policy_verify.yaml's case (issue 62): its `from:` names the results folder of the study
    regime beside it, empty on a fresh clone. `bench validate` leaves the arm unresolved and says
    which run writes the policy; `bench run` refuses, saying to run that study first; once the study
    has written it, both resolve it."""
    monkeypatch.chdir(tmp_path)  # `bench run` from here writes results/ here
    shutil.copy(ROOT / "regimes" / "cpu_policy.yaml", tmp_path / "cpu_policy.yaml")  # name: cpu_policy
    arm = {"name": "policy", "method": "ngram", "num_speculative_tokens": 4}
    path = Path(_regime(tmp_path, {**arm, "k_schedule": {"from": "results/cpu_policy"}}).name)
    pending: list[str] = []
    regime = resolve_schedules(load_regime(path), path, pending)
    assert isinstance(regime.arms[1].k_schedule, KScheduleSource)
    assert pending == [
        "arms[1].k_schedule: from results/cpu_policy/study-<id>/policy.json: not there yet: "
        "`bench run cpu_policy.yaml` creates it; bench run refuses until then"
    ]
    refusal = (
        "policy_arm.yaml: arms[1].k_schedule: no results/cpu_policy/study-<id>/policy.json yet: run "
        "`bench run cpu_policy.yaml` first (the study writes it when it ends)"
    )
    with pytest.raises(UserError, match=re.escape(refusal)):
        resolve_schedules(load_regime(path), path)
    # from elsewhere, the study's default results folder is elsewhere too: the flag that puts it there
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    with pytest.raises(UserError, match=re.escape(f"--results-dir {tmp_path / 'results'}` first")):
        resolve_schedules(load_regime(tmp_path / path), tmp_path / path)
    monkeypatch.chdir(tmp_path)
    # a folder no study regime here writes is refused as before, to validate too
    nowhere = _regime(tmp_path, {**arm, "k_schedule": {"from": "results/nowhere"}})
    with pytest.raises(UserError, match="no policy here"):
        resolve_schedules(load_regime(nowhere), nowhere, [])
    study = _policy_dir(tmp_path)  # the study ran: its policy is read, by validate and run alike
    path = _regime(tmp_path, {**arm, "k_schedule": {"from": "results/cpu_policy"}})
    for given in ([], None):
        resolved = resolve_schedules(load_regime(path), path, given)
        assert resolved.arms[1].k_schedule == [(1, 2, 4), (3, 11, 2), (12, TOP_BATCH_SIZE, 0)]
        assert resolved.arms[1].k_schedule_source == f"{study / POLICY_JSON}: p0/ngram/code" and not given


def test_the_shipped_verify_regimes_say_which_run_writes_their_policy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """`bench run` of a verify regime before cpu_policy.yaml's study has run: refused, exit 2, naming
    that run, nothing started or written (`bench validate` of it: tests/test_cli.py)."""
    from harness.cli import main

    for folder in ("regimes", "workloads"):
        shutil.copytree(ROOT / folder, tmp_path / folder)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("harness.cli.signal.signal", lambda *args: None)  # pytest keeps its own handlers
    for name, index in (("cpu_policy_verify", 4), ("cpu_policy_verify_k0", 1)):
        code = main(["run", f"regimes/{name}.yaml"])
        said = " ".join(capsys.readouterr().out.split())
        assert code == 2 and said == (
            f"error: regimes/{name}.yaml: arms[{index}].k_schedule: no "
            "results/cpu_policy/study-<id>/policy.json yet: run `bench run regimes/cpu_policy.yaml` first "
            "(the study writes it when it ends)"
        )
    assert not (tmp_path / "results").exists()


# each shipped regime's fingerprint as the harness computed it before arms had k_schedule and regimes
# a policy section (commit 29d446c): stored runs stay comparable with new ones; issue 69 gave the
# ones marked their designs (rounds of start-ups; the default: 2 arms, 30 prompts, 4 rounds)
FINGERPRINTS_BEFORE = {
    "cpu_categories": "b347ebc72f68a988",  # issue 69 (was ac86173c81e8f291)
    "cpu_coverage": "27afa539ca896a45",
    "cpu_default": "36c41b0f70c57a6d",  # issue 69 (was 8feedf3d514c387b)
    "cpu_production": "528eda5ac1449a2e",  # issue 69 (was 760bb2862175d675)
    "cpu_sampled": "fb69c4183171d824",  # issue 69 (was 73d0520e3d582b06)
    "cpu_smoke": "ea1aebcb64fd89aa",  # issue 69 (was 7212af3f01638e0d)
    "cpu_startup_spread": "6db4b74144997b78",
    "cpu_study": "8c954ed01dd4f928",
    "cpu_trained_drafters": "0e471585a883faf8",  # issue 69 (was ac2600d158c0984a)
    "h200_tp1_qwen3_8b": "8a24a3a023755c40",  # issue 69 (was f9e94b2edb8d1e64)
    "h200_tp1_qwen3_8b_sglang": "7ab84aaecbf09619",  # issue 69 (was 607861b6cd24d3e8)
    "h200_tp1_synthetic": "b553e686c39062ae",  # issue 69 (was 3cc7bb132185af99)
    # issue 72: concurrency 64 a ramp stage, the capture ceiling raised to 640 (was 8385b4b8c51c978d)
    "h200_tp8": "ae3a0e2db962040e",
    # issue 72: the capture ceiling raised to 1024 (was 58ff46c0e841c08b)
    "h200_tp_study": "1b4e1d8798d84d6d",
}


@pytest.mark.parametrize("name", sorted(FINGERPRINTS_BEFORE))
def test_a_regime_without_a_schedule_hashes_as_before(name: str) -> None:
    assert load_regime(ROOT / "regimes" / f"{name}.yaml").fingerprint() == FINGERPRINTS_BEFORE[name]


@pytest.mark.parametrize(
    ("schedule", "where", "said"),
    [
        ([[2, 4, 4], [5, 1024, 0]], "arms[1].k_schedule[0][0]", "must start at batch size 1"),
        (
            [[1, 4, 4], [6, 1024, 0]],
            "arms[1].k_schedule[1][0]",
            "a gap: starts at 6, the range before ends at 4",
        ),
        ([[1, 4, 4], [4, 1024, 0]], "arms[1].k_schedule[1][0]", "an overlap: starts at 4"),
        (
            [[1, 4, 8], [5, 1024, 0]],
            "arms[1].k_schedule[0][2]",
            "K=8 is outside [0, the arm's num_speculative_tokens 4]",
        ),
        ([[1, 4, 4], [5, 3, 0]], "arms[1].k_schedule[1][1]", "the last batch size 3 is below the first, 5"),
    ],
)
def test_validate_refuses_a_schedule_the_engine_would_refuse_or_bend(
    tmp_path: Path, schedule, where, said
) -> None:
    path = _regime(
        tmp_path, {"name": "policy", "method": "ngram", "num_speculative_tokens": 4, "k_schedule": schedule}
    )
    done = subprocess.run(
        [sys.executable, "-m", "harness.cli", "validate", str(path)], capture_output=True, text=True, cwd=ROOT
    )
    said_all = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 2 and where in said_all and said in said_all, said_all
    assert "Traceback" not in said_all


def test_schedule_rules_directly() -> None:
    assert schedule_problems([(1, 4, 4), (5, 1024, 0)], 4) == []
    assert [w for w, _ in schedule_problems([(1, 4, 5), (6, 8, -1)], 4)] == [(0, 2), (1, 0), (1, 2)]


def test_engines_refuse_what_they_cannot_schedule() -> None:
    from harness.config.engines.sglang import SglangAdapter
    from harness.config.engines.vllm import VllmAdapter

    regime = load_regime(ROOT / "regimes" / "h200_tp1_qwen3_8b_sglang.yaml")
    eagle = next(a for a in regime.arms if a.method == "eagle3")
    scheduled = eagle.model_copy(update={"k_schedule": [(1, 4, 1), (5, 1024, 0)]})
    found = SglangAdapter().option_problems(regime.model_copy(update={"arms": [regime.arms[0], scheduled]}))
    assert any(
        where == ("arms", 1, "k_schedule") and "no per-batch-size K schedule" in m for where, m in found
    )
    ngram = next((a for a in regime.arms if a.method == "ngram"), None)
    if ngram is not None:
        adaptive = ngram.model_copy(update={"options": {**ngram.options, "speculative_adaptive": True}})
        found = SglangAdapter().option_problems(
            regime.model_copy(update={"arms": [regime.arms[0], adaptive]})
        )
        assert any("adapts the steps of EAGLE/EAGLE3 only" in m for _, m in found)
    vllm = load_regime(ROOT / "regimes" / "h200_tp8.yaml")
    arm = next(a for a in vllm.arms if a.method == "ngram")
    engine = vllm.engine.model_copy(update={"extra_args": ["--data-parallel-size", "2"]})
    dp = vllm.model_copy(
        update={
            "engine": engine,
            "arms": [vllm.arms[0], arm.model_copy(update={"k_schedule": [(1, 1024, 1)]})],
        }
    )
    assert any("data parallelism" in m for _, m in VllmAdapter().option_problems(dp))
    in_options = arm.model_copy(update={"options": {"num_speculative_tokens_per_batch_size": [[1, 8, 1]]}})
    found = VllmAdapter().option_problems(vllm.model_copy(update={"arms": [vllm.arms[0], in_options]}))
    assert any("set by the arm's k_schedule" in m for _, m in found)


def test_the_written_files_are_one_document(tmp_path: Path) -> None:
    (schedule,) = policies(_study())
    found = document([schedule], "study-x", "cpu_policy", "vllm", {})
    data = json.loads(json.dumps(found.model_dump(mode="json")))
    assert data["schedules"][0]["ranges"] == [[1, 2, 4], [3, 11, 2], [12, TOP_BATCH_SIZE, 0]]


def test_a_scheduled_arm_is_not_one_k_of_its_family() -> None:
    """A study may measure a schedule beside the static K (h200_policy_study.yaml's knee32): it is
    neither a K the policy chooses from nor one best K compares."""
    from dataclasses import replace

    from harness.derive.study.analysis import best_k

    knee = [replace(o, arm="knee", scheduled=True, speedup=3.0) for o in _study() if o.k == 4]
    (schedule,) = policies(_study() + knee)
    assert {level.arm for level in schedule.levels} <= {"ngram_k2", "ngram_k4", None}
    assert all(b.k != 4 or b.speedup.point < 3 for b in best_k(_study() + knee))
