"""The terminal views fit the reader: `bench show` piped honours COLUMNS, its tables fit 80 and
120 columns (stacked when narrow) without splitting a number, and its prose is wrapped."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from harness.present.width import wrap

ROOT = Path(__file__).resolve().parent.parent
RUNS = ("run_v1", "run_v3_smoke")
# a whole token that is a value: 1.52x, [1.21, 115, 6/6, -34%); identifiers (eagle3_k3, @1) are not
VALUE = re.compile(r"^[\[\(]?[-+]?\d+(?:\.\d+)?(?:/\d+)?(?:x|%)?[,\]\);:.]*$")


def _show(run: str, columns: int | None) -> str:
    env = {**os.environ, "TERM": "dumb", "NO_COLOR": "1"}
    env.pop("COLUMNS", None)
    if columns is not None:
        env["COLUMNS"] = str(columns)
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "show", f"tests/fixtures/{run}"],
        capture_output=True, text=True, cwd=ROOT, env=env, check=True,
    )  # fmt: skip
    return proc.stdout


def _values(text: str) -> Counter[str]:
    """Every value token, the titles of continued (stacked) tables left out: they repeat the first."""
    lines = [line for line in text.splitlines() if "(continued)" not in line]
    return Counter(token for token in " ".join(lines).split() if VALUE.match(token))


@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("columns", [80, 120])
def test_show_fits_the_width_and_splits_no_number(run: str, columns: int) -> None:
    wide, narrow = _show(run, 250), _show(run, columns)
    assert max(len(line.rstrip()) for line in narrow.splitlines()) <= columns
    # every number of the wide layout is in the narrow one, whole, as often: none split or dropped
    assert _values(narrow) == _values(wide)


def test_piped_output_honours_columns() -> None:
    assert max(len(line.rstrip()) for line in _show("run_v3_smoke", 250).splitlines()) > 120
    assert max(len(line.rstrip()) for line in _show("run_v3_smoke", None).splitlines()) <= 100  # default


def test_findings_are_wrapped_not_one_line() -> None:
    out = _show("run_v3_smoke", 80)
    start = out.index("Findings: ")
    paragraph = out[start : out.index("\nAttention backend", start)].splitlines()
    assert len(paragraph) > 10 and all(len(line) <= 80 for line in paragraph)


def test_wrap_keeps_words_whole_and_indents() -> None:
    text = (
        "ngram_k4 pays at 1.52x [1.21, 1.98]; $/Mtok 0.45 -> 0.30 (-34%) eagle3_untrained_k3_with_long_name"
    )
    lines = wrap(text, 20, indent="  ").splitlines()
    assert lines[0].startswith("  ngram_k4") and all(line.startswith("    ") for line in lines[1:])
    assert " ".join(lines).split() == text.split()  # nothing broken or lost, even past the width


def test_the_answer_is_last_with_the_command_that_would_decide_it() -> None:
    """`bench show` ends with the answer: the verdict block, the command that would decide an
    undecided window and about how long it would take (run_v14_undecided: a 2-round run at 1.12x),
    then the report's command. A decided run ends with its verdict and the report's command."""
    lines = [line for line in _show("run_v14_undecided", 250).splitlines() if line.strip()]
    assert lines[-1] == "Report: bench report tests/fixtures/run_v14_undecided"
    decide = lines[-2]
    assert re.fullmatch(
        r"To decide w0 @1: bench run --resume tests/fixtures/run_v14_undecided --rounds \d+ "
        r"\(about [0-9.]+ min more; it may decide it, with false \"pays\" over the whole run then "
        r"at most 5%\)",
        decide,
    ), decide
    verdict = max(i for i, line in enumerate(lines) if line == "Verdict:")
    assert "too noisy to tell" in lines[verdict + 1]
    assert all(line.startswith("  ") for line in lines[verdict + 1 : -2])  # nothing else after the verdict
    decided = [line for line in _show("run_v14_slower_pays", 250).splitlines() if line.strip()]
    assert decided[-1] == "Report: bench report tests/fixtures/run_v14_slower_pays"
    assert not any(line.startswith("To decide") for line in decided)


def test_every_shipped_regime_states_what_it_takes_to_decide() -> None:
    """`bench validate`'s outlook for every shipped regime: the expected rounds and minutes to decide
    an arm at its effect, and none that cannot decide."""
    from harness.run.outlook import outlook_text
    from harness.run.plan import plan_regime

    regimes = sorted((ROOT / "regimes").glob("*.yaml"))
    said = {}
    for path in regimes:
        if path.stem.startswith("cpu_policy_verify"):  # needs the policy study's results first
            continue
        said[path.stem] = outlook_text(plan_regime(path).regime)
    assert len(said) >= 25
    for name, text in said.items():
        assert text.startswith("Outlook: ") and "cannot decide" not in text, (name, text)
        assert re.search(r"decide[sd]? (in about [0-9.]+ rounds|an arm at \d\.\d\dx)", text), (name, text)
