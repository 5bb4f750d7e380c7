"""What the project says about its statistics matches what its simulation measured.

The numbers come from one place, docs/generated/statistics-tables.md, which
``benchmarks/interval_coverage.py --simulate`` writes with a digest of the code it ran on. This
file fails when that digest no longer matches the code (the tables are stale: run the command the
page names), and when a number the README, the default regime's comments, ``bench run --help`` or
docs/statistics.md quotes differs from the page's by more than its rounding and twice the page's
Monte Carlo standard error. A number in docs/statistics.md that quotes the page carries the line it
quotes: ``85%<!-- sim: pays  design  cpu_default  quiet  truth 1.20 -->``."""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import statistics_tables as tables  # noqa: E402

PAGE = tables.PAGE.read_text() if tables.PAGE.exists() else ""
LINES = tables.read_lines(PAGE)
MARKED = re.compile(r"(?P<number>\d+(?:\.\d+)?)(?P<pct>%?)\s*<!-- sim: (?P<label>[^>]+?) -->")


def _line(label: str) -> tuple[float, int]:
    assert label in LINES, f"docs/generated/statistics-tables.md has no line {label!r}: rerun its command"
    return LINES[label]


def _agrees(quoted: str, percent: bool, label: str, slack: float = 0.0) -> tuple[bool, str]:
    """Whether ``quoted`` (as written: its decimals set its rounding) matches the page's ``label``
    within that rounding, ``slack`` and twice the line's Monte Carlo standard error."""
    value, runs = _line(label)
    decimals = len(quoted.partition(".")[2])
    scale = 100 if percent else 1
    rounding = 0.5 * 10**-decimals / scale
    allowed = rounding + slack + 2 * tables.standard_error(value, runs)
    said = float(quoted) / scale
    return abs(
        said - value
    ) <= allowed + 1e-12, f"{quoted}{'%' if percent else ''} vs {value:.4f} ({runs} runs)"


def test_the_tables_are_of_this_code() -> None:
    assert PAGE, (
        "docs/generated/statistics-tables.md is missing: run benchmarks/interval_coverage.py --simulate"
    )
    header = tables.read_header(PAGE)
    stated = header["Code digest"].split()[0]
    assert stated == tables.code_digest(), (
        f"docs/generated/statistics-tables.md is stale (digest {stated}, the code's {tables.code_digest()}): "
        f"the code it simulates changed; rerun `{header['Command'].strip('`')}` and update the claims "
        "it breaks"
    )


def test_the_readme_quotes_the_default_designs_power() -> None:
    """README's quick start: "decides a true 20% speedup in A-B% of runs" over the prompt spreads
    measured at one request in flight (0.18-0.20, the table's rows), "pays" at 1.00x "about N%"."""
    text = (ROOT / "README.md").read_text()
    found = re.search(
        r"decides a true 20% speedup in (?P<low>\d+)(?:-(?P<high>\d+))?% of runs.{0,120}?"
        r"at a true 1\.00x in about (?P<false>\d+)%",
        " ".join(text.split()),
    )
    assert found, "README.md's quick start no longer states the default design's power"
    low, high = found["low"], found["high"] or found["low"]
    at = {s: f"pays  power  cpu_default  prompt spread {s}  truth 1.20" for s in ("0.18", "0.20")}
    ok_low, said_low = _agrees(low, True, at["0.20"])
    ok_high, said_high = _agrees(high, True, at["0.18"])
    assert ok_low and ok_high, f"README: {said_low} at prompt spread 0.20, {said_high} at 0.18"
    for spread in ("0.18", "0.20"):
        ok, said = _agrees(
            found["false"], True, f"pays  power  cpu_default  prompt spread {spread}  truth 1.00", 0.01
        )
        assert ok, f"README's 'about {found['false']}%' false pays at prompt spread {spread}: {said}"


