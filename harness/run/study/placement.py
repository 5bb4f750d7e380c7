"""Where each point of a study runs on one node: disjoint GPU sets, planned before anything starts.

A point occupies the GPUs its servers use (``tensor_parallel_size`` of them: one server at a
time, each arm in turn). The plan is list scheduling over each point's time budget: in study
order, a point takes the aligned block of GPUs that frees up first (a TP=2 point gets GPUs 0-1,
2-3, 4-5 or 6-7, never 1-2: blocks stay inside the NVLink/NUMA halves a node is built from). The
executor then starts a point only when every point planned before it on one of its GPUs has
finished, so the GPU sets are exactly the plan's whatever the real durations, and no point is
ever measured while another holds one of its GPUs. A CPU point takes the whole machine: CPU
points run one at a time, since two engines on the same cores perturb each other's timing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from harness.config.regime import Regime
from harness.core.errors import UserError

# A window's budget when a point's time limit is derived (see ``time_limit_minutes``).
WINDOW_BUDGET_MIN = 2.0


@dataclass(frozen=True)
class Demand:
    point: str
    gpus: int  # 0: a CPU point, which takes the whole machine
    minutes: float  # its time budget: what the plan orders by, and a scheduler's time limit


@dataclass(frozen=True)
class Slot:
    """One point's place in the plan."""

    point: str
    devices: tuple[int, ...]  # positions in the node's GPU list; () for a CPU point
    after: tuple[str, ...]  # points that must finish first: they held one of these devices before
    wave: int  # 1 + the longest chain of points before it: points of one wave may run side by side


def point_gpus(regime: Regime, gpus_per_point: int | None = None) -> int:
    """GPUs a point occupies: its servers' tensor-parallel degree (CPU regimes: none), unless the
    command gives every point a fixed number."""
    if gpus_per_point is not None:
        return gpus_per_point
    return regime.tensor_parallel_size if regime.hardware.kind == "gpu" else 0


def time_limit_minutes(regime: Regime) -> int:
    """A point's time budget: per arm and server start-up, its start-up timeout plus
    ``WINDOW_BUDGET_MIN`` per measured window (every workload x load level x the most repeats). An
    upper bound, for a scheduler's time limit; ``--time-limit`` overrides it."""
    load = regime.load
    windows = len(regime.workloads) * len(load.levels()) * load.max_repeats()
    per_arm = load.max_server_starts() * (regime.engine.startup_timeout_s / 60 + windows * WINDOW_BUDGET_MIN)
    return math.ceil(per_arm * len(regime.arms))


def _blocks(size: int, node: int) -> list[tuple[int, ...]]:
    starts = range(0, node, size) if node % size == 0 else range(node - size + 1)
    return [tuple(range(start, start + size)) for start in starts]


def plan_placement(demands: list[Demand], node_gpus: int) -> list[Slot]:
    """Each point's devices and the points it waits for. A point that needs more GPUs than the node
    has refuses the whole plan, naming it."""
    too_big = [d for d in demands if d.gpus > node_gpus]
    if too_big:
        first = too_big[0]
        raise UserError(
            f"study point {first.point} needs {first.gpus} GPUs and this node has {node_gpus} "
            "(--gpus N to say how many; a point runs on one node); nothing was started"
        )
    width = max(node_gpus, 1)  # a CPU-only machine: one slot, the machine
    free_at = [0.0] * width  # estimated minute each device frees up
    holder: list[str | None] = [None] * width  # the point planned last on each device
    wave_of: dict[str, int] = {}
    slots = []
    for demand in demands:
        if demand.gpus == 0:
            block = tuple(range(width))  # the whole machine
        else:
            block = min(_blocks(demand.gpus, node_gpus), key=lambda b: (max(free_at[d] for d in b), b))
        start = max(free_at[d] for d in block)
        after = tuple(dict.fromkeys(h for d in block if (h := holder[d]) is not None))
        wave_of[demand.point] = 1 + max((wave_of[p] for p in after), default=0)
        for d in block:
            free_at[d], holder[d] = start + demand.minutes, demand.point
        devices = () if demand.gpus == 0 else block
        slots.append(Slot(demand.point, devices, after, wave_of[demand.point]))
    return slots


def plan_lines(slots: list[Slot], demands: list[Demand], device_names: list[str]) -> list[str]:
    """The plan as ``bench validate`` prints it, one line per point."""
    budget = {d.point: d.minutes for d in demands}
    lines = []
    for slot in slots:
        where = (
            "GPUs " + ",".join(device_names[d] for d in slot.devices)
            if slot.devices
            else "the whole machine (CPU point: one at a time)"
        )
        waits = f", after {', '.join(slot.after)}" if slot.after else ", at once"
        lines.append(
            f"wave {slot.wave}: {slot.point} on {where}{waits} (budget {budget[slot.point]:.0f} min)"
        )
    return lines
