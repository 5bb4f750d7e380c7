"""A run knows its machine's pace: its baseline against the regime's reference run (``reference:``,
``harness.derive.pace``), said in the plan line, the verdict's caveats and the report."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from harness.config.reference import PaceReference
from harness.config.regime import load_regime
from harness.derive.analysis import load_analysis
from harness.derive.verdict import pace_caveats
from harness.present.verdict_text import caveat_text
from harness.run.pace_reference import earlier_reference, pace_line, reference_for

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
README_RUN = FIXTURES / "run_v14_default"  # the README's run: the default regime's reference
DEFAULT = ROOT / "regimes" / "cpu_default.yaml"
WITHOUT_VNNI = ["avx2", "avx512f", "avx512_bf16", "avx512_vnni"]


def _with_reference(run: Path, reference: dict[str, Any] | None) -> None:
    """The run as a run of today's harness records it: the regime's reference: in regime.json."""
    path = run / "regime.json"
    record = json.loads(path.read_text())
    record["regime"]["reference"] = reference
    path.write_text(json.dumps(record))
    (run / "analysis.json").unlink(missing_ok=True)


def _machine(run: Path, flags: list[str]) -> None:
    path = run / "environment.json"
    environment = json.loads(path.read_text())
    environment["cpu_flags"] = flags
    path.write_text(json.dumps(environment))


def _reference(**changes: Any) -> dict[str, Any]:
    reference = load_regime(DEFAULT).reference
    assert reference is not None, "the default regime names the README's run as its reference"
    return reference.model_copy(update=changes).model_dump(mode="json")


def test_the_default_regimes_reference_is_the_readmes_run() -> None:
    reference = load_regime(DEFAULT).reference
    summary = json.loads((README_RUN / "summary.json").read_text())
    environment = json.loads((README_RUN / "environment.json").read_text())
    assert reference is not None and reference.run == summary["run_id"]
    cell = next(c for c in summary["cells"] if c["arm"] == "baseline")
    assert (cell["workload"], cell["concurrency"]) == (reference.workload, reference.concurrency)
    assert reference.baseline_tok_s == pytest.approx(cell["output_tok_s"], abs=0.05)
    assert set(reference.cpu_flags) <= set(environment["cpu_flags"])
    assert "avx_vnni" in reference.cpu_flags


def test_the_reference_run_itself_is_at_its_own_pace(tmp_path: Path) -> None:
    run = tmp_path / README_RUN.name
    shutil.copytree(README_RUN, run)
    _with_reference(run, _reference())
    summary = load_analysis(run).analysis.summary
    assert summary.pace is not None and summary.pace.slower == pytest.approx(1.0, abs=0.01)
    assert summary.pace.missing_features == []
    assert pace_caveats(summary) == []


def test_a_machine_twice_as_slow_says_so_and_names_the_missing_feature(tmp_path: Path) -> None:
    run = tmp_path / README_RUN.name
    shutil.copytree(README_RUN, run)
    # the README's run read against a reference twice its pace, on a CPU with avx_vnni it lacks
    _with_reference(run, _reference(baseline_tok_s=79.4, cpu_flags=[*WITHOUT_VNNI, "avx_vnni"]))
    _machine(run, WITHOUT_VNNI)
    summary = load_analysis(run).analysis.summary
    [found] = pace_caveats(summary)
    text = caveat_text(found)
    assert text.startswith("this machine ran 2.0x slower than the reference (avx_vnni absent here)")
    assert "39.7 tok/s on code_humaneval @1 against 79.4 in run 20261207-070931-9274be" in text


def test_a_faster_machine_says_so_too(tmp_path: Path) -> None:
    run = tmp_path / README_RUN.name
    shutil.copytree(README_RUN, run)
    _with_reference(run, _reference(baseline_tok_s=19.4, cpu_flags=WITHOUT_VNNI))
    [found] = pace_caveats(load_analysis(run).analysis.summary)
    assert caveat_text(found).startswith(
        "this machine ran 2.0x faster than the reference (avx_vnni present here)"
    )


def test_a_run_without_the_references_window_compares_nothing(tmp_path: Path) -> None:
    run = tmp_path / README_RUN.name
    shutil.copytree(README_RUN, run)
    _with_reference(run, _reference(workload="chat_mtbench"))
    assert load_analysis(run).analysis.summary.pace is None


def test_the_plan_line_names_the_reference_and_the_missing_feature() -> None:
    regime = load_regime(DEFAULT)
    line = pace_line(regime, {"cpu_flags": WITHOUT_VNNI})
    assert line.startswith("Pace: read against run 20261207-070931-9274be (the README's")
    assert (
        "39.7 tok/s on code_humaneval @1 on AMD EPYC (avx2, avx512f, avx512_bf16, avx512_vnni, avx_vnni)"
        in line
    )
    assert line.endswith(
        "this CPU lacks avx_vnni: expect it slower (the verdict says so beyond 1.2x of its pace)"
    )
    assert pace_line(regime, {"cpu_flags": [*WITHOUT_VNNI, "avx_vnni"]}).endswith("the same features")
    unset = regime.model_copy(update={"reference": None})
    assert "no reference run" in pace_line(unset, {"cpu_flags": WITHOUT_VNNI})


def test_without_a_reference_the_newest_run_on_another_machine_is_taken(tmp_path: Path) -> None:
    regime = load_regime(DEFAULT).model_copy(update={"reference": None, "name": "cpu_default"})
    results = tmp_path / "results"
    shutil.copytree(README_RUN, results / "cpu_default" / "20261207-070931-9274be")
    here = json.loads((README_RUN / "environment.json").read_text())
    fingerprint = regime.fingerprint()
    assert earlier_reference(results, regime, fingerprint, here) is None  # the same machine: no reference
    elsewhere = {**here, "cpu_flags": WITHOUT_VNNI}
    assert earlier_reference(results, regime, "0123456789abcdef", elsewhere) is None  # other settings
    found = earlier_reference(results, regime, fingerprint, elsewhere)
    assert isinstance(found, PaceReference)
    assert (found.run, found.workload, found.concurrency) == ("20261207-070931-9274be", "code_humaneval", 1)
    assert found.baseline_tok_s == pytest.approx(39.7, abs=0.05) and "avx_vnni" in found.cpu_flags


def test_the_reference_is_not_a_condition() -> None:
    regime = load_regime(DEFAULT)
    assert regime.fingerprint() == regime.model_copy(update={"reference": None}).fingerprint()


SLOWER = FIXTURES / "run_v15_slower_machine"  # a real default run on a 2-core AMD EPYC without avx_vnni


def test_a_recorded_run_on_a_slower_machine_says_so_in_the_verdict_show_and_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from harness.cli import main

    run = tmp_path / SLOWER.name
    shutil.copytree(SLOWER, run)
    summary = load_analysis(run).analysis.summary
    environment = json.loads((run / "environment.json").read_text())
    assert "avx_vnni" not in environment["cpu_flags"] and "avx512_bf16" in environment["cpu_flags"]
    assert summary.pace is not None and summary.pace.missing_features == ["avx_vnni"]
    assert 1.8 <= summary.pace.slower <= 2.2  # 20.2 tok/s against the README's 39.7
    said = "this machine ran 2.0x slower than the reference (avx_vnni absent here)"
    assert caveat_text(pace_caveats(summary)[0]).startswith(said)
    monkeypatch.setenv("COLUMNS", "250")
    assert main(["show", str(run)]) == 0
    assert said in capsys.readouterr().out
    assert main(["report", str(run), "-o", str(tmp_path / "report.html")]) == 0
    assert said in (tmp_path / "report.html").read_text()


def test_a_run_under_other_settings_is_not_read_against_the_reference(tmp_path: Path) -> None:
    """bench run regimes/cpu_default.yaml --set target.dtype=bfloat16 on the README's machine is not
    "a faster machine": its conditions are not the reference's (the regime fingerprint)."""
    from harness.core.overrides import parse_set

    regime = load_regime(DEFAULT)
    here = {"cpu_flags": WITHOUT_VNNI}
    assert reference_for(regime, regime.fingerprint(), tmp_path, here) == (regime.reference, None)
    other = load_regime(DEFAULT, [parse_set("target.dtype=bfloat16")])
    found, why = reference_for(other, other.fingerprint(), tmp_path, here)
    assert found is None and why is not None and "(other settings)" in why
    assert (
        pace_line(other.model_copy(update={"reference": None}), here, why)
        == f"Pace: compared with none: {why}"
    )
