"""The chaos suite (issue 64): ``bench run``, its own address space limited to 1 GiB, against
stand-in engines that misbehave (tests/chaos_bench.py): one floods tokens without end, one sends an
event that never ends, one answers errors full of control characters. Each of those arms fails with
its own clear error, the others are measured, nothing is a traceback, and no control character
reaches the terminal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from tests.test_run_plan import stand_in_regime

ROOT = Path(__file__).resolve().parent.parent
GIB = 2**30


def _regime(tmp_path: Path) -> Path:
    data = stand_in_regime(tmp_path)
    data["load"]["num_prompts"] = 6
    ngram = next(arm for arm in data["arms"] if arm["name"] == "ngram_k4")
    data["arms"] += [
        {**ngram, "name": name, "num_speculative_tokens": k}
        for name, k in (("ngram_flood", 3), ("ngram_endless", 2), ("ngram_control", 5))
    ]
    path = tmp_path / "chaos.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_bench_run_in_1_gib_against_misbehaving_engines(tmp_path: Path) -> None:
    results = tmp_path / "results"
    bench = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "tests" / "chaos_bench.py"),
            str(GIB),
            str(_regime(tmp_path)),
            str(results),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "200"},
    )
    output = bench.stdout.read().decode(errors="replace")
    _, status, usage = os.wait4(bench.pid, 0)
    bench.returncode = os.waitstatus_to_exitcode(status)
    assert "Traceback" not in output and "MemoryError" not in output, output[-3000:]
    assert bench.returncode == 3, output[-3000:]  # EXIT_ENGINE: arms failed, the run finished
    # ru_maxrss (KiB): the bench process and the stand-ins it waited for; the limit made a flood a
    # MemoryError before (3.76 GB in 8 s)
    assert usage.ru_maxrss * 1024 < GIB, usage.ru_maxrss
    (run,) = results.glob("*/*")  # results/<regime>/<run id>
    status = {arm.name: json.loads((arm / "status.json").read_text()) for arm in (run / "arms").iterdir()}
    assert status["baseline"]["status"] == status["ngram_k4"]["status"] == "ok", status
    errors = {
        name: status[name].get("error", "") for name in ("ngram_flood", "ngram_endless", "ngram_control")
    }
    assert all(status[name]["status"] == "failed" for name in errors), status
    assert "tokens streamed for max_tokens" in errors["ngram_flood"], errors
    assert "MiB with no end" in errors["ngram_endless"], errors
    assert "HTTP 500: bad\\x00thing \\x01 \\x1b[31mred" in errors["ngram_control"], errors
    assert not any(ch in output for ch in ("\x00", "\x01", "\x1b[31m")), (
        "a control character reached the terminal"
    )
    baseline = [
        json.loads(line) for line in (run / "arms" / "baseline" / "samples.jsonl").read_text().splitlines()
    ]
    assert baseline and all(row["error"] is None for row in baseline)
