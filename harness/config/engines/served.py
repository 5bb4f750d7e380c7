"""What a running server says it is (``EngineAdapter.served_config``), as one typed record: checked
against the regime after start-up (``harness.run.validation.check_served``), an endpoint's read into
the run's fingerprint (``harness.run.deployment``), and the part that changes what a cell measures
(``ServedRuntime``: async scheduling, the CUDA-graph capture ceiling, the running cap) kept in the
arm's status, where the verdict's caveats read it.

A field the engine did not report is left unset (``reported``), never None: None is a report ("no
quantization", "no speculation").
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from harness.core.errors import EngineError
from harness.core.formats import inert_tree


class _Served(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AttentionBackend(_Served):
    """The attention backend the engine selected for the arm's server, in the engine's spelling."""

    target: str | None
    drafter: str | None = None  # where the engine reports a separate one for the draft
    source: str  # where it was read (server log, /server_info), or how it was inferred


class DraftCounting(_Served):
    """How the arm's engine counted a draft: tau's denominator (``probes.acceptance.DRAFT_COUNTING``)."""

    semantics: Literal["proposing_steps", "every_step", "verify_steps"]
    source: str  # the evidence: a server log line, the engine and version


class ServedSpeculation(_Served):
    method: str  # in the regime's spelling (SGLang's algorithm names translated)
    num_speculative_tokens: int | None


class ServedRuntime(_Served):
    """How the engine runs the arm's steps, where it changes what a cell measures: each field None
    where the engine did not say (then no cell is flagged by it), with where it was read."""

    # vLLM's async scheduling (on by default with speculation from 0.34; vLLM #46669: garbage
    # outputs with MTP or DFlash above concurrency 1 while it is on)
    async_scheduling: bool | None = None
    async_scheduling_source: str | None = None
    # the decode batch sizes captured as CUDA graphs, in tokens a step ([]: none, eager or CPU); a
    # step of more tokens than the largest (concurrency x (K + 1) when speculating) runs uncaptured
    cudagraph_capture_sizes: list[int] | None = None
    cudagraph_source: str | None = None
    # requests the engine runs at once (SGLang: max_running_requests, 48 for speculation unless set)
    running_cap: int | None = None
    running_cap_source: str | None = None
    release: str | None = None  # the engine release that reported it (its defects are by release)

    @property
    def capture_ceiling(self) -> int | None:
        """The largest captured step in tokens; None where the sizes are unknown or none were captured."""
        return max(self.cudagraph_capture_sizes) if self.cudagraph_capture_sizes else None


class ServedConfig(_Served):
    """What a running server reports about itself."""

    model: str | None = None  # an endpoint's served model id (``/v1/models``)
    version: str | None = None
    max_model_len: int | None = None
    dtype: str | None = None
    quantization: str | None = None
    speculative: ServedSpeculation | None = None  # None: reported no speculation
    attention_backend: AttentionBackend | None = None
    draft_counting: DraftCounting | None = None
    engine_patches: list[str] | None = None  # the patches its processes said they applied
    runtime: ServedRuntime | None = None

    def reported(self, name: str) -> bool:
        """The engine reported ``name`` (even as None)."""
        return name in self.model_fields_set

    def recorded(self) -> dict[str, Any]:
        """As the run records it (fingerprint, ``served_endpoints``): what was reported, made inert
        (a server's strings are printed and compared)."""
        return inert_tree(
            json.loads(json.dumps(self.model_dump(mode="json", exclude_unset=True), sort_keys=True))
        )


def served(fields: dict[str, Any], where: str) -> ServedConfig:
    """``fields`` as a ``ServedConfig``; a server that reports a value of the wrong shape is an
    ``EngineError`` naming where it was read and the field, never a half-read record."""
    try:
        return ServedConfig.model_validate(fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise EngineError(f"{where}: {field}: {first['msg']}") from None
