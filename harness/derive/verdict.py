"""The answer first: per workload and load level, which arm to deploy and whether it pays.

A pure function of the typed ``Summary``. Per (workload, load level) window:

- what to deploy: every speculative arm's speedup interval (``harness.derive.intervals``: the arms x rounds
  model over the server start-ups, or a machine calibration) held simultaneously over the window's
  arms (two-sided Dunnett: a claim about one of several is a claim about all of them); among the
  arms whose interval lies above 1 the fastest is deployed, whether or not it is the fastest of all
  (a faster arm still undecided is named beside it: ``Rival``), and arms that cannot be told apart
  from it (Hsu's comparisons with the best) are said to be so;
- where none pays, the fastest speculative arm's outcome: below 1 ("loses"), within 3% of 1
  ("equivalent"), or spanning 1 ("indistinguishable from the baseline"); with no interval it is
  "unverified";
- $/Mtok at the baseline and at that arm, and the saving;
- whether its greedy outputs stayed identical to the baseline's: an arm whose outputs left the
  baseline's beyond near ties on a larger share of prompts than the baseline left its own (its noise
  floor), or whose sampled outputs failed the distribution check's equivalence test, is not lossless
  here (``Divergence``) and is never deployed, however fast: the deploy falls to the fastest lossless
  arm that pays, else the baseline;
- the caveats that qualify it, never hidden: a drafter that only exercises the mechanics, a
  drafter trained on the measured prompts, a failed arm, regime mismatches, lossy settings, and a
  baseline that does not reproduce itself (noise floor below 100%).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, Literal

from harness.config.arms import PublishedFigure, endpoint_address
from harness.config.checks import VerdictSettings
from harness.config.level import LoadLevel
from harness.core import stats
from harness.core.formats import inert
from harness.derive import pooling
from harness.derive.intervals import (
    CONFIDENCE,
    Design,
    Estimate,
    design_for,
    rounds_to_decide,
    stored_estimate,
)
from harness.derive.pace import off_pace
from harness.results.model import ArmSummary, CellMetrics, Summary


class Outcome(StrEnum):
    """What a window's verdict says of its fastest speculative arm (the values are the words the
    stored files and the export use; ``harness.present.verdict_text`` says each in plain words)."""

    PAYS = "pays"  # its interval, corrected for the pick, lies above 1
    LOSES = "loses"  # below 1
    EQUIVALENT = "equivalent"  # within the equivalence margin of 1
    INDISTINGUISHABLE = "indistinguishable"  # spans 1 and more than the margin: too noisy to tell
    UNVERIFIED = "unverified"  # no interval: the start-up spread was not measured
    NO_ARM = "no speculative arm measured"


@dataclass(frozen=True)
class Caveat:
    """What qualifies a verdict (or every verdict of a run), as a code and the numbers it rests on;
    ``harness.present.verdict_text.caveat_text`` says it in words."""

    code: str  # one of verdict_text.CAVEAT_TEXT's keys
    arm: str | None = None
    # (name, value) pairs, the values plain numbers and strings (stored as they are in analysis.json)
    values: tuple[tuple[str, str | int | float | None], ...] = ()

    def __getitem__(self, name: str) -> Any:
        return dict(self.values)[name]


def caveat(code: str, arm: str | None = None, **values: Any) -> Caveat:
    return Caveat(code, arm, tuple(values.items()))


@dataclass(frozen=True)
class Neighbour:
    """What else ran during a cell's windows: on the CPU and, where watched, on its GPUs."""

    arm: str
    others_cpu_cores: float | None
    steal_share: float | None
    gpu_other_processes: int | None
    gpu_others_sm_pct: float | None


NOT_LOSSLESS = "pays, not lossless"  # the answer of a window whose chosen arm pays but diverged
EFFECTIVE_LOAD_GAP = (
    0.10  # two arms whose mean requests in flight differ more were compared at different load
)


@dataclass(frozen=True)
class Divergence:
    """A speculative arm that is not lossless in a window: its greedy outputs left the baseline's
    beyond a near tie (a wide top-2 margin: a real correctness difference, not numerics) on a larger
    share of the compared prompts than the baseline left itself (its noise floor: its later start-ups
    against its first, or, in a run of one round or from before issue 81, its reference pass), or,
    sampling, its output distribution failed the equivalence test ("shifted")."""

    arm: str
    diverged: int  # prompt comparisons whose first difference was beyond a near tie (greedy)
    compared: int
    floor: int  # the baseline's own such comparisons (its noise floor)
    floor_compared: int
    shifted: str | None = None  # sampled (T > 0): the distribution check's verdict


