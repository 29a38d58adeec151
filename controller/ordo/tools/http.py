"""The `http` tool: one HTTP request per call, over the loop's shared aiohttp session
(`session.py`).

- POST, PUT and PATCH send the model's arguments as the JSON body; GET and DELETE send them
  as query parameters (scalars as text, lists repeated, objects as JSON).
- `secretRef` → `<authHeader>: <authScheme> <secret>` (default `Authorization: Bearer ...`).
- The Tool's `timeout` bounds the whole request, the whole answer included (a body that
  trickles in byte by byte does not get past it); redirects are not followed; proxy settings
  from the environment are not used (the SSRF guard must see the real destination).
- At most 64 KiB of the response reaches the model; a longer one is cut and marked, and the
  rest is not read.
- A non-2xx answer, a timeout or a connection failure is a ToolFailure: the model gets an
  error result naming the status code or the failure kind, never the URL, headers or body.
- Link-local and cloud-metadata destinations are refused unless `allowPrivateNetwork`
  (see `netguard`); the request goes to the address that was checked.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from yarl import URL

from ..api import parse_duration
from ..engine.tooling import ResolvedTool, ToolCallFailed, ToolOutput
from . import netguard, session

MAX_RESPONSE_BYTES = 64 * 1024
TRUNCATED_NOTE = f"\n[truncated: the response was longer than {MAX_RESPONSE_BYTES} bytes]"
USER_AGENT = "ordo-http-tool"
_BODY_METHODS = ("POST", "PUT", "PATCH")


def query_params(arguments: dict[str, Any]) -> list[tuple[str, str]]:
    """Arguments as query parameters."""
    params: list[tuple[str, str]] = []
    for key, value in arguments.items():
        values = value if isinstance(value, list) else [value]
        for item in values:
            if item is None:
                continue
            if isinstance(item, bool):
                params.append((key, "true" if item else "false"))
            elif isinstance(item, str | int | float):
                params.append((key, str(item)))
            else:
                params.append((key, json.dumps(item, separators=(",", ":"))))
    return params


def json_body(arguments: dict[str, Any]) -> bytes:
    """The arguments as a compact UTF-8 JSON body."""
    return json.dumps(arguments, separators=(",", ":"), ensure_ascii=False).encode()


async def read_capped(response: aiohttp.ClientResponse, limit: int = MAX_RESPONSE_BYTES) -> str:
    """The response text, at most `limit` bytes of it, marked when cut (the rest is not
    read)."""
    chunks: list[bytes] = []
    size = 0
    truncated = False
    async for chunk in response.content.iter_any():
        if size + len(chunk) > limit:
            chunks.append(chunk[: limit - size])
            truncated = True
            break
        chunks.append(chunk)
        size += len(chunk)
    decoder = codecs.getincrementaldecoder(_encoding(response))(errors="replace")
    text = decoder.decode(b"".join(chunks), final=not truncated)
    return text + TRUNCATED_NOTE if truncated else text


def _encoding(response: aiohttp.ClientResponse) -> str:
    name = response.charset or "utf-8"
    try:
        codecs.lookup(name)
    except LookupError:
        return "utf-8"
    return name


async def guarded_targets(url: URL, allow_private_network: bool) -> list[URL]:
    """The URLs to try, in order: with the SSRF guard on, one per checked address. Raises
    ToolCallFailed (`BlockedDestination`, `NameResolution`)."""
    if allow_private_network:
        return [url]
    if url.raw_host is None or url.port is None:
        raise ToolCallFailed("the tool's URL has no host", cause="InvalidURL")
    try:
        destination = await netguard.check(url.raw_host, url.port)
    except netguard.BlockedDestination as exc:
        raise ToolCallFailed(f"refused: {exc}", cause="BlockedDestination") from None
    except OSError:
        raise ToolCallFailed(
            "the tool's host name did not resolve", cause="NameResolution"
        ) from None
    return [url.with_host(str(address)) for address in destination.addresses]


def pin_destination(url: URL, headers: dict[str, str], allow_private_network: bool) -> str | None:
    """Connecting to a checked address: `Host` stays the original host (added to
    `headers`); returns the TLS server name to send and verify (None: the URL's own)."""
    if allow_private_network:
        return None
    headers.setdefault("Host", url.host_port_subcomponent or "")
    return url.raw_host if url.scheme == "https" else None


def finish(response: aiohttp.ClientResponse) -> None:
    """Done with `response`: its connection goes back to the pool if the body was read to
    the end, else it is closed (the rest of a long or endless body is never read)."""
    if response.content.is_eof():
        response.release()
    else:
        response.close()


Send = Callable[[URL], Awaitable[aiohttp.ClientResponse]]


async def send_first(targets: list[URL], send: Send) -> aiohttp.ClientResponse:
    """The response of the first checked address that accepts a connection; the next address
    of the same name is tried only when connecting failed (nothing was sent)."""
    for n, target in enumerate(targets, start=1):
        try:
            return await send(target)
        except aiohttp.ClientConnectorError:
            if n == len(targets):
                raise
    raise ToolCallFailed("the tool's host name resolved to no address", cause="NameResolution")


def failure_kind(exc: aiohttp.ClientError | OSError) -> str:
    """The kind of a transport failure, in the words of `status.toolCalls[].error`
    (docs/api.md): `ConnectError` when nothing was sent, else what went wrong after."""
    if isinstance(exc, aiohttp.ClientConnectorError):
        return "ConnectError"
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError):
        return "RemoteProtocolError"
    if isinstance(exc, aiohttp.ClientResponseError):
        return "RemoteProtocolError"
    return "ReadError"


