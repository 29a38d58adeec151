"""The httpx2 transport under the `openai` and `anthropic` SDKs: their requests over one
`aiohttp.ClientSession`, the body read in full and bounded here. Why this and not the SDKs'
own aiohttp transport (`DefaultAioHttpClient`): docs/decisions.md ("Model calls through the
SDKs").

The SDKs take an `httpx2.AsyncClient` as `http_client`; a client with a custom
`AsyncBaseTransport` is a documented httpx configuration, so the SDKs still build every request
(URL, headers, auth, Azure routing, body) and still raise their own error types: this
transport only moves bytes.

- **Bounded body, read here.** The whole answer (error bodies too: the SDKs read those in
  full) is read before `handle_async_request` returns: past `limit` bytes it raises
  `ResponseTooLarge` (on `Content-Length` before a byte is read, else while reading); a
  `Content-Encoding` other than identity is `EncodedResponse` (ordo asks for `identity`; a
  compressed body could inflate past any cap). The response goes back to httpx2 already read,
  so no byte-stream wrappers run per chunk.
- **Errors keep their meaning for the SDKs.** aiohttp's exceptions become httpx2's
  (`ConnectError`/`ConnectTimeout` before the request left, `ReadTimeout`, `ReadError`,
  `RemoteProtocolError` after), which the SDKs turn into `APIConnectionError` and
  `APITimeoutError`; the aiohttp exception stays the `__cause__` (errors.py names it).
- **No cookies, no redirects.** The session's jar is `DummyCookieJar`; aiohttp is told not to
  follow redirects (the SDKs' httpx2 client is made with `follow_redirects=False` too).
- **Timeouts** come from the request (`extensions["timeout"]`, set by the SDK from its
  `timeout`): connect, per-read and pool, as httpx2 means them.
- **Proxies** from `HTTP_PROXY`/`HTTPS_PROXY`/`NO_PROXY` (the standard library's
  `getproxies`/`proxy_bypass`), read when the transport is made; credentials in the proxy URL
  are sent to the proxy only. A custom transport gets none from httpx2, and aiohttp's own
  `trust_env` would look them up in a thread per request and add `~/.netrc` credentials to
  requests.
"""

from __future__ import annotations

import ssl
import urllib.parse
import urllib.request
from collections.abc import Callable

import aiohttp
import httpx2

from ..aiohttp_errors import mapped_errors
from .errors import EncodedResponse, ResponseTooLarge


async def _read_bounded(response: aiohttp.ClientResponse, limit: int) -> bytes:
    """The whole body, or ResponseTooLarge past `limit` bytes (counted on the wire)."""
    encoding = response.headers.get("Content-Encoding", "").strip().lower()
    if encoding not in ("", "identity"):
        raise EncodedResponse(f"the response is encoded ({encoding[:32]!r})")
    length = response.content_length
    if length is not None and length > limit:
        raise ResponseTooLarge(f"the response is longer than {limit} bytes")
    if length is not None:  # the usual case: one read of a known length
        return await response.content.read()
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_any():
        size += len(chunk)
        if size > limit:
            raise ResponseTooLarge(f"the response is longer than {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


_MAX_PROXY_HOSTS = 1024
"""Hosts whose NO_PROXY verdict is remembered (one per endpoint host in practice)."""


class _EnvProxies:
    """The environment's proxies, read once; `for_url` answers per request without I/O."""

    def __init__(self) -> None:
        self._by_scheme: dict[str, tuple[str, dict[str, str] | None]] = {}
        for scheme, value in urllib.request.getproxies().items():
            if scheme in ("http", "https") and value:
                url = urllib.parse.urlsplit(value if "://" in value else f"http://{value}")
                headers = None
                if url.username:
                    user = urllib.parse.unquote(url.username)
                    password = urllib.parse.unquote(url.password or "")
                    headers = {"Proxy-Authorization": aiohttp.encode_basic_auth(user, password)}
                netloc = url.netloc.rpartition("@")[2]
                self._by_scheme[scheme] = (
                    urllib.parse.urlunsplit(url._replace(netloc=netloc)),
                    headers,
                )
        self._bypass: dict[str, bool] = {}

    def for_url(self, url: httpx2.URL) -> tuple[str, dict[str, str] | None] | None:
        if not self._by_scheme:
            return None
        proxy = self._by_scheme.get(url.scheme)
        if proxy is None:
            return None
        host = url.host
        bypass = self._bypass.get(host)
        if bypass is None:
            bypass = bool(urllib.request.proxy_bypass(host))
            if len(self._bypass) < _MAX_PROXY_HOSTS:
                self._bypass[host] = bypass
        return None if bypass else proxy


class BoundedAiohttpTransport(httpx2.AsyncBaseTransport):
    """httpx2 requests over one lazily made, cookie-free `aiohttp.ClientSession` (made at the
    first request, inside the running loop) of at most `limit` connections; answers read in
    full, at most `max_body()` bytes (called per request)."""

    def __init__(
        self, ssl_context: ssl.SSLContext, *, limit: int, max_body: Callable[[], int]
    ) -> None:
        self._ssl = ssl_context
        self._limit = limit
        self._max_body = max_body
        self._proxies = _EnvProxies()
        self._session: aiohttp.ClientSession | None = None

    def _open_session(self) -> aiohttp.ClientSession:
        session = self._session
        if session is None or session.closed:
            connector = aiohttp.TCPConnector(limit=self._limit, ssl=self._ssl)
            session = self._session = aiohttp.ClientSession(
                connector=connector,
                cookie_jar=aiohttp.DummyCookieJar(),
                auto_decompress=False,
            )
        return session

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        timeout = request.extensions.get("timeout") or {}
        try:
            data: bytes | None = request.content or None
        except httpx2.RequestNotRead:
            data = await request.aread() or None
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw]
        proxy = self._proxies.for_url(request.url)
        if proxy is not None and proxy[1] and request.url.scheme == "http":
            # A plain-HTTP request goes to the proxy as is (no CONNECT, where aiohttp sends
            # `proxy_headers`): the proxy's credentials ride on it.
            headers.extend(proxy[1].items())
        with mapped_errors(request, httpx2):
            async with self._open_session().request(
                request.method,
                str(request.url),
                headers=headers,
                data=data,
                allow_redirects=False,
                compress=False,
                timeout=aiohttp.ClientTimeout(
                    total=None,
                    sock_connect=timeout.get("connect"),
                    sock_read=timeout.get("read"),
                    connect=timeout.get("pool"),
                ),
                proxy=proxy[0] if proxy else None,
                proxy_headers=proxy[1] if proxy else None,
            ) as response:
                body = await _read_bounded(response, self._max_body())
                status, raw_headers = response.status, response.raw_headers
        return httpx2.Response(
            status,
            headers=raw_headers,
            stream=httpx2.ByteStream(body),
            request=request,
            extensions={"http_version": b"HTTP/1.1"},
        )

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()