def divergence(summary: Summary, cell: CellMetrics, baseline: CellMetrics) -> Divergence | None:
    """Whether ``cell``'s arm is not lossless in its window (``Divergence``); None: lossless as far as
    the run compared (not compared at all is said by the exactness text, not here)."""
    if summary.distribution is not None:
        said = _distribution_verdict(summary, cell.arm)
        return Divergence(cell.arm, 0, 0, 0, 0, said) if said and said.startswith("shifted") else None
    shares, floor = cell.exactness, baseline.exactness
    if shares is None or not shares.compared:
        return None
    diverged = shares.count(shares.diverged_pct)
    floor_diverged, floor_compared = (floor.count(floor.diverged_pct), floor.compared) if floor else (0, 0)
    floor_share = floor_diverged / floor_compared if floor_compared else 0.0
    if diverged / shares.compared <= floor_share:
        return None
    return Divergence(cell.arm, diverged, shares.compared, floor_diverged, floor_compared)


@dataclass(frozen=True)
class Rival:
    """Another speculative arm of a window, as the decision reads it beside the chosen one."""

    arm: str
    estimate: Estimate  # its own, at 95%
    pays: bool  # its interval, simultaneous over the window's arms, lies above 1
    # shown slower than the chosen arm (Hsu's multiple comparisons with the best, one-sided at 95%)
    slower: bool


@dataclass(frozen=True)
class WindowVerdict:
    workload: str
    level: LoadLevel
    baseline: CellMetrics
    # the chosen speculative arm: the fastest of those that pay, else the fastest; None when none
    # produced a speedup
    best: CellMetrics | None
    estimate: Estimate | None  # best's speedup with its interval (what every view shows for the cell)
    caveats: tuple[Caveat, ...]  # about the best arm
    distribution: str | None = None  # temperature > 0: the best arm's distribution-check verdict
    candidates: int = 1  # speculative arms measured here: best was picked from them
    # the cells measured beside a busy neighbour: their numbers may not be the engine's alone
    neighbours: tuple[Neighbour, ...] = ()
    prompts: int = 0  # the prompts of one window (the verdict's scope)
    # verdict.familywise: the windows its claim is held over at once (1: this window alone)
    windows: int = 1
    # what would reach verdict.precision_pct (None: no prompt term, or the interval already does)
    design: Design | None = None
    rivals: tuple[Rival, ...] = ()  # the window's other speculative arms, fastest first
    # undecided: the rounds in all a continued run would need to decide it, were its point to hold
    # (intervals.rounds_to_decide; None: decided, or not within reach by rounds)
    to_decide: int | None = None
    # one server and nothing compared with it (bench run --endpoint URL): its tok/s over the rounds
    # with the 95% t interval (None: an arm is compared, or one round)
    alone: stats.Interval | None = None
    # the window's speculative arms that are not lossless here, fastest first: never deployed
    not_lossless: tuple[Divergence, ...] = ()

    @property
    def lossy(self) -> Divergence | None:
        """The chosen arm's divergence, where it is not lossless here."""
        return next((d for d in self.not_lossless if self.best and d.arm == self.best.arm), None)

    @property
    def answer(self) -> str:
        """The outcome as the stored views word it: "pays, not lossless" where the chosen arm pays but
        is not lossless here (it is not deployed), else the outcome's own value."""
        if self.outcome == Outcome.PAYS and self.lossy is not None:
            return NOT_LOSSLESS
        return str(self.outcome)

    @property
    def faster_undecided(self) -> tuple[Rival, ...]:
        """Arms with a higher point than the chosen one that pays, themselves not shown to pay."""
        if self.estimate is None or self.outcome != Outcome.PAYS:
            return ()
        return tuple(r for r in self.rivals if r.estimate.point > self.estimate.point and not r.pays)

    @property
    def tied(self) -> tuple[Rival, ...]:
        """Arms that pay as well and are not shown slower than the chosen one (no winner among them)."""
        if self.outcome != Outcome.PAYS:
            return ()
        return tuple(r for r in self.rivals if r.pays and not r.slower)

    @property
    def settled(self) -> bool:
        """Whether the answer this window was asked for is decided, whatever its other arms' own
        intervals say (a deciding design stops on it, ``harness.derive.rounds``): the chosen arm pays
        and every other arm that could be deployed (lossless here) is shown slower than it; or none
        pays, and every arm loses or is equivalent within ``intervals.EQUIVALENCE_MARGIN`` ("no
        difference worth deploying"). An arm near 1.00x beside a clear winner then no longer keeps a
        run going to its last round."""
        if self.decision is None or not self.decision.decided:
            return False
        if self.outcome == Outcome.PAYS:
            lossy = {d.arm for d in self.not_lossless}
            return all(r.slower or r.arm in lossy for r in self.rivals)
        return all(
            r.estimate.selected_from(self.candidates, self.windows).verdict in ("loses", "equivalent")
            for r in self.rivals
        )

    @property
    def provisional(self) -> bool:
        """Measured beside a busy neighbour: the window's verdict is provisional."""
        return bool(self.neighbours)

    @property
    def concurrency(self) -> int:
        return self.level.concurrency

    @property
    def decision(self) -> Estimate | None:
        """best's estimate held over the window's ``candidates`` arms at once (and, with
        ``verdict.familywise``, over the run's ``windows``: ``Estimate.selected_from``): what the
        outcome rests on, so that the luckiest of several arms does not pay by luck."""
        return self.estimate.selected_from(self.candidates, self.windows) if self.estimate else None

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
        points = [(r.estimate.point, r.arm) for r in self.rivals]
        if self.best is not None and self.estimate is not None:
            points.append((self.estimate.point, self.best.arm))
        top = max(points, default=(0.0, self.baseline.arm))
        return top[1] if top[0] > 1.0 else self.baseline.arm

    @property
    def deploy(self) -> str:
        """The arm to deploy: the chosen speculative arm only where it pays and stayed lossless (the
        choice prefers a lossless arm that pays: ``_choose``), else the baseline."""
        if self.best is not None and self.outcome == Outcome.PAYS and self.lossy is None:
            return self.best.arm
        return self.baseline.arm

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


