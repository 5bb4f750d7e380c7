"""``bench capacity``: per arm, the highest open-loop request rate at which the regime's SLO
attainment target holds, searched on the real server (run side: it starts servers, sends windows
and writes every probe and request as it ends; ``harness.derive.capacity`` derives the answer).

Each arm's server is started once (or, for an ``endpoint`` arm, reached) and probed with open-loop
windows of a fixed number of requests on the regime's arrival process, the same schedule for every
arm at the same rate. The next rate, or the rule that ends the search, comes from the probes so far
(``harness.derive.capacity.next_step``, pure, so the answer names the same rule from the stored
probes): doubling from ``start_rps`` while the SLO holds (up to ``max_rps``), halving while it does
not, then geometric bisection between the highest rate that held and the lowest that did not, until
they are within the resolution. Each probe's failed requests (HTTP errors, timeouts) are counted by
kind apart from its SLO misses, and said as it ends.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from harness.config.arms import Arm
from harness.config.workloads import LoadedWorkload
from harness.core.arrivals import arrival_offsets
from harness.core.errors import EngineError
from harness.core.probes.slo import meets
from harness.derive.capacity import Step, next_step, wilson_pct
from harness.results.capacity import PROBES_FILE, CapacityProbe, SearchSettings
from harness.results.files import append_jsonl
from harness.results.records import RequestRecord
from harness.run.client import run_client, run_window
from harness.run.plan import RunPlan
from harness.run.server import ExternalServer, Server, engine_server

# why the search never offers a rate far past capacity (an open loop's backlog grows without bound),
# and when it ends (the rules' names: harness.derive.capacity)
STOP_RULE = (
    "a rate is doubled only after it held, so none is offered above twice the highest rate that held, "
    "nor above max_rps; bisection stays between a rate that held and one that did not; each probe sends "
    "a fixed number of requests, so its backlog is bounded by them. The search ends when the bracket is "
    "within the resolution (resolution), when the SLO held at max_rps (max-rate), when no rate held and "
    "halving again would go below min_rps (min-rate), when no rate held and at the lowest rate the "
    "attainment's Wilson 95% interval lies below the target and halving did not raise it "
    "(missed-without-load: the SLO is missed without load), after max_probes windows (max-probes), or "
    "when the engine fails (ended-early)"
)


def error_kind(error: str) -> str:
    """A failed request's error in a few words, to count by: "HTTP 500", "timeout", "stalled", or the
    exception's name."""
    head = error.split(":", 1)[0].split("(", 1)[0].strip()
    return head if head.startswith("HTTP ") or len(head) <= 40 else head[:40] + "..."


