"""Which GPUs this process may use: ``CUDA_VISIBLE_DEVICES`` read the way CUDA reads it, applied to
NVML, which always sees every GPU of the machine. A study point placed on GPUs 2 and 3 of a node
must record, watch and draw the power of GPUs 2 and 3, not of the points running beside it."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any


def visible_indices(count: int, uuids: list[str], environ: Mapping[str, str] | None = None) -> list[int]:
    """NVML indices of the GPUs ``CUDA_VISIBLE_DEVICES`` leaves visible, in its order. Entries are
    indices or (prefixes of) UUIDs; like CUDA, the list ends at the first entry that names no GPU.
    An index is read as NVML's (PCI bus order), which is CUDA's with CUDA_DEVICE_ORDER=PCI_BUS_ID:
    the local executor sets both; UUIDs (what Slurm's gres may give) are exact either way."""
    value = (os.environ if environ is None else environ).get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return list(range(count))
    out: list[int] = []
    for token in (t.strip() for t in value.split(",")):
        if token.isdecimal() and int(token) < count:
            index = int(token)
        elif token.startswith(("GPU-", "MIG-")):
            index = next((i for i, uuid in enumerate(uuids) if uuid.startswith(token)), -1)
        else:
            index = -1
        if index < 0 or index in out:
            break
        out.append(index)
    return out


def visible_handles(pynvml: Any) -> list[tuple[int, Any]]:
    """(NVML index, handle) of every visible GPU; ``pynvml`` already initialised."""
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    uuids = []
    for handle in handles:
        uuid = pynvml.nvmlDeviceGetUUID(handle)
        uuids.append(uuid.decode() if isinstance(uuid, bytes) else uuid)
    return [(i, handles[i]) for i in visible_indices(len(handles), uuids)]


def handles_at(pynvml: Any, indices: list[int] | None) -> list[tuple[int, Any]]:
    """(NVML index, handle) of the GPUs at ``indices`` (a server's own), or of every visible GPU
    where None (no GPU was chosen: a CPU regime, or one without NVML when the run began)."""
    if indices is None:
        return visible_handles(pynvml)
    return [(index, pynvml.nvmlDeviceGetHandleByIndex(index)) for index in indices]


def choose_gpus(
    visible: list[dict[str, Any]], pinned: list[int] | None, count: int
) -> tuple[list[dict[str, Any]], list[int]]:
    """The GPUs a server runs on, as (their records, the pinned indices that are not visible).
    ``visible``: the environment record's GPUs (those ``CUDA_VISIBLE_DEVICES`` leaves the harness,
    a user's or a study executor's placement, in its order); ``pinned``: the regime's NVML indices,
    else the first ``count`` visible. A pin outside the visible set is reported, and the default
    taken in its place (what a run allowed through the mismatch uses)."""
    by_index = {gpu["index"]: gpu for gpu in visible}
    missing = [index for index in pinned or [] if index not in by_index]
    if pinned is not None and not missing:
        return [by_index[index] for index in pinned], []
    return visible[:count], missing


def server_env(indices: list[int]) -> dict[str, str]:
    """The launch environment that gives a server exactly these GPUs: NVML indices are PCI bus
    order, CUDA's only with CUDA_DEVICE_ORDER=PCI_BUS_ID (its default puts the fastest first).
    Indices, not UUIDs: vLLM turns each entry into an integer
    (``Platform.device_id_to_physical_device_id``)."""
    return {"CUDA_VISIBLE_DEVICES": ",".join(map(str, indices)), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
