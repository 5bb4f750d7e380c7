"""What `bench gate` writes: a terminal table, JUnit XML (one test case per gate and cell), a
short Markdown summary for CI annotations (also appended to ``$GITHUB_STEP_SUMMARY``) and the
stored verdicts the report reads (``RUN_DIR/gate/checks.json``)."""

from __future__ import annotations

import html
import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rich import box
from rich.markup import escape
from rich.table import Table

from harness.derive.samples import RunView
from harness.results import write_json_atomic, write_text_atomic
from harness.results.gate import GATE_FILE, Check, InconclusivePolicy, StoredGate

_COLOURS = {"pass": "green", "fail": "red", "error": "red", "inconclusive": "yellow", "skipped": "dim"}
_ICONS = {
    "pass": "pass",
    "fail": "FAIL",
    "error": "ERROR",
    "inconclusive": "inconclusive",
    "skipped": "skipped",
}


def verdict_table(checks: Sequence[Check]) -> Table:
    table = Table(
        title="bench gate", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True
    )
    for header in ("verdict", "gate", "detail"):
        table.add_column(header, overflow="fold", no_wrap=header == "verdict")
    for check in checks:
        colour = _COLOURS[check.verdict]
        table.add_row(f"[{colour}]{_ICONS[check.verdict]}[/]", escape(check.name), escape(check.message))
    return table


def counts(checks: Sequence[Check]) -> dict[str, int]:
    return {verdict: sum(c.verdict == verdict for c in checks) for verdict in _ICONS}


