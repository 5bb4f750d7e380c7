"""Secrets a regime or the environment hands the engine, kept out of everything the harness writes
and prints.

A value is secret when its name says so, when it has the shape of a known credential, or when it is
the credentials part of a URL (``https://user:pass@host``). A name (an environment variable or a
flag, split into words at ``_``, ``-`` and ``.``) says so by its last word, the one that names what
the value is: ``HF_TOKEN``, ``OPENAI_API_KEY``, ``AWS_SECRET_ACCESS_KEY``, ``DB_PASSWORD``,
``--hf-token``, ``--ssl-keyfile-password``; or by a word that is a secret wherever it stands
(``SECRET``, ``PASSWORD``, ``CREDENTIALS``). A word elsewhere does not: ``FAKE_TOKEN_SLEEP``,
``--max-num-batched-tokens`` and ``HF_TOKEN_PATH`` name numbers and paths. A value of a credential's
shape (a Hugging Face, OpenAI, GitHub, GitLab, Slack or AWS key) is secret under any name.

The harness passes secrets to the server it starts, and writes ``<redacted>`` in their place
everywhere else: ``regime.json``, ``study.json``, ``launch.json``, ``environment.json``, the
terminal, the report, and the engine's own log (scrubbed when its server stops: vLLM prints its
non-default arguments at start-up, as Python's ``repr`` writes them, so a secret is scrubbed in
each quoting form a log writes it in), and every error the harness stores of a server it sends a
key or a URL's credentials to (an error page that echoes the ``Authorization`` header:
``sent_credentials``). The fingerprints are computed over the redacted regime:
rotating a token is not a change of conditions, and a hash of a weak secret written beside the rest
of the regime is a guessing oracle.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from urllib.parse import unquote

REDACTED = "<redacted>"
# a name's last word names its value
SECRET_WORDS = frozenset(
    {"token", "key", "apikey", "secret", "password", "passwd", "pass", "credential", "credentials", "auth"}
)
# a last word that names where a value is kept, not the value: a path is no secret
LOCATION_WORDS = frozenset({"file", "path", "dir", "sock", "socket", "url", "endpoint"})
# values too common to search a log for (a switch named like a secret: HF_HUB_DISABLE_IMPLICIT_TOKEN=true)
COMMON_VALUES = frozenset({"true", "false", "yes", "no", "auto", "none", "null", "0", "1"})
# a word that makes its value secret wherever it stands in the name (AWS_SECRET_ACCESS_KEY_ID)
SECRET_ANYWHERE = frozenset({"secret", "password", "passwd", "credential", "credentials"})
# the shapes of the credentials engines and hubs are given, secret under any name
_CREDENTIAL_SHAPES = re.compile(
    r"(?<![\w/.-])(?:hf_[A-Za-z0-9]{20,}"  # a whole token, never a part of a word or path; Hugging Face
    r"|sk-[A-Za-z0-9_-]{20,}"  # OpenAI, Anthropic
    r"|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{20,}"  # GitHub
    r"|glpat-[A-Za-z0-9_-]{20,}"  # GitLab
    r"|xox[abprs]-[A-Za-z0-9-]{10,}"  # Slack
    r"|(?:AKIA|ASIA)[0-9A-Z]{16})\b"  # AWS access key ids
)
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/@\s\"']+)@")


def secret_name(name: str) -> bool:
    """An environment variable or a flag whose value is a secret: by its last word, or by a word
    that is a secret anywhere, unless its last word says the value is where one is kept
    (``MY_PASSWORD_FILE``, ``GOOGLE_APPLICATION_CREDENTIALS_PATH``)."""
    words = [word for word in re.split(r"[-_.]+", name.lower().lstrip("-")) if word]
    if not words or words[-1] in LOCATION_WORDS:
        return False
    return words[-1] in SECRET_WORDS or any(word in SECRET_ANYWHERE for word in words)


def redact_url(text: str) -> str:
    """``https://user:pass@host/x`` -> ``https://<redacted>@host/x`` (any scheme, anywhere in text),
    and every value of a credential's shape -> ``<redacted>``."""
    text = _URL_CREDENTIALS.sub(lambda m: f"{m['scheme']}{REDACTED}@", text)
    return _CREDENTIAL_SHAPES.sub(REDACTED, text)


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
        hidden |= set(_CREDENTIAL_SHAPES.findall(text))
    # a secret of 1-3 characters would scrub every such string of a log: it is redacted where the
    # harness writes it, not searched for in the engine's text
    return {
        value
        for value in hidden
        if len(value) >= 4 and value != REDACTED and value.lower() not in COMMON_VALUES
    }


def sent_credentials(base_url: str, key: str | None) -> set[str]:
    """What the harness sends a server at ``base_url`` that an error page of it may echo back: the
    key (``api_key_env``'s, or a started server's own) as its ``Bearer`` header carries it, and the
    URL's ``user:pass`` as written, decoded, and in its ``Basic`` header's form (the base64 of it, as
    httpx and aiohttp send it). Scrubbed from every error of that server the harness stores
    (``scrub``): ``Bearer <redacted>`` still says what was echoed."""
    sent = {key} if key else set()
    for match in _URL_CREDENTIALS.finditer(base_url):
        plain = unquote(match["userinfo"])  # as a client decodes user:pa%40ss before it encodes it
        sent |= {match["userinfo"], plain, plain.partition(":")[2]}
        for encoding in ("utf-8", "latin-1"):
            try:
                sent.add(base64.b64encode(plain.encode(encoding)).decode())
            except UnicodeEncodeError:
                continue
    # as secret_values: a value of 1-3 characters would scrub every such string of an error
    return {value for value in sent if len(value) >= 4 and value.lower() not in COMMON_VALUES}


def _written_forms(value: str) -> set[str]:
    """``value`` as a log may write it: as is, inside Python's ``repr`` and JSON's quotes (a
    backslash doubled, a quote escaped), and those forms nested once (a list's ``repr`` inside a
    dict's)."""
    forms = {value}
    for _ in range(2):
        forms |= {written for form in forms for written in (repr(form)[1:-1], json.dumps(form)[1:-1])}
    return forms


def scrub(text: str, values: Iterable[str]) -> str:
    forms = {form for value in values for form in _written_forms(value)}
    for form in sorted(forms, key=len, reverse=True):
        text = text.replace(form, REDACTED)
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
