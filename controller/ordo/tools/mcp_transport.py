"""The httpx2 transport under the MCP client: the SDK's requests over the tools' aiohttp session
(`session.py`), sent to the addresses the SSRF guard checked, every response body bounded.

The `mcp` SDK's streamable-HTTP client takes an `httpx2.AsyncClient`; a client with a custom
transport is a documented httpx configuration, so the SDK still builds every request and
parses every answer, and this module only moves bytes. What it adds:

- **The checked address (no DNS rebinding).** The server's host name is resolved once and every
  address checked (`netguard.check`) before the session opens; each request then goes to those
  addresses (the next one only when connecting failed, so nothing was sent), with the `Host`
  header and the TLS server name of the original host. The SDK follows same-origin redirects
  only; a request for any other origin is refused here.
- **Bounded bodies, counted as they arrive.** At most `limit` bytes are read of one response: a
  JSON body, or an SSE stream with every event in it. A longer one is refused on its
  `Content-Length`, else closed at the byte that crosses the cap, so no more than `limit` plus
  one read chunk is ever held. The refusal is also noted in a `Refusal`: the SDK turns a body
  it cannot finish into a JSON-RPC error of its own (or ends the session), and the caller
  reports the cap instead (`mcp.py`).
- **No compression.** `Accept-Encoding: identity` is asked for and a `Content-Encoding` is
  refused, as on the model path: a compressed body could inflate past any cap.
- **The loop's shared pool**: keep-alive connections keyed by address and TLS server name, no
  cookie jar, no proxy variables from the environment (`session.py`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import aiohttp
import httpx2
from yarl import URL

from ..aiohttp_errors import mapped_errors
from . import netguard

DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass
class Refusal:
    """Why the bytes of an MCP session were refused: the first refusal's `cause`
    (`ResponseTooLarge`, `EncodedResponse`) and `why` (what was refused, no content)."""

    cause: str | None = None
    why: str = ""

    def note(self, cause: str, why: str) -> None:
        if self.cause is None:
            self.cause, self.why = cause, why


class ResponseTooLarge(httpx2.ReadError):
    """A response body is longer than the transport's cap (nothing past the cap is read)."""


class EncodedResponse(httpx2.ReadError):
    """A response came compressed although `identity` was asked for."""


class OtherOrigin(httpx2.ConnectError):
    """A request for an origin the SSRF guard did not check (nothing was sent)."""


def origin(url: httpx2.URL | URL) -> tuple[str, str, int]:
    """`(scheme, host, port)`, the port defaulted by scheme; the host lower-case, unbracketed."""
    scheme = url.scheme.lower()
    host = (url.host or "").strip("[]").rstrip(".").lower()
    return scheme, host, url.port or DEFAULT_PORTS.get(scheme, 0)


class McpTransport(httpx2.AsyncBaseTransport):
    """httpx2 requests to one checked origin over `http` (the loop's tool session), each answer
    at most `limit` bytes; a body refused for its size or encoding is noted in `refusal`."""

    def __init__(
        self,
        http: aiohttp.ClientSession,
        url: str,
        destination: netguard.Destination,
        *,
        limit: int,
        refusal: Refusal,
    ) -> None:
        self._http = http
        self._origin = origin(URL(url))
        self._addresses: Sequence[netguard.IPAddress] = destination.addresses
        self._limit = limit
        self.refusal = refusal
        self.received = 0
        """Body bytes read over the transport's lifetime, all responses together."""

    def _refuse(
        self, error: type[ResponseTooLarge | EncodedResponse], why: str, request: httpx2.Request
    ) -> None:
        self.refusal.note(error.__name__, why)
        raise error(why, request=request)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if origin(request.url) != self._origin:
            raise OtherOrigin("not the origin the SSRF guard checked", request=request)
        scheme, host, _port = self._origin
        timeout = request.extensions.get("timeout") or {}
        try:
            data: bytes | None = request.content or None
        except httpx2.RequestNotRead:
            data = await request.aread() or None
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw]
        url = URL(str(request.url)).with_user(None)  # httpx2 sent userinfo as a header
        with mapped_errors(request, httpx2):
            for n, address in enumerate(self._addresses, start=1):
                try:
                    response = await self._http.request(
                        request.method,
                        url.with_host(str(address)),
                        headers=headers,  # `Host` is the original host (httpx2 sets it)
                        data=data,
                        allow_redirects=False,
                        compress=False,
                        auto_decompress=False,
                        server_hostname=host if scheme == "https" else None,
                        timeout=aiohttp.ClientTimeout(
                            total=None,
                            sock_connect=timeout.get("connect"),
                            sock_read=timeout.get("read"),
                            connect=timeout.get("pool"),
                        ),
                    )
                    break
                except aiohttp.ClientConnectorError:
                    if n == len(self._addresses):
                        raise
        try:
            self._check_head(response, request)
        except BaseException:
            response.close()
            raise
        return httpx2.Response(
            response.status,
            headers=response.raw_headers,
            stream=_BoundedStream(self, response, request),
            request=request,
            extensions={"http_version": b"HTTP/1.1"},
        )

    def _check_head(self, response: aiohttp.ClientResponse, request: httpx2.Request) -> None:
        encoding = response.headers.get("Content-Encoding", "").strip().lower()
        if encoding not in ("", "identity"):
            self._refuse(EncodedResponse, "the response is compressed", request)
        length = response.content_length
        if length is not None and length > self._limit:
            self._refuse(
                ResponseTooLarge, f"a response is longer than {self._limit} bytes", request
            )

    async def read(
        self, response: aiohttp.ClientResponse, request: httpx2.Request
    ) -> AsyncIterator[bytes]:
        """The body of `response`, chunk by chunk, refused past the cap."""
        size = 0
        with mapped_errors(request, httpx2):
            async for chunk in response.content.iter_any():
                size += len(chunk)
                self.received += len(chunk)
                if size > self._limit:
                    response.close()  # the rest is never read
                    self._refuse(
                        ResponseTooLarge, f"a response is longer than {self._limit} bytes", request
                    )
                yield chunk


class _BoundedStream(httpx2.AsyncByteStream):
    """An aiohttp response body as an httpx2 stream; closing it returns the connection to the
    pool only if the body was read to the end."""

    def __init__(
        self, transport: McpTransport, response: aiohttp.ClientResponse, request: httpx2.Request
    ) -> None:
        self._transport = transport
        self._response = response
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._transport.read(self._response, self._request):
            yield chunk

    async def aclose(self) -> None:
        if self._response.content.is_eof():
            self._response.release()
        else:
            self._response.close()
