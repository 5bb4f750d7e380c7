"""The torch side of a self-distilled drafter build, run as child processes of
``harness.run.drafters.distill``:

    python -m harness.run.drafters.train_stages data WORK_DIR    # dataset + token frequencies + hidden states
    python -m harness.run.drafters.train_stages train WORK_DIR   # speculators' trainer, adapted to the CPU

Both read ``WORK_DIR/build.json`` (written by the parent) and are resumable: the data stage skips
hidden-state files already written, the trainer resumes from its last epoch checkpoint.

Library output (transformers, speculators' own logging) goes to ``WORK_DIR/<stage>.log``; only a
progress bar goes to the terminal, so a long build stays readable.
"""

from __future__ import annotations

import json
import logging
import os
import random
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress

from harness.run.drafters.workdir import (
    METRICS_FILE,
    TRUNCATION_FILE,
    WARM_START_FILE,
    progress_bar,
    read_answers,
    train_losses,
)

DATA_DIR = "data"  # speculators' --data-path: the Arrow dataset, token_freq.pt, hidden_states/
CHECKPOINTS_DIR = "checkpoints"


def read_build(work_dir: Path) -> dict[str, Any]:
    return json.loads((work_dir / "build.json").read_text())


@contextmanager
def _library_output_to(log_path: Path):
    """Send fd 1/2 (and so every library's prints and logs) to a log file; yield a console on
    the original terminal for the progress bar."""
    terminal = os.fdopen(os.dup(2), "w", buffering=1)
    log = open(log_path, "a", buffering=1)  # noqa: SIM115 - closed in the finally below
    saved = os.dup(1), os.dup(2)
    sys.stdout.flush(), sys.stderr.flush()
    os.dup2(log.fileno(), 1), os.dup2(log.fileno(), 2)
    try:
        yield Console(file=terminal, stderr=True)
    finally:
        sys.stdout.flush(), sys.stderr.flush()
        os.dup2(saved[0], 1), os.dup2(saved[1], 2)
        log.close()
        terminal.close()


# ---- stage: data -------------------------------------------------------------------------------


def _samples(responses: Path, seed: int) -> list[dict[str, Any]]:
    """Prompt + the target's answer as one token sequence; loss only on the answer. Shuffled once
    with the build's seed, so the trainer's validation tail mixes every workload."""
    samples = []
    for row in read_answers(responses):
        if not row["output_token_ids"]:
            continue  # skipped by the engine (recorded in the manifest)
        ids = row["prompt_token_ids"] + row["output_token_ids"]
        mask = [0] * len(row["prompt_token_ids"]) + [1] * len(row["output_token_ids"])
        samples.append({"index": row["index"], "input_ids": ids, "loss_mask": mask})
    random.Random(seed).shuffle(samples)
    return samples


# The truncation trap: a sample longer than the training sequence is cut, its answer (where all the
# supervision is) first; one whose prompt alone fills it keeps an empty loss mask and trains nothing,
# while training "runs" with a plausible loss on what is left. Beyond this share of the answer
# tokens lost the build stops before training, with the length that would fit.
MAX_LOST_ANSWER_SHARE = 0.10


def truncation(samples: list[dict[str, Any]], total_seq_len: int) -> dict[str, Any]:
    """What cutting each sample at ``total_seq_len`` tokens does to its supervision."""
    answer = sum(sum(s["loss_mask"]) for s in samples)
    kept = [sum(s["loss_mask"][:total_seq_len]) for s in samples]
    emptied = sum(1 for s, k in zip(samples, kept, strict=True) if sum(s["loss_mask"]) and not k)
    lengths = sorted(len(s["input_ids"]) for s in samples)
    return {
        "total_seq_len": total_seq_len,
        "samples": len(samples),
        "answer_tokens": answer,
        "answer_tokens_kept": sum(kept),
        "lost_share": (answer - sum(kept)) / answer if answer else 0.0,
        "samples_emptied": emptied,
        "longest": lengths[-1] if lengths else 0,
        "p95_length": lengths[int(0.95 * (len(lengths) - 1))] if lengths else 0,
    }


