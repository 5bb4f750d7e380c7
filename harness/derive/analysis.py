"""The one analysis of a run (derive layer): what every view of a run renders.

``analyze`` turns a run's ``Summary`` (itself derived from the raw files) into a ``RunAnalysis``:
the cells with their one estimate each, the verdict per (workload, load level), the caveats, the
findings, the SLO capacities and the scheduled arms' checks. It is computed once per command; the
terminal, the Markdown lab table, the HTML report and the export take it and compute nothing of
their own, so a cell's speedup and interval are the same numbers wherever they appear
(``tests/test_one_answer.py`` parses them out of every view).

The analysis is stored with the run (``analysis.json``: its own version, and a digest of the raw
files it came from and of the harness code that derived it), written after every server start-up
of a run; ``load_analysis`` derives it again, in memory, when it is missing, stale (another
harness, or a raw file changed), over ``MAX_ANALYSIS_BYTES`` (never read) or unreadable. The digest
keeps the cache fresh, not trusted (it sits in the file it keys: docs/security.md), so a fresh one
is checked against what the raw files give before any view sees it (``_checked``): the summary
summarised again, everything but the verdicts derived again, each verdict's cells, estimate and
choice derived again from the cells; on any difference it is derived again and ``AnalyzedRun.note``
says so. What the cache saves is the verdicts' simulations (the rounds to decide: seconds).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import stat
from dataclasses import dataclass
from pathlib import Path

from pydantic import TypeAdapter, ValidationError

from harness.config.checks import VerdictSettings
from harness.config.level import LoadLevel
from harness.core.probes.acceptance import conditional_rates
from harness.core.probes.throughput import speedup
from harness.derive import pooling
from harness.derive import verdict as verdicts_of
from harness.derive.ceiling import Ceiling, decode_ceiling
from harness.derive.cost_model import CostModel, cost_model
from harness.derive.engine_runtime import runtime_caveats
from harness.derive.findings import Fact, findings
from harness.derive.intervals import Estimate, design_level, rounds_to_decide, stored_estimate
from harness.derive.schedule import RampCheck, ScheduleCheck, ramp_checks, schedule_checks
from harness.derive.summary import summarize
from harness.derive.verdict import (
    Caveat,
    PublishedCheck,
    SloCapacity,
    ToDecide,
    WindowVerdict,
    estimate_of,
    published_checks,
    run_caveats,
    slo_capacity,
)
from harness.results.files import write_text_atomic
from harness.results.gate import StoredGate, read_gate
from harness.results.model import CategoryMetrics, CellMetrics, SpeedupEstimate, Summary
from harness.results.raw import RawRun, read_raw


@dataclass(frozen=True)
class IntervalBasis:
    """Where the run's intervals come from, for the one line under the verdicts."""

    sources: tuple[str, ...]  # "server_starts", "calibration", ...: none when every speedup is unverified
    rounds: int  # rounds of server start-ups
    dfs: tuple[int, ...]  # the degrees of freedom of the speculative cells' intervals, sorted
    calibration: str | None  # the calibration's label, where one was used
    looks: int  # a deciding run: the looks its design could take (1: a fixed number of rounds)
    look_level: float  # the level of each interval over those looks
    # the workload: the prompts per window whose sampling the intervals include (none: about these
    # prompts only, a summary before version 13)
    prompts: tuple[int, ...] = ()
    own_spread: tuple[str, ...] = ()  # cells ("arm workload @level") on their own paired spread
    calibration_refused: bool = False  # some cell's run residual refused the calibration
    # many windows: how many verdicts the run decides, whether each holds over all of them at once
    # (verdict.familywise), and the false "pays" to expect among them by chance if nothing paid
    windows: int = 1
    familywise: bool = False
    chance_pays: float = 0.0
    precision_pct: float = VerdictSettings().precision_pct  # verdict.precision_pct
    # the half-normal prior's scale on the start-up spread, where some interval used it
    prior_sd: float | None = None
    alone: bool = False  # one arm, one server: nothing compared, no speedup (bench run --endpoint URL)
    # the covariate (issue 81): the least and most of the prompts' spread it explained over the cells
    # that used it; and per workload without one, why ("code_humaneval: no workload pass")
    covariate_r2: tuple[float, float] | None = None
    no_covariate: tuple[str, ...] = ()


