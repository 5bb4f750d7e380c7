"""``bench capacity``: per arm, the highest open-loop request rate at which the regime's SLO
attainment target holds, searched on the real server (run side: it starts servers, sends windows
and writes every probe and request as it ends; ``harness.capacity_analysis`` derives the answer).

Each arm's server is started once (or, for an ``endpoint`` arm, reached) and probed with open-loop
windows of a fixed number of requests on the regime's arrival process, the same schedule for every
arm at the same rate. The next rate comes from the probes so far (``next_rate``): doubling from
``start_rps`` while the SLO holds, halving while it does not, then geometric bisection between the
highest rate that held and the lowest that did not, until they are within the resolution.
"""

from __future__ import annotations

import math
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from harness.arrivals import arrival_offsets
from harness.client import run_client, run_window
from harness.errors import EngineError
from harness.plan import RunPlan
from harness.probes.slo import meets
from harness.regime import Arm
from harness.results.capacity import PROBES_FILE, CapacityProbe, SearchSettings
from harness.results.files import append_jsonl
from harness.results.records import RequestRecord
from harness.server import ExternalServer, Server, engine_server
from harness.workloads import LoadedWorkload

# why the search never offers a rate far past capacity (an open loop's backlog grows without bound)
STOP_RULE = (
    "a rate is doubled only after it held, so none is offered above twice the highest rate that held; "
    "bisection stays between a rate that held and one that did not; each probe sends a fixed number of "
    "requests, so its backlog is bounded by them; the search ends when the bracket is within the "
    "resolution, after max_probes windows, below min_rps, or when halving the rate did not raise the "
    "attainment (the SLO is missed without load)"
)


def next_rate(probes: list[CapacityProbe], settings: SearchSettings) -> tuple[float, str] | None:
    """The next rate to probe and its phase, from the probes so far; None when the search is done."""
    if not probes:
        return settings.start_rps, "bracket"
    if len(probes) >= settings.max_probes:
        return None
    failing = [p.rate_rps for p in probes if not p.holds]
    ceiling = min(failing) if failing else None
    held = [p.rate_rps for p in probes if p.holds and (ceiling is None or p.rate_rps < ceiling)]
    if ceiling is None:
        return max(held) * 2, "bracket"
    if not held:
        lowest, above = sorted(probes, key=lambda p: p.rate_rps)[:2] if len(probes) > 1 else (probes[0], None)
        share = lowest.met / max(lowest.sent, 1)
        if above is not None and 0 < share <= above.met / max(above.sent, 1):
            # some met it, and halving the load did not raise that: missed without load, not for it
            # (none at both rates is an overload still being halved out of)
            return None
        lower = ceiling / 2
        return (lower, "bracket") if lower >= settings.min_rps else None
    floor = max(held)
    if ceiling / floor - 1 <= settings.resolution:
        return None
    return math.sqrt(floor * ceiling), "bisect"


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
                while (step := next_rate(probes, self.settings)) is not None:
                    probes.append(self._probe(arm, server, len(probes), *step))
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

    def _probe(
        self, arm: Arm, server: Server | ExternalServer, index: int, rate: float, phase: str
    ) -> CapacityProbe:
        plan, settings, workload = self.plan, self.settings, self.workload
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
        probe = CapacityProbe(
            index=index,
            rate_rps=rate,
            sent=sent,
            met=met,
            failed=sum(not r.ok for r in result.records),
            duration_s=result.duration_s,
            holds=sent > 0 and 100.0 * met / sent >= settings.target_pct,
            phase=phase,  # type: ignore[arg-type]
        )
        append_jsonl(self.arm_dir(arm.name) / PROBES_FILE, probe.model_dump(mode="json"))
        word = "holds" if probe.holds else "does not hold"
        self.console.print(
            f"{arm.name} @ {rate:.3g} req/s ({phase}): {met}/{sent} within the SLO, {word}", highlight=False
        )
        return probe


def _template(workload: LoadedWorkload) -> dict | None:
    return workload.chat.template_kwargs if workload.chat else None
