"""Greedy exactness that costs what divergences need (issue 81, item 3): over two or more start-ups
of the baseline, its own start-ups are the engine's noise floor, and its later start-ups ask logprobs
(``margins.jsonl``) only for the prompts an output diverged on; a design of one round keeps the full
reference pass (``noise_floor.jsonl``), and runs stored with it read as they always did.

The pure selection (``derive.exactness.prompts_to_margin``) and the noise floor from start-ups on
records made here; a stored run (tests/fixtures/run_v12_default, two start-ups, copied) without its
full pass, with and without margins; whole runs through the runner with the stand-in engine
(tests/test_run_plan.py's) that make no full pass over two rounds and send only the diverged prompt,
and keep the full pass over one."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from harness.config.regime import load_regime
from harness.derive.exactness import FIRST_START_UP, MarginPrompt, exactness, prompts_to_margin
from harness.derive.summary import summarize
from harness.present.table import exactness_table
from harness.results import RequestRecord, RunDir, append_jsonl, read_jsonl
from harness.results.raw import RawRun, raw_damage, read_raw
from harness.run.outlook import margins_only, night_plan
from harness.run.sending import Sender
from tests.test_run_plan import stand_in_run

ROOT = Path(__file__).resolve().parent.parent
TWO_STARTS = ROOT / "tests" / "fixtures" / "run_v12_default"  # baseline, ngram_k2, ngram_k4; 2 start-ups
E2E = ROOT / "tests" / "regimes" / "cpu_e2e.yaml"
W = "code_humaneval"


def _record(
    prompt: str,
    tokens: list[int],
    repeat: int = 0,
    concurrency: int = 1,
    logprobs: list[list[tuple[int | None, float]]] | None = None,
    error: str | None = None,
) -> RequestRecord:
    return RequestRecord(
        workload=W,
        prompt_id=prompt,
        concurrency=concurrency,
        prompt_format="raw",
        repeat=repeat,
        token_ids=tokens,
        top_logprobs=logprobs or [],
        error=error,
    )


def _copy(tmp_path: Path, full_pass: bool = False) -> Path:
    """run_v12_default copied, without its full reference pass unless ``full_pass``."""
    run = tmp_path / "run"
    shutil.copytree(TWO_STARTS, run)
    if not full_pass:
        (run / "arms" / "baseline" / "noise_floor.jsonl").unlink()
    return run


def _raw(tmp_path: Path, **arms: list[RequestRecord]) -> RawRun:
    """The stored run's files, every arm's requests replaced by ``arms`` (none: [])."""
    raw = read_raw(_copy(tmp_path))
    for name, arm in raw.arms.items():
        arm.samples = arms.get(name, [])
        arm.noise_floor, arm.margins = [], []
    return raw


SAME = [1, 2, 3, 4]


def _baseline(starts: int = 2, prompts: tuple[str, ...] = ("p1", "p2", "p3", "p4")) -> list[RequestRecord]:
    """The baseline's identical answers on every start-up (run_v12_default: one repeat a start-up)."""
    return [_record(p, SAME, repeat=s) for s in range(starts) for p in prompts]


def test_an_arms_differing_output_selects_its_prompt(tmp_path: Path) -> None:
    arm = [_record("p1", SAME), _record("p2", [1, 2, 9, 9]), _record("p2", SAME, repeat=1)]
    raw = _raw(tmp_path, baseline=_baseline(), ngram_k4=arm)
    assert prompts_to_margin(raw) == [MarginPrompt(W, "p2", 1)]
    # the same prompt at another level is another window: its own margin
    arm.append(_record("p3", [7], concurrency=4))
    raw.arms["baseline"].samples.append(_record("p3", SAME, concurrency=4))
    assert prompts_to_margin(raw) == [MarginPrompt(W, "p2", 1), MarginPrompt(W, "p3", 4)]


def test_identical_outputs_select_nothing(tmp_path: Path) -> None:
    arms = {"ngram_k2": _baseline(), "ngram_k4": _baseline()}
    raw = _raw(tmp_path, baseline=_baseline(), **arms)
    assert prompts_to_margin(raw) == []
    # a failed request is no output: nothing to compare, nothing to margin
    raw.arms["ngram_k4"].samples.append(_record("p1", [9], error="timeout"))
    assert prompts_to_margin(raw) == []
    # a prompt the baseline never answered pairs with nothing
    raw.arms["ngram_k4"].samples.append(_record("p9", [9]))
    assert prompts_to_margin(raw) == []


