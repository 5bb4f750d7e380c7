"""The HTTP the adapters share: scraping a metrics endpoint, resetting the prefix cache, reading
JSON routes. Each adapter names its own paths."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from harness.errors import EngineError
from harness.probes.acceptance import SpecCounters


def scrape_spec_counters(
    base_url: str, metrics_path: str, parse: Callable[[str], SpecCounters]
) -> SpecCounters:
    """The engine's cumulative draft counters from its metrics endpoint, right now."""
    try:
        response = httpx.get(base_url + metrics_path, timeout=10.0)
        response.raise_for_status()
    except httpx.HTTPError as exc:
        raise EngineError(f"could not read {metrics_path}: {exc}") from None
    return parse(response.text)


def post_prefix_cache_reset(base_url: str, path: str) -> bool:
    """POST the engine's prefix-cache reset so a window does not reuse the previous one's prompts;
    False when the route is missing or refused (the window records it)."""
    try:
        response = httpx.post(base_url + path, timeout=30.0)
    except httpx.HTTPError:
        return False
    if response.status_code != 200:
        return False
    try:  # vLLM answers JSON, SGLang plain text ("Cache flushed.")
        return response.json().get("success", True) is not False
    except ValueError:
        return True


def get_json(base_url: str, path: str) -> Any:
    """The route's decoded JSON; None when it cannot be read (an engine without the route:
    nothing to check against)."""
    try:
        return httpx.get(base_url + path, timeout=10.0).json()
    except (httpx.HTTPError, ValueError):
        return None
