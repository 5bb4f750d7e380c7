"""Engine adapters behind one small protocol, looked up by name and imported only when used.

An adapter knows how to launch its engine for a regime + arm (argv and env, never a shell
string), where its health endpoint is, and how to read its speculative-decoding counters.
It never imports the engine itself: the engine runs in its own process.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import httpx

from harness.errors import EngineError, UserError
from harness.probes.acceptance import SpecCounters
from harness.regime import Arm, Regime


@dataclass(frozen=True)
class LaunchSpec:
    """Everything needed to start one server: the argument list and the extra environment."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)


class EngineAdapter(Protocol):
    name: str
    health_path: str
    metrics_path: str
    reset_prefix_cache_path: str | None  # POST here empties the prefix cache; None if unsupported
    # "server_counters": cumulative counters on metrics_path, diffed around each window (vLLM);
    # "per_request": each response carries its own draft statistics, summed per window (SGLang).
    acceptance_source: str

    def launch_spec(
        self, regime: Regime, arm: Arm, model: str, port: int, python: str, draft_model: str | None = None
    ) -> LaunchSpec:
        """argv + env that start a server for this arm on 127.0.0.1:port (draft path already resolved)."""

    def request_fields(self, prompt_format: str, top_logprobs: int) -> dict:
        """Engine-specific request fields: token ids per output token (and, per request,
        acceptance details where the engine reports them that way)."""

    def server_figures(self, base_url: str) -> dict | None:
        """Server-wide acceptance figures the engine reports besides what tau is computed from,
        stored labelled with each window (SGLang's lifetime mean); None when there are none."""

    def parse_spec_counters(self, metrics_text: str) -> SpecCounters:
        """Speculative-decoding counters from the metrics endpoint's text."""

    def read_spec_counters(self, base_url: str) -> SpecCounters:
        """Scrape the metrics endpoint now (``scrape_spec_counters``); EngineError when it cannot."""

    def reset_prefix_cache(self, base_url: str) -> bool:
        """Empty the prefix cache (``post_prefix_cache_reset``); False when the engine would not."""

    def installed_version(self) -> str | None:
        """The engine's version as installed here (without importing it), or None."""

    def served_config(self, base_url: str, log_path: Path | None = None) -> dict:
        """What the running server reports about itself (version, max_model_len, dtype,
        quantization, speculative method and K)."""


# Engine name -> module that defines ``ADAPTER``. Two engines do not need a plugin framework.
_ADAPTER_MODULES = {"vllm": "harness.engines.vllm", "sglang": "harness.engines.sglang"}

SERVED_MODEL_NAME = "target"  # the name every adapter serves the target under


def get_adapter(name: str) -> EngineAdapter:
    module = _ADAPTER_MODULES.get(name)
    if module is None:
        supported = ", ".join(sorted(_ADAPTER_MODULES))
        raise UserError(f"engine '{name}' has no adapter yet (supported: {supported})")
    return importlib.import_module(module).ADAPTER


def is_local_reference(reference: str) -> bool:
    """A model reference written as a path (./, /, ~); anything else is a hub id."""
    return reference.startswith((".", "/", "~"))


def resolve_model_path(reference: str, regime_path: Path) -> str:
    """Target or draft references that look local resolve relative to the regime file; hub ids pass
    through."""
    if is_local_reference(reference):
        return str((regime_path.parent / Path(reference).expanduser()).resolve())
    return reference


# HTTP both adapters speak the same way; each adapter names its own paths.


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
