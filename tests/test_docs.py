"""The README stays a five-minute read, and no relative link in it or in docs/ is broken.

Cheap and without mkdocs: CI's `mkdocs build --strict` also checks anchors, but only on a machine
with mkdocs; these run everywhere.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# the README is a user's first screen and five minutes, not the manual (issue 62: 2,416 words then)
README_MAX_LINES = 160
README_MAX_WORDS = 1_500
FIRST_SCREEN_LINES = 40  # what a terminal or GitHub shows before any scrolling

# [text](target) and ![alt](target); the target ends at whitespace or the closing parenthesis.
LINK = re.compile(r"!?\[[^\]]*\]\(\s*([^)\s]+)[^)]*\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`\n]*`")


def relative_targets(markdown: str) -> list[str]:
    """The link targets that name a file here: code, web addresses and in-page anchors left out."""
    prose = INLINE_CODE.sub("", FENCE.sub("", markdown))
    targets = (m.group(1) for m in LINK.finditer(prose))
    return [t.split("#", 1)[0] for t in targets if not re.match(r"[a-z][a-z0-9+.-]*:|#", t)]


def broken_links(path: Path) -> list[str]:
    return [t for t in relative_targets(path.read_text()) if not (path.parent / t).exists()]


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_readme_is_a_five_minute_read():
    text = (ROOT / "README.md").read_text()
    lines = text.splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail into docs/"
    assert len(text.split()) <= README_MAX_WORDS, (
        f"README.md has {len(text.split())} words; move detail into docs/"
    )


def test_the_first_screen_holds_both_quick_starts_and_the_glossary_is_linked():
    lines = (ROOT / "README.md").read_text().splitlines()
    first = "\n".join(lines[:FIRST_SCREEN_LINES])
    assert "## Quick start on a GPU" in first and "## Quick start on a CPU" in first
    assert (
        "bench run regimes/h100_tp1_llama31_8b.yaml" in first
        and "bench run regimes/cpu_default.yaml" in first
    )
    assert "docs/glossary.md" in relative_targets((ROOT / "README.md").read_text())


@pytest.mark.parametrize("path", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_to_files(path):
    assert broken_links(path) == []


@pytest.mark.parametrize("path", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_code_fences_are_closed(path):
    fences = [line for line in path.read_text().splitlines() if line.startswith("```")]
    assert len(fences) % 2 == 0, f"{path.name}: an unclosed ``` swallows the rest of the page"


def test_readme_links_into_docs_and_shows_the_report():
    targets = relative_targets((ROOT / "README.md").read_text())
    assert "docs/index.md" in targets
    assert "docs/img/report.png" in targets and (ROOT / "docs/img/report.png").exists()


def test_link_check_finds_a_broken_link(tmp_path):
    (tmp_path / "there.md").write_text("# There\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](there.md#there) [web](https://example.org/x.md) [anchor](#top)\n"
        "`[code](not-checked.md)`\n```\n[fenced](not-checked.md)\n```\n"
        "![gone](img/missing.png) [gone too](missing.md 'title')\n"
    )
    assert broken_links(page) == ["img/missing.png", "missing.md"]


def test_every_docs_page_is_in_the_mkdocs_nav():
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert {p for p in pages if f" {p}" not in nav} == set()


# a fenced block quoting a stored fixture's output: the nearest `bench show tests/fixtures/...`
# command in the few lines before the block says which (with --minilab: the lab's table)
QUOTED = re.compile(
    r"`(bench show (tests/fixtures/\w+)( --minilab)?)`(?:(?!```).){0,600}?```\n(.*?)```", re.S
)


def _quoted_outputs() -> list[tuple[str, str, str, bool]]:
    found = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for match in QUOTED.finditer(path.read_text()):
            found.append(
                (f"{path.name}: {match.group(1)}", match.group(2), match.group(4), bool(match.group(3)))
            )
    return found


@pytest.mark.parametrize("where, run, block, minilab", _quoted_outputs(), ids=lambda v: str(v)[:40])
def test_quoted_outputs_are_what_bench_show_prints(where: str, run: str, block: str, minilab: bool) -> None:
    """An output the docs quote for a stored fixture is what `bench show` prints for it today
    (whitespace aside: the docs wrap it to their own width)."""
    import os
    import subprocess
    import sys

    args = ["show", run, *(["--minilab"] if minilab else [])]
    env = {**os.environ, "COLUMNS": "1000", "TERM": "dumb", "NO_COLOR": "1"}
    printed = subprocess.run(
        [sys.executable, "-m", "harness.cli", *args], capture_output=True, text=True, cwd=ROOT, env=env
    )
    assert printed.returncode == 0, printed.stderr[-2000:]
    output = " ".join(printed.stdout.split())
    for part in block.split("\n\n"):  # paragraphs of the quote, each printed as it stands
        assert " ".join(part.split()) in output, f"{where} quotes what it no longer prints:\n{part}"


def test_the_docs_quote_a_stored_fixture() -> None:
    assert any(run.endswith("run_v12_provisional") for _, run, _, _ in _quoted_outputs())


def test_the_metrics_page_is_the_registry() -> None:
    """docs/metrics.md is written from harness.core.metrics (what `bench show --help` and `bench gate
    --help` point to): a metric added, renamed or redefined is a stale page until it is rewritten."""
    import os

    from harness.commands.common import METRICS_PAGE, metrics_page

    page = ROOT / METRICS_PAGE
    if os.environ.get("BENCH_UPDATE_DOCS"):
        page.write_text(metrics_page())
    assert page.read_text() == metrics_page(), f"{METRICS_PAGE} is stale: BENCH_UPDATE_DOCS=1 rewrites it"
