"""One classification of model-call exceptions for every SDK-backed provider.

`classify` turns an exception raised by an attempt (ordo's aiohttp transport,
providers/transport.py, or the parsing of what came back) into a content-free `Failure` that
`retry.call_with_retries` acts on: retryable failures end, once the attempts run out, in
`ordo.errors.ModelUnavailable`; the others end at once in `ordo.errors.ModelError`.

| exception | failure |
|---|---|
| `HttpStatusError` 429, 5xx | retryable, `HTTP <status> (<error type>)`, `Retry-After` honoured |
| `HttpStatusError` other (4xx, a 3xx: redirects are not followed) | not retryable |
| `aiohttp.ServerTimeoutError`, `TimeoutError` | retryable, `the HTTP request timed out` (`retry.py` catches a `TimeoutError` itself) |
| `aiohttp.ClientConnectionError`, `aiohttp.ClientPayloadError` (body cut short), `OSError` | retryable, `connection error (<type>)` |
| `ResponseTooLarge`, `ValueError` (bad JSON, bad UTF-8), `RecursionError` (a body nested too deep to parse), `TypeError`/`AttributeError`/`KeyError`/`IndexError` (a body of the wrong shape) | not retryable, `unreadable response (<type>)` |
| any other `aiohttp.ClientError` (an invalid URL, ...) | not retryable, `request failed (<type>)` |
| anything else | not classified: it propagates (a bug, not the server's doing) |

Messages carry the status code, the provider's error type when it is a short identifier, and
exception type names: never a URL, a header, the request or the response body.
"""

from __future__ import annotations

import aiohttp
import httpx

from ..api import ModelEndpoint
from .retry import Failure, parse_retry_after, safe_token, status_failure
from .transport import HttpStatusError

UNREADABLE = (ValueError, RecursionError, TypeError, AttributeError, KeyError, IndexError)
"""Exceptions that mean the answer could not be read as the protocol says."""


DEFAULT_HOSTS = {
    "openai": "api.openai.com",
    "anthropic": "api.anthropic.com",
    "ollama": "localhost:11434",
}
"""The host each provider calls when `spec.baseUrl` is unset (as the adapters default it)."""


def endpoint_host(endpoint: ModelEndpoint) -> str | None:
    """`host[:port]` of the URL the endpoint calls: no scheme, user, path or query (a URL may
    carry a key in any of those)."""
    url = endpoint.spec.base_url
    if not url:
        return DEFAULT_HOSTS.get(endpoint.spec.provider)
    try:
        parsed = httpx.URL(url)
        host = parsed.host
        port = parsed.port
    except (httpx.InvalidURL, ValueError):
        return None
    if not host:
        return None
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    return f"{host}:{port}" if port else host


def endpoint_label(endpoint: ModelEndpoint) -> str:
    """How messages name an endpoint: the object and the host it calls, never the whole URL
    (which may carry a key)."""
    meta = endpoint.metadata
    name = f"{meta.namespace}/{meta.name}" if meta.namespace else str(meta.name)
    host = endpoint_host(endpoint) if endpoint.spec.provider != "mock" else None
    where = f", host {host}" if host else ""
    return f"ModelEndpoint {name} ({endpoint.spec.provider}{where})"


def classify(exc: Exception) -> Failure | None:
    """An attempt's exception as a content-free Failure (None: let it propagate)."""
    if isinstance(exc, HttpStatusError):
        return status_failure(
            exc.status, safe_token(exc.error_type), parse_retry_after(exc.headers)
        )
    if isinstance(exc, aiohttp.ServerTimeoutError | TimeoutError):
        return Failure(True, "the HTTP request timed out")
    if isinstance(exc, aiohttp.ClientConnectionError | aiohttp.ClientPayloadError | OSError):
        return Failure(True, f"connection error ({type(exc).__name__})")
    if isinstance(exc, UNREADABLE):
        return Failure(False, f"unreadable response ({type(exc).__name__})")
    if isinstance(exc, aiohttp.ClientError):
        return Failure(False, f"request failed ({type(exc).__name__})")
    return None
