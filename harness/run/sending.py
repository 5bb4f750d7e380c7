"""A window's requests sent through the client, behind a progress bar on the terminal.

Only sends: what a window measures around its requests is ``harness.run.window``'s, and where the
time goes (measured or warm-up) is the runner's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

from harness.config.level import LoadLevel
from harness.config.workloads import LoadedWorkload, Prompt
from harness.results import RequestRecord
from harness.run.client import RampResult, WindowResult, run_client, run_ramp, run_window
from harness.run.plan import RunPlan
from harness.run.server import ExternalServer, Server


def model_field(server: Server | ExternalServer) -> dict[str, str]:
    """An endpoint's requests name the model it serves; the harness's own servers serve "target"."""
    return {"model": server.served_model} if server.served_model else {}


@dataclass(frozen=True)
class Sender:
    """Sends the plan's requests to a server, each window behind its own progress bar."""

    plan: RunPlan
    console: Console

    def window(
        self,
        server: Server,
        workload: LoadedWorkload,
        prompts: list[Prompt],
        level: LoadLevel,
        label: str,
        on_done: Callable[[RequestRecord], None],
        repeat: int = 0,
        logprobs: bool = False,
        schedule: list[float] | None = None,
        seeds: list[int] | None = None,
    ) -> WindowResult:
        """A window's ``prompts`` at ``level``, each record to ``on_done`` as it ends; with
        ``logprobs``, the top logprobs the exactness probe (or the distribution check) reads."""
        columns = (
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
        )
        with Progress(*columns, console=self.console, transient=False) as progress:
            task = progress.add_task(label, total=len(prompts))

            def done(record: RequestRecord) -> None:
                on_done(record)
                progress.advance(task)

            regime = self.plan.regime
            # the distribution check needs the sampled token's logprob and the top-1 beside it: vLLM lists
            # the sampled token first, then the top-k, and its chat API keeps the first k entries, so 2
            top_logprobs = (
                (2 if regime.sampling.temperature > 0 else regime.exactness.top_logprobs) if logprobs else 0
            )
            chat = workload.chat.template_kwargs if workload.chat else None
            fields = self.plan.adapter.request_fields(workload.definition.prompt_format, top_logprobs, chat)
            fields |= model_field(server)
            result = run_client(
                run_window(
                    server.base_url,
                    workload,
                    prompts,
                    level.concurrency,
                    regime.sampling,
                    regime.load,
                    done,
                    top_logprobs,
                    fields,
                    repeat,
                    schedule,
                    level.request_rate,
                    seeds,
                    self.plan.adapter.absorb_chunk,
                )
            )
        return result

    def ramp(
        self,
        server: Server,
        workload: LoadedWorkload,
        label: str,
        on_done: Callable[[RequestRecord], None],
        start: int,
        dues: list[list[float]],
        stage_end: Callable[[int], None],
    ) -> RampResult:
        """The ramp's requests, with a progress bar over its planned seconds."""
        load, regime = self.plan.load, self.plan.regime
        columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn())
        with Progress(*columns, console=self.console, transient=False) as progress:
            task = progress.add_task(label, total=load.ramp_duration_s())
            clock = time.monotonic()

            def done(record: RequestRecord) -> None:
                on_done(record)
                progress.update(task, completed=min(time.monotonic() - clock, load.ramp_duration_s()))

            fields = self.plan.adapter.request_fields(
                workload.definition.prompt_format, 0, workload.chat.template_kwargs if workload.chat else None
            ) | model_field(server)
            result = run_client(
                run_ramp(
                    server.base_url,
                    workload,
                    workload.prompts,
                    load.ramp,
                    regime.sampling,
                    load,
                    done,
                    fields,
                    start,
                    dues,
                    self.plan.adapter.absorb_chunk,
                    stage_end,
                )
            )
            progress.update(task, completed=load.ramp_duration_s())
        return result
