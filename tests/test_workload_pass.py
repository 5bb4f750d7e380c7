"""The baseline's workload pass (issue 81, ``verdict.covariate``): every prompt of each workload's pool
once on the baseline's first start-up, kept under the cache for later runs
(``harness.run.workload_pass``, ``harness.run.passes.workload_pass``). Where it applies and why not;
the cache key's inputs; whole runs through the runner with the stand-in engine
(benchmarks/stream_server.py: tests/test_run_plan.py's) that measure it, copy it from the cache, refuse
a damaged one, keep it on a resume; its raw lines checked like the others; and one run on the REAL
CPU engine, on a pool of 10 prompts (tests/regimes/pass_pool.jsonl)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from rich.console import Console

from harness.config.regime import Regime
from harness.core.cache import cache_root
from harness.results import RequestRecord, RunDir, read_jsonl
from harness.results.raw import raw_damage, read_raw
from harness.results.workload_pass import WORKLOAD_PASS_FILE, WorkloadPassRecord
from harness.run.passes import workload_pass
from harness.run.plan import plan_regime
from harness.run.runner import resume_run
from harness.run.sending import Sender
from harness.run.workload_pass import (
    keep_pass,
    kept_pass,
    load_pools,
    pass_key,
    pass_key_fields,
    workload_pass_plan,
    workload_pass_reason,
)
from tests.test_raw_accounting import _drop_line
from tests.test_run_plan import stand_in_run

ROOT = Path(__file__).resolve().parent.parent
E2E = ROOT / "tests" / "regimes" / "cpu_e2e.yaml"
POOL = ROOT / "tests" / "regimes" / "pass_pool.jsonl"  # 10 prompts, one workload: pass_pool
MACHINE = {"cpu_model": "AMD EPYC 7B13", "cpu_flags": ["avx2"], "engine_version": "0.32.0"}


def _data(**load: object) -> dict:
    data = yaml.safe_load(E2E.read_text())
    data["workloads"] = [str(POOL)]
    data["verdict"] = {"covariate": "copy_share"}
    data["load"] |= {"concurrency": [2, 4], **load}
    data["load"].pop("ramp", None)
    return data


def _regime(tmp_path: Path, data: dict, name: str = "r.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def test_where_the_pass_applies_and_why_not(tmp_path: Path) -> None:
    def reason(**changes: object) -> str | None:
        data = _data()
        for key, value in changes.items():
            if key == "load":
                data["load"] |= value
            else:
                data[key] = value
        plan = plan_regime(_regime(tmp_path, data))
        return workload_pass_reason(plan.regime, plan.workloads)

    assert reason() is None
    assert reason(verdict={"covariate": "none"}) == "verdict.covariate: none"
    assert reason(sampling={"temperature": 0.7, "seed": 0}) == "sampling is not greedy (temperature 0.7)"
    assert (
        reason(load={"context_tokens": 200}) == "load.context_tokens pads each prompt (to about 200 tokens)"
    )
    turns = reason(workloads=[str(ROOT / "workloads" / "chat_mtbench_turns.yaml")], load={"repeats": 1})
    assert turns == "workload chat_mtbench_turns is a conversation (2 turns)"
    data = _data()
    data["workloads"] = [{"dataset": "random", "input_len": 16}]  # no pool: drawn from the tokenizer
    regime = Regime.model_validate(data)
    said = workload_pass_reason(regime, [])
    assert said == "workload random-in16 is random prompts: no pool beyond the ones a run draws"
    data = _data()
    data["arms"] = [{**arm, "endpoint": "http://127.0.0.1:9"} for arm in data["arms"]]
    data["allow_shared_endpoints"] = True
    said = workload_pass_reason(Regime.model_validate(data), [])
    assert said == "the baseline is an existing server (endpoint): its machine is not this one"
    # the plan says it, and says the concurrency: the lowest level
    plan = plan_regime(_regime(tmp_path, _data()))
    planned = workload_pass_plan(plan.regime, plan.regime_path, plan.workloads, "0.32.0", MACHINE)
    assert planned.applies and planned.concurrency == 2 and planned.requests == 10
    assert planned.line().startswith(
        "Workload pass: every one of pass_pool's 10 prompts once on the baseline's first start-up (up to "
        "160 tokens at concurrency 2), for the covariate's workload mean; kept at "
    )
    skipped = workload_pass_plan(
        plan.regime.model_copy(
            update={"verdict": Regime.model_validate({**_data(), "verdict": {"covariate": "none"}}).verdict}
        ),
        plan.regime_path,
        plan.workloads,
        "",
        {},
    )
    assert skipped.line() == "Workload pass: none (verdict.covariate: none): the prompts' jackknife alone"


def test_the_pool_is_every_prompt_as_the_windows_send_them(tmp_path: Path) -> None:
    """The pool's prompts are the sampled ones' records: the same ids, texts and chat settings."""
    data = _data()
    data["workloads"] = [str(ROOT / "workloads" / "chat_mtbench.yaml")]
    data["chat"] = {"system_prompt": "Be brief."}
    plan = plan_regime(_regime(tmp_path, data))
    (pool,) = load_pools(plan.regime, plan.regime_path)
    (sampled,) = plan.workloads
    assert len(pool.prompts) == 80 and pool.chat == sampled.chat and pool.name == sampled.name
    by_id = {p.prompt_id: p for p in pool.prompts}
    assert all(by_id[p.prompt_id] == p for p in sampled.prompts)


def test_the_cache_key_moves_with_each_input_and_not_with_the_arms(tmp_path: Path) -> None:
    def key(data: dict, environment: dict = MACHINE, version: str = "0.32.0", concurrency: int = 2) -> str:
        plan = plan_regime(_regime(tmp_path, data, f"k{len(list(tmp_path.iterdir()))}.yaml"))
        (pool,) = load_pools(plan.regime, plan.regime_path)
        return pass_key(
            pass_key_fields(plan.regime, plan.regime_path, pool, version, environment, concurrency)
        )

    base = key(_data())
    assert len(base) == 24 and base == key(_data())
    one_arm = _data()
    one_arm["arms"] = one_arm["arms"][:1]
    more = _data()
    more["arms"].append({"name": "ngram_k2", "method": "ngram", "num_speculative_tokens": 2})
    assert key(one_arm) == key(more) == base  # the arms' servers are not the baseline's outputs
    assert key(_data(num_prompts=3)) == base  # the windows' sample is not the pool
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    other_model = _data()
    other_model["target"] = {"path": str(model), "dtype": "float32", "max_model_len": 1024}
    dtype = _data()
    dtype["target"]["dtype"] = "bfloat16"
    pool = tmp_path / "pass_pool.jsonl"  # the same file name (workload), one prompt's text changed
    pool.write_text(POOL.read_text().replace("the sum of a and b", "a plus b"))
    content = _data()
    content["workloads"] = [str(pool)]
    engine = _data()
    engine["engine"]["extra_args"] = [*engine["engine"]["extra_args"], "--max-num-seqs", "4"]
    changed = {
        "model": key(other_model),
        "dtype": key(dtype),
        "max_output_tokens": key(_data(max_output_tokens=17)),
        "ignore_eos": key(_data(ignore_eos=True)),
        "pool content": key(content),
        "engine args": key(engine),
        "engine version": key(_data(), version="0.33.0"),
        "concurrency": key(_data(), concurrency=1),
        "cpu model": key(_data(), {**MACHINE, "cpu_model": "Intel Xeon Platinum 8488C"}),
        "cpu flags": key(_data(), {**MACHINE, "cpu_flags": ["avx2", "avx512f"]}),
    }
    assert base not in changed.values() and len(set(changed.values())) == len(changed), changed


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The labels of every batch of requests the runner sends."""
    sent: list[str] = []
    window = Sender.window

    def counted(self, server, workload, prompts, level, label, *args, **kwargs):  # noqa: ANN001
        sent.append(label)
        return window(self, server, workload, prompts, level, label, *args, **kwargs)

    monkeypatch.setattr(Sender, "window", counted)
    return sent


