"""The httpx transport under the a2a-sdk client of `a2a` Tools: every request through the SSRF
guard, sent to the address that was checked, every response body bounded.

The SDK's client takes an `httpx.AsyncClient` (`ClientConfig.httpx_client`); a client with a
custom transport is a documented httpx configuration, so the SDK still builds every request
and parses every answer. What this transport adds, for EVERY request (the card's URL and the
endpoint the card names, which the remote agent chose, alike):

- **One origin.** Requests go only to the origin (scheme, host, port) of the Tool's URL, the
  one its Secret was released for: a card that names an endpoint elsewhere is refused
  (`OtherOrigin`), so neither the credential nor the message goes to a host the Tool does not
  name.
- **The SSRF guard** (`netguard.check`): the host is resolved and every address checked; the
  request then goes to the first checked address, with the `Host` header and the TLS server
  name (`sni_hostname`) of the original host, so a DNS answer that changes between the check
  and the connection cannot slip through.
- **Bounded bodies**: at most `limit` bytes of one response are read (a longer one is refused
  on its `Content-Length`, else at the chunk that crosses the cap); no compression (`identity`
  is asked for and a `Content-Encoding` refused: a compressed body could inflate past any cap).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx

from . import netguard

DEFAULT_PORTS = {"http": 80, "https": 443}
MAX_BODY_BYTES = 1024 * 1024
"""At most this much of one answer of a remote agent is read (a task carries its history)."""


class OtherOrigin(httpx.ConnectError):
    """A request for another origin than the Tool URL's (nothing was sent)."""


def origin(url: httpx.URL) -> tuple[str, str, int]:
    """`(scheme, host, port)`, the port defaulted by scheme; the host lower-case."""
    scheme = url.scheme.lower()
    return scheme, url.host.rstrip(".").lower(), url.port or DEFAULT_PORTS.get(scheme, 0)


class BlockedDestination(httpx.ConnectError):
    """The SSRF guard refused the destination (nothing was sent)."""


class ResponseTooLarge(httpx.ReadError):
    """A response body is longer than the transport's cap (nothing past it is read)."""


class EncodedResponse(httpx.ReadError):
    """A response came compressed although `identity` was asked for."""


class GuardedTransport(httpx.AsyncBaseTransport):
    """httpx requests to the origin of `url`, each to an address the SSRF guard checked, each
    answer at most `limit` bytes."""

    def __init__(
        self, url: str, *, allow_private_network: bool = False, limit: int = MAX_BODY_BYTES
    ) -> None:
        self._origin = origin(httpx.URL(url))
        self._inner = httpx.AsyncHTTPTransport()
        self._private = allow_private_network
        self._limit = limit

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if origin(request.url) != self._origin:
            scheme, host, port = origin(request.url)
            raise OtherOrigin(
                f"the remote agent's card names an endpoint on {scheme}://{host}:{port}, not on "
                "the origin of the Tool's spec.a2a.url",
                request=request,
            )
        _scheme, host, port = self._origin
        try:
            destination = await netguard.check(host, port, allow_private_network=self._private)
        except netguard.BlockedDestination as exc:
            raise BlockedDestination(f"refused: {exc}", request=request) from None
        except OSError:
            raise httpx.ConnectError("the host name did not resolve", request=request) from None
        request.url = request.url.copy_with(host=str(destination.addresses[0]))
        if request.url.scheme == "https":  # verify the certificate of the host, not the address
            request.extensions = {**request.extensions, "sni_hostname": host}
        request.headers["Accept-Encoding"] = "identity"
        response = await self._inner.handle_async_request(request)
        try:
            encoding = response.headers.get("Content-Encoding", "").strip().lower()
            if encoding not in ("", "identity"):
                raise EncodedResponse("the response is compressed", request=request)
            length = response.headers.get("Content-Length", "")
            if length.isdigit() and int(length) > self._limit:
                raise ResponseTooLarge(
                    f"a response is longer than {self._limit} bytes", request=request
                )
        except BaseException:
            await response.aclose()
            raise
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=_BoundedStream(response, request, self._limit),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


class _BoundedStream(httpx.AsyncByteStream):
    """A response body, refused at the chunk that crosses the cap."""

    def __init__(self, response: httpx.Response, request: httpx.Request, limit: int) -> None:
        self._response = response
        self._request = request
        self._limit = limit

    async def __aiter__(self) -> AsyncIterator[bytes]:
        size = 0
        async for chunk in self._response.aiter_raw():
            size += len(chunk)
            if size > self._limit:
                raise ResponseTooLarge(
                    f"a response is longer than {self._limit} bytes", request=self._request
                )
            yield chunk

    async def aclose(self) -> None:
        await self._response.aclose()
