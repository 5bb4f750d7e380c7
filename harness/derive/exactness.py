"""The exactness section of a summary (derive layer: pure): each speculative arm's greedy outputs
against the baseline's, prompt by prompt, with the baseline's own noise floor; a divergence is
classified by the reference's top-2 logprob margin (``harness.core.probes.exactness``).

Where the margins and the noise floor come from (issue 81):

- a run whose baseline made the full reference pass (``noise_floor.jsonl``: its windows again, with
  logprobs, on its first start-up; every run before the targeted pass, and a design of one round):
  the margins from that pass, the noise floor that pass against the first;
- otherwise (``margins.jsonl``, or neither, with two or more start-ups of the baseline): the noise
  floor is the baseline's own start-ups, each later one's outputs against its first's (same workload,
  prompt, level and repeat within the start-up); the margins come from ``margins.jsonl``, the
  logprobs the baseline's later start-ups asked for only the prompts an output diverged on
  (``prompts_to_margin``). A divergence on a prompt without one (it first appeared after the
  baseline's last start-up) stays ``unknown``, as one without logprobs always was.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

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
# what the noise floor's block was compared with (``ExactnessBlock.reference``): the views tell the two
# readings apart by it
FIRST_PASS = " (first pass)"  # the full reference pass against the baseline's first pass
FIRST_START_UP = " (start-up 1)"  # the baseline's later start-ups against its first


@dataclass(frozen=True, order=True)
class MarginPrompt:
    """A prompt whose margins are wanted: a window's cell (a conversation's turn: ``<name>.turn<t>``),
    its prompt and its load level."""

    workload: str
    prompt_id: str
    concurrency: int
    request_rate: float | None = None

    @property
    def level(self) -> tuple[int, float | None]:
        return self.concurrency, self.request_rate


def _key(record: Any) -> MarginPrompt:
    return MarginPrompt(record.workload, record.prompt_id, record.concurrency, record.request_rate)


def _logprob_records(raw: RawRun) -> list[RequestRecord]:
    """The baseline's records that carry logprobs for its greedy path: the full reference pass's
    (``noise_floor.jsonl``) and the targeted one's (``margins.jsonl``)."""
    baseline = raw.arms[raw.baseline_arm]
    return [*baseline.noise_floor, *baseline.margins]


def prompts_to_margin(raw: RawRun) -> list[MarginPrompt]:
    """The prompts (cell, prompt, level) whose outputs so far are not all the same, over every arm's
    measured requests and every start-up of the baseline's, where the baseline answered them and
    no logprob record of its answers them yet (a full reference pass, an earlier targeted one, or
    the baseline's own requests in a run from before the passes): what the baseline's later
    start-ups ask logprobs for. Sorted; [] where greedy exactness does not apply."""
    if not raw.regime.exactness_applies():
        return []
    baseline = raw.arms[raw.baseline_arm]
    carrying = (*_logprob_records(raw), *baseline.samples)
    have = {_key(r) for r in carrying if r.error is None and r.top_logprobs}
    answered = {_key(r) for r in baseline.samples if r.error is None}
    outputs: dict[MarginPrompt, set[tuple[int, ...]]] = {}
    for arm in raw.arms.values():
        for record in arm.samples:
            if record.error is None:
                outputs.setdefault(_key(record), set()).add(tuple(record.token_ids))
    wanted = [k for k, seen in outputs.items() if len(seen) > 1 and k in answered and k not in have]
    return sorted(wanted, key=lambda k: (k.workload, k.concurrency, k.request_rate or 0.0, k.prompt_id))


def baseline_start_ups(raw: RawRun) -> int:
    """The baseline's start-ups with an answered request (its repeats are counted over them)."""
    repeats = raw.regime.load.max_repeats()
    return len({r.repeat // repeats for r in raw.arms[raw.baseline_arm].samples if r.error is None})


def start_up_entries(reference: Sequence[RequestRecord], repeats: int, margin: float) -> list[dict[str, Any]]:
    """The baseline's later start-ups against its first (``reference``: every start-up's records, the
    first's with their margins): each later start-up's record paired with the first's of the same
    workload, prompt, level and repeat within the start-up, as ``compare_records`` pairs; each entry
    keeps the later record's own repeat."""
    first = [r for r in reference if r.repeat < repeats]
    later: dict[int, list[RequestRecord]] = {}
    for record in reference:
        if record.repeat >= repeats:
            later.setdefault(record.repeat // repeats, []).append(record)
    entries = []
    for start, records in sorted(later.items()):
        shift = start * repeats
        within = [replace(r, repeat=r.repeat - shift) for r in records]
        for entry in compare_records(first, within, margin):
            entries.append({**entry, "repeat": entry["repeat"] + shift})
    return entries


def _block(
    reference: list[RequestRecord], candidate: list[RequestRecord], margin: float, label: str
) -> ExactnessBlock:
    return _entries_block(compare_records(reference, candidate, margin), label)


def _entries_block(found: list[dict[str, Any]], label: str) -> ExactnessBlock:
    entries = [ExactnessEntry.model_validate(e) for e in found]
    return ExactnessBlock(reference=label, **shares([e.status for e in entries]), prompts=entries)


def exactness(raw: RawRun) -> ExactnessSection:
    """Per speculative arm: its outputs vs the baseline's; plus the baseline's own noise floor."""
    regime, baseline = raw.regime, raw.baseline_arm
    if not regime.exactness_applies():
        return ExactnessSection(
            applicable=False, reason="exactness is disabled or the regime does not decode greedily"
        )
    margin = raw.record.near_tie_margin
    second = raw.arms[baseline].noise_floor  # the full reference pass (logprobs), where it was made
    reference = with_logprobs_from(raw.arms[baseline].samples, _logprob_records(raw))
    arms = {
        name: _block(reference, arm.samples, margin, baseline)
        for name, arm in raw.arms.items()
        if name != baseline
    }
    noise = None
    if second:  # today's reading: the second pass against the first
        noise = _block(reference, second, margin, f"{baseline}{FIRST_PASS}")
    elif baseline_start_ups(raw) >= 2:  # the baseline's own start-ups
        repeats = regime.load.max_repeats()
        found = start_up_entries(reference, repeats, margin)
        noise = _entries_block(found, f"{baseline}{FIRST_START_UP}") if found else None
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
