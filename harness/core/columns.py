"""Every column the harness writes beside its metrics (identity, configuration, counts), with its
unit and meaning: the export's data dictionary (``columns.csv``) reads ``column_doc``, which finds a
metric in the metric registry (``harness.core.metrics``) and any other column here. ``test_export``
fails on an exported column missing from both, so a new column cannot ship undocumented."""

from __future__ import annotations

import re
from dataclasses import dataclass

from harness.core.metrics import METRICS


@dataclass(frozen=True)
class Column:
    """A column the harness writes (the export's tables, the history): its unit and meaning, for the
    export's data dictionary (``columns.csv``). A metric (``Metric``) is one with a direction too."""

    name: str  # units in the name
    unit: str
    description: str

    @property
    def direction(self) -> str:
        return ""  # identity, configuration and counts have none


# Every other column the harness writes (identity, configuration, counts), as (name, unit, meaning):
# the metrics document themselves (harness.core.metrics).
_OTHER_COLUMNS = tuple(
    Column(name, unit, description)
    for name, unit, description in (
        ("run_id", "", "the run's id (its directory name under results/)"),
        ("regime", "", "the regime's name"),
        (
            "regime_fingerprint",
            "",
            "hash of the resolved regime: runs with different ones are not comparable",
        ),
        ("environment_fingerprint", "", "hash of the measured machine and software (not recorded: empty)"),
        (
            "verdict",
            "",
            "on the row of the window's fastest speculative arm only: the window's verdict on it, corrected "
            "for the number of arms it was picked from: pays, loses, equivalent (within 3% of the baseline), "
            "indistinguishable (too noisy to tell), or unverified (one start-up per arm, no calibration); "
            "empty on every other row",
        ),
        (
            "deploy",
            "",
            "true on the row of the arm to deploy here: the best speculative arm where it pays, else the "
            "baseline",
        ),
        ("arm", "", "the arm's name in the regime"),
        ("method", "", "speculative method: baseline, ngram, eagle3, dflash, draft_model, ..."),
        ("num_speculative_tokens", "tokens", "draft depth K (empty for the baseline)"),
        ("drafter", "", "the drafter's label (provenance in regime.json)"),
        ("workload", "", "the workload's name in the regime"),
        ("workloads", "", "the category's workloads, comma-separated"),
        ("category", "", "the workload's category (code, chat, ...)"),
        ("prompt_format", "", "raw or chat prompts"),
        ("concurrency", "requests", "closed loop: requests in flight; open loop: at most in flight"),
        ("request_rate", "requests/s", "open loop: the offered request rate (empty: closed loop)"),
        ("repeats", "count", "repeats of the window pooled into the cell"),
        ("repeat", "", "the repeat's index within its cell, from 0"),
        ("requests_total", "count", "requests sent in the cell's windows"),
        ("requests_ok", "count", "requests that succeeded"),
        ("requests_errored", "count", "requests that failed"),
        ("requests_odd", "count", "finished requests whose stream was not decoding (requests' odd)"),
        ("output_tokens", "tokens", "output tokens of successful requests, counted from token ids"),
        (
            "input_tokens",
            "tokens",
            "prompt tokens of successful requests, as the engine counted them (empty: "
            "it did not say for every request)",
        ),
        ("prompt_tokens", "tokens", "the prompt's tokens as the engine counted them"),
        ("duration_s", "s", "wall time of the measured window(s)"),
        ("acceptance_source", "", "where tau came from: the engine's counters, per-response fields, or none"),
        ("acceptance_rate", "fraction", "accepted draft tokens / draft tokens"),
        (
            "acceptance_pos_<i>",
            "fraction",
            "accepted at draft position i + 1 / drafts (i counts from 0; the "
            "findings and the report's figure count positions from 1)",
        ),
        (
            "conditional_pos_<i>",
            "fraction",
            "accepted at draft position i + 1 / drafts that got that far: acceptance_pos_<i> / "
            "acceptance_pos_<i-1> (position 0: its marginal)",
        ),
        (
            "acceptance_checks",
            "",
            "the acceptance counters' consistency checks that failed (tau = 1 + the sum of the "
            "acceptance_pos columns; those never rising); empty (null): both passed",
        ),
        ("drafts", "count", "draft steps over the window (the engine's own counting: tau's denominator)"),
        ("draft_tokens", "tokens", "tokens proposed by the drafter"),
        ("accepted_tokens", "tokens", "draft tokens the target accepted"),
        (
            "accepted_past_stop",
            "tokens",
            "of accepted_tokens, drafts accepted past a request's stop, at least: counted in tau, never "
            "output (probes.acceptance.ACCEPTED_PAST_STOP); empty: nothing accepted",
        ),
        (
            "request_tau",
            "tokens/step",
            "the request's own tau, from the acceptance its response reported (SGLang's spec details, "
            "vLLM 0.33's per-request metrics); empty where the engine reports none",
        ),
        (
            "context_share_pct",
            "%",
            "output 3-grams found in the prompt or earlier in the output (what a "
            "prompt-lookup drafter can match)",
        ),
        ("output_ngrams", "count", "output 3-grams: the copy shares' denominator"),
        (
            "turn",
            "",
            "conversation workloads: the turn the cell measured (1 = the first; the workload is "
            "<name>.turn<t>); empty: a single-turn workload",
        ),
        ("power_source", "", "nvml or rapl (empty: power not measured)"),
        ("power_note", "", "why power was not measured, as the run recorded it"),
        ("energy_j", "J", "energy over the cell's windows"),
        ("throttled", "", "the GPU slowed its clocks for heat or power during a window"),
        ("speedup_low", "x", "lower bound of the speedup's 95% interval"),
        ("speedup_high", "x", "upper bound of the speedup's 95% interval"),
        (
            "speedup_interval",
            "",
            "where the interval's spread is from: server_starts (+prior: with the half-normal prior on "
            "it), calibration or both",
        ),
        ("speedup_rounds", "count", "rounds of server start-ups the speedup's model used"),
        ("speedup_df", "count", "degrees of freedom of the speedup's t interval"),
        ("speedup_log_se", "", "standard error of log(speedup) in the arms x rounds model"),
        (
            "speedup_looks",
            "count",
            "looks at the interval a run that adds rounds until decided could take; the interval is "
            "at the level fitted to them (empty: 1, a fixed number of rounds)",
        ),
        (
            "speedup_first_look",
            "count",
            "rounds at that run's first look (server_starts.min); empty: one look, or before version 12 "
            "(then the looks' level is Bonferroni's 1 - 0.05/looks)",
        ),
        (
            "speedup_model_arms",
            "count",
            "arms with the baseline in the model the speedup was fitted in; the winner of several is "
            "corrected at max-t where they all shared it, else Bonferroni (empty: before version 12)",
        ),
        (
            "speedup_prompts",
            "count",
            "prompts whose sampling the interval holds (a jackknife over them): the interval is about the "
            "workload they were sampled from (empty: about these prompts, or before version 13)",
        ),
        ("speedup_prompt_log_se", "", "the prompts' sampling's part of the speedup's log standard error"),
        (
            "speedup_own_spread",
            "",
            "true: the interval's start-up term is the arm's own paired differences with the baseline (it "
            "varies more than the other arms)",
        ),
        (
            "speedup_calibration_refused",
            "",
            "true: the run varied more than its calibration, which was not pooled",
        ),
        (
            "speedup_covariate_r2",
            "",
            "the share of the prompts' spread in the speedup that the copy share of the baseline's answers "
            "explained (the regression estimator; empty: no covariate)",
        ),
        (
            "speedup_covariate_shift",
            "",
            "how far the covariate moved the log speedup: from these prompts' mean copy share to the "
            "workload's (empty: no covariate)",
        ),
        ("mean_in_flight", "requests", "requests in flight on average in the cell's windows (Little's law)"),
        (
            "engine_step_count",
            "steps",
            "the engine's own steps in the window(s) (vLLM's tokens-per-step histogram count; empty: not "
            "counted)",
        ),
        (
            "step_ms",
            "ms",
            "window time per engine step: the step cost model's sample (harness.derive.cost_model)",
        ),
        ("client_cpu_cores", "cores", "CPU the harness client used during the windows"),
        (
            "step_cost",
            "x",
            "the cost model's step cost: the arm's engine step over the baseline's in the same window, "
            "geometric mean over rounds (harness.derive.cost_model); empty for the baseline",
        ),
        ("step_cost_low", "x", "lower bound of the step cost's 95% interval (empty: one round, unverified)"),
        ("step_cost_high", "x", "upper bound of the step cost's 95% interval"),
        (
            "break_even_tau",
            "tokens/step",
            "the tau at which the arm's step cost would break even against the baseline: 1 + (cost / "
            "occupancy - 1) / proposing share",
        ),
        ("break_even_tau_low", "tokens/step", "lower bound of the break-even tau's 95% interval"),
        ("break_even_tau_high", "tokens/step", "upper bound of the break-even tau's 95% interval"),
        ("stage", "", "ramp: the stage's index in load.ramp (from 0); empty: the whole ramp"),
        ("label", "", "ramp: the stage's load (@4: 4 in flight; @2req/s: open loop); ramp: the whole"),
        ("start_s", "s", "ramp: when the stage begins, on the ramp window's clock (planned)"),
        ("end_s", "s", "ramp: when the stage ends, on the ramp window's clock (planned)"),
        ("start_ups", "", "ramp: the server start-ups (one ramp window each) pooled in the row"),
        ("requests_sent", "", "ramp: requests sent inside the stage, over every start-up"),
        ("tpot_ms_p50_inside", "ms", "ramp: median TPOT of the requests sent and finished inside the stage"),
        ("tpot_ms_p90_inside", "ms", "ramp: p90 TPOT of the requests sent and finished inside the stage"),
        (
            "tpot_ms_p90_across",
            "ms",
            "ramp: p90 TPOT of the requests in flight as the stage began (they crossed its boundary)",
        ),
        ("requests_across", "", "ramp: the requests in flight as the stage began, over every start-up"),
        (
            "engine_steps",
            "steps",
            "ramp: the steps an adaptive engine ran at the stage's end (SGLang's gauge), start-ups' mean",
        ),
        (
            "drafted_per_draft",
            "tokens",
            "drafted tokens per draft in the span, from the engine's counters: the K it ran (0: no draft)",
        ),
        ("engine_cpu_cores", "cores", "CPU the engine's processes used during the windows"),
        ("others_cpu_cores", "cores", "CPU every other process used during the windows"),
        ("steal_share", "fraction", "share of the windows' time the hypervisor took"),
        (
            "gpu_others_sm_pct",
            "%",
            "SM utilisation of other processes on the engine's GPUs (the most of any window)",
        ),
        ("gpu_other_processes", "count", "other processes on the engine's GPUs"),
        ("noisy_neighbour", "", "another process or the hypervisor took enough to move the numbers"),
        ("client_busy", "", "the client used most of a core: its numbers may be the client's"),
        ("precision_metric", "", "adaptive repeats: the metric whose interval decided when to stop"),
        ("rel_half_width", "fraction", "adaptive repeats: the relative half-width reached"),
        ("precision_target", "fraction", "adaptive repeats: the relative half-width asked for"),
        ("extra_repeat_s", "s", "engine time spent on repeats beyond the minimum"),
        ("behind_schedule", "", "open loop: the client fell behind its schedule, so it set the load"),
        ("exactness_compared", "count", "prompts compared with the baseline"),
        ("exactness_pairs", "count", "prompt pairs compared with the baseline"),
        ("near_tie_pct", "%", "prompts that left the baseline's output at a near tie (numerics)"),
        ("unknown_pct", "%", "prompts that left the baseline's output where no logprob tells why"),
        ("prompt_id", "", "the prompt's id in its workload"),
        ("ok", "", "the request succeeded"),
        ("error", "", "the request's error (empty when it succeeded)"),
        ("finish_reason", "", "why the engine stopped: length, stop, ..."),
        ("t_scheduled_s", "s", "open loop: when the request was due, from the window's start"),
        ("client_lag_ms", "ms", "how late the client sent the request after it was due"),
        ("queueing_ms", "ms", "how long the request waited for a max_concurrency slot"),
        ("t_send_s", "s", "when the request was sent, from the window's start"),
        ("ttft_ms", "ms", "time to first token: first token time - send time"),
        ("tpot_ms", "ms", "time per output token: (E2E - TTFT) / (output tokens - 1)"),
        ("e2e_ms", "ms", "end-to-end latency: send to the end of the stream"),
        ("odd", "", "why the stream was not decoding (its TPOT is a burst's): empty for a normal one"),
        ("within_slo", "", "the request met every SLO target (empty: the regime sets none)"),
    )
)

# the registry's other columns by name; ``column_doc`` reads METRICS at call time, so a metric added
# to it is documented without being listed here
OTHER_COLUMNS: dict[str, Column] = {column.name: column for column in _OTHER_COLUMNS}


def column_doc(name: str) -> tuple[str, str, str]:
    """(unit, description, direction) of an exported column, from the registry; ``KeyError`` for an
    undocumented one. Spread list columns (``acceptance_pos_3``) share their pattern's entry."""
    spread = name.startswith(("acceptance_pos_", "conditional_pos_"))
    key = re.sub(r"_\d+$", "_<i>", name) if spread else name
    column = METRICS.get(key) or OTHER_COLUMNS[key]
    return column.unit, column.description, column.direction
