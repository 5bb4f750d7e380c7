"""A regime changed from the command line: ``--set load.concurrency=[1,8]`` and the common ones
as flags (``--num-prompts``, ``--concurrency``, ``--request-rate``, ``--arms``).

An override is applied to the file's data before it is validated, so it is checked like the file
(the same messages, naming the flag instead of a line), and the regime as run (with it) is what is
fingerprinted: calibrations, the history and the gates see the override. The run records each one
with where it came from (``regime.json``'s ``overrides``).

A path is the file's own dotted path; an arm is named by its name or its index
(``arms.ngram_k4.num_speculative_tokens``, ``arms[1].options.prompt_lookup_max``). A value is YAML
(``[1, 8]``, ``true``, ``bfloat16``), read by the same bounded loader as the files.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import yaml

from harness.core.config_file import Loc, StrictModel, did_you_mean, dotted, parse_yaml
from harness.core.errors import UserError
from harness.core.secrets import REDACTED, redact_args, redact_url, secret_name


class Override(StrictModel):
    """One value set from the command line."""

    path: str  # as given: load.concurrency, arms.ngram_k4.num_speculative_tokens
    value: Any  # what runs: a secret in it is given to the server
    # the flag as every message and record shows it: as typed (--set load.concurrency=[2]), or, where
    # the value holds a secret, written from the redacted value (``redacted``)
    given: str


def redacted(path: str, value: Any) -> Any:
    """``value`` as the records and the terminal show it (harness.core.secrets): the whole value of a
    secret-named field, and inside mappings and lists, the value of each secret-named key, the
    value after each secret-named flag (``[--api-key, X]``), a URL's credentials and a value of a
    credential's shape. The one redaction of an override: its record and its text come from it."""
    if secret_name(re.split(r"[.\[\]]", path.rstrip("]"))[-1]):
        return REDACTED
    return _redacted_inside(value)


def _redacted_inside(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: REDACTED if secret_name(str(k)) else _redacted_inside(v) for k, v in value.items()}
    if isinstance(value, list):
        if all(isinstance(item, str) for item in value):  # an argument list: --flag VALUE
            return redact_args(value)
        return [_redacted_inside(item) for item in value]
    return redact_url(value) if isinstance(value, str) else value


def _flow(value: Any) -> str:
    """A value as one line of YAML, the way ``--set`` takes it: ``{MY_API_KEY: <redacted>}``."""
    if isinstance(value, str):
        return value
    return yaml.safe_dump(value, default_flow_style=True, width=2**20, sort_keys=False).strip()


def parse_set(text: str) -> Override:
    """``PATH=VALUE`` (``--set``'s argument). Its text is as typed unless the value holds a secret:
    then it is written from the redacted value, so that no message or record can echo it."""
    path, equals, raw = text.partition("=")
    path = path.strip()
    if not equals or not path or not raw.strip():
        raise UserError(f"--set {_unparsed(text)}: expected PATH=VALUE, e.g. --set load.concurrency=[1,8]")
    try:
        value, _ = parse_yaml(raw)
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", exc)
        raise UserError(f"--set {_unparsed(text)}: the value is not YAML ({problem})") from None
    shown = redacted(path, value)
    given = f"--set {text}" if shown == value and redact_url(raw) == raw else f"--set {path}={_flow(shown)}"
    return Override(path=path, value=value, given=given)


def _unparsed(text: str) -> str:
    """A ``--set`` that could not be read, for its error: a secret-named field's value hidden."""
    path, equals, raw = text.partition("=")
    return f"{path}={REDACTED}" if equals and redacted(path.strip(), raw) == REDACTED else redact_url(text)


