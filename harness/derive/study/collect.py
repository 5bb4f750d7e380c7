"""A study directory, loaded: each point's typed summary, the observations the analysis reads,
the analysis itself, and the study's tidy table for pandas."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.config.regime import Regime
from harness.core.errors import UserError
from harness.core.machine import machine_identity
from harness.derive.analysis import RunAnalysis, analyze
from harness.derive.cost_model import CostModel
from harness.derive.findings import Fact
from harness.derive.study import analysis, policy
from harness.derive.summary import summarize
from harness.derive.verdict import divergence
from harness.results.files import RunDir, read_json, read_run_record
from harness.results.model import CellMetrics, Summary
from harness.results.study.policy_file import PolicyFile
from harness.results.study.record import StudyDir, StudyPointRecord, StudyRecord

if TYPE_CHECKING:
    import pandas as pd


def round_speedups(cell: CellMetrics, reference: CellMetrics | None) -> tuple[tuple[int, float], ...]:
    """Per server start-up (round) both cells measured: the arm's start-up mean tok/s over the
    baseline's same start-up (what pairs load levels and arms by round in the study's analysis)."""
    if reference is None:
        return ()
    arm, base = cell.startup_tok_s(), reference.startup_tok_s()
    return tuple((r, arm[r] / base[r]) for r in sorted(arm) if base.get(r) and arm[r] > 0)


def point_observations(
    point: StudyPointRecord, summary: Summary, families: dict[str, str]
) -> list[analysis.Observation]:
    """One observation per closed-loop cell of one point's run: the study's load axis is concurrency
    (open-loop windows are read per run, in its goodput-vs-rate view)."""
    closed = [c for c in summary.cells if c.request_rate is None]
    base = {(c.workload, c.concurrency): c for c in closed if c.arm == summary.baseline_arm}
    axes = tuple((path, value) for path, value in point.axes)
    scheduled = {a.name for a in summary.arms if a.k_schedule}
    from harness.config.engines.vllm import LOSSY_REJECTION  # on use: adapters are imported lazily

    lossy = {a.name for a in summary.arms if a.verification in LOSSY_REJECTION}
    out = []
    for cell in closed:
        reference = base.get((cell.workload, cell.concurrency))
        out.append(
            analysis.Observation(
                point=point.id,
                axes=axes,
                arm=cell.arm,
                family=families.get(cell.arm, cell.arm),
                method=cell.method,
                k=cell.num_speculative_tokens,
                scheduled=cell.arm in scheduled,
                lossy=cell.arm in lossy,
                diverged=cell.arm != summary.baseline_arm
                and reference is not None
                and divergence(summary, cell, reference) is not None,
                workload=cell.workload,
                concurrency=cell.concurrency,
                speedup=cell.speedup,
                tau=cell.tau,
                output_tok_s=cell.output_tok_s,
                usd_per_mtok=cell.usd_per_mtok,
                baseline_usd_per_mtok=reference.usd_per_mtok if reference else None,
                identical_pct=cell.exactness.identical_pct if cell.exactness else None,
                round_speedups=round_speedups(cell, reference),
                stored=cell.estimate,
            )
        )
    return out


@dataclass
class StudyResults:
    """Everything a study's table, report and pandas view show, derived from its points' raw files."""

    root: Path
    record: StudyRecord
    summaries: dict[str, Summary]  # point id -> summary, for the points that have results
    missing: list[str]  # points without results yet (not run, or nothing measured)
    run_dirs: dict[str, Path] = field(default_factory=dict)  # point id -> the attempt its results are from
    observations: list[analysis.Observation] = field(default_factory=list)
    # each analysis is computed once: the terminal, analysis.md and the page all read it
    _derived: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.observations = [
            o
            for point in self.record.points
            if point.id in self.summaries
            for o in point_observations(point, self.summaries[point.id], self.record.families)
        ]

    def failed_jobs(self) -> dict[str, str]:
        """Points whose newest job failed or was interrupted: the scheduler's reason."""
        return {
            p.id: f"attempt {p.attempts[-1].attempt}: {p.attempts[-1].reason or p.attempts[-1].state}"
            for p in self.record.points
            if p.attempts and p.attempts[-1].state in ("failed", "interrupted")
        }

    def machines(self) -> dict[str, str]:
        """Each point's machine as the identity checks see it (CPU, GPU model and count), from its
        environment.json; more than one value means the study spans machines."""
        out = {}
        for point_id, run_dir in self.run_dirs.items():
            try:
                identity = machine_identity(read_json(run_dir / "environment.json"))
            except UserError:
                continue
            out[point_id] = identity["gpus"] or identity["cpu_model"] or "unknown"
        return out

    def point(self, point_id: str) -> StudyPointRecord:
        return next(p for p in self.record.points if p.id == point_id)

    def label(self, point_id: str) -> str:
        axes = self.point(point_id).axes
        return ", ".join(f"{path}={value}" for path, value in axes) or point_id

    def _once(self, name: str, compute: Callable[[], Any]) -> Any:
        if name not in self._derived:
            self._derived[name] = compute()
        return self._derived[name]

    def deployable(self) -> list[analysis.Observation]:
        """The observations a choice may be made of: every arm but those whose acceptance was forced
        and those whose outputs were not lossless in their window."""
        return [o for o in self.observations if not o.lossy and not o.diverged]

    def recommendations(self) -> list[analysis.Recommendation]:
        return self._once("recommendations", lambda: analysis.recommend(self.deployable()))

    def break_evens(self) -> list[analysis.BreakEven]:
        def compute() -> list[analysis.BreakEven]:
            series: dict[tuple[str, str, str], list[analysis.Observation]] = {}
            for o in self.observations:
                if o.method != "baseline":
                    series.setdefault((o.point, o.arm, o.workload), []).append(o)
            return [analysis.break_even(members) for members in series.values()]

        return self._once("break_evens", compute)

    def best_ks(self) -> list[analysis.BestK]:
        return self._once("best_ks", lambda: analysis.best_k(self.deployable()))

    def flips(self) -> list[analysis.Flip]:
        return self._once("flips", lambda: analysis.flips(self.deployable()))

    def policies(self) -> list[policy.Schedule]:
        """The speculation policy per point, family and workload (and the workload mix)."""
        return self._once("policies", lambda: policy.policies(self.deployable(), self.workload_mix()))

    def analyses(self) -> dict[str, RunAnalysis]:
        """Each point's run analysis (``harness.derive.analysis``), derived once from its summary."""
        return self._once("analyses", lambda: {p: analyze(s) for p, s in self.summaries.items()})

    def cost_models(self) -> dict[str, CostModel]:
        """Each point's step cost model (``harness.derive.cost_model``), from its analysis."""
        return {p: a.cost for p, a in self.analyses().items()}

    def k_limits(self) -> dict[str, list[Fact]]:
        """Per point, why a larger K stopped paying (its findings' rule: tokens per step or step cost)."""
        return {
            p: [f for f in a.findings if f.kind.startswith("k_limit")] for p, a in self.analyses().items()
        }

    def workload_mix(self) -> dict[str, float]:
        """The study regime's policy.workload_mix (unset: equal weights); a name the study did not
        measure is refused with its field path."""
        mix = dict((self.record.regime.get("policy") or {}).get("workload_mix") or {})
        measured = sorted({o.workload for o in self.observations})
        unknown = [name for name in mix if name not in measured]
        if unknown and measured:
            raise UserError(
                f"{self.record.source_path}: policy.workload_mix.{unknown[0]}: no such workload in the "
                f"study (measured: {', '.join(measured)})"
            )
        return mix

    def policy_file(self) -> PolicyFile:
        """The policy with each schedule's engine configuration (from the points' stored regimes);
        built once: the terminal's table, its engine lines, analysis.md and the files all read it."""

        def compute() -> PolicyFile:
            arms = {}
            for point_id, run_dir in self.run_dirs.items():
                regime = Regime.model_validate(read_run_record(RunDir(run_dir)).regime)
                arms |= {(point_id, arm.name): arm for arm in regime.arms}
            engine = self.record.regime["engine"]["name"]
            return policy.document(self.policies(), self.root.name, self.record.name, engine, arms)

        return self._once("policy_file", compute)

    def cells(self) -> pd.DataFrame:
        """The study's tidy table: every point's cells (``harness.load_run(...).cells()`` columns),
        with the point id, each regime axis as a column, and the arm's family."""
        import pandas as pd

        from harness.derive.frames import load_run

        frames = []
        for point in self.record.points:
            if point.id not in self.summaries:
                continue
            frame = load_run(self.run_dirs[point.id]).cells()
            frame.insert(0, "point", point.id)
            for index, (path, value) in enumerate(point.axes, start=1):
                frame.insert(index, path, [value] * len(frame))
            frame.insert(
                len(point.axes) + 1, "family", [self.record.families.get(a, a) for a in frame["arm"]]
            )
            frames.append(frame)
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _results_dir(study: StudyDir, point: StudyPointRecord) -> Path | None:
    """The point's newest attempt that has a run (earlier attempts stay on disk, never mixed in)."""
    for run_dir in [a.run_dir for a in reversed(point.attempts)] or [point.run_dir]:
        if (study.root / run_dir / "regime.json").is_file():
            return study.root / run_dir
    return None


def load_study(path: Path) -> StudyResults:
    """A study directory with every point's summary re-derived from its raw files."""
    study = StudyDir(Path(path))
    if not study.record_path.is_file():
        raise UserError(f"{path}: not a study directory (no study.json)")
    record = study.read()
    summaries: dict[str, Summary] = {}
    run_dirs: dict[str, Path] = {}
    missing = []
    for point in record.points:
        run_dir = _results_dir(study, point)
        if run_dir is not None:
            summary = summarize(run_dir)
            if summary.cells:
                summaries[point.id], run_dirs[point.id] = summary, run_dir
                continue
        missing.append(point.id)
    return StudyResults(
        root=study.root, record=record, summaries=summaries, missing=missing, run_dirs=run_dirs
    )
