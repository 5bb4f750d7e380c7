"""Load a user-written YAML file into a strict pydantic model, with errors a user can act on.

Every error names the file, the line and the dotted path of the offending field
(``regimes/x.yaml:14: arms[1].num_speculative_tokens: ...``), cross-field and file checks
included: validators and later checks raise ``harness.core.errors.FieldError`` with the path of the
field they are about, and this module maps that path to its line. Unknown keys, enum values and
file names get a "did you mean" suggestion, made here only (``did_you_mean``). Nothing here ever
lets a traceback reach the user: the CLI prints ``UserError`` messages as they are.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from harness.core.errors import FieldError, UserError
from harness.core.secrets import secret_name

Loc = tuple[Any, ...]
ModelT = TypeVar("ModelT", bound=BaseModel)


class StrictModel(BaseModel):
    """Base for everything a user writes: unknown keys are errors, values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


# Limits a hand-written file never reaches and a hostile one does at once: a 516-byte alias bomb
# (nine levels of nine aliases) expands to 387 million nodes; 3,000 levels of nesting overflow the
# composer's recursion. Each refusal is one line, before anything is built from the file.
MAX_FILE_BYTES = 4 * 1024 * 1024
MAX_DEPTH = 64
MAX_EXPANDED_NODES = 100_000
# Values written out in the text (aliases not counted): the largest shipped file holds a few hundred,
# a K schedule up to 1,024 batch sizes three thousand. PyYAML composes ~50,000 values a second, so a
# 4 MiB flat list took 46 s of CPU and 1.5 GB before it was refused; this stops it within a second.
MAX_WRITTEN_NODES = 20_000


LIBYAML_TOO_DEEP = "exceeded maximum nesting depth"
SHOWN_VALUE_CHARS = 120  # of a wrong value, in its error


class _Refused(yaml.YAMLError):
    def __init__(self, problem: str, mark: yaml.Mark | None) -> None:
        super().__init__(problem)
        self.problem, self.problem_mark = problem, mark


# libyaml's parser where PyYAML was built with it (the wheels are): it reads text ~50 times faster
# than PyYAML's own scanner, which took 1.2 s of CPU to read one 2 MB line. The nodes are still
# composed here, in Python, where the limits below are counted; the values are PyYAML's safe ones.
try:
    from yaml._yaml import CParser

    _EVENT_SOURCE: tuple[type, ...] = (CParser,)
except ImportError:  # a PyYAML built without libyaml
    _EVENT_SOURCE = (yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser)


class _BoundedLoader(
    yaml.composer.Composer, yaml.constructor.SafeConstructor, yaml.resolver.Resolver, *_EVENT_SOURCE
):
    """PyYAML's safe loader, composing at most ``MAX_DEPTH`` levels deep and ``MAX_WRITTEN_NODES``
    values."""

    depth = 0
    nodes = 0

    def __init__(self, text: str) -> None:
        if len(_EVENT_SOURCE) == 1:
            _EVENT_SOURCE[0].__init__(self, text)
        else:
            yaml.reader.Reader.__init__(self, text)
            yaml.scanner.Scanner.__init__(self)
            yaml.parser.Parser.__init__(self)
        yaml.composer.Composer.__init__(self)
        yaml.constructor.SafeConstructor.__init__(self)
        yaml.resolver.Resolver.__init__(self)

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        self.depth += 1
        self.nodes += 1
        if self.depth > MAX_DEPTH:
            raise _Refused(f"nested more than {MAX_DEPTH} levels deep", self.peek_event().start_mark)
        if self.nodes > MAX_WRITTEN_NODES:
            raise _Refused(
                f"more than {MAX_WRITTEN_NODES:,} values: a regime or workload file holds settings; put data "
                "(prompts, schedules) in files of their own",
                self.peek_event().start_mark,
            )
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def _check_graph(root: yaml.Node) -> None:
    """Refuse a duplicate key (YAML keeps the last one silently), aliases that expand past
    ``MAX_EXPANDED_NODES`` and aliases nested, each inside the next, past ``MAX_DEPTH`` (ten anchors
    50 deep made a value 500 deep that the fingerprint's serialiser refused). Each node is visited
    once (an alias is a node met again), so a bomb is refused in the time its text takes to read."""
    sizes: dict[int, int] = {}
    depths: dict[int, int] = {}

    def size(node: yaml.Node) -> int:
        known = sizes.get(id(node))
        if known is not None:
            if known < 0:
                raise _Refused(
                    "an alias refers to a node that contains it (a recursive alias)", node.start_mark
                )
            return known
        sizes[id(node)] = -1
        total, children = 1, []
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, yaml.Node] = {}
            for key_node, value_node in node.value:
                if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                    first = seen.setdefault(key_node.value, key_node)
                    if first is not key_node:
                        raise _Refused(
                            f"duplicate key '{key_node.value}' (first at line {first.start_mark.line + 1}); "
                            "YAML would keep only the last one",
                            key_node.start_mark,
                        )
                total += size(key_node) + size(value_node)
                children.append(value_node)
        elif isinstance(node, yaml.SequenceNode):
            total += sum(size(item) for item in node.value)
            children = node.value
        depths[id(node)] = 1 + max((depths[id(child)] for child in children), default=0)
        if depths[id(node)] > MAX_DEPTH:
            raise _Refused(
                f"its aliases nest it more than {MAX_DEPTH} levels deep (anchors inside anchors); write the "
                "nested values out",
                node.start_mark,
            )
        if total > MAX_EXPANDED_NODES:
            raise _Refused(
                f"its aliases expand to more than {MAX_EXPANDED_NODES:,} values (an alias bomb); write the "
                "repeated values out or alias fewer levels",
                node.start_mark,
            )
        sizes[id(node)] = total
        return total

    size(root)


