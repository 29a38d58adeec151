"""A hostile MCP server: just enough streamable HTTP to send what a well-behaved server never
would, a tool result or a tool list of any size, without holding it whole.

It speaks the 2026-07-28 protocol the `mcp` client negotiates (`server/discover`,
`tools/list`, `tools/call` as JSON-RPC over POST; notifications get 202, GET and DELETE 405).
Each answer's `result` is produced in chunks by a `Body` (an iterable of bytes, made per
request; for `tools/call` from the call's arguments) and framed as:

    "json"     one JSON body with its Content-Length (the body is joined first)
    "chunked"  one JSON body, chunked, no Content-Length
    "sse"      a text/event-stream with the answer as one `message` event

    server = HostileMcpServer(call=lambda args: text_result(50_000_000), framing="sse").start()

By default `tools/call` answers a text of `arguments["size"]` bytes (like mcp_server.py's `big`).

`methods` records the JSON-RPC methods it was sent; `aborted` is set when a client left
before the whole body was written.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Literal

from aiohttp import web

from .threaded_server import Cleanup, ServerThread, serve_aiohttp

Body = Callable[[], Iterable[bytes]]
CallBody = Callable[[dict[str, Any]], Iterable[bytes]]
Framing = Literal["json", "chunked", "sse"]
CHUNK = 64 * 1024

DISCOVER = {
    "capabilities": {"tools": {"listChanged": False}},
    "resultType": "complete",
    "supportedVersions": ["2026-07-28"],
    "ttlMs": 0,
    "cacheScope": "private",
    "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "hostile", "version": "0"}},
}

LISTING_FIELDS = {"resultType": "complete", "ttlMs": 0, "cacheScope": "private"}
"""What the 2026-07-28 protocol requires beside the tools of a listing."""


def _json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


LISTED = _json(LISTING_FIELDS)[1:]


def text_result(size: int, char: str = "x") -> Iterator[bytes]:
    """A CallToolResult with one text block of `size` bytes of `char`."""
    yield b'{"content":[{"type":"text","text":"'
    unit = char.encode()
    left = size // len(unit)
    while left > 0:
        n = min(left, CHUNK // len(unit))
        yield unit * n
        left -= n
    yield b'"}],"isError":false,"resultType":"complete"}'


def blocks_result(count: int) -> Iterator[bytes]:
    """A CallToolResult of `count` empty text blocks (the most objects per byte)."""
    yield b'{"content":['
    block = b'{"type":"text","text":""}'
    for start in range(0, count, 1000):
        n = min(1000, count - start)
        yield (b"," if start else b"") + b",".join([block] * n)
    yield b'],"isError":false,"resultType":"complete"}'


def tools_result(
    count: int, *, first: dict[str, Any] | None = None, pad: int = 0, next_cursor: str = ""
) -> Iterator[bytes]:
    """A ListToolsResult of `first` (if given) then `count` minimal tools `t0`, `t1`, ...;
    `pad` bytes of description on each; with `next_cursor`, it says another page follows."""
    yield b'{"tools":['
    sep = b""
    if first is not None:
        yield _json(first)
        sep = b","
    description = "d" * pad
    for start in range(0, count, 1000):
        tools = [
            _json({"name": f"t{i}", "description": description, "inputSchema": {"type": "object"}})
            for i in range(start, min(count, start + 1000))
        ]
        yield sep + b",".join(tools)
        sep = b","
    yield b"]," + (b'"nextCursor":' + _json(next_cursor) + b"," if next_cursor else b"") + LISTED


def listing(*tools: dict[str, Any]) -> Body:
    """A Body for `tools/list` with exactly these tools."""
    return lambda: [_json({"tools": list(tools), **LISTING_FIELDS})]


class HostileMcpServer:
    """The server; `start()` serves it from a background thread (`stop()` to end)."""

    def __init__(
        self,
        *,
        call: CallBody | None = None,
        tools: Body | None = None,
        framing: Framing = "chunked",
        port: int = 0,
    ) -> None:
        self.call = call or (lambda arguments: text_result(int(arguments.get("size", 2))))
        self.tools = tools or listing({"name": "big", "inputSchema": {"type": "object"}})
        self.framing: Framing = framing
        self.port = port
        self.methods: list[str] = []
        self.aborted = threading.Event()
        self._lock = threading.Lock()
        self._thread = ServerThread("hostile-mcp-server")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    async def _post(self, request: web.Request) -> web.StreamResponse:
        message = await request.json()
        method = str(message.get("method", ""))
        with self._lock:
            self.methods.append(method)
        if "id" not in message:
            return web.Response(status=202)
        if method == "server/discover":
            body: Iterable[bytes] = [_json(DISCOVER)]
        elif method == "tools/list":
            body = self.tools()
        elif method == "tools/call":
            params = message.get("params") or {}
            body = self.call(params.get("arguments") or {})
        else:
            error = {
                "jsonrpc": "2.0",
                "id": message["id"],
                "error": {"code": -32601, "message": "no"},
            }
            return web.json_response(error)
        return await self._answer(request, message["id"], body)

    async def _answer(
        self, request: web.Request, request_id: Any, result: Iterable[bytes]
    ) -> web.StreamResponse:
        head = b'{"jsonrpc":"2.0","id":' + _json(request_id) + b',"result":'
        if self.framing == "json":
            return web.Response(
                body=head + b"".join(result) + b"}", content_type="application/json"
            )
        sse = self.framing == "sse"
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream" if sse else "application/json"}
        )
        response.enable_chunked_encoding()
        await response.prepare(request)
        try:
            await response.write((b"event: message\ndata: " if sse else b"") + head)
            for chunk in result:
                await response.write(chunk)
            await response.write(b"}\n\n" if sse else b"}")
            await response.write_eof()
        except (ConnectionError, RuntimeError):
            self.aborted.set()
        return response

    def app(self) -> web.Application:
        app = web.Application(client_max_size=1024 * 1024)

        async def refuse(request: web.Request) -> web.Response:
            return web.Response(status=405)

        app.router.add_post("/mcp", self._post)
        app.router.add_get("/mcp", refuse)
        app.router.add_delete("/mcp", refuse)
        return app

    def start(self) -> HostileMcpServer:
        async def setup() -> tuple[int, Cleanup]:
            return await serve_aiohttp(self.app(), port=self.port)

        self.port = self._thread.start(setup)
        return self

    def stop(self) -> None:
        self._thread.stop()

    def __enter__(self) -> HostileMcpServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