def arm_caveats(arm: ArmSummary | None) -> list[Caveat]:
    """What qualifies an arm's numbers: where its drafter came from."""
    if arm is None:
        return []
    found = []
    drafter = arm.drafter or {}
    label = str(drafter.get("label") or "")
    if "mechanics only" in label:
        found.append(caveat("drafter_mechanics", arm.name, label=label))
    held_out = drafter.get("held_out") or {}
    if held_out.get("trained_on"):
        found.append(caveat("drafter_trained_on_measured", arm.name, prompts=held_out["trained_on"]))
    return found


def neighbour(cell: CellMetrics) -> Neighbour:
    return Neighbour(
        cell.arm, cell.others_cpu_cores, cell.steal_share, cell.gpu_other_processes, cell.gpu_others_sm_pct
    )


def cpu_caveats(cells: list[CellMetrics]) -> list[Caveat]:
    """Windows whose numbers may be the client's or the schedule's: a client that used most of a
    core, or fell behind its arrival schedule (a busy neighbour makes the verdict provisional)."""
    found = []
    for cell in cells:
        if cell.client_busy:
            found.append(caveat("client_busy", cell.arm, cores=cell.client_cpu_cores))
        if cell.behind_schedule:
            found.append(
                caveat(
                    "behind_schedule",
                    cell.arm,
                    lag_ms=cell.schedule_lag_ms_p90,
                    sent_rps=cell.achieved_rate_rps or 0,
                    rate=cell.request_rate,
                )
            )
    return found


def load_caveat(baseline: CellMetrics, best: CellMetrics | None) -> list[Caveat]:
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
        caveat(
            "effective_load",
            best.arm,
            baseline=baseline.arm,
            baseline_in_flight=baseline.mean_in_flight,
            arm_in_flight=best.mean_in_flight,
            stated=baseline.concurrency,
            prompts=4 * baseline.concurrency,
        )
    ]


def estimate_of(cell: CellMetrics) -> Estimate | None:
    """A cell's speedup with the interval the summary stored (``harness.derive.intervals``' model)."""
    return stored_estimate(cell.speedup, cell.estimate, rounds=cell.server_starts)


def _design(estimate: Estimate | None, settings: VerdictSettings) -> Design | None:
    """What would reach the stated precision, where this interval does not."""
    design = design_for(estimate, settings.precision_pct) if estimate is not None else None
    if design is None or design.half_pct <= settings.precision_pct or estimate is None:
        return None
    # the normal-quantile design reached by what the run already has: at the edge, nothing to add
    more = design.prompts > estimate.prompts or design.rounds > estimate.rounds or not design.reachable
    return design if more else None


# the rounds a continued run needs to decide a window: (workload, level, estimate, candidates,
# windows) -> rounds; ``_to_decide`` simulates them (seconds), a stored analysis's check reads them
ToDecide = Callable[[str, LoadLevel, "Estimate | None", int, int], "int | None"]