def test_the_default_regimes_comments_quote_the_tables() -> None:
    text = " ".join(
        line.lstrip("# ")
        for line in (ROOT / "regimes" / "cpu_default.yaml").read_text().splitlines()
        if line.startswith("#")
    )
    found = re.search(
        r'at a true 1\.20x it says "pays" in (?P<p20>\d+)% of runs at a prompt spread of 0\.20 '
        r"\((?P<p18>\d+)% at 0\.18, (?P<p25>\d+)% at 0\.25, (?P<p30>\d+)% at 0\.30\), at a true 1\.00x in "
        r"(?P<false>[\d.]+)%",
        text,
    )
    assert found, (
        "regimes/cpu_default.yaml's comments no longer state the design's power as the tables give it"
    )
    for key, spread in (("p18", "0.18"), ("p20", "0.20"), ("p25", "0.25"), ("p30", "0.30")):
        ok, said = _agrees(found[key], True, f"pays  power  cpu_default  prompt spread {spread}  truth 1.20")
        assert ok, f"cpu_default.yaml at prompt spread {spread}: {said}"
    ok, said = _agrees(found["false"], True, "pays  power  cpu_default  prompt spread 0.20  truth 1.00", 0.01)
    assert ok, f"cpu_default.yaml's false pays: {said}"
    covered = re.search(
        r"coverage (0\.\d+)-(0\.\d+) on a noisier day, with drift, an arm twice as spread", text
    )
    assert covered, "cpu_default.yaml no longer states the design's coverage in the scenarios"
    scenarios = ("noisier day (sd x1.6)", "drift -2.6% a slot", "arm 2x the spread", "prompt spread 0.31")
    values = {name: _line(f"coverage  design  cpu_default  {name}")[0] for name in scenarios}
    low, high = min(values, key=values.__getitem__), max(values, key=values.__getitem__)
    for quoted, name in ((covered[1], low), (covered[2], high)):
        ok, said = _agrees(quoted, False, f"coverage  design  cpu_default  {name}")
        assert ok, f"cpu_default.yaml's coverage ({name}): {said}"
    decide = re.search(
        r"Rounds added until decided \(\{min: 2, max: 6, decide: true\}\) reached (\d+)%", text
    )
    assert decide, "cpu_default.yaml no longer states what rounds added until decided reached"
    ok, said = _agrees(decide[1], True, "pays  outlook check  cpu_default rounds 2-6 decide  truth 1.20")
    assert ok, f"cpu_default.yaml's deciding design: {said}"


def test_run_help_states_the_continuations_cost() -> None:
    """``bench run --help``'s --rounds: the first look was at its own level, and over the whole run
    false "pays" is at most the bound (``rounds.CONTINUED_FALSE_PAYS``) instead of one side of 95%;
    the simulated continuation keeps within it."""
    import argparse

    from harness.commands import run
    from harness.derive.rounds import CONTINUED_FALSE_PAYS, FALSE_PAYS

    parser = argparse.ArgumentParser()
    run.add_arguments(parser)
    (action,) = [a for a in parser._actions if "--rounds" in a.option_strings]
    said = " ".join(str(action.help).replace("%%", "%").split())
    found = re.search(r'false "pays" is at most (\d+)% instead of ([\d.]+)%', said)
    assert found, f"--rounds no longer states the continuation's false pays: {said}"
    assert (float(found[1]), float(found[2])) == (
        round(100 * CONTINUED_FALSE_PAYS, 1),
        round(100 * FALSE_PAYS, 1),
    )
    assert "corrected for every look" not in said  # the first look was not: it was at its own level
    label = "cpu_default  to 8 rounds  truth 1.00"
    for kind, bound in (("first look alone", FALSE_PAYS), ("continued if undecided", CONTINUED_FALSE_PAYS)):
        value, runs = _line(f"false pays  {kind}  {label}")
        assert value <= bound + 2 * tables.standard_error(bound, runs), f"{kind}: {value} over {bound}"