def check_truncation(found: dict[str, Any]) -> None:
    """Stop a build whose training sequence would cut away the supervision (``truncation``)."""
    if found["lost_share"] <= MAX_LOST_ANSWER_SHARE:
        return
    lost = 100 * found["lost_share"]
    raise SystemExit(
        f"draft_model.trained.total_seq_len {found['total_seq_len']} cuts {lost:.0f}% of the answer tokens "
        f"({found['samples_emptied']} of {found['samples']} samples lose their whole answer: their loss "
        f"mask is empty and they train nothing); the longest prompt + answer is {found['longest']} tokens "
        f"and 95% fit in {found['p95_length']}. Raise total_seq_len or lower max_output_tokens."
    )


def write_dataset(work_dir: Path) -> Path:
    """speculators' on-disk training format: an Arrow dataset (input_ids, loss_mask, seq_len, torch
    format) and token_freq.pt (answer tokens only), which its trainer turns into the draft vocab."""
    from datasets import Dataset
    from speculators.train.vocab_mapping import save_token_frequency_distribution

    build = read_build(work_dir)
    data_dir = work_dir / DATA_DIR
    if (data_dir / "state.json").is_file() and (data_dir / "token_freq.pt").is_file():
        return data_dir
    samples = _samples(Path(build["responses"]), build["seed"])
    found = truncation(samples, build["total_seq_len"])
    (work_dir / TRUNCATION_FILE).write_text(json.dumps(found, indent=2))
    check_truncation(found)
    dataset = Dataset.from_dict(
        {
            "input_ids": [s["input_ids"] for s in samples],
            "loss_mask": [s["loss_mask"] for s in samples],
            "seq_len": [len(s["input_ids"]) for s in samples],
            "source_index": [s["index"] for s in samples],
        }
    )
    dataset = dataset.with_format("torch")
    dataset.save_to_disk(str(data_dir))
    (data_dir / "token_freq.pt").unlink(missing_ok=True)
    save_token_frequency_distribution(dataset, output_path=data_dir / "token_freq.pt")
    return data_dir


def capture_hidden_states(work_dir: Path, console: Console) -> None:
    """The target's hidden states where the drafter reads them, one safetensors file per sample
    (``hs_{i}``: token_ids [seq], hidden_states [seq, aux layers + 1, hidden]).

    Layer id i means the INPUT of decoder layer i (what vLLM collects as an EAGLE-3 / DFlash aux
    hidden state); the last slot is the final layer's output before the final norm (speculators
    applies the verifier's norm and head to it for the target distribution). Captured with hooks
    on the decoder layers, so nothing depends on how transformers numbers ``hidden_states``."""
    import torch
    from datasets import load_from_disk
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM

    build = read_build(work_dir)
    data_dir = work_dir / DATA_DIR
    out_dir = data_dir / "hidden_states"
    out_dir.mkdir(parents=True, exist_ok=True)
    dataset = load_from_disk(str(data_dir))
    todo = [i for i in range(len(dataset)) if not (out_dir / f"hs_{i}.safetensors").is_file()]
    torch.manual_seed(build["seed"])
    if "OMP_NUM_THREADS" not in os.environ:  # stated by the caller (a shared machine): kept
        torch.set_num_threads(max(1, os.cpu_count() or 1))
    device = "cuda" if torch.cuda.is_available() else "cpu"  # one device: targets that fit on one GPU
    model = AutoModelForCausalLM.from_pretrained(
        build["target_dir"], dtype=getattr(torch, build["hidden_states_dtype"])
    )
    model.to(device).eval()
    layers = model.model.layers
    captured: dict[int, torch.Tensor] = {}

    def before(layer_id: int):
        def hook(_module, args, kwargs):
            captured[layer_id] = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]

        return hook

    def after(_module, _args, output):
        captured[len(layers)] = output[0] if isinstance(output, tuple) else output

    handles = [layers[i].register_forward_pre_hook(before(i), with_kwargs=True) for i in build["layer_ids"]]
    handles.append(layers[-1].register_forward_hook(after))
    slots = list(build["layer_ids"]) + [len(layers)]
    with progress_bar(console) as progress, torch.inference_mode():
        task = progress.add_task(
            "hidden states", total=len(dataset), completed=len(dataset) - len(todo), note=""
        )
        for i in todo:
            ids = dataset[i]["input_ids"]
            captured.clear()
            model.model(input_ids=ids.unsqueeze(0).to(device))
            stacked = (
                torch.stack([captured[s][0] for s in slots], dim=1).cpu().contiguous()
            )  # [seq, slots, hidden]
            tmp = out_dir / f"hs_{i}.safetensors.tmp"
            save_file({"token_ids": ids.clone(), "hidden_states": stacked}, str(tmp))
            os.replace(tmp, out_dir / f"hs_{i}.safetensors")
            progress.update(task, advance=1, note=f"{len(ids)} tokens")
    for handle in handles:
        handle.remove()


