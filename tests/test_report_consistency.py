"""The report says one thing (issue 80, items 3 and 6): its definitions are the analysis's own (the
interval it computed, the verdict's words), draft positions count from 1 in the table, the figure and
the findings alike, every figure draws a cell as its outcome (one mapping), and `bench report A B`
leads with both runs' verdicts."""

from __future__ import annotations

import re
from html import unescape
from pathlib import Path

import pytest
from markupsafe import escape

from harness.derive.analysis import load_analysis
from harness.derive.verdict import Outcome
from harness.present.report import figures, render_report
from harness.present.report.outcomes import IDENTITY, OUTCOME_STYLE
from harness.present.verdict_text import OUTCOME_WORDS, basis_line, outcome_words
from tests.browser import measured_page, needs_browser
from tests.views import render_comparison

FIXTURES = Path(__file__).parent / "fixtures"
RUNS = sorted(p.name for p in FIXTURES.glob("run_*") if p.is_dir())
PAIR = (FIXTURES / "run_v12_default", FIXTURES / "run_v12_provisional")


@pytest.fixture(autouse=True)
def _close_figures():
    """The figures a test keeps to read are closed after it (``_png`` closed them before)."""
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


def _section(html: str, anchor: str) -> str:
    """One section of the page: from its heading to the next h2."""
    start = html.index(f'<h2 id="{anchor}">')
    end = html.find("<h2", start + 1)
    return html[start : end if end > 0 else len(html)]


def _rendered(run: str, monkeypatch: pytest.MonkeyPatch) -> tuple[str, dict, list]:
    """The page of a fixture run, its analysis, and the matplotlib figures drawn for it."""
    drawn: list = []
    monkeypatch.setattr(figures, "_png", lambda fig: drawn.append(fig) or "data:image/png;base64,")
    loaded = load_analysis(FIXTURES / run)
    return render_report(loaded), loaded.analysis, drawn


def _title(fig) -> str:
    return fig.axes[0].get_title()


