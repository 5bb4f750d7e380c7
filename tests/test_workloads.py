"""Workload files: the shipped ones load from their packages; bad ones get clear errors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.config.workloads import load_workload
from harness.core.errors import UserError
from tests.conftest import bench

ROOT = Path(__file__).resolve().parent.parent


def test_humaneval_is_raw_code() -> None:
    workload = load_workload(ROOT / "workloads" / "code_humaneval.yaml", 5)
    assert workload.definition.prompt_format == "raw" and workload.definition.category == "code"
    assert len(workload.prompts) == 5
    assert all(p.prompt_id.startswith("HumanEval/") and "def " in p.text for p in workload.prompts)


def test_mtbench_first_turns_as_chat() -> None:
    workload = load_workload(ROOT / "workloads" / "chat_mtbench.yaml", 80)
    assert workload.definition.prompt_format == "chat"
    assert len({p.prompt_id for p in workload.prompts}) == 80


def test_sampling_is_seeded_and_hashed() -> None:
    first = load_workload(ROOT / "workloads" / "chat_mtbench.yaml", 8)
    again = load_workload(ROOT / "workloads" / "chat_mtbench.yaml", 8)
    assert first.prompts == again.prompts and first.content_sha256 == again.content_sha256
    assert load_workload(ROOT / "workloads" / "chat_mtbench.yaml", 9).content_sha256 != first.content_sha256


def _workload(tmp_path: Path, body: str, data: str | None = None) -> Path:
    if data is not None:
        (tmp_path / "prompts.jsonl").write_text(data)
    path = tmp_path / "w.yaml"
    path.write_text(body)
    return path


LOCAL = "name: local\ncategory: test\nsource: {path: prompts.jsonl, format: jsonl}\nprompt_format: raw\n"


def test_local_jsonl(tmp_path: Path) -> None:
    path = _workload(tmp_path, LOCAL, '{"id": "a", "prompt": "hello"}\n\n{"prompt": "world"}\n')
    assert [(p.prompt_id, p.text) for p in sorted(load_workload(path, 2).prompts, key=lambda p: p.text)] == [
        ("a", "hello"),
        ("line-2", "world"),
    ]


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ('{"prompt": "a"}\n{not json\n', "prompts.jsonl:2: not valid JSON"),
        ('{"text": "a"}\n', "record 1: needs a 'prompt' string or a 'messages' list"),
        ('["a"]\n', "prompts.jsonl:1: expected a JSON object"),
        ('{"prompt": ""}\n', "must be a non-empty string"),
        ('{"prompt": "a"}\n', "has 1 prompts, the regime asks for load.num_prompts=2"),
    ],
)
def test_bad_prompt_files(tmp_path: Path, data: str, expected: str) -> None:
    with pytest.raises(UserError, match=expected.replace("[", r"\[")):
        load_workload(_workload(tmp_path, LOCAL, data), 2)


def test_missing_prompt_file(tmp_path: Path) -> None:
    """The workload file's line of source.path, where it looked, and the file one letter off."""
    (tmp_path / "prompt.jsonl").write_text('{"prompt": "a"}\n')
    with pytest.raises(
        UserError,
        match=r"w.yaml:3: source.path: prompt file prompts.jsonl does not exist: looked for "
        rf"{tmp_path}/prompts.jsonl \(paths in w.yaml are relative to its folder\); "
        r"did you mean 'prompt.jsonl'\?",
    ):
        load_workload(_workload(tmp_path, LOCAL), 1)


def test_missing_package(tmp_path: Path) -> None:
    body = LOCAL.replace("{path: prompts.jsonl", "{package: no-such-dist, path: x.jsonl")
    with pytest.raises(
        UserError, match="package 'no-such-dist' is not installed; .*pip install --no-deps no-such-dist"
    ):
        load_workload(_workload(tmp_path, body), 1)