def _with_pass(data: dict) -> None:
    """The stand-in regime on the pool, with the covariate: the baseline alone (its start-ups are the
    pass's; an arm's would only cost time)."""
    data["workloads"] = [str(POOL)]
    data["verdict"] = {"covariate": "copy_share"}
    data["arms"] = data["arms"][:1]


def _later_run(tmp_path: Path, folder: str, monkeypatch: pytest.MonkeyPatch):
    """Another run of the regime, from a folder of its own, on the first run's model folder (the
    target's path is in the key)."""
    (tmp_path / folder).mkdir()

    def edit(data: dict) -> None:
        _with_pass(data)
        data["target"]["path"] = str(tmp_path / "model")

    return stand_in_run(tmp_path / folder, monkeypatch, edit=edit)


def _passes(sent: list[str]) -> list[str]:
    return [label for label in sent if label.startswith("workload pass")]


def test_measured_then_copied_from_the_cache_then_a_damaged_cache_measured_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BENCH_CACHE_DIR", str(tmp_path / "cache"))
    sent = _counting(monkeypatch)
    run, summary, printed, _, _ = stand_in_run(tmp_path, monkeypatch, edit=_with_pass)
    assert [a.status for a in summary.arms] == ["ok"], printed
    assert _passes(sent) == [
        "workload pass (every prompt once, the covariate's mean): pass_pool @ concurrency 2"
    ]
    assert (
        "Workload pass: every one of pass_pool's 10 prompts once on the baseline's first start-up" in printed
    )
    records = [RequestRecord.from_json(r) for r in read_jsonl(run.workload_pass("baseline"))]
    assert sorted(r.prompt_id for r in records) == [f"pool-{n:02}" for n in range(1, 11)]
    assert all(r.ok and r.token_ids and r.prompt_token_ids and r.concurrency == 2 for r in records)
    record = WorkloadPassRecord.model_validate_json((run.root / WORKLOAD_PASS_FILE).read_text())
    (part,) = record.workloads
    assert (record.status, record.concurrency, record.prompts) == ("measured", 2, 10)
    assert (part.workload, part.status, part.finished, part.origin_run) == ("pass_pool", "measured", 10, None)
    assert part.seconds is not None and part.seconds > 0
    kept = Path(part.cache_path)
    assert kept == cache_root() / "workload-pass" / f"{part.key}.jsonl" and kept.is_file()
    meta = json.loads(kept.read_text().splitlines()[0])
    assert (meta["key"], meta["run_id"], meta["prompts"]) == (part.key, run.root.name, 10)
    assert read_raw(run.root).workload_pass_record == record
    assert len(read_raw(run.root).arms["baseline"].workload_pass) == 10

    # a later run of the same regime on this machine: copied, no request
    sent.clear()
    again, summary, printed, _, _ = _later_run(tmp_path, "again", monkeypatch)
    assert [a.status for a in summary.arms] == ["ok"] and _passes(sent) == [], printed
    assert f"Workload pass: kept from an earlier run ({kept}): no requests" in printed
    assert read_jsonl(again.workload_pass("baseline")) == [
        json.loads(line) for line in kept.read_text().splitlines()[1:]
    ]
    copied = WorkloadPassRecord.model_validate_json((again.root / WORKLOAD_PASS_FILE).read_text())
    assert copied.status == "cached" and copied.workloads[0].origin_run == run.root.name
    assert copied.workloads[0].key == part.key and copied.seconds is None
    assert raw_damage(again) == []

    # damaged: a record gone: refused (said once, with the path and why), measured again, kept anew
    lines = kept.read_text().splitlines(keepends=True)
    kept.write_text("".join(lines[:-1]))
    sent.clear()
    third, summary, printed, _, _ = _later_run(tmp_path, "third", monkeypatch)
    flat = " ".join(printed.split())
    assert flat.count(f"the kept pass {kept} is not used (it answers 9 of the pool's 10 prompts)") == 1, (
        printed
    )
    assert len(_passes(sent)) == 1 and len(read_jsonl(third.workload_pass("baseline"))) == 10
    assert len(kept.read_text().splitlines()) == 11
    assert json.loads((third.root / WORKLOAD_PASS_FILE).read_text())["status"] == "measured"