class CapacitySearch:
    """One capacity search of a prepared regime (``RunPlan``) into ``directory``."""

    def __init__(self, plan: RunPlan, directory: Path, settings: SearchSettings, console: Console):
        self.plan, self.directory, self.settings, self.console = plan, directory, settings, console
        self.workload = next(w for w in plan.workloads if w.name == settings.workload)

    def arm_dir(self, arm: str) -> Path:
        path = self.directory / "arms" / arm
        path.mkdir(parents=True, exist_ok=True)
        return path

    def search(self, arm: Arm) -> list[CapacityProbe]:
        """The arm's probes, each on disk as it ends; an engine that fails ends its search there
        (what it measured is kept)."""
        probes: list[CapacityProbe] = []
        try:
            with self._server(arm) as server:
                server.wait_ready(self.plan.startup_timeout_s)
                self._warm_up(server)
                while isinstance(step := next_step(probes, self.settings), Step):
                    probes.append(self._probe(arm, server, len(probes), step))
        except EngineError as exc:
            self.console.print(f"[red]arm {arm.name}: search ended:[/] {escape(str(exc))}", soft_wrap=True)
        return probes

    def _warm_up(self, server: Server | ExternalServer) -> None:
        """The regime's warm-up requests, one at a time and not kept: no probe pays a cold start."""
        count = self.plan.load.warmup_requests
        if count:
            prompts = (self.workload.prompts * count)[:count]
            fields = self._fields(server)
            plan = self.plan
            run_client(
                run_window(
                    server.base_url, self.workload, prompts, 1, plan.sampling, plan.load, None, 0, fields
                )
            )

    def _fields(self, server: Server | ExternalServer) -> dict:
        fields = self.plan.adapter.request_fields(
            self.workload.definition.prompt_format, 0, _template(self.workload)
        )
        return fields | ({"model": server.served_model} if server.served_model else {})

    def _server(self, arm: Arm) -> Server | ExternalServer:
        log = self.arm_dir(arm.name) / "server.log"
        if arm.endpoint is not None:
            return ExternalServer.of_arm(arm, self.plan.adapter.health_path, log)
        draft = self.plan.draft_paths.get(arm.name)
        return engine_server(
            self.plan.adapter, self.plan.regime, arm, self.plan.model, log, draft_model=draft
        )

    def _probe(self, arm: Arm, server: Server | ExternalServer, index: int, step: Step) -> CapacityProbe:
        plan, settings, workload = self.plan, self.settings, self.workload
        rate, phase = step.rate_rps, step.phase
        count = settings.prompts_per_probe
        prompts = (workload.prompts * math.ceil(count / len(workload.prompts)))[:count]
        # the same draw for every arm at this rate: arms are compared on the same arrivals
        stream = f"capacity/{workload.name}/{rate:.9g}"
        schedule = arrival_offsets(
            count, rate, plan.load.arrival, plan.load.burstiness, plan.sampling.seed, stream
        )
        samples = self.arm_dir(arm.name) / "samples.jsonl"

        def keep(record: RequestRecord) -> None:
            append_jsonl(samples, record.to_json())

        fields = self._fields(server)
        result = run_client(
            run_window(
                server.base_url,
                workload,
                prompts,
                plan.load.max_concurrency or count,  # open loop: no cap of the client's own unless set
                plan.sampling,
                plan.load,
                keep,
                0,
                fields,
                index,
                schedule,
                rate,
                None,
                plan.adapter.absorb_chunk,
            )
        )
        if server.exit_code() is not None:
            raise EngineError(f"engine exited with status {server.exit_code()}; log {server.log_path}")
        slo = plan.regime.slo
        met = sum(meets(r, slo) for r in result.records) if slo else 0
        sent = len(result.records)
        if sent == 0:  # nothing to count: no evidence either way, not a failing rate
            raise EngineError(f"no request of the probe at {rate:.3g} req/s was sent")
        errors = Counter(error_kind(r.error) for r in result.records if r.error is not None)
        probe = CapacityProbe(
            index=index,
            rate_rps=rate,
            sent=sent,
            met=met,
            failed=sum(errors.values()),
            duration_s=result.duration_s,
            holds=100.0 * met / sent >= settings.target_pct,
            phase=phase,
            errors=dict(errors),
        )
        append_jsonl(self.arm_dir(arm.name) / PROBES_FILE, probe.model_dump(mode="json"))
        self.console.print(escape(probe_line(arm.name, probe)), highlight=False, soft_wrap=True)
        return probe


def probe_line(arm: str, probe: CapacityProbe) -> str:
    """One probe as it ends: its attainment with its interval, and its failed requests apart from
    its SLO misses."""
    low, high = wilson_pct(probe.met, probe.sent)
    word = "holds" if probe.holds else "does not hold"
    kinds = ", ".join(f"{kind}: {count}" for kind, count in sorted(probe.errors.items()))
    return (
        f"{arm} @ {probe.rate_rps:.3g} req/s ({probe.phase}): {probe.met}/{probe.sent} within the SLO "
        f"({probe.failed} failed, {probe.missed} missed a target), {100 * probe.met / probe.sent:.0f}% "
        f"[{low:.0f}, {high:.0f}], {word}" + (f"; failed: {kinds}" if kinds else "")
    )


def _template(workload: LoadedWorkload) -> dict | None:
    return workload.chat.template_kwargs if workload.chat else None