@pytest.mark.parametrize("run", RUNS)
def test_the_definitions_are_the_analysis_own(run: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The interval definition is the basis the verdict used (no "bootstrap" beside t intervals),
    and every outcome is named in the verdict's words, in the verdict table and the definitions."""
    html, analysis, _ = _rendered(run, monkeypatch)
    definitions = _section(html, "definitions")
    basis = str(escape(basis_line(analysis.basis)))
    assert basis in definitions
    assert ("bootstrap" in definitions) == ("bootstrap" in basis)
    for outcome in OUTCOME_STYLE:
        assert f"<b>{OUTCOME_WORDS[outcome]}</b>" in definitions
    # the stored names of the outcomes are not the reader's words: never shown as such
    words = set(OUTCOME_WORDS.values())
    assert not {o.value for o in Outcome} - words & set(re.findall(r"<b>([^<]+)</b>", definitions))
    assert "indistinguishable" not in definitions
    verdict = _section(html, "verdict")
    for v in analysis.verdicts:
        assert str(escape(outcome_words(v))) in verdict


@pytest.mark.parametrize("run", RUNS)
def test_draft_positions_count_from_one(run: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The acceptance table's columns, the per-position figure's axis and the findings name the same
    position by the same number: the findings' first and last positions are the table's."""
    html, analysis, drawn = _rendered(run, monkeypatch)
    if not analysis.per_position:
        pytest.skip("no speculative arm with per-position counters")
    table = _section(html, "acceptance")
    width = max(len(marginal) for marginal, _ in analysis.per_position.values())
    assert re.findall(r"<th>pos (\d+)</th>", table) == [str(i) for i in range(1, width + 1)]
    [figure] = [f for f in drawn if _title(f).startswith("per-position acceptance")]
    assert min(figure.axes[0].get_xticks()) == 1
    rows = re.findall(
        r'<td class="text">([^<]+)</td><td class="text">marginal</td>\s*((?:<td>[^<]*</td>)+)', table
    )
    shown = {arm: re.findall(r"<td>([^<]*)</td>", cells) for arm, cells in rows}
    chains = [f for f in analysis.findings if f.kind == "chain_breaks"]
    for fact in chains:
        cells = shown[fact.arm]
        assert len(cells) == fact["last_position"]  # the last position is the last column, "pos K"
        assert float(cells[0]) == pytest.approx(fact["first_pct"] / 100, abs=5e-4)  # "position 1"
        assert float(cells[-1]) == pytest.approx(fact["last_pct"] / 100, abs=5e-4)
        assert f"position {fact['last_position']}" in _section(html, "findings")


def _hex(colour) -> str:
    from matplotlib.colors import to_hex

    return to_hex(colour)


@pytest.mark.parametrize("run", RUNS)
def test_figures_draw_each_cell_as_its_outcome(run: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every cell a figure draws has the colour and marker of its outcome (the one mapping), the
    speedup figure one point per closed-loop speculative cell with that cell's outcome; no other line
    or bar uses the colour of "pays" or "loses"; the page's table colours are the same."""
    html, analysis, drawn = _rendered(run, monkeypatch)
    decided = {_hex(OUTCOME_STYLE[o].colour) for o in (Outcome.PAYS, Outcome.LOSES)}
    for fig in drawn:
        for ax in fig.axes:
            for line in ax.get_lines():
                gid = line.get_gid() or ""
                if gid.startswith("outcome:") and gid != "outcome:None":
                    style = OUTCOME_STYLE[Outcome(gid.split(":", 1)[1])]
                    assert (line.get_marker(), _hex(line.get_color())) == (style.marker, _hex(style.colour))
                    assert _hex(line.get_markerfacecolor()) == _hex(style.colour if style.filled else "white")
                elif not line.get_label().startswith("_"):  # a series (an arm, a workload): no verdict
                    assert _hex(line.get_color()) not in decided, (_title(fig), line.get_label())
            for patch in ax.patches:
                assert _hex(patch.get_facecolor()) not in decided, _title(fig)
    speedup = [f for f in drawn if _title(f).startswith("speedup vs concurrency")]
    cells = [
        (c, analysis.outcome(c))
        for c in analysis.summary.cells
        if analysis.estimate(c) is not None and c.request_rate is None
    ]
    if cells:
        [figure] = speedup
        ax = figure.axes[0]
        points = sorted(
            line.get_gid() for line in ax.get_lines() if (line.get_gid() or "").startswith("outcome:")
        )
        assert points == sorted(f"outcome:{o}" for _, o in cells)
        # the series' lines (no marker) are told apart by colours no outcome has
        series = [
            line for line in ax.get_lines() if line.get_label() and not line.get_label().startswith("_")
        ]
        assert series and all(_hex(line.get_color()) in {_hex(c) for c in IDENTITY} for line in series)
        # the legend names each outcome drawn in the verdict's words
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
        assert {OUTCOME_WORDS[Outcome(o)] for _, o in cells} <= set(legend)
    css = re.search(r"td\.gain \{ color: (#[0-9a-f]+)", html)
    assert css and css.group(1) == OUTCOME_STYLE[Outcome.PAYS].colour


def _table(html: str, kind: str) -> list[list[str]]:
    from tests.one_answer import _Tables

    parser = _Tables()
    parser.feed(html)
    [rows] = [rows for attrs, rows in parser.tables if attrs.get("class") == kind]
    return rows


def test_the_comparison_leads_with_both_runs_verdicts() -> None:
    """`bench report A B` opens with each speculative cell's verdict in A and in B (the runs' own
    outcomes, in the verdict's words, with their intervals) and whether the decision changed."""
    first, second = (load_analysis(p).analysis for p in PAIR)
    html = render_comparison(*PAIR, force=False)
    assert html.index('id="decisions"') < html.index('id="verdict"') < html.index('id="metrics"')
    rows = _table(html, "compare-decisions")[1:]
    cells = [c for c in first.summary.cells if c.arm != first.summary.baseline_arm]
    assert len(rows) == len(cells)
    changed = 0
    for row, cell in zip(rows, cells, strict=True):
        other = second.summary.cell(cell.arm, cell.workload, cell.level)
        a, b = first.outcome(cell), second.outcome(other)
        assert row[0] == cell.arm
        assert row[2].startswith(OUTCOME_WORDS[Outcome(a)]) and row[3].startswith(OUTCOME_WORDS[Outcome(b)])
        estimate = first.estimate(cell)
        assert f"[{estimate.low:.2f}, {estimate.high:.2f}]" in row[2]
        if a != b:
            changed += 1
            assert row[4] == f"changed: {OUTCOME_WORDS[Outcome(a)]} → {OUTCOME_WORDS[Outcome(b)]}"
        else:
            assert row[4] == "same decision"
    assert changed >= 1  # the pair has one: ngram_k4 @1 pays in A, is too noisy to tell in B


def test_the_comparison_reads_each_change_in_its_metric_direction() -> None:
    """A fall in tok/s and a rise in TTFT are both worse; a rise in tok/s is better."""
    from harness.core.metrics import METRICS
    from harness.derive.gates.compare import compare_runs

    found = compare_runs(*PAIR)
    html = render_comparison(*PAIR, force=False)
    body = _table(html, "compare-verdict")[1:]
    seen = 0
    for row, cell in zip(body, found.cells, strict=True):
        for text, change in zip(row[2:], cell.changes, strict=True):
            if change.verdict != "changed":
                assert "better" not in text and "worse" not in text
                continue
            up = change.change > 0
            expected = "better" if up == METRICS[change.metric].higher_is_better else "worse"
            assert text.startswith(f"changed ({expected})")
            seen += 1
    assert seen >= 1


@needs_browser
def test_the_peers_and_step_cost_tables_fit_800_px(tmp_path: Path) -> None:
    """At 800 px the peers' tables and the step-cost tables show every column without scrolling
    inside their boxes (a run with a cost model: several K of one method)."""
    html = render_report(load_analysis(FIXTURES / "run_v14_cost_model"))
    for selectors in (
        ("table.peers-counts", "table.peers-speculation", "table.peers-latency"),
        ("table.cost", "table.cost-break-even"),
    ):
        found = measured_page(html, tmp_path, 800, selectors)
        assert found["tables"] >= len(selectors) and found["over"] == 0, (selectors, found["over"])
        assert found["scroll-width"] <= 800
    assert unescape(html).count('<table class="cost') == 2