def test_the_baselines_own_later_start_up_selects_its_prompt(tmp_path: Path) -> None:
    baseline = [*_baseline(starts=1), _record("p4", [1, 2, 3, 5], repeat=1)]
    raw = _raw(tmp_path, baseline=baseline, ngram_k4=_baseline(starts=1))
    assert prompts_to_margin(raw) == [MarginPrompt(W, "p4", 1)]


def test_margined_prompts_are_not_sent_again(tmp_path: Path) -> None:
    raw = _raw(tmp_path, baseline=_baseline(), ngram_k4=[_record("p1", [9]), _record("p2", [9])])
    raw.arms["baseline"].margins = [_record("p1", SAME, logprobs=[[(1, -0.1), (2, -0.2)]] * 4)]
    assert prompts_to_margin(raw) == [MarginPrompt(W, "p2", 1)]
    # one whose logprob request failed is asked again
    raw.arms["baseline"].margins.append(_record("p2", [], error="engine hung"))
    assert prompts_to_margin(raw) == [MarginPrompt(W, "p2", 1)]
    # a full reference pass (a run made before, or a design of one round) answers every prompt
    raw.arms["baseline"].noise_floor = [_record("p2", SAME, logprobs=[[(1, -0.1), (2, -0.2)]] * 4)]
    assert prompts_to_margin(raw) == []
    # no greedy exactness, no margins
    raw.arms["baseline"].noise_floor = []
    raw.regime = raw.regime.model_copy(
        update={"exactness": raw.regime.exactness.model_copy(update={"enabled": False})}
    )
    assert prompts_to_margin(raw) == []


def test_the_noise_floor_is_the_baselines_own_start_ups(tmp_path: Path) -> None:
    """A later start-up whose output differs on one prompt of four: 75% identical; without a
    margin for it, its divergence is "unknown"; with one, classified by it."""
    baseline = [*_baseline(starts=1), *(replace(r, repeat=1) for r in _baseline(1, ("p1", "p2", "p3")))]
    baseline.append(_record("p4", [1, 2, 7, 7], repeat=1))
    raw = _raw(tmp_path, baseline=baseline)
    section = exactness(raw)
    floor = section.noise_floor
    assert floor is not None and floor.reference == f"baseline{FIRST_START_UP}"
    assert (floor.compared, floor.identical_pct, floor.unknown_pct) == (4, 75.0, 25.0)
    (entry,) = [e for e in floor.prompts if e.status != "identical"]
    assert (entry.prompt_id, entry.position, entry.repeat, entry.margin) == ("p4", 2, 1, None)
    assert {e.repeat for e in floor.prompts} == {1}  # each entry keeps the later start-up's repeat
    # its margin, from the targeted pass: a near tie at that position (0.005 nats, under float32's 0.01)
    near = [
        [(1, -0.1), (5, -3.0)],
        [(2, -0.1), (5, -3.0)],
        [(3, -0.100), (7, -0.105)],
        [(4, -0.1), (5, -2.0)],
    ]
    raw.arms["baseline"].margins = [_record("p4", SAME, logprobs=near)]
    (entry,) = [e for e in exactness(raw).noise_floor.prompts if e.status != "identical"]  # type: ignore[union-attr]
    assert entry.status == "near_tie" and entry.margin == pytest.approx(0.005)
    # one start-up of the baseline and no full pass: no noise floor, as before
    raw.arms["baseline"].samples = _baseline(starts=1)
    assert exactness(raw).noise_floor is None


def _diverge(run: Path, arm: str, prompt: str, position: int) -> list[int]:
    """The stored arm's output for ``prompt`` (its first start-up) changed from ``position`` on (the
    fixture's lines are unchecked: written before lines were counted); the baseline's tokens."""
    path = run / "arms" / arm / "samples.jsonl"
    rows = read_jsonl(path)
    row = next(r for r in rows if r["prompt_id"] == prompt and r["repeat"] == 0)
    tokens = list(row["token_ids"])
    row["token_ids"] = [*tokens[:position], tokens[position] + 1, *tokens[position + 1 :]]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tokens


