"""Self-distilled drafters without an engine: the split (held-out prompts never trained on), the
cache keys, the answers file, speculators' dataset format, the metric parsing and the trainer's
flags. ``test_distill_stages.py`` runs the torch stages on the real target; the engine test
builds and serves a drafter end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from harness.cli import main
from harness.config.regime import load_regime
from harness.config.workloads import load_prompt_pool, prompt_sha256
from harness.core.errors import UserError
from harness.run.drafters import TRAINING_PROMPTS_NAME, distill, held_out_check
from harness.run.drafters.train_stages import _samples, train_argv
from harness.run.drafters.workdir import read_answers
from harness.run.plan import plan_regime
from tests.conftest import wait_until

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "tests" / "regimes" / "cpu_distill.yaml"


def _regime_with(tmp_path: Path, **trained) -> Path:
    """cpu_distill.yaml with the EAGLE-3 arm's `trained:` settings replaced, next to the workloads."""
    data = yaml.safe_load(TINY.read_text())
    data["workloads"] = [
        str(ROOT / "workloads" / name) for name in ("code_humaneval.yaml", "chat_mtbench.yaml")
    ]
    data["arms"][1]["draft_model"] = {"trained": trained}
    data["arms"] = data["arms"][:2]
    path = tmp_path / "regime.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _plan(path: Path, target_dir: str = "/nonexistent") -> distill.DistillPlan:
    plan = plan_regime(path)
    arm = plan.regime.arms[1]
    return distill.plan_distillation(arm, plan.regime, plan.regime_path, plan.workloads, target_dir)


def test_measured_prompts_are_held_out_of_training(tmp_path: Path) -> None:
    plan = _plan(_regime_with(tmp_path))
    regime_plan = plan_regime(_regime_with(tmp_path))
    measured = {prompt_sha256(p) for w in regime_plan.workloads for p in w.prompts}
    assert len(measured) == 4 and set(plan.held_out) == measured
    trained = {p.sha256 for p in plan.prompts}
    assert not trained & measured
    # every other prompt of both pools (HumanEval 164, MT-Bench 80) is a training prompt
    assert len(plan.prompts) == 164 + 80 - 4 and plan.excluded == 4
    assert [w["name"] for w in plan.workloads] == ["code_humaneval", "chat_mtbench"]
    assert {p.prompt_format for p in plan.prompts} == {"raw", "chat"}  # each sent as its workload sends it
    assert [p.index for p in plan.prompts] == list(range(len(plan.prompts)))


def test_training_workloads_and_per_workload_cap(tmp_path: Path) -> None:
    plan = _plan(
        _regime_with(
            tmp_path, workloads=[str(ROOT / "workloads" / "chat_open.yaml")], max_prompts_per_workload=5
        )
    )
    assert [(w["name"], w["used"]) for w in plan.workloads] == [("chat_open", 5)]
    _, pool = load_prompt_pool(ROOT / "workloads" / "chat_open.yaml")
    assert [p.prompt.prompt_id for p in plan.prompts] == [p.prompt_id for p in pool[:5]]


def test_cache_keys(tmp_path: Path) -> None:
    base = _plan(_regime_with(tmp_path, epochs=2))
    assert _plan(_regime_with(tmp_path, epochs=2)).key == base.key  # deterministic
    other = _plan(_regime_with(tmp_path, epochs=3))
    assert other.key != base.key and other.answers_key == base.answers_key  # same answers, new training
    shorter = _plan(_regime_with(tmp_path, epochs=2, max_output_tokens=64))
    assert shorter.answers_key != base.answers_key
    assert base.final_dir.name == f"eagle3-trained-{base.key}"
    patient = _plan(_regime_with(tmp_path, epochs=2, stall_timeout_s=60))
    assert patient.key == base.key and patient.settings.stall_timeout_s == 60  # when to give up: not what
    fingerprints = {
        plan_regime(_regime_with(tmp_path, epochs=2, **s)).regime.fingerprint()
        for s in ({}, {"stall_timeout_s": 60})
    }
    assert len(fingerprints) == 1  # nor part of the regime


def test_missing_training_workload_names_its_field(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"arms\[1\]\.draft_model\.trained\.workloads\[0\]: workload file no"):
        _plan(_regime_with(tmp_path, workloads=["nope.yaml"]))