@dataclass(frozen=True)
class RunAnalysis:
    """Everything a view of one run shows, derived once."""

    summary: Summary
    verdicts: tuple[WindowVerdict, ...]
    caveats: tuple[Caveat, ...]  # what qualifies every verdict of the run
    findings: tuple[Fact, ...]  # the findings paragraph's facts (verdict_text words them)
    capacities: tuple[SloCapacity, ...]
    schedule_checks: tuple[ScheduleCheck, ...]
    ramp_checks: tuple[RampCheck, ...]  # a scheduled arm on a ramp, per stage and whole
    basis: IntervalBasis
    # cells ("arm workload level") whose tok/s ratio to the baseline's, both pooled over start-ups,
    # rounds to another speedup than the model's (the start-ups disagree): the views mark them
    ratio_differs: frozenset[str]
    category_order: tuple[str, ...]  # by the first speculative arm's tau: the ordering is the finding
    # (category, arm, tau over every load level, identical %): the category table's pooled columns
    category_pooled: tuple[tuple[str, str, float | None, float | None], ...]
    tau_by_arm: tuple[tuple[str, str, float], ...]  # (arm, workload, tau over its load levels)
    # arm -> (marginal, conditional) acceptance per draft position over all its cells
    per_position: dict[str, tuple[tuple[float, ...], tuple[float | None, ...]]]
    # closed-loop cells: (arm, workload, concurrency, tok/s per request in flight, tok/s per server)
    pareto: tuple[tuple[str, str, int, float, float], ...]
    # each arm's published figures beside what its cells measured (arms[i].published); () without any
    published: tuple[PublishedCheck, ...] = ()
    # the step cost of each speculative cell, its line over K and the speedups it predicts
    cost: CostModel = CostModel()
    # the decode floor at batch 1 against the baseline's measured step (None: not recorded)
    ceiling: Ceiling | None = None

    def estimate(self, cell: CellMetrics) -> Estimate | None:
        """A speculative cell's speedup with its interval (None for the baseline): the one estimate."""
        return None if cell.arm == self.summary.baseline_arm else estimate_of(cell)

    def outcome(self, cell: CellMetrics) -> str | None:
        """What a speculative cell's interval decides as its window's verdict reads it: held over
        the window's arms at once (``WindowVerdict``), so that a colour, a marker or a deploy column
        never says "pays" where the verdict does not (None for the baseline)."""
        estimate = self.estimate(cell)
        window = self.verdict(cell.workload, cell.level)
        if estimate is None or window is None:
            return estimate.verdict if estimate is not None else None
        return estimate.selected_from(window.candidates, window.windows).verdict

    def category_estimate(self, row: CategoryMetrics) -> Estimate | None:
        """A category row's speedup with its interval, from the same model over the category's
        per-start-up tok/s (``summary.category_rows``)."""
        return None if row.arm == self.summary.baseline_arm else stored_estimate(row.speedup, row.estimate)

    def category_outcome(self, row: CategoryMetrics) -> str | None:
        """What a category row's interval decides, held over the speculative arms measured at its
        level at once (as ``outcome`` reads a cell; None for the baseline)."""
        estimate = self.category_estimate(row)
        if estimate is None:
            return None
        arms = {
            r.arm
            for r in self.summary.categories
            if r.level == row.level and r.arm != self.summary.baseline_arm
        }
        return estimate.selected_from(max(len(arms), 1)).verdict

    def minutes_to_decide(self, verdict: WindowVerdict) -> float | None:
        """The wall minutes the rounds that would decide an undecided window would take at this run's
        own pace (its rounds' wall time, preparation left out); None: decided, or no timing."""
        timing, estimate = self.summary.timing, verdict.estimate
        rounds = max((c.server_starts for c in self.summary.cells), default=0)
        per_round = timing.minutes_per_round(rounds) if timing is not None else None
        if verdict.to_decide is None or estimate is None or per_round is None:
            return None
        return (verdict.to_decide - estimate.rounds) * per_round

    def category_pool(self, category: str, arm: str) -> tuple[float | None, float | None] | None:
        """(tau, identical %) of an arm on a category over every load level; None: not measured."""
        return next(((t, i) for c, a, t, i in self.category_pooled if (c, a) == (category, arm)), None)

    def taus(self) -> dict[tuple[str, str], float]:
        """tau per (arm, workload) over its load levels."""
        return {(arm, workload): tau for arm, workload, tau in self.tau_by_arm}

    def pooled_ratio_differs(self, cell: CellMetrics) -> bool:
        return _key(cell) in self.ratio_differs

    def verdict(self, workload: str, level: LoadLevel) -> WindowVerdict | None:
        return next((v for v in self.verdicts if (v.workload, v.level) == (workload, level)), None)

    def cell_verdict(self, cell: CellMetrics) -> WindowVerdict | None:
        """The window's verdict where this cell is the arm it is about (None for every other arm)."""
        found = self.verdict(cell.workload, cell.level)
        return found if found is not None and found.best is not None and found.best.arm == cell.arm else None


