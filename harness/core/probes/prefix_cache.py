"""The prefix cache's share of a window's prompt tokens: how much of what was sent the engine did not
compute again. Conversation workloads keep it between turns (turn t's request starts with turn
t - 1's), as production does; every window that opens a conversation, or has none, starts from an
emptied cache. Counted in tokens from the engine's own cumulative counters, diffed around the window
(vLLM: ``prefix_cache_queries`` / ``prefix_cache_hits``); absent where the engine reports none.

    prefix cache hit share = prompt tokens served from the cache / prompt tokens looked up

Pooled over windows by adding numerators and denominators, like tau. vLLM caches whole blocks (128
tokens on its CPU build), so a prompt shorter than a block never hits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

# a reset the engine refuses (vLLM: success false while a finished request's blocks are still held,
# "callers may retry"; SGLang: while requests run) is asked for this many times in all before the
# window runs on whatever the cache holds (harness.run.window.reset_prefix_cache)
RESET_ATTEMPTS = 5


def refused_every_time(reset: bool, attempts: int) -> bool:
    """A window whose reset the engine refused at every attempt (not one whose server has no reset:
    that is asked once)."""
    return not reset and attempts >= RESET_ATTEMPTS


class PrefixCacheCounts(NamedTuple):
    queries: float  # prompt tokens looked up in the cache
    hits: float  # ... of them found there

    def minus(self, earlier: PrefixCacheCounts) -> PrefixCacheCounts:
        return PrefixCacheCounts(self.queries - earlier.queries, self.hits - earlier.hits)

    def to_json(self) -> dict[str, float]:
        return {"queries": self.queries, "hits": self.hits}


def hit_pct(windows: Sequence[PrefixCacheCounts]) -> float | None:
    """Pooled hit share in percent; None when nothing was looked up (or nothing was reported)."""
    queries = sum(w.queries for w in windows)
    return 100.0 * sum(w.hits for w in windows) / queries if queries > 0 else None
