"""A target's weights in bytes, estimated from the regime alone, before anything is downloaded (issue
78, item 6): its parameters (a table of the models whose names do not say, else the name:
``Llama-3.1-8B-Instruct`` is 8B) times the bytes a parameter takes, as stored (what a download
fetches and a start-up reads from disk: the checkpoint's own precision) and as served (what every
decode step reads from GPU memory: the regime's ``target.quantization`` where it sets one, else the
stored). An estimate: embeddings, norms and quantization scales kept in higher precision add a few
per cent, which it leaves out."""

from __future__ import annotations

import re
from dataclasses import dataclass

from harness.config.regime import Regime


@dataclass(frozen=True)
class KnownModel:
    """A model whose name does not give its size: billions of parameters as its checkpoint holds
    them, the bytes a parameter takes in that checkpoint, and where the figures are from."""

    params_b: float
    stored_bytes: float
    source: str


_DEEPSEEK_V3 = KnownModel(
    685.0,
    1.0,
    "DeepSeek-V3's model card: 671B of the main model plus the 14B multi-token-prediction module, "
    "stored in FP8 (block-wise, its own)",
)
# keyed by the hub id's name part, lower-cased (the organisation is left out: mirrors keep the name)
KNOWN_MODELS: dict[str, KnownModel] = {
    "deepseek-v3": _DEEPSEEK_V3,
    "deepseek-v3-base": _DEEPSEEK_V3,
    "deepseek-v3-0324": _DEEPSEEK_V3,
    "deepseek-r1": _DEEPSEEK_V3,
    "deepseek-r1-0528": _DEEPSEEK_V3,
}

# bytes a parameter takes under a dtype, and under an engine quantization method (the weights' bits
# only: scales and zero points are left out)
DTYPE_BYTES = {"bfloat16": 2.0, "float16": 2.0, "float32": 4.0, "auto": 2.0}
QUANTIZATION_BYTES = {
    "fp8": 1.0,
    "fbgemm_fp8": 1.0,
    "ptpc_fp8": 1.0,
    "modelopt": 1.0,
    "experts_int8": 1.0,
    "awq": 0.5,
    "awq_marlin": 0.5,
    "gptq": 0.5,
    "gptq_marlin": 0.5,
    "bitsandbytes": 0.5,
    "mxfp4": 0.5,
    "modelopt_fp4": 0.5,
    "nvfp4": 0.5,
}
# what a checkpoint's name says of its stored precision (``...-FP8``, ``...-AWQ``, ``...-w4a16``)
_NAME_PRECISION = (
    (re.compile(r"(?i)(?<![a-z0-9])(fp8|w8a8|int8)(?![a-z0-9])"), 1.0, "fp8/int8"),
    (re.compile(r"(?i)(?<![a-z0-9])(awq|gptq|int4|w4a16|nvfp4|mxfp4|fp4|4bit)(?![a-z0-9])"), 0.5, "4-bit"),
)


def params_from_name(reference: str) -> float | None:
    """Billions of parameters from a model's name (``Llama-3.1-8B-Instruct``: 8, ``SmolLM2-135M``:
    0.135); None where the name does not say (``DeepSeek-V3-0324``)."""
    found = re.search(r"(?<![\d.])(\d+(?:\.\d+)?)([BM])(?![A-Za-z])", reference.rsplit("/", 1)[-1])
    if found is None:
        return None
    return float(found[1]) / (1000 if found[2] == "M" else 1)


def known_model(reference: str) -> KnownModel | None:
    """The table's row for a hub id or a local directory of that name, or None."""
    name = reference.rstrip("/").rsplit("/", 1)[-1].casefold()
    return KNOWN_MODELS.get(name)


def model_params_b(reference: str) -> float | None:
    """Billions of parameters: the table's, else the name's, else None."""
    known = known_model(reference)
    return known.params_b if known is not None else params_from_name(reference)


@dataclass(frozen=True)
class WeightSize:
    """A target's weights: ``params_b`` billions of parameters, ``stored_bytes`` a parameter as
    downloaded and loaded, ``served_bytes`` a parameter as held in GPU memory, and where each is
    from (``source``: the parameters; ``precision``: the bytes)."""

    params_b: float
    stored_bytes: float
    served_bytes: float
    source: str
    precision: str

    @property
    def stored(self) -> float:
        """Bytes a download fetches and a start-up reads."""
        return self.params_b * 1e9 * self.stored_bytes

    @property
    def served(self) -> float:
        """Bytes a decode step reads (every weight once)."""
        return self.params_b * 1e9 * self.served_bytes

    def text(self) -> str:
        """'~685 GB (685B parameters x 1 byte, fp8; ...)': the size and how it was estimated."""
        per = f"{self.served_bytes:g} byte" + ("" if self.served_bytes == 1 else "s")
        size = f"~{gb(self.served)} ({self.params_b:g}B parameters x {per}, {self.precision}"
        if self.stored != self.served:
            size += f"; {gb(self.stored)} as stored, quantized as it loads"
        return f"{size}; parameters: {self.source}; an estimate)"


def gb(size: float) -> str:
    """Bytes as GB (1e9), to three figures."""
    value = size / 1e9
    return f"{value:,.0f} GB" if value >= 100 else f"{value:.3g} GB"


def _stored_bytes(reference: str, dtype: str) -> tuple[float, str]:
    known = known_model(reference)
    if known is not None:
        return known.stored_bytes, "the checkpoint's own"
    for pattern, size, label in _NAME_PRECISION:
        if pattern.search(reference.rsplit("/", 1)[-1]):
            return size, f"{label} as its name says"
    return DTYPE_BYTES[dtype], dtype


def weight_size(regime: Regime) -> WeightSize | None:
    """The target's weights as the regime states them, or None where neither the table nor the
    target's name gives its parameters (a packaged GGUF file's are not estimated here)."""
    target = regime.target
    if target.path is None:
        return None
    reference = target.path
    known = known_model(reference)
    params = known.params_b if known is not None else params_from_name(reference)
    if params is None:
        return None
    source = known.source if known is not None else f"its name ({reference.rsplit('/', 1)[-1]})"
    stored, stored_label = _stored_bytes(reference, target.dtype)
    quantization = (target.quantization or "").casefold()
    if quantization in QUANTIZATION_BYTES:
        served = QUANTIZATION_BYTES[quantization]
        precision = quantization if served == stored else f"{quantization} (stored {stored_label})"
    elif quantization:
        served, precision = stored, f"{stored_label}; {quantization}'s bytes not known here, the stored taken"
    else:
        served, precision = stored, stored_label
    return WeightSize(params, stored, served, source, precision)
