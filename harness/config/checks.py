"""What a run checks besides speed, and how its numbers are judged: greedy exactness, the
output-distribution check, the power probe, how the verdict reads the intervals, and the regression
gates of ``bench gate``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from harness.config.arms import SpecMethod
from harness.core.config_file import StrictModel
from harness.core.errors import FieldError
from harness.core.metrics import GATED


class Exactness(StrictModel):
    """Greedy-exactness probe: every speculative arm's output vs the baseline's, per prompt."""

    enabled: bool = Field(
        default=True,
        description="Compare each arm's token ids with the baseline's, classifying each divergence by the "
        "baseline's top-2 logprob margin there. The logprobs come from a second, unmeasured pass of the "
        "baseline's windows: measured windows never ask for them (they slow a speculative arm more than the "
        "baseline). Applies to greedy regimes only.",
    )
    top_logprobs: int = Field(
        default=2, ge=2, le=20, description="Top logprobs per token (2 gives the top-2 margin)."
    )
    near_tie_margin: float | None = Field(
        default=None,
        gt=0,
        description="A divergence where the baseline's top-1 minus top-2 logprob is below this (nats) is a "
        "near tie (numerics), above it 'diverged' (a suspected bug). Default by dtype: bfloat16 0.5, "
        "float16 0.1, float32 0.01.",
    )
    noise_floor: bool = Field(
        default=True,
        description="Kept for older regime files; no effect. The baseline's second pass (the logprob pass) "
        "runs whenever exactness applies, and its agreement with the first pass is always reported as the "
        "noise floor: is the engine even deterministic in this regime?",
    )


class DistributionCheck(StrictModel):
    """Lossless at temperature > 0 means the same output distribution (harness.core.probes.distribution):
    every arm answers each prompt ``samples_per_prompt`` times with different seeds, unmeasured, and
    per-sequence statistics are compared with the baseline's."""

    enabled: bool = Field(default=True, description="Run the check whenever temperature > 0.")
    samples_per_prompt: int = Field(
        default=6, ge=1, le=100, description="Answers per prompt per arm (seeds seed, seed + 1, ...)."
    )
    alpha: float = Field(
        default=0.01, gt=0, lt=1, description="Significance level, split over the three statistics."
    )
    min_effect: float = Field(
        default=0.2,
        gt=0,
        le=1,
        description="|Cliff's delta| at or above which a significant difference counts as 'shifted'.",
    )
    min_samples: int = Field(
        default=30, ge=2, description="Sequences per side below which no 'consistent' verdict is given."
    )
    equivalence_margin: float = Field(
        default=0.2,
        gt=0,
        lt=1,
        description="'Consistent with lossless' only when every statistic's |Cliff's delta| is shown "
        "(an equivalence test at alpha) to lie below this margin.",
    )

    def unset(self) -> set[str]:
        """Fields left out of fingerprints while at their defaults (regimes written before they existed
        keep theirs)."""
        default = type(self).model_fields["equivalence_margin"].default
        return {"equivalence_margin"} if self.equivalence_margin == default else set()


class Power(StrictModel):
    """The power probe: NVML on GPUs, RAPL package counters on CPUs, else 'not available'."""

    enabled: bool = Field(default=True, description="Sample power during every measured window.")
    sample_period_s: float = Field(default=0.5, gt=0, description="Seconds between power samples.")


class VerdictSettings(StrictModel):
    """How the verdict reads the intervals: what precision it aims for, and whether its claims hold
    over every window at once. Not a condition of the measurement (not in the fingerprint)."""

    precision_pct: float = Field(
        default=10.0,
        gt=0,
        le=100,
        description="The half-width (in %) a speedup's 95% interval should reach: the verdict says how many "
        "prompts and rounds would reach it, and bench validate warns when the prompts per window cannot at "
        "the prompt-to-prompt spread this project measured (20% for ngram on code prompts).",
    )
    startup_prior_sd: float | None = Field(
        default=0.1,
        gt=0,
        le=1,
        description="The scale of a weakly informative half-normal prior on the start-up spread (the sd of "
        "log tok/s from one server start-up to the next): 0.1 rules out spreads of many tens of %, which a "
        "t interval on 1-4 degrees of freedom must otherwise allow, and says nothing of a small one. It "
        "narrows 2-3-round intervals without under-covering on a day up to 1.6x noisier than this "
        "project's CPUs (docs/statistics.md). null: the plain t interval. Never used for a run of one "
        "round (unverified), with a calibration (which is the spread measured), or where the run's own "
        "spread exceeds this scale (the plain t then).",
    )
    covariate: Literal["copy_share", "none"] = Field(
        default="copy_share",
        description="Remove most of the prompts' sampling spread from a speedup's interval with a "
        "covariate measured before any arm speculates: copy_share, the share of the baseline's greedy "
        "output that copies from its own prompt or earlier output (what prompt lookup and drafters find "
        "easy). Its workload-wide mean comes from one baseline pass over every prompt of the workload on "
        "the baseline's first start-up, kept per model, workload and machine for later runs. Applies to "
        "greedy runs; none: the prompts' "
        "jackknife alone (docs/statistics.md).",
    )
    familywise: bool = Field(
        default=False,
        description="Hold the 95% over every window of the run at once (Bonferroni over the windows): with 9 "
        "windows where nothing pays, some window's winner 'pays' in about 1 run in 5 otherwise. The verdict "
        "always states how many false 'pays' its windows may hold by chance.",
    )


