"""The covariate estimator (issue 81): the copy share of the baseline's answers, the regression
estimator on the jackknife's pseudo-values, and when a workload pass is not used."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as scipy_stats

from harness.core.probes.copying import copied_ngrams
from harness.derive.covariate import Covariates, copy_share, covariates
from harness.derive.intervals import WindowPrompts, _log_point, prompt_variance
from harness.derive.summary import summarize
from harness.results.raw import read_raw

FIXTURES = Path(__file__).parent / "fixtures"
DEFAULT = FIXTURES / "run_v14_default"  # a real cpu_default run: 30 code prompts, ngram K=4


def test_the_copy_share_is_the_context_share_of_one_answer() -> None:
    prompt, output = [1, 2, 3, 4, 5], [3, 4, 5, 9, 3, 4, 5, 7]
    counts = copied_ngrams(prompt, output)
    assert copy_share(prompt, output) == counts.from_context / counts.total == 2 / 6
    assert copy_share([], output) is None and copy_share(prompt, [1, 2]) is None


def _table(gains: np.ndarray, rounds: int = 2) -> dict[str, list[WindowPrompts]]:
    """Two arms' windows, prompt by prompt: 20 tokens each, the arm's time the baseline's over each
    prompt's gain, every round at the same pace."""
    base = {f"p{i}": (20, 1.0 + 0.1 * (i % 3)) for i in range(len(gains))}
    arm = {p: (t, s / math.exp(g)) for (p, (t, s)), g in zip(base.items(), gains, strict=True)}

    def windows(prompts: dict[str, tuple[int, float]]) -> list[WindowPrompts]:
        return [WindowPrompts(r, sum(s for _, s in prompts.values()), prompts) for r in range(rounds)]

    return {"baseline": windows(base), "arm": windows(arm)}


def test_the_regression_estimator_is_the_fitted_line_at_the_workload_mean() -> None:
    """The prompt term with a covariate is the least-squares line of the jackknife's pseudo-values
    on the covariate, read at the workload's mean: its variance and slope as scipy's linregress
    gives them; without the covariate, the jackknife's own."""
    rng = np.random.default_rng(0)
    shares = rng.uniform(0.1, 0.8, 30)
    gains = 0.6 * shares + rng.normal(0, 0.05, 30)
    table = _table(gains)
    values = {f"p{i}": float(x) for i, x in enumerate(shares)}
    mean = 0.3  # the workload's, below these prompts' 0.45: they were lucky
    term = prompt_variance(table, "arm", "baseline", [0, 1], Covariates(values, mean, 164))
    plain = prompt_variance(table, "arm", "baseline", [0, 1])
    assert term is not None and plain is not None and plain.shift is None and plain.r2 is None

    whole = _log_point(table, "arm", "baseline", [0, 1], None)
    pseudo = [
        30 * whole - 29 * _log_point(table, "arm", "baseline", [0, 1], p)  # type: ignore[operator]
        for p in values
    ]
    fit = scipy_stats.linregress(shares, pseudo)
    # the fitted mean at x = mean: var(a + b mean) = var(a) + mean^2 var(b) + 2 mean cov(a, b)
    at_mean = fit.intercept_stderr**2 + mean**2 * fit.stderr**2 - 2 * mean * np.mean(shares) * fit.stderr**2
    # sampled without replacement from the 164 prompts the workload pass measured
    assert term.variance == pytest.approx(at_mean * (1 - 30 / 164), rel=1e-9)
    assert term.shift == pytest.approx(-fit.slope * (np.mean(shares) - mean), rel=1e-9)
    assert term.r2 == pytest.approx(fit.rvalue**2, rel=1e-9)
    assert (term.df, plain.df, term.prompts) == (28, 29, 30)
    assert plain.variance == pytest.approx(np.var(pseudo, ddof=1) / 30, rel=1e-9)
    # the share explained most of the spread: a much narrower prompt term, and a lucky sample moved down
    assert term.r2 > 0.9 and term.variance < plain.variance / 5 and term.shift < 0