def test_a_kept_pass_is_used_only_whole(tmp_path: Path) -> None:
    plan = plan_regime(_regime(tmp_path, _data()))
    (pool,) = load_pools(plan.regime, plan.regime_path)
    path = tmp_path / "kept.jsonl"
    records = [
        RequestRecord("pass_pool", p.prompt_id, 2, "raw", token_ids=[1, 2], finish_reason="length")
        for p in pool.prompts
    ]
    assert keep_pass(path, "k" * 24, records, "run-1") is None
    rows, meta, problem = kept_pass(path, "k" * 24, pool)
    assert rows is not None and len(rows) == 10 and meta["run_id"] == "run-1" and problem is None
    assert kept_pass(tmp_path / "none.jsonl", "k" * 24, pool) == (None, {}, None)  # nothing to say
    text = path.read_text()
    lines = text.splitlines(keepends=True)
    damaged = {
        "another key": (text, "j" * 24),
        "its last line is cut short": (text[:-5], "k" * 24),
        "a line is not JSON": (text.replace('{"chunks"', "{chunks", 1), "k" * 24),
        "a line is not a valid request record": (text.replace('"repeat": 0', '"repeat": "x"', 1), "k" * 24),
        "it answers 10 of the pool's 10 prompts": ("".join([*lines, lines[-1]]), "k" * 24),  # one twice
        "a request in it did not finish": (text.replace('"error": null', '"error": "timeout"', 1), "k" * 24),
    }
    for what, (content, key) in damaged.items():
        path.write_text(content)
        found = kept_pass(path, key, pool)
        assert found[0] is None and found[2] is not None, what
        assert what in found[2], found[2]
    path.write_bytes(b"\xff\xfe")
    assert kept_pass(path, "k" * 24, pool)[2].startswith("unreadable")