def test_more_rounds_alone_would_not_decide_only_where_they_did_not() -> None:
    """Where an undecided verdict says "more rounds alone would not decide it", continuing to 8
    rounds decided at most 5% of those runs (the simulation's own count)."""
    for truth in ("1.00", "1.10", "1.20"):
        value, runs = _line(f"of those, decided when continued  cpu_default  to 8 rounds  truth {truth}")
        assert value <= 0.05 + 2 * tables.standard_error(0.05, max(runs, 1)), f"truth {truth}: {value}"


def test_the_outlook_is_within_two_points_of_the_simulation() -> None:
    # in the default's measured world (the prompts' times alike); the page's other world is where the
    # outlook is known to say too much, and docs/statistics.md says by how much
    checked = [k for k in LINES if k.startswith("pays  outlook check  ") and "prompts' times" not in k]
    assert checked
    for label in checked:
        value, runs = LINES[label]
        outlook, _ = _line(label.replace("pays  outlook check", "pays (outlook)  outlook check"))
        assert abs(outlook - value) <= 0.02 + 2 * tables.standard_error(value, runs), (label, value, outlook)


def test_docs_statistics_quotes_the_tables() -> None:
    text = (ROOT / "docs" / "statistics.md").read_text()
    quoted = list(MARKED.finditer(text))
    assert len(quoted) >= 10, "docs/statistics.md no longer marks the numbers it quotes from the tables"
    wrong = []
    for m in quoted:
        ok, said = _agrees(m["number"], bool(m["pct"]), m["label"].strip())
        if not ok:
            wrong.append(f"{m['label'].strip()}: {said}")
    assert not wrong, "docs/statistics.md quotes numbers the tables no longer give:\n" + "\n".join(wrong)


def test_the_continue_hint_states_the_continuations_cost() -> None:
    """Where the verdict prints the command that continues an undecided run, it says what the
    continuation costs in false "pays" (the bound ``bench run --help`` states)."""
    import dataclasses

    from harness.derive.summary import summarize
    from harness.derive.verdict import Outcome, window_verdicts
    from harness.present.verdict_text import verdict_line

    verdicts = window_verdicts(summarize(ROOT / "tests" / "fixtures" / "run_v12_default"))
    undecided = next(v for v in verdicts if v.outcome == Outcome.INDISTINGUISHABLE and not v.provisional)
    line = " ".join(verdict_line(dataclasses.replace(undecided, to_decide=6)).split())
    assert "bench run --resume RUN_DIR --rounds 6" in line
    assert 'false "pays" over the whole run then at most 5% instead of 2.5%' in line


def test_the_two_round_warning_quotes_the_unequal_spread_rows() -> None:
    """`bench validate`'s warning for 2 rounds with 3 or more arms (``outlook.UNEQUAL_SPREAD``)
    quotes the page's rows of an arm 3x as spread at 2 rounds, with 3 and 5 arms."""
    from harness.run.outlook import UNEQUAL_SPREAD

    found = re.search(
        r"covers (?P<c_low>[\d.]+)-(?P<c_high>[\d.]+) and says \"pays\" at a true 1\.00x in "
        r"(?P<f_low>[\d.]+)-(?P<f_high>[\d.]+)% of runs",
        UNEQUAL_SPREAD,
    )
    assert found, UNEQUAL_SPREAD
    row = "unequal spread  16 prompts  sd 5%  a1 spread x3  2 rounds  {arms} arms  truth 1.00"
    coverage = {a: f"coverage  workload speedup      {row.format(arms=a)}" for a in (3, 5)}
    false = {a: f"false pays  workload speedup    {row.format(arms=a)}" for a in (3, 5)}
    checks = [
        _agrees(found["c_low"], False, coverage[5]),
        _agrees(found["c_high"], False, coverage[3]),
        _agrees(found["f_low"], True, false[5]),
        _agrees(found["f_high"], True, false[3]),
    ]
    assert all(ok for ok, _ in checks), [said for _, said in checks]