@pytest.mark.parametrize(
    ("arm", "expected"),
    [
        (
            {
                "name": "x",
                "method": "draft_model",
                "num_speculative_tokens": 2,
                "draft_model": {"trained": {}},
            },
            "draft_model.trained: builds EAGLE-3 or DFlash drafters only",
        ),
        (
            {
                "name": "x",
                "method": "eagle3",
                "num_speculative_tokens": 2,
                "draft_model": {"trained": {}, "path": "a"},
            },
            "give exactly one of 'path', 'package', 'untrained' or 'trained' (got 2)",
        ),
        (
            {
                "name": "x",
                "method": "eagle3",
                "num_speculative_tokens": 2,
                "draft_model": {"trained": {"epochs": 0}},
            },
            "arms[1].draft_model.trained.epochs",
        ),
        (
            {
                "name": "x",
                "method": "eagle3",
                "num_speculative_tokens": 2,
                "draft_model": {"trained": {"epoch": 3}},
            },
            "arms[1].draft_model.trained.epoch",
        ),
    ],
)
def test_bad_trained_settings(tmp_path: Path, arm: dict, expected: str) -> None:
    data = yaml.safe_load(TINY.read_text())
    data["arms"] = [data["arms"][0], arm]
    path = tmp_path / "regime.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(UserError) as info:
        load_regime(path)
    assert expected in str(info.value)