def _key(cell: CellMetrics) -> str:
    return f"{cell.arm} {cell.workload} {cell.level.short()}"


def _ratio_differs(summary: Summary) -> frozenset[str]:
    """The speculative cells whose pooled tok/s ratio, as a reader computes it from the row, rounds
    to another figure than the speedup (two decimals)."""
    found = set()
    for cell in summary.cells:
        base = summary.cell(summary.baseline_arm, cell.workload, cell.level)
        if cell.arm == summary.baseline_arm or base is None or cell.speedup is None:
            continue
        ratio = speedup(cell.output_tok_s, base.output_tok_s)
        if ratio is not None and round(ratio, 2) != round(cell.speedup, 2):
            found.add(_key(cell))
    return frozenset(found)


def _categories(
    summary: Summary,
) -> tuple[tuple[str, ...], tuple[tuple[str, str, float | None, float | None], ...]]:
    """The categories in the order of the first speculative arm's tau, and per (category, arm) its
    tau over every load level and its identical share."""
    rows = [r for r in summary.categories if r.method != "baseline"]
    if not rows:
        return (), ()
    arms = list(dict.fromkeys(r.arm for r in rows))
    pooled = tuple(
        (
            category,
            arm,
            pooling.tau(members),
            pooling.identical_pct((r.identical_pct, r.exactness_pairs) for r in members)[0],
        )
        for (category, arm), members in pooling.grouped(rows, lambda r: (r.category, r.arm)).items()
    )
    return tuple(pooling.category_order(rows, arms[0])), pooled


def _tau_by_arm(summary: Summary) -> tuple[tuple[str, str, float], ...]:
    taus = [
        (arm, workload, pooling.tau(cells))
        for (arm, workload), cells in pooling.grouped(summary.cells, lambda r: (r.arm, r.workload)).items()
    ]
    return tuple((arm, workload, tau) for arm, workload, tau in taus if tau is not None)


def _per_position(summary: Summary) -> dict[str, tuple[tuple[float, ...], tuple[float | None, ...]]]:
    """Per arm, its marginal per-position acceptance over all its cells and the conditional rates
    (accepted at i given accepted at i - 1) from it."""
    grouped = pooling.grouped(summary.cells, lambda r: r.arm)
    rates = {arm: pooling.per_position(cells) for arm, cells in grouped.items()}
    return {arm: (tuple(rate), tuple(conditional_rates(rate))) for arm, rate in rates.items() if rate}


