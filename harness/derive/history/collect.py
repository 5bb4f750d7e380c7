"""A run directory as a history entry: the run's identity, and per arm and cell the start-up-level
samples of every metric the gates know (``harness.core.metrics``), read the way a relative gate reads
them (``samples.RunView.startup_samples``: one value per server start-up, one per prompt for a
prompt-level metric), and the cell's speedup with its interval and the verdict that interval
supports (the arm's own, not corrected for a selection among arms). Pure: files in, models out."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path

from harness.config.checks import Gates
from harness.core.errors import UserError
from harness.core.machine import environment_fingerprint, machine_identity
from harness.core.metrics import METRICS
from harness.derive.analysis import RAW_ARM_FILES
from harness.derive.gates.evaluate import night_outcome
from harness.derive.intervals import stored_estimate
from harness.derive.samples import RunView
from harness.results.gate import read_gate
from harness.results.history.entry import HistoryCell, HistoryEntry, HistoryRun, HistorySample
from harness.results.model import SpeedupEstimate

GATED = [name for name, metric in METRICS.items() if metric.gated]  # what a gate can read, by the registry
# the machine, not its software: a new engine or torch on the same machine is a change the history
# must show on one series, not a new series
SOFTWARE = ("engine_version", "torch")


def machine_key(environment: dict) -> str:
    identity = {k: v for k, v in machine_identity(environment).items() if k not in SOFTWARE}
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]


def content_digest(run_dir: Path) -> str | None:
    """A digest of the run's raw samples: each arm's raw files (``harness.derive.analysis.RAW_ARM_FILES``),
    by their names within the run and their bytes, never the directory's name or path (unlike
    ``harness.derive.analysis.raw_digest``, which is of the analysis). A copy of the run under another name
    or folder has the same digest: the same night. Its regime.json and environment.json are left
    out: a copy whose gate rules were edited still holds the same night. None: no raw file."""
    digest, found = hashlib.sha256(b"bench history content 1\0"), False
    for arm in sorted(p for p in (run_dir / "arms").glob("*") if p.is_dir()):
        for name in RAW_ARM_FILES:
            path = arm / name
            if path.is_file():
                named = f"{arm.name}/{name}".encode() + b"\0"
                digest.update(named + hashlib.sha256(path.read_bytes()).digest())
                found = True
    return digest.hexdigest() if found else None


def started_at(run_id: str, run_dir: Path) -> datetime:
    """When the run started (UTC): from its id (``YYYYmmdd-HHMMSS-xxxxxx``, the harness's own), else
    (a directory renamed) when its ``regime.json`` was written, at its start."""
    try:
        return datetime.strptime(run_id[:15], "%Y%m%d-%H%M%S")
    except ValueError:
        return datetime.fromtimestamp((run_dir / "regime.json").stat().st_mtime, tz=UTC).replace(tzinfo=None)


def history_run(
    view: RunView, run_dir: Path, engine_commit: str | None = None, study: str | None = None
) -> HistoryRun:
    """The run's identity as the history keeps it (no samples: what a gate against the history needs)."""
    environment, record = view.raw.environment, view.record
    return HistoryRun(
        run_id=view.summary.run_id if study is None else f"{study}/{run_dir.name}",
        regime=view.regime.name,
        regime_fingerprint=record.fingerprint,
        conditions_fingerprint=view.regime.conditions_fingerprint(record.prompts()),
        machine_key=machine_key(environment),
        machine=machine_identity(environment),
        environment_fingerprint=environment_fingerprint(environment) if environment else None,
        engine=view.regime.engine.name,
        engine_version=environment.get("engine_version"),
        engine_patches=record.engine_patches,
        env=environment.get("env") or {},
        harness_commit=environment.get("harness_git_sha"),
        engine_commit=engine_commit,
        started_at=started_at(study.removeprefix("study-") if study else view.summary.run_id, run_dir),
        study=study,
        point=run_dir.name if study else None,
        source=str(run_dir),
        content_digest=content_digest(run_dir),
        gate_outcome=gate_outcome(run_dir, view.regime.gates),
    )


def gate_outcome(run_dir: Path, gates: Gates) -> str | None:
    """The outcome of the run's last ``bench gate`` (RUN_DIR/gate/checks.json) as the history keeps it
    (``night_outcome``), None when not gated."""
    stored = read_gate(run_dir)
    return None if stored is None else night_outcome(stored.checks, gates)


class IncompleteRun(UserError):
    """A run still running or interrupted: the history keeps finished runs only (a run is added
    once, so a partial one would stand for it for good)."""


def history_entry(run_dir: Path, engine_commit: str | None = None, study: str | None = None) -> HistoryEntry:
    """The entry of one run directory (a study's point: ``study`` names the study, and the point's
    run id is ``STUDY/POINT``); an unfinished run is refused (``IncompleteRun``)."""
    view = RunView(run_dir)
    unfinished = [a.name for a in view.summary.arms if a.status in ("running", "interrupted", "not_run")]
    if unfinished:
        raise IncompleteRun(
            f"{run_dir}: not finished (arms {', '.join(unfinished)}); finish it with bench run --resume "
            f"{run_dir}, then add it"
        )
    methods = {arm.name: arm.method for arm in view.regime.arms}
    samples, cells = [], []
    for cell in view.summary.cells:
        where = {
            "arm": cell.arm,
            "method": methods[cell.arm],
            "workload": cell.workload,
            "concurrency": cell.concurrency,
            "request_rate": cell.request_rate,
        }
        for name in GATED:
            values = view.startup_samples(cell.arm, cell.workload, cell.level, name)
            samples += [
                HistorySample(**where, metric=name, sample=index, value=value)
                for index, value in enumerate(values)
            ]
        estimate, stored = stored_estimate(cell.speedup, cell.estimate), cell.estimate or SpeedupEstimate()
        baseline = cell.arm == view.summary.baseline_arm
        cells.append(
            HistoryCell(
                **where,
                server_starts=cell.server_starts,
                verdict=None if baseline or estimate is None else estimate.verdict,
                speedup=cell.speedup,
                speedup_low=stored.low,
                speedup_high=stored.high,
                speedup_log_se=stored.log_se,
                speedup_df=stored.df,
                noisy_neighbour=bool(cell.noisy_neighbour),
            )
        )
    return HistoryEntry(
        run=history_run(view, run_dir, engine_commit, study),
        samples=samples,
        cells=cells,
        unread_lines=view.summary.unread_lines,
    )
