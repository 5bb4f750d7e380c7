"""Workload files: the shipped ones load from their packages; bad ones get clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.errors import UserError
from harness.workloads import load_workload

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
    from harness.client import request_body
    from harness.regime import load_regime

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
    from harness.workloads import ChatTemplate

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
