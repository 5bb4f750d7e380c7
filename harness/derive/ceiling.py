"""The physical ceiling of decode: the shortest step memory bandwidth allows (issue 63, item 5).
Pure arithmetic; its inputs come from the run side (``harness.run.sensors.weights`` for the bytes,
``harness.run.sensors.bandwidth`` for the bandwidth)."""

from __future__ import annotations

from dataclasses import dataclass

from harness.config.level import LoadLevel
from harness.derive.cost_model import yield_per_step
from harness.results.model import Summary


def floor_step_ms(
    weight_bytes: float,
    kv_bytes_per_token: float,
    context_tokens: float,
    bandwidth_gb_s: float,
    tensor_parallel: int = 1,
) -> float:
    """The lowest possible decode step at batch 1, in milliseconds: the bytes a step must read over
    the memory bandwidth, (weights + KV bytes per token x context) / (bandwidth x TP).

    Assumes batch 1 (at larger batches the weights are read once for every sequence, the KV per
    sequence); every weight byte read once per step; the KV cache of ``context_tokens`` tokens read
    once; tensor parallelism splitting both the weights and the KV cache over ``tensor_parallel``
    GPUs, each reading its share at ``bandwidth_gb_s`` (1e9 bytes/s, per device), together the
    combined bandwidth (with fewer KV heads than GPUs the KV is replicated, not split, so the real
    floor is higher). Compute, kernel launch overhead and communication are ignored: it is a floor,
    which no real step reaches."""
    if bandwidth_gb_s <= 0:
        raise ValueError(f"bandwidth_gb_s must be positive, got {bandwidth_gb_s}")
    if tensor_parallel < 1:
        raise ValueError(f"tensor_parallel must be at least 1, got {tensor_parallel}")
    if min(weight_bytes, kv_bytes_per_token, context_tokens) < 0:
        raise ValueError("weight_bytes, kv_bytes_per_token and context_tokens must not be negative")
    read = weight_bytes + kv_bytes_per_token * context_tokens
    return read / (bandwidth_gb_s * 1e9 * tensor_parallel) * 1e3


@dataclass(frozen=True)
class ArmCeiling:
    """A speculative arm at batch 1 beside the speedup it could reach if verifying its drafts cost
    one decode step: its tokens per engine step over the baseline's (``cost_model.yield_per_step``:
    at step cost 1 the speedup is exactly that; a memory-bound step at batch 1 takes its weights'
    read time, whatever the tokens verified)."""

    arm: str
    workload: str
    speedup: float
    low: float | None  # the speedup's 95% interval (the cell's)
    high: float | None
    tokens_per_step: float


@dataclass(frozen=True)
class Ceiling:
    """The decode floor at batch 1 against the baseline's measured step, and each arm's ceiling."""

    floor_ms: float
    context_tokens: float  # the mean prompt plus half the mean output: the KV a step reads
    parameters: int
    dtype: str
    weight_bytes: int
    kv_bytes_per_token: int
    unread_embedding: int  # an untied input embedding's elements, not in weight_bytes
    bandwidth_gb_s: float
    bandwidth_source: str
    tensor_parallel: int
    workload: str  # the window at concurrency 1 it is measured against
    baseline_step_ms: float | None
    arms: tuple[ArmCeiling, ...]

    @property
    def times_floor(self) -> float | None:
        """The measured step over the floor: 1 would be a step limited by memory alone."""
        return self.baseline_step_ms / self.floor_ms if self.baseline_step_ms else None


def decode_ceiling(summary: Summary) -> Ceiling | None:
    """The floor from the run's recorded inputs, against its first workload's baseline at
    concurrency 1 (None: no inputs, or no such window: the floor is a batch-1 figure)."""
    inputs = summary.decode_floor
    if inputs is None or inputs.footprint is None or inputs.bandwidth is None:
        return None
    one = LoadLevel(1)
    base = next((c for c in summary.cells_of(summary.baseline_arm) if c.level == one), None)
    if base is None or not base.requests_ok:
        return None
    context = (base.prompt_tokens_mean or 0.0) + base.output_tokens / base.requests_ok / 2
    footprint, bandwidth = inputs.footprint, inputs.bandwidth
    arms = tuple(
        ArmCeiling(
            c.arm, c.workload, c.speedup, e.low if (e := c.estimate) else None, e.high if e else None, ceiling
        )
        for c in summary.cells
        if c.arm != summary.baseline_arm
        and c.level == one
        and c.workload == base.workload
        and c.speedup is not None
        and (ceiling := yield_per_step(c, base)) is not None
    )
    return Ceiling(
        floor_ms=floor_step_ms(
            footprint.weight_bytes,
            footprint.kv_bytes_per_token,
            context,
            bandwidth.gb_s,
            inputs.tensor_parallel,
        ),
        context_tokens=context,
        parameters=footprint.parameters,
        dtype=footprint.dtype,
        weight_bytes=footprint.weight_bytes,
        kv_bytes_per_token=footprint.kv_bytes_per_token,
        unread_embedding=footprint.unread_embedding,
        bandwidth_gb_s=bandwidth.gb_s,
        bandwidth_source=bandwidth.source,
        tensor_parallel=inputs.tensor_parallel,
        workload=base.workload,
        baseline_step_ms=base.step_ms,
        arms=arms,
    )
