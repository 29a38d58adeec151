"""The `mcp` tool: one tool of an MCP server, over streamable HTTP, through the official `mcp`
client (`mcp.Client` on `streamable_http_client`).

- `describe()` reads the server's tool list and returns the tool's description and
  `inputSchema`: the binding uses them when the Tool object does not set its own. A tool the
  server does not list is an error (the run fails to set up: `InvalidSpec`). So is a listed
  `inputSchema` that `ordo.api.jsonschemas.check_schema` refuses (not valid for its draft,
  unresolvable or remote `$ref`, a pattern RE2 cannot compile, over the size caps):
  `InvalidSchema` names the tool and where the schema is wrong, and the tool is not offered.
  Pages are read up to `MAX_LISTED_TOOLS` tools and `MAX_LISTING_BYTES` bytes; past that
  the tool is not offered either (ToolCallFailed `ListingTooLarge`).
- A call opens a session, calls the tool, closes the session. Text blocks are joined (other
  blocks are named, not forwarded; structured content is used when there is no text),
  capped at 64 KiB; `isError: true` becomes an error result the model sees. The call is sent
  with `session.send_request`: the SDK's `call_tool` would read the tool list again and check
  structured content against the listed output schema with Python's jsonschema (a
  backtracking `re` for `pattern`) on the event loop.
- Bounded where it is read: the session's transport (`mcp_transport.py`) reads at most
  `MAX_MESSAGE_BYTES` of one response and its read stream (`mcp_stream.py`) passes at most
  `MAX_MESSAGE_ITEMS` items of one message on to the SDK's validation; an answer over either
  is an error result (`ResponseTooLarge`), a tool list over either leaves the tool unoffered.
- `secretRef` → `Authorization: Bearer <secret>`; `headers` are sent as given.
- Link-local, cloud-metadata and translated forms of them are refused (see `netguard`); the
  session connects to the addresses that were checked.
- Protocol and connection failures become ToolFailure with the failure kind only.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

import httpx2
from mcp import Client, types
from mcp.client.streamable_http import streamable_http_client

from ..api import parse_duration
from ..api.jsonschemas import check_schema
from ..engine.tooling import ResolvedTool, ToolCallFailed, ToolFailure, ToolOutput, failure_cause
from ..errors import InvalidSchema
from . import netguard, session
from .http import MAX_RESPONSE_BYTES, TRUNCATED_NOTE
from .mcp_stream import checked
from .mcp_transport import DEFAULT_PORTS, McpTransport, Refusal

MAX_PAGES = 50
"""Pages of a tool list read at most."""
MAX_MESSAGE_BYTES = 128 * 1024
"""Longest body read of one MCP response (a JSON body, or an SSE stream and all its events):
the SDK parses a message on the loop in one piece, and its densest JSON costs it about 0.2 ms
per KiB there, several times that on a loaded machine (docs/security.md)."""
MAX_MESSAGE_ITEMS = 4000
"""JSON objects and array elements of one MCP message (`mcp_stream.py`): what the SDK's
validation costs after the first parse is per item."""
MAX_LISTED_TOOLS = 1000
"""Tools of a tool list read at most, all pages together."""
MAX_LISTING_BYTES = 4 * MAX_MESSAGE_BYTES
"""Bytes of a tool list read at most, all pages together."""


def server_host(url: str) -> str:
    """`host[:port]` of an MCP server URL: no user, path or query (they may carry a key)."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    host = parts.hostname or "?"
    if ":" in host:
        host = f"[{host}]"
    return f"{host}:{port}" if port else host


class McpToolNotFound(LookupError):
    """The MCP server does not list the tool."""