def window_verdicts(summary: Summary, to_decide: ToDecide | None = None) -> list[WindowVerdict]:
    """One verdict per (workload, load level), in the order measured; the rounds an undecided one
    needs from ``to_decide`` (by default simulated, ``rounds_to_decide``)."""
    rounds = to_decide or _to_decide
    verdicts = []
    settings = summary.verdict or VerdictSettings()
    keys = summary.window_keys()
    windows = len(keys) if settings.familywise else 1
    for workload, level in keys:
        baseline = summary.cell(summary.baseline_arm, workload, level)
        if baseline is None:
            continue  # the baseline failed: no speedup exists to judge (run_caveats says so)
        speculative = [
            c
            for c in summary.cells
            if (c.workload, c.level) == (workload, level)
            and c.arm != summary.baseline_arm
            and c.speedup is not None
            and (arm := summary.arm(c.arm)) is not None
            and _in_verdicts(summary, arm, c)  # a failed arm: its complete start-ups (run_caveats says so)
        ]
        diverged = [d for c in speculative if (d := divergence(summary, c, baseline)) is not None]
        best, rivals = _choose(speculative, windows, {d.arm for d in diverged})
        estimate = estimate_of(best) if best else None
        verdicts.append(
            WindowVerdict(
                workload=workload,
                level=level,
                baseline=baseline,
                best=best,
                estimate=estimate,
                caveats=tuple(
                    (arm_caveats(summary.arm(best.arm)) if best else [])
                    + cpu_caveats([baseline] + ([best] if best else []))
                    + load_caveat(baseline, best)
                    + fewer_rounds(summary, baseline, best)
                ),
                distribution=_distribution_verdict(summary, best.arm) if best else None,
                candidates=max(1, len(speculative)),
                neighbours=tuple(
                    neighbour(c) for c in [baseline] + ([best] if best else []) if c.noisy_neighbour
                ),
                prompts=baseline.requests_total // max(baseline.repeats, 1),
                windows=windows,
                design=_design(estimate, settings),
                rivals=rivals,
                to_decide=rounds(workload, level, estimate, max(1, len(speculative)), windows),
                alone=_alone(baseline) if len(summary.arms) == 1 else None,
                not_lossless=tuple(sorted(diverged, key=lambda d: -(_speedup_of(speculative, d.arm)))),
            )
        )
    return verdicts


def failed_on(summary: Summary, arm: ArmSummary) -> int | None:
    """The start-up a failed arm failed on, counted from 0: the start-ups before it are complete
    (the runner keeps only those in its files) and stay in its verdicts; its last start-up in a
    round's ``done`` (``RunTiming.rounds``) is that one. None: not failed, or no rounds recorded."""
    if arm.status != "failed" or summary.timing is None:
        return None
    started = [r.server_starts[arm.name] for r in summary.timing.rounds if arm.name in r.done]
    return started[-1] if started else None


def _in_verdicts(summary: Summary, arm: ArmSummary, cell: CellMetrics) -> bool:
    """Whether an arm's cell enters its window's verdict: a finished arm's, and a failed arm's that
    rests on start-ups it completed before the one it failed on (a run written before the runner set
    a failed start-up's windows aside may still hold them: that cell stays out)."""
    if arm.status == "ok":
        return True
    failed = failed_on(summary, arm)
    return failed is not None and failed > 0 and cell.server_starts <= failed


def failed_late(summary: Summary, arm: ArmSummary) -> int | None:
    """``failed_on`` for an arm with cells of the start-ups before it (in its verdicts), else None."""
    failed = failed_on(summary, arm)
    cells = [c for c in summary.cells if c.arm == arm.name and _in_verdicts(summary, arm, c)]
    return failed if failed and cells else None


def fewer_rounds(summary: Summary, baseline: CellMetrics, best: CellMetrics | None) -> list[Caveat]:
    """The chosen arm failed on a later start-up: its verdict rests on fewer rounds than the
    baseline's (the rounds both have: ``intervals.cell_estimates``' two-arm model), and its later
    start-ups were not run."""
    arm = summary.arm(best.arm) if best is not None else None
    failed = failed_on(summary, arm) if arm is not None else None
    if best is None or failed is None or best.server_starts >= baseline.server_starts:
        return []
    return [
        caveat(
            "fewer_rounds",
            best.arm,
            rounds=best.server_starts,
            baseline_rounds=baseline.server_starts,
            failed=failed + 1,
        )
    ]


