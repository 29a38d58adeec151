"""The `http` tool: one HTTP request per call, through httpx.

- POST, PUT and PATCH send the model's arguments as the JSON body; GET and DELETE send them
  as query parameters (scalars as text, lists repeated, objects as JSON).
- `secretRef` → `<authHeader>: <authScheme> <secret>` (default `Authorization: Bearer ...`).
- The Tool's `timeout` bounds the whole request; redirects are not followed; proxy settings
  from the environment are not used (the SSRF guard must see the real destination).
- At most 64 KiB of the response reaches the model; a longer one is cut and marked.
- A non-2xx answer, a timeout or a connection failure is a ToolFailure: the model gets an
  error result naming the status code or the failure kind, never the URL, headers or body.
- Link-local and cloud-metadata destinations are refused unless `allowPrivateNetwork`
  (see `netguard`); the request goes to the address that was checked.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Callable
from typing import Any

import httpx

from ..api import parse_duration
from ..engine.tooling import ResolvedTool, ToolCallFailed, ToolOutput
from ..tls import shared_ssl_context
from . import netguard

MAX_RESPONSE_BYTES = 64 * 1024
TRUNCATED_NOTE = f"\n[truncated: the response was longer than {MAX_RESPONSE_BYTES} bytes]"
USER_AGENT = "ordo-http-tool"
_BODY_METHODS = ("POST", "PUT", "PATCH")


QueryValue = str | int | float | bool | None


def query_params(arguments: dict[str, Any]) -> list[tuple[str, QueryValue]]:
    """Arguments as query parameters."""
    params: list[tuple[str, QueryValue]] = []
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


async def read_capped(response: httpx.Response, limit: int = MAX_RESPONSE_BYTES) -> str:
    """The response text, at most `limit` bytes of it, marked when cut."""
    chunks: list[bytes] = []
    size = 0
    truncated = False
    async for chunk in response.aiter_bytes():
        if size + len(chunk) > limit:
            chunks.append(chunk[: limit - size])
            truncated = True
            break
        chunks.append(chunk)
        size += len(chunk)
    decoder = codecs.getincrementaldecoder(_encoding(response))(errors="replace")
    text = decoder.decode(b"".join(chunks), final=not truncated)
    return text + TRUNCATED_NOTE if truncated else text


def _encoding(response: httpx.Response) -> str:
    name = response.charset_encoding or "utf-8"
    try:
        codecs.lookup(name)
    except LookupError:
        return "utf-8"
    return name


async def guarded_targets(url: httpx.URL, allow_private_network: bool) -> list[httpx.URL]:
    """The URLs to try, in order: with the SSRF guard on, one per checked address. Raises
    ToolCallFailed (`BlockedDestination`, `NameResolution`)."""
    if allow_private_network:
        return [url]
    host = url.raw_host.decode("ascii")
    try:
        destination = await netguard.check(host, url.port or (443 if url.scheme == "https" else 80))
    except netguard.BlockedDestination as exc:
        raise ToolCallFailed(f"refused: {exc}", cause="BlockedDestination") from None
    except OSError:
        raise ToolCallFailed(
            "the tool's host name did not resolve", cause="NameResolution"
        ) from None
    return [url.copy_with(host=str(address)) for address in destination.addresses]


def pin_destination(
    url: httpx.URL, headers: dict[str, str], allow_private_network: bool
) -> dict[str, Any]:
    """Connecting to a checked address: `Host` and the TLS server name stay the original
    host (added to `headers`); returns the request extensions."""
    extensions: dict[str, Any] = {}
    if not allow_private_network:
        headers.setdefault("Host", url.netloc.decode("ascii"))
        if url.scheme == "https":
            extensions["sni_hostname"] = url.raw_host.decode("ascii")
    return extensions


def guarded_client(timeout: float) -> httpx.AsyncClient:
    """A client for checked destinations: no redirects, no proxy variables from the
    environment (the SSRF guard must see the real destination), ordo's TLS trust."""
    return httpx.AsyncClient(
        timeout=timeout, follow_redirects=False, trust_env=False, verify=shared_ssl_context()
    )


async def send_first(
    client: httpx.AsyncClient,
    targets: list[httpx.URL],
    build: Callable[[httpx.URL], httpx.Request],
) -> httpx.Response:
    """The (streamed) response of the first checked address that accepts a connection; the
    next address of the same name is tried only on a connection error."""
    for n, target in enumerate(targets, start=1):
        try:
            return await client.send(build(target), stream=True)
        except httpx.ConnectError:
            if n == len(targets):
                raise
    raise httpx.ConnectError("the host name resolved to no address")


class HttpToolExecutor:
    """Calls one http Tool."""

    def __init__(self, resolved: ResolvedTool) -> None:
        spec = resolved.tool.spec
        if spec.http is None:
            raise ValueError(f"Tool {resolved.tool.name!r} has no spec.http")
        self._http = spec.http
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
        url = httpx.URL(self._http.url)
        targets = await guarded_targets(url, self._http.allow_private_network)
        headers = self.headers()
        extensions = pin_destination(url, headers, self._http.allow_private_network)
        method = self._http.method
        body = method in _BODY_METHODS
        try:
            async with guarded_client(self._timeout) as client:
                response = await send_first(
                    client,
                    targets,
                    lambda target: client.build_request(
                        method,
                        target,
                        headers=headers,
                        json=arguments if body else None,
                        params=None if body else query_params(arguments),
                        extensions=extensions,
                    ),
                )
                try:
                    if not response.is_success:
                        raise ToolCallFailed(
                            f"the tool endpoint answered HTTP {response.status_code}",
                            cause=f"HTTPStatus {response.status_code}",
                        )
                    text = await read_capped(response)
                finally:
                    await response.aclose()
        except httpx.TimeoutException as exc:
            raise ToolCallFailed(
                f"the tool endpoint did not answer within {self._timeout:g}s",
                cause=f"Timeout ({type(exc).__name__})",
            ) from None
        except httpx.HTTPError as exc:
            raise ToolCallFailed(
                f"the request failed ({type(exc).__name__})", cause=type(exc).__name__
            ) from None
        return ToolOutput(text)
