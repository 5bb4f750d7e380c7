"""What a regime can know before the night about the engine's step limits, refused at validate with
the fix (a cell past one measures the limit, not the method; ``harness.derive.engine_runtime``
flags what the servers really ran):

- vLLM's CUDA-graph ceiling: compiled on a GPU, decode steps are captured only up to
  ``max_cudagraph_capture_size`` tokens (by default 512, 1024 on data-centre Blackwell:
  ``config/vllm.py``, ``_set_cudagraph_sizes``, 0.32-0.34); a speculative step verifies
  concurrency x (K + 1) tokens, and one above the ceiling runs uncaptured;
- SGLang's running cap: 48 requests at once for every speculative algorithm unless
  ``--max-running-requests`` is set (``srt/arg_groups/speculative_hook.py``, 0.5.23); the
  baseline is not capped, so a speculative arm queues at a concurrency the baseline runs.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.config.regime import Regime

# data-centre Blackwell (compute capability 10.x) captures up to 1024 tokens a step by default
_BLACKWELL = ("B200", "B300", "GB200", "GB300")
DEFAULT_CEILING, BLACKWELL_CEILING = 512, 1024
SGLANG_SPECULATIVE_CAP = 48


def _flag_value(args: list[str], flag: str) -> str | None:
    """The value given to ``flag`` in ``args`` (``--flag V`` or ``--flag=V``), the last one given."""
    found = None
    for index, arg in enumerate(args):
        if arg == flag and index + 1 < len(args):
            found = args[index + 1]
        elif arg.startswith(flag + "="):
            found = arg.split("=", 1)[1]
    return found


def capture_ceiling(regime: Regime) -> tuple[int, str] | None:
    """The largest step vLLM will capture for the regime, and where that comes from; None where
    nothing is captured (eager, or not a GPU)."""
    if regime.hardware.kind != "gpu" or regime.engine.enforce_eager:
        return None
    given = _flag_value(regime.engine.extra_args, "--compilation-config")
    if given is not None:
        try:
            configured = json.loads(given).get("max_cudagraph_capture_size")
        except (ValueError, AttributeError):
            configured = None
        if isinstance(configured, int):
            return configured, "--compilation-config max_cudagraph_capture_size"
    model = (regime.hardware.gpu_model or "").upper()
    if any(name in model for name in _BLACKWELL):
        return BLACKWELL_CEILING, f"vLLM's default on {regime.hardware.gpu_model}"
    return DEFAULT_CEILING, f"vLLM's default on {regime.hardware.gpu_model or 'this GPU'}"


def most_in_flight(regime: Regime) -> int:
    """The most requests the regime's load keeps in flight: its levels' and its ramp stages'."""
    load = regime.load
    ramp = [stage.concurrency or load.max_concurrency or load.num_prompts for stage in load.ramp]
    return max([level.concurrency for level in load.levels()] + ramp)


def capture_problems(regime: Regime) -> list[tuple[tuple, str]]:
    """Each speculative arm whose step at the regime's highest concurrency is above the ceiling."""
    ceiling = capture_ceiling(regime)
    if ceiling is None:
        return []
    limit, source = ceiling
    most = most_in_flight(regime)
    found = []
    for index, arm in enumerate(regime.arms):
        tokens = most * ((arm.num_speculative_tokens or 0) + 1)
        if arm.method == "baseline" or tokens <= limit:
            continue
        fix = json.dumps({"max_cudagraph_capture_size": tokens})
        found.append(
            (
                ("arms", index, "num_speculative_tokens"),
                f"{arm.name} (K={arm.num_speculative_tokens}) at concurrency {most} verifies {most} x "
                f"{arm.num_speculative_tokens + 1} = {tokens} tokens a step, above the {limit} captured as "
                f"CUDA graphs ({source}): that cell would measure the uncaptured fallback, not the method. "
                f"Raise the ceiling (engine.extra_args: [--compilation-config, '{fix}']), or lower K or "
                "the concurrency",
            )
        )
    return found


def running_cap_problems(regime: Regime) -> list[tuple[tuple, str]]:
    """SGLang: a concurrency above the speculative arms' default running cap, the cap not set."""
    if _flag_value(regime.engine.extra_args, "--max-running-requests") is not None:
        return []
    speculative = [arm.name for arm in regime.arms if arm.method != "baseline"]
    most = most_in_flight(regime)
    if not speculative or most <= SGLANG_SPECULATIVE_CAP:
        return []
    return [
        (
            ("load", "concurrency"),
            f"concurrency {most}: SGLang runs at most {SGLANG_SPECULATIVE_CAP} requests at once for "
            f"every speculative arm ({', '.join(speculative)}) unless the cap is set, and not for the "
            "baseline, so those arms would queue where the baseline runs. Set engine.extra_args: "
            f"[--max-running-requests, '{most}'] (every arm the same cap)",
        )
    ]
