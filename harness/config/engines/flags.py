"""Flags the harness sets itself, and the engine arguments that would take them back.

The harness builds every server's command line: it binds the server to loopback on a port it
chose, names the model ``target``, and sets the dtype, the context, the seed and the speculative
configuration from the regime, where they are recorded and fingerprinted. An ``engine.extra_args``
entry naming one of those flags again would win (the engines' parsers keep the last value) and the
record would describe a server that did not run. Both engines' parsers are ``argparse`` parsers
that accept any unique ABBREVIATION of a long flag (``--ho`` is ``--host``), and single-dash
aliases with attached values (``-tp2``); vLLM's also accepts underscores for dashes and
``--flag.key value`` for one key of a JSON flag. So an argument is refused when, spelled as the
parser would read it, it is a managed flag, a prefix of one, or starts with a managed
single-dash alias.

Each adapter lists its managed flags with every spelling its pinned releases' parsers have
(tests/test_engine_contracts.py checks the lists against the real parsers).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from harness.config.engines import SERVED_MODEL_NAME
from harness.core.secrets import redact_args

# What to write instead, where both engines' flags mean the same thing.
OWN_SERVER = "the harness binds each server to 127.0.0.1 at a port it chose, or to a private Unix socket"
TARGET = "the target is target.path or target.package"
SERVED_NAME = f"its client asks for '{SERVED_MODEL_NAME}'"
API_KEY = "the harness's own requests must reach the server"
CONFIG_FILE = "a config file would set flags unseen; write them in engine.extra_args"
SPECULATION = "speculation is each arm's method, K, draft_model and options"


@dataclass(frozen=True)
class Managed:
    """One flag the harness owns: every spelling the engine's parser has for it, and what the user
    writes instead."""

    spellings: tuple[str, ...]
    instead: str


def parsed_name(arg: str) -> str | None:
    """The flag an argument names, as the engines' parsers read it (``--Speculative_config.method=x``
    -> ``--speculative-config``), or None for a value (anything not starting with a dash, a lone
    dash, a negative number)."""
    if not arg.startswith("-") or arg == "-" or arg[1:2].isdecimal() or arg[1:2] == ".":
        return None
    name = arg.split("=", 1)[0]
    if name.startswith("--"):
        return "--" + name[2:].split(".", 1)[0].replace("_", "-")
    return name


def claims(arg: str, spelling: str) -> bool:
    """Whether the parser would read ``arg`` as the option ``spelling``."""
    name = parsed_name(arg)
    if name is None or len(name) < 2 or (name == "--"):
        return False
    if spelling.startswith("--"):  # a long flag, or a unique abbreviation of one
        return name.startswith("--") and spelling.startswith(name)
    # a single-dash alias (-tp, -q): itself, an abbreviation of it, or with its value attached
    return not name.startswith("--") and (spelling.startswith(name) or arg.startswith(spelling))


def managed_flag_problems(
    args: list[str], managed: Mapping[str, Managed], reserved_prefixes: Mapping[str, str] = {}
) -> list[tuple[int, str]]:
    """(index in ``args``, what is wrong) for each argument that names a managed flag (or a flag
    under a reserved prefix, such as SGLang's ``--speculative-``: settings that belong to an arm)."""
    found = []
    for index, arg in enumerate(args):
        name = parsed_name(arg)
        if name is None:
            continue
        hit = next(
            (
                (spelling, item.instead)
                for item in managed.values()
                for spelling in item.spellings
                if claims(arg, spelling)
            ),
            None,
        )
        if hit is None and name.startswith("--") and len(name) > 2:
            hit = next(
                (
                    (prefix + "...", why)
                    for prefix, why in reserved_prefixes.items()
                    if name.startswith(prefix) or prefix.startswith(name)
                ),
                None,
            )
        if hit is not None:
            spelling, instead = hit
            written = arg.split("=", 1)[0]
            read_as = "" if written == spelling else f" (the engine reads it as {spelling})"
            shown = redact_args([arg])[0]  # --api-key=VALUE: the flag, never its value
            found.append((index, f"'{shown}'{read_as} is set by the harness: {instead}"))
    return found
