"""Conversation workloads through the runner: each turn its own window and cell, built from the same
arm's answers to the turn before, the prefix cache emptied only before a conversation's first turn;
what a regime cannot combine with them is refused by name. The stand-in engine
(benchmarks/stream_server.py) answers here; tests/test_production_engine.py runs the real one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from harness.core.errors import UserError
from harness.results import SCHEMA_VERSION, read_jsonl
from harness.run.plan import describe_plan, plan_regime
from harness.run.runner import run_regime
from tests.test_run_plan import REGIME, StandIn, _console

ROOT = Path(__file__).resolve().parent.parent
TURNS = ROOT / "workloads" / "chat_mtbench_turns.yaml"
LOOP = ROOT / "workloads" / "agentic_code_refine.yaml"


def _regime(tmp_path: Path, **load: object) -> Path:
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text("{}")
    data = yaml.safe_load(REGIME.read_text())
    data["target"] = {"path": str(model), "dtype": "bfloat16", "max_model_len": 1024}
    data["workloads"] = [str(TURNS), str(LOOP)]
    data["load"] = {
        "concurrency": [2],
        "num_prompts": 3,
        "max_output_tokens": 6,
        "warmup_requests": 0,
        **load,
    }
    regime = tmp_path / "turns.yaml"
    regime.write_text(yaml.safe_dump(data))
    return regime


def test_each_turn_is_a_window_built_from_the_arms_own_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    resets: list[str] = []

    class Counting(StandIn):
        def reset_prefix_cache(self, base_url: str) -> bool:
            resets.append(base_url)
            return True

    monkeypatch.setattr("harness.run.plan.get_adapter", lambda name: Counting())
    console, out = _console()
    run, summary = run_regime(
        _regime(tmp_path, repeats=2), tmp_path / "results", console, allow_mismatch=True
    )
    assert [a.status for a in summary.arms] == ["ok", "ok"], out.getvalue()
    windows = read_jsonl(run.windows("ngram_k4"))
    order = [(w["workload"], w["turn"], w["repeat"]) for w in windows]
    # a repeat is a whole conversation: its turns in order, then the next repeat's
    assert order == [
        ("chat_mtbench_turns.turn1", 1, 0),
        ("chat_mtbench_turns.turn2", 2, 0),
        ("chat_mtbench_turns.turn1", 1, 1),
        ("chat_mtbench_turns.turn2", 2, 1),
        *[(f"agentic_code_refine.turn{t}", t, r) for r in (0, 1) for t in (1, 2, 3)],
    ]
    assert [w["prefix_cache_reset"] for w in windows] == [w["turn"] == 1 for w in windows]
    # per arm, each repeat's first turn of each workload; and the baseline's reference pass, once each
    assert len(resets) == 2 * (2 + 2) + 2
    samples = read_jsonl(run.samples("ngram_k4"))
    first = {s["prompt_id"]: s for s in samples if s["workload"] == "agentic_code_refine.turn1"}
    later = [s for s in samples if s["workload"] == "agentic_code_refine.turn3" and s["repeat"] == 0]
    assert len(first) == 3 and len(later) == 3
    for sample in later:  # each third turn: a conversation that began with a first-turn prompt
        conversation, _, tag = sample["prompt_id"].partition("~")
        assert conversation in first and tag.startswith("t3-")
    # every turn is a cell of its own, with the turn it measured
    cells = {(c.arm, c.workload): c for c in summary.cells}
    assert {w for _, w in cells} == {
        "chat_mtbench_turns.turn1",
        "chat_mtbench_turns.turn2",
        *{f"agentic_code_refine.turn{t}" for t in (1, 2, 3)},
    }
    assert cells[("ngram_k4", "agentic_code_refine.turn3")].turn == 3
    assert cells[("ngram_k4", "agentic_code_refine.turn3")].speedup is not None
    record = json.loads((run.root / "regime.json").read_text())
    assert record["schema_version"] == SCHEMA_VERSION
    assert [w["definition"]["conversation"]["turns"] for w in record["workloads"]] == [2, 3]


def test_a_failed_turn_ends_its_conversation_and_the_cell_counts_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request that failed has no answer to carry: its conversation stops there and is stored as a
    failed request of each later turn (the cell says 2/3), the others go on carrying their own
    answers, each keeping its due time in the open-loop schedule."""
    from harness.core.arrivals import arrival_offsets
    from harness.run import sending
    from harness.run.client import run_window as real_window

    sent: dict[str, list] = {}

    async def failing(base_url, workload, prompts, concurrency, sampling, load, on_done, *args):
        sent[workload.name] = list(prompts)

        def done(record):
            if record.workload.endswith(".turn1") and record.prompt_id == prompts[0].prompt_id:
                record.error = "HTTP 500"  # as if the engine had failed it
            on_done(record)

        return await real_window(base_url, workload, prompts, concurrency, sampling, load, done, *args)

    monkeypatch.setattr(sending, "run_window", failing)
    monkeypatch.setattr("harness.run.plan.get_adapter", lambda name: StandIn())
    console, out = _console()
    regime = _regime(tmp_path, concurrency=[], request_rate=[20], max_concurrency=2)
    data = yaml.safe_load(regime.read_text())
    data["workloads"], data["arms"] = [str(TURNS)], data["arms"][:1]
    regime.write_text(yaml.safe_dump(data))
    run, summary = run_regime(regime, tmp_path / "results", console, allow_mismatch=True)
    first, second = sent["chat_mtbench_turns.turn1"], sent["chat_mtbench_turns.turn2"]
    failed = first[0].prompt_id
    assert [p.conversation_id for p in second] == [p.prompt_id for p in first[1:]]
    answers = {s["prompt_id"]: s["text"] for s in read_jsonl(run.samples("baseline")) if s["error"] is None}
    for prompt in second:  # the arm's own answer, then MT-Bench's second question
        assert prompt.messages[-2] == ("assistant", answers[prompt.conversation_id])
        assert prompt.messages[-1] == ("user", prompt.later_turns[0]) and prompt.turn == 2
    (cell,) = [c for c in summary.cells if c.workload == "chat_mtbench_turns.turn2"]
    assert (cell.requests_total, cell.requests_ok, cell.requests_errored) == (3, 2, 1)
    (ended,) = [
        s for s in read_jsonl(run.samples("baseline")) if s["workload"].endswith(".turn2") and s["error"]
    ]
    assert ended["prompt_id"] == failed and "conversation ended at turn 1" in ended["error"]
    (window,) = [w for w in read_jsonl(run.windows("baseline")) if w["turn"] == 2]
    full = arrival_offsets(3, 20.0, "poisson", 1.0, 0, "chat_mtbench_turns.turn2/20.0/0")
    assert window["schedule"] == full[1:]  # the ended conversation's slot stays empty
    assert "chat_mtbench_turns: 1 conversation(s) end at turn 1" in " ".join(out.getvalue().split())