def _line_map(node: yaml.Node, loc: Loc, lines: dict[Loc, int], seen: set[int]) -> None:
    lines[loc] = node.start_mark.line + 1
    if id(node) in seen:  # an alias: its own lines were mapped where the anchor is
        return
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value
            _line_map(value_node, loc + (key,), lines, seen)
            lines[loc + (key,)] = key_node.start_mark.line + 1  # point at the key itself
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _line_map(item, loc + (index,), lines, seen)


def parse_yaml(text: str) -> tuple[Any, dict[Loc, int]]:
    """The data of one YAML document and a map from field path to line number, parsed once,
    safely and within the limits above (``yaml.YAMLError`` otherwise, with its mark)."""
    loader = _BoundedLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, {}
        _check_graph(node)
        data = loader.construct_document(node)
    finally:
        loader.dispose()
    lines: dict[Loc, int] = {}
    _line_map(node, (), lines, set())
    return data, lines


def read_yaml(path: Path) -> tuple[Any, dict[Loc, int]]:
    """Parse a YAML file; return the data and a map from field path to line number."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise UserError(f"{path}: file not found") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read: {exc.strerror}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise UserError(
            f"{path}: over {MAX_FILE_BYTES // 2**20} MiB; a regime or workload file holds settings, and "
            "prompts go in the data file a workload names"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = exc.object[: exc.start].count(b"\n") + 1
        raise UserError(
            f"{path}:{line}: not UTF-8 text (byte {exc.start}: {exc.reason}); save the file as UTF-8"
        ) from None
    try:
        return parse_yaml(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        refused = isinstance(exc, _Refused) or problem == LIBYAML_TOO_DEEP
        if problem == LIBYAML_TOO_DEEP:  # libyaml's own limit (1,000 levels) met before ours
            problem = f"nested more than {MAX_DEPTH} levels deep"
        kind = "" if refused else "malformed YAML: "
        raise UserError(f"{path}{where}: {kind}{problem}") from None


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


def _owners(
    model: type[BaseModel], key: str, path: str = "", seen: frozenset[type] = frozenset()
) -> list[str]:
    """The dotted paths of the sections of ``model`` where ``key`` is a field (``target``,
    ``arms[]``): where a key reported unknown belongs."""
    if model in seen:
        return []
    found = [path or "the top level"] if key in model.model_fields else []
    for name, field in model.model_fields.items():
        many = any(get_origin(a) in (list, tuple) for a in (field.annotation, *get_args(field.annotation)))
        for sub in _nested_models(field.annotation):
            found += _owners(sub, key, f"{path}.{name}".lstrip(".") + ("[]" if many else ""), seen | {model})
    return list(dict.fromkeys(found))


def _nested_models(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in getattr(annotation, "__args__", ()) for m in _nested_models(arg)]


def did_you_mean(word: object, choices: Iterable[str]) -> str:
    """``; did you mean 'x'?`` for the choice closest to ``word``, or "" when none is close."""
    close = difflib.get_close_matches(str(word), list(choices), n=1)
    return f"; did you mean '{close[0]}'?" if close else ""


def error_loc(error: dict[str, Any]) -> Loc:
    """A pydantic error's field path: real keys and indexes only (no validator names, no
    union-branch tags), then the path a FieldError raised by a validator names within its model."""
    loc = tuple(
        part
        for part in error["loc"]
        if isinstance(part, int) or not str(part).startswith(("function-", "tag-"))
    )
    raised = error.get("ctx", {}).get("error")
    return loc + raised.path if isinstance(raised, FieldError) else loc


def _field_message(error: FieldError) -> str:
    return error.message + (did_you_mean(error.value, error.choices) if error.choices else "")


def error_message(error: dict[str, Any], model: type[BaseModel]) -> str:
    """What is wrong, for one pydantic error of ``model`` (its place is ``error_loc``)."""
    kind = error["type"]
    raised = error.get("ctx", {}).get("error")
    if isinstance(raised, FieldError):
        return _field_message(raised)
    if kind == "extra_forbidden":
        key = str(error["loc"][-1])
        owners = _owners(model, key)
        if owners:  # a right key in the wrong place: a line above it lost, or its indentation
            return (
                f"unknown key '{key}' here; it is a key of {' or '.join(owners[:3])}: check its indentation "
                "and the lines above it"
            )
        return f"unknown key '{key}'" + did_you_mean(key, sorted(_all_field_names(model)))
    if kind == "missing":
        return "required field is missing"
    message = error["msg"].removeprefix("Value error, ")  # pydantic's wording for a validator's own message
    if (
        "input" in error
        and kind not in ("model_type", "dict_type")
        and not isinstance(error["input"], (dict, list))
        and not secret_name(str(error["loc"][-1]) if error["loc"] else "")  # a secret is never echoed
    ):
        shown = repr(error["input"])
        # a value a line long is shown by its start (a 2 MB name was printed whole)
        message += (
            f" (got {shown[:SHOWN_VALUE_CHARS]}... {len(shown):,} characters)"
            if len(shown) > SHOWN_VALUE_CHARS
            else f" (got {shown})"
        )
    if kind == "literal_error":  # pydantic lists the allowed values as their reprs: 'a', 'b' or 'c'
        message += did_you_mean(error["input"], re.findall(r"'([^']*)'", error["ctx"]["expected"]))
    return message


def _one_line(source: Path, loc: Loc, lines: dict[Loc, int], message: str) -> str:
    line = _line_for(loc, lines)
    return f"{source}:{line}: {dotted(loc)}: {message}" if line else f"{source}: {dotted(loc)}: {message}"


def format_validation_error(
    path: Path,
    exc: ValidationError,
    lines: dict[Loc, int],
    model: type[BaseModel],
    placed: Sequence[tuple[str, Loc]] = (),
) -> str:
    """One line per error: the file's line, or the command-line override (``placed``: each as
    typed, with the field it set) that set that field."""
    out = []
    for error in exc.errors():
        loc, message = error_loc(error), error_message(error, model)
        # the last override at or around this field set it (an error inside a list it set, or on the
        # section it is in); an error about the whole file stays the file's
        near = [typed for typed, at in placed if loc[: len(at)] == at or (loc and at[: len(loc)] == loc)]
        given = near[-1] if near else None
        line = f"{given}: {dotted(loc)}: {message}" if given else _one_line(path, loc, lines, message)
        if placed and not given:  # a field the file set, checked against one the command line set
            line += f" (with {'; '.join(dict.fromkeys(typed for typed, _ in placed))} from the command line)"
        out.append(line)
    return "\n".join(out)


def located(source: Path, error: FieldError) -> UserError:
    """A FieldError found after ``source`` was loaded (a file that is not there, a name defined in
    another file) as the UserError its loader gives: the file, that field's line, its path."""
    try:
        _, lines = read_yaml(source)
    except UserError:  # gone or unreadable since: the message still names the file and the field
        lines = {}
    return UserError(_one_line(source, error.path, lines, _field_message(error)))


