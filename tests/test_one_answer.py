"""One answer: a cell's speedup and interval are the same numbers in every view of a run.

The views (``bench show``'s tables, verdict and per-category table, ``bench show --minilab``,
``bench report``'s mini-lab, verdict, lab and category tables, ``bench export``) are rendered by the
commands and parsed back (``tests/one_answer.py``) for the stored runs: one start-up per arm
(``run_v1``, ``run_v3_smoke``), two quiet rounds (``run_v12_default``), two rounds measured beside a
busy process (``run_v12_provisional``, PROVISIONAL: there the start-ups disagree, so a view that
pooled tok/s instead of reading the estimate shows another number), and a run that added rounds
until decided (``run_v12_decide``: 4 rounds, its intervals corrected for 3 looks); and a study of
two of them. The figures, the gates and the trend page are checked on what they are given.
``test_end_to_end.py`` runs the same check on a fresh run.

On the main this issue started from (commit 90d1be3) the check fails: the per-category tables show
the pooled tok/s ratio (code @4 ngram_k4 3.05x where its estimate is 2.20x [0.20, 24.77]), the
terminal tables a speedup without its interval, and ``--minilab`` and the report's lab table no
speedup at all.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness.cli import main
from harness.core.formats import bound_text
from harness.derive.analysis import analyze, load_analysis
from harness.derive.summary import summarize
from tests.one_answer import disagreements, expected, shown_numbers

FIXTURES = Path(__file__).parent / "fixtures"
RUNS = ("run_v1", "run_v3_smoke", "run_v12_default", "run_v12_provisional", "run_v12_decide")
TWO_ROUNDS = FIXTURES / "run_v12_provisional"


@pytest.mark.parametrize("run", RUNS)
def test_every_view_shows_each_cells_one_estimate(run: str, tmp_path: Path) -> None:
    assert disagreements(FIXTURES / run, tmp_path) == []


def test_the_fixture_is_one_where_pooling_would_disagree() -> None:
    """The two-round fixture's start-ups disagree: a ratio of pooled tok/s is another number than the
    model's estimate, so a view that computed its own could not pass the check above."""
    summary = summarize(TWO_ROUNDS)
    cell = summary.cell("ngram_k4", "code_humaneval", 4)
    base = summary.cell("baseline", "code_humaneval", 4)
    assert cell is not None and base is not None and cell.speedup is not None
    assert abs(cell.output_tok_s / base.output_tok_s - cell.speedup) > 0.5  # 3.05 pooled, 2.20 modelled
    analysis = analyze(summary)
    assert all(v.provisional for v in analysis.verdicts)
    assert analysis.pooled_ratio_differs(cell)  # and the views mark the row