def _innermost(exc: BaseException) -> BaseException:
    """The first leaf of an exception group (anyio task groups wrap errors)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def result_text(result: Any) -> str:
    """The model-visible text of a CallToolResult."""
    parts: list[str] = []
    for block in result.content or []:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        else:
            parts.append(f"[{kind} content omitted]")
    text = "\n".join(parts)
    structured = getattr(result, "structured_content", None)
    if (
        not any(getattr(b, "type", "") == "text" for b in result.content or [])
        and structured is not None
    ):
        text = json.dumps(structured)
    data = text.encode()
    if len(data) > MAX_RESPONSE_BYTES:
        text = data[:MAX_RESPONSE_BYTES].decode("utf-8", "ignore") + TRUNCATED_NOTE
    return text


class McpToolExecutor:
    """Calls one tool on an MCP server."""

    def __init__(self, resolved: ResolvedTool) -> None:
        spec = resolved.tool.spec
        if spec.mcp is None:
            raise ValueError(f"Tool {resolved.tool.name!r} has no spec.mcp")
        self._url = spec.mcp.url
        self.tool_name = spec.mcp.tool_name or resolved.tool.name
        self.where = f"Tool {resolved.tool.name!r} (MCP server {server_host(self._url)})"
        """How setup errors name the tool: the object and the server's host, never the URL."""
        self._headers = dict(spec.mcp.headers or {})
        if resolved.secret is not None:
            self._headers["Authorization"] = f"Bearer {resolved.secret}"
        self._headers["Accept-Encoding"] = "identity"
        self._timeout = parse_duration(spec.timeout)

    @asynccontextmanager
    async def _transport(self) -> AsyncIterator[McpTransport]:
        """A transport to the server's checked addresses, over the loop's tool session."""
        parts = urlsplit(self._url)
        try:
            destination = await netguard.check(
                parts.hostname or "", parts.port or DEFAULT_PORTS.get(parts.scheme, 80)
            )
        except netguard.BlockedDestination as exc:
            raise ToolCallFailed(f"refused: {exc}", cause="BlockedDestination") from None
        except OSError:
            raise ToolCallFailed(
                f"the MCP server's host name {parts.hostname!r} did not resolve",
                cause="NameResolution",
            ) from None
        async with session.held() as http:
            yield McpTransport(
                http, self._url, destination, limit=MAX_MESSAGE_BYTES, refusal=Refusal()
            )

    @asynccontextmanager
    async def _client(self, transport: McpTransport) -> AsyncIterator[Client]:
        http = httpx2.AsyncClient(
            transport=transport,
            headers=self._headers,
            timeout=httpx2.Timeout(self._timeout),
            trust_env=False,
        )
        async with (
            http,
            Client(
                checked(
                    streamable_http_client(
                        self._url, http_client=http, max_sse_event_size=MAX_MESSAGE_BYTES
                    ),
                    limit=MAX_MESSAGE_ITEMS,
                    refusal=transport.refusal,
                ),
                read_timeout_seconds=self._timeout,
                cache=None,
            ) as client,
        ):
            yield client

    async def describe(self) -> tuple[str, dict[str, Any]]:
        """The tool's description and input schema, from the server's tool list."""
        names: list[str] = []
        found: tuple[str, Any] | None = None
        problem: str | None = None
        try:
            async with self._transport() as transport:
                try:
                    async with self._client(transport) as client:
                        cursor: str | None = None
                        for _ in range(MAX_PAGES):
                            page = await client.list_tools(cursor=cursor)
                            for tool in page.tools:
                                if len(names) == MAX_LISTED_TOOLS:
                                    problem = f"lists more than {MAX_LISTED_TOOLS} tools"
                                    break
                                if tool.name == self.tool_name:
                                    found = (tool.description or "", tool.input_schema)
                                    break
                                names.append(tool.name)
                            if problem is None and transport.received > MAX_LISTING_BYTES:
                                problem = f"has a tool list longer than {MAX_LISTING_BYTES} bytes"
                            cursor = page.next_cursor
                            if found is not None or problem is not None or not cursor:
                                break
                except Exception as exc:
                    raise self._failed(exc, transport, listing=True) from None
        except ToolFailure as exc:
            raise ToolCallFailed(f"{self.where}: {exc.message}", cause=failure_cause(exc)) from None
        if problem is not None:
            raise ToolCallFailed(
                f"{self.where}: the MCP server {problem} before {self.tool_name!r} (ordo reads at "
                f"most {MAX_LISTED_TOOLS} tools and {MAX_LISTING_BYTES} bytes), so the tool is not "
                "offered; a Tool that sets spec.description and spec.inputSchema is not looked up",
                cause="ListingTooLarge",
            )
        if found is not None:
            # Checked outside the session (an error raised inside it comes out wrapped), and
            # in a thread: the first check of a large schema costs a fraction of a second.
            return found[0], await asyncio.to_thread(self._usable, found[1])
        listed = ", ".join(sorted(names)[:20]) or "none"
        raise McpToolNotFound(
            f"the MCP server does not list a tool {self.tool_name!r} (it lists: {listed})"
        )

    def _failed(self, exc: Exception, transport: McpTransport, *, listing: bool) -> ToolFailure:
        """The ToolFailure for an exception out of an MCP session: a body the transport
        refused (whatever the SDK made of it), else the innermost error's kind."""
        refusal = transport.refusal
        if refusal.cause is not None:
            limits = f"ordo reads at most {MAX_MESSAGE_BYTES} bytes and {MAX_MESSAGE_ITEMS} items"
            if listing:
                return ToolCallFailed(
                    f"the MCP server's tool list was refused: {refusal.why} ({limits} of one MCP "
                    "message), so the tool is not offered",
                    cause="ListingTooLarge"
                    if refusal.cause == "ResponseTooLarge"
                    else refusal.cause,
                )
            return ToolCallFailed(
                f"the MCP server's answer was refused: {refusal.why} ({limits} of one MCP "
                "message); the rest was not read",
                cause=refusal.cause,
            )
        inner = _innermost(exc)
        if isinstance(inner, ToolFailure):
            return inner
        code = getattr(inner, "code", None)
        kind = type(inner).__name__ + (f" {code}" if isinstance(code, int) else "")
        if listing:
            return ToolCallFailed(
                f"listing the MCP server's tools failed ({kind}); check that spec.mcp.url points "
                "at a running MCP server (streamable HTTP)",
                cause=kind,
            )
        return ToolCallFailed(f"the MCP call failed ({kind})", cause=kind)

    def _usable(self, schema: Any) -> dict[str, Any]:
        """The listed input schema if ordo can use it; else InvalidSchema naming the tool and
        the JSON paths of the problems (never the schema's text)."""
        problems = check_schema(schema if isinstance(schema, dict) else None)
        if problems:
            where = ", ".join(p.partition(": ")[0] for p in problems[:5])
            raise InvalidSchema(
                f"the MCP server lists tool {self.tool_name!r} with an input schema ordo cannot "
                f"use (at {where}), so the tool is not offered; fix the server's schema or set "
                "spec.inputSchema on the Tool"
            )
        return dict(schema)

    async def __call__(self, arguments: dict[str, Any]) -> ToolOutput:
        async with self._transport() as transport:
            try:
                async with self._client(transport) as client:
                    # `send_request`, not `call_tool`: the SDK's call_tool reads the tool list
                    # again and checks structured content against the listed output schema with
                    # Python's jsonschema (a backtracking `re` for `pattern`), on the loop.
                    result = await client.session.send_request(
                        types.CallToolRequest(
                            params=types.CallToolRequestParams(
                                name=self.tool_name, arguments=arguments
                            )
                        ),
                        types.CallToolResult,
                    )
            except ToolFailure:
                raise
            except Exception as exc:
                raise self._failed(exc, transport, listing=False) from None
        is_error = bool(result.is_error)
        return ToolOutput(
            result_text(result), is_error=is_error, cause="MCP isError" if is_error else None
        )
