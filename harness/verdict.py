"""The answer first: per workload and load level, which arm to deploy and whether it pays.

A pure function of the typed ``Summary``. Per (workload, load level) window:

- the fastest arm (the baseline included) and the fastest speculative arm;
- whether that speculative arm pays: its speedup's 95% interval (``harness.intervals``: the arms x
  rounds model over the server start-ups, or a machine calibration), corrected for the arms it was
  picked from, lies above 1 ("pays"), below 1 ("loses"), within 3% of 1 ("equivalent"), or spans 1
  ("indistinguishable from the baseline"); with no interval it is "unverified";
- $/Mtok at the baseline and at that arm, and the saving;
- whether its greedy outputs stayed identical to the baseline's;
- the caveats that qualify it, never hidden: a drafter that only exercises the mechanics, a
  drafter trained on the measured prompts, a failed arm, regime mismatches, lossy settings, and a
  baseline that does not reproduce itself (noise floor below 100%).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from harness import pooling
from harness.intervals import Estimate, stored_estimate
from harness.regime import LoadLevel
from harness.results.model import ArmSummary, CellMetrics, Summary


class Outcome(StrEnum):
    """What a window's verdict says of its fastest speculative arm (the values are the words the
    stored files and the export use; ``harness.verdict_text`` says each in plain words)."""

    PAYS = "pays"  # its interval, corrected for the pick, lies above 1
    LOSES = "loses"  # below 1
    EQUIVALENT = "equivalent"  # within the equivalence margin of 1
    INDISTINGUISHABLE = "indistinguishable"  # spans 1 and more than the margin: too noisy to tell
    UNVERIFIED = "unverified"  # no interval: the start-up spread was not measured
    NO_ARM = "no speculative arm measured"


EFFECTIVE_LOAD_GAP = (
    0.10  # two arms whose mean requests in flight differ more were compared at different load
)


@dataclass(frozen=True)
class WindowVerdict:
    workload: str
    level: LoadLevel
    baseline: CellMetrics
    best: CellMetrics | None  # the fastest speculative arm; None when none produced a speedup
    estimate: Estimate | None  # best's speedup with its interval (what every view shows for the cell)
    caveats: tuple[str, ...]  # about the best arm
    distribution: str | None = None  # temperature > 0: the best arm's distribution-check verdict
    candidates: int = 1  # speculative arms measured here: best was picked from them
    provisional: str | None = None  # why the numbers may not be the engine's alone (a busy neighbour)
    prompts: int = 0  # the prompts of one window (the verdict's scope)

    @property
    def concurrency(self) -> int:
        return self.level.concurrency

    @property
    def decision(self) -> Estimate | None:
        """best's estimate corrected for being the fastest of ``candidates`` arms
        (``Estimate.selected_from``): what the outcome rests on, so that picking the luckiest arm
        does not make it pay."""
        return self.estimate.selected_from(self.candidates) if self.estimate else None

    @property
    def outcome(self) -> Outcome:
        """pays / loses / equivalent / indistinguishable / unverified, after the selection correction."""
        if self.decision is None:
            return Outcome.NO_ARM
        return Outcome(self.decision.verdict)

    @property
    def corrected(self) -> bool:
        """Whether the selection correction changed the outcome the arm's own interval gives."""
        return self.estimate is not None and self.outcome != self.estimate.verdict

    @property
    def fastest(self) -> str:
        """The arm with the highest tok/s, the baseline included."""
        if self.best is None or self.estimate is None or self.estimate.point <= 1.0:
            return self.baseline.arm
        return self.best.arm

    @property
    def deploy(self) -> str:
        """The arm to deploy: the best speculative arm only where it pays, else the baseline."""
        return self.best.arm if self.best is not None and self.outcome == "pays" else self.baseline.arm

    @property
    def saving_pct(self) -> float | None:
        """$/Mtok saved by the best speculative arm against the baseline (negative: it costs more)."""
        return pooling.saving_pct(self.baseline.usd_per_mtok, self.best.usd_per_mtok if self.best else None)


@dataclass(frozen=True)
class SloCapacity:
    """The highest open-loop rate at which an arm still served ``target_pct`` of the requests within
    the SLO, from the measured rates: bounded when every rate (or none) met it, else interpolated."""

    arm: str
    workload: str
    kind: Literal["at least", "below", "about"]
    rate: float
    between: tuple[float, float] | None = None  # the measured rates an interpolation lies between

    def text(self) -> str:
        where = f"{self.arm} on {self.workload}"
        if self.kind == "at least":
            return f"{where}: at least {self.rate:g} req/s (every rate measured met it)"
        if self.kind == "below":
            return f"{where}: below {self.rate:g} req/s (the lowest rate measured missed it)"
        low, high = self.between or (self.rate, self.rate)
        return f"{where}: about {self.rate:.2f} req/s (interpolated between {low:g} and {high:g})"