def test_answers_file_survives_a_cut_line(tmp_path: Path) -> None:
    path = tmp_path / "answers.jsonl"
    rows = [
        {"index": 1, "prompt_token_ids": [5, 6], "output_token_ids": [7, 8, 9]},
        {"index": 0, "prompt_token_ids": [1], "output_token_ids": []},  # skipped by the engine
        {"index": 2, "prompt_token_ids": [3, 4], "output_token_ids": [10]},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"index": 3, "prompt_tok')
    assert [r["index"] for r in read_answers(path)] == [0, 1, 2]  # the cut prompt is asked again
    samples = {s["index"]: s for s in _samples(path, seed=0)}
    assert set(samples) == {1, 2}  # nothing to learn from an empty answer
    assert samples[1]["input_ids"] == [5, 6, 7, 8, 9] and samples[1]["loss_mask"] == [0, 0, 1, 1, 1]


def test_validation_accuracy_per_position_for_both_methods(tmp_path: Path) -> None:
    lines = [
        {"time": 10.0, "train": {"loss": 3.0}, "global_step": 0, "epoch": 0},
        {"time": 20.0, "train": {"loss": 2.0}, "global_step": 7, "epoch": 0},
        {
            "time": 30.0,
            "val": {
                "loss_epoch": 2.5,
                "full_acc_0_epoch": 0.4,
                "full_acc_1_epoch": 0.2,
                "full_acc_2_epoch": 0.1,
                "cond_acc_0_epoch": 0.4,
            },
            "epoch": 0,
        },
        {
            "time": 40.0,
            "val": {
                "loss_epoch": 1.5,
                "full_acc_epoch": 0.3,
                "position_2_acc_epoch": 0.2,
                "position_1_acc_epoch": 0.5,
                "eal_epoch": 1.7,
            },
            "epoch": 1,
        },
    ]
    (tmp_path / "train_metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    validation, steps, seconds = distill._metrics(tmp_path)
    assert steps == 8 and seconds == 30.0
    assert validation[0]["epoch"] == 1 and validation[0]["accuracy_per_position"] == [0.4, 0.2, 0.1]
    assert validation[1]["accuracy_per_position"] == [0.5, 0.2]  # DFlash names positions from 1
    assert validation[1]["metrics"]["eal_epoch"] == 1.7


def test_trainer_flags() -> None:
    build = {
        "method": "dflash",
        "target_dir": "/t",
        "layer_ids": [2, 15, 27],
        "draft_vocab_size": 8192,
        "total_seq_len": 2048,
        "epochs": 5,
        "learning_rate": 1e-3,
        "validation_fraction": 0.1,
        "seed": 0,
        "train_dtype": "float32",
        "mask_token_id": 16,
        "block_size": 16,
        "max_steps": None,
    }
    argv = train_argv(build, Path("/w"))
    joined = " ".join(argv)
    for flag in (
        "--speculator-type dflash",
        "--target-layer-ids 2 15 27",
        "--draft-attn-impl sdpa",
        "--loss-implementation eager",
        "--num-workers 0",
        "--hidden-states-dtype float32",
        "--train-data-ratio 0.9",
        "--optimizer adamw",
        "--mask-token-id 16",
        "--data-path /w/data",
    ):
        assert flag in joined
    assert "--max-steps" not in argv and "--max-anchors" not in argv  # speculators' default
    from speculators.train.config import TrainConfig  # speculators' own parser accepts every flag

    config = TrainConfig.resolve(argv)
    assert config.flatten()["mask_token_id"] == 16 and config.flatten()["epochs"] == 5
    bounded = TrainConfig.resolve(train_argv({**build, "block_size": 4, "max_anchors": 32}, Path("/w")))
    assert (bounded.flatten()["block_size"], bounded.flatten()["max_anchors"]) == (4, 32)


def test_dflash_builds_a_block_that_serves_the_arm_and_few_anchors(tmp_path: Path) -> None:
    """The defaults that make a DFlash step affordable on a CPU (benchmarks/drafter_step.py: 21.8 s
    a step with speculators' block 16 and 512 anchors, 0.21 s with block 4 and 32), part of the
    build's identity; an explicit block too small for K is an error naming the field."""
    data = yaml.safe_load(TINY.read_text())
    data["workloads"] = [str(ROOT / "workloads" / n) for n in ("code_humaneval.yaml", "chat_mtbench.yaml")]
    data["arms"] = [data["arms"][0], data["arms"][2]]  # baseline, dflash_trained_k2
    path = tmp_path / "dflash.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    plan = _plan(path)
    assert (plan.settings.block_size, plan.settings.max_anchors) == (3, 256 // 8)
    data["arms"][1]["num_speculative_tokens"] = 5
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    other = _plan(path)
    assert other.settings.block_size == 6 and other.key != plan.key  # another drafter, built apart
    data["arms"][1]["draft_model"]["trained"]["block_size"] = 4
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(UserError, match="block_size: a block of 4 drafts at most 3 tokens, the arm asks K=5"):
        load_regime(path)
    eagle = _regime_with(tmp_path, max_anchors=8)
    with pytest.raises(UserError, match="block_size and max_anchors apply to DFlash only"):
        load_regime(eagle)


def test_held_out_check_counts_overlap(tmp_path: Path) -> None:
    regime_plan = plan_regime(_regime_with(tmp_path))
    measured = regime_plan.workloads
    hashes = [prompt_sha256(p) for w in measured for p in w.prompts]
    (tmp_path / TRAINING_PROMPTS_NAME).write_text(json.dumps({"trained_on": hashes[:1] + ["x"]}))
    assert held_out_check(tmp_path, measured) == {"measured_prompts": 4, "trained_on": 1}
    assert held_out_check(tmp_path / "elsewhere", measured) is None


def test_drafter_build_without_trained_arm_is_a_clear_error(capsys) -> None:
    code = main(["drafter", "build", str(ROOT / "tests" / "regimes" / "cpu_e2e.yaml")])
    assert code == 2
    assert "no arm has a `draft_model: {trained: ...}` to build" in capsys.readouterr().out
    code = main(["drafter", "build", str(TINY), "--arm", "nope"])
    assert code == 2 and "no arm named nope" in capsys.readouterr().out


def test_validate_shows_the_distillation_plan(capsys) -> None:
    assert main(["validate", str(ROOT / "regimes" / "cpu_trained_drafters.yaml")]) == 0
    out = capsys.readouterr().out
    assert "drafter: self-distilled here" in out and "16 measured prompts held out" in out


def test_provenance_lines_show_the_held_out_check() -> None:
    from harness.present.report import _trained_drafters
    from harness.present.table import drafter_note

    manifest = {
        "kind": "trained",
        "method": "eagle3",
        "data": {"workloads": [{"name": "chat", "used": 70}], "answered": 70, "answer_tokens": 9000},
        "training": {"steps": 40, "epochs_completed": 5, "seconds": 300.0},
        "validation": [{"accuracy_per_position": [0.1]}, {"accuracy_per_position": [0.4, 0.2, 0.1]}],
        "versions": {"speculators": "0.9.0"},
        "target": {"answers_dtype": "float32"},
    }
    trained = {
        "label": "self-distilled here (70 prompts, 5 epochs, val acc@0 0.40)",
        "reference": "r",
        "manifest": manifest,
        "held_out": {"measured_prompts": 16, "trained_on": 0},
    }
    untrained = {
        "label": "untrained, mechanics only",
        "reference": "seed 0",
        "manifest": {"kind": "untrained"},
    }
    assert drafter_note(trained).endswith("; trained on 0 of the 16 measured prompts")
    leaked = {**trained, "held_out": {"measured_prompts": 16, "trained_on": 2}}
    assert "its tau is flattered" in drafter_note(leaked)
    assert drafter_note(untrained) == "untrained, mechanics only (seed 0)"
    (row,) = _trained_drafters({"eagle3_trained": trained, "eagle3_untrained": untrained})
    assert row["arm"] == "eagle3_trained" and row["accuracy"] == "0.400 / 0.200 / 0.100"
    assert row["held_out"] == "trained on 0 of the 16 measured prompts" and row["workloads"] == "chat (70)"


def test_the_truncation_trap_stops_a_build_before_training() -> None:
    """Prompt + answer longer than the training sequence: the answer (all the supervision) is cut
    first, a prompt that fills the sequence leaves an empty loss mask. Beyond 10% of the answer
    tokens lost the data stage stops, saying what would fit."""
    from harness.run.drafters.train_stages import check_truncation, truncation

    samples = [
        {"input_ids": [1] * 10 + [2] * 6, "loss_mask": [0] * 10 + [1] * 6},  # fits in 16
        {"input_ids": [1] * 14 + [2] * 6, "loss_mask": [0] * 14 + [1] * 6},  # 2 of 6 answer tokens kept
        {"input_ids": [1] * 18 + [2] * 6, "loss_mask": [0] * 18 + [1] * 6},  # the prompt fills it: emptied
    ]
    found = truncation(samples, 16)
    assert (found["answer_tokens"], found["answer_tokens_kept"], found["samples_emptied"]) == (18, 8, 1)
    assert found["lost_share"] == pytest.approx(10 / 18) and found["longest"] == 24
    with pytest.raises(SystemExit, match=r"total_seq_len 16 cuts 56% of the answer tokens \(1 of 3 samples"):
        check_truncation(found)
    check_truncation(truncation(samples, 24))  # everything fits: nothing to say
    assert truncation(samples, 24)["lost_share"] == 0.0


def test_a_stage_that_stops_making_progress_is_stopped(tmp_path: Path) -> None:
    """A hung trainer writes nothing: the watchdog stops its process group after the stall time;
    a stage that keeps writing runs to its end."""
    import subprocess
    import sys
    import time

    from harness.run.drafters.distill import last_progress, run_watched

    hung = [sys.executable, "-c", "import time; time.sleep(60)"]
    stage_log = tmp_path / "train.log"
    stage_log.write_text("".join(f"step {i} loss {9 - i / 10:.1f}\n" for i in range(30)))
    started = time.monotonic()
    with pytest.raises(UserError, match="made no progress for .* min .*a hung trainer") as stalled:
        run_watched(hung, tmp_path, stall_s=1.0, poll_s=0.2, log=stage_log)
    assert time.monotonic() - started < 10
    message = str(stalled.value)  # the last lines of the stage's log, where it stopped
    assert "step 29 loss 6.1" in message and "step 10 loss" in message and "step 9 loss" not in message
    log = tmp_path / "log"
    writes = f"import time, pathlib\nfor i in range(6):\n    pathlib.Path({str(log)!r}).write_text(str(i)); "
    busy = [sys.executable, "-c", writes + "time.sleep(0.4)"]
    # 2.4 s, never idle for 0.4 s once started; the stall limit leaves room for the interpreter's own
    # start on a loaded machine (with 1.0 s, a suite at 175% CPU once saw no write within 1 s of launch)
    assert run_watched(busy, tmp_path, stall_s=3.0, poll_s=0.2) == 0
    assert last_progress(tmp_path) >= time.time() - 5
    left = subprocess.run(["pgrep", "-f", "time.sleep\\(60\\)"], capture_output=True, text=True)
    assert left.stdout == ""  # the hung stage's process is gone


def test_a_stage_ends_with_the_bench_process_that_started_it(tmp_path: Path) -> None:
    """A bench process killed with SIGKILL mid-build (no teardown runs) leaves no torch stage
    training on: the kernel sends it SIGTERM, as it does the servers (``die_with_parent``)."""
    import subprocess
    import sys
    import time

    from harness.run.server import group_alive

    pid_file = tmp_path / "stage.pid"
    stage = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    watch = "import sys, pathlib; from harness.run.drafters.distill import run_watched; "
    watch += "run_watched([sys.executable, '-c', sys.argv[2]], pathlib.Path(sys.argv[1]), stall_s=600)"
    bench = subprocess.Popen([sys.executable, "-c", watch, str(tmp_path), stage], cwd=ROOT)
    try:
        deadline = time.monotonic() + 60
        while not (pid_file.is_file() and pid_file.read_text()):
            assert bench.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        pid = int(pid_file.read_text())
        assert group_alive(pid)  # its own session and group (start_new_session)
        bench.kill()
        bench.wait(timeout=30)
        assert wait_until(lambda: not group_alive(pid), 30), (
            "the stage outlived the bench process killed with SIGKILL"
        )
    finally:
        if bench.poll() is None:
            bench.kill()


def test_a_warm_start_continues_a_finished_build_of_the_same_method(tmp_path: Path) -> None:
    """The source is checked (trained here, same method), becomes part of the build's identity and
    gives the losses the first training loss is checked against."""
    source = tmp_path / "eagle3-trained-x"
    (source / "build").mkdir(parents=True)
    manifest = {"trained": True, "method": "eagle3", "label": "self-distilled here", "target": {}}
    (source / "drafter_manifest.json").write_text(json.dumps(manifest))
    metrics = [{"train": {"loss": 28.2}}, {"val": {"loss_epoch": 20.0}}, {"train": {"loss": 14.7}}]
    (source / "build" / "train_metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    cold = _plan(_regime_with(tmp_path))
    warm = _plan(_regime_with(tmp_path, warm_start=str(source)))
    assert warm.key != cold.key and warm.settings.warm_start == str(source)
    regime = plan_regime(_regime_with(tmp_path, warm_start=str(source))).regime
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({"num_hidden_layers": 30}))
    warm = distill.DistillPlan(**{**warm.__dict__, "target_dir": str(target)})
    build = distill._build_settings(warm, regime)
    assert build["warm_start"] == {"from": str(source), "source_first_loss": 28.2, "source_last_loss": 14.7}
    (source / "drafter_manifest.json").write_text(json.dumps({**manifest, "method": "dflash"}))
    with pytest.raises(UserError, match="warm_start: .* is not a trained eagle3 drafter"):
        _plan(_regime_with(tmp_path, warm_start=str(source)))
    with pytest.raises(UserError, match="is not a drafter this harness trained"):
        _plan(_regime_with(tmp_path, warm_start=str(tmp_path / "nothing")))


def test_continue_epochs_warm_starts_from_the_arms_finished_drafter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bench drafter build --continue-epochs N: the arm's own finished build becomes the warm start of N
    more epochs, a drafter of its own; an arm whose drafter is not built has nothing to continue."""
    monkeypatch.setenv("BENCH_CACHE_DIR", str(tmp_path / "cache"))
    plan = plan_regime(_regime_with(tmp_path, epochs=2))
    arm = plan.regime.arms[1]
    with pytest.raises(UserError, match="arm eagle3_.*: its drafter is not built yet .* nothing to continue"):
        plan._continuation(arm, "/nonexistent", 3)
    finished = _plan(_regime_with(tmp_path, epochs=2)).final_dir
    (finished / "build").mkdir(parents=True)
    manifest = {"trained": True, "method": "eagle3", "label": "self-distilled here", "target": {}}
    (finished / "drafter_manifest.json").write_text(json.dumps(manifest))
    (finished / "build" / "train_metrics.jsonl").write_text(json.dumps({"train": {"loss": 9.0}}) + "\n")
    continued = plan._continuation(arm, "/nonexistent", 3)
    trained = continued.draft_model.trained
    assert (trained.warm_start, trained.epochs) == (str(finished), 3)
    assert arm.draft_model.trained.warm_start is None  # the regime's arm is unchanged
    again = distill.plan_distillation(
        continued, plan.regime, plan.regime_path, plan.workloads, "/nonexistent"
    )
    assert again.key != _plan(_regime_with(tmp_path, epochs=3)).key and again.settings.warm_start == str(
        finished
    )
