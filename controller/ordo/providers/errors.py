"""One classification of model-call exceptions for every SDK-backed provider.

`classify` turns an exception raised by an attempt (the `openai` or `anthropic` SDK, httpx2
and the SDKs' aiohttp transport underneath them, sdk_http.py's body bounds, or the parsing of
what came back) into a content-free `Failure` that `retry.call_with_retries` acts on:
retryable failures end, once the attempts run out, in `ordo.errors.ModelUnavailable`; the
others end at once in `ordo.errors.ModelError`.

| exception | failure |
|---|---|
| `APIStatusError` (either SDK) 429, 5xx | retryable, `HTTP <status> (<error type>)`, `Retry-After` honoured |
| `APIStatusError` other (4xx; a 3xx: redirects are not followed) | not retryable |
| `APITimeoutError`, `httpx2.TimeoutException` whose root cause is not a refused or broken connection | retryable, `the HTTP request timed out` |
| `APIConnectionError`, `httpx2.TransportError`, or a "timeout" caused by a connection that failed | retryable, `connection error (<root cause type>)` |
| `ResponseTooLarge`, `EncodedResponse` (sdk_http.py; also when an SDK wraps them as a connection error), any other SDK error, `ValueError` (bad JSON, bad UTF-8), `RecursionError` (a body nested too deep to parse), `TypeError`/`AttributeError`/`KeyError`/`IndexError` (a body of the wrong shape) | not retryable, `unreadable response (<type>)` |
| anything else | not classified: it propagates (a bug, not the server's doing) |

The root cause is the innermost aiohttp (or OS) exception of the `__cause__` chain: the SDKs'
aiohttp transport maps aiohttp's exceptions onto httpx2's, and the `openai` SDK's copy maps
any `ClientConnectionError` (a refused connection included) to `ConnectTimeout`.

Messages carry the status code, the provider's error type when it is a short identifier, and
exception type names: never a URL, a header, the request or the response body.
"""

from __future__ import annotations

import sys
from typing import Any

import aiohttp
import httpx
import httpx2

from ..api import ModelEndpoint
from .retry import Failure, parse_retry_after, safe_token, status_failure

SDKS = ("openai", "anthropic")
"""SDK packages whose exception types are recognised (only those already imported are
looked at, so classifying never imports an SDK)."""
_TIMEOUTS = (
    httpx2.TimeoutException,
    httpx.TimeoutException,
    aiohttp.ServerTimeoutError,
    TimeoutError,
)
_CONNECTION = (httpx2.TransportError, httpx.TransportError, aiohttp.ClientError, OSError)


class ResponseTooLarge(ValueError):
    """The body is longer than sdk_http.MAX_RESPONSE_BYTES (not retried: unreadable)."""


class EncodedResponse(ValueError):
    """The body came compressed although ordo asked for `identity` (not retried)."""


_REFUSED_BODY = (ResponseTooLarge, EncodedResponse)
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


def _loaded_sdks() -> list[Any]:
    return [module for name in SDKS if (module := sys.modules.get(name)) is not None]


def _error_type(exc: Any) -> str | None:
    for attribute in ("code", "error_code", "type"):
        token = safe_token(getattr(exc, attribute, None))
        if token is not None:
            return token
    return None


def _root_cause(exc: BaseException) -> BaseException:
    """The innermost aiohttp or OS exception under `exc` (or `exc` itself)."""
    root, seen = exc, 0
    while root.__cause__ is not None and seen < 8:
        if isinstance(root, aiohttp.ClientError):
            break  # aiohttp's own type names the failure best (not its OSError below)
        root, seen = root.__cause__, seen + 1
    return root


def _refused_body(exc: BaseException) -> BaseException | None:
    """sdk_http's refusal of a body, if that is what `exc` wraps (the anthropic SDK reports
    any exception of its HTTP client as a connection error)."""
    cause: BaseException | None = exc
    for _ in range(8):
        if cause is None or isinstance(cause, _REFUSED_BODY):
            return cause
        cause = cause.__cause__
    return None


def classify(exc: Exception) -> Failure | None:
    """An attempt's exception as a content-free Failure (None: let it propagate)."""
    refused = _refused_body(exc)
    if refused is not None:
        return Failure(False, f"unreadable response ({type(refused).__name__})")
    sdks = _loaded_sdks()
    for sdk in sdks:
        if isinstance(exc, sdk.APIStatusError):
            response = getattr(exc, "response", None)
            headers = dict(response.headers) if response is not None else None
            return status_failure(exc.status_code, _error_type(exc), parse_retry_after(headers))
    if isinstance(exc, _TIMEOUTS) or any(isinstance(exc, sdk.APITimeoutError) for sdk in sdks):
        root = _root_cause(exc)
        if isinstance(root, _CONNECTION) and not isinstance(root, _TIMEOUTS):
            return Failure(True, f"connection error ({type(root).__name__})")
        return Failure(True, "the HTTP request timed out")
    if isinstance(exc, _CONNECTION) or any(isinstance(exc, sdk.APIConnectionError) for sdk in sdks):
        return Failure(True, f"connection error ({type(_root_cause(exc)).__name__})")
    if isinstance(exc, UNREADABLE) or any(
        isinstance(exc, getattr(sdk, base))
        for sdk in sdks
        for base in ("OpenAIError", "AnthropicError")
        if hasattr(sdk, base)
    ):
        return Failure(False, f"unreadable response ({type(exc).__name__})")
    return None
