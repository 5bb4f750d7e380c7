"""Published figures (``arms[i].published``): ranges a regime reads its run against, outside the
fingerprint; the ``published_outside`` caveat fires only when the measured 95% interval lies entirely
outside the range, never on a point outside with an interval reaching into it.

The summaries are the stored two-round default run (tests/fixtures/run_v12_default: ngram_k4 on code
at concurrency 1 measured 1.28x [1.09, 1.50], tau 2.98) with published figures added."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.config.arms import Arm, PublishedFigure
from harness.config.regime import load_regime
from harness.core.errors import UserError
from harness.derive.analysis import analyze
from harness.derive.summary import summarize
from harness.derive.verdict import published_caveats, published_checks, run_caveats, tau_interval
from harness.present.table import answer_lines
from harness.present.verdict_text import caveat_text
from harness.results.model import Summary

ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / "tests" / "fixtures" / "run_v12_default"
SHIPPED = ("h100_tp1_llama31_8b.yaml", "h100_tp1_llama31_8b_fp8.yaml", "h100_tp8.yaml")


@pytest.fixture(scope="module")
def summary() -> Summary:
    return summarize(RUN)


def _published(summary: Summary, arm: str, *figures: dict) -> Summary:
    arms = [
        a.model_copy(update={"published": [PublishedFigure(**f) for f in figures]}) if a.name == arm else a
        for a in summary.arms
    ]
    return summary.model_copy(update={"arms": arms})


def _speedup(low: float, high: float) -> dict:
    return {"quantity": "speedup", "low": low, "high": high, "concurrency": 1, "source": "a paper, table 2"}


def test_the_measured_interval_the_checks_read(summary: Summary) -> None:
    cell = summary.cell("ngram_k4", "code_humaneval", 1)
    assert (
        cell is not None
        and cell.estimate
        and (cell.estimate.low, cell.estimate.high) == pytest.approx((1.091, 1.500), abs=1e-3)
    )


@pytest.mark.parametrize(
    ("low", "high", "outcome"),
    [
        (1.6, 2.0, "outside"),  # the whole interval [1.09, 1.50] below the range
        (0.5, 1.05, "outside"),  # above it
        (1.4, 2.0, "overlaps"),  # the point 1.28 is outside, the interval reaches in: no caveat
        (1.0, 1.15, "overlaps"),
        (1.0, 1.6, "inside"),
        (1.3, 1.3, "overlaps"),  # a single published value inside the interval
    ],
)
def test_the_caveat_fires_only_when_the_interval_lies_outside(
    summary: Summary, low: float, high: float, outcome: str
) -> None:
    published = _published(summary, "ngram_k4", _speedup(low, high))
    checks = published_checks(published)
    assert [(c.arm, c.workload, c.level.short(), c.outcome) for c in checks] == [
        ("ngram_k4", "code_humaneval", "@1", outcome)
    ]
    caveats = [c for c in run_caveats(published) if c.code == "published_outside"]
    assert len(caveats) == (outcome == "outside")
    if caveats:
        text = caveat_text(caveats[0])
        side = "below" if low > 1.3 else "above"
        assert (
            f"ngram_k4 code_humaneval @1: its speedup's 95% interval [1.09, 1.50] lies entirely {side}"
            in text
        )
        assert f"the published {low:g}-{high:g} (a paper, table 2)" in text


def test_a_figure_covers_its_workload_and_concurrency_only(summary: Summary) -> None:
    every_level = {"quantity": "speedup", "low": 5.0, "high": 6.0, "source": "s"}
    assert [c.level.short() for c in published_checks(_published(summary, "ngram_k4", every_level))] == [
        "@1",
        "@4",
    ]
    elsewhere = {**every_level, "workload": "chat_mtbench"}
    assert published_checks(_published(summary, "ngram_k4", elsewhere)) == []


def test_a_point_without_an_interval_is_shown_never_judged(summary: Summary) -> None:
    cells = [
        c.model_copy(
            update={
                "estimate": c.estimate
                and c.estimate.model_copy(update=dict.fromkeys(("low", "high", "log_se", "df")))
            }
        )
        for c in summary.cells
    ]
    unverified = _published(summary.model_copy(update={"cells": cells}), "ngram_k4", _speedup(3.0, 4.0))
    (check,) = published_checks(unverified)
    assert (check.measured, check.outcome) == (pytest.approx(1.279, abs=1e-3), "no interval")
    assert published_caveats(unverified) == []


def test_tau_reads_the_prompts_spread_where_the_engine_gave_it(summary: Summary) -> None:
    cell = summary.cell("ngram_k4", "code_humaneval", 1)
    assert cell is not None
    # two start-ups of the same greedy prompts: the same tau, an interval of zero width
    found = tau_interval(cell)
    assert found is not None and found[1] == "start-ups" and found[0].low == pytest.approx(found[0].high)
    spread = {f"p{i}": t for i, t in enumerate([2.0, 2.5, 3.0, 3.5, 4.0])}
    per_prompt = cell.model_copy(update={"prompt_tau": spread})
    interval, basis = tau_interval(per_prompt) or (None, None)
    assert basis == "prompts" and interval is not None
    assert interval.point == cell.tau and interval.low < 2.6 and interval.high > 3.3  # +- t(4) * 0.35
    figure = {"quantity": "tau", "low": 3.2, "high": 3.6, "source": "s", "workload": "code_humaneval"}
    cells = [per_prompt if c is cell else c for c in summary.cells]
    with_prompts = _published(summary.model_copy(update={"cells": cells}), "ngram_k4", figure)
    assert [c.outcome for c in published_checks(with_prompts)] == ["overlaps", "outside"]  # @4: start-ups


def test_views_show_the_figure_beside_the_measured_value(summary: Summary) -> None:
    analysis = analyze(_published(summary, "ngram_k4", _speedup(1.6, 2.0)))
    lines = " ".join(" ".join(answer_lines(analysis)).split())  # wrapped to the terminal's width
    assert "Published figures" in lines
    assert "ngram_k4 code_humaneval @1: speedup 1.28x [1.09, 1.50] against the published 1.6-2x" in lines
    assert "caveat: ngram_k4 code_humaneval @1: its speedup's 95% interval" in lines


def test_a_run_without_published_figures_shows_nothing_new(summary: Summary) -> None:
    analysis = analyze(summary)
    assert analysis.published == ()
    assert not any("ublished" in line for line in answer_lines(analysis))


# ---- the regime field ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_h100_regimes_carry_published_figures(name: str) -> None:
    regime = load_regime(ROOT / "regimes" / name)
    assert regime.engine.version == "0.34.0" and regime.hardware.gpu_model == "NVIDIA H100 80GB HBM3"
    figures = [f for arm in regime.arms for f in arm.published]
    assert figures and all(f.source for f in figures)
    stripped = regime.model_copy(
        update={"arms": [a.model_copy(update={"published": []}) for a in regime.arms]}
    )
    assert stripped.fingerprint() == regime.fingerprint()  # what it is read against is not a condition


def test_fp8_regime_quantizes_the_target_only() -> None:
    fp8 = load_regime(ROOT / "regimes" / "h100_tp1_llama31_8b_fp8.yaml")
    bf16 = load_regime(ROOT / "regimes" / "h100_tp1_llama31_8b.yaml")
    assert (fp8.target.quantization, bf16.target.quantization) == ("fp8", None)
    assert all("quantization" not in arm.options for arm in fp8.arms)  # the drafter stays bf16
    assert fp8.fingerprint() != bf16.fingerprint()


def test_published_is_outside_the_fingerprint_but_k_is_not() -> None:
    regime = load_regime(ROOT / "regimes" / "h100_tp1_llama31_8b.yaml")
    arm = regime.arms[3]
    moved = [*regime.arms[:3], arm.model_copy(update={"published": [PublishedFigure(**_speedup(9, 9))]})]
    assert regime.model_copy(update={"arms": moved}).fingerprint() == regime.fingerprint()
    other_k = [*regime.arms[:3], arm.model_copy(update={"num_speculative_tokens": 5})]
    assert regime.model_copy(update={"arms": other_k}).fingerprint() != regime.fingerprint()


def _write(tmp_path: Path, mutate) -> Path:
    data = yaml.safe_load((ROOT / "regimes" / "h100_tp1_llama31_8b.yaml").read_text())
    mutate(data)
    path = tmp_path / "regime.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False).replace("../workloads/", f"{ROOT}/workloads/"))
    return path


def _error(tmp_path: Path, mutate) -> str:
    with pytest.raises(UserError) as info:
        load_regime(_write(tmp_path, mutate))
    return str(info.value)


def _figure(**changes) -> dict:
    return {"quantity": "tau", "low": 2.5, "high": 3.0, "source": "a paper", **changes}


@pytest.mark.parametrize(
    ("figure", "where", "words"),
    [
        (_figure(low=3.0, high=2.5), "arms[3].published[1].high", "below its low end 3"),
        (_figure(quantity="acceptance"), "arms[3].published[1].quantity", "'speedup' or 'tau'"),
        (_figure(low=0.5), "arms[3].published[1].low", "at least 1"),
        (_figure(source=""), "arms[3].published[1].source", "at least 1 character"),
        (_figure(concurrency=64), "arms[3].published[1].concurrency", "not one of load.concurrency"),
        (_figure(seen_on="H100"), "arms[3].published[1].seen_on", "unknown key"),
        ({k: v for k, v in _figure().items() if k != "source"}, "arms[3].published[1].source", "required"),
        (_figure(shape="star"), "arms[3].published[1].shape", "'chain' or 'tree'"),
        (_figure(temperature=-1), "arms[3].published[1].temperature", "greater than or equal to 0"),
        (_figure(model_runner="v3"), "arms[3].published[1].model_runner", "'v1' or 'v2'"),
        (_figure(another_regime=True), "arms[3].published[1].another_regime", "records how it differs"),
        # another regime than the arm's: refused unless marked as a reference
        (_figure(temperature=1), "arms[3].published[1].temperature", "published at temperature 1, the "),
        (_figure(shape="tree"), "arms[3].published[1].shape", "the arm drafts a chain"),
        (_figure(method="eagle2"), "arms[3].published[1].method", "the arm is 'eagle3'"),
    ],
)
def test_a_bad_entry_names_its_field_path_and_line(
    tmp_path: Path, figure: dict, where: str, words: str
) -> None:
    message = _error(tmp_path, lambda d: d["arms"][3]["published"].insert(1, figure))
    assert where in message and words in message, message
    assert "regime.yaml:" in message  # the file and its line


def test_a_baseline_takes_no_published_figure(tmp_path: Path) -> None:
    message = _error(tmp_path, lambda d: d["arms"][0].update(published=[_figure()]))
    assert "arms[0].published" in message and "a baseline arm takes no" in message


def test_the_report_shows_the_figure_beside_the_measured_value(summary: Summary) -> None:
    from harness.derive.analysis import AnalyzedRun, load_analysis
    from harness.present.report import render_report

    run = load_analysis(RUN)
    published = analyze(_published(summary, "ngram_k4", _speedup(1.6, 2.0)))
    html = render_report(AnalyzedRun(run.raw, published, run.gate))
    assert '<h3 id="published">Published figures</h3>' in html
    assert '<td>1.28x [1.09, 1.50]</td><td>1.6-2x</td><td class="text">a paper, table 2</td>' in html
    assert "entirely outside it (a caveat)" in html
    assert 'id="published"' not in render_report(run)


# ---- the source's regime against the arm's ------------------------------------------------------


def test_a_figure_of_another_temperature_is_refused_by_bench_validate(tmp_path: Path) -> None:
    """The figure the shipped regimes carried before issue 72: the EAGLE-3 authors' tau, measured at
    temperature 1, on a greedy regime."""
    sampled = _figure(low=2.77, high=2.77, temperature=1, engine="EAGLE reference code")
    path = _write(tmp_path, lambda d: d["arms"][3]["published"].insert(0, sampled))
    out = subprocess.run(
        [sys.executable, "-m", "harness.cli", "validate", str(path)], capture_output=True, text=True, cwd=ROOT
    )
    said = " ".join((out.stdout + out.stderr).split())
    assert out.returncode == 2 and "Traceback" not in said, said
    assert "regime.yaml:" in said and "arms[3].published[0].temperature:" in said, said
    assert "published at temperature 1, the regime samples at 0 (sampling.temperature)" in said
    assert "set another_regime: true" in said  # the way to keep it on purpose


def test_a_reference_from_another_regime_is_accepted_when_marked(tmp_path: Path) -> None:
    reference = _figure(temperature=1, shape="tree", engine="sglang", another_regime=True)
    regime = load_regime(_write(tmp_path, lambda d: d["arms"][3]["published"].append(reference)))
    figure = regime.arms[3].published[-1]
    assert figure.another_regime and figure.conditions() == {
        "temperature": 1,
        "shape": "tree",
        "engine": "sglang",
    }


def test_an_sglang_tree_arm_takes_a_tree_figure_and_refuses_a_chain(tmp_path: Path) -> None:
    def tree(data: dict, shape: str) -> None:
        data["arms"][3]["options"] = {"speculative_eagle_topk": 4}
        data["arms"][3]["published"] = [_figure(shape=shape, temperature=0)]

    arm = Arm.model_validate(
        {
            "name": "e",
            "method": "eagle3",
            "num_speculative_tokens": 7,
            "draft_model": "d",
            "options": {"speculative_eagle_topk": 4},
            "published": [_figure(shape="tree")],
        }
    )
    assert arm.drafting_shape() == "tree"
    message = _error(tmp_path, lambda d: tree(d, "chain"))
    assert "arms[3].published[0].shape" in message and "the arm drafts a tree" in message, message


def _caveat(summary: Summary, **regime) -> str:
    figure = {**_speedup(1.6, 2.0), **regime}
    (found,) = [
        c for c in run_caveats(_published(summary, "ngram_k4", figure)) if c.code == "published_outside"
    ]
    return " ".join(caveat_text(found).split())


def test_the_caveat_states_the_regimes_difference_instead_of_a_fault(summary: Summary) -> None:
    """ngram_k4 ran greedy at K=4; the figure was published at temperature 1 with SGLang's tree at
    K=7, kept as a reference."""
    text = _caveat(
        summary, temperature=1, shape="tree", engine="sglang", num_speculative_tokens=7, another_regime=True
    )
    assert "lies entirely below the published 1.6-2 (a paper, table 2)" in text, text
    assert (
        "; published at temperature 1, SGLang tree, K=7; measured greedy, K=4 (a reference from another "
        "regime): the regimes differ in temperature, K, shape, so the gap is that difference, not by "
        "itself a fault"
    ) in text, text
    assert "something is wrong" not in text


def test_the_caveat_names_a_k_that_differs_on_an_otherwise_matching_figure(summary: Summary) -> None:
    text = _caveat(summary, temperature=0, shape="chain", engine="vllm", num_speculative_tokens=5)
    assert "; published greedy, vLLM chain, K=5; measured greedy, chain, K=4: the regimes differ in K" in text
    assert "something is wrong" not in text


def test_the_caveat_of_matching_conditions_says_what_they_leave_out(summary: Summary) -> None:
    text = _caveat(summary, temperature=0, shape="chain", engine="vllm", model_runner="v1")
    assert (
        "; published greedy, vLLM chain, Model Runner V1; measured greedy, chain, K=4: the conditions" in text
    )
    assert "what they leave out (hardware, engine release, prompts, counting), or something is wrong" in text


def test_a_figure_that_records_no_regime_keeps_the_general_words(summary: Summary) -> None:
    text = _caveat(summary)
    assert text.endswith(
        "(a paper, table 2): this run is not the publication's regime (hardware, engine, K, prompts, "
        "counting), or something is wrong"
    ), text


GPU_REGIMES = sorted(
    path.name
    for path in (ROOT / "regimes").glob("*.yaml")
    if yaml.safe_load(path.read_text())["hardware"]["kind"] == "gpu"
)


@pytest.mark.parametrize("name", GPU_REGIMES)
def test_every_shipped_figure_is_of_its_arms_regime(name: str) -> None:
    """No shipped regime carries a figure of another temperature, shape, method or engine than its
    arm's, nor one marked as a reference from another regime; each records the shape and engine it
    was measured with, and the temperature where its source states one."""
    regime = load_regime(ROOT / "regimes" / name)
    for arm in regime.arms:
        for figure in arm.published:
            where = f"{name} {arm.name} {figure.quantity} {figure.low:g}-{figure.high:g}"
            assert not figure.another_regime, where
            assert figure.shape == arm.drafting_shape() and figure.engine == regime.engine.name, where
            assert figure.method in (None, arm.method), where
            assert figure.temperature in (None, regime.sampling.temperature), where
            if figure.temperature is None:  # the source does not say: its text says so
                assert "states neither the temperature" in figure.source, where
            if figure.num_speculative_tokens not in (None, arm.num_speculative_tokens):
                assert f"K={figure.num_speculative_tokens}" in figure.source, where


def test_the_shipped_figures_are_the_greedy_chain_ones() -> None:
    """Issue 72: the EAGLE-3 authors' 2.77 (temperature 1) and SGLang's 2.36x (a tree) are gone; vLLM's
    greedy chain at K=7 measured 3.53-3.54, and DFlash-b16's 4.24 was asserted at K=16."""
    carried = {
        (name, arm.name, f.quantity): (f.low, f.high, f.temperature, f.num_speculative_tokens)
        for name in GPU_REGIMES
        for arm in load_regime(ROOT / "regimes" / name).arms
        for f in arm.published
    }
    assert not any(low in (2.77, 2.36) for low, *_ in carried.values())
    for name in SHIPPED:
        assert carried[(name, "eagle3_k7", "tau")] == (3.53, 3.54, 0, None)
    assert carried[("h100_tp1_llama31_8b.yaml", "eagle3_k7", "speedup")][:2] == (1.65, 1.65)
    assert carried[("h100_tp1_llama31_8b.yaml", "eagle3_k3", "speedup")][:2] == (1.73, 1.73)
    assert carried[("h200_tp1_qwen3_8b.yaml", "dflash_b16_k15", "tau")] == (4.03, 4.24, 0, 16)