def slo_capacity(summary: Summary) -> list[SloCapacity]:
    """Per arm and workload with open-loop windows and SLO targets: the SLO capacity."""
    if summary.slo is None:
        return []
    target = summary.slo.target_pct
    found = []
    for arm in summary.arms:
        for workload in dict.fromkeys(c.workload for c in summary.cells):
            points = sorted(
                (c.request_rate, c.slo_pct)
                for c in summary.cells_of(arm.name)
                if c.workload == workload and c.request_rate is not None and c.slo_pct is not None
            )
            if points:
                found.append(_capacity(arm.name, workload, points, target))
    return found


def _capacity(arm: str, workload: str, points: list[tuple[float, float]], target: float) -> SloCapacity:
    if points[0][1] < target:
        return SloCapacity(arm, workload, "below", points[0][0])
    for (rate_a, pct_a), (rate_b, pct_b) in zip(points, points[1:], strict=False):
        if pct_b < target:  # the first miss after a run of rates that met it: interpolate linearly
            rate = rate_a + (pct_a - target) / (pct_a - pct_b) * (rate_b - rate_a)
            return SloCapacity(arm, workload, "about", rate, (rate_a, rate_b))
    return SloCapacity(arm, workload, "at least", points[-1][0])


def _distribution_verdict(summary: Summary, arm: str) -> str | None:
    section = summary.distribution
    if section is None:
        return None
    found = section.arms.get(arm)
    return found.verdict if found else "not checked"


def arm_caveats(arm: ArmSummary | None) -> list[str]:
    """What qualifies an arm's numbers: where its drafter came from."""
    if arm is None:
        return []
    found = []
    drafter = arm.drafter or {}
    label = str(drafter.get("label") or "")
    if "mechanics only" in label:
        found.append(f"{arm.name}: {label}")
    held_out = drafter.get("held_out") or {}
    if held_out.get("trained_on"):
        found.append(
            f"{arm.name}: drafter trained on {held_out['trained_on']} of the measured prompts (tau flattered)"
        )
    return found


def neighbour_text(cell: CellMetrics) -> str:
    """What else ran during a cell's windows: on the CPU and, where watched, on its GPUs."""
    parts = []
    if cell.others_cpu_cores is not None:
        steal = 100 * (cell.steal_share or 0)
        parts.append(f"other processes {cell.others_cpu_cores:.2f} cores, hypervisor steal {steal:.0f}%")
    if cell.gpu_other_processes:
        sm = "" if cell.gpu_others_sm_pct is None else f" using {cell.gpu_others_sm_pct:.0f}% of the SMs"
        parts.append(f"{cell.gpu_other_processes} other process(es) on its GPUs{sm}")
    return "; ".join(parts)


def cpu_caveats(cells: list[CellMetrics]) -> list[str]:
    """Windows whose numbers may be the client's or the schedule's: a client that used most of a
    core, or fell behind its arrival schedule (a busy neighbour is the verdict's banner:
    ``provisional_text``)."""
    found = []
    for cell in cells:
        if cell.client_busy:
            found.append(
                f"{cell.arm}: the harness's client used {cell.client_cpu_cores:.2f} cores, its numbers "
                "may be the client's"
            )
        if cell.behind_schedule:
            found.append(
                f"{cell.arm}: the client fell behind its arrival schedule (p90 lag "
                f"{cell.schedule_lag_ms_p90:.0f} ms; sent {cell.achieved_rate_rps or 0:.2f} of "
                f"{cell.request_rate:g} req/s): the load arrived lighter than stated"
            )
    return found


def provisional_text(cells: list[CellMetrics]) -> str | None:
    """Why a window's verdict is provisional: its cells were measured beside a busy neighbour."""
    noisy = [f"{c.arm}: {neighbour_text(c)}" for c in cells if c.noisy_neighbour]
    return "measured beside a busy neighbour: " + "; ".join(noisy) if noisy else None


def load_caveat(baseline: CellMetrics, best: CellMetrics | None) -> list[str]:
    """Two arms compared at different effective load: their mean requests in flight differ by more
    than ``EFFECTIVE_LOAD_GAP`` (a window that drains runs below its concurrency, by how fast each
    arm finishes). Closed loop only: at one open-loop rate the arms get the same offered load, and
    a faster arm has fewer requests in flight by Little's law."""
    if best is None or not baseline.mean_in_flight or best.mean_in_flight is None:
        return []
    if baseline.request_rate is not None:
        return []
    if abs(best.mean_in_flight / baseline.mean_in_flight - 1) <= EFFECTIVE_LOAD_GAP:
        return []
    return [
        f"effective load differs: {baseline.arm} averaged {baseline.mean_in_flight:.2f} requests in flight, "
        f"{best.arm} {best.mean_in_flight:.2f} (stated {baseline.concurrency}): the window drains, "
        f"use num_prompts >= {4 * baseline.concurrency}"
    ]


def estimate_of(cell: CellMetrics) -> Estimate | None:
    """A cell's speedup with the interval the summary stored (``harness.intervals``' model)."""
    return stored_estimate(cell, rounds=cell.server_starts)


