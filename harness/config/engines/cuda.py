"""The CUDA an engine release's default wheel needs of the GPU driver: a driver whose highest
supported CUDA (NVML's ``nvmlSystemGetCudaDriverVersion``, the environment record's
``cuda_driver``) is older fails at the engine's first CUDA call, minutes into a start-up, so the
regime check refuses it before anything starts (``harness.run.validation``).

One table, by engine name and release. Source: the project's reference notes on the engines
(shared/reference/engines.md): "vLLM 0.33/0.34 wheels default to CUDA 13.0 with torch 2.14; SGLang
0.5.23 pins torch 2.14.1" (whose default wheel is CUDA 13.0 too). A release not listed is not
checked (the check says so); a build for another CUDA (a cu12x wheel) is the user's to pin with
--allow-mismatch until this table knows builds apart.
"""

from __future__ import annotations

# (engine name, release) -> the CUDA version its default wheel is built for, "major.minor"
CUDA_NEEDED: dict[tuple[str, str], str] = {
    ("vllm", "0.33.0"): "13.0",
    ("vllm", "0.34.0"): "13.0",
    ("sglang", "0.5.23"): "13.0",
}


def cuda_needed(engine: str, release: str) -> str | None:
    """The CUDA ``engine``'s ``release`` needs, or None where this table does not know it."""
    return CUDA_NEEDED.get((engine, release))


def cuda_older(driver: str, needed: str) -> bool:
    """Whether the driver's CUDA ("12.4") is older than ``needed`` ("13.0"), compared as numbers
    ("12.10" is newer than "12.9")."""
    return _parts(driver) < _parts(needed)


def _parts(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))
