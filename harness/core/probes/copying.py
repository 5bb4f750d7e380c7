"""How much of an output repeats text it could have been drafted from: what prompt lookup accepts.

With n = COPY_NGRAM consecutive token ids, both sides as the engine tokenized them (the prompt with
its chat template), over the output's n-grams:

- copy share    = output n-grams that occur in the prompt / output n-grams;
- context share = output n-grams that occur in the prompt OR earlier in the output / output
  n-grams. vLLM's and SGLang's ngram drafters search the whole sequence so far (prompt and
  generated tokens), so this is the share a prompt-lookup drafter can find a match for; the
  difference from the copy share is the output repeating itself.

Pooled over requests by adding numerators and denominators, like tau.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

COPY_NGRAM = 3  # tokens; between prompt_lookup_min (2) and _max (4) of the shipped ngram arms


class CopyCounts(NamedTuple):
    from_prompt: int  # output n-grams found in the prompt
    from_context: int  # ... in the prompt or earlier in the output
    total: int  # output n-grams


def ngrams(tokens: Sequence[int], n: int = COPY_NGRAM) -> list[tuple[int, ...]]:
    return [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


def copied_ngrams(prompt: Sequence[int], output: Sequence[int], n: int = COPY_NGRAM) -> CopyCounts:
    """The counts for one request; all 0 without the prompt's ids (unknown, never "0% copied")."""
    if not prompt:
        return CopyCounts(0, 0, 0)
    in_prompt = set(ngrams(prompt, n))
    earlier: set[tuple[int, ...]] = set()
    from_prompt = from_context = 0
    grams = ngrams(output, n)
    for gram in grams:
        from_prompt += gram in in_prompt
        from_context += gram in in_prompt or gram in earlier
        earlier.add(gram)
    return CopyCounts(from_prompt, from_context, len(grams))


def share_pct(counts: Sequence[CopyCounts], of: str = "from_prompt") -> float | None:
    """Pooled share in percent (``of`` = "from_prompt" or "from_context"); None when nothing counted."""
    total = sum(c.total for c in counts)
    return 100.0 * sum(getattr(c, of) for c in counts) / total if total else None
