"""SGLang adapter.

Facts used here, from SGLang 0.5.23's own source (``srt/arg_groups/fields/*.py``,
``srt/arg_groups/speculative_hook.py``, ``srt/entrypoints/openai/*``, ``srt/managers/
tokenizer_manager.py``), checked by the contract tests against its real argument parser:

- Launch ``python -m sglang.launch_server --model-path M``; speculation is
  ``--speculative-algorithm NGRAM|EAGLE3|DFLASH|STANDALONE|NEXTN`` with ``--speculative-num-steps``,
  ``--speculative-eagle-topk`` and ``--speculative-num-draft-tokens``. SGLang counts the verified
  (bonus) token in num-draft-tokens: it reports ``proposed = verify_ct x (num_draft_tokens - 1)``,
  so a draft depth K is ``num_draft_tokens = K + 1`` for every method (DFlash: the block size;
  NGRAM: a breadth-1 trie, i.e. a chain of K tokens, like vLLM's ngram).
- ``--disable-cuda-graph`` is not a CLI flag in 0.5.23: eager mode is
  ``--disable-decode-cuda-graph --disable-prefill-cuda-graph``.
- ACCEPTANCE IS PER REQUEST: with ``return_spec_tokens_details`` a streamed completion ends with
  a chunk whose ``sglext.spec_tokens_details`` holds ``spec_verify_ct``,
  ``spec_num_correct_drafts``, ``spec_num_proposed_drafts`` and a histogram of correct drafts per
  verify step. Summed over a window's requests they give the same quantities as vLLM's
  server counters: tau = 1 + correct / verify_ct (not SGLang's own ``spec_accept_length`` =
  completion_tokens / verify_ct, which counts the prefill token). The server-wide
  ``/server_info`` average is a lifetime mean polluted by warm-up, so it is not used.
- Token ids: ``return_token_ids`` on ``/v1/completions`` (per chunk); on streaming
  ``/v1/chat/completions`` it is refused, and ``return_output_ids_in_sglext`` returns them at the
  end, and ``return_input_ids_in_sglext`` the prompt's ids (for the copy share) likewise; on
  completions ``return_token_ids`` also puts the prompt's ids in the first chunk. Top logprobs
  are keyed by token TEXT (two tokens with one text collapse: such a position has fewer than two
  entries and its margin is unknown, never wrong).
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.config.engines import (
    ACTIVE_STEPS,
    SERVED_MODEL_NAME,
    LaunchSpec,
    ScheduleConfig,
    chat_template_fields,
)
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
from harness.config.engines.served import ServedConfig
from harness.config.engines.served import served as served_record
from harness.config.engines.step_limits import running_cap_problems
from harness.config.methods import METHODS as METHODS_TABLE
from harness.config.methods import names
from harness.core.config_file import did_you_mean
from harness.core.probes.acceptance import SpecCounters, histogram_counters, parse_prometheus
from harness.core.probes.prefix_cache import PrefixCacheCounts

if TYPE_CHECKING:
    from harness.config.arms import Arm
    from harness.config.regime import Regime
    from harness.results.records import RequestRecord, WindowRecord

# mtp: NEXTN, SGLang's name for a model's own next-n-token heads (an alias of its EAGLE worker, with
# the target's MTP layers as the draft: ``srt/speculative/spec_info.py``). SGLang has no suffix decoding.
ALGORITHMS = {name: row.sglang for name, row in METHODS_TABLE.items() if row.sglang is not None}
# what /server_info reports back: SGLang resolves NEXTN to EAGLE before it serves
# (``srt/arg_groups/speculative_hook.py``), and no other arm of the harness launches EAGLE
METHODS = {algorithm: method for method, algorithm in ALGORITHMS.items()} | {"EAGLE": "mtp"}
# Acceptance thresholds below 1 accept drafts the target would not have chosen.
LOSSY_OPTIONS = ("speculative_accept_threshold_single", "speculative_accept_threshold_acc")
FAKE_ACCEPTANCE_ENV = ("SGLANG_SIMULATE_ACC_LEN",)
# The --speculative-* settings an arm's options may carry, as SGLang 0.5.23's server arguments name
# them (tests/test_engine_contracts.py compares the list with its real parser): every one but those
# ``speculative_args`` sets from the arm's method, K and draft model.
SPECULATIVE_OPTIONS = (
    "speculative_accept_threshold_acc", "speculative_accept_threshold_single", "speculative_adaptive",
    "speculative_adaptive_config", "speculative_attention_mode", "speculative_dflash_block_size",
    "speculative_domino_candidate_pool_size", "speculative_draft_attention_backend",
    "speculative_draft_kv_cache_dtype", "speculative_draft_load_format",
    "speculative_draft_model_quantization", "speculative_draft_model_revision",
    "speculative_draft_sink_size", "speculative_draft_window_size", "speculative_dsa_topk_backend",
    "speculative_dspark_align_verify_tokens_to_graph_tier", "speculative_dspark_block_size",
    "speculative_dspark_confidence_sts_path", "speculative_dspark_sps_table_path",
    "speculative_enable_w4a4_mxfp4_megamoe", "speculative_moe_a2a_backend",
    "speculative_moe_runner_backend", "speculative_ngram_capacity",
    "speculative_ngram_external_corpus_max_tokens", "speculative_ngram_external_corpus_path",
    "speculative_ngram_external_sam_budget", "speculative_ngram_match_type",
    "speculative_ngram_max_trie_depth", "speculative_token_map", "speculative_use_block_verification",
    "speculative_use_rejection_sampling",
)  # fmt: skip
# Every flag launch_spec sets, with each spelling SGLang 0.5.23's parser has for it.
MANAGED_FLAGS = {
    "model_path": Managed(("--model-path", "--model"), TARGET),
    "served_model_name": Managed(("--served-model-name",), SERVED_NAME),
    "host": Managed(("--host",), OWN_SERVER),
    "port": Managed(("--port",), OWN_SERVER),
    "api_key": Managed(("--api-key",), API_KEY),
    "dtype": Managed(("--dtype",), "use target.dtype"),
    "context_length": Managed(("--context-length",), "use target.max_model_len"),
    "tp_size": Managed(("--tp-size", "--tensor-parallel-size"), "use tensor_parallel_size"),
    "random_seed": Managed(("--random-seed",), "use sampling.seed"),
    "quantization": Managed(("--quantization",), "use target.quantization"),
    "attention_backend": Managed(("--attention-backend",), "use engine.attention_backend"),
    "config": Managed(("--config",), CONFIG_FILE),
}
# --speculative-adaptive (sglang/srt/speculative/adaptive_spec_params.py): EAGLE/EAGLE3 at topk 1
# only, which is how speculative_args launches them; its config file maps the first batch size of
# each tier ("1", "8", ...) to the steps it may choose from ({"candidate_steps": [...]}).
ADAPTIVE_METHODS = names("sglang_adaptive")
ADAPTIVE_CONFIG_FILE = "sglang_adaptive_config.json"


def adaptive_config_problem(value: Any) -> str | None:
    """What SGLang 0.5.23 would refuse in an adaptive config file (``_load_adaptive_config`` in
    adaptive_spec_params.py: JSON, at least one batch-size key of digits, each with a non-empty list
    of non-negative integer ``candidate_steps``), or None. The path is the one SGLang opens:
    relative to the directory ``bench`` runs in."""
    import json

    path = Path(str(value))
    if not path.is_file():
        return f"no file {path} (SGLang opens it as given: relative to where bench runs, {Path.cwd()})"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        return f"{path}: not a JSON file SGLang can read ({exc})"
    if not isinstance(config, dict):
        return f"{path}: SGLang expects an object of batch-size tiers, found {type(config).__name__}"
    tiers = {key: entry for key, entry in config.items() if key.isdecimal()}
    if not tiers:
        return f'{path}: no batch-size tier (a key of digits, e.g. {{"1": {{"candidate_steps": [1, 3, 7]}}}})'
    for key, entry in tiers.items():
        steps = entry.get("candidate_steps") if isinstance(entry, dict) else None
        if not isinstance(steps, list) or not steps or not all(isinstance(s, int) and s >= 0 for s in steps):
            return f"{path}: tier {key}: candidate_steps must be a non-empty list of ints >= 0, got {steps!r}"
    return None


def adaptive_config(ranges: list[tuple[int, int, int]]) -> dict[str, dict]:
    """A K schedule as SGLang's adaptive config: one tier per range, with that range's K as its only
    candidate (a fixed step count per tier: the schedule a study decided, not an EMA's guess)."""
    return {str(start): {"candidate_steps": [k]} for start, _, k in ranges}


# engine.extra_args apply to every arm, the baseline too: speculation is each arm's own
RESERVED_PREFIXES = {"--speculative-": SPECULATION}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


class SglangAdapter:
    name = "sglang"
    # 200 only once a real one-token generation went through (503 while starting).
    health_path = "/health_generate"
    metrics_path = "/metrics"
    # output tokens the server generated, all requests together: an endpoint's window is alone on it
    # when this grew by the window's own tokens only
    generation_counter = "sglang:generation_tokens_total"
    reset_prefix_cache_path = "/flush_cache"  # empties the radix cache; refused while requests run
    acceptance_source = "per_request"
    env_prefixes = ("SGLANG_",)
    fake_acceptance_env = FAKE_ACCEPTANCE_ENV
    unix_socket = False  # 0.5.23's server listens on TCP only: 127.0.0.1 and the harness's port
    # So each start-up gets an API key of its own, read from a 0600 file (``--config``: SGLang merges
    # the file's keys into its arguments; on the command line the key would be readable by every
    # local user): every route but /health* and /metrics then refuses a request without it.
    keyed = True
    compiles = False  # SGLang does not torch.compile unless told to: it loads and captures graphs

    def pip_requirement(self, version: str, hardware_kind: str) -> str:
        return f"sglang=={version}"

    def installed_facts_reader(self, version: str | None) -> str | None:
        return None  # its options are checked against SPECULATIVE_OPTIONS (the contract tests: its parser)

    def method_packages(self, version: str | None) -> dict[str, str]:
        return {}

    def option_problems(self, regime: Regime, installed: Any = None) -> list[tuple[tuple, str]]:
        """Flags in ``engine.extra_args`` the harness sets itself or that belong to an arm, and arm
        options that are not SGLang's own --speculative-* settings (``SPECULATIVE_OPTIONS``)."""
        found = [
            (("engine", "extra_args", index), message)
            for index, message in managed_flag_problems(
                regime.engine.extra_args, MANAGED_FLAGS, RESERVED_PREFIXES
            )
        ]
        found += running_cap_problems(regime)
        if regime.engine.eager_speculation:  # vLLM's drafter-only switch: SGLang has no such setting
            found.append((("engine", "eager_speculation"), "SGLang has no drafter-only eager mode"))
        for index, arm in enumerate(regime.arms):
            if arm.method != "baseline" and arm.method not in ALGORITHMS:
                found.append(
                    (
                        ("arms", index, "method"),
                        f"SGLang 0.5.23 has no '{arm.method}' method (its algorithms: "
                        f"{', '.join(sorted(ALGORITHMS.values()))}); run it on vLLM",
                    )
                )
            if arm.k_schedule is not None:
                found.append(
                    (
                        ("arms", index, "k_schedule"),
                        "SGLang 0.5.23 has no per-batch-size K schedule; for EAGLE/EAGLE3 give options: "
                        "{speculative_adaptive: true, speculative_adaptive_config: FILE} (a study's "
                        f"{ADAPTIVE_CONFIG_FILE} turns its policy into one)",
                    )
                )
            adaptive = arm.options.get("speculative_adaptive") or "speculative_adaptive_config" in arm.options
            if adaptive and arm.method not in ADAPTIVE_METHODS:
                key = (
                    "speculative_adaptive"
                    if "speculative_adaptive" in arm.options
                    else "speculative_adaptive_config"
                )
                found.append(
                    (
                        ("arms", index, "options", key),
                        f"SGLang adapts the steps of EAGLE/EAGLE3 only (topk 1), not method '{arm.method}'",
                    )
                )
            if "speculative_adaptive_config" in arm.options and not arm.options.get("speculative_adaptive"):
                found.append(
                    (
                        ("arms", index, "options", "speculative_adaptive_config"),
                        "read only with speculative_adaptive: true",
                    )
                )
            elif "speculative_adaptive_config" in arm.options:
                problem = adaptive_config_problem(arm.options["speculative_adaptive_config"])
                if problem is not None:
                    found.append((("arms", index, "options", "speculative_adaptive_config"), problem))
            for key in arm.options:
                if key not in SPECULATIVE_OPTIONS:
                    message = (
                        "not one of SGLang 0.5.23's --speculative-* settings an arm sets"
                        + did_you_mean(key, SPECULATIVE_OPTIONS)
                    )
                    found.append((("arms", index, "options", key), message))
        return found

    def sampling_settings(self, arm: Arm) -> dict[str, str]:
        return {}  # no verification or draft-sampling settings: tree verification of greedy drafts

    def lossy_settings(self, regime: Regime) -> list[str]:
        """Thresholds below 1 as arm options or as raw flags, and a simulated acceptance length."""
        problems = []
        for index, arm in enumerate(regime.arms):
            for key in LOSSY_OPTIONS:
                if key not in arm.options:
                    continue
                value = arm.options[key]
                try:  # as the server's parser reads it: "0.3" is 0.3; "nan" compares as nothing
                    lossy = not float(str(value)) >= 1
                except ValueError:
                    lossy = True  # unreadable: flag it rather than let it through
                if lossy:
                    problems.append(
                        f"arms[{index}].options.{key}: {value} < 1 accepts drafts the target would reject"
                    )
        for name in FAKE_ACCEPTANCE_ENV:
            if name in regime.engine.env:
                problems.append(f"engine.env.{name}: simulates an acceptance length instead of measuring it")
        return problems

    def speculative_args(self, arm: Arm, draft_model: str | None) -> list[str]:
        if arm.method == "baseline":
            return []
        k = arm.num_speculative_tokens
        args = [
            "--speculative-algorithm",
            ALGORITHMS[arm.method],
            "--speculative-num-draft-tokens",
            str(k + 1),
        ]
        if arm.method == "ngram":
            args += ["--speculative-ngram-min-bfs-breadth", "1", "--speculative-ngram-max-bfs-breadth", "1"]
        elif arm.method in ("eagle3", "draft_model", "mtp"):
            args += ["--speculative-num-steps", str(k), "--speculative-eagle-topk", "1"]
        if draft_model is not None:
            args += ["--speculative-draft-model-path", draft_model]
        for key, value in arm.options.items():  # more --speculative-* flags, by field name
            if isinstance(value, bool):
                args += [_flag(key)] if value else []
            else:
                args += [_flag(key), str(value)]
        return args

    def schedule_config(self, arm: Arm, label: str) -> ScheduleConfig:
        if arm.method not in ADAPTIVE_METHODS or not isinstance(arm.k_schedule, list):
            return ScheduleConfig(
                note=f"SGLang adapts EAGLE/EAGLE3 steps only: no schedule for method '{arm.method}'"
            )
        name = f"{label}.{ADAPTIVE_CONFIG_FILE}"
        flags = (
            f"--speculative-num-steps {arm.num_speculative_tokens} --speculative-eagle-topk 1 "
            f"--speculative-adaptive --speculative-adaptive-config {name}"
        )
        return ScheduleConfig(
            config_file=name, config_file_content=adaptive_config(arm.k_schedule), note=flags
        )

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
        if uds is not None:
            raise ValueError("SGLang's server listens on TCP only (unix_socket is False)")
        target = regime.target
        # one (flag, value) pair per line
        # fmt: off
        argv = [
            python, "-m", "sglang.launch_server",
            "--model-path", model,
            "--served-model-name", SERVED_MODEL_NAME,
            "--host", "127.0.0.1",
            "--port", str(port),
            "--dtype", target.dtype,
            "--context-length", str(target.max_model_len),
            "--tp-size", str(regime.tensor_parallel_size),
            "--random-seed", str(regime.sampling.seed),
            "--enable-metrics",
        ]
        # fmt: on
        if target.quantization:
            argv += ["--quantization", target.quantization]
        if regime.engine.attention_backend:
            argv += ["--attention-backend", regime.engine.attention_backend]
        if regime.engine.enforce_eager:
            argv += ["--disable-decode-cuda-graph", "--disable-prefill-cuda-graph"]
        argv += self.speculative_args(arm, draft_model)
        argv += regime.engine.extra_args
        if key_file is not None:  # its per-start API key, from a file only this user can read
            argv += ["--config", key_file]
        return LaunchSpec(argv=argv, env=dict(regime.engine.env))

    def request_fields(
        self, prompt_format: str, top_logprobs: int, template_kwargs: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        if prompt_format == "chat":  # return_token_ids is refused on streaming chat
            return {
                "return_output_ids_in_sglext": True,
                "return_input_ids_in_sglext": True,
                "return_spec_tokens_details": True,
                **chat_template_fields(prompt_format, template_kwargs),
            }
        return {"return_token_ids": True, "return_spec_tokens_details": True}

    def absorb_chunk(self, record: RequestRecord, chunk: dict[str, Any]) -> None:
        """The response-level extension ``sglext``: per-request spec details and, on streaming
        chat, the output and prompt token ids (sent once, at the end)."""
        sglext = chunk.get("sglext")
        if not sglext:
            return
        details = sglext.get("spec_tokens_details")
        if isinstance(details, list):  # one per choice; we send n = 1
            details = details[0] if details else None
        if details:
            record.spec_details = details
        output_ids = sglext.get("output_ids")
        if output_ids and not record.token_ids:
            record.token_ids = list(output_ids[0])
        input_ids = sglext.get("input_ids")
        if input_ids and not record.prompt_token_ids:
            record.prompt_token_ids = list(input_ids)

    def read_spec_counters(self, base_url: str) -> SpecCounters | None:
        """None: SGLang has no cumulative draft counters on /metrics (only a last-interval gauge);
        acceptance comes from each request's details (``window_counters``)."""
        return None

    def request_counters(self, record: RequestRecord) -> SpecCounters | None:
        return request_counters([record.spec_details]) if record.spec_details else None

    def window_counters(self, window: WindowRecord, records: list[RequestRecord]) -> SpecCounters:
        return request_counters([r.spec_details for r in records if r.spec_details])

    def reset_prefix_cache(self, base_url: str) -> bool | None:
        from harness.run import engine_http as http  # I/O: only the run side calls this method

        return http.post_prefix_cache_reset(base_url, self.reset_prefix_cache_path)

    def read_prefix_cache(self, base_url: str) -> PrefixCacheCounts | None:
        return None  # its radix cache reports a hit-rate gauge, not cumulative counts to diff: not read

    def server_figures(self, base_url: str) -> dict | None:
        """SGLang's own server-wide acceptance figure, stored next to tau, never used as tau."""
        from harness.run import engine_http as http  # I/O: only the run side calls this method

        info = http.get_json(base_url, "/server_info")
        figures = None if info is None else server_figures_from_info(info)
        metrics = http.get_metrics(base_url, self.metrics_path)  # the served model's samples only
        steps = None if metrics is None else active_steps_from_metrics(metrics)
        if steps is None:
            return figures
        return {**(figures or {}), **steps}

    def served_config(self, base_url: str, log_path: Path | None = None) -> ServedConfig:
        """``/server_info``: the resolved server arguments, as the engine applied them."""
        from harness.run import engine_http as http  # I/O: only the run side calls this method

        info = http.get_json(base_url, "/server_info")
        return served_from_server_info(info if isinstance(info, dict) else {}, f"{base_url}/server_info")

    def installed_version(self) -> str | None:
        try:
            return f"sglang {importlib.metadata.version('sglang')}"
        except importlib.metadata.PackageNotFoundError:
            return None


def request_counters(details: list[dict]) -> SpecCounters:
    """Per-request ``spec_tokens_details`` of one window, summed into vLLM's counter quantities:
    drafts = verify steps, accepted = correct drafts, per position from the histogram of correct
    drafts per step (a step with j correct drafts accepted positions 0..j-1)."""
    total = SpecCounters()
    for detail in details:
        total = total.plus(
            histogram_counters(
                detail.get("spec_verify_ct") or 0,
                detail.get("spec_num_proposed_drafts") or 0,
                detail.get("spec_num_correct_drafts") or 0,
                detail.get("spec_correct_drafts_histogram") or [],
            )
        )
    return total


# The steps SGLang runs right now (its adaptive mode moves them with the batch size): gauges set at
# each decode log interval (metrics_reporter.py, 0.5.23), with --enable-metrics, which the harness passes.
ACTIVE_STEPS_GAUGES = {
    "sglang:spec_num_steps": "sglang_spec_num_steps",
    "sglang:spec_num_draft_tokens": "sglang_spec_num_draft_tokens",
}


def active_steps_from_metrics(text: str) -> dict | None:
    """SGLang's active speculative steps and draft tokens from ``/metrics`` (one value per
    scheduler, the mean when there are several); None where the gauges are absent (a release
    without them, no speculation)."""
    found: dict[str, list[float]] = {}
    for sample in parse_prometheus(text):
        key = ACTIVE_STEPS_GAUGES.get(sample.name)
        if key is not None:
            found.setdefault(key, []).append(sample.value)
    if not found:
        return None
    means = {key: sum(values) / len(values) for key, values in found.items()}
    steps = means.get("sglang_spec_num_steps")
    return {
        **means,
        **({ACTIVE_STEPS: steps} if steps is not None else {}),
        "steps_note": "SGLang's speculative steps at the last decode log interval before the read "
        "(sglang:spec_num_steps): the K its adaptive mode ran then, not a mean over the window.",
    }


def server_figures_from_info(info: dict) -> dict | None:
    states = info.get("internal_states") or []
    values = [s.get("avg_spec_accept_length") for s in states if isinstance(s, dict)]
    values = [v for v in values if isinstance(v, (int, float))]
    if not values:
        return None
    return {
        "sglang_avg_spec_accept_length_lifetime": values[0] if len(values) == 1 else values,
        "note": "SGLang's own server-wide mean since start-up: completion tokens / verify steps (counts the "
        "prefill token), including warm-up and earlier windows. Context only; tau comes from the requests.",
    }


def served_from_server_info(info: dict, where: str = "/server_info") -> ServedConfig:
    """What ``/server_info`` (SGLang's resolved server arguments) says the server runs."""
    if not info:
        return ServedConfig()
    served: dict = {
        "version": info.get("version"),
        "max_model_len": info.get("context_length"),
        "draft_counting": {"semantics": "verify_steps", "source": "SGLang: spec_verify_ct per request"},
    }
    if info.get("dtype") not in (None, "auto"):
        served["dtype"] = info["dtype"]
    if "quantization" in info:
        served["quantization"] = info["quantization"]
    if info.get("attention_backend") or info.get("decode_attention_backend"):
        # the resolved server arguments: decode is what speculation's verify steps run on
        served["attention_backend"] = {
            "target": info.get("decode_attention_backend") or info.get("attention_backend"),
            "drafter": info.get("speculative_draft_attention_backend"),
            "source": "/server_info (SGLang's resolved server arguments)",
        }
    if "speculative_algorithm" in info:
        algorithm = info["speculative_algorithm"]
        draft_tokens = info.get("speculative_num_draft_tokens")
        served["speculative"] = (
            None
            if algorithm is None
            else {
                "method": METHODS.get(algorithm, algorithm),
                "num_speculative_tokens": draft_tokens - 1 if isinstance(draft_tokens, int) else None,
            }
        )
    if isinstance(info.get("max_running_requests"), int):
        # resolved: 48 for speculation unless --max-running-requests is set (speculative_hook.py)
        served["runtime"] = {
            "running_cap": info["max_running_requests"],
            "running_cap_source": "/server_info max_running_requests",
            "release": info.get("version") if isinstance(info.get("version"), str) else None,
        }
    return served_record(served, where)


ADAPTER = SglangAdapter()
