"""The run a regime's figures were measured in, and the pace a run elsewhere is read against
(``reference:``): the baseline's output tok/s in one window, on a CPU (or GPU) with these features.
Two machines of one kind differ: the default's baseline ran at 39.7 tok/s on a 2-core AMD EPYC with
``avx_vnni`` and at 19.4 on one without it, so a run says how its pace compares
(``harness.derive.pace``) instead of leaving a reader to compare its minutes with the README's."""

from __future__ import annotations

from pydantic import Field, field_validator

from harness.core.config_file import StrictModel
from harness.core.errors import FieldError
from harness.core.machine import CPU_FEATURES


class PaceReference(StrictModel):
    """Where the regime's published figures were measured, and the baseline's pace there."""

    run: str = Field(description="The reference run's id (its directory name under results/<regime>/).")
    fingerprint: str = Field(
        description="The regime fingerprint the reference ran under (bench show prints it): a run under "
        "other conditions (another dtype, --set, prompts) is not read against it."
    )
    source: str = Field(
        description="Where the run is published or came from, e.g. 'README, docs/measured.md'."
    )
    workload: str = Field(description="The window the pace is of: its workload ...")
    concurrency: int = Field(default=1, ge=1, description="... and its concurrency (closed loop).")
    baseline_tok_s: float = Field(gt=0, description="The baseline's output tok/s in that window, pooled.")
    cpu_model: str | None = Field(default=None, description="The reference machine's CPU model (lscpu).")
    cpu_flags: list[str] = Field(
        default_factory=list,
        description="The reference CPU's features the engine's kernels choose between (of "
        + ", ".join(CPU_FEATURES)
        + "): a missing one names why a machine is slower.",
    )
    gpu: str | None = Field(default=None, description="The reference machine's GPUs, as NVML names them.")

    @field_validator("cpu_flags")
    @classmethod
    def _known_flags(cls, flags: list[str]) -> list[str]:
        for index, flag in enumerate(flags):
            if flag not in CPU_FEATURES:
                raise FieldError(index, f"unknown CPU feature {flag!r} (one of: {', '.join(CPU_FEATURES)})")
        return flags