# What XML 1.0 cannot hold (C0 controls but tab and newlines, lone surrogates, U+FFFE/U+FFFF):
# ElementTree writes them as they are and every JUnit reader then refuses the whole file. A gate's
# name and message carry user text (arm and workload names, an engine's error), so they are cleaned.
_NOT_XML = re.compile("[^\t\n\r\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _xml(text: str) -> str:
    return _NOT_XML.sub("\ufffd", text)


def junit_xml(
    checks: Sequence[Check], suite: str, inconclusive: InconclusivePolicy = "inconclusive"
) -> bytes:
    """JUnit XML as CI systems read it: failures for regressions, errors for infrastructure, and
    skipped for what was not cleared: a gate that could not be evaluated, and an inconclusive one
    (``<skipped message="inconclusive: ...">``: a JUnit reader counts it neither as passed nor as a
    regression, which is what it is; ``--inconclusive fail`` writes it as a failure of type
    "inconclusive", ``--inconclusive pass`` still as skipped: it was chosen to pass the job, not
    cleared). Text XML cannot hold is replaced (U+FFFD), so the file always parses."""
    tally = counts(checks)
    failed_inconclusive = inconclusive == "fail"
    failures = tally["fail"] + (tally["inconclusive"] if failed_inconclusive else 0)
    skipped = tally["skipped"] + (0 if failed_inconclusive else tally["inconclusive"])
    suite = _xml(suite)
    tallied = {
        "tests": str(len(checks)),
        "failures": str(failures),
        "errors": str(tally["error"]),
        "skipped": str(skipped),
    }
    root = ET.Element("testsuites", name="bench gate", **tallied)
    testsuite = ET.SubElement(root, "testsuite", name=suite, **tallied)
    for check in checks:
        name, message = _xml(check.name), _xml(check.message)
        case = ET.SubElement(testsuite, "testcase", classname=_xml(f"{suite}.{check.arm}"), name=name)
        if check.verdict == "fail":
            ET.SubElement(case, "failure", message=message, type=_xml(check.gate)).text = message
        elif check.verdict == "error":
            ET.SubElement(case, "error", message=message, type="infrastructure").text = message
        elif check.verdict == "inconclusive" and failed_inconclusive:
            said = f"inconclusive (counted as a failure: --inconclusive fail): {message}"
            ET.SubElement(case, "failure", message=said, type="inconclusive").text = said
        elif check.verdict == "inconclusive":
            ET.SubElement(case, "skipped", message=f"inconclusive (not cleared, not failed): {message}")
        elif check.verdict == "skipped":
            ET.SubElement(case, "skipped", message=message)
        else:
            ET.SubElement(case, "system-out").text = f"{check.verdict}: {message}"
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"


def _cell(text: str) -> str:
    """User text as one Markdown table cell that GitHub renders as text: HTML escaped (the step
    summary renders tags), the cell's own bars and newlines kept out."""
    return html.escape(text, quote=False).replace("|", "\\|").replace("\n", " ")


# what a reader of the summary must see first: failures, then what could not be decided, then the rest
_ORDER = {"fail": 0, "error": 1, "inconclusive": 2, "skipped": 3, "pass": 4}


def ordered(checks: Sequence[Check]) -> list[Check]:
    """Failures first, then infrastructure errors, then inconclusive checks, then the rest (each
    group in the order evaluated)."""
    return sorted(checks, key=lambda c: _ORDER[c.verdict])


_OUTCOME_WORDS = {0: "passed", 1: "REGRESSION", 3: "INFRASTRUCTURE FAILURE", 4: "INCONCLUSIVE"}


def tally_text(checks: Sequence[Check]) -> str:
    """How many checks went which way, the ones that were not cleared first: "4 of 10 checks
    inconclusive (not cleared, not failed), 6 passed"."""
    tally = counts(checks)
    said = {
        "fail": "failed",
        "error": "errors",
        "inconclusive": "inconclusive (not cleared, not failed: the table says why)",
        "skipped": "skipped",
        "pass": "passed",
    }
    parts = [f"{tally[verdict]} {word}" for verdict, word in said.items() if tally[verdict]]
    return f"{len(checks)} checks: {', '.join(parts)}" if parts else "no checks"


def policy_text(inconclusive: InconclusivePolicy, checks: Sequence[Check]) -> str:
    """What ``--inconclusive`` made of the inconclusive checks, where it changed the outcome."""
    if inconclusive == "inconclusive" or not counts(checks)["inconclusive"]:
        return ""
    counted = "passed" if inconclusive == "pass" else "failed"
    return f"inconclusive checks counted as {counted} (--inconclusive {inconclusive})"


def markdown(
    checks: Sequence[Check], title: str, code: int, inconclusive: InconclusivePolicy = "inconclusive"
) -> str:
    policy = policy_text(inconclusive, checks)
    lines = [
        f"### bench gate: {_cell(title)}: {_OUTCOME_WORDS.get(code, 'error')} (exit {code})",
        "",
        f"{tally_text(checks)}." + (f" **{policy}.**" if policy else ""),
        "",
    ]
    shown = ordered([c for c in checks if c.verdict != "pass"] or list(checks))
    if shown:
        lines += ["| verdict | gate | detail |", "|---|---|---|"]
        lines += [f"| {_ICONS[c.verdict]} | {_cell(c.name)} | {_cell(c.message)} |" for c in shown]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class GateFiles:
    """Where one gate's files go: JUnit and Markdown where asked (default ``RUN_DIR/gate/``);
    ``checks.json`` always in the run, where the report finds it."""

    junit: Path
    markdown: Path
    checks: Path

    @classmethod
    def of(cls, run_dir: Path, folder: Path | None, junit: Path | None, markdown: Path | None) -> GateFiles:
        folder = folder or run_dir / GATE_FILE.parent
        return cls(junit or folder / "junit.xml", markdown or folder / "summary.md", run_dir / GATE_FILE)


@dataclass(frozen=True)
class Confirmation:
    """``bench gate --confirm``: the run that re-measured the failing arms, and its own checks."""

    run_dir: Path
    checks: Sequence[Check]
    code: int


def write_gate(
    checks: Sequence[Check],
    code: int,
    view: RunView,
    run_dir: Path,
    baseline: Path | None,
    files: GateFiles,
    confirmation: Confirmation | None = None,
    inconclusive: InconclusivePolicy = "inconclusive",
) -> None:
    """Every file of one gate, each written whole; the Markdown also goes to ``$GITHUB_STEP_SUMMARY``.
    With a confirmation, ``checks`` are the combined verdicts and the Markdown shows the
    confirmation run's own table below them."""
    title = f"{view.regime.name} run {run_dir.name}" + (f" vs {baseline.name}" if baseline else "")
    summary_md = markdown(checks, title, code, inconclusive)
    if confirmation is not None:
        summary_md += (
            f"\nA check fails only if it also failed in the confirmation run {confirmation.run_dir} "
            "(the failing arms re-measured on fresh server start-ups):\n\n"
            + markdown(confirmation.checks, f"confirmation {confirmation.run_dir.name}", confirmation.code)
        )
    if view.machine_differences:
        summary_md += "\n**Forced across machines:** " + "; ".join(view.machine_differences) + "\n"
    write_text_atomic(files.junit, junit_xml(checks, view.regime.name, inconclusive).decode())
    write_text_atomic(files.markdown, summary_md)
    stored = StoredGate(
        baseline_run=str(baseline) if baseline else None,
        exit_code=code,
        inconclusive=inconclusive,
        checks=list(checks),
        confirmation_run=str(confirmation.run_dir) if confirmation else None,
        confirmation_checks=list(confirmation.checks) if confirmation else [],
    )
    write_json_atomic(files.checks, stored.model_dump(mode="json"))
    if os.environ.get("GITHUB_STEP_SUMMARY"):
        with open(os.environ["GITHUB_STEP_SUMMARY"], "a") as step_summary:
            step_summary.write(summary_md)


def outcome_line(
    code: int,
    files: GateFiles,
    checks: Sequence[Check] = (),
    inconclusive: InconclusivePolicy = "inconclusive",
) -> str:
    """The command's last line: the outcome and its exit code, how many checks went which way (the
    ones not cleared first), what ``--inconclusive`` made of them, where the files went (rich markup)."""
    outcome = {
        0: "[green]pass[/]",
        1: "[red]REGRESSION[/]",
        3: "[red]INFRASTRUCTURE FAILURE[/]",
        4: "[yellow]INCONCLUSIVE[/]",
    }[code]
    policy = policy_text(inconclusive, checks)
    tallied = f": {tally_text(checks)}" if checks else ""
    files_said = f"JUnit {escape(str(files.junit))}, Markdown {escape(str(files.markdown))}"
    return f"gate: {outcome} (exit {code}){tallied}{f' ({policy})' if policy else ''}; {files_said}"