def test_no_pass_where_it_does_not_apply_and_the_run_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BENCH_CACHE_DIR", str(tmp_path / "cache"))
    sent = _counting(monkeypatch)

    def greedy_none(data: dict) -> None:
        _with_pass(data)
        data["verdict"] = {"covariate": "none"}

    run, _, printed, _, _ = stand_in_run(tmp_path, monkeypatch, edit=greedy_none)
    assert _passes(sent) == [] and not run.workload_pass("baseline").exists()
    assert "Workload pass: none (verdict.covariate: none): the prompts' jackknife alone" in printed
    record = read_raw(run.root).workload_pass_record
    assert record == WorkloadPassRecord(status="skipped", reason="verdict.covariate: none")
    assert not (tmp_path / "cache" / "workload-pass").exists()


def test_a_resume_keeps_a_complete_pass_and_sends_none_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The baseline's second start-up cut short after its first wrote the pass: the resume copies the
    first start-up's pass back and sends none of it again (the cache is gone: it could not copy it)."""
    monkeypatch.setenv("BENCH_CACHE_DIR", str(tmp_path / "cache"))
    sent = _counting(monkeypatch)

    def two_rounds(data: dict) -> None:
        _with_pass(data)
        data["load"]["server_starts"] = 2
        data["exactness"] = {"enabled": False}

    run, _, printed, console, out = stand_in_run(tmp_path, monkeypatch, edit=two_rounds)
    before = read_jsonl(run.workload_pass("baseline"))
    record = (run.root / WORKLOAD_PASS_FILE).read_text()
    assert len(before) == 10 and len(_passes(sent)) == 1, printed
    for kept in (tmp_path / "cache" / "workload-pass").iterdir():
        kept.unlink()
    timing = json.loads((run.root / "timing.json").read_text())  # the last round: the baseline cut short
    timing["rounds"][-1]["done"] = [n for n in timing["rounds"][-1]["done"] if n != "baseline"]
    (run.root / "timing.json").write_text(json.dumps(timing))
    status = json.loads((run.arm_dir("baseline") / "status.json").read_text())
    (run.arm_dir("baseline") / "status.json").write_text(json.dumps({**status, "status": "interrupted"}))
    sent.clear()
    _, summary = resume_run(run.root, console, allow_mismatch=True)
    assert [a.status for a in summary.arms] == ["ok"]
    assert sent == ["pass_pool @ concurrency 2 (start-up 2/2)"]  # its window, and no pass
    said = "Workload pass: made on the baseline's first start-up of this run (measured): no requests"
    assert said in out.getvalue()
    assert read_jsonl(run.workload_pass("baseline")) == before
    assert (run.root / WORKLOAD_PASS_FILE).read_text() == record
    assert raw_damage(run) == []


