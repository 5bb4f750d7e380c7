"""``python -m harness.config.engines.vllm_facts``: the installed vLLM's own SpeculativeConfig as one JSON
line (its version, init fields, method names and sampling values), for validation
(``harness.run.sensors.engine_facts`` runs it in a child process; vLLM is imported only here, only
then)."""

from __future__ import annotations

import json


def read_class() -> dict:
    """In the child: the installed vLLM's SpeculativeConfig, as plain data."""
    import dataclasses
    import typing

    import vllm
    from vllm.config.speculative import SpeculativeConfig

    hints = typing.get_type_hints(SpeculativeConfig)

    def literal(name: str) -> list[str]:
        found = [hints[name]]
        values: list[str] = []
        while found:  # a Literal, or a union holding one (str | None beside it)
            hint = found.pop()
            if typing.get_origin(hint) is typing.Literal:
                values += [v for v in typing.get_args(hint) if isinstance(v, str)]
            else:
                found += list(typing.get_args(hint))
        return sorted(set(values))

    return {
        "version": vllm.__version__,
        "fields": sorted(f.name for f in dataclasses.fields(SpeculativeConfig) if f.init),
        "methods": literal("method"),
        "sampling": {name: literal(name) for name in ("rejection_sample_method", "draft_sample_method")},
    }


if __name__ == "__main__":
    print(json.dumps(read_class()))
