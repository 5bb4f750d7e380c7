"""Expand a regime file's ``sweep:`` section into the concrete regimes of a study.

Two kinds of axes, on purpose:

- regime-level (``sweep.regime``: ``tensor_parallel_size``, ``target.dtype``,
  ``engine.enforce_eager``, ``load.max_output_tokens``, the hardware pins, ...): every combination
  is one POINT, a concrete regime with its own fingerprint and its own run (its own servers);
- arm-level (``sweep.arms.<arm>``: ``num_speculative_tokens``, ``options.<key>``,
  ``draft_model``): every combination becomes one ARM of every point (``ngram`` with K 2, 4, 8
  becomes ``ngram_k2``, ``ngram_k4``, ``ngram_k8``), so the K variants of a point share its
  baseline: same server configuration, same prompts, one baseline measurement.

Concurrency stays the within-run load axis (``load.concurrency``). Every point is validated before
anything starts: one bad combination (a TP that does not divide the GPU count) fails the whole
study up front, naming the point.
"""

from __future__ import annotations

import copy
import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from harness.config.regime import Regime, load_regime
from harness.core.config_file import dotted, error_loc, error_message, read_yaml
from harness.core.errors import UserError
from harness.core.overrides import Override
from harness.run.plan import Plan, plan_regime


@dataclass(frozen=True)
class StudyPoint:
    id: str  # p0, p1, ...
    axes: tuple[tuple[str, Any], ...]  # (dotted path, value) of every regime-level axis
    regime: Regime  # concrete: no sweep, arm-level axes expanded into arms

    def label(self) -> str:
        return ", ".join(f"{path}={value}" for path, value in self.axes) or "(no regime axis)"


@dataclass(frozen=True)
class StudyPlan:
    regime: Regime  # the study file as written
    source: Path
    points: list[StudyPoint]
    families: dict[str, str]  # expanded arm name -> the arm it came from

    def server_starts(self) -> int:
        return sum(len(point.regime.arms) * point.regime.load.max_server_starts() for point in self.points)


def _suffix(field: str, value: Any, index: int) -> str:
    if field == "num_speculative_tokens":
        return f"k{value}"
    if field == "draft_model":
        return f"d{index}"
    key = field.split(".", 1)[1]
    return re.sub(r"[^A-Za-z0-9_.-]", "", f"{key}{value}")


def expand_arms(arms: list[dict[str, Any]], axes: dict[str, dict[str, list[Any]]]) -> tuple[list, dict]:
    """Arms (as dumped dicts) with every arm-level combination as its own arm; and each expanded
    arm's family (the arm it came from)."""
    out, families = [], {}
    for arm in arms:
        fields = axes.get(arm["name"])
        if not fields:
            out.append(arm)
            families[arm["name"]] = arm["name"]
            continue
        names, values = list(fields), list(fields.values())
        for combination in itertools.product(*(list(enumerate(v)) for v in values)):
            variant = {**arm, "options": dict(arm.get("options") or {})}
            suffixes = []
            for field, (index, value) in zip(names, combination, strict=True):
                if field.startswith("options."):
                    variant["options"][field.split(".", 1)[1]] = value
                else:
                    variant[field] = value
                suffixes.append(_suffix(field, value, index))
            variant["name"] = "_".join([arm["name"], *suffixes])
            out.append(variant)
            families[variant["name"]] = arm["name"]
    return out, families


def _set_path(data: dict[str, Any], path: str, value: Any) -> None:
    parts = path.split(".")
    node = data
    for part in parts[:-1]:
        node = node[part]
    node[parts[-1]] = value


def _point_error(
    source: Path,
    point: str,
    axes: tuple,
    exc: ValidationError,
    data: dict[str, Any],
    families: dict[str, str],
) -> UserError:
    try:
        _, lines = read_yaml(source)  # the sweep's line, for the message
    except UserError:
        lines = {}
    first = exc.errors()[0]
    loc = error_loc(first)
    field = dotted(loc) if loc else "(regime)"
    arm = (
        data["arms"][loc[1]]["name"]
        if len(loc) > 1 and loc[0] == "arms" and isinstance(loc[1], int)
        else None
    )
    if arm is not None:
        field += f" (arm {arm})"
    line = _axis_line(lines, loc, axes, families.get(arm))
    where = f"{source}:{line}" if line else str(source)
    values = ", ".join(f"{p}={v}" for p, v in axes) or "arm-level axes only"
    message = error_message(first, Regime)
    return UserError(f"{where}: sweep point {point} ({values}): {field}: {message}; nothing was started")


def _axis_line(lines: dict, loc: tuple, axes: tuple, family: str | None) -> int | None:
    """The line of the axis that made a point invalid: the regime-level axis the bad field is (or
    sits under), else the arm-level axis (or arm) of the bad arm, else the first axis, else sweep:."""
    field = dotted(loc)
    candidates = [
        ("sweep", "regime", p) for p, _ in axes if field == p or field.startswith((p + ".", p + "["))
    ]
    if family is not None:
        candidates += [("sweep", "arms", family, ".".join(map(str, loc[2:]))), ("sweep", "arms", family)]
    candidates += [("sweep", "regime", axes[0][0])] if axes else []
    return next((lines[c] for c in [*candidates, ("sweep",)] if c in lines), None)


def expand(regime: Regime, source: Path) -> StudyPlan:
    """Every point of the study, validated; a single bad point refuses the whole study."""
    sweep = regime.sweep
    if sweep is None:
        raise UserError(f"{source}: no sweep: section; this regime is a single run (bench run runs it)")
    base = regime.model_dump(mode="json", exclude={"sweep"})
    arms, families = expand_arms(base["arms"], sweep.arms)
    paths = list(sweep.regime)
    points = []
    for index, values in enumerate(itertools.product(*sweep.regime.values())):
        axes = tuple(zip(paths, values, strict=True))
        data = copy.deepcopy({**base, "arms": arms})
        for path, value in axes:
            _set_path(data, path, value)
        try:
            concrete = Regime.model_validate(data)
        except ValidationError as exc:
            raise _point_error(source, f"p{index}", axes, exc, data, families) from None
        points.append(StudyPoint(f"p{index}", axes, concrete))
    return StudyPlan(regime=regime, source=source, points=points, families=families)


def plan_study(
    regime_path: Path, regime: Regime | None = None, overrides: Sequence[Override] = ()
) -> tuple[StudyPlan, list[Plan]]:
    """Expand and validate every point (workloads, local paths) before anything starts; the
    command line's ``overrides`` (set in ``regime`` when it is given) go to every point's record."""
    regime = regime if regime is not None else load_regime(regime_path, overrides)
    study = expand(regime, regime_path)
    return study, [plan_regime(regime_path, point.regime, overrides) for point in study.points]
