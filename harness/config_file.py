"""Load a user-written YAML file into a strict pydantic model, with errors a user can act on.

Every error names the file, the line and the dotted path of the offending field
(``regimes/x.yaml:14: arms[1].num_speculative_tokens: ...``); unknown keys get a "did you
mean" suggestion. Nothing here ever lets a traceback reach the user: the CLI prints
``UserError`` messages as they are.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from harness.errors import UserError

Loc = tuple[Any, ...]
ModelT = TypeVar("ModelT", bound=BaseModel)


class StrictModel(BaseModel):
    """Base for everything a user writes: unknown keys are errors, values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def _line_map(node: yaml.Node, loc: Loc, lines: dict[Loc, int]) -> None:
    lines[loc] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value
            _line_map(value_node, loc + (key,), lines)
            lines[loc + (key,)] = key_node.start_mark.line + 1  # point at the key itself
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _line_map(item, loc + (index,), lines)


def read_yaml(path: Path) -> tuple[Any, dict[Loc, int]]:
    """Parse a YAML file; return the data and a map from field path to line number."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"{path}: file not found") from None
    except UnicodeDecodeError as exc:
        line = exc.object[: exc.start].count(b"\n") + 1
        raise UserError(
            f"{path}:{line}: not UTF-8 text (byte {exc.start}: {exc.reason}); save the file as UTF-8"
        ) from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise UserError(f"{path}{where}: malformed YAML: {problem}") from None
    lines: dict[Loc, int] = {}
    if node is not None:
        _line_map(node, (), lines)
    return data, lines


def dotted(loc: Loc) -> str:
    """('arms', 1, 'method') -> 'arms[1].method'."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _line_for(loc: Loc, lines: dict[Loc, int]) -> int | None:
    # A missing field has no line of its own: fall back to its closest existing parent.
    for end in range(len(loc), -1, -1):
        if loc[:end] in lines:
            return lines[loc[:end]]
    return None


def _all_field_names(model: type[BaseModel], seen: set[type] | None = None) -> set[str]:
    """Every field name reachable from a model, for "did you mean" on unknown keys."""
    seen = seen if seen is not None else set()
    if model in seen:
        return set()
    seen.add(model)
    names = set(model.model_fields)
    for field in model.model_fields.values():
        for sub in _nested_models(field.annotation):
            names |= _all_field_names(sub, seen)
    return names


def _nested_models(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in getattr(annotation, "__args__", ()) for m in _nested_models(arg)]


def _describe(error: dict[str, Any], model: type[BaseModel]) -> str:
    # Pydantic's loc can contain union-branch tags; keep only real keys and indexes.
    kind = error["type"]
    if kind == "extra_forbidden":
        key = str(error["loc"][-1])
        close = difflib.get_close_matches(key, sorted(_all_field_names(model)), n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        return f"unknown key '{key}'{hint}"
    if kind == "missing":
        return "required field is missing"
    message = error["msg"].removeprefix("Value error, ")  # pydantic's wording for a validator's own message
    if (
        "input" in error
        and kind not in ("model_type", "dict_type")
        and not isinstance(error["input"], (dict, list))
    ):
        message += f" (got {error['input']!r})"
    return message


def format_validation_error(
    path: Path, exc: ValidationError, lines: dict[Loc, int], model: type[BaseModel]
) -> str:
    messages = []
    for error in exc.errors():
        loc = tuple(
            # real keys and indexes only: no validator names, no union-branch tags
            part
            for part in error["loc"]
            if isinstance(part, int) or not str(part).startswith(("function-", "tag-"))
        )
        line = _line_for(loc, lines)
        where = f"{path}:{line}" if line else str(path)
        field = dotted(loc) if loc else "(top level)"
        messages.append(f"{where}: {field}: {_describe(error, model)}")
    return "\n".join(messages)


def load_model(path: Path, model: type[ModelT], context: dict[str, Any] | None = None) -> ModelT:
    """Read ``path`` and validate it as ``model``; raise UserError with file/line/path on failure."""
    data, lines = read_yaml(path)
    if not isinstance(data, dict):
        raise UserError(f"{path}:1: expected a mapping of keys at the top level, got {type(data).__name__}")
    try:
        return model.model_validate(data, context=context)
    except ValidationError as exc:
        raise UserError(format_validation_error(path, exc, lines, model)) from None