def window_verdicts(summary: Summary) -> list[WindowVerdict]:
    """One verdict per (workload, load level), in the order measured."""
    verdicts = []
    for workload, level in summary.window_keys():
        baseline = summary.cell(summary.baseline_arm, workload, level)
        if baseline is None:
            continue  # the baseline failed: no speedup exists to judge (run_caveats says so)
        speculative = [
            c
            for c in summary.cells
            if (c.workload, c.level) == (workload, level)
            and c.arm != summary.baseline_arm
            and c.speedup is not None
        ]
        best = max(speculative, key=lambda c: c.speedup or 0.0, default=None)
        verdicts.append(
            WindowVerdict(
                workload=workload,
                level=level,
                baseline=baseline,
                best=best,
                estimate=estimate_of(best) if best else None,
                caveats=tuple(
                    (arm_caveats(summary.arm(best.arm)) if best else [])
                    + cpu_caveats([baseline] + ([best] if best else []))
                    + load_caveat(baseline, best)
                ),
                distribution=_distribution_verdict(summary, best.arm) if best else None,
                candidates=max(1, len(speculative)),
                provisional=provisional_text([baseline] + ([best] if best else [])),
                prompts=baseline.requests_total // max(baseline.repeats, 1),
            )
        )
    return verdicts


def self_draft_expectations(summary: Summary) -> list[str]:
    """What a self-draft's tau should be when the run samples (temperature > 0): it depends on how
    the draft samples. Greedy drafting (vLLM's default) proposes the target's argmax and is treated
    as one-hot, so even a correct engine accepts each drafted token with the target's probability
    of its argmax, not 1; probabilistic drafting proposes samples of the target's own distribution,
    which an exact rejection sampler accepts every time: tau near K + 1."""
    if summary.distribution is None:  # greedy: a self-draft's tau is ~K + 1 by construction
        return []
    found = []
    for arm in summary.arms:
        if not str((arm.drafter or {}).get("label", "")).startswith("self-draft") or not arm.draft_sampling:
            continue
        top = (arm.num_speculative_tokens or 0) + 1
        if arm.draft_sampling == "greedy":
            found.append(
                f"{arm.name} drafts greedily (draft_sample_method greedy): at temperature > 0 each drafted "
                "token is accepted with the target's probability of its argmax, not 1, so its tau stays "
                f"below K + 1 = {top} on a correct engine; probabilistic drafting approaches it"
            )
        else:
            found.append(
                f"{arm.name} samples its drafts from the target itself (draft_sample_method "
                f"{arm.draft_sampling}): an exact rejection sampler accepts them all, tau near K + 1 = "
                f"{top}; well below it, suspect the engine"
            )
    return found


def failed_requests(summary: Summary) -> list[str]:
    """Per arm, the requests that ended in an error (a timeout, a refused request, a response the
    client could not read): its figures count only the others."""
    found = []
    for arm in summary.arms:
        cells = summary.cells_of(arm.name)
        failed = sum(c.requests_errored for c in cells)
        if failed:
            total = sum(c.requests_total for c in cells)
            where = ", ".join(
                f"{c.workload} {c.level.short()}: {c.requests_errored}" for c in cells if c.requests_errored
            )
            found.append(
                f"arm {arm.name}: {failed} of {total} requests failed ({where}); its figures count only the "
                "completed ones (the errors are in its samples.jsonl)"
            )
    return found


def run_caveats(summary: Summary) -> list[str]:
    """What qualifies every verdict of the run."""
    found = [f"regime mismatch (run with --allow-mismatch): {m}" for m in summary.mismatches]
    found += [f"lossy acceptance allowed: {s}" for s in summary.lossy_settings]
    found += [f"known engine defect, forced (--allow-known-defect): {d}" for d in summary.known_defects]
    found += [f"engine patched: {p}" for p in summary.engine_patches]
    found += [
        f"arm {a.name}: regime mismatch: {m}"
        for a in summary.arms
        for m in a.mismatches
        if m not in summary.mismatches
    ]
    found += [f"arm {a.name} is {a.status}: not in any verdict" for a in summary.arms if a.status != "ok"]
    found += [
        f"arm {arm}: its start-ups ran in other rounds than the baseline's (retried on resume), so they "
        "are not paired by round: its speedup has no interval (drift between those rounds would be in it); "
        "a new run measures it with the baseline"
        for arm in (summary.timing.unpaired_arms(summary.baseline_arm) if summary.timing else [])
    ]
    found += failed_requests(summary)
    mechanics = [a.name for a in summary.arms if "mechanics only" in str((a.drafter or {}).get("label", ""))]
    if mechanics:
        found.append(
            f"mechanics only: {', '.join(mechanics)} draft with untrained weights or the target itself; "
            "their speed is what the method costs here, their tau says nothing about the method"
        )
    found += self_draft_expectations(summary)
    floor = summary.exactness.noise_floor if summary.exactness.applicable else None
    if floor is not None and floor.identical_pct is not None and floor.identical_pct < 100.0:
        found.append(
            f"noise floor: the baseline reproduced itself on {floor.identical_pct:.0f}% of "
            f"{floor.compared} prompts: an arm's divergences up to that share are numerics, not speculation"
        )
    return found
