"""A run's pace against the regime's reference run (``reference:``; ``harness.config.reference``):
the baseline's output tok/s in the reference's window here and there, and the CPU features one
machine has and the other lacks. Machines of one kind differ twofold (the default's baseline: 39.7
tok/s on a 2-core AMD EPYC with ``avx_vnni``, 19.4 on one without): a run says so, instead of
leaving its minutes and $/Mtok to be read against the README's.

A pace within ``SAME_PACE`` of the reference's (either way) is the reference's: start-ups alone
move a window's tok/s by 3.5-6% here, a machine twice as slow is another machine."""

from __future__ import annotations

from typing import Any

from harness.config.level import LoadLevel
from harness.config.reference import PaceReference
from harness.core.machine import CPU_FEATURES
from harness.results.model import CellMetrics, PaceComparison

SAME_PACE = 1.2  # within 1.2x either way: not worth a caveat


def machine_text(cpu_model: str | None, flags: list[str] | None, gpu: str | None = None) -> str:
    """A machine as the pace line names it: its GPUs, else its CPU model and the engine's features."""
    if gpu:
        return gpu
    features = [f for f in CPU_FEATURES if f in (flags or [])]
    return f"{cpu_model or 'an unknown CPU'} ({', '.join(features) or 'no recorded features'})"


def gpus_text(environment: dict[str, Any]) -> str | None:
    """An environment's GPUs as the pace names them ('8 x NVIDIA H200'); None without any."""
    names = [g.get("name") for g in environment.get("gpus") or [] if g.get("name")]
    return ", ".join(f"{names.count(n)} x {n}" for n in dict.fromkeys(names)) or None


def compare_pace(
    reference: PaceReference | None, baseline: list[CellMetrics], environment: dict[str, Any]
) -> PaceComparison | None:
    """This run's baseline against ``reference`` in its window; None without a reference, or where
    this run did not measure that window. The run side records a reference only for a run under
    its conditions (``harness.run.pace_reference.reference_for``: the same regime fingerprint), so a
    difference here is the machine's."""
    if reference is None:
        return None
    level = LoadLevel(reference.concurrency, None)
    cell = next((c for c in baseline if c.workload == reference.workload and c.level == level), None)
    if cell is None or not cell.output_tok_s:
        return None
    flags = environment.get("cpu_flags") or []
    here = [f for f in CPU_FEATURES if f in flags]
    there = [f for f in CPU_FEATURES if f in reference.cpu_flags]
    gpus = gpus_text(environment)
    # the CPU's features name the cause of a CPU engine's pace only: a GPU run's is its GPUs'
    compare_features = bool(flags) and bool(reference.cpu_flags) and not gpus and not reference.gpu
    return PaceComparison(
        reference_run=reference.run,
        source=reference.source,
        workload=reference.workload,
        concurrency=reference.concurrency,
        reference_tok_s=reference.baseline_tok_s,
        tok_s=cell.output_tok_s,
        slower=reference.baseline_tok_s / cell.output_tok_s,
        reference_machine=machine_text(reference.cpu_model, reference.cpu_flags, reference.gpu),
        machine=machine_text(environment.get("cpu_model"), flags, gpus),
        missing_features=[f for f in there if f not in here] if compare_features else [],
        extra_features=[f for f in here if f not in there] if compare_features else [],
    )


def off_pace(pace: PaceComparison | None) -> bool:
    """The run's machine ran beyond ``SAME_PACE`` of the reference's, either way."""
    return pace is not None and not 1 / SAME_PACE <= pace.slower <= SAME_PACE