GateMetric = Literal[GATED]  # the registry's gated metrics (harness.core.metrics)


class Gate(StrictModel):
    """One gate: a floor (min), a ceiling (max), or a maximum regression against a baseline run."""

    arm: str = Field(
        description="Arm name, or '*' for every arm the metric applies to: every speculative arm, and the "
        "baseline too for its own timed figures (output_tok_s, TTFT, TPOT, ITL, E2E, usd_per_mtok, slo_pct, "
        "goodput_rps), where an engine regression shows."
    )
    metric: GateMetric = Field(
        description="A gated metric of harness.core.metrics: tau, tokens_per_forward, speedup, output_tok_s, "
        "usd_per_mtok, ttft/tpot/e2e_ms_p50/p90/p99, itl_ms_mean/p50/p99, slo_pct, goodput_rps, "
        "identical_pct or diverged_pct."
    )
    workload: str | None = Field(default=None, description="Only this workload (default: every workload).")
    concurrency: int | None = Field(
        default=None, ge=1, description="Only this closed-loop concurrency level (default: every level)."
    )
    request_rate: float | None = Field(
        default=None, gt=0, description="Only this open-loop request rate (default: every level)."
    )
    min: float | None = Field(
        default=None, description="Fail when the metric is significantly below this value."
    )
    max: float | None = Field(
        default=None, description="Fail when the metric is significantly above this value."
    )
    max_regression_pct: float | None = Field(
        default=None,
        gt=0,
        description="With `bench gate --baseline RUN`: fail when the metric is worse than the baseline "
        "run's by more than this percentage AND the difference is statistically significant.",
    )

    @model_validator(mode="after")
    def _one_kind(self) -> Gate:
        given = [k for k in ("min", "max", "max_regression_pct") if getattr(self, k) is not None]
        if len(given) != 1:
            raise FieldError(
                given[1] if given else (),
                f"a gate takes exactly one of min, max or max_regression_pct (got {len(given)})",
            )
        return self


class GoldenTau(StrictModel):
    """An expected tau for a (target, method, K, workload), like the values vLLM's CI holds."""

    target: str = Field(
        description="The target as the regime names it: target.path, or 'package:file' for a package."
    )
    method: SpecMethod = Field(description="The speculative method.")
    num_speculative_tokens: int = Field(gt=0, description="K.")
    workload: str = Field(description="Workload name.")
    tau: float = Field(ge=1, description="Expected tau.")
    tolerance: float = Field(
        gt=0, description="Allowed absolute deviation from the expected tau, either way."
    )
    draft_counting: Literal["proposing_steps", "every_step", "verify_steps"] | None = Field(
        default=None,
        description="How the engine that measured the golden value counted a draft (tau's denominator: "
        "probes.acceptance.DRAFT_COUNTING): vLLM's V1 runner proposing_steps, 0.33's Model Runner V2 "
        "every_step, SGLang verify_steps. Given, the entry gates only an arm whose engine counted the same "
        "way (another is inconclusive, not compared); unset, any. ngram's tau moves with it; a drafter "
        "that proposes at every step does not.",
    )


class Gates(StrictModel):
    """Regression gates for `bench gate`. Statistics: see harness/core/stats.py."""

    confidence: float = Field(
        default=0.95, gt=0.5, lt=1, description="Confidence of the bootstrap intervals."
    )
    bootstrap_resamples: int = Field(
        default=2000, ge=200, le=100_000, description="Bootstrap resamples per gate."
    )
    rules: list[Gate] = Field(default_factory=list, description="Floors, ceilings and regression limits.")
    golden_tau: list[GoldenTau] = Field(
        default_factory=list, description="Expected tau per (target, method, K, workload)."
    )
