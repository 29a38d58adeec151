"""One authenticated connection to the Kubernetes API server, under `KubeClient`'s verbs:
the login headers (token or basic auth, like kopf), the aiohttp transport, requests sent
straight through it, retries of what is safe to repeat, one re-login on 401, and the count of
requests by verb. Errors carry the status code and the API's reason, never request bodies.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable
from typing import Any

import httpx
import kopf

from .auth import ssl_context
from .errors import ApiError, response_error, transport_error
from .transport import AiohttpTransport

__all__ = ["REQUEST_TIMEOUT", "RETRY_ATTEMPTS", "RETRY_STATUSES", "Session"]

RETRY_ATTEMPTS = 5
"""Attempts of a request that is safe to repeat (reads, idempotent writes)."""
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
# Transport errors raised before any byte of the request reached the server: repeating the
# request cannot apply it twice, whatever the verb.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)

REQUEST_TIMEOUT = httpx.Timeout(30.0)
"""Connect, read and pool timeout of every request (a watch sets its own read timeout)."""
_TIMEOUT_EXTENSION = REQUEST_TIMEOUT.as_dict()


class Session:
    """Requests to the API server, retried as `KubeClient` documents; its base class."""

    def __init__(
        self,
        info: kopf.ConnectionInfo,
        *,
        relogin: Callable[[], kopf.ConnectionInfo] | None = None,
        max_connections: int = 64,
        wrap_transport: Callable[[httpx.AsyncBaseTransport], httpx.AsyncBaseTransport]
        | None = None,
        backoff: float = 0.2,
    ) -> None:
        """`wrap_transport` wraps the real HTTP transport (tests inject faults with it);
        `backoff` is the first delay between attempts (doubling, at most 5 s)."""
        self._relogin = relogin
        self._backoff = backoff
        self._max_connections = max_connections
        self._wrap_transport = wrap_transport
        self.requests: dict[str, int] = {}
        """Requests by verb (get, list, patch, patch-status, create, replace, delete); a
        retried request counts once."""
        self.on_request: Callable[[str], None] | None = None
        """Called with the verb of every request (the operator counts them in a metric)."""
        self._client = self._build(info)

    def _build(self, info: kopf.ConnectionInfo) -> httpx.AsyncClient:
        """The client for watches; requests go to its transport directly (`_send`)."""
        self._keep: list[Any] = []
        headers = {"Accept": "application/json", "User-Agent": "ordo-operator"}
        if info.token:
            headers["Authorization"] = f"{info.scheme or 'Bearer'} {info.token}"
        elif info.username and info.password:
            pair = f"{info.username}:{info.password}".encode()
            headers["Authorization"] = "Basic " + base64.b64encode(pair).decode("ascii")
        transport: httpx.AsyncBaseTransport = AiohttpTransport(
            ssl_context(info, self._keep), limit=self._max_connections
        )
        if self._wrap_transport is not None:
            transport = self._wrap_transport(transport)
        self._transport = transport
        self._base = str(info.server or "").rstrip("/")
        self._headers = headers
        return httpx.AsyncClient(
            base_url=info.server,
            headers=headers,
            transport=transport,
            timeout=REQUEST_TIMEOUT,
        )

    async def close(self) -> None:
        await self._client.aclose()

    async def _exchange(
        self,
        method: str,
        url: str,
        *,
        params: dict[str, str] | None = None,
        json: Any = None,
        content: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        """One request, read to the end, straight through the transport: what
        `httpx.AsyncClient.request` adds (URL merging, auth flow, redirects, a cookie jar,
        event hooks) is a third of a request's CPU, and the API client needs none of it."""
        request = httpx.Request(
            method,
            self._base + url,
            params=params,
            json=json,
            content=content,
            headers={**self._headers, **headers} if headers else self._headers,
            extensions={"timeout": _TIMEOUT_EXTENSION},
        )
        response = await self._transport.handle_async_request(request)
        try:
            await response.aread()
        finally:
            await response.aclose()
        return response

    async def _send(
        self, method: str, url: str, *, idempotent: bool, **kwargs: Any
    ) -> httpx.Response:
        """Send, retrying what is safe to retry (see the class docstring)."""
        delay = self._backoff
        for attempt in range(1, RETRY_ATTEMPTS + 1):
            last = attempt == RETRY_ATTEMPTS
            try:
                response = await self._exchange(method, url, **kwargs)
            except httpx.HTTPError as exc:
                retry = isinstance(exc, _NOT_SENT) or (
                    idempotent and isinstance(exc, httpx.TransportError)
                )
                if last or not retry:
                    raise transport_error(exc) from None
            else:
                status = response.status_code
                if last or not (status == 429 or (idempotent and status in RETRY_STATUSES)):
                    return response
                retry_after = response.headers.get("Retry-After", "")
                if retry_after.isdigit():
                    delay = min(float(retry_after), 10.0)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
        raise AssertionError("unreachable")

    async def _request(
        self, verb: str, method: str, url: str, *, idempotent: bool, **kwargs: Any
    ) -> Any:
        self.requests[verb] = self.requests.get(verb, 0) + 1
        if self.on_request is not None:
            self.on_request(verb)
        response = await self._send(method, url, idempotent=idempotent, **kwargs)
        if response.status_code == 401 and self._relogin is not None:
            await self._client.aclose()
            self._client = self._build(self._relogin())
            response = await self._send(method, url, idempotent=idempotent, **kwargs)
        if response.status_code >= 400:
            raise response_error(response)
        if not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            raise ApiError(response.status_code, "InvalidResponse", "non-JSON body") from None
