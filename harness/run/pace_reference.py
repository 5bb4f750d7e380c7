"""Which run a new run's pace is read against, and the plan line that says so before anything starts.

The regime's ``reference:`` (the README's run, for the default), else the newest earlier run of the
regime under the results directory on another machine (another CPU model or features, core count
or GPUs): its baseline's pooled tok/s at its lowest concurrency (of its alphabetically first
workload). Either only where it ran under this run's conditions (the same regime fingerprint: a
``--set target.dtype=bfloat16`` run is not "a slower machine"). ``harness.derive.pace`` compares
the pace once this run has measured it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.config.reference import PaceReference
from harness.config.regime import Regime
from harness.core.errors import UserError
from harness.core.machine import CPU_FEATURES, machine_differences
from harness.derive.pace import SAME_PACE, gpus_text, machine_text
from harness.results.files import read_json
from harness.results.model import load_summary


def reference_for(
    regime: Regime, fingerprint: str, results_dir: Path, environment: dict[str, Any]
) -> tuple[PaceReference | None, str | None]:
    """The reference this run is read against, and why none where there is none: the regime's, if
    it ran under ``fingerprint`` (this run's), else the newest earlier run under it on another
    machine (``earlier_reference``)."""
    reference = regime.reference
    if reference is not None and reference.fingerprint != fingerprint:
        return None, (
            f"the regime's reference run {reference.run} ran under fingerprint {reference.fingerprint}, this "
            f"run under {fingerprint} (other settings): its pace is not this machine's to compare"
        )
    if reference is not None:
        return reference, None
    return earlier_reference(results_dir, regime, fingerprint, environment), None


def earlier_reference(
    results_dir: Path, regime: Regime, fingerprint: str, environment: dict[str, Any]
) -> PaceReference | None:
    """The newest earlier run of ``regime`` (by name) under ``fingerprint`` and measured on another
    machine than ``environment``'s, as a reference; None where there is none (or none readable)."""
    folder = results_dir / regime.name
    runs = sorted((p.parent for p in folder.glob("*/summary.json")), reverse=True) if folder.is_dir() else []
    for run in runs:
        try:
            theirs = read_json(run / "environment.json")
            summary = load_summary(run / "summary.json")
        except (OSError, ValueError, UserError):
            continue  # a run being written, or of a version this harness cannot read: the next
        if summary.regime_fingerprint != fingerprint:
            continue
        if not isinstance(theirs, dict) or not _other_machine(theirs, environment):
            continue
        cells = sorted(
            (c for c in summary.cells_of(summary.baseline_arm) if c.request_rate is None and c.output_tok_s),
            key=lambda c: (c.workload, c.concurrency),
        )
        if not cells:
            continue
        return PaceReference(
            run=run.name,
            fingerprint=fingerprint,
            source=f"the newest earlier run of {regime.name} on another machine, {run}",
            workload=cells[0].workload,
            concurrency=cells[0].concurrency,
            baseline_tok_s=cells[0].output_tok_s,  # type: ignore[arg-type]
            cpu_model=theirs.get("cpu_model"),
            cpu_flags=[f for f in CPU_FEATURES if f in (theirs.get("cpu_flags") or [])],
            gpu=gpus_text(theirs),
        )
    return None


def _other_machine(theirs: dict[str, Any], ours: dict[str, Any]) -> bool:
    """Another CPU model, CPU features the engine chooses between, core count or GPUs."""

    def engine_features(env: dict[str, Any]) -> dict[str, Any]:
        flags = env.get("cpu_flags")
        return {**env, "cpu_flags": None if flags is None else [f for f in CPU_FEATURES if f in flags]}

    differs = machine_differences(engine_features(theirs), engine_features(ours))
    return any(d.split(":")[0] in ("cpu_model", "cpu_count", "cpu_flags", "gpus") for d in differs)


def pace_line(regime: Regime, environment: dict[str, Any], why_none: str | None = None) -> str:
    """The plan's line on pace: which run this one will be read against, and the CPU features this
    machine lacks or has beyond it (where a slower or faster pace will come from); ``why_none``:
    why no reference is read (``reference_for``)."""
    reference = regime.reference
    if reference is None:
        return (
            f"Pace: compared with none: {why_none}"
            if why_none
            else (
                "Pace: no reference run (the regime's reference:, or an earlier run of it on another machine "
                "under the same fingerprint): this run's pace is compared with none"
            )
        )
    flags = environment.get("cpu_flags") or []
    said = (
        f"Pace: read against run {reference.run} ({reference.source}), whose baseline made "
        f"{reference.baseline_tok_s:.1f} tok/s on {reference.workload} @{reference.concurrency} on "
        f"{machine_text(reference.cpu_model, reference.cpu_flags, reference.gpu)}"
    )
    if regime.hardware.kind != "cpu" or not flags or not reference.cpu_flags:
        return said
    missing = [f for f in reference.cpu_flags if f not in flags]
    extra = [f for f in CPU_FEATURES if f in flags and f not in reference.cpu_flags]
    beyond = f"the verdict says so beyond {SAME_PACE:g}x of its pace"
    if missing:
        return f"{said}; this CPU lacks {', '.join(missing)}: expect it slower ({beyond})"
    if extra:
        return f"{said}; this CPU has {', '.join(extra)} beyond it: expect it faster ({beyond})"
    return f"{said}; this CPU has the same features"
