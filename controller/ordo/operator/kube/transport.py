"""An httpx transport that sends the Kubernetes API client's requests through aiohttp.

Why not httpx's own transport: a profile of the operator (issue 14) put ~22 of its ~50 ms
CPU per Task in httpcore + anyio TLS (two TLS writes per request, O(pool) expiry polls per
request, h11); the same requests over one `aiohttp.ClientSession` cost about half.

Why not the `httpx-aiohttp` package (what the openai/anthropic SDKs vendor): its error
mapping turns every `aiohttp.ClientConnectionError` — a server disconnect after the request
was sent included — into `httpx.ConnectTimeout`, which `KubeClient` (rightly) treats as
"never sent" and retries even for a conditional create or patch: that write could then be
applied twice. Here only failures that provably happened before a byte of the request left
(`ClientConnectorError`: refused, DNS, TLS handshake; `ConnectionTimeoutError`: no
connection in time) become `ConnectError`/`ConnectTimeout`; everything later is a
`ReadError`/`ReadTimeout`/`RemoteProtocolError` (the write may have been applied): the
mapping in ordo/aiohttp_errors.py, shared with the model SDKs' transport.

httpx still builds the requests and parses nothing: it hands over method, URL, headers and
body; aiohttp answers with status, raw headers and a byte stream (not decompressed; httpx
decodes the Content-Encoding itself). Timeouts come from `request.extensions["timeout"]`
(connect, read, pool), so a watch's long read timeout applies per chunk read.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator

import aiohttp
import httpx

from ...aiohttp_errors import mapped_errors


class _ResponseStream(httpx.AsyncByteStream):
    def __init__(self, response: aiohttp.ClientResponse, request: httpx.Request) -> None:
        self._response = response
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with mapped_errors(self._request, httpx):
            async for chunk in self._response.content.iter_any():
                yield chunk

    async def aclose(self) -> None:
        # Back to the pool if the body was read to the end, else the connection is closed.
        self._response.release()


class AiohttpTransport(httpx.AsyncBaseTransport):
    """Sends httpx requests over lazily created `aiohttp.ClientSession`s (created on first
    use, so inside the running loop): requests over one with at most `limit` connections,
    watches (`?watch=true`) over another without a limit, so that the long-lived watches
    (one per kind and namespace) never hold the request slots. `verify` is what
    `auth.ssl_context` returns (a context, or False)."""

    def __init__(self, verify: ssl.SSLContext | bool, *, limit: int) -> None:
        self._verify = verify
        self._limit = limit
        self._sessions: dict[bool, aiohttp.ClientSession] = {}

    def _session(self, watch: bool) -> aiohttp.ClientSession:
        session = self._sessions.get(watch)
        if session is None:
            connector = aiohttp.TCPConnector(ssl=self._verify, limit=0 if watch else self._limit)
            session = aiohttp.ClientSession(
                connector=connector,
                auto_decompress=False,
                timeout=aiohttp.ClientTimeout(total=None),
                skip_auto_headers=("Accept-Encoding", "User-Agent", "Content-Type"),
            )
            # aiohttp repeats a GET/PUT/DELETE once, silently, after a disconnect or OS
            # error; a conditional PUT could then be applied twice. KubeClient decides every
            # retry (no public switch: aiohttp's own test client sets the same attribute).
            session._retry_connection = False
            self._sessions[watch] = session
        return session

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        timeouts = request.extensions.get("timeout", {})
        connect = timeouts.get("connect")
        pool = timeouts.get("pool")
        timeout = aiohttp.ClientTimeout(
            total=None,
            # aiohttp's `connect` covers waiting for a pool slot and connecting.
            connect=None if pool is None or connect is None else pool + connect,
            sock_connect=connect,
            sock_read=timeouts.get("read"),
        )
        body = await request.aread()
        headers = [(k, v) for k, v in request.headers.multi_items() if k != "transfer-encoding"]
        with mapped_errors(request, httpx):
            watch = request.url.params.get("watch") == "true"
            response = await self._session(watch).request(
                request.method,
                str(request.url),
                headers=headers,
                data=body or None,
                allow_redirects=False,
                timeout=timeout,
            )
        return httpx.Response(
            response.status,
            headers=response.raw_headers,
            stream=_ResponseStream(response, request),
            request=request,
            extensions={
                "http_version": b"HTTP/1.1",
                "reason_phrase": (response.reason or "").encode("latin-1", "replace"),
            },
        )

    async def aclose(self) -> None:
        sessions = list(self._sessions.values())
        self._sessions.clear()
        for session in sessions:
            await session.close()