def _alone(cell: CellMetrics) -> stats.Interval | None:
    """One server's tok/s over its rounds (a geometric mean with its t interval): the spread a run
    that compares nothing can still give."""
    rounds = cell.independent_samples("output_tok_s")
    return stats.mean_interval(rounds, CONFIDENCE) if len(rounds) >= 2 and min(rounds) > 0 else None


def _to_decide(
    _workload: str, _level: LoadLevel, estimate: Estimate | None, candidates: int, windows: int
) -> int | None:
    """The rounds a continued run needs to decide an undecided verdict (``rounds_to_decide``), on
    the interval it is decided by (held over the window's arms): at its point, else where more
    start-ups could still move it (the point one-sided 95% of its start-ups' term away from 1: more
    rounds average that term out, the prompts' stays). None: not even there. The point alone said
    "more rounds alone would not decide" for 19 of the default's 40 undecided runs at a true 1.20x
    (of 300 simulated), and 6 of those decided when continued to 8 rounds
    (benchmarks/interval_coverage.py --simulate: docs/generated/statistics-tables.md has this
    rule's own figures)."""
    if estimate is None or estimate.selected_from(candidates, windows).decided:
        return None
    found = rounds_to_decide(estimate, candidates)
    if found is None and estimate.log_se is not None and estimate.point != 1.0:
        prompt_v = estimate.prompt_log_se**2 if estimate.prompt_log_se is not None else 0.0
        reach = stats.normal_quantile(CONFIDENCE) * math.sqrt(max(estimate.log_se**2 - prompt_v, 0.0))
        side = 1.0 if estimate.point > 1.0 else -1.0
        found = rounds_to_decide(replace(estimate, point=estimate.point * math.exp(side * reach)), candidates)
    return found


def _speedup_of(cells: list[CellMetrics], arm: str) -> float:
    return next((c.speedup or 0.0 for c in cells if c.arm == arm), 0.0)


def _choose(
    speculative: list[CellMetrics], windows: int, lossy: frozenset[str] | set[str] = frozenset()
) -> tuple[CellMetrics | None, tuple[Rival, ...]]:
    """The arm a window's verdict is about, and the others beside it: each arm's interval held
    over all of them at once (``Estimate.selected_from``); the fastest of those whose interval lies
    above 1 and that stayed lossless (``lossy``: not), else the fastest that pays, else the fastest.
    A rival is shown slower where the chosen arm's log speedup exceeds
    its by Hsu's one-sided margin (``stats.best_of_quantile``) on the larger of their standard errors:
    under the arms x rounds model a difference of two arms has the start-up variance of a speedup,
    and its prompt term is taken as the larger one's."""
    if not speculative:
        return None, ()
    candidates = len(speculative)
    estimates = {c.arm: e for c in speculative if (e := estimate_of(c)) is not None}
    pays = {arm: e.selected_from(candidates, windows).verdict == "pays" for arm, e in estimates.items()}
    ordered = sorted(speculative, key=lambda c: c.speedup or 0.0, reverse=True)
    paying = [c for c in ordered if pays.get(c.arm)]
    best = next((c for c in paying if c.arm not in lossy), paying[0] if paying else ordered[0])
    chosen = estimates.get(best.arm)
    rivals = []
    for cell in ordered:
        e = estimates.get(cell.arm)
        if cell is best or e is None:
            continue
        rivals.append(Rival(cell.arm, e, pays.get(cell.arm, False), _slower(chosen, e, candidates)))
    return best, tuple(rivals)


def _slower(chosen: Estimate | None, other: Estimate, candidates: int) -> bool:
    """Whether ``other`` is shown slower than ``chosen`` (Hsu's comparisons with the best)."""
    if chosen is None or chosen.log_se is None or other.log_se is None or min(chosen.df, other.df) < 1:
        return False
    margin = stats.best_of_quantile(candidates - 1, min(chosen.df, other.df)) * max(
        chosen.log_se, other.log_se
    )
    return math.log(chosen.point) - math.log(other.point) > margin


def self_draft_expectations(summary: Summary) -> list[Caveat]:
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
        code = "self_draft_greedy" if arm.draft_sampling == "greedy" else "self_draft_sampled"
        found.append(caveat(code, arm.name, sampling=arm.draft_sampling, top=top))
    return found


