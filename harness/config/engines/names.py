"""The registry, the one list of engines: name -> the module that defines its ``ADAPTER``
(``harness.config.engines.get_adapter`` imports it when asked). Two or three engines do not need a plugin
framework; a regime's ``engine.name`` accepts exactly these keys. A module of its own, importing
nothing, so the regime can read the names without importing the adapters' protocol (which names
the regime's types)."""

from __future__ import annotations

ENGINES: dict[str, str] = {"vllm": "harness.config.engines.vllm", "sglang": "harness.config.engines.sglang"}
# how each is written in prose (a published figure's source, a caveat)
LABELS: dict[str, str] = {"vllm": "vLLM", "sglang": "SGLang"}