def test_a_stored_run_with_margins_classifies_a_divergence_by_its_margin(tmp_path: Path) -> None:
    run = _copy(tmp_path)
    first = read_jsonl(run / "arms" / "ngram_k4" / "samples.jsonl")[0]
    prompt = first["prompt_id"]
    tokens = _diverge(run, "ngram_k4", prompt, 3)
    # without margins: the divergence stays "unknown" (no logprobs at its position), and is the
    # prompt the baseline's next start-up would ask for
    assert MarginPrompt(W, prompt, first["concurrency"]) in prompts_to_margin(read_raw(run))
    summary = summarize(run)
    (entry,) = [e for e in summary.exactness.arms["ngram_k4"].prompts if e.status != "identical"]
    assert (entry.prompt_id, entry.position, entry.status, entry.margin) == (prompt, 3, "unknown", None)
    # the noise floor: the baseline's second start-up against its first (the fixture's: identical)
    floor = summary.exactness.noise_floor
    assert floor is not None and floor.reference == f"baseline{FIRST_START_UP}"
    assert floor.identical_pct == 100.0 and floor.compared == 32
    # margins.jsonl: the baseline's answer with its logprobs; a confident choice at position 3
    confident = [[(t, -0.01), (t + 1, -4.0)] for t in tokens]
    margins = RunDir(run).margins("baseline")
    append_jsonl(margins, {**first, "token_ids": tokens, "top_logprobs": confident, "repeat": 0})
    assert raw_damage(RunDir(run)) == []  # its lines summed as they were written
    assert read_raw(run).arms["baseline"].margins[0].prompt_id == prompt
    assert MarginPrompt(W, prompt, first["concurrency"]) not in prompts_to_margin(read_raw(run))
    summary = summarize(run)
    (entry,) = [e for e in summary.exactness.arms["ngram_k4"].prompts if e.status != "identical"]
    assert (entry.status, entry.margin) == ("diverged", pytest.approx(3.99))
    table = exactness_table(summary)
    assert table is not None
    shown = table.title + "".join(str(cell) for row in table.rows for cell in row)
    assert "baseline (its later start-ups)" in shown and "2nd pass" not in shown


def test_a_stored_run_with_its_full_pass_reads_as_before(tmp_path: Path) -> None:
    """noise_floor.jsonl present: the second pass against the first, its label and the table's."""
    summary = summarize(_copy(tmp_path, full_pass=True))
    floor = summary.exactness.noise_floor
    assert floor is not None and floor.reference == "baseline (first pass)" and floor.compared == 32
    table = exactness_table(summary)
    assert table is not None and "the 2nd pass's too" in table.title


def test_the_plan_says_which_pass_and_counts_it(tmp_path: Path) -> None:
    data = yaml.safe_load(E2E.read_text().replace("../../workloads/", f"{ROOT}/workloads/"))
    (tmp_path / "one.yaml").write_text(yaml.safe_dump(data))
    data["load"]["server_starts"] = 2
    (tmp_path / "two.yaml").write_text(yaml.safe_dump(data))
    one, two = load_regime(tmp_path / "one.yaml"), load_regime(tmp_path / "two.yaml")
    assert not margins_only(one) and margins_only(two)
    said_one, said_two = night_plan(one).text(), night_plan(two).text()
    assert "the baseline's reference pass (greedy exactness: its windows again, with logprobs)" in said_one
    assert "one round: no later start-up of the baseline gives the noise floor or the margins" in said_one
    assert "margins" not in said_one.replace("the margins)", "")
    assert "the baseline's reference pass" not in said_two
    assert (
        "margins (greedy exactness): logprobs only for the prompts an arm diverged on, on the baseline's "
        "later start-ups; its own start-ups are the noise floor: not counted"
    ) in " ".join(said_two.split())


# the stand-in engine's runs: what was sent, and one prompt of ngram_k4's made to diverge
def _sending(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, list[str], bool]]:
    """Every batch the runner sends as (label, prompt ids, logprobs asked); ngram_k4's measured
    answers to the workload's first prompt get another token at position 2."""
    sent: list[tuple[str, list[str], bool]] = []
    window = Sender.window

    def counted(self, server, workload, prompts, level, label, on_done, *args, **kwargs):  # noqa: ANN001
        sent.append((label, [p.prompt_id for p in prompts], bool(kwargs.get("logprobs"))))
        first = workload.prompts[0].prompt_id
        measured = "ngram_k4" in str(server.log_path) and not label.startswith("warm-up")

        def done(record: RequestRecord) -> None:
            if measured and record.prompt_id == first and len(record.token_ids) > 2:
                record.token_ids = [*record.token_ids[:2], 999, *record.token_ids[3:]]
            on_done(record)

        return window(self, server, workload, prompts, level, label, done, *args, **kwargs)

    monkeypatch.setattr(Sender, "window", counted)
    return sent


def _rounds(starts: int):
    def edit(data: dict) -> None:
        data["load"]["server_starts"] = starts

    return edit


