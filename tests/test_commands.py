"""The subcommand modules (harness/commands/) and what they share: every --help explains itself with
examples, one run-or-study dispatch, one idiom per concept, and an interrupt message per command."""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

from harness.cli import _parser, main, report_error
from harness.commands import validate
from harness.commands.common import kind_of, require_run
from harness.core.errors import UserError

ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / "tests" / "fixtures" / "run_v1"
OTHER_RUN = ROOT / "tests" / "fixtures" / "run_v3_smoke"
STUDY = ROOT / "tests" / "fixtures" / "study_v1"


def _subcommands(
    parser: argparse.ArgumentParser, prefix: str = ""
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every subcommand parser, nested ones (drafter build) included."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield f"{prefix}{name}", sub
                yield from _subcommands(sub, f"{prefix}{name} ")


SUBCOMMANDS = dict(_subcommands(_parser()))


@pytest.fixture(autouse=True)
def _signal_handlers() -> Iterator[None]:
    """main() installs its own SIGINT/SIGTERM/SIGHUP handlers; give pytest its own back."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def test_the_parser_has_every_command() -> None:
    assert set(SUBCOMMANDS) == {
        "run", "capacity", "calibrate", "validate", "show", "report", "gate", "export", "drafter",
        "drafter build", "study-point", "history", "history add", "history import", "history show",
        "history accept", "history changes", "history report",
    }  # fmt: skip


@pytest.mark.parametrize("name", sorted(SUBCOMMANDS))
def test_every_help_has_a_description_and_examples(name: str) -> None:
    parser = SUBCOMMANDS[name]
    assert parser.description and len(parser.description.split()) >= 8, name
    text = parser.format_help()
    examples = text[text.index("Examples:\n") :]
    assert f"bench {name} " in examples  # the examples are of this command
    assert parser.description.splitlines()[0] in text


def test_descriptions_wrap_and_examples_keep_their_lines() -> None:
    text = SUBCOMMANDS["run"].format_help()
    assert "\n  bench run --resume results/cpu_default/20261201-093000-a1b2c3  # continue" in text
    assert all(len(line) <= 100 for line in SUBCOMMANDS["run"].description.splitlines())


def test_gate_help_names_the_registrys_gated_metrics_and_the_page_that_defines_them() -> None:
    from harness.commands.common import METRICS_PAGE, metrics_page
    from harness.core.metrics import GATED, METRICS

    text = " ".join(SUBCOMMANDS["gate"].description.split())
    assert f"Metrics a gate may name: {', '.join(GATED)} " in text and METRICS_PAGE in text
    for name in GATED:  # defined there, the page being the registry's (tests/test_docs.py)
        assert f"| `{name}` | {METRICS[name].unit} | {METRICS[name].direction} | yes |" in metrics_page()


def test_kind_of_a_run_a_study_and_neither(tmp_path: Path) -> None:
    assert kind_of(RUN) == "run"
    assert kind_of(STUDY) == "study"
    with pytest.raises(UserError, match="not a run directory .* nor a study directory"):
        kind_of(tmp_path)
    with pytest.raises(UserError, match="not a run directory"):
        kind_of(tmp_path / "missing")
    assert require_run(RUN, "gate") == RUN
    with pytest.raises(UserError, match=r"is a study: gate one of its points \(e.g. .*points/p0\)"):
        require_run(STUDY, "gate")


def test_gate_refuses_a_study_through_the_one_dispatch(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gate", str(STUDY)]) == 2
    assert "is a study: gate one of its points" in capsys.readouterr().out


def test_validate_interrupted_says_so_and_nothing_about_servers(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(args: argparse.Namespace, console: Console) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(validate, "run", interrupted)
    assert main(["validate", "regimes/cpu_smoke.yaml"]) == 130
    out = capsys.readouterr().out
    assert "interrupted: nothing was started or written" in out and "servers" not in out


def test_the_interrupt_message_is_the_commands_own() -> None:
    from harness.commands import drafter, run, show

    messages = {}
    for command in (validate, run, show, drafter):
        console = Console(record=True, width=200)
        assert report_error(KeyboardInterrupt(), command, console) == 130
        messages[command.NAME] = console.export_text()
    assert "bench run --resume DIR" in messages["run"] and "servers stopped" in messages["run"]
    assert "resumes where it stopped" in messages["drafter"]
    assert "servers" not in messages["validate"] and "servers" not in messages["show"]


def test_validate_on_a_real_sigint() -> None:
    """The signal itself, in a `bench validate` whose check is slow: main's handler turns it into
    the validate message and exit 130."""
    script = (
        "import os, signal, sys, time\n"
        "import harness.commands.validate as v\n"
        "def slow(args, console):\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    time.sleep(30)\n"
        "v.run = slow\n"
        "from harness.cli import main\n"
        "sys.exit(main(['validate', 'regimes/cpu_smoke.yaml']))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 130, out.stdout + out.stderr
    assert "interrupted: nothing was started or written" in out.stdout and "Traceback" not in out.stderr


def test_show_dot_minilab_names_the_run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["show", str(RUN), "--minilab"]) == 0
    expected = capsys.readouterr().out
    monkeypatch.chdir(RUN)
    assert main(["show", ".", "--minilab"]) == 0
    out = capsys.readouterr().out
    assert "run run_v1," in out and out == expected


def test_report_with_baseline_equals_the_positional_form(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`report RUN --baseline BASE` reads as `gate RUN --baseline BASE`: the baseline is A (the
    denominator of every ratio), the run is B, the same page as `report BASE RUN`."""
    positional, flag = tmp_path / "positional.html", tmp_path / "flag.html"
    assert main(["report", str(RUN), str(OTHER_RUN), "--force", "-o", str(positional)]) == 0
    assert main(["report", str(OTHER_RUN), "--baseline", str(RUN), "--force", "-o", str(flag)]) == 0
    assert flag.read_text() == positional.read_text()
    assert "A = <code>run_v1</code>, B = <code>run_v3_smoke</code>" in flag.read_text()
    capsys.readouterr()
    assert main(["report", str(RUN), str(OTHER_RUN), "--baseline", str(OTHER_RUN)]) == 2
    assert "give the second run once" in capsys.readouterr().out


def test_report_of_dot_is_named_after_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "cpu_e2e" / "run_v1"
    shutil.copytree(RUN, run)
    monkeypatch.chdir(run)
    assert main(["report", "."]) == 0
    assert (run / "reports" / "cpu_e2e-run_v1.html").is_file()
    assert "Report: reports/cpu_e2e-run_v1.html" in capsys.readouterr().out


def test_old_spellings_still_parse() -> None:
    parser = _parser()
    point = ["study-point", "STUDY", "p0", "--run-dir", "points/p0"]
    assert parser.parse_args([*point, "--continue"]).resume is True  # what the executors' jobs say
    assert parser.parse_args([*point, "--resume"]).resume is True
    assert parser.parse_args(point).resume is False
    assert parser.parse_args(["export", "RUN", "--output-dir", "out"]).output == Path("out")
    assert parser.parse_args(["export", "RUN", "-o", "out"]).output == Path("out")
    assert "--continue" not in SUBCOMMANDS["study-point"].format_help()  # hidden alias
    assert "--output-dir" not in SUBCOMMANDS["export"].format_help()


def test_every_output_flag_says_file_or_folder() -> None:
    for name in ("report", "export", "gate"):
        action = next(a for a in SUBCOMMANDS[name]._actions if "--output" in a.option_strings)
        assert action.option_strings[:2] == ["-o", "--output"]
        assert "this command writes" in action.help, name


GATES = """gates:
  rules:
    - {arm: ngram_k4, metric: tau, min: 1.5}
"""


def test_gate_output_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    gates = tmp_path / "gates.yaml"
    regime = (ROOT / "tests" / "regimes" / "cpu_e2e.yaml").read_text()
    gates.write_text(regime.replace("../../workloads/", f"{ROOT}/workloads/") + GATES)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    assert main(["gate", str(run), "--gates", str(gates), "-o", str(tmp_path / "ci")]) == 0
    assert sorted(p.name for p in (tmp_path / "ci").iterdir()) == ["junit.xml", "summary.md"]
    assert (run / "gate" / "checks.json").is_file()  # always with the run: the report reads it
    assert not (run / "gate" / "junit.xml").exists()


def test_cli_is_only_the_edge() -> None:
    """The subcommands live in their modules; cli.py assembles them and maps errors."""
    text = (ROOT / "harness" / "cli.py").read_text()
    assert len(text.splitlines()) < 200
    assert "def _cmd_" not in text and "write_text_atomic" not in text


def test_show_of_a_study_reads_it_without_its_execution_module(tmp_path: Path) -> None:
    """`bench show STUDY` writes analysis.md from the present side: harness.run.study.run stays unimported."""
    study = tmp_path / "study"
    shutil.copytree(STUDY, study)
    script = (
        "import sys\n"
        "from harness.cli import main\n"
        f"code = main(['show', {str(study)!r}])\n"
        "print('IMPORTED' if 'harness.run.study.run' in sys.modules else 'NOT IMPORTED', code)\n"
    )
    env = {**os.environ, "COLUMNS": "200"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, env=env)
    assert "NOT IMPORTED" in out.stdout, out.stdout + out.stderr
    assert (study / "analysis.md").is_file()
