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
from typing import Literal

from harness import pooling
from harness.intervals import (
    EQUIVALENCE_MARGIN,
    FEW_DF,
    Estimate,
    design_level,
    interval_text,
    stored_estimate,
)
from harness.regime import LoadLevel
from harness.results.model import ArmSummary, CellMetrics, Summary

OUTCOME_TEXT = {
    "pays": "pays",
    "loses": "loses",
    "equivalent": f"is within {100 * EQUIVALENCE_MARGIN:.0f}% of the baseline",
    "indistinguishable": "indistinguishable from the baseline",
    "unverified": "unverified",  # the estimate's text says faster or slower, and why unverified
}
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
    def outcome(self) -> str:
        """pays / loses / equivalent / indistinguishable / unverified, after the selection correction."""
        if self.decision is None:
            return "no speculative arm measured"
        return self.decision.verdict

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

    def selection_text(self) -> str:
        """What the selection correction did, when there was a selection to correct."""
        if self.candidates <= 1 or self.estimate is None or self.decision is None:
            return ""
        if self.estimate.verdict == self.decision.verdict or self.decision.low is None:
            return ""
        return (
            f" (best of {self.candidates} arms: not after correcting for the selection, "
            f"{interval_text(self.decision.low, self.decision.high)})"  # type: ignore[arg-type]
        )

    def text(self) -> str:
        where = f"{self.workload} {self.level.short()}"
        if self.best is None or self.estimate is None:
            tok_s = _num(self.baseline.output_tok_s, ".1f")
            return f"{where}: no speculative arm measured; baseline {tok_s} tok/s"
        said = f"{OUTCOME_TEXT[self.outcome]} at {self.estimate.text()}{self.selection_text()}"
        if self.outcome == "unverified":
            said = f"at {self.estimate.text()}"
        head = (
            f"{where}: {self.best.arm} {said}"
            if self.fastest == self.best.arm
            else f"{where}: baseline fastest; best speculative arm {self.best.arm} {said}"
        )
        if self.provisional:
            head = f"PROVISIONAL ({self.provisional}): {head}"
        same = (
            identical_text(self.best)
            if self.distribution is None
            else f"output distribution {self.distribution}"
        )
        parts = [head, f"$/Mtok {self._cost()}", same]
        return "; ".join(parts) + (f" [{'; '.join(self.caveats)}]" if self.caveats else "")

    def _cost(self) -> str:
        before = self.baseline.usd_per_mtok
        after = self.best.usd_per_mtok if self.best else None
        if before is None or after is None:
            return "not priced"
        saving = self.saving_pct
        change = "" if saving is None else f" ({-saving:+.0f}%)"
        return f"{before:.2f} -> {after:.2f}{change}"


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


def capacity_lines(summary: Summary) -> list[str]:
    found = slo_capacity(summary)
    if not found:
        return []
    assert summary.slo is not None
    head = (
        f"SLO capacity (the highest request rate with {summary.slo.target_pct:g}% of requests within "
        f"{summary.slo.describe()}):"
    )
    return [head] + [f"  {c.text()}" for c in found]


def _distribution_verdict(summary: Summary, arm: str) -> str | None:
    section = summary.distribution
    if section is None:
        return None
    found = section.arms.get(arm)
    return found.verdict if found else "not checked"


_STATISTIC_TEXT = {
    "mean_logprob": "mean logprob",
    "output_tokens": "output tokens",
    "top1_share": "top-1 share",
}