def test_bad_format_names_line(tmp_path: Path) -> None:
    with pytest.raises(
        UserError,
        match=r"w.yaml:3: source.format: Input should be 'humaneval', 'mtbench', 'specbench', 'sharegpt' or "
        r"'jsonl'",
    ):
        load_workload(_workload(tmp_path, LOCAL.replace("format: jsonl", "format: csv")), 1)


FIXTURES = ROOT / "tests" / "fixtures" / "workloads"
PROJECT_WORKLOADS = [
    "chat_open",
    "summarization",
    "extraction_long",
    "math_word_problems",
    "translation",
    "structured_json",
]


def _source(
    tmp_path: Path, fmt: str, file: str, category: str | None = None, prompt_format: str = "chat"
) -> Path:
    path = tmp_path / "w.yaml"
    extra = f"\n  category: {category}" if category else ""
    path.write_text(
        f"name: w\ncategory: c\nsource:\n  path: {FIXTURES / file}\n  format: {fmt}{extra}\nprompt_format: "
        f"{prompt_format}\n"
    )
    return path


@pytest.mark.parametrize("name", PROJECT_WORKLOADS)
def test_project_categories_have_30_distinct_prompts(name: str) -> None:
    workload = load_workload(ROOT / "workloads" / f"{name}.yaml", 30)
    assert workload.definition.prompt_format == "chat" and workload.definition.category
    assert (
        len({p.prompt_id for p in workload.prompts}) == 30 and len({p.text for p in workload.prompts}) == 30
    )


def test_project_categories_are_distinct() -> None:
    categories = [
        load_workload(ROOT / "workloads" / f"{name}.yaml", 1).definition.category
        for name in PROJECT_WORKLOADS
    ]
    assert len(set(categories)) == len(categories)


def test_specbench_first_turns_filtered_by_category(tmp_path: Path) -> None:
    workload = load_workload(
        _source(tmp_path, "specbench", "specbench_question.jsonl", category="translation"), 2
    )
    assert sorted(p.prompt_id for p in workload.prompts) == ["specbench-1", "specbench-3"]
    assert all(p.text.startswith("Translate German to English") for p in workload.prompts)
    with pytest.raises(
        UserError, match=r"w.yaml:\d+: source.category: no record of .* has category 'poetry'"
    ):
        load_workload(_source(tmp_path, "specbench", "specbench_question.jsonl", category="poetry"), 1)
    with pytest.raises(UserError, match="has category 'translatoin' .*; did you mean 'translation'"):
        load_workload(_source(tmp_path, "specbench", "specbench_question.jsonl", category="translatoin"), 1)
    with pytest.raises(UserError, match=r"specbench_broken.jsonl:2: not valid JSON"):
        load_workload(_source(tmp_path, "specbench", "specbench_broken.jsonl"), 1)


def test_mtbench_first_turns_filtered_by_category(tmp_path: Path) -> None:
    workload = load_workload(_source(tmp_path, "mtbench", "mtbench_question.jsonl", category="writing"), 1)
    assert [(p.prompt_id, p.text) for p in workload.prompts] == [("mtbench-81", "Write a haiku about rain.")]


def test_sharegpt_first_human_turn(tmp_path: Path) -> None:
    workload = load_workload(_source(tmp_path, "sharegpt", "sharegpt.json"), 2)
    assert sorted((p.prompt_id, p.text) for p in workload.prompts) == [
        ("conv-a", "How do I boil an egg?"),
        ("conv-b", "Name a prime number."),
    ]
    with pytest.raises(UserError, match="expected a JSON array"):
        load_workload(_source(tmp_path, "sharegpt", "sharegpt_not_array.json"), 1)
    with pytest.raises(UserError, match="record 1: no turn from 'human'"):
        load_workload(_source(tmp_path, "sharegpt", "sharegpt_no_human.json"), 1)