# ---- stage: train ------------------------------------------------------------------------------


def _adapt_trainer_to_cpu() -> None:
    """speculators' trainer assumes an accelerator in three places; on a CPU-only machine each is
    redirected to the CPU, and nothing else is changed:

    - its step timer calls ``torch.accelerator.synchronize()``: CPU ops are synchronous, so it
      becomes a no-op;
    - it moves the model and batches to ``local_rank`` (0, i.e. cuda:0): the CPU device instead;
    - it autocasts with the accelerator's device type, falling back to "cuda": "cpu" instead.

    A fourth place shows only on resume: the checkpointer loads the last epoch onto
    ``get_current_device()``, which also falls back to "cuda:0": the CPU instead.
    """
    import torch
    from speculators.train import checkpointer, trainer

    if torch.accelerator.current_accelerator() is not None:
        return  # a real accelerator: the stock trainer as is
    torch.accelerator.synchronize = lambda *args, **kwargs: None
    trainer.get_local_rank = lambda: torch.device("cpu")
    checkpointer.get_current_device = lambda: "cpu"
    original_init = trainer.Trainer.__init__

    def init_on_cpu(self, *args, **kwargs):
        # device_type is read only in train/val steps (autocast), after __init__ returns.
        original_init(self, *args, **kwargs)
        self.device_type = "cpu"

    trainer.Trainer.__init__ = init_on_cpu


class _MetricsRecorder(logging.Handler):
    """speculators logs its metrics as dicts on the 'speculators.metrics' logger: keep each as a
    JSON line (validation accuracy per position goes into the manifest) and drive the bar."""

    def __init__(self, path: Path, progress: Progress, task: Any):
        super().__init__()
        self.path, self.progress, self.task = path, progress, task

    def emit(self, record: logging.LogRecord) -> None:
        message = record.msg
        if not isinstance(message, dict) or record.__dict__.get("hparams"):
            return
        with open(self.path, "a") as handle:
            handle.write(json.dumps({"time": time.time(), **message}, default=str) + "\n")
        if "train" in message:
            train = message["train"]
            note = f"epoch {message.get('epoch', 0) + 1} loss {train.get('loss', float('nan')):.3f}"
            acc = train.get("full_acc_0", train.get("position_1_acc"))  # EAGLE-3, DFlash
            if acc is not None:
                note += f" acc@0 {acc:.2f}"
            self.progress.update(self.task, completed=message.get("global_step", 0) + 1, note=note)
        elif "val" in message:
            acc = message["val"].get("full_acc_0_epoch", message["val"].get("position_1_acc_epoch"))
            self.progress.console.print(
                f"  epoch {message.get('epoch', 0) + 1}: validation loss "
                f"{message['val'].get('loss_epoch', float('nan')):.3f}"
                + (f", accuracy at position 0 {acc:.3f}" if acc is not None else "")
            )


# A warm start continues a finished build: its weights, in the training dtype (speculators saves
# bf16 checkpoints, which do not load into float32 training as they are), a fresh warm-up + decay
# schedule (the finished run's annealed one would leave the learning rate near zero), and a check
# that training begins at the trained level, not at random init's.
WARM_START_DIR = "warm_start"


def prepare_warm_start(work_dir: Path, source: Path, dtype: str) -> Path:
    """The source drafter's weights cast to ``dtype``, with its config saying so (once)."""
    import torch
    from safetensors.torch import load_file, save_file

    target = work_dir / WARM_START_DIR
    if (target / "model.safetensors").is_file():
        return target
    target.mkdir(parents=True, exist_ok=True)
    weights = load_file(str(source / "model.safetensors"))
    cast = {k: v.to(getattr(torch, dtype)) if v.is_floating_point() else v for k, v in weights.items()}
    save_file(cast, str(target / "model.safetensors"))
    config = json.loads((source / "config.json").read_text())
    config.update({key: dtype for key in ("dtype", "torch_dtype") if key in config} or {"dtype": dtype})
    (target / "config.json").write_text(json.dumps(config, indent=2))
    return target


