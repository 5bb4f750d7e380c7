"""The exactness section of a summary (derive layer: pure): each speculative arm's greedy outputs
against the baseline's, prompt by prompt, with the baseline's own noise floor; a divergence is
classified by the reference's top-2 logprob margin (``harness.core.probes.exactness``)."""

from __future__ import annotations

from harness.config.regime import Regime
from harness.core.probes.exactness import compare_records, shares, with_logprobs_from
from harness.results.model import (
    CellMetrics,
    ExactnessBlock,
    ExactnessEntry,
    ExactnessSection,
    ExactnessShares,
)
from harness.results.raw import RawRun
from harness.results.records import RequestRecord

PAIRING = "same workload, same prompt, same concurrency level; greedy, same seed and max tokens"


def _block(
    reference: list[RequestRecord], candidate: list[RequestRecord], margin: float, label: str
) -> ExactnessBlock:
    entries = [ExactnessEntry.model_validate(e) for e in compare_records(reference, candidate, margin)]
    return ExactnessBlock(reference=label, **shares([e.status for e in entries]), prompts=entries)


def exactness(raw: RawRun) -> ExactnessSection:
    """Per speculative arm: its outputs vs the baseline's; plus the baseline's own noise floor."""
    regime, baseline = raw.regime, raw.baseline_arm
    if not regime.exactness_applies():
        return ExactnessSection(
            applicable=False, reason="exactness is disabled or the regime does not decode greedily"
        )
    margin = raw.record.near_tie_margin
    second = raw.arms[baseline].noise_floor  # the unmeasured pass with logprobs
    reference = with_logprobs_from(raw.arms[baseline].samples, second)
    arms = {
        name: _block(reference, arm.samples, margin, baseline)
        for name, arm in raw.arms.items()
        if name != baseline
    }
    noise = _block(reference, second, margin, f"{baseline} (first pass)") if second else None
    return ExactnessSection(
        applicable=True,
        near_tie_margin=margin,
        pairing=PAIRING,
        arms=arms,
        noise_floor=noise,
        compile_mode=compile_mode(regime),
    )


def compile_mode(regime: Regime) -> str:
    """The mode the arms' servers run in (the noise floor's pass runs on the baseline's server):
    "eager" (engine.enforce_eager) or "compiled"; the drafter-only switch leaves the target's
    verify pass, whose argmax is the output, compiled."""
    return "eager" if regime.engine.enforce_eager else "compiled"


def cell_exactness(cell: CellMetrics, section: ExactnessSection, baseline: str) -> ExactnessShares | None:
    block = section.block(cell.arm, baseline)
    entries = [
        e for e in (block.prompts if block else []) if (e.workload, e.level) == (cell.workload, cell.level)
    ]
    return ExactnessShares(**shares([e.status for e in entries])) if entries else None