def _numbers(text: str, flag: str, kind: type) -> list:
    try:
        values = [kind(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UserError(
            f"{flag} {text}: expected {kind.__name__}s separated by commas, e.g. {flag} 1,8"
        ) from None
    if not values:
        raise UserError(f"{flag} {text}: give at least one value")
    return values


def flag_overrides(
    num_prompts: int | None = None,
    concurrency: str | None = None,
    request_rate: str | None = None,
    arms: str | None = None,
    endpoints: Sequence[str] = (),
) -> list[Override]:
    """The common overrides as flags. ``--concurrency`` and ``--request-rate`` give the load levels
    to measure: the other kind of level is emptied unless it is given too."""
    found: list[Override] = []
    if num_prompts is not None:
        found.append(
            Override(path="load.num_prompts", value=num_prompts, given=f"--num-prompts {num_prompts}")
        )
    levels = {
        "load.concurrency": ("--concurrency", concurrency, int),
        "load.request_rate": ("--request-rate", request_rate, float),
    }
    if concurrency is not None or request_rate is not None:
        given = " ".join(f"{flag} {text}" for flag, text, _ in levels.values() if text is not None)
        for path, (flag, text, kind) in levels.items():
            found.append(
                Override(path=path, value=[] if text is None else _numbers(text, flag, kind), given=given)
            )
    alone = [text for text in endpoints if re.match(r"https?://", text.strip())]
    if alone and len(endpoints) > 1:
        raise UserError(
            f"--endpoint {redact_url(alone[0].strip())}: one server alone (no ARM=), or every arm's server "
            "(--endpoint ARM=URL each), not both"
        )
    if alone:  # --endpoint URL: that one server, measured as the regime's baseline arm, alone
        url = alone[0].strip()
        return [*found, Override(path="arms", value=url, given=f"--endpoint {redact_url(url)}")]
    for text in endpoints:  # --endpoint NAME=URL: that arm is an existing server
        name, equals, url = text.partition("=")
        if not equals or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]*", name.strip()) or not url.strip():
            raise UserError(
                f"--endpoint {text}: expected ARM=URL, e.g. --endpoint ngram_k4=http://10.0.0.5:8000, or a "
                "URL alone to measure that one server (http://10.0.0.5:8000)"
            )
        path = f"arms.{name.strip()}.endpoint"
        found.append(
            Override(path=path, value=url.strip(), given=f"--endpoint {name}={redact_url(url.strip())}")
        )
    if arms is not None:
        found.append(
            Override(
                path="arms", value=[a.strip() for a in arms.split(",") if a.strip()], given=f"--arms {arms}"
            )
        )
    return found


def _resolve(data: Any, override: Override) -> tuple[Any, Loc]:
    """The container the override's last part is set in, and the override's location in the data
    (an arm named by its name becomes its index)."""
    parts: list[str | int] = []
    for match in re.finditer(r"[^.\[\]]+", override.path):
        parts.append(int(match[0]) if match[0].isdecimal() else match[0])
    if not parts:
        raise UserError(f"{override.given}: no path to set")
    loc: list[str | int] = []
    node = data
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        if isinstance(node, list):
            if isinstance(part, str):  # an arm (any list of named items) by its name
                names = [item.get("name") for item in node if isinstance(item, dict)]
                if part not in names:
                    raise UserError(
                        f"{override.given}: {dotted(tuple(loc))} has no item named '{part}'"
                        + did_you_mean(part, [n for n in names if isinstance(n, str)])
                    )
                part = names.index(part)
            elif not 0 <= part < len(node):
                raise UserError(f"{override.given}: {dotted(tuple(loc))} has {len(node)} items, no [{part}]")
        elif isinstance(node, dict):
            if isinstance(part, int):
                raise UserError(f"{override.given}: {dotted(tuple(loc))} is a mapping, not a list")
            if not last and node.get(part) is None:
                node[part] = {}  # a section the file leaves out (engine.env): validation checks the rest
        else:
            raise UserError(f"{override.given}: {dotted(tuple(loc))} is a value, not a section")
        loc.append(part)
        if last:
            return node, tuple(loc)
        node = node[part]
    raise AssertionError("unreachable")


def _keep_arms(data: dict[str, Any], override: Override) -> Loc:
    """``--arms a,b``: the baseline and the named arms, in the regime's order."""
    arms = data.get("arms")
    if not isinstance(arms, list):
        raise UserError(f"{override.given}: the regime has no arms: list")
    names = [arm.get("name") for arm in arms if isinstance(arm, dict)]
    baseline = [arm.get("name") for arm in arms if isinstance(arm, dict) and arm.get("method") == "baseline"]
    if not [name for name in override.value if name not in baseline]:
        raise UserError(f"{override.given}: name at least one arm besides the baseline (it always runs)")
    for name in override.value:
        if name not in names:
            raise UserError(
                f"{override.given}: no arm '{name}' (arms: {', '.join(map(str, names))})"
                + did_you_mean(name, names)
            )
    data["arms"] = [
        arm
        for arm in arms
        if isinstance(arm, dict) and (arm.get("name") in override.value or arm.get("method") == "baseline")
    ]
    sweep = data.get("sweep")
    if isinstance(sweep, dict) and isinstance(sweep.get("arms"), dict):  # axes of arms not run go too
        sweep["arms"] = {k: v for k, v in sweep["arms"].items() if k in override.value}
    gates = data.get("gates")
    if isinstance(gates, dict) and isinstance(gates.get("rules"), list):  # and the gates of arms not run
        kept = {"*", *override.value, *baseline}
        gates["rules"] = [r for r in gates["rules"] if not isinstance(r, dict) or r.get("arm") in kept]
    return ("arms",)


def _one_server(data: dict[str, Any], override: Override) -> Loc:
    """``--endpoint URL``: the regime's baseline arm alone, measured on that running server: one
    server, compared with nothing (no speedup, no verdict; its numbers and their spread over rounds).
    The sweep's arm axes and the gates of the arms left out go with them."""
    arms = data.get("arms")
    if not isinstance(arms, list):
        raise UserError(f"{override.given}: the regime has no arms: list")
    baseline = [arm for arm in arms if isinstance(arm, dict) and arm.get("method") == "baseline"]
    if len(baseline) != 1:
        raise UserError(f"{override.given}: the regime needs one baseline arm to measure the server as")
    data["arms"] = [{**baseline[0], "endpoint": override.value}]
    sweep = data.get("sweep")
    if isinstance(sweep, dict) and isinstance(sweep.get("arms"), dict):
        sweep["arms"] = {}
    gates = data.get("gates")
    if isinstance(gates, dict) and isinstance(gates.get("rules"), list):
        kept = {"*", baseline[0].get("name")}
        gates["rules"] = [r for r in gates["rules"] if not isinstance(r, dict) or r.get("arm") in kept]
    return ("arms",)


def apply_overrides(data: Any, overrides: Sequence[Override]) -> list[tuple[str, Loc]]:
    """Set each override in the file's ``data`` (in place, in order); each as typed, with the field
    it set (``config_file.load_model``'s ``edit``)."""
    if not isinstance(data, dict):
        return []
    placed = []
    for override in overrides:
        if override.path == "arms" and override.given.startswith("--arms"):
            placed.append((shown(override), _keep_arms(data, override)))
            continue
        if override.path == "arms" and override.given.startswith("--endpoint"):
            placed.append((shown(override), _one_server(data, override)))
            continue
        container, loc = _resolve(data, override)
        value = override.value
        if loc[:2] == ("engine", "env") and len(loc) == 3 and isinstance(value, bool | int | float):
            value = str(value).lower() if isinstance(value, bool) else str(value)  # env values are text
        container[loc[-1]] = value
        placed.append((shown(override), loc))
    return placed


def record(overrides: Sequence[Override]) -> list[dict[str, Any]]:
    """What a run's ``regime.json`` (or a study's, a capacity search's record) keeps of them: the
    value ``redacted``, the text as shown."""
    return [
        {**o.model_dump(mode="json"), "value": redacted(o.path, o.value), "given": shown(o)}
        for o in overrides
    ]


def shown(override: Override) -> str:
    """The override as the terminal and the records show it: its text, written without a secret
    (``parse_set``; ``--endpoint``'s with the URL's credentials redacted)."""
    return override.given


def describe(overrides: Sequence[Override]) -> str:
    """One line for the terminal: what the command line changed (a URL's credentials redacted)."""
    return "; ".join(dict.fromkeys(shown(o) for o in overrides))