def test_a_pass_this_run_holds_whole_is_not_sent_again(tmp_path: Path) -> None:
    """``passes.workload_pass`` on a start-up whose file answers every prompt already: nothing sent."""
    data = _data()
    plan = plan_regime(_regime(tmp_path, data))
    planned = workload_pass_plan(plan.regime, plan.regime_path, plan.workloads, "0.32.0", MACHINE)
    run = RunDir.create_at(tmp_path / "run")
    path = run.workload_pass("baseline")
    path.parent.mkdir(parents=True)
    from harness.results import append_jsonl

    for prompt in planned.pools[0].pool.prompts:
        record = RequestRecord("pass_pool", prompt.prompt_id, 2, "raw", token_ids=[1], finish_reason="length")
        append_jsonl(path, record.to_json())

    def send(*args: object, **kwargs: object) -> list[RequestRecord]:
        raise AssertionError("sent")

    stand_in = SimpleNamespace(workload_pass=planned)
    arm = plan.regime.baseline_arm
    workload_pass(stand_in, Console(quiet=True), run, arm, send)  # type: ignore[arg-type]
    record = WorkloadPassRecord.model_validate_json((run.root / WORKLOAD_PASS_FILE).read_text())
    assert record.status == "measured" and record.workloads[0].finished == 10
    assert len(read_jsonl(path)) == 10


def test_a_deleted_pass_line_is_named_like_any_raw_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BENCH_CACHE_DIR", str(tmp_path / "cache"))
    run, _, _, _, _ = stand_in_run(tmp_path, monkeypatch, edit=_with_pass)
    _drop_line(run.workload_pass("baseline"), 4)
    raw = read_raw(run.root)
    assert raw.arms["baseline"].workload_pass == []  # left out whole, as a damaged family is
    said = [n for n in raw.unread.notes if "workload_pass.jsonl" in n]
    assert len(said) == 1 and "line 4 of 10 written missing" in said[0], raw.unread.notes
    assert "workload pass (the covariate's workload mean) left out of every figure" in said[0]
    assert any("workload_pass.jsonl: line 4 of 10 written missing" in line for line in raw_damage(run))


@pytest.mark.engine
def test_the_real_engine_answers_every_prompt_of_the_pool(tmp_path: Path) -> None:
    """One run on the REAL CPU engine (the baseline alone, one start-up) makes the pass over
    tests/regimes/pass_pool.jsonl's 10 prompts: one finished record each, with the prompt's and the
    answer's token ids, kept in a cache of its own (its converted model linked from the suite's)."""
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "models").symlink_to(cache_root() / "models", target_is_directory=True)
    data = yaml.safe_load(E2E.read_text())
    data["workloads"] = [str(POOL)]
    data["verdict"] = {"covariate": "copy_share"}
    data["arms"] = data["arms"][:1]
    data["load"] |= {"concurrency": [1], "num_prompts": 2, "max_output_tokens": 8}
    data["load"].pop("ramp", None)
    data["exactness"] = {"enabled": False}
    regime = _regime(tmp_path, data, "cpu_e2e_pass.yaml")
    results = tmp_path / "results"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "run",
            str(regime),
            "--results-dir",
            str(results),
            "--allow-mismatch",
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
        env={**os.environ, "BENCH_CACHE_DIR": str(cache), "COLUMNS": "200"},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (run,) = (results / "cpu_e2e").iterdir()
    records = [
        RequestRecord.from_json(r) for r in read_jsonl(run / "arms" / "baseline" / "workload_pass.jsonl")
    ]
    assert sorted(r.prompt_id for r in records) == [f"pool-{n:02}" for n in range(1, 11)]
    for record in records:
        assert record.ok and 0 < len(record.token_ids) <= 8 and record.concurrency == 1
        assert len(record.prompt_token_ids) == record.prompt_token_count > 0
    # the sampled prompts' measured answers are the pass's own (greedy, the same server)
    answers = {r.prompt_id: r.token_ids for r in records}
    samples = read_jsonl(run / "arms" / "baseline" / "samples.jsonl")
    assert samples and all(s["token_ids"] == answers[s["prompt_id"]] for s in samples)
    record = WorkloadPassRecord.model_validate_json((run / WORKLOAD_PASS_FILE).read_text())
    assert record.status == "measured" and Path(record.workloads[0].cache_path).is_file()
    assert "Workload pass: every one of pass_pool's 10 prompts" in " ".join(proc.stdout.split())