def request_timeout(seconds: float) -> aiohttp.ClientTimeout:
    """`seconds` for the whole request: connect, send, and reading the whole answer."""
    return aiohttp.ClientTimeout(total=seconds)


class HttpToolExecutor:
    """Calls one http Tool."""

    def __init__(self, resolved: ResolvedTool) -> None:
        spec = resolved.tool.spec
        if spec.http is None:
            raise ValueError(f"Tool {resolved.tool.name!r} has no spec.http")
        self._http = spec.http
        self._url = URL(spec.http.url)
        self._secret = resolved.secret
        self._timeout = parse_duration(spec.timeout)

    def headers(self) -> dict[str, str]:
        headers = {
            "User-Agent": USER_AGENT,
            "Accept": "application/json, text/plain;q=0.9, */*;q=0.5",
        }
        headers.update(self._http.headers or {})
        if self._secret is not None:
            scheme = self._http.auth_scheme
            headers[self._http.auth_header] = f"{scheme} {self._secret}" if scheme else self._secret
        return headers

    async def __call__(self, arguments: dict[str, Any]) -> ToolOutput:
        private = self._http.allow_private_network
        targets = await guarded_targets(self._url, private)
        headers = self.headers()
        server_hostname = pin_destination(self._url, headers, private)
        method = self._http.method
        body = method in _BODY_METHODS
        if body:
            headers.setdefault("Content-Type", "application/json")
        try:
            async with session.held() as http:

                def send(target: URL) -> Awaitable[aiohttp.ClientResponse]:
                    return http.request(
                        method,
                        target,
                        headers=headers,
                        data=json_body(arguments) if body else None,
                        params=None if body else query_params(arguments),
                        allow_redirects=False,
                        server_hostname=server_hostname,
                        timeout=request_timeout(self._timeout),
                    )

                response = await send_first(targets, send)
                try:
                    if not 200 <= response.status < 300:
                        raise ToolCallFailed(
                            f"the tool endpoint answered HTTP {response.status}",
                            cause=f"HTTPStatus {response.status}",
                        )
                    text = await read_capped(response)
                finally:
                    finish(response)
        except TimeoutError as exc:  # aiohttp's timeouts are TimeoutErrors too
            raise ToolCallFailed(
                f"the tool endpoint did not answer within {self._timeout:g}s",
                cause=f"Timeout ({type(exc).__name__})",
            ) from None
        except (aiohttp.ClientError, OSError) as exc:
            kind = failure_kind(exc)
            raise ToolCallFailed(f"the request failed ({kind})", cause=kind) from None
        return ToolOutput(text)
