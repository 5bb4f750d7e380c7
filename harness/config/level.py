"""A load level a window is measured at, and a window's name by its level. Imports nothing, so the
store, derive and present name a level without reading the regime (whose engine settings import the
engine registry)."""

from __future__ import annotations

from typing import NamedTuple


class LoadLevel(NamedTuple):
    """One load level a window is measured at: closed loop (exactly ``concurrency`` requests in flight,
    the next sent as one completes) or open loop (requests due at ``request_rate`` per second whether or
    not earlier ones completed, at most ``concurrency`` in flight)."""

    concurrency: int
    request_rate: float | None = None  # requests/s; None: closed loop

    def label(self) -> str:
        if self.request_rate is None:
            return f"concurrency {self.concurrency}"
        return f"{self.request_rate:g} req/s (<= {self.concurrency} in flight)"

    def order(self) -> tuple[bool, float, int]:
        """Sort key: closed loop by concurrency first, then open loop by rate."""
        return (self.request_rate is not None, self.request_rate or 0.0, self.concurrency)

    def short(self) -> str:
        """For keys and one-line verdicts: ``@4`` or ``@2req/s``."""
        return f"@{self.concurrency}" if self.request_rate is None else f"@{self.request_rate:g}req/s"


def window_parts(window: str) -> tuple[str, str]:
    """A window as ``server_starts.windows`` names it ('@1', 'code @1', 'code@1'): its workload ('' for
    every workload) and its level as ``LoadLevel.short`` writes it ('@1')."""
    workload, _, level = window.rpartition("@")
    return workload.strip(), f"@{level.strip()}"