def failed_requests(summary: Summary) -> list[Caveat]:
    """Per arm, the requests that ended in an error (a timeout, a refused request, a response the
    client could not read, an abort, more tokens than max_tokens, output without token ids): its
    figures count only the others, and none of a window where too many failed
    (``summary.MAX_FAILED_SHARE``): each cell says how many of its windows were left out (a cell's
    repeats are its windows, its per-repeat figures the summed ones)."""
    found = []
    for arm in summary.arms:
        cells = summary.cells_of(arm.name)
        failed = sum(c.requests_errored for c in cells)
        if failed:
            where = ", ".join(
                f"{c.workload} {c.level.short()}: {c.requests_errored}" + _kinds(c) + _left_out(c)
                for c in cells
                if c.requests_errored
            )
            total = sum(c.requests_total for c in cells)
            found.append(caveat("failed_requests", arm.name, failed=failed, total=total, where=where))
    return found


def _kinds(cell: CellMetrics) -> str:
    """`` (3 finish_reason 'abort', 1 over max_tokens)``: why a cell's requests failed, most first;
    "" for a summary stored before the kinds were."""
    if not cell.requests_failed_by:
        return ""
    return " (" + ", ".join(f"{n} {inert(kind)}" for kind, n in cell.requests_failed_by.items()) + ")"


def _left_out(cell: CellMetrics) -> str:
    """``, 1 of 2 windows left out``: the cell's windows over the share of failures; "" for none."""
    left_out = cell.repeats - len(cell.per_repeat)
    return f", {left_out} of {cell.repeats} windows left out" if left_out > 0 else ""


PublishedOutcome = Literal["inside", "overlaps", "outside", "no interval"]


@dataclass(frozen=True)
class PublishedCheck:
    """One published figure (``arms[i].published``) beside what one cell of its arm measured: the
    measured value with its 95% interval, and where that interval lies against the published range.
    Only an interval that lies entirely outside the range is "outside" (the ``published_outside``
    caveat): a point outside with an interval reaching into it is "overlaps", not a finding."""

    arm: str
    workload: str
    level: LoadLevel
    quantity: Literal["speedup", "tau"]
    low: float  # the published range
    high: float
    source: str
    measured: float | None  # the cell's speedup (its one estimate) or tau; None: not measured
    measured_low: float | None = None  # its 95% interval; None: a point only
    measured_high: float | None = None
    # what the interval rests on: "model" (the speedup's arms x rounds model), "prompts" or
    # "start-ups" (tau's: ``tau_interval``); None without one
    basis: str | None = None

    @property
    def outcome(self) -> PublishedOutcome:
        if self.measured is None or self.measured_low is None or self.measured_high is None:
            return "no interval"
        if self.measured_high < self.low or self.measured_low > self.high:
            return "outside"
        if self.low <= self.measured_low and self.measured_high <= self.high:
            return "inside"
        return "overlaps"


def tau_interval(cell: CellMetrics) -> tuple[stats.Interval, str] | None:
    """A cell's tau with a 95% t interval, and what it rests on. Greedy tau barely moves between
    server start-ups (the same prompts draft the same tokens); what moves it is which prompts were
    drawn: where the engine reported each request's own acceptance (``prompt_tau``), the interval
    is the pooled tau +- t * the per-prompt taus' standard error ("prompts"); else a t interval over
    the start-ups' means of their repeats ("start-ups"); None with neither (one start-up, no
    per-request acceptance)."""
    if cell.tau is None:
        return None
    per_prompt = list((cell.prompt_tau or {}).values())
    if len(per_prompt) >= 2:
        centre, n = stats.mean(per_prompt), len(per_prompt)
        sd = math.sqrt(sum((t - centre) ** 2 for t in per_prompt) / (n - 1))
        half = stats.t_quantile(1 - (1 - CONFIDENCE) / 2, n - 1) * sd / math.sqrt(n)
        return stats.Interval(cell.tau, max(1.0, cell.tau - half), cell.tau + half), "prompts"
    by_start: dict[int, list[float]] = {}
    for r in cell.per_repeat:
        if r.tau is not None and r.tau > 0:
            by_start.setdefault(r.server_start, []).append(r.tau)
    if len(by_start) < 2:
        return None
    found = stats.mean_interval([stats.mean(v) for v in by_start.values()], CONFIDENCE)
    return stats.Interval(cell.tau, found.low, found.high), "start-ups"


def _covers(figure: PublishedFigure, cell: CellMetrics) -> bool:
    if figure.workload is not None and figure.workload != cell.workload:
        return False
    if figure.concurrency is None:
        return True
    return cell.request_rate is None and cell.concurrency == figure.concurrency


