"""Cost per million output tokens.

$/Mtok        = price per hour of the hardware used (GPU-hour price x GPUs, or machine-hour price)
                / (output tok/s x 3600) x 1e6
energy $/Mtok = J/token x 1e6 tokens / 3.6e6 J per kWh x $/kWh
"""

from __future__ import annotations


def usd_per_mtok(price_per_hour: float, tok_s: float | None) -> float | None:
    if not tok_s:
        return None
    return price_per_hour / (tok_s * 3600.0) * 1e6


def energy_usd_per_mtok(j_per_token: float | None, usd_per_kwh: float | None) -> float | None:
    if j_per_token is None or not usd_per_kwh:
        return None
    return j_per_token * 1e6 / 3.6e6 * usd_per_kwh