def _pareto(summary: Summary) -> tuple[tuple[str, str, int, float, float], ...]:
    """Throughput per user (per request in flight) and per server, per closed-loop cell."""
    return tuple(
        (c.arm, c.workload, c.concurrency, c.output_tok_s / c.mean_in_flight, c.output_tok_s)
        for c in summary.cells
        if c.request_rate is None and c.output_tok_s and c.mean_in_flight
    )


def _chance_pays(verdicts: tuple[WindowVerdict, ...]) -> float:
    """The false "pays" to expect over the windows if no arm truly paid: each decided window's
    one-sided error at the level its decision was made (``WindowVerdict.decision``)."""
    total = 0.0
    for v in verdicts:
        e = v.estimate
        if e is None or e.log_se is None or e.df < 1:
            continue
        level = 1 - (1 - e.level(v.candidates)) / max(v.windows, 1)
        total += (1 - level) / 2
    return total


def _basis(summary: Summary, verdicts: tuple[WindowVerdict, ...]) -> IntervalBasis:
    cells = [c for c in summary.cells if c.arm != summary.baseline_arm and c.speedup is not None]
    stored = [(c, c.estimate or SpeedupEstimate()) for c in cells]
    looks = max((e.looks or 1 for _, e in stored), default=1)
    first_look = next((e.first_look for _, e in stored if (e.looks or 1) == looks), None)
    sources = tuple(sorted({e.source for _, e in stored if e.source}))
    explained = [e.covariate_r2 for _, e in stored if e.covariate_r2 is not None]
    return IntervalBasis(
        sources=sources,
        rounds=max((e.rounds or c.server_starts for c, e in stored), default=1),
        dfs=tuple(sorted({e.df for _, e in stored if e.df})),
        calibration=summary.calibration if any("calibration" in s for s in sources) else None,
        looks=looks,
        look_level=design_level(looks, first_look=first_look),
        prompts=tuple(sorted({e.prompts for _, e in stored if e.prompts})),
        own_spread=tuple(f"{c.arm} {c.workload} {c.level.short()}" for c, e in stored if e.own_spread),
        calibration_refused=any(e.calibration_refused for _, e in stored),
        windows=len(verdicts),
        familywise=bool(summary.verdict and summary.verdict.familywise),
        chance_pays=_chance_pays(verdicts),
        precision_pct=(summary.verdict or VerdictSettings()).precision_pct,
        prior_sd=(summary.verdict or VerdictSettings()).startup_prior_sd
        if any(s.endswith("+prior") for s in sources)
        else None,
        alone=len(summary.arms) == 1,
        covariate_r2=(min(explained), max(explained)) if explained else None,
        no_covariate=_no_covariate(summary),
    )


def _no_covariate(summary: Summary) -> tuple[str, ...]:
    """Why workloads have no covariate: the one reason where all share it, else per workload."""
    missing = [(u.workload, u.missing) for u in summary.covariates if u.missing]
    if len({why for _, why in missing}) == 1 and len(missing) == len(summary.covariates):
        return (missing[0][1],)
    return tuple(f"{workload}: {why}" for workload, why in missing)


def analyze(summary: Summary) -> RunAnalysis:
    """The run's analysis: its window verdicts computed here, once, and handed to everything else
    that needs them (the findings' load and cost sentences)."""
    return _assemble(summary, tuple(verdicts_of.window_verdicts(summary)))


def _assemble(summary: Summary, verdicts: tuple[WindowVerdict, ...]) -> RunAnalysis:
    """Everything of the analysis but the verdicts, derived from the summary and the verdicts
    (milliseconds: the verdicts are the one costly part)."""
    order, pooled = _categories(summary)
    cost = cost_model(summary)
    return RunAnalysis(
        summary=summary,
        verdicts=verdicts,
        caveats=tuple(run_caveats(summary) + runtime_caveats(summary)),
        findings=tuple(findings(summary, verdicts, cost)),
        capacities=tuple(slo_capacity(summary)),
        schedule_checks=tuple(schedule_checks(summary.arms, summary.cells)),
        ramp_checks=tuple(ramp_checks(summary.arms, summary.ramp)),
        basis=_basis(summary, verdicts),
        ratio_differs=_ratio_differs(summary),
        category_order=order,
        category_pooled=pooled,
        tau_by_arm=_tau_by_arm(summary),
        per_position=_per_position(summary),
        pareto=_pareto(summary),
        published=tuple(published_checks(summary)),
        cost=cost,
        ceiling=decode_ceiling(summary),
    )


