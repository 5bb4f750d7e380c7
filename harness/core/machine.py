"""What the stored environment of a run says about comparability: the machine identity two runs
are compared on, and the environment fingerprint. Pure functions over ``environment.json``'s
dict; ``harness.run.sensors.environment`` collects it."""

from __future__ import annotations

import hashlib
import json
from typing import Any

# The instruction-set features the CPU engine's kernels choose between (bf16 and int8 paths, AMX
# tiles): the same CPU regime gave ngram 0.94x on an AVX2 VM and 1.94x on one with AVX-512 BF16.
CPU_FEATURES = (
    "avx2",
    "avx512f",
    "avx512_bf16",
    "avx512_vnni",
    "avx_vnni",
    "amx_bf16",
    "amx_int8",
    "amx_tile",
)


# What makes two runs' numbers comparable as far as the machine goes. A field either run did not
# record (an older run, no GPU probe) is not compared.
def machine_identity(environment: dict[str, Any]) -> dict[str, Any]:
    gpus = environment.get("gpus") or []
    described = [
        f"{g.get('name')} ({g.get('memory_total_mib')} MiB, {g.get('power_limit_w')} W)" for g in gpus
    ]
    return {
        "cpu_model": environment.get("cpu_model"),
        "cpu_count": environment.get("cpu_count"),
        "cpu_flags": environment.get("cpu_flags"),
        "gpus": ", ".join(f"{described.count(d)} x {d}" for d in dict.fromkeys(described)) or None,
        "gpu_driver": environment.get("gpu_driver"),
        "cuda_driver": environment.get("cuda_driver"),
        "engine_version": environment.get("engine_version"),
        "torch": environment.get("torch"),
    }


def machine_differences(first: dict[str, Any], second: dict[str, Any]) -> list[str]:
    """``field: A vs B`` for every machine field both environments recorded and that differs."""
    return identity_differences(machine_identity(first), machine_identity(second))


def identity_differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """``field: A vs B`` for every field two machine identities both recorded and that differs (a
    stored identity, like a calibration's, against one made from an environment)."""
    return [
        f"{field}: {a[field]} vs {b[field]}"
        for field in a
        if a[field] is not None and b.get(field) is not None and a[field] != b[field]
    ]


# The environment fields that define a regime; their hash is the environment fingerprint.
FINGERPRINT_FIELDS = (
    "engine_version",
    "torch",
    "cpu_model",
    "cpu_count",
    "gpu_names",
    "gpu_driver",
    "cuda_driver",
)


def environment_fingerprint(record: dict[str, Any]) -> str:
    fields = {key: record.get(key) for key in FINGERPRINT_FIELDS}
    fields["gpu_names"] = [g["name"] for g in record.get("gpus") or []]
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


def gpus_text(gpus: list[dict[str, Any]]) -> str:
    """GPU records (index, name, uuid: ``environment.json``'s ``server_gpus``) as a reader matches
    them against nvidia-smi: 'GPU 0 (NVIDIA H200, GPU-5b1c...)'."""
    return ", ".join(
        f"GPU {g['index']} ({', '.join(str(p) for p in (g.get('name'), g.get('uuid')) if p)})" for g in gpus
    )
