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
        ("a", "hello"), ("line-2", "world")
    ]


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ('{"prompt": "a"}\n{not json\n', "prompts.jsonl:2: not valid JSON"),
        ('{"text": "a"}\n', "record 1: missing field 'prompt'"),
        ('["a"]\n', "prompts.jsonl:1: expected a JSON object"),
        ('{"prompt": ""}\n', "must be a non-empty string"),
        ('{"prompt": "a"}\n', "has 1 prompts, the regime asks for load.num_prompts=2"),
    ],
)
def test_bad_prompt_files(tmp_path: Path, data: str, expected: str) -> None:
    with pytest.raises(UserError, match=expected.replace("[", r"\[")):
        load_workload(_workload(tmp_path, LOCAL, data), 2)


def test_missing_prompt_file(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="prompt file not found"):
        load_workload(_workload(tmp_path, LOCAL), 1)


def test_missing_package(tmp_path: Path) -> None:
    body = LOCAL.replace("{path: prompts.jsonl", "{package: no-such-dist, path: x.jsonl")
    with pytest.raises(UserError, match="package 'no-such-dist' is not installed; .*pip install --no-deps no-such-dist"):
        load_workload(_workload(tmp_path, body), 1)


def test_bad_format_names_line(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"w.yaml:3: source.format: Input should be 'humaneval', 'mtbench' or 'jsonl'"):
        load_workload(_workload(tmp_path, LOCAL.replace("format: jsonl", "format: csv")), 1)