@pytest.mark.parametrize(
    ("load", "expected"),
    [
        (
            {"repeats": {"min": 2, "max": 3, "target_rel_half_width": 0.1}},
            r"load.repeats: conversation workloads",
        ),
        ({"ramp": [{"concurrency": 1, "duration_s": 2}]}, r"load.ramp: conversation workloads .* no turns"),
    ],
)
def test_what_a_conversation_cannot_run_in_is_refused(tmp_path: Path, load: dict, expected: str) -> None:
    with pytest.raises(UserError, match=expected):
        plan_regime(_regime(tmp_path, **load))


def test_the_plan_says_what_a_turn_carries_and_gates_name_turns(tmp_path: Path) -> None:
    regime = _regime(tmp_path)
    text = " ".join(describe_plan(plan_regime(regime)).split())
    assert "chat_mtbench_turns (chat, 2 turns, each a cell: the model's own answers" in text
    assert "a follow-up instruction carried into the next turn, the prefix cache kept between turns" in text
    data = yaml.safe_load(regime.read_text())
    data["gates"] = {
        "rules": [{"arm": "ngram_k4", "metric": "tau", "min": 1.0, "workload": "agentic_code_refine.turn2"}]
    }
    regime.write_text(yaml.safe_dump(data))
    plan_regime(regime)  # a turn's cell is a workload a gate may name
    for name in ("agentic_code_refine.turn4", "agentic_code_refine"):  # no such turn; no cell is named so
        data["gates"]["rules"][0]["workload"] = name
        regime.write_text(yaml.safe_dump(data))
        with pytest.raises(UserError, match=rf"no workload named '{name}'"):
            plan_regime(regime)
