"""How much of an output copies from its prompt: what prompt-lookup drafting (ngram) can accept.

copy share = output n-grams that also occur in the prompt / output n-grams, with n = COPY_NGRAM
consecutive token ids, both sides as the engine tokenized them (the prompt with its chat template).
Pooled over requests by adding numerator and denominator, like tau. A prompt-lookup drafter finds
a match only where the recent output repeats a stretch of the prompt, so this share bounds what it
can accept from the prompt; it does not count repeats within the output itself.
"""

from __future__ import annotations

from collections.abc import Sequence

COPY_NGRAM = 3  # tokens; between prompt_lookup_min (2) and _max (4) of the shipped ngram arms


def ngrams(tokens: Sequence[int], n: int = COPY_NGRAM) -> list[tuple[int, ...]]:
    return [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


def copied_ngrams(prompt: Sequence[int], output: Sequence[int], n: int = COPY_NGRAM) -> tuple[int, int]:
    """(output n-grams found in the prompt, output n-grams); (0, 0) without a prompt or output."""
    if not prompt:
        return 0, 0
    seen = set(ngrams(prompt, n))
    grams = ngrams(output, n)
    return sum(gram in seen for gram in grams), len(grams)


def copy_share_pct(counts: Sequence[tuple[int, int]]) -> float | None:
    """Pooled share in percent from per-request (copied, total) counts; None when nothing counted."""
    copied, total = sum(c for c, _ in counts), sum(t for _, t in counts)
    return 100.0 * copied / total if total else None