def test_jsonl_messages_are_sent_as_the_conversation(tmp_path: Path) -> None:
    from harness.config.regime import load_regime
    from harness.run.client import request_body

    workload = load_workload(_source(tmp_path, "jsonl", "messages.jsonl"), 2)
    prompts = {p.prompt_id: p for p in workload.prompts}
    regime = load_regime(ROOT / "regimes" / "cpu_smoke.yaml")
    _, body = request_body(prompts["m1"], "chat", regime.sampling, regime.load)
    assert body["messages"] == [
        {"role": "system", "content": "You answer in one word."},
        {"role": "user", "content": "Capital of Peru?"},
    ]
    _, body = request_body(prompts["m2"], "chat", regime.sampling, regime.load)
    assert body["messages"] == [{"role": "user", "content": "Say hello."}]
    with pytest.raises(UserError, match=r"w.yaml:\d+: prompt_format: .*use prompt_format: chat"):
        load_workload(_source(tmp_path, "jsonl", "messages.jsonl", prompt_format="raw"), 1)
    with pytest.raises(UserError, match="record 1: each message needs a 'role'"):
        load_workload(_source(tmp_path, "jsonl", "messages_bad_role.jsonl"), 1)
    with pytest.raises(UserError, match="must not be the assistant's"):
        load_workload(_source(tmp_path, "jsonl", "messages_ends_with_assistant.jsonl"), 1)


def test_chat_settings_are_part_of_what_was_sent(tmp_path: Path) -> None:
    """A workload's chat settings (and a regime's on top) change its content hash, so runs that
    asked differently are never compared as equal; without any, the hash is the one runs had
    before chat settings existed. On a raw workload they are an error naming the field."""
    from harness.config.workloads import ChatTemplate

    chat_file = ROOT / "workloads" / "chat_mtbench.yaml"
    plain = load_workload(chat_file, 4)
    thinking_off = load_workload(chat_file, 4, ChatTemplate(template_kwargs={"enable_thinking": False}))
    assert plain.chat is not None and plain.chat.is_empty()
    assert thinking_off.chat.template_kwargs == {"enable_thinking": False}
    assert thinking_off.content_sha256 != plain.content_sha256
    assert load_workload(chat_file, 4, ChatTemplate()).content_sha256 == plain.content_sha256
    own = tmp_path / "own.yaml"
    own.write_text(chat_file.read_text() + "chat:\n  system_prompt: Answer briefly.\n")
    assert load_workload(own, 4).chat.system_prompt == "Answer briefly."
    raw = load_workload(ROOT / "workloads" / "code_humaneval.yaml", 2, ChatTemplate(system_prompt="x"))
    assert raw.chat is None  # raw prompts have no chat template: the regime's settings do not apply
    bad = tmp_path / "bad.yaml"
    bad.write_text((ROOT / "workloads" / "code_humaneval.yaml").read_text() + "chat:\n  system_prompt: x\n")
    with pytest.raises(UserError, match=r"bad.yaml:\d+: chat: applies to prompt_format: chat only"):
        load_workload(bad, 1)


def _conversation(
    tmp_path: Path, fmt: str, file: str, conversation: str, prompt_format: str = "chat"
) -> Path:
    path = _source(tmp_path, fmt, file, prompt_format=prompt_format)
    path.write_text(path.read_text() + f"conversation: {conversation}\n")
    return path


