"""The HTTP the adapters share: scraping a metrics endpoint, resetting the prefix cache, reading
JSON routes. Each adapter names its own paths."""

from __future__ import annotations

import json
import math
import ssl
from collections.abc import Callable
from functools import cache
from typing import Any

import httpx

from harness.core.errors import EngineError
from harness.core.formats import inert, inert_tree
from harness.core.probes.acceptance import SpecCounters, parse_prometheus, served_samples
from harness.core.secrets import scrub, sent_credentials

# Every request the harness sends to a server it started. trust_env=False: the server is on this
# machine, and a proxy from the environment (HTTP_PROXY on a cluster node, without NO_PROXY for
# 127.0.0.1) would carry the harness's requests elsewhere, or fail them.
MAX_RESPONSE_BYTES = 16 * 2**20  # a metrics page or a JSON route; more is not the engine's answer
# A server on a Unix socket (``EngineAdapter.unix_socket``) is addressed as ``unix:/path/to.sock``:
# requests go to http://localhost through that socket.
UNIX = "unix:"


# The per-start API key of each keyed server the harness runs (``harness.run.server``), by base URL:
# every request the harness sends it carries the key.
_KEYS: dict[str, str] = {}


# The model each server serves (``register_served_model``), by base URL: its /metrics counters are
# read for that model's label only, and the other models its metrics count are kept to be named.
_SERVED: dict[str, str] = {}
_OTHERS: dict[str, dict[str, bool]] = {}  # base URL -> another model its /metrics count -> said yet


def register_served_model(base_url: str, model: str) -> None:
    """Read ``base_url``'s /metrics for ``model``'s samples only (``acceptance.served_samples``)."""
    _SERVED[base_url] = model


def other_models(base_url: str, unsaid: bool = False) -> list[str]:
    """The other models whose samples ``base_url``'s /metrics carried (left out of every count);
    ``unsaid``: only those not asked for before, so each is named once."""
    seen = _OTHERS.get(base_url, {})
    found = [model for model, said in seen.items() if not (unsaid and said)]
    for model in found:
        seen[model] = True
    return sorted(found)


def _served_metrics(base_url: str, text: str) -> str:
    """The metrics ``text`` of ``base_url`` with only its served model's samples (all of them where
    no model was registered for it)."""
    model = _SERVED.get(base_url)
    if model is None:
        return text
    kept, others = served_samples(text, model)
    for other in others:
        _OTHERS.setdefault(base_url, {}).setdefault(other, False)
    return kept


def register_key(base_url: str, key: str | None) -> None:
    """Send ``key`` with every request to ``base_url`` (None: no more)."""
    if key is None:
        _KEYS.pop(base_url, None)
    else:
        _KEYS[base_url] = key


def auth_headers(base_url: str) -> dict[str, str]:
    key = _KEYS.get(base_url)
    return {"Authorization": f"Bearer {key}"} if key else {}


def sent_secrets(base_url: str) -> frozenset[str]:
    """What every request to ``base_url`` carries that a server's error may echo (its key, the
    URL's credentials, their headers: ``secrets.sent_credentials``), to scrub from what is stored."""
    return frozenset(sent_credentials(base_url, _KEYS.get(base_url)))


def error_text(base_url: str, text: str) -> str:
    """An error about the server at ``base_url`` as it may be stored or printed: what it was sent
    scrubbed (``sent_secrets``), control characters inert."""
    return inert(scrub(text, sent_secrets(base_url)))


def unix_socket(base_url: str) -> str | None:
    """The socket path of a ``unix:`` base URL, or None for a TCP one."""
    return base_url[len(UNIX) :] if base_url.startswith(UNIX) else None


def http_base(base_url: str) -> str:
    """The URL requests are written against: ``http://localhost`` through a socket, else itself."""
    return "http://localhost" if unix_socket(base_url) else base_url


@cache
def _verified_tls() -> ssl.SSLContext:
    """httpx's default certificate check (its CA bundle, the environment ignored), made once: a
    client makes its own otherwise, ~20 ms each, and the harness opens one for every scrape (a
    dozen a window)."""
    return httpx.create_ssl_context(trust_env=False)


