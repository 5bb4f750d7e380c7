"""What a regime runs on and what that costs: the GPUs (or the CPU) it pins, and the price $/Mtok
is computed from."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from harness.core.config_file import StrictModel
from harness.core.errors import FieldError
from harness.core.machine import CPU_FEATURES


class Hardware(StrictModel):
    """What the regime runs on. GPU regimes pin the model and count; any regime may pin the CPU."""

    kind: Literal["gpu", "cpu"] = Field(
        description="'gpu' for accelerator regimes, 'cpu' for the CPU engine."
    )
    gpu_model: str | None = Field(
        default=None, description="GPU model as NVML names it, e.g. 'NVIDIA H200'. Required for kind=gpu."
    )
    gpu_count: int | None = Field(
        default=None, ge=1, description="Number of GPUs the regime uses. Required for kind=gpu."
    )
    gpu_models_accepted: list[str] = Field(
        default_factory=list,
        description="Other NVML names accepted as gpu_model, for parts that are truly the same (e.g. a "
        "name that changed between drivers). Names are compared whole (case and spacing aside): 'NVIDIA "
        "H200 NVL', a 600 W part, is not an 'NVIDIA H200' unless listed here.",
    )
    devices: list[Annotated[int, Field(ge=0)]] | None = Field(
        default=None,
        description="The GPUs each arm's server runs on, by NVML index (PCI bus order), one per "
        "tensor-parallel rank, e.g. [0]; picked among those CUDA_VISIBLE_DEVICES leaves the harness. "
        "Default: the first tensor_parallel_size of them. Power, energy and the neighbour check read "
        "exactly these GPUs. Where, not what: not part of the fingerprint.",
    )
    cpu_model: str | None = Field(
        default=None,
        description="Part of the CPU's model name, e.g. 'EPYC' or 'Xeon Platinum 8480': pin it only when the "
        "numbers must come from that CPU.",
    )
    cpu_count: int | None = Field(default=None, ge=1, description="At least this many logical CPUs.")
    cpu_flags: list[str] = Field(
        default_factory=list,
        description="Instruction-set features the CPU must have, by /proc/cpuinfo name, e.g. [avx2] (what "
        "the CPU engine needs) or [avx512_bf16] (its fast bf16 path). One of: "
        + ", ".join(CPU_FEATURES)
        + ".",
    )

    @field_validator("cpu_flags")
    @classmethod
    def _known_flags(cls, flags: list[str]) -> list[str]:
        for index, flag in enumerate(flags):
            if flag not in CPU_FEATURES:
                raise FieldError(
                    index,
                    f"unknown CPU feature {flag!r} (one of: {', '.join(CPU_FEATURES)})",
                    value=flag,
                    choices=CPU_FEATURES,
                )
        return flags

    @model_validator(mode="after")
    def _pins_match_kind(self) -> Hardware:
        if self.kind == "gpu" and (self.gpu_model is None or self.gpu_count is None):
            missing = "gpu_model" if self.gpu_model is None else "gpu_count"
            raise FieldError(missing, "kind 'gpu' needs both gpu_model and gpu_count")
        if self.kind == "cpu" and (self.gpu_model is not None or self.gpu_count is not None):
            given = "gpu_model" if self.gpu_model is not None else "gpu_count"
            raise FieldError(given, "kind 'cpu' takes no gpu_model or gpu_count")
        if self.kind == "cpu" and (self.devices is not None or self.gpu_models_accepted):
            given = "devices" if self.devices is not None else "gpu_models_accepted"
            raise FieldError(given, "kind 'cpu' runs on no GPU")
        devices = self.devices or []
        for index, device in enumerate(devices):
            if device in devices[:index]:
                raise FieldError(("devices", index), f"GPU {device} is listed twice", value=device)
        return self


class Cost(StrictModel):
    """Price of the hardware, for $/Mtok. Give exactly one of the two prices."""

    usd_per_gpu_hour: float | None = Field(default=None, gt=0, description="$ per GPU-hour (GPU regimes).")
    usd_per_machine_hour: float | None = Field(
        default=None, gt=0, description="$ per machine-hour (CPU regimes)."
    )
    usd_per_kwh: float | None = Field(
        default=None,
        gt=0,
        description="Optional electricity price: adds energy $/Mtok from measured J/token.",
    )

    @model_validator(mode="after")
    def _one_price(self) -> Cost:
        if (self.usd_per_gpu_hour is None) == (self.usd_per_machine_hour is None):
            second = () if self.usd_per_gpu_hour is None else "usd_per_machine_hour"
            raise FieldError(second, "give exactly one of usd_per_gpu_hour or usd_per_machine_hour")
        return self