def test_a_covariate_missing_for_a_prompt_or_flat_keeps_the_jackknife() -> None:
    table = _table(np.linspace(0.0, 0.3, 10))
    missing = Covariates({f"p{i}": 0.1 * i for i in range(9)}, 0.4, 10)
    flat = Covariates({f"p{i}": 0.5 for i in range(10)}, 0.5, 10)
    for covariate in (missing, flat):
        term = prompt_variance(table, "arm", "baseline", [0, 1], covariate)
        assert term is not None and term.shift is None and term.df == 9


def _with_pass(records: list) -> tuple:
    raw = read_raw(DEFAULT)
    raw.arms[raw.baseline_arm].workload_pass = records  # type: ignore[attr-defined]
    return raw, summarize(raw)


def _first_answers(raw) -> list:
    seen, found = set(), []
    for record in raw.arms[raw.baseline_arm].samples:
        if record.prompt_id not in seen:
            seen.add(record.prompt_id)
            found.append(record)
    return found


def test_a_real_run_with_its_workload_pass_narrows_the_prompt_term() -> None:
    """The stored default run with a workload pass of its own baseline's answers: the copy share
    explains most of the prompts' spread (R^2 0.95 on that machine's run). The prompts are the whole
    workload here: the point does not move, and no prompt sampling is left in the interval."""
    raw = read_raw(DEFAULT)
    plain = summarize(raw).cell("ngram_k4", "code_humaneval", 1)
    _, summary = _with_pass(_first_answers(raw))
    cell = summary.cell("ngram_k4", "code_humaneval", 1)
    assert plain is not None and cell is not None and plain.estimate and cell.estimate
    assert cell.estimate.covariate_r2 is not None and cell.estimate.covariate_r2 > 0.8
    assert cell.estimate.covariate_shift == pytest.approx(0.0, abs=1e-12)
    assert cell.speedup == pytest.approx(plain.speedup, rel=1e-12)
    assert cell.estimate.prompt_log_se == 0.0 and plain.estimate.prompt_log_se > 0.02  # type: ignore[operator]
    assert cell.estimate.high - cell.estimate.low < plain.estimate.high - plain.estimate.low  # type: ignore[operator]
    (use,) = summary.covariates
    assert use.missing is None and use.pool == 30 and use.mean is not None


def test_a_workload_wider_than_the_sample_moves_the_point_to_its_mean() -> None:
    """Prompts outside the run that copy nothing pull the workload's mean share down: a sample that
    copies more than the workload gains more than it would, and the point moves down."""
    raw = read_raw(DEFAULT)
    answers = _first_answers(raw)
    plain = summarize(raw).cell("ngram_k4", "code_humaneval", 1)
    others = [
        replace(r, prompt_id=f"other/{i}", token_ids=list(range(90_000, 90_000 + len(r.token_ids))))
        for i, r in enumerate(answers)
    ]
    _, summary = _with_pass(answers + others)
    cell = summary.cell("ngram_k4", "code_humaneval", 1)
    assert cell is not None and plain is not None and cell.estimate is not None
    assert cell.estimate.covariate_shift is not None and cell.estimate.covariate_shift < 0
    assert cell.speedup < plain.speedup  # type: ignore[operator]
    assert summary.covariates[0].pool == 60


def test_a_pass_that_disagrees_with_the_runs_baseline_is_not_used() -> None:
    """A pass whose answers differ from the run's own baseline answers (an edited file, another
    engine state) is said and left out: the jackknife alone."""
    raw = read_raw(DEFAULT)
    answers = _first_answers(raw)
    edited = [replace(r, token_ids=[*r.token_ids[:-1], 7]) if i < 4 else r for i, r in enumerate(answers)]
    _, summary = _with_pass(edited)
    (use,) = summary.covariates
    assert use.mean is None and use.missing is not None and "on 4 of 30 prompts" in use.missing
    cell = summary.cell("ngram_k4", "code_humaneval", 1)
    assert cell is not None and cell.estimate is not None and cell.estimate.covariate_r2 is None
    assert covariates([], answers, ["code_humaneval"], why_none="verdict.covariate: none").missing == {
        "code_humaneval": "verdict.covariate: none"
    }