def existing_path(source: Path, loc: Loc, written: str, what: str, need_file: bool = True) -> Path:
    """``written``, a path in the file ``source`` at field ``loc`` (relative to that file's folder
    unless absolute), resolved; if nothing is there, the UserError at that field's line that says
    where it looked and offers the closest path that does exist."""
    base = source.parent
    resolved = (base / Path(written).expanduser()).resolve()
    if resolved.is_file() or (not need_file and resolved.exists()):
        return resolved
    relative = (
        ""
        if Path(written).expanduser().is_absolute()
        else f" (paths in {source.name} are relative to its folder)"
    )
    message = f"{what} {written} does not exist: looked for {resolved}{relative}"
    raise located(source, FieldError(loc, message + did_you_mean(written, _paths_near(written, base))))


def _paths_near(written: str, base: Path) -> list[str]:
    """Paths the user may have meant, spelled as they would write them: every entry of the folder
    named, and of the same folder with more or fewer leading '../' (the file moved a level)."""
    path = Path(written).expanduser()
    folders = [path.parent]
    if not path.is_absolute():
        parts = list(path.parent.parts)
        while parts and parts[0] == "..":
            parts.pop(0)
        folders += [Path(*[".."] * ups, *parts) for ups in range(4)]
    dot = "./" if written.startswith("./") else ""  # './model' is a local path, 'model' a hub id
    return [
        (folder / entry.name).as_posix()
        if folder.is_absolute() or folder.parts[:1] == ("..",)
        else dot + (folder / entry.name).as_posix()
        for folder in dict.fromkeys(folders)
        if (base / folder).is_dir()
        for entry in (base / folder).iterdir()
    ]


def load_model(
    path: Path,
    model: type[ModelT],
    context: dict[str, Any] | None = None,
    edit: Callable[[dict[str, Any]], Sequence[tuple[str, Loc]]] | None = None,
) -> ModelT:
    """Read ``path``, let ``edit`` change its data (the command line's overrides: it returns each
    as typed with the field it set), and validate it as ``model``; raise UserError with
    file/line/path (or the override) on failure."""
    data, lines = read_yaml(path)
    if not isinstance(data, dict):
        raise UserError(f"{path}:1: expected a mapping of keys at the top level, got {type(data).__name__}")
    placed = edit(data) if edit is not None else ()
    try:
        return model.model_validate(data, context=context)
    except ValidationError as exc:
        raise UserError(format_validation_error(path, exc, lines, model, placed)) from None
