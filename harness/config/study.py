"""A regime as a study: the sweep's axes (each combination of regime-level values one point, run
on its own; arm-level values arms of every point) and how the study's K policy is derived."""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field, field_validator

from harness.core.config_file import StrictModel
from harness.core.errors import FieldError

if TYPE_CHECKING:
    from harness.config.regime import Regime


class PolicySettings(StrictModel):
    """How a study turns its decided cells into a K per batch size (harness.derive.study.policy)."""

    workload_mix: dict[str, float] = Field(
        default_factory=dict,
        description="Workload name -> weight, for the policy of the traffic the server will see (a weighted "
        "geometric mean of the workloads' speedups). Default: equal weights over the study's workloads.",
    )

    @field_validator("workload_mix")
    @classmethod
    def _weights(cls, mix: dict[str, float]) -> dict[str, float]:
        for name, weight in mix.items():
            if not (isinstance(weight, int | float) and math.isfinite(weight) and weight > 0):
                raise FieldError(name, f"a weight must be a positive number (found {weight!r})")
        return mix


# Regime-level paths a sweep may not vary: they define the study itself, or are the within-run load axis.
FIXED_SWEEP_PATHS = (
    "name",
    "policy",
    "description",
    "arms",
    "workloads",
    "gates",
    "sweep",
    "load.concurrency",
    "load.request_rate",
)
ARM_SWEEP_FIELDS = ("num_speculative_tokens", "draft_model")  # and options.<key>
# Every point is a run of its own and every arm a server per start-up: a sweep past these is a typo
# or a file meant to exhaust the planner (ten axes of ten values are ten billion points).
MAX_SWEEP_POINTS = 1_000
MAX_SWEEP_ARMS = 256


class Sweep(StrictModel):
    """The axes of a study: each combination of regime-level values is one point (its own run);
    arm-level values become arms of every point, sharing its baseline."""

    regime: dict[str, list[Any]] = Field(
        default_factory=dict,
        description="Regime-level axes: a dotted field path (tensor_parallel_size, target.dtype, "
        "target.quantization, engine.enforce_eager, load.max_output_tokens, hardware.gpu_model, ...) -> the "
        "values it takes. Every combination is one point of the study, run on its own servers.",
    )
    arms: dict[str, dict[str, list[Any]]] = Field(
        default_factory=dict,
        description="Arm-level axes: arm name -> field (num_speculative_tokens, options.<key>, draft_model) "
        "-> values. Each combination becomes an arm of every point (<arm>_k<K>, ...), measured against the "
        "point's one baseline.",
    )

    @field_validator("regime", "arms")
    @classmethod
    def _values(cls, axes: dict[str, Any]) -> dict[str, Any]:
        for name, value in axes.items():
            for path, values in value.items() if isinstance(value, dict) else [((), value)]:
                where = (name, path) if path else name
                if not values:
                    raise FieldError(where, "give at least one value")
                keys = [json.dumps(v, sort_keys=True) for v in values]
                if len(set(keys)) != len(keys):
                    raise FieldError(where, "values must be distinct")
        return axes


def _field_paths(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Every dotted field path of a model, nested models included (for sweep paths)."""
    paths = []
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        paths.append(path)
        nested = [
            a
            for a in getattr(info.annotation, "__args__", (info.annotation,))
            if isinstance(a, type) and issubclass(a, BaseModel)
        ]
        for sub in nested:
            paths += _field_paths(sub, path + ".")
    return paths


def check_sweep(regime: Regime) -> None:
    """The sweep's axes name fields and arms the regime has, and stay within the planner's bounds."""
    sweep = regime.sweep
    if sweep is None:
        return
    known = [p for p in _field_paths(type(regime)) if not p.startswith(("arms.", "gates.", "sweep."))]
    for path in sweep.regime:
        if path in FIXED_SWEEP_PATHS or path.startswith(tuple(f"{p}." for p in FIXED_SWEEP_PATHS)):
            raise FieldError(
                ("sweep", "regime", path),
                "cannot be swept (concurrency and request rate are the within-run load axes: list their "
                "levels in load.concurrency / load.request_rate; arms are swept under sweep.arms)",
            )
        if path not in known:
            raise FieldError(("sweep", "regime", path), "no such field", value=path, choices=known)
    arms = {arm.name: arm for arm in regime.arms}
    for name, fields in sweep.arms.items():
        if name not in arms:
            raise FieldError(
                ("sweep", "arms", name),
                f"no arm named '{name}' (arms: {', '.join(arms)})",
                value=name,
                choices=arms,
            )
        if arms[name].method == "baseline":
            raise FieldError(("sweep", "arms", name), "the baseline has nothing to sweep")
        for field in fields:
            if field not in ARM_SWEEP_FIELDS and not field.startswith("options."):
                raise FieldError(
                    ("sweep", "arms", name, field),
                    f"sweepable arm fields are {', '.join(ARM_SWEEP_FIELDS)} and options.<key>",
                    value=field,
                    choices=ARM_SWEEP_FIELDS,
                )
    points = math.prod(len(values) for values in sweep.regime.values())
    if points > MAX_SWEEP_POINTS:
        raise FieldError(
            ("sweep", "regime"),
            f"{points:,} points (every combination of the axes); at most {MAX_SWEEP_POINTS:,}",
        )
    arms_per_point = (
        len(regime.arms)
        - len(sweep.arms)
        + sum(math.prod(len(values) for values in fields.values()) for fields in sweep.arms.values())
    )
    if arms_per_point > MAX_SWEEP_ARMS:
        raise FieldError(
            ("sweep", "arms"), f"{arms_per_point:,} arms in every point; at most {MAX_SWEEP_ARMS}"
        )
