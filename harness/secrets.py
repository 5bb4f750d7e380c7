"""Secrets a regime or the environment hands the engine, kept out of everything the harness writes
and prints.

A value is secret when its name says so, or it is the credentials part of a URL
(``https://user:pass@host``). A name says so by its words (split at ``_`` and ``-``): an
environment variable with any of ``SECRET_WORDS`` among them (``HF_TOKEN``, ``AWS_SECRET_ACCESS_KEY``),
a flag whose last word is one (``--hf-token``, ``--api-key``, ``--ssl-keyfile-password``: a flag
names its value last, and ``--max-num-batched-tokens`` or ``--dbo-decode-token-threshold`` are
numbers, not secrets). The harness passes secrets
to the server it starts, and writes ``<redacted>`` in their place everywhere else: ``regime.json``,
``study.json``, ``launch.json``, ``environment.json``, the terminal, the report, and the engine's
own log (scrubbed when its server stops: vLLM prints its non-default arguments at start-up). The
fingerprints are computed over the redacted regime: rotating a token is not a change of
conditions, and a hash of a weak secret written beside the rest of the regime is a guessing oracle.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path

REDACTED = "<redacted>"
SECRET_WORDS = frozenset(
    {"token", "key", "apikey", "secret", "password", "passwd", "pass", "credential", "credentials", "auth"}
)
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/@\s\"']+)@")


def secret_name(name: str) -> bool:
    """An environment variable (any word) or a flag (its last word) whose value is a secret."""
    words = re.split(r"[-_.]+", name.lower().lstrip("-"))
    if name.startswith("-"):
        return words[-1] in SECRET_WORDS
    return any(word in SECRET_WORDS for word in words)


def redact_url(text: str) -> str:
    """``https://user:pass@host/x`` -> ``https://<redacted>@host/x`` (any scheme, anywhere in text)."""
    return _URL_CREDENTIALS.sub(lambda m: f"{m['scheme']}{REDACTED}@", text)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    return {name: REDACTED if secret_name(name) else redact_url(value) for name, value in env.items()}


def redact_args(args: Iterable[str]) -> list[str]:
    """An argument list with the value of every secret-named flag (``--hf-token X``,
    ``--api-key=X``) and every URL's credentials redacted."""
    out: list[str] = []
    secret_next = False
    for arg in args:
        if secret_next and not arg.startswith("-"):
            out.append(REDACTED)
            secret_next = False
            continue
        secret_next = False
        if arg.startswith("-"):
            flag, equals, value = arg.partition("=")
            if secret_name(flag):
                if equals:
                    out.append(f"{flag}={REDACTED}")
                    continue
                secret_next = True
        out.append(redact_url(arg))
    return out


def secret_values(env: Mapping[str, str], args: Iterable[str]) -> set[str]:
    """The values ``redact_env`` and ``redact_args`` hide (to scrub from text the engine wrote)."""
    args = list(args)
    hidden = {value for name, value in env.items() if secret_name(name)}
    for arg, shown in zip(args, redact_args(args), strict=True):
        if shown == REDACTED:
            hidden.add(arg)
        elif shown.endswith("=" + REDACTED) and "=" in arg:
            hidden.add(arg.partition("=")[2])
    for text in [*env.values(), *args]:
        hidden |= {match["userinfo"] for match in _URL_CREDENTIALS.finditer(text)}
    # a secret of 1-3 characters would scrub every such string of a log: it is redacted where the
    # harness writes it, not searched for in the engine's text
    return {value for value in hidden if len(value) >= 4 and value != REDACTED}


def scrub(text: str, values: Iterable[str]) -> str:
    for value in sorted(values, key=len, reverse=True):
        text = text.replace(value, REDACTED)
    return redact_url(text)


def scrub_file(path: Path, values: Iterable[str]) -> None:
    """Rewrite ``path`` (a log the engine wrote) with the secrets replaced, if it holds any."""
    values = list(values)
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return
    clean = scrub(text, values)
    if clean != text:
        path.write_text(clean)