def test_the_outlook_counts_the_covariate_where_the_pass_applies() -> None:
    """The plan's outlook narrows the prompts' term by the share the covariate is assumed to explain
    (over the workload's pool: a sample of all of it leaves none), and says so only where the workload
    pass applies."""
    import os
    import subprocess
    import sys

    from harness.derive.intervals import REFERENCE_COVARIATE_R2, decision_outlook

    plain = decision_outlook(2, 30, 4, 4, 1.2, prompt_spread=0.3, prior_sd=0.1)
    covariate = decision_outlook(
        2, 30, 4, 4, 1.2, prompt_spread=0.3, prior_sd=0.1, covariate_r2=REFERENCE_COVARIATE_R2, pool=164
    )
    whole = decision_outlook(2, 30, 4, 4, 1.2, prompt_spread=3.0, prior_sd=0.1, covariate_r2=0.1, pool=30)
    assert plain.power < covariate.power and whole.power > 0.9  # the whole pool: no prompt sampling

    def outlook(*extra: str) -> str:
        env = {**os.environ, "COLUMNS": "1000", "TERM": "dumb", "NO_COLOR": "1"}
        args = [sys.executable, "-m", "harness.cli", "validate", "regimes/cpu_default.yaml", *extra]
        printed = subprocess.run(args, capture_output=True, text=True, cwd=DEFAULT.parents[2], env=env)
        return next(line for line in printed.stdout.splitlines() if line.startswith("Outlook:"))

    assert "70% of it explained by the copy share" in outlook()
    assert "copy share" not in outlook("--set", "verdict.covariate=none")


def test_docs_state_the_h200_outlook_as_the_outlook_computes_it() -> None:
    """docs/statistics.md's "Not reached": h200_tp8's outlook (5 arms, 64 prompts, rounds 2-4, the
    covariate over chat_mtbench's 80 prompts) with and without the covariate, calibrated, and 2-3."""
    from harness.derive.intervals import REFERENCE_COVARIATE_R2, decision_outlook

    covariate = {"covariate_r2": REFERENCE_COVARIATE_R2, "pool": 80}
    plain = decision_outlook(5, 64, 2, 4, 1.2, prior_sd=0.1)
    shipped = decision_outlook(5, 64, 2, 4, 1.2, prior_sd=0.1, **covariate)
    calibrated = decision_outlook(5, 64, 2, 4, 1.2, calibration_df=8, **covariate)
    shorter = decision_outlook(5, 64, 2, 3, 1.2, prior_sd=0.1, **covariate)
    text = " ".join((DEFAULT.parents[2] / "docs" / "statistics.md").read_text().split())
    assert f"still expects {shipped.expected_rounds:.1f} rounds at 1.20x" in text
    assert f"by round 4 ({plain.power:.2f} to {shipped.power:.2f})" in text
    assert f"brings the outlook to {calibrated.expected_rounds:.1f} rounds" in text
    assert f"2 to 3 rounds to {shorter.expected_rounds:.1f} rounds at {shorter.power:.2f}" in text


COVARIATE_RUN = FIXTURES / "run_v16_covariate"  # a real default run with its workload pass (issue 81)


def test_a_real_run_reads_its_prompts_through_the_workload_pass() -> None:
    """The stored default run made on a 2-core AMD EPYC without avx_vnni after issue 81: its pass
    answered all 164 HumanEval prompts on the baseline's first start-up, the copy share explained
    most of the prompts' spread, and its noise floor came from the baseline's own start-ups (no
    reference pass: no output diverged, so no margins were asked for)."""
    raw = read_raw(COVARIATE_RUN)
    record = raw.workload_pass_record
    assert record is not None and record.status == "measured" and record.prompts == 164
    assert len(raw.arms["baseline"].workload_pass) == 164 and not raw.arms["baseline"].noise_floor
    summary = summarize(raw)
    (use,) = summary.covariates
    assert use.missing is None and use.pool == 164 and 0 < use.mean < 1  # type: ignore[operator]
    cell = summary.cell("ngram_k4", "code_humaneval", 1)
    assert cell is not None and cell.estimate is not None and cell.estimate.covariate_r2 is not None
    assert cell.estimate.covariate_r2 > 0.5 and cell.estimate.covariate_shift is not None
    floor = summary.exactness.noise_floor
    assert floor is not None and floor.reference == "baseline (start-up 1)" and floor.compared == 90