def test_mtbench_conversations_carry_their_own_second_turn(tmp_path: Path) -> None:
    """MT-Bench's second question is turn 2's user message; the model's answer is put before it, and
    the turn's id names the conversation and a hash of everything it carries."""
    from harness.config.workloads import next_turn

    workload = load_workload(_conversation(tmp_path, "mtbench", "mtbench_question.jsonl", "{turns: 2}"), 2)
    assert workload.turns == 2 and workload.name == "w"
    assert workload.cell_names() == ["w.turn1", "w.turn2"] and workload.at_turn(2).name == "w.turn2"
    first = {p.prompt_id: p for p in workload.prompts}["mtbench-81"]
    assert (first.text, first.later_turns, first.turn) == (
        "Write a haiku about rain.",
        ("Now make it sadder.",),
        1,
    )
    second = next_turn(first, "Rain taps the window.")
    assert second.turn == 2 and second.text == "Now make it sadder."
    assert second.chat_messages() == [
        {"role": "user", "content": "Write a haiku about rain."},
        {"role": "assistant", "content": "Rain taps the window."},
        {"role": "user", "content": "Now make it sadder."},
    ]
    # the same conversation pairs with itself; another answer makes another conversation
    assert second.prompt_id == next_turn(first, "Rain taps the window.").prompt_id
    assert second.prompt_id.startswith("mtbench-81~t2-")
    assert next_turn(first, "Grey sky.").prompt_id != second.prompt_id
    with pytest.raises(ValueError, match="the conversation's last"):
        next_turn(second, "Sadder rain.")
    single = load_workload(_source(tmp_path, "mtbench", "mtbench_question.jsonl"), 2)
    assert single.turns == 1 and single.at_turn(1) is single and single.cell_names() == ["w"]
    assert single.content_sha256 != workload.content_sha256  # the later turns are part of what is sent


def test_a_follow_up_makes_a_self_refinement_loop(tmp_path: Path) -> None:
    """Every later turn sends the follow-up after the model's own last answer; a later turn keeps the
    whole conversation (and a workload's system prompt still comes first)."""
    from harness.config.workloads import ChatTemplate, next_turn

    path = _conversation(tmp_path, "jsonl", "messages.jsonl", "{turns: 3, follow_up: Fix it.}")
    workload = load_workload(path, 2)
    first = {p.prompt_id: p for p in workload.prompts}["m2"]
    assert first.later_turns == ("Fix it.", "Fix it.")
    third = next_turn(next_turn(first, "hello"), "Hello!")
    assert third.turn == 3 and third.prompt_id.startswith("m2~t3-")
    assert [m["content"] for m in third.chat_messages()] == [
        "Say hello.",
        "hello",
        "Fix it.",
        "Hello!",
        "Fix it.",
    ]
    system = ChatTemplate(system_prompt="Be brief.").messages(third)
    assert system[0] == {"role": "system", "content": "Be brief."} and len(system) == 6


@pytest.mark.parametrize(
    ("fmt", "file", "conversation", "prompt_format", "expected"),
    [
        (
            "jsonl",
            "messages.jsonl",
            "{turns: 2}",
            "chat",
            r"conversation.follow_up: .*jsonl has no later turns",
        ),
        (
            "mtbench",
            "mtbench_question.jsonl",
            "{turns: 3}",
            "chat",
            r"conversation.turns: no record of .* 3 user",
        ),
        (
            "mtbench",
            "mtbench_question.jsonl",
            "{turns: 1}",
            "chat",
            r"conversation.turns: .*greater than or equal to 2",
        ),
        (
            "jsonl",
            "messages.jsonl",
            "{turns: 2, follow_up: Fix it.}",
            "raw",
            r"conversation: applies to prompt_format: chat",
        ),
    ],
)
def test_bad_conversations_name_the_field(
    tmp_path: Path, fmt: str, file: str, conversation: str, prompt_format: str, expected: str
) -> None:
    with pytest.raises(UserError, match=expected):
        load_workload(_conversation(tmp_path, fmt, file, conversation, prompt_format), 1)


def test_shipped_conversation_workloads() -> None:
    """MT-Bench's 80 questions all have two turns; the agentic loop sends its follow-up twice."""
    turns = load_workload(ROOT / "workloads" / "chat_mtbench_turns.yaml", 80)
    assert turns.turns == 2 and all(len(p.later_turns) == 1 for p in turns.prompts)
    plain = load_workload(ROOT / "workloads" / "chat_mtbench.yaml", 80)
    assert [p.text for p in turns.prompts] == [p.text for p in plain.prompts]  # turn 1: the same questions
    loop = load_workload(ROOT / "workloads" / "agentic_code_refine.yaml", 4)
    assert loop.turns == 3 and loop.definition.category == "agentic"
    assert all(
        len(set(p.later_turns)) == 1 and "complete corrected function" in p.later_turns[0]
        for p in loop.prompts
    )


