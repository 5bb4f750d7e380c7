"""The `bench` command at its edge: messages and exit codes, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *args], capture_output=True, text=True, cwd=ROOT
    )


def test_validate_prints_each_arms_launch_command() -> None:
    out = bench("validate", "regimes/h200_tp8.yaml")
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("-m vllm.entrypoints.openai.api_server") == 5
    assert "--tensor-parallel-size 8" in out.stdout
    assert '"method": "dflash"' in out.stdout and "--port PORT" in out.stdout


def test_bad_regime_exits_2_with_location(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        (ROOT / "regimes" / "cpu_smoke.yaml").read_text().replace("temperature: 0", "temprature: 0")
    )
    out = bench("validate", str(bad))
    assert out.returncode == 2
    assert "Traceback" not in out.stdout + out.stderr
    assert "bad.yaml:" in out.stdout and "sampling.temprature: unknown key" in out.stdout
    assert "did you mean 'temperature'" in out.stdout


def test_error_with_brackets_is_printed_verbatim(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        (ROOT / "regimes" / "cpu_smoke.yaml")
        .read_text()
        .replace("num_speculative_tokens: 4", "num_speculative_tokens: -1")
    )
    out = bench("validate", str(bad))
    assert (
        out.returncode == 2
        and "arms[1].num_speculative_tokens: Input should be greater than 0 (got -1)" in out.stdout
    )


def test_show_on_a_non_run_dir(tmp_path: Path) -> None:
    out = bench("show", str(tmp_path))
    assert out.returncode == 2 and "not a run directory" in out.stdout


def test_show_golden_run() -> None:
    out = bench("show", "tests/fixtures/run_v1")
    assert out.returncode == 0 and "ngram K=4" in out.stdout and "speedup" in out.stdout


def test_help_lists_commands() -> None:
    out = bench("--help")
    assert out.returncode == 0 and all(cmd in out.stdout for cmd in ("run", "validate", "show"))


def test_report_writes_one_file(tmp_path: Path) -> None:
    out = bench("report", "tests/fixtures/run_v1", "-o", str(tmp_path / "r.html"))
    assert out.returncode == 0 and (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]  # written atomically, no temp file left


def test_report_of_a_non_run_dir(tmp_path: Path) -> None:
    out = bench("report", str(tmp_path))
    assert out.returncode == 2 and "not a run directory" in out.stdout