def _measured(
    figure: PublishedFigure, cell: CellMetrics
) -> tuple[float | None, stats.Interval | None, str | None]:
    """What a cell measured of a figure's quantity: its value, its 95% interval, what that rests on."""
    if figure.quantity == "speedup":
        estimate = estimate_of(cell)
        if estimate is None:
            return None, None, None
        if estimate.low is None or estimate.high is None:
            return estimate.point, None, None
        return estimate.point, stats.Interval(estimate.point, estimate.low, estimate.high), "model"
    found = tau_interval(cell)
    return cell.tau, found[0] if found else None, found[1] if found else None


def _check(arm: str, figure: PublishedFigure, cell: CellMetrics) -> PublishedCheck:
    measured, interval, basis = _measured(figure, cell)
    return PublishedCheck(
        arm=arm,
        workload=cell.workload,
        level=cell.level,
        quantity=figure.quantity,
        low=figure.low,
        high=figure.high,
        source=figure.source,
        measured=measured,
        measured_low=interval.low if interval else None,
        measured_high=interval.high if interval else None,
        basis=basis,
    )


def published_checks(summary: Summary) -> list[PublishedCheck]:
    """Every published figure of every arm against each cell of that arm it covers (its workload and
    concurrency, where given), in the order the arms and cells were measured."""
    return [
        _check(arm.name, figure, cell)
        for arm in summary.arms
        for figure in arm.published
        for cell in summary.cells_of(arm.name)
        if _covers(figure, cell)
    ]


def _sampling_of(summary: Summary) -> str | None:
    """How the run sampled, as far as its summary says: "greedy" (exactness was compared), "sampled"
    (the distribution check ran), or None (neither ran: not known here)."""
    if summary.exactness.applicable:
        return "greedy"
    return "sampled" if summary.distribution is not None else None


def _regime_values(summary: Summary, arm: str, figure: PublishedFigure) -> dict[str, Any]:
    """A figure's recorded regime beside the arm's, as the caveat's values (the words are
    ``verdict_text``'s): the source's temperature, shape, engine, method, K and model runner where
    recorded, whether it is a reference from another regime, and what the summary knows of the arm
    (its method, its K, greedy or sampled). {} for a figure that records no regime."""
    recorded = figure.conditions()
    if not recorded:
        return {}
    found = summary.arm(arm)
    return {
        **{f"source_{name}": value for name, value in recorded.items()},
        "another_regime": int(figure.another_regime),
        "arm_method": found.method if found else None,
        "arm_k": found.num_speculative_tokens if found else None,
        "arm_sampling": _sampling_of(summary),
    }


def published_caveats(summary: Summary) -> list[Caveat]:
    """A measured 95% interval that lies entirely outside the range its arm's published figure
    gives: the caveat names the source and, where the figure records the regime it was measured in,
    that regime beside the arm's, so the words state the difference (another temperature, a tree, K)
    rather than imply a fault. A range its interval overlaps, or a point with no interval, is shown,
    never a caveat."""
    found = []
    for arm in summary.arms:
        for figure in arm.published:
            for cell in summary.cells_of(arm.name):
                if not _covers(figure, cell):
                    continue
                check = _check(arm.name, figure, cell)
                if check.outcome != "outside":
                    continue
                found.append(
                    caveat(
                        "published_outside",
                        check.arm,
                        quantity=check.quantity,
                        where=f"{check.workload} {check.level.short()}",
                        point=check.measured,
                        low=check.measured_low,
                        high=check.measured_high,
                        published_low=check.low,
                        published_high=check.high,
                        source=check.source,
                        side="below" if (check.measured_high or 0.0) < check.low else "above",
                        **_regime_values(summary, arm.name, figure),
                    )
                )
    return found


def compiled_divergence(summary: Summary) -> list[Caveat]:
    """Arms whose outputs left the baseline's more often than the baseline left itself, while the
    engine ran compiled: the noise floor (the baseline against itself, in the same mode) cannot tell
    a divergence the compiled verify pass makes from one speculation makes."""
    exactness = summary.exactness
    floor = exactness.noise_floor if exactness.applicable else None
    if floor is None or floor.identical_pct is None or exactness.compile_mode != "compiled":
        return []
    below = [
        f"{arm} {block.identical_pct:.0f}%"
        for arm, block in exactness.arms.items()
        if block.identical_pct is not None and block.identical_pct < floor.identical_pct
    ]
    # the floor's source: a reference pass ("<baseline> (first pass)") or the baseline's later start-ups
    source = "2nd pass" if floor.reference.endswith("(first pass)") else "later start-ups"
    found = caveat("compiled_divergence", arms=", ".join(below), floor=floor.identical_pct, source=source)
    return [found] if below else []