def test_context_pads_a_prompt_with_its_workloads_own_records() -> None:
    """load.context_tokens: other HumanEval problems, whole (stub and canonical solution), before the
    stub to complete, to about that many tokens (3 characters each); the same text on every load,
    another content hash than the unpadded prompts; a prompt already that long is left as it is."""
    from harness.config.workloads import CHARS_PER_TOKEN, prompt_sha256, with_context

    path = ROOT / "workloads" / "code_humaneval.yaml"
    plain = load_workload(path, 4)
    padded = load_workload(path, 4, context_tokens=1024)
    assert padded.content_sha256 != plain.content_sha256
    assert padded.prompts == load_workload(path, 4, context_tokens=1024).prompts  # seeded
    for short, long in zip(plain.prompts, padded.prompts, strict=True):
        assert long.prompt_id == short.prompt_id and long.text.endswith("\n\n" + short.text)
        assert 0.8 * 1024 * CHARS_PER_TOKEN <= len(long.text) <= 1024 * CHARS_PER_TOKEN
        assert "return" in long.text[: -len(short.text)]  # whole functions before the stub
    assert with_context(plain.prompts[0], plain.prompts, 8, seed=0) == plain.prompts[0]
    # a drafter trained here holds out the source record, whatever was put before it
    assert [prompt_sha256(p) for p in padded.prompts] == [prompt_sha256(p) for p in plain.prompts]


def test_context_goes_before_a_chat_prompts_question(tmp_path: Path) -> None:
    from harness.config.workloads import with_context

    workload = load_workload(_source(tmp_path, "jsonl", "messages.jsonl"), 2)
    prompts = {p.prompt_id: p for p in workload.prompts}
    padded = with_context(prompts["m1"], workload.prompts, 64, seed=0)
    assert padded.messages[0] == prompts["m1"].messages[0] and padded.messages[-1] == ("user", padded.text)
    assert padded.text == "Say hello.\n\nCapital of Peru?"


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        # two prompts under one id: the exactness diff would compare each with the other's output
        (
            '{"id": "a", "prompt": "x"}\n{"id": "b", "prompt": "y"}\n{"id": "a", "prompt": "z"}\n',
            "'a' on records 1, 3",
        ),
        ('{"id": null, "prompt": "x"}\n{"id": null, "prompt": "y"}\n', "record 1: 'id' must be a non-empty"),
        ('{"id": "", "prompt": "x"}\n', "record 1: 'id' must be a non-empty"),
        ('{"id": [1], "prompt": "x"}\n', "record 1: 'id' must be a non-empty"),
        # an id given as a number and as text is one prompt to the diff (both are stored as text)
        ('{"id": 7, "prompt": "x"}\n{"id": "7", "prompt": "y"}\n', "'7' on records 1, 2"),
        # a position's default id taken by another record's own
        ('{"id": "line-2", "prompt": "x"}\n{"prompt": "y"}\n', "'line-2' on records 1, 2"),
    ],
)
def test_prompt_ids_are_unique_or_refused(tmp_path: Path, data: str, expected: str) -> None:
    with pytest.raises(UserError, match=re.escape(expected)):
        load_workload(_workload(tmp_path, LOCAL, data), 1)


def test_a_dataset_with_repeated_ids_is_refused_by_the_cli(tmp_path: Path) -> None:
    """``bench validate --dataset FILE`` as a user runs it: exit 2, the file and its records, no traceback."""
    prompts = tmp_path / "dup.jsonl"
    prompts.write_text("".join(f'{{"id": "p{i % 3}", "prompt": "prompt {i}"}}\n' for i in range(8)))
    out = bench("validate", str(ROOT / "regimes" / "cpu_default.yaml"), "--dataset", str(prompts))
    assert out.returncode == 2, out.stdout
    assert f"{prompts}: prompt ids must be unique" in out.stdout and "'p0' on records 1, 4, 7" in out.stdout
    assert "Traceback" not in out.stdout
