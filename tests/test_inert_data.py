"""Issue 79, items 11 and 12: data is inert and every CLI value outside its range is one line.

A prompt id from a dataset, a category, a server's text: whatever carries an escape sequence (an
OSC window title, an erase-screen) is shown as ``\\x1b`` in the terminal (`bench run` and `bench
show` print through the same tables) and in the HTML page, and a CSV cell that a spreadsheet would
read as a formula is written as text (OWASP: a single quote before ``=``, ``+``, ``-``, ``@``, tab,
carriage return), numbers untouched."""

from __future__ import annotations

import dataclasses
import io
import shutil
from pathlib import Path

import pytest
from markupsafe import Markup
from rich.console import Console

from harness.core.formats import csv_cell

ROOT = Path(__file__).resolve().parent.parent
HOSTILE_ID = "p\x1b]0;owned\x07\x1b[2J[bold]x"  # a title, an erase, and rich markup


def _hostile_analysis(tmp_path: Path):
    """run_v14_default read back, its ngram arm's first prompt diverged under ``HOSTILE_ID``."""
    from harness.derive.analysis import load_analysis

    run = tmp_path / "run"
    shutil.copytree(ROOT / "tests" / "fixtures" / "run_v14_default", run)
    loaded = load_analysis(run)
    summary = loaded.analysis.summary
    block = summary.exactness.arms["ngram_k4"]
    first = block.prompts[0].model_copy(update={"prompt_id": HOSTILE_ID, "status": "diverged", "position": 3})
    block = block.model_copy(update={"prompts": [first, *block.prompts[1:]]})
    exactness = summary.exactness.model_copy(update={"arms": {**summary.exactness.arms, "ngram_k4": block}})
    summary = summary.model_copy(update={"exactness": exactness})
    analysis = dataclasses.replace(loaded.analysis, summary=summary)
    return dataclasses.replace(loaded, analysis=analysis)


def test_a_prompt_id_with_escapes_reaches_no_terminal_and_no_page_raw(tmp_path: Path) -> None:
    from harness.commands.terminal import print_results
    from harness.present.report import render_report

    loaded = _hostile_analysis(tmp_path)
    out = io.StringIO()
    print_results(loaded.analysis, Console(file=out, width=200))
    printed = out.getvalue()
    assert "\x1b" not in printed and "\x07" not in printed
    assert "p\\x1b]0;owned\\x07\\x1b[2J[bold]x@3(diverged)" in printed  # shown, markup as text
    page = render_report(loaded)
    assert "\x1b" not in page and "\x07" not in page
    assert "p\\x1b]0;owned\\x07\\x1b[2J[bold]x" in page


def test_the_page_writes_every_value_inert_and_keeps_its_markup() -> None:
    from harness.present.report import template_environment

    page = template_environment().from_string("{{ text }}|{{ html }}|{{ number }}")
    shown = page.render(text="a\x1b[31m<b>", html=Markup("<svg>\x00</svg>"), number=-1.5)
    assert shown == "a\\x1b[31m&lt;b&gt;|<svg>\\x00</svg>|-1.5"


@pytest.mark.parametrize(
    ("value", "written"),
    [
        ('=HYPERLINK("http://evil","x")', '\'=HYPERLINK("http://evil","x")'),
        ("+cmd|' /C calc'!A0", "'+cmd|' /C calc'!A0"),
        ("-2+3", "'-2+3"),
        ("@SUM(A1)", "'@SUM(A1)"),
        ("\t=1", "'\t=1"),
        ("\r=1", "'\\x0d=1"),
        ("id\x1b[2J", "id\\x1b[2J"),
        ("-1.5", "-1.5"),  # a number written as text stays a number
        ("-", "-"),
        ("plain", "plain"),
        (-1.5, -1.5),
        (None, None),
    ],
)
def test_a_csv_cell_is_never_a_formula(value: object, written: object) -> None:
    assert csv_cell(value) == written


def test_requests_csv_writes_a_formula_as_text(tmp_path: Path) -> None:
    import pandas as pd

    from harness.derive.frames import write_table

    frame = pd.DataFrame({"prompt_id": ['=HYPERLINK("http://evil","x")', "ok"], "delta": [-1.5, 2.0]})
    text = write_table(frame, tmp_path / "requests.csv", "csv").read_text()
    assert text.splitlines() == ["prompt_id,delta", '"\'=HYPERLINK(""http://evil"",""x"")",-1.5', "ok,2.0"]


# Issue 79, item 12: every numeric flag of `bench validate` (the same parser as `bench run`) with a
# value outside its range, or no number at all: exit 2 and an error naming the flag, never a
# traceback, in one line (argparse's refusals too: no usage block).
REGIME = str(ROOT / "tests" / "regimes" / "cpu_e2e.yaml")
OUT_OF_RANGE = ("0", "-1", "10000000", "nan", "1e400")
ONE_LINE = {
    "--input-len": ["--dataset", "random", "--input-len"],
    "--output-len": ["--dataset", "random", "--input-len", "8", "--output-len"],
}
FLAGS = {**ONE_LINE, "--num-prompts": ["--num-prompts"], "--concurrency": ["--concurrency"]}


@pytest.mark.parametrize("value", OUT_OF_RANGE)
@pytest.mark.parametrize("flag", FLAGS)
def test_a_value_out_of_range_is_one_line_and_exit_2(
    flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from harness.cli import main

    if flag == "--concurrency" and value == "10000000":
        pytest.skip("a closed loop of 10 million is within load.concurrency's range")
    try:
        code = main(["validate", REGIME, *FLAGS[flag], value])
    except SystemExit as exc:  # argparse's own refusal, in one line (cli._Parser)
        code = exc.code
    captured = capsys.readouterr()
    said = (captured.out + captured.err).strip()
    assert code == 2 and "Traceback" not in said, said
    assert len(said.splitlines()) == 1 and flag in said and "error: " in said, said