def run_caveats(summary: Summary) -> list[Caveat]:
    """What qualifies every verdict of the run."""
    found = [caveat("regime_mismatch", detail=m) for m in summary.mismatches]
    found += [caveat("lossy", detail=s) for s in summary.lossy_settings]
    found += [caveat("known_defect", detail=d) for d in summary.known_defects]
    found += [caveat("engine_patched", detail=p) for p in summary.engine_patches]
    found += [
        caveat("arm_mismatch", a.name, detail=m)
        for a in summary.arms
        for m in a.mismatches
        if m not in summary.mismatches
    ]
    found += [
        caveat("arm_not_ok", a.name, status=a.status, why=f" ({inert(a.error[:300])})" if a.error else "")
        for a in summary.arms
        if a.status != "ok" and not failed_late(summary, a)
    ]
    found += [  # failed after complete start-ups: those stay in its verdicts (fewer_rounds)
        caveat(
            "arm_failed_late", a.name, failed=failed + 1, why=f" ({inert(a.error[:300])})" if a.error else ""
        )
        for a in summary.arms
        if (failed := failed_late(summary, a))
    ]
    found += [
        caveat("unpaired", arm)
        for arm in (summary.timing.unpaired_arms(summary.baseline_arm) if summary.timing else [])
    ]
    found += failed_requests(summary)
    found += cache_reset_caveats(summary)
    found += [
        caveat("metrics_other_models", arm.name, models=", ".join(repr(m) for m in arm.metrics_other_models))
        for arm in summary.arms
        if arm.metrics_other_models
    ]
    mechanics = [a.name for a in summary.arms if "mechanics only" in str((a.drafter or {}).get("label", ""))]
    if mechanics:
        found.append(caveat("mechanics_only", arms=", ".join(mechanics)))
    found += self_draft_expectations(summary)
    floor = summary.exactness.noise_floor if summary.exactness.applicable else None
    if floor is not None and floor.identical_pct is not None and floor.identical_pct < 100.0:
        found.append(caveat("noise_floor", pct=floor.identical_pct, compared=floor.compared))
    found += compiled_divergence(summary)
    found += published_caveats(summary)
    found += endpoint_caveats(summary)
    found += pace_caveats(summary)
    return found


def pace_caveats(summary: Summary) -> list[Caveat]:
    """The machine ran beyond ``pace.SAME_PACE`` of the regime's reference run, slower or faster
    (``Summary.pace``), with the CPU features it lacks or has beyond the reference's."""
    pace = summary.pace
    if pace is None or not off_pace(pace):
        return []
    slower = pace.slower >= 1
    return [
        caveat(
            "slower_machine" if slower else "faster_machine",
            times=pace.slower if slower else 1 / pace.slower,
            tok_s=pace.tok_s,
            reference_tok_s=pace.reference_tok_s,
            window=f"{pace.workload} @{pace.concurrency}",
            reference_run=pace.reference_run,
            source=pace.source,
            reference_machine=pace.reference_machine,
            features=", ".join(pace.missing_features if slower else pace.extra_features),
        )
    ]


def cache_reset_caveats(summary: Summary) -> list[Caveat]:
    """An arm whose engine refused the prefix-cache reset before some windows, every retry
    (``ArmSummary.cache_reset_failed``): those windows may have run warm."""
    return [
        caveat("cache_reset_failed", arm.name, windows=arm.cache_reset_failed)
        for arm in summary.arms
        if arm.cache_reset_failed
    ]


def endpoint_caveats(summary: Summary) -> list[Caveat]:
    """What a run of existing servers (arms[].endpoint) is about, and what it could not see: its
    rounds are windows on running servers, not start-ups; a server that generated tokens for others
    during an arm's windows was not the arm's alone."""
    arms = [arm for arm in summary.arms if arm.endpoint is not None]
    if not arms:
        return []
    found = [caveat("endpoint_scope")]
    found += [
        caveat("endpoint_shared", arm.name, tokens=arm.others_tokens)
        for arm in arms
        if arm.others_tokens is not None and arm.others_tokens > 0
    ]
    unknown = [arm.name for arm in arms if arm.others_tokens is None and arm.status == "ok"]
    if unknown:
        found.append(caveat("endpoint_alone_unknown", arms=", ".join(unknown)))
    servers: dict[str, list[str]] = {}
    for arm in arms:  # allow_shared_endpoints: two arms on one server were meant, and are said
        servers.setdefault(endpoint_address(arm.endpoint or ""), []).append(arm.name)
    found += [
        caveat("endpoint_same_server", arm, arms=", ".join(names))
        for names in servers.values()
        if len(names) > 1
        for arm in names
    ]
    return found