def check_warm_start(first: float | None, source_first: float, source_last: float) -> None:
    """A warm start must begin nearer the loss its source ended at than the one it began at (random
    init): otherwise the weights were not loaded, and training "runs" from scratch."""
    if first is None:
        raise SystemExit("warm start: the trainer logged no training loss to check")
    if first > (source_first + source_last) / 2:
        raise SystemExit(
            f"warm start did not start from the trained weights: its first loss {first:.3g} is nearer the "
            f"source's random-init start ({source_first:.3g}) than where the source ended ({source_last:.3g})"
        )


def train_argv(build: dict[str, Any], work_dir: Path) -> list[str]:
    """speculators' own train flags (``speculators train --help``), CPU-friendly choices included:
    sdpa attention (no flex-attention compile), the eager loss, no dataloader workers."""
    argv = [
        "--speculator-type",
        build["method"],
        "--verifier-name-or-path",
        build["target_dir"],
        "--data-path",
        str(work_dir / DATA_DIR),
        "--save-path",
        str(work_dir / CHECKPOINTS_DIR),
        "--target-layer-ids",
        *[str(i) for i in build["layer_ids"]],
        "--draft-vocab-size",
        str(build["draft_vocab_size"]),
        "--total-seq-len",
        str(build["total_seq_len"]),
        "--epochs",
        str(build["epochs"]),
        "--lr",
        str(build["learning_rate"]),
        "--optimizer",
        build.get("optimizer", "adamw"),
        "--train-data-ratio",
        str(1 - build["validation_fraction"]),
        "--seed",
        str(build["seed"]),
        "--hidden-states-dtype",
        build["train_dtype"],  # speculators' compute dtype (files are cast on load)
        "--draft-attn-impl",
        "sdpa",
        "--loss-implementation",
        "eager",
        "--num-workers",
        "0",
        "--on-missing",
        "raise",
        "--log-dir",
        str(work_dir / "logs"),
        "--log-freq",
        "1",
    ]
    if build["method"] == "dflash":
        argv += ["--mask-token-id", str(build["mask_token_id"]), "--block-size", str(build["block_size"])]
        if build.get("max_anchors"):  # blocks drafted per packed sequence (speculators' default: 512)
            argv += ["--max-anchors", str(build["max_anchors"])]
    if build.get("max_steps"):
        argv += ["--max-steps", str(build["max_steps"])]
    if build.get("warm_start"):  # the weights only: a new run has its own warm-up + decay schedule
        argv += ["--from-pretrained", str(work_dir / WARM_START_DIR)]
    return argv


def train(work_dir: Path, console: Console) -> None:
    build = read_build(work_dir)
    _adapt_trainer_to_cpu()
    from speculators.train import cli
    from speculators.train.config import TrainConfig

    warm = build.get("warm_start")
    if warm:
        prepare_warm_start(work_dir, Path(warm["from"]), build["train_dtype"])

    loader_sizes: dict[str, int] = {}
    make_loaders = cli.create_train_val_loaders

    def measured_loaders(*args, **kwargs):
        train_loader, val_loader = make_loaders(*args, **kwargs)
        loader_sizes["train"] = len(train_loader)
        progress.update(
            task,
            total=len(train_loader) * build["epochs"]
            if not build.get("max_steps")
            else min(build["max_steps"], len(train_loader) * build["epochs"]),
        )
        return train_loader, val_loader

    setup_metric_logger = cli.setup_metric_logger

    def with_recorder(*args, **kwargs):  # speculators' logging config replaces earlier handlers
        setup_metric_logger(*args, **kwargs)
        logging.getLogger("speculators.metrics").addHandler(
            _MetricsRecorder(work_dir / METRICS_FILE, progress, task)
        )

    cli.create_train_val_loaders = measured_loaders
    cli.setup_metric_logger = with_recorder
    with progress_bar(console) as progress:
        task = progress.add_task(f"training {build['method']}", total=None, note="loading")
        cli.main(TrainConfig.resolve(train_argv(build, work_dir)))
    if warm:
        losses = train_losses(work_dir / METRICS_FILE)
        first = losses[0] if losses else None
        record = {**warm, "first_loss": first}
        (work_dir / WARM_START_FILE).write_text(json.dumps(record, indent=2))
        check_warm_start(first, warm["source_first_loss"], warm["source_last_loss"])


if __name__ == "__main__":
    stage, work = sys.argv[1], Path(sys.argv[2])
    with _library_output_to(work / f"{stage}.log") as terminal:
        if stage == "data":
            write_dataset(work)
            capture_hidden_states(work, terminal)
        elif stage == "train":
            train(work, terminal)
        else:
            raise SystemExit(f"unknown stage {stage!r} (data or train)")