def client(timeout: float, base_url: str = "") -> httpx.Client:
    """A client for the server at ``base_url`` (through its socket when it has one)."""
    uds = unix_socket(base_url)
    transport = httpx.HTTPTransport(uds=uds, verify=_verified_tls()) if uds else None
    return httpx.Client(
        timeout=timeout,
        trust_env=False,
        transport=transport,
        headers=auth_headers(base_url),
        verify=_verified_tls(),
    )


def async_client(timeout: httpx.Timeout, base_url: str) -> httpx.AsyncClient:
    uds = unix_socket(base_url)
    transport = httpx.AsyncHTTPTransport(uds=uds, verify=_verified_tls()) if uds else None
    return httpx.AsyncClient(
        base_url=http_base(base_url),
        timeout=timeout,
        trust_env=False,
        verify=_verified_tls(),
        transport=transport,
        headers=auth_headers(base_url),
    )


def _get(base_url: str, path: str, timeout: float) -> tuple[int, bytes]:
    """Status and body (to ``MAX_RESPONSE_BYTES``) of a GET."""
    with client(timeout, base_url) as http, http.stream("GET", http_base(base_url) + path) as response:
        body = bytearray()
        for part in response.iter_bytes():
            body += part
            if len(body) > MAX_RESPONSE_BYTES:
                raise httpx.DecodingError(f"{path}: a response over {MAX_RESPONSE_BYTES // 2**20} MiB")
        return response.status_code, bytes(body)


def scrape_spec_counters(
    base_url: str, metrics_path: str, parse: Callable[[str], SpecCounters]
) -> SpecCounters:
    """The engine's cumulative draft counters from its metrics endpoint, right now: the served
    model's (``register_served_model``)."""
    try:
        status, body = _get(base_url, metrics_path, 10.0)
    except httpx.HTTPError as exc:
        raise EngineError(error_text(base_url, f"could not read {metrics_path}: {exc}")) from None
    if status != 200:
        raise EngineError(f"could not read {metrics_path}: HTTP {status}")
    return parse(_served_metrics(base_url, body.decode(errors="replace")))


def get_metrics(base_url: str, metrics_path: str) -> str | None:
    """The metrics text with only the served model's samples (``register_served_model``; every
    reader of a count takes it from here); None when it cannot be read."""
    text = get_text(base_url, metrics_path)
    return None if text is None else _served_metrics(base_url, text)


def read_total(base_url: str, metrics_path: str, name: str) -> float | None:
    """A counter's value summed over its label sets, the served model's (``register_served_model``),
    right now; None when it cannot be read or the server has no such counter."""
    text = get_metrics(base_url, metrics_path)
    if text is None:
        return None
    samples = parse_prometheus(text)
    values = [s.value for s in samples if s.name == name and math.isfinite(s.value)]
    return sum(values) if values else None


def post_prefix_cache_reset(base_url: str, path: str) -> bool | None:
    """POST the engine's prefix-cache reset so a window does not reuse the previous one's prompts:
    True emptied, False refused (asked again), None when the server has no such route (404 or 405:
    an endpoint without vLLM's dev mode; asking again would not help)."""
    try:
        with client(30.0, base_url) as http:
            response = http.post(http_base(base_url) + path)
    except httpx.HTTPError:
        return False
    if response.status_code in (404, 405):
        return None
    if response.status_code != 200:
        return False
    try:  # vLLM answers JSON, SGLang plain text ("Cache flushed.")
        answer = response.json()
    except ValueError:
        return True
    return not (isinstance(answer, dict) and answer.get("success") is False)


def get_text(base_url: str, path: str) -> str | None:
    """The route's body as text; None when it cannot be read."""
    try:
        status, body = _get(base_url, path, 10.0)
    except httpx.HTTPError:
        return None
    return body.decode(errors="replace") if status == 200 else None


def get_json(base_url: str, path: str) -> Any:
    """The route's decoded JSON, every string in it inert (``/version``, ``/v1/models``,
    ``/server_info``: what a server reports of itself is stored with the run and printed); None
    when it cannot be read (an engine without the route: nothing to check against)."""
    try:
        status, body = _get(base_url, path, 10.0)
        return inert_tree(json.loads(body)) if status == 200 else None
    except (httpx.HTTPError, ValueError, RecursionError):
        return None