def test_verdicts_are_computed_once_per_command(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """``bench show`` and ``bench report`` derive the window verdicts once: every part of the view
    reads the analysis instead of deriving its own."""
    from harness.derive import verdict

    calls = []
    original = verdict.window_verdicts

    def counted(summary):  # type: ignore[no-untyped-def]
        calls.append(summary.run_id)
        return original(summary)

    monkeypatch.setattr(verdict, "window_verdicts", counted)
    assert main(["show", str(TWO_ROUNDS)]) == 0
    assert calls == ["run_v12_provisional"]
    assert main(["show", str(TWO_ROUNDS), "--minilab"]) == 0
    assert len(calls) == 2
    capsys.readouterr()


def test_the_speedup_figure_draws_each_estimate_with_its_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    """The report's speedup figure is given every speculative cell's one estimate (its interval bars
    and its colour from what its window decides of it); the Pareto figure is drawn for a run with two
    load levels."""
    from harness.present.report import figures, render_report

    given, outcomes = {}, {}
    original = figures.speedup_figure

    def spy(cells, equivalence, baseline):  # type: ignore[no-untyped-def]
        given.update({(c.arm, c.workload, c.level.short()): e for c, e, _ in cells})
        outcomes.update({(c.arm, c.workload, c.level.short()): o for c, _, o in cells})
        return original(cells, equivalence, baseline)

    monkeypatch.setattr(figures, "speedup_figure", spy)
    html = render_report(load_analysis(TWO_ROUNDS))
    truth = expected(summarize(TWO_ROUNDS))
    shown = {k: (f"{e.point:.2f}", bound_text(e.low), bound_text(e.high)) for k, e in given.items()}
    assert shown == truth
    analysis = load_analysis(TWO_ROUNDS).analysis
    assert outcomes == {
        (c.arm, c.workload, c.level.short()): analysis.outcome(c)
        for c in analysis.summary.cells
        if analysis.estimate(c) is not None
    }
    assert "throughput per user vs per server (Pareto)" in html
    assert "speedup vs concurrency, with 95% intervals" in html


def test_a_speedup_floor_gate_reads_the_estimate(tmp_path: Path) -> None:
    """A speedup floor holds the cell's one estimate to the floor (its point, and its interval at the
    gate's confidence), not a bootstrap of its own."""
    from harness.config.checks import Gate
    from harness.derive.gates.evaluate import evaluate
    from harness.derive.samples import RunView

    view = RunView(TWO_ROUNDS)
    view.regime = view.regime.model_copy(
        update={
            "gates": view.regime.gates.model_copy(
                update={"rules": [Gate(arm="ngram_k4", metric="speedup", min=1.5)]}
            )
        }
    )
    checks = {(c.workload, c.concurrency): c for c in evaluate(view)}
    cell = view.summary.cell("ngram_k4", "code_humaneval", 4)
    assert cell is not None
    check = checks[("code_humaneval", 4)]
    assert check.value == cell.speedup and check.verdict == "pass"
    low = checks[("code_humaneval", 1)]  # 1.22x: below the floor, but its interval spans it
    assert low.verdict == "inconclusive" and "but not beyond the noise" in low.message


def test_the_trend_page_shows_each_nights_stored_estimate(tmp_path: Path) -> None:
    """A night's speedup on the trend page is the one its run stored (point and interval), and the
    band is labelled at the level the history gate holds one check to."""
    from harness.derive.history.trend import BAND_CONFIDENCE, trend_series
    from harness.results.history.store import open_history

    history = tmp_path / "h.duckdb"
    run = tmp_path / "night"
    shutil.copytree(TWO_ROUNDS, run)
    assert main(["history", "add", str(run), "--history", str(history)]) == 0
    with open_history(history, read_only=True) as opened:
        runs, samples, cells = opened.runs(), opened.samples(), opened.cells()
    truth = expected(summarize(run))
    speedups = [s for s in trend_series(samples, runs, cells) if s.key.metric == "speedup"]
    assert speedups
    for series in speedups:
        (night,) = series.nights
        key = (series.key.arm, series.key.workload, f"@{series.key.concurrency}")
        assert (f"{night.value:.2f}", bound_text(night.low), bound_text(night.high)) == truth[key]
    assert pytest.approx(0.99) == BAND_CONFIDENCE


def test_the_stored_analysis_is_read_while_fresh(
    monkeypatch: pytest.MonkeyPatch, capsys, tmp_path: Path
) -> None:
    """``analysis.json`` (written by the runner after every start-up) is what ``bench show`` reads
    while its digest matches the raw files and the code; a changed raw file, another version or a
    broken file is derived again, with the same output and no traceback."""
    from harness.derive import verdict
    from harness.derive.analysis import ANALYSIS_FILE, write_analysis

    run = tmp_path / "run"
    shutil.copytree(TWO_ROUNDS, run)
    assert main(["show", str(run)]) == 0
    derived = capsys.readouterr().out
    write_analysis(run, analyze(summarize(run)))
    calls = []
    original = verdict.window_verdicts

    def derives(summary, to_decide=None):  # derived in full: the rounds to decide simulated again
        calls.extend([summary] if to_decide is None else [])
        return original(summary, to_decide)

    monkeypatch.setattr(verdict, "window_verdicts", derives)
    assert main(["show", str(run)]) == 0
    assert capsys.readouterr().out == derived and calls == []  # read (and checked), not derived
    with (run / "timing.json").open("a") as handle:  # a raw file changed: stale
        handle.write("\n")
    assert main(["show", str(run)]) == 0
    assert capsys.readouterr().out == derived and len(calls) == 1
    (run / ANALYSIS_FILE).write_text('{"analysis_version": 1, "digest": ')  # cut short
    assert main(["show", str(run)]) == 0
    assert capsys.readouterr().out == derived and len(calls) == 2


def test_a_study_shows_each_points_one_estimate(tmp_path: Path, capsys) -> None:
    """A study of the two stored two-round runs (its points): its per-point table (terminal and
    ``analysis.md``) and its recommendation show each cell's estimate as its own run's views do."""
    from tests.views import write_study

    points = {"p0": FIXTURES / "run_v12_default", "p1": TWO_ROUNDS}
    families = {"baseline": "baseline", "ngram_k2": "ngram", "ngram_k4": "ngram"}
    root = write_study(tmp_path / "study", points, families)
    assert main(["show", str(root)]) in (0, 3)
    capsys.readouterr()
    rows = [line.strip("|").split(" | ") for line in (root / "analysis.md").read_text().splitlines()]
    truth = {point: expected(summarize(run)) for point, run in points.items()}
    shown = {
        (row[0].split(":")[0].strip(), row[3].strip(), row[1].strip(), row[2].strip()): shown_numbers(row[-1])
        for row in rows
        if len(row) == 9
        and row[0].strip() in ("p0: engine.enforce_eager=True", "p1: engine.enforce_eager=False")
        and row[3].strip() != "baseline"
    }
    assert len(shown) == 8  # 2 points x 2 arms x 2 levels
    for (point, arm, workload, level), numbers in shown.items():
        assert numbers == truth[point][(arm, workload, level)], (point, arm, workload, level)


def test_a_renamed_run_and_a_failed_arm_are_derived_again(tmp_path: Path, capsys) -> None:
    """A review's cases: a copied run's stored analysis holds the old run id, so the copy derives it
    again; an arm whose status is failed is in no verdict (the caveat says so) even where its samples
    remain; a baseline priced at 0 has no saving to state, and nothing raises."""
    import json

    from harness.derive.analysis import stored_analysis, write_analysis

    first = tmp_path / "first"
    shutil.copytree(FIXTURES / "run_v12_default", first)
    write_analysis(first, analyze(summarize(first)))
    copy = tmp_path / "copy"
    shutil.copytree(first, copy)
    assert stored_analysis(first) is not None and stored_analysis(copy) is None
    status = copy / "arms" / "ngram_k4" / "status.json"
    status.write_text(json.dumps({**json.loads(status.read_text()), "status": "failed"}))
    analysis = analyze(summarize(copy))
    assert all(v.best is None or v.best.arm != "ngram_k4" for v in analysis.verdicts)
    record = copy / "regime.json"
    record.write_text(json.dumps({**json.loads(record.read_text()), "price_per_hour": 0}))
    assert main(["show", str(copy)]) in (0, 3)
    capsys.readouterr()


SLOWER_PAYS = FIXTURES / "run_v14_slower_pays"


def test_a_slower_arm_that_pays_is_deployed_and_coloured_alike_in_every_view(tmp_path: Path) -> None:
    """The fixture (benchmarks/simulated_runs.py, seed 72: 3 rounds, a2 four times as spread): a1
    1.21x pays with its interval held over the two arms; a2 is faster (1.24x) and its own 95% interval
    [1.03, 1.50] clears 1, but not held over the two arms. Every view deploys a1, colours a1 alone
    as paying, and names a2 as maybe faster; the numbers are each cell's one estimate."""
    from harness.core.metrics import METRICS
    from harness.derive.frames import load_run
    from harness.present.report import _metric_cell
    from harness.present.table import metric_text

    analysis = load_analysis(SLOWER_PAYS).analysis
    a1, a2 = (analysis.summary.cell(arm, "w0", 1) for arm in ("a1", "a2"))
    assert a1 is not None and a2 is not None
    assert a2.speedup > a1.speedup and a2.estimate.low > 1.0  # faster, and its own 95% clears 1
    (verdict,) = analysis.verdicts
    assert (verdict.deploy, verdict.outcome, verdict.fastest) == ("a1", "pays", "a2")
    assert [r.arm for r in verdict.faster_undecided] == ["a2"] and not verdict.tied
    assert (analysis.outcome(a1), analysis.outcome(a2)) == ("pays", "indistinguishable")
    # the terminal's table and the report's colour a1 alone
    speedup = next(m for m in METRICS.values() if m.ratio and m.name == "speedup")
    assert metric_text(speedup, a1, analysis).startswith("[green]")
    assert not metric_text(speedup, a2, analysis).startswith("[")
    assert _metric_cell(speedup, a1, {}, analysis)["class"] == "gain"
    assert _metric_cell(speedup, a2, {}, analysis)["class"] == ""
    # the export's deploy and verdict columns, the verdict's words, the findings' $/Mtok
    cells = load_run(SLOWER_PAYS).cells()
    rows = {r["arm"]: r for r in cells.to_dict("records")}
    assert (rows["a1"]["deploy"], rows["a2"]["deploy"]) == (True, False)
    assert (rows["a1"]["verdict"], rows["a2"]["verdict"]) == ("pays", None)
    shown = main_output(["show", str(SLOWER_PAYS)])
    assert (
        "w0 @1: a1 pays: 1.21x faster" in shown
        and "a2 may be faster (1.24x) but is too noisy to tell" in shown
    )
    assert "with a1 (-18%)" in shown  # the findings' $/Mtok follow the deployed arm
    assert disagreements(SLOWER_PAYS, tmp_path) == []


def main_output(argv: list[str]) -> str:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(argv)
    return " ".join(out.getvalue().split())