ANALYSIS_FILE = "analysis.json"
ANALYSIS_VERSION = 6  # of analysis.json's layout; a reader of another version derives it again
# the raw files derive reads (arms/<arm>/...): warm-ups, server logs and what derive writes are not
RAW_FILES = ("regime.json", "environment.json", "timing.json", "calibration.json", "workload_pass.json")
RAW_ARM_FILES = (
    "status.json",
    "samples.jsonl",
    "noise_floor.jsonl",
    "margins.jsonl",
    "workload_pass.jsonl",
    "distribution.jsonl",
    "windows.jsonl",
    "ramp.jsonl",
    "ramp_windows.jsonl",
)
_CODE = Path(__file__).resolve().parents[1]  # harness/: every layer derives


def _code_digest() -> str:
    """The harness's own source: an analysis derived by other code is not this code's."""
    digest = hashlib.sha256()
    for path in sorted(_CODE.rglob("*.py")):
        digest.update(path.relative_to(_CODE).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def raw_digest(run_dir: Path) -> str:
    """A digest of the run's raw files (names and bytes) and of the code that derives them."""
    # the directory's name is the run id the analysis holds: a renamed or copied run derives again
    digest = hashlib.sha256(f"analysis {ANALYSIS_VERSION} {_code_digest()} {run_dir.resolve().name}".encode())
    paths = [run_dir / name for name in RAW_FILES]
    paths += [arm / name for arm in sorted((run_dir / "arms").glob("*")) for name in RAW_ARM_FILES]
    for path in paths:
        if path.is_file():
            digest.update(path.relative_to(run_dir).as_posix().encode() + b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


_STORED = TypeAdapter(RunAnalysis)


def write_analysis(run_dir: Path, analysis: RunAnalysis) -> None:
    """Store the analysis beside the raw files it came from, with their digest."""
    body = _STORED.dump_json(analysis).decode()
    head = f'{{"analysis_version": {ANALYSIS_VERSION}, "digest": "{raw_digest(run_dir)}", "analysis": '
    write_text_atomic(run_dir / ANALYSIS_FILE, head + body + "}\n")


# a run's analysis is kilobytes per cell (164 kB for 6 arms x 4 workloads): a file past this is no
# analysis this harness wrote, and is never read (derived again instead)
MAX_ANALYSIS_BYTES = 64 * 2**20
MISMATCH = f"{ANALYSIS_FILE} did not match the raw files: derived again"
MOST_ROUNDS = inspect.signature(rounds_to_decide).parameters["most_rounds"].default  # its search's end


def _read_stored(run_dir: Path) -> tuple[RunAnalysis | None, str | None]:
    """The stored analysis where its version and digest are this code's and these raw files', and
    why it was not read where that is news: (None, None) when it is missing or stale (a raw file
    changed since, or other code wrote it: derived again without a word); (None, a line) when it
    is over ``MAX_ANALYSIS_BYTES``, not a regular file, or unreadable. Its size is looked at
    before anything is read, and no more than the limit is ever read."""
    path = run_dir / ANALYSIS_FILE
    try:
        found = path.stat()
    except OSError:
        return None, None
    if not stat.S_ISREG(found.st_mode):
        return None, f"{ANALYSIS_FILE} is not a regular file: derived again"
    if found.st_size > MAX_ANALYSIS_BYTES:
        return None, f"{ANALYSIS_FILE} is over {MAX_ANALYSIS_BYTES // 2**20} MiB: derived again"
    unreadable = f"{ANALYSIS_FILE} could not be read: derived again"
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_ANALYSIS_BYTES + 1)  # it may have grown since: never past the limit
        stored = json.loads(data) if len(data) <= MAX_ANALYSIS_BYTES else None
    except (OSError, ValueError, RecursionError):  # ValueError: not UTF-8, not JSON
        return None, unreadable
    if not isinstance(stored, dict) or not isinstance(stored.get("analysis"), dict):
        return None, unreadable
    if stored.get("analysis_version") != ANALYSIS_VERSION or stored.get("digest") != raw_digest(run_dir):
        return None, None
    try:
        return _STORED.validate_python(stored["analysis"]), None
    except (ValidationError, ValueError, TypeError, RecursionError):
        return None, unreadable


def _stored_rounds(stored: RunAnalysis) -> ToDecide:
    """The rounds to decide each window as ``stored`` says, where that is a count
    ``rounds_to_decide`` can give (more rounds than the run has, up to its search's end; None on a
    decided window): what a check reads instead of simulating them again (seconds). A count it
    cannot give reads as None, so the comparison fails."""
    kept = {(v.workload, v.level): v.to_decide for v in stored.verdicts}

    def rounds(
        workload: str, level: LoadLevel, estimate: Estimate | None, candidates: int, windows: int
    ) -> int | None:
        value = kept.get((workload, level))
        if value is None or estimate is None or estimate.selected_from(candidates, windows).decided:
            return None
        return value if estimate.rounds < value <= MOST_ROUNDS else None

    return rounds


def _checked(stored: RunAnalysis, summary: Summary) -> RunAnalysis | None:
    """The stored analysis where it is what ``summary`` (summarised again from the raw files) gives:
    its summary (every cell a view shows), each window's verdict (its cells, estimate, choice and
    caveats: a verdict states the estimate its table shows) and every other part, derived again
    (milliseconds: the rounds to decide are read, ``_stored_rounds``) and compared; None on any
    difference. Compared after the same trip through JSON that the stored one made (a NaN stored as
    null, a set's order)."""
    again = _assemble(summary, tuple(verdicts_of.window_verdicts(summary, _stored_rounds(stored))))
    try:
        return stored if _STORED.validate_json(_STORED.dump_json(again)) == stored else None
    except (ValidationError, ValueError):  # a figure JSON cannot hold: the stored one is not it either
        return None


def stored_analysis(run_dir: Path) -> RunAnalysis | None:
    """The stored analysis where it is fresh and what the raw files give (``load_analysis``); None
    otherwise (then derived again: it is never the only copy of anything)."""
    stored, _ = _read_stored(run_dir)
    return _checked(stored, summarize(read_raw(run_dir))) if stored is not None else None


@dataclass(frozen=True)
class AnalyzedRun:
    """A run directory read and analysed once: its raw files (the regime, the environment, the
    samples a figure draws), its analysis, and the gate verdicts ``bench gate`` stored, if any."""

    raw: RawRun
    analysis: RunAnalysis
    gate: StoredGate | None
    # why the stored analysis.json was not used, where that is news (it did not match the raw
    # files, or could not be read): one line a command prints on stderr; None when it was used, or
    # was missing or stale
    note: str | None = None

    @property
    def root(self) -> Path:
        return self.raw.run.root


def load_analysis(run_dir: Path) -> AnalyzedRun:
    """A run directory's raw files and its analysis: the stored one where it is fresh and what the
    raw files give (summarised again and compared: ``_checked``), else derived from them."""
    raw = read_raw(run_dir)
    summary = summarize(raw)
    stored, note = _read_stored(raw.run.root)
    checked = _checked(stored, summary) if stored is not None else None
    if stored is not None and checked is None:
        note = MISMATCH
    return AnalyzedRun(raw, checked or analyze(summary), read_gate(run_dir), note)
