"""The summary of a run as one typed model: what ``summary.json`` holds and every reader uses.

Levels, from the finest:

- ``RepeatMetrics``: one repeat of one window (the gates' samples for window-level metrics);
- ``CellMetrics``: one arm x workload x concurrency cell, pooled over its repeats;
- ``CategoryMetrics``: one arm x category x concurrency, pooled over the category's workloads;
- ``ArmSummary``: an arm's configuration, drafter and status;
- ``ExactnessSection``: greedy exactness per speculative arm (and the baseline's noise floor);
- ``Summary``: all of it, with the run's identity.

``summary.json`` is ``Summary.model_dump(mode="json")``; ``load_summary`` reads every earlier version
too (``harness.results.migrations.summary``). Metric names carry their units; what each metric
means, its direction and its samples are in ``harness.core.metrics``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError

from harness.config.arms import PublishedFigure
from harness.config.checks import VerdictSettings
from harness.config.level import LoadLevel
from harness.config.load import Slo
from harness.core.errors import UserError
from harness.core.probes import distribution
from harness.core.probes.exactness import Status
from harness.results import migrations
from harness.results.files import SCHEMA_VERSION, read_json
from harness.results.migrations import summary as summary_steps
from harness.results.records import ArmStatus, PowerGpu, ResultModel, RunTiming


class RepeatMetrics(ResultModel):
    repeat: int
    server_start: int = 0  # the start-up of the arm's server it was measured on (version 6 on)
    duration_s: float
    output_tokens: int
    output_tok_s: float | None
    tau: float | None
    usd_per_mtok: float | None
    speedup: float | None = None  # against the baseline's same repeat
    tokens_per_forward: float | None = None  # probes.acceptance.TOKENS_PER_FORWARD (version 4 on)
    slo_pct: float | None = None  # requests meeting the regime's SLO, % (probes.slo; version 5 on)
    goodput_rps: float | None = None  # requests meeting it per second of the window
    # requests in flight on average (their summed request times / the window's time; version 7 on)
    mean_in_flight: float | None = None
    # the engine's steps in the window (SpecCounters.engine_steps; version 14 on): None, not counted
    engine_step_count: float | None = None


class ExactnessShares(ResultModel):
    """Per-status shares of the prompts compared with the reference (percent; None: none compared)."""

    compared: int
    identical_pct: float | None
    near_tie_pct: float | None
    diverged_pct: float | None
    unknown_pct: float | None

    def count(self, pct: float | None) -> int:
        """How many of the compared prompts one of these shares is (they are stored as percentages)."""
        return round(self.compared * (pct or 0.0) / 100)


class SpeedupEstimate(ResultModel):
    """What the arms x rounds model (``harness.derive.intervals``) stored with a speedup besides its
    point (the record's ``speedup``): its interval, the model's rounds and degrees of freedom, and the
    design it was corrected for. ``harness.derive.intervals.stored_estimate`` reads it back as an
    ``Estimate``; ``bench export`` and the history flatten it into ``speedup_*`` columns (``columns``)."""

    # its 95% t interval (None: unverified, one start-up per arm and no calibration), the rounds and
    # degrees of freedom it has and its standard error on the log scale (version 7 on); "repeats" and
    # "requests" are version 6's sources, dropped by its migration
    low: float | None = None
    high: float | None = None
    source: (
        Literal[
            "server_starts",
            "server_starts+prior",
            "calibration",
            "server_starts+calibration",
            "repeats",
            "requests",
        ]
        | None
    ) = None
    rounds: int | None = None
    df: int | None = None
    log_se: float | None = None
    # the intervals the run's design could look at before it stopped (load.server_starts decide);
    # the interval is corrected for them (harness.derive.intervals). None: 1, a fixed number of rounds
    looks: int | None = None
    # the rounds at that design's first look (server_starts.min; version 12 on): the looks' level
    # is fitted to them. None: one look, or a summary before version 12 (Bonferroni over the looks)
    first_look: int | None = None
    # the arms (with the baseline) of the model the speedup was fitted in (version 12 on): the
    # winner of several is corrected at max-t only where they all shared it. None: before version 12
    model_arms: int | None = None
    # the workload (version 13 on): the prompts the interval's prompt-sampling term counts and that
    # term's standard error on the log scale (inside log_se); the start-up term from the arm's own
    # paired differences (its spread differs); the calibration left out (the run's own residual is
    # the larger). None: none of these, or a summary before version 13
    prompts: int | None = None
    prompt_log_se: float | None = None
    own_spread: bool | None = None
    calibration_refused: bool | None = None
    # the covariate (version 16 on, issue 81): the share of the prompts' spread the copy share of the
    # baseline's answers explained, and how far it moved the log point. None: not used
    covariate_r2: float | None = None
    covariate_shift: float | None = None

    @staticmethod
    def columns(estimate: SpeedupEstimate | None) -> dict[str, Any]:
        """Its flat ``speedup_*`` columns (``bench export``, the history's table), in field order;
        every one None where there is none."""
        found = estimate.model_dump() if estimate is not None else dict.fromkeys(SpeedupEstimate.model_fields)
        return {f"speedup_{'interval' if name == 'source' else name}": value for name, value in found.items()}


class CellMetrics(ResultModel):
    """One arm on one workload at one concurrency level, pooled over the cell's repeats."""

    arm: str
    method: str
    num_speculative_tokens: int | None
    drafter: str | None  # the drafter's label (provenance in ArmSummary.drafter)
    workload: str
    category: str
    prompt_format: str
    concurrency: int  # closed loop: in flight, exactly; open loop: at most
    repeats: int
    requests_total: int
    requests_ok: int
    requests_errored: int
    output_tokens: int
    duration_s: float
    output_tok_s: float | None
    # the p99s, vLLM's ITL (per streamed chunk, not per token: probes.latency) and E2E are None in
    # a summary.json written before them (the views derive the summary again from the raw files)
    ttft_ms_p50: float | None
    ttft_ms_p90: float | None
    ttft_ms_p99: float | None = None
    tpot_ms_p50: float | None
    tpot_ms_p90: float | None
    tpot_ms_p99: float | None = None
    itl_ms_mean: float | None = None
    itl_ms_p50: float | None = None
    itl_ms_p99: float | None = None
    e2e_ms_p50: float | None = None
    e2e_ms_p90: float | None = None
    e2e_ms_p99: float | None = None
    # the peers' block (vllm bench serve's and AIPerf's statistics: core.metrics.PEER_LATENCIES) and
    # their throughputs; None in a summary from before version 16
    ttft_ms_mean: float | None = None
    ttft_ms_min: float | None = None
    ttft_ms_max: float | None = None
    ttft_ms_std: float | None = None
    ttst_ms_mean: float | None = None
    ttst_ms_p50: float | None = None
    ttst_ms_min: float | None = None
    ttst_ms_max: float | None = None
    ttst_ms_std: float | None = None
    ttst_ms_p90: float | None = None
    ttst_ms_p99: float | None = None
    tpot_ms_mean: float | None = None
    tpot_ms_min: float | None = None
    tpot_ms_max: float | None = None
    tpot_ms_std: float | None = None
    itl_ms_min: float | None = None
    itl_ms_max: float | None = None
    itl_ms_std: float | None = None
    itl_ms_p90: float | None = None
    e2e_ms_mean: float | None = None
    e2e_ms_min: float | None = None
    e2e_ms_max: float | None = None
    e2e_ms_std: float | None = None
    request_rps: float | None = None
    total_tok_s: float | None = None
    input_tokens: int | None = None  # None: the engine did not count every request's prompt
    acceptance_source: str
    server_reported: dict[str, Any] | None  # the engine's own server-wide figure, labelled, never tau
    tau: float | None  # None for the baseline and where nothing was drafted
    # output tokens per target forward pass (probes.acceptance.TOKENS_PER_FORWARD): engine-neutral,
    # unlike tau, whose drafts each engine counts its own way (the arm's draft_counting)
    tokens_per_forward: float | None = None
    acceptance_rate: float | None
    per_position_acceptance: list[float]  # marginal: P(the draft's first i + 1 tokens accepted)
    # conditional: P(position i accepted | positions < i accepted) (probes.acceptance.conditional_rates)
    conditional_acceptance: list[float | None] = []
    # the counters' consistency checks that failed (probes.acceptance.acceptance_problems); [] passed
    acceptance_checks: list[str] = []
    # drafts the counters accepted past requests' stops, at least (probes.acceptance.accepted_past_stop:
    # counted in tau, never output); None: nothing accepted (version 9 on)
    accepted_past_stop: float | None = None
    # tau per prompt over the cell's repeats, from each request's own acceptance (SGLang's details,
    # vLLM 0.33's per-request metrics); None where the engine reports none (version 9 on)
    prompt_tau: dict[str, float] | None = None
    # failed requests by kind (records.failure_kind), most first: what the failed_requests caveat says
    requests_failed_by: dict[str, int] = {}
    # finished requests whose stream was not decoding, by kind (derive.odd_requests), most first: kept
    # in every figure, named in the findings
    requests_odd_by: dict[str, int] = {}
    drafts: float
    draft_tokens: float
    accepted_tokens: float
    # the engine's steps over the cell's windows and their time per step, ms (version 14 on): the
    # step cost model's samples (harness.derive.cost_model); None where a window's engine did not count them
    engine_step_count: float | None = None
    step_ms: float | None = None
    # output n-grams that occur in the prompt (probes.copying); None where no prompt ids were returned
    copy_share_pct: float | None = None
    # ... in the prompt or earlier in the output: what a prompt-lookup drafter can match
    context_share_pct: float | None = None
    output_ngrams: int = 0  # the shares' denominator, for pooling
    # conversation workloads: the turn this cell measured (its workload is "<name>.turn<t>"); None:
    # a single-turn workload (version 10 on)
    turn: int | None = None
    # mean prompt tokens per successful request, as the engine counted them (chat template included);
    # None where the engine did not say (version 10 on)
    prompt_tokens_mean: float | None = None
    # prompt tokens the engine served from its prefix cache, % of those looked up (probes.prefix_cache):
    # whether the cache was on and what it saved; None where the engine reports none (version 10 on)
    prefix_cache_hit_pct: float | None = None
    usd_per_mtok: float | None
    # with the regime's SLO targets (probes.slo): requests meeting all of them, % of those sent, and
    # per second of window time; None without targets
    slo_pct: float | None = None
    goodput_rps: float | None = None
    power_source: str | None
    power_note: str
    mean_w: float | None
    peak_w: float | None
    energy_j: float | None
    j_per_token: float | None
    throttled: bool | None
    energy_usd_per_mtok: float | None
    per_repeat: list[RepeatMetrics]
    # the arms x rounds model's estimate (harness.derive.intervals): the geometric mean of the per-round
    # ratios of start-up mean tok/s; the baseline's is 1
    speedup: float | None
    # its interval and design (version 15 on; None: unverified, no interval or design stored)
    estimate: SpeedupEstimate | None = None
    # requests in flight on average over the cell's windows (version 7 on): a window that drains
    # (num_prompts near the concurrency) runs below its stated load
    mean_in_flight: float | None = None
    exactness: ExactnessShares | None  # vs the baseline (for the baseline: its noise floor)
    # who used the CPU during the cell's windows, in cores (probes.cpu); None where not recorded
    client_cpu_cores: float | None = None  # the harness process
    engine_cpu_cores: float | None = None
    others_cpu_cores: float | None = None  # every other process on the machine
    steal_share: float | None = None  # of the window's time, taken by the hypervisor
    # other processes on the engine's GPUs (probes.gpu): their summed SM utilisation (%, the most of
    # any window) and how many there were; None where no GPU was watched
    gpu_others_sm_pct: float | None = None
    gpu_other_processes: int | None = None
    # others or steal above probes.cpu's thresholds, or a GPU neighbour above probes.gpu's: the
    # window's numbers are not the engine's alone
    noisy_neighbour: bool = False
    client_busy: bool = False  # the client used most of a core: its numbers may be the client's
    # adaptive repeats (load.repeats: {min, max, target_rel_half_width}); None/0 with a fixed count
    precision_metric: str | None = None  # speedup, or output_tok_s for the baseline
    rel_half_width: float | None = None  # achieved after the cell's last repeat
    precision_target: float | None = None
    extra_repeat_s: float = 0.0  # engine seconds spent on repeats beyond the minimum
    # open-loop windows (load.request_rate; probes.schedule): the rate asked for and the one the
    # client achieved, how late the client got to requests (p90) and how long they waited for a
    # max_concurrency slot (p50); behind_schedule: the client, not the server, set the load
    request_rate: float | None = None
    achieved_rate_rps: float | None = None
    schedule_lag_ms_p90: float | None = None
    queueing_ms_p50: float | None = None
    # open loop: TTFT from the send (ttft_ms_p50/p90/p99 count from the due time, queueing inside:
    # probes.latency); None for closed loop, where the two are the same
    ttft_ms_p50_sent: float | None = None
    ttft_ms_p90_sent: float | None = None
    ttft_ms_p99_sent: float | None = None
    behind_schedule: bool = False

    @property
    def level(self) -> LoadLevel:
        return LoadLevel(self.concurrency, self.request_rate)

    @property
    def completed_rps(self) -> float | None:
        """Requests completed per second of the cell's windows (open loop without SLO targets:
        what the rate figure plots against the offered rate)."""
        return self.requests_ok / self.duration_s if self.duration_s > 0 else None

    @property
    def server_starts(self) -> int:
        """How many start-ups of the arm's server measured this cell."""
        return len({r.server_start for r in self.per_repeat}) or 1

    def startup_tok_s(self) -> dict[int, float]:
        """Each server start-up's mean tok/s over its repeats: the arms x rounds model's data."""
        found: dict[int, list[float]] = {}
        for r in self.per_repeat:
            if r.output_tok_s is not None:
                found.setdefault(r.server_start, []).append(r.output_tok_s)
        return {start: sum(v) / len(v) for start, v in sorted(found.items())}

    def startup_step_rate(self) -> dict[int, float]:
        """Each server start-up's mean engine steps per second over its repeats: the step cost
        model's data (harness.derive.cost_model), as ``startup_tok_s`` is the speedup's."""
        found: dict[int, list[float]] = {}
        for r in self.per_repeat:
            if r.engine_step_count and r.duration_s > 0:
                found.setdefault(r.server_start, []).append(r.engine_step_count / r.duration_s)
        return {start: sum(v) / len(v) for start, v in sorted(found.items())}

    def independent_samples(self, name: str) -> list[float]:
        """A repeat-level metric's samples for an interval or a test: with several server start-ups,
        one per start-up (the mean of its repeats: repeats on one server share what its start-up
        gave, so they are not independent draws of it); otherwise one per repeat."""
        values = [(r.server_start, v) for r in self.per_repeat if (v := getattr(r, name)) is not None]
        if self.server_starts == 1:
            return [v for _, v in values]
        starts = sorted({start for start, _ in values})
        return [sum(m := [v for s, v in values if s == start]) / len(m) for start in starts]


class CategoryMetrics(ResultModel):
    """One arm on one category at one concurrency level, pooled over the category's workloads."""

    # the arms x rounds model over the category's per-start-up tok/s (its workloads' tokens over
    # their time, per start-up; harness.derive.intervals), stored as a cell's: for a category of one
    # workload, the cell's own estimate. A summary before this field: the pooled tok/s ratio
    speedup: float | None = None
    estimate: SpeedupEstimate | None = None

    arm: str
    method: str
    num_speculative_tokens: int | None
    category: str
    concurrency: int
    workloads: list[str]
    output_tok_s: float | None
    tau: float | None
    drafts: float
    accepted_tokens: float
    identical_pct: float | None
    exactness_pairs: int
    copy_share_pct: float | None = None
    context_share_pct: float | None = None
    request_rate: float | None = None  # open-loop windows: requests/s

    @property
    def level(self) -> LoadLevel:
        return LoadLevel(self.concurrency, self.request_rate)


class RampStageMetrics(ResultModel):
    """One arm's ramp (``load.ramp``) on one workload: one stage, or the whole ramp (``stage``
    None), pooled over the server start-ups (``harness.derive.ramp``; formulas in ``probes.ramp``)."""

    speedup: float | None = None  # the arms x rounds model over the span's per-start-up tok/s, as a cell's
    estimate: SpeedupEstimate | None = None

    arm: str
    workload: str
    stage: (
        int | None
    )  # index into load.ramp; None: the whole ramp, start of the first stage to end of the last
    label: str  # "@4" or "@2req/s"; "ramp" for the whole
    concurrency: int | None = None  # the stage's, closed loop (None: open loop, or the whole ramp)
    request_rate: float | None = None  # the stage's, open loop
    start_s: float  # planned, on the window's clock
    end_s: float
    start_ups: int  # ramp windows pooled
    output_tok_s: float | None  # mean over the start-ups of the tokens streamed inside the span / its length
    startup_tok_s: list[float]  # per start-up, in order
    mean_in_flight: float | None
    requests_sent: int  # over every start-up
    requests_errored: int
    tpot_ms_p50_inside: float | None  # requests sent and finished inside the stage
    tpot_ms_p90_inside: float | None
    tpot_ms_p90_across: float | None  # requests in flight as the stage began (None for the first)
    requests_across: int = 0
    tau: float | None = None  # from the counters read at the stage's ends, summed over start-ups
    drafted_per_draft: float | None = None  # drafted tokens per draft: the K the engine ran (0: none)
    # an engine that adapts its steps (SGLang): the steps it ran as the stage ended, mean over start-ups
    engine_steps: float | None = None


class ArmSummary(ArmStatus):
    """An arm's configuration, where its drafter came from, and its status."""

    name: str
    method: str
    num_speculative_tokens: int | None
    drafter: dict[str, Any] | None  # provenance: label, reference, source, manifest (drafters.py)
    # how the engine verified the drafts and how the drafter sampled them, as configured or the engine's
    # default (vLLM: rejection_sample_method standard | block | synthetic, draft_sample_method greedy |
    # probabilistic); None: a baseline, or an engine that has no such settings
    verification: str | None = None
    draft_sampling: str | None = None
    # the arm's K per batch size, (first, last, K) inclusive, and where it came from (a study's
    # policy.json); None: one K for every batch size (and in summaries from before schedules)
    k_schedule: list[tuple[int, int, int]] | None = None
    k_schedule_source: str | None = None
    # figures published for the arm (the regime's arms[i].published): what the views show beside the
    # measured value and the published_outside caveat reads; [] in summaries from before them
    published: list[PublishedFigure] = []
    # an existing server the arm measured (arms[].endpoint, credentials redacted); None: one the
    # harness started
    endpoint: str | None = None
    # an endpoint's windows: output tokens it generated for others while they ran, summed; None where
    # its metrics have no generation counter (nobody can tell) or it is not an endpoint
    others_tokens: float | None = None
    # windows (the ramp's included) whose prefix-cache reset the engine still refused after every retry
    # (WindowRecord.prefix_cache_reset_attempts): they may have run on a warm cache; 0 in summaries
    # from before it was counted
    cache_reset_failed: int = 0
    # other models the server's /metrics counted beside the served one (WindowRecord.other_models):
    # their samples were left out; [] in summaries from before they were named
    metrics_other_models: list[str] = []


class ExactnessEntry(ResultModel):
    """One prompt's candidate output against the reference's."""

    workload: str
    prompt_id: str
    concurrency: int
    repeat: int
    status: Status
    request_rate: float | None = None  # open-loop windows
    position: int | None = None
    reference_token: int | None = None
    candidate_token: int | None = None
    margin: float | None = None
    reference_text_before: str | None = None
    reference_text_after: str | None = None
    candidate_text_after: str | None = None

    @property
    def level(self) -> LoadLevel:
        return LoadLevel(self.concurrency, self.request_rate)


class ExactnessBlock(ExactnessShares):
    reference: str  # what the candidate was compared with
    prompts: list[ExactnessEntry]


class ExactnessSection(ResultModel):
    applicable: bool
    reason: str | None = None  # why not applicable
    near_tie_margin: float | None = None
    pairing: str | None = None
    arms: dict[str, ExactnessBlock] = {}
    noise_floor: ExactnessBlock | None = None
    # the mode every arm's server ran in, the baseline's noise-floor pass included (its own server):
    # "compiled" (the engine's compile and graph capture: engine.enforce_eager false) or "eager";
    # None in summaries from before it was recorded
    compile_mode: str | None = None

    def block(self, arm: str, baseline: str) -> ExactnessBlock | None:
        """An arm's comparison with the baseline; for the baseline itself, its noise floor."""
        if not self.applicable:
            return None
        return self.noise_floor if arm == baseline else self.arms.get(arm)


class DistributionTest(ResultModel):
    """One statistic of the distribution check: the arm's sequences against the baseline's, compared
    within each prompt (harness.core.probes.distribution). Summaries from before the equivalence test hold
    a pooled Mann-Whitney p-value and delta, and no interval."""

    statistic: str  # mean_logprob | output_tokens | top1_share (probes.distribution)
    n_baseline: int  # values compared
    n_arm: int
    baseline_median: float | None
    arm_median: float | None
    p_value: float | None  # two-sided, of the stratified delta
    delta: float | None  # Cliff's delta, arm vs baseline, within prompts, combined by their pairs
    low: float | None = None  # the delta's 1 - 2 alpha / 3 interval (the equivalence test's)
    high: float | None = None
    prompts: int | None = None  # prompts compared; None: a summary from before the stratified test
    needed_per_side: int | None = None  # samples per side whose interval would fit inside the margin


class DistributionArm(ResultModel):
    # the verdict as printed: "consistent with lossless", "shifted" or "inconclusive[: why]"
    verdict: str = Field(pattern=r"^(consistent with lossless|shifted|inconclusive)(: .+)?$")
    tests: list[DistributionTest]
    more_samples_per_side: int | None = None  # inconclusive: the samples per side that would decide
    samples_per_prompt_needed: int | None = None  # ... as the regime's samples_per_prompt

    @property
    def outcome(self) -> str:
        """consistent with lossless | shifted | inconclusive."""
        return self.verdict.split(":")[0]


class DistributionSection(ResultModel):
    """Temperature > 0: each speculative arm's sampled outputs against the baseline's."""

    samples_per_prompt: int
    alpha: float
    min_effect: float
    min_samples: int
    # |Cliff's delta| within which "consistent with lossless" is shown; None: a summary from before
    # the equivalence test, whose "consistent" only meant "not significant"
    margin: float | None = None
    arms: dict[str, DistributionArm]

    @property
    def confidence(self) -> float:
        """The equivalence intervals' confidence (TOST, Bonferroni over the statistics)."""
        return distribution.confidence(self.alpha)


class TargetFootprint(ResultModel):
    """What one decode step of the target reads at its served dtype (``sensors.weights``)."""

    parameters: int
    dtype: str
    bytes_per_parameter: int
    weight_bytes: int  # the parameters a step reads (an untied input embedding left out) x bytes
    kv_bytes_per_token: int
    unread_embedding: int = 0  # an untied input embedding's elements: looked up a row, not read


class Bandwidth(ResultModel):
    gb_s: float  # 1e9 bytes/s, per device
    source: str  # "measured: numpy copy, ..." or "published: <part>, <datasheet>"


class DecodeFloorInputs(ResultModel):
    """The decode floor's inputs as the run recorded them (environment.json's ``decode_floor``)."""

    footprint: TargetFootprint | None
    bandwidth: Bandwidth | None
    tensor_parallel: int = 1


class PaceComparison(ResultModel):
    """This run's baseline pace against the regime's reference run's (``harness.derive.pace``), in
    the reference's window: how many times slower this machine ran (below 1: faster), and the CPU
    features one machine has and the other lacks."""

    reference_run: str
    source: str  # where the reference is from: the regime's reference: block, or an earlier run here
    workload: str
    concurrency: int
    reference_tok_s: float
    tok_s: float
    slower: float  # reference tok/s / this run's: 2.0 = half the reference's pace
    reference_machine: str  # its CPU model (and features), or its GPUs
    machine: str
    missing_features: list[str]  # the reference CPU's that this one lacks (avx_vnni)
    extra_features: list[str]  # this CPU's that the reference's lacked


class CovariateUse(ResultModel):
    """One workload's covariate (``harness.derive.covariate``): its mean over the workload's prompts
    from the workload pass, or why the workload's intervals have none (the jackknife alone)."""

    workload: str
    mean: float | None = None  # the copy share's mean over every prompt of the workload
    pool: int | None = None  # the prompts that mean is over
    missing: str | None = None  # why there is none


class Summary(ResultModel):
    schema_version: Literal[16] = SCHEMA_VERSION
    run_id: str
    regime_name: str
    regime_fingerprint: str
    baseline_arm: str
    mismatches: list[str]
    lossy_settings: list[str]
    # known engine defects the run was forced through (--allow-known-defect), one line each
    known_defects: list[str]
    # the engine patches the servers ran with (harness.config.engines.patches): upstream issue, name@hash
    engine_patches: list[str]
    # what the command line set in the regime file, as typed (--set load.concurrency=[2]); in the
    # regime as run and its fingerprint
    overrides: list[str] = []
    arms: list[ArmSummary]
    cells: list[CellMetrics]
    categories: list[CategoryMetrics]
    exactness: ExactnessSection
    unread_lines: list[str] = []  # torn last lines of raw files that were skipped (a crash mid-write)
    timing: RunTiming | None = None  # where the run's wall time went (timing.json)
    slo: Slo | None = None  # the targets slo_pct and goodput_rps were derived with (the run's regime)
    # how the verdict reads the intervals (the run's regime's verdict: section; version 13 on).
    # None: the defaults
    verdict: VerdictSettings | None = None
    distribution: DistributionSection | None = None  # temperature > 0 only
    # the machine calibration whose start-up spread the intervals used (Calibration.label(); version 7)
    calibration: str | None = None
    # load.ramp: per arm, workload and stage (and the whole ramp), pooled over start-ups; [] without one
    ramp: list[RampStageMetrics] = []
    # the GPUs the windows' NVML power and energy were read on (the servers' own); None: NVML read
    # every visible GPU, power came from elsewhere, or a run from before the harness chose them
    power_gpus: list[PowerGpu] | None = None
    # what the decode floor is computed from (version 14 on); None: not recorded, or an endpoint run
    decode_floor: DecodeFloorInputs | None = None
    # the baseline's pace against the regime's reference run's; None: no reference, or not measured
    pace: PaceComparison | None = None
    # per workload, the covariate its intervals used, or why none (issue 81); [] before it existed
    covariates: list[CovariateUse] = []

    def cell(
        self, arm: str, workload: str, concurrency: int | LoadLevel, request_rate: float | None = None
    ) -> CellMetrics | None:
        """One cell; ``concurrency`` is a closed-loop level, or give the window's ``LoadLevel``."""
        level = concurrency if isinstance(concurrency, LoadLevel) else LoadLevel(concurrency, request_rate)
        return next((c for c in self.cells if (c.arm, c.workload, c.level) == (arm, workload, level)), None)

    def cells_of(self, arm: str) -> list[CellMetrics]:
        return [c for c in self.cells if c.arm == arm]

    def arm(self, name: str) -> ArmSummary | None:
        return next((a for a in self.arms if a.name == name), None)

    def window_keys(self) -> list[tuple[str, LoadLevel]]:
        """The (workload, load level) pairs measured, in the order they were first measured."""
        return list(dict.fromkeys((c.workload, c.level) for c in self.cells))

    def levels(self) -> list[LoadLevel]:
        """The load levels measured: closed loop by concurrency, then open loop by rate."""
        return sorted(
            {c.level for c in self.cells},
            key=LoadLevel.order,
        )


def parse_summary(data: Any, source: str) -> Summary:
    """A summary dict of any readable version as a ``Summary`` (``migrations.summary``); errors name
    the source and field."""
    try:
        return Summary.model_validate(migrations.upgrade(data, summary_steps.MIGRATIONS, source))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise UserError(f"{source}: {where}: {first['msg']}") from None


def load_summary(path: Path) -> Summary:
    """A stored ``summary.json`` (any readable version)."""
    return parse_summary(read_json(path), str(path))
