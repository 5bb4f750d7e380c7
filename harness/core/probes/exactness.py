"""Greedy exactness: is a speculative arm's output identical to plain greedy decoding?

Per prompt, the candidate's output token ids are compared with the reference's (the baseline
arm, same prompt, same concurrency level, same regime). Where they differ, the first divergent
position is found and classified by the REFERENCE's margin between its top-1 and top-2
logprobs at that position (taken from the baseline's unmeasured logprob pass, where it saw the same
prefix: ``with_logprobs_from``; the full second pass of a design of one round, else the targeted
``margins.jsonl`` of its later start-ups, only for the prompts that diverged):

    identical  the token sequences are equal
    near_tie   margin < threshold: the reference itself almost chose the other token, so a flip
               is what floating-point noise does (verify shape M=K+1 vs decode M=1, bf16, compile)
    diverged   margin >= threshold: the reference was confident; a suspected correctness bug
    unknown    no logprob at that position (not requested: a divergence first seen after the
               baseline's last start-up has no margin; or the reference ended there)

The EOS token is part of the token ids (vLLM returns it), so "one side stopped earlier" is an
ordinary divergence at the position where one side chose EOS.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

Status = Literal["identical", "near_tie", "diverged", "unknown"]
STATUSES: tuple[Status, ...] = ("identical", "near_tie", "diverged", "unknown")

# Default near-tie thresholds per dtype, in nats (logprob difference). A logit of magnitude 16-32
# has a bf16 step of 0.125 and fp16 of ~0.016; a flip needs the two logits to sit within a few
# such steps of accumulated error. fp32 noise is orders of magnitude smaller.
DEFAULT_NEAR_TIE_MARGIN = {"bfloat16": 0.5, "float16": 0.1, "float32": 0.01, "auto": 0.5}


def first_divergence(reference: Sequence[int], candidate: Sequence[int]) -> int | None:
    """Index of the first differing token; the shorter length if one is a strict prefix; None if equal."""
    for index, (ref, cand) in enumerate(zip(reference, candidate, strict=False)):
        if ref != cand:
            return index
    if len(reference) != len(candidate):
        return min(len(reference), len(candidate))
    return None


def top2_margin(top_logprobs: Sequence[float]) -> float | None:
    """top-1 minus top-2 logprob at one position, from the (unordered) top logprob values."""
    if len(top_logprobs) < 2:
        return None
    first, second = sorted(top_logprobs, reverse=True)[:2]
    return first - second


@dataclass(frozen=True)
class Comparison:
    status: Status
    position: int | None = None  # first divergent token index
    reference_token: int | None = None  # None: the reference had ended
    candidate_token: int | None = None
    margin: float | None = None  # the reference's top-1 minus top-2 logprob at ``position``

    def to_json(self) -> dict:
        return asdict(self)


def compare(
    reference: Sequence[int],
    candidate: Sequence[int],
    reference_top_logprobs: Sequence[Sequence[float]] | None,
    near_tie_margin: float,
) -> Comparison:
    """Classify one prompt's candidate output against the reference (see module docstring)."""
    position = first_divergence(reference, candidate)
    if position is None:
        return Comparison("identical")
    ref_token = reference[position] if position < len(reference) else None
    cand_token = candidate[position] if position < len(candidate) else None
    margin = None
    if reference_top_logprobs is not None and position < len(reference_top_logprobs):
        margin = top2_margin(reference_top_logprobs[position])
    if margin is None:
        status: Status = "unknown"
    else:
        status = "near_tie" if margin < near_tie_margin else "diverged"
    return Comparison(status, position, ref_token, cand_token, margin)


def shares(statuses: Sequence[Status]) -> dict[str, float | int]:
    """Per-status percentages over the compared prompts (and how many were compared)."""
    total = len(statuses)
    out: dict[str, float | int] = {"compared": total}
    for status in STATUSES:
        out[f"{status}_pct"] = 100.0 * statuses.count(status) / total if total else None
    return out


def text_around(chunks: Sequence[Sequence], position: int, width: int = 60) -> tuple[str, str]:
    """Text before and from the chunk holding token ``position``, from a record's raw chunks
    ``(time, n_tokens, text)``. Chunk granularity: a speculative chunk can hold several tokens,
    so the split point may sit a few tokens before ``position``, never after it."""
    before, after, seen = [], [], 0
    for _, n_tokens, text in chunks:
        (before if seen + n_tokens <= position else after).append(text)
        seen += n_tokens
    return "".join(before)[-width:], "".join(after)[:width]


def with_logprobs_from(reference: Sequence[Any], source: Sequence[Any]) -> list[Any]:
    """The reference records (``RequestRecord``s), each given the top logprobs of the ``source``
    record of the same prompt (workload, prompt, concurrency), over the stretch where the two chose
    the same tokens and one position beyond: the distribution at position p belongs to the reference
    only if both saw the same prefix before p. A record that carries its own logprobs (runs made
    before the logprob pass existed) keeps them."""
    by_prompt = {
        (s.workload, s.prompt_id, *_level(s)): s for s in source if s.error is None and s.top_logprobs
    }
    out = []
    for ref in reference:
        src = by_prompt.get((ref.workload, ref.prompt_id, *_level(ref)))
        if ref.top_logprobs or src is None:
            out.append(ref)
            continue
        split = first_divergence(ref.token_ids, src.token_ids)
        valid = len(src.top_logprobs) if split is None else split + 1
        out.append(replace(ref, top_logprobs=src.top_logprobs[:valid]))
    return out


def _level(record: Any) -> tuple[int, float | None]:
    """The record's load level: its concurrency and, in an open-loop window, its request rate."""
    return record.concurrency, getattr(record, "request_rate", None)


def _by_key(records: Sequence[Any]) -> dict[tuple, Any]:
    """Successful records keyed by what makes a comparison like-with-like."""
    return {(r.workload, r.prompt_id, *_level(r), r.repeat): r for r in records if r.error is None}


def compare_records(
    reference: Sequence[Any], candidate: Sequence[Any], near_tie_margin: float
) -> list[dict[str, Any]]:
    """One entry per prompt present (and successful) on both sides at the same concurrency; records
    are ``RequestRecord``s (anything with their fields)."""
    ref_by_key, out = _by_key(reference), []
    for key, cand in _by_key(candidate).items():
        ref = ref_by_key.get(key)
        if ref is None:
            continue
        ref_logprobs = [[lp for _, lp in position] for position in ref.top_logprobs] or None
        result = compare(ref.token_ids, cand.token_ids, ref_logprobs, near_tie_margin).to_json()
        workload, prompt_id, concurrency, rate, repeat = key
        entry = {
            "workload": workload,
            "prompt_id": prompt_id,
            "concurrency": concurrency,
            "repeat": repeat,
            **result,
        }
        if rate is not None:
            entry["request_rate"] = rate
        if result["position"] is not None:
            position = result["position"]
            entry["reference_text_before"], entry["reference_text_after"] = text_around(ref.chunks, position)
            entry["candidate_text_after"] = text_around(cand.chunks, position)[1]
        out.append(entry)
    return out
