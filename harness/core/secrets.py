"""Secrets a regime or the environment hands the engine, kept out of everything the harness writes
and prints.

A value is secret when its name says so, when it has the shape of a known credential, or when it is
the credentials part of a URL (``https://user:pass@host``) or the value of a URL's query parameter
whose name is secret (``?api_key=``, ``&token=``, ``&sig=``). A name (an environment variable, a flag
or a query parameter, split into words at ``_``, ``-`` and ``.``) says so by a secret word in any
position: PASS, PASSWD, PASSWORD, PASSPHRASE, PWD, TOKEN(S), KEY(S), APIKEY, PEM, PAT, JWT, COOKIE,
AUTH, CREDENTIAL(S), SECRET, SIGNATURE (``SIGNING_PASSPHRASE``, ``API_TOKENS``, ``PRIVATE_KEY_PEM``,
``MYSQL_PWD``, ``AUTH_HEADER``), or glued to the end of a word (``PGPASSWORD``, ``APITOKEN``).
A name stays public when it names where a secret is kept (last word ``PATH``, ``FILE``, ``DIR``...:
``HF_TOKEN_PATH``), an on/off switch (first word ``NO``, ``ENABLE``, ``USE``, ``ALLOW``...), a kind
(last word ``METHOD``, ``MODE``, ``TYPE``...), or a number: a word that counts or measures (``MAX``,
``NUM``, ``PER``, ``SLEEP``, ``THRESHOLD``, ``ID``...: ``--max-num-batched-tokens``,
``FAKE_TOKEN_SLEEP``) or, for TOKEN(S), one that says which of the model's tokens (``PROMPT``,
``OUTPUT``, ``DRAFT``...: ``--speculative-num-draft-tokens``). The words that cannot name a number
(SECRET, PASSWORD, PASSWD, PASSPHRASE, CREDENTIAL(S)) keep a name secret past a number's word
(``AWS_SECRET_ACCESS_KEY_ID``). No flag of vLLM's or SGLang's servers, and no variable the regimes
set, changed sides with this rule but real credentials (``tests/test_secrets.py``). A value of a
credential's shape (a Hugging Face, OpenAI, GitHub, GitLab, Slack or AWS key) is secret under any
name.

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
# a word that makes its value secret in any position of a name (a number's word aside)
SECRET_WORDS = frozenset(
    {"pass", "passwd", "password", "passphrase", "pwd", "token", "tokens", "key", "keys", "apikey", "pem"}
    | {"pat", "jwt", "cookie", "cookies", "auth", "credential", "credentials", "secret", "secrets"}
    | {"signature"}
)
# glued to the end of a word, as environment variables write them: PGPASSWORD, APITOKEN
SECRET_ENDINGS = ("password", "passwd", "passphrase", "secret", "apikey", "token")
# the words that never name a number, a switch or a kind: DB_PASSWORD_ID is still a password
STRONG_WORDS = frozenset(
    {"password", "passwd", "passphrase", "secret", "secrets", "credential", "credentials"}
)
# a last word that names where a value is kept, not the value: a path is no secret
LOCATION_WORDS = frozenset(
    {"file", "files", "path", "paths", "dir", "dirs", "sock", "socket", "url", "urls", "endpoint"}
    | {"home", "root"}
)
# a last word that names a kind of thing (--auth-root-authentication-method), not its value
KIND_WORDS = frozenset({"method", "mode", "type", "kind", "policy", "strategy", "only", "pattern", "aligner"})
# a first word that makes the name an on/off switch (--allow-credentials, --no-...)
SWITCH_WORDS = frozenset({"no", "enable", "disable", "use", "allow", "skip", "return", "visualize", "ignore"})
SWITCH_WORDS |= {"dump", "sort"}
# a word that counts or measures: MAX_TOKENS, CHARS_PER_TOKEN, FAKE_TOKEN_SLEEP, --mask-token-id
NUMBER_WORDS = frozenset(
    {"max", "min", "num", "count", "size", "len", "length", "limit", "threshold", "ratio", "budget", "per"}
    | {"rate", "sleep", "timeout", "buckets", "margin", "s", "ms", "id", "ids", "capacity", "usage"}
    | {"watermark", "parallelism"}
)
# a word that says which of the model's tokens TOKEN(S) counts: --spec-tokens, ADDED_TOKENS
MODEL_TOKEN_WORDS = frozenset(
    {"prompt", "output", "input", "generation", "draft", "spec", "speculative", "new", "added", "extra"}
    | {"special", "bos", "eos", "pad", "mask", "stop", "cycle", "batched", "queued", "scheduled", "chunk"}
    | {"total"}
)
# a query parameter that carries a signature though no name rule reads it so (Azure's SAS: &sig=)
SECRET_QUERY_NAMES = frozenset({"sig"})
# values too common to search a log for (a switch named like a secret: HF_HUB_DISABLE_IMPLICIT_TOKEN=true)
COMMON_VALUES = frozenset({"true", "false", "yes", "no", "auto", "none", "null", "0", "1"})
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
# a URL's query parameter (after ?, & or HTML's &amp;), its value not yet redacted
_QUERY_PARAMETER = re.compile(r"(?<=[?&;])(?P<name>[^=&#?;\s\"'<>]+)=(?!<redacted>)(?P<value>[^&#;\s\"'<>]+)")


def secret_name(name: str) -> bool:
    """An environment variable, a flag or a query parameter whose value is a secret: a secret word
    in any position (or glued to a word's end), unless the name says the value is a place, a
    switch, a kind or a number (the module's docstring)."""
    words = [word for word in re.split(r"[-_.]+", name.lower().lstrip("-")) if word]
    if words == ["pwd"]:  # the shell's working directory, a path
        return False
    found = {word for word in words if word in SECRET_WORDS or word.endswith(SECRET_ENDINGS)}
    if not found or words[-1] in LOCATION_WORDS or words[-1] in KIND_WORDS or words[0] in SWITCH_WORDS:
        return False
    if found & STRONG_WORDS or any(word.endswith(SECRET_ENDINGS[:4]) for word in found):
        return True
    if any(word in NUMBER_WORDS for word in words):
        return False
    return not (found <= {"token", "tokens"} and any(word in MODEL_TOKEN_WORDS for word in words))


def redact_url(text: str) -> str:
    """``https://user:pass@host/x?api_key=K`` -> ``https://<redacted>@host/x?api_key=<redacted>`` (any
    scheme, anywhere in text), and every value of a credential's shape -> ``<redacted>``."""
    text = _URL_CREDENTIALS.sub(lambda m: f"{m['scheme']}{REDACTED}@", text)
    text = _QUERY_PARAMETER.sub(lambda m: f"{m['name']}={REDACTED}" if _secret_query(m) else m[0], text)
    return _CREDENTIAL_SHAPES.sub(REDACTED, text)


def _secret_query(match: re.Match[str]) -> bool:
    name = unquote(match["name"])  # api%5Fkey is api_key to the server
    return name.lower() in SECRET_QUERY_NAMES or secret_name(name)


def _query_secrets(text: str) -> set[str]:
    """The values of ``text``'s secret query parameters, as written and as a server decodes them."""
    found = {match["value"] for match in _QUERY_PARAMETER.finditer(text) if _secret_query(match)}
    return found | {unquote(value) for value in found}


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
        hidden |= {match["userinfo"] for match in _URL_CREDENTIALS.finditer(text)} | _query_secrets(text)
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
    httpx and aiohttp send it), and its secret query parameters' values. Scrubbed from every error of
    that server the harness stores (``scrub``): ``Bearer <redacted>`` still says what was echoed."""
    sent = ({key} if key else set()) | _query_secrets(base_url)  # ?api_key=K: in every request's URL
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