def test_two_rounds_send_only_the_diverged_prompt_with_logprobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent = _sending(monkeypatch)
    run, summary, printed, _, _ = stand_in_run(tmp_path, monkeypatch, edit=_rounds(2))
    assert [a.status for a in summary.arms] == ["ok", "ok"], printed
    assert not any(label.startswith("reference pass") for label, _, _ in sent), sent
    asked = [(label, ids, logprobs) for label, ids, logprobs in sent if label.startswith("margins")]
    workload = read_jsonl(run.samples("baseline"))[0]["workload"]
    first = sorted({r["prompt_id"] for r in read_jsonl(run.samples("baseline"))})
    (label, ids, logprobs), *more = asked
    assert more == [] and logprobs and len(ids) == 1 and ids[0] in first, sent
    assert label == f"margins (logprobs, 1 diverged): {workload} @ concurrency 2"
    assert not run.noise_floor("baseline").exists()
    (record,) = [RequestRecord.from_json(r) for r in read_jsonl(run.margins("baseline"))]
    assert record.prompt_id == ids[0] and record.ok
    assert len(record.top_logprobs) == len(record.token_ids) > 2
    # the derive: the noise floor from the baseline's two start-ups; ngram's divergence at position 2
    # classified by the stand-in's margin (top-1 -0.1, top-2 -0.2: 0.1 nats, under bfloat16's 0.5)
    section = summary.exactness
    assert section.noise_floor is not None and section.noise_floor.reference == f"baseline{FIRST_START_UP}"
    assert section.noise_floor.identical_pct == 100.0
    diverged = [e for e in section.arms["ngram_k4"].prompts if e.status != "identical"]
    assert {(e.prompt_id, e.position, e.status) for e in diverged} == {(ids[0], 2, "near_tie")}
    assert all(e.margin == pytest.approx(0.1) for e in diverged)
    assert "margins (greedy exactness): logprobs only for the prompts an arm diverged on" in " ".join(
        printed.split()
    )


def test_one_round_keeps_the_full_reference_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sent = _sending(monkeypatch)
    run, summary, printed, _, _ = stand_in_run(tmp_path, monkeypatch, edit=_rounds(1))
    assert [a.status for a in summary.arms] == ["ok", "ok"], printed
    reference = [(ids, logprobs) for label, ids, logprobs in sent if label.startswith("reference pass")]
    assert len(reference) == 1 and reference[0][1] and len(reference[0][0]) == 2  # every prompt
    assert not any(label.startswith("margins") for label, _, _ in sent)
    assert not run.margins("baseline").exists() and len(read_jsonl(run.noise_floor("baseline"))) == 2
    floor = summary.exactness.noise_floor
    assert floor is not None and floor.reference == "baseline (first pass)"
    (entry,) = [e for e in summary.exactness.arms["ngram_k4"].prompts if e.status != "identical"]
    assert (entry.position, entry.status) == (2, "near_tie")


def test_a_conversations_turn_is_margined_through_its_conversation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A diverged first turn of a two-turn conversation: the margins pass sends that conversation
    alone, its first turn and then its second (carrying this server's own answer)."""
    sent = _sending(monkeypatch)

    def edit(data: dict) -> None:
        data["load"]["server_starts"] = 2
        data["workloads"] = [str(ROOT / "workloads" / "chat_mtbench_turns.yaml")]

    run, summary, printed, _, _ = stand_in_run(tmp_path, monkeypatch, edit=edit)
    assert [a.status for a in summary.arms] == ["ok", "ok"], printed
    asked = [(label, ids) for label, ids, logprobs in sent if label.startswith("margins") and logprobs]
    assert [label for label, _ in asked] == [
        "margins (logprobs, 1 diverged): chat_mtbench_turns.turn1 @ concurrency 2",
        "margins (logprobs, 1 diverged): chat_mtbench_turns.turn2 @ concurrency 2",
    ]
    (first,), (second,) = (ids for _, ids in asked)
    assert second.startswith(f"{first}~t2-")
    records = [RequestRecord.from_json(r) for r in read_jsonl(run.margins("baseline"))]
    assert [(r.workload, r.prompt_id) for r in records] == [
        ("chat_mtbench_turns.turn1", first),
        ("chat_mtbench_turns.turn2", second),
    ]
    diverged = [e for e in summary.exactness.arms["ngram_k4"].prompts if e.status != "identical"]
    assert {(e.workload, e.prompt_id, e.status) for e in diverged} == {
        ("chat_mtbench_turns.turn1", first, "near_tie")
    }