def distribution_lines(summary: Summary) -> list[str]:
    """Temperature > 0: each speculative arm's distribution-check verdict with its evidence: per
    statistic the medians, Cliff's delta within prompts with its equivalence interval, the p-value."""
    section = summary.distribution
    if section is None:
        return []
    if section.margin is None:  # a summary from before the equivalence test
        rule = (
            f"two-sided Mann-Whitney at {section.alpha:g} / 3, shifted when also |Cliff's delta| >= "
            f"{section.min_effect:g}"
        )
    else:
        rule = (
            f"compared within each prompt; consistent with lossless when every statistic's Cliff's delta "
            f"has its {section.confidence:.1%} interval inside +-{section.margin:g}, shifted when one "
            f"differs at {section.alpha:g} / 3 with |delta| >= {section.min_effect:g}"
        )
    lines = [
        f"Distribution check ({section.samples_per_prompt} seeded samples per prompt per arm against "
        f"{summary.baseline_arm}'s; {rule}):"
    ]
    for arm, result in section.arms.items():
        tests = "; ".join(
            f"{_STATISTIC_TEXT[t.statistic]} {_num(t.arm_median, '.3g')} vs {_num(t.baseline_median, '.3g')} "
            f"({_delta_text(t.delta, t.low, t.high)}, p {_num(t.p_value, '.2g')})"
            for t in result.tests
        )
        needed = result.samples_per_prompt_needed
        hint = "" if needed is None else f"; i.e. samples_per_prompt: {needed}"
        lines.append(f"  {arm}: {result.verdict}: {tests}{hint}")
    if not section.arms:
        lines.append("  no speculative arm has samples to compare")
    return lines


def _delta_text(delta: float | None, low: float | None, high: float | None) -> str:
    interval = "" if low is None or high is None else f" [{low:+.2f}, {high:+.2f}]"
    return f"delta {_num(delta, '+.2f')}{interval}"


def _num(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def identical_counts(cell: CellMetrics) -> tuple[int, int, int] | None:
    """(identical, near ties, compared) prompts of a cell against the baseline; None: not compared."""
    shares = cell.exactness
    if shares is None or not shares.compared:
        return None

    def count(pct: float | None) -> int:
        return round(shares.compared * (pct or 0.0) / 100)

    return count(shares.identical_pct), count(shares.near_tie_pct), shares.compared


def identical_text(cell: CellMetrics) -> str:
    counts = identical_counts(cell)
    if counts is None:
        return "outputs not compared"
    same, near, compared = counts
    ties = f" ({near} near tie{'s' if near > 1 else ''})" if near else ""
    return f"outputs identical {same}/{compared}{ties}"


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


def interval_note(summary: Summary) -> str:
    """Where the verdicts' intervals come from, in one line."""
    cells = [c for c in summary.cells if c.arm != summary.baseline_arm and c.speedup is not None]
    sources = {c.speedup_interval for c in cells if c.speedup_interval}
    rounds = max((c.speedup_rounds or c.server_starts for c in cells), default=1)
    if not sources:
        return (
            "unverified: 1 start-up per arm, no calibration (set load.server_starts >= 2, or bench calibrate)"
        )
    dfs = sorted({c.speedup_df for c in cells if c.speedup_df})
    df_text = f"{dfs[0]}" if len(dfs) == 1 else f"{dfs[0]}-{dfs[-1]}" if dfs else "-"
    few = "; few degrees of freedom: relies on normality" if dfs and dfs[0] < FEW_DF else ""
    calibrated = any("calibration" in str(s) for s in sources)
    where = f"{rounds} rounds of server start-ups" if rounds > 1 else "1 start-up per arm"
    calibration = f" and {summary.calibration}" if calibrated and summary.calibration else ""
    looks = max((c.speedup_looks or 1 for c in cells), default=1)
    first_look = next((c.speedup_first_look for c in cells if (c.speedup_looks or 1) == looks), None)
    level = 100 * design_level(looks, first_look=first_look)
    sequential = (
        f"; rounds added until decided: each interval at {level:.1f}% for the {looks} looks it could take"
        if looks > 1
        else ""
    )
    return (
        f"speedup with its 95% t interval from {where}{calibration} (arms x rounds model, "
        f"{df_text} degrees of freedom{few}; best arm corrected for the number of arms{sequential})"
    )
