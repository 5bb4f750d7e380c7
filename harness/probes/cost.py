"""Cost per million output tokens.

    $/Mtok = price per hour of the hardware used (GPU-hour price x GPUs, or machine-hour price)
             / (output tok/s x 3600) x 1e6
"""

from __future__ import annotations


def usd_per_mtok(price_per_hour: float, tok_s: float | None) -> float | None:
    if not tok_s:
        return None
    return price_per_hour / (tok_s * 3600.0) * 1e6
