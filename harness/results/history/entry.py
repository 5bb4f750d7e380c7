"""What the history keeps of one run, as typed models (``harness.results.history.store`` writes them, its
reads have the same columns): the run, every start-up-level sample, every cell's verdict."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from harness.results.records import ResultModel


class HistoryRun(ResultModel):
    run_id: str
    regime: str
    regime_fingerprint: str  # what ran (regime.json's fingerprint): comparable nights share it
    conditions_fingerprint: str | None = None  # the conditions without the arms (gates compare arms by it)
    machine_key: str  # hash of the machine identity without the software: comparable nights share it
    machine: dict[str, Any]  # harness.core.machine.machine_identity of the run's environment
    environment_fingerprint: str | None
    engine: str
    engine_version: str | None
    engine_patches: list[str]
    harness_commit: str | None
    engine_commit: str | None = None  # given by the caller (bench history add --engine-commit)
    # the bench process's engine-relevant environment variables (environment.json's ``env``, secrets
    # redacted): set outside the regime, so not in its fingerprint, but what else changed a night
    env: dict[str, str] = {}
    started_at: datetime
    study: str | None = None  # the study directory's name, for a study's point
    point: str | None = None
    source: str  # the run directory it was read from
    # a digest of the run's raw samples, not of where they lie (schema 3): a copy of the run under
    # another name or folder has the same, and is the same night (None: not known, keyed by run id)
    content_digest: str | None = None
    # the run's last ``bench gate`` as it stored it (RUN_DIR/gate/checks.json) or as ``bench gate
    # --history`` recorded it (schema 4): pass, regression, inconclusive, infrastructure failure
    gate_outcome: str | None = None


class HistorySample(ResultModel):
    """One start-up's value of one metric in one cell (one prompt's, for a prompt-level metric)."""

    arm: str
    method: str
    workload: str
    concurrency: int
    request_rate: float | None
    metric: str
    sample: int  # the start-up's (or prompt's) index in the cell
    value: float


class HistoryCell(ResultModel):
    arm: str
    method: str
    workload: str
    concurrency: int
    request_rate: float | None
    server_starts: int
    verdict: str | None  # the window's verdict of this arm (pays, loses, ...); None for the baseline
    speedup: float | None
    speedup_low: float | None
    speedup_high: float | None
    speedup_log_se: float | None
    speedup_df: int | None
    # measured beside a busy neighbour (schema 2): its timed numbers are not the engine's alone, so
    # a night with it is no reference for that cell (harness.derive.history.reference)
    noisy_neighbour: bool = False


class HistoryEntry(ResultModel):
    run: HistoryRun
    samples: list[HistorySample]
    cells: list[HistoryCell]
    # the run's raw lines that were not read (a torn last line: a write cut by a crash): said by
    # `bench history add`, not stored (the history keeps what was read)
    unread_lines: list[str] = []
