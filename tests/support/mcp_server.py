"""An MCP server over streamable HTTP, built with the `mcp` SDK's server side (MCPServer under
uvicorn), counting tool calls and recording the headers it was sent.

Tools:
    echo(text)        returns the text
    add(a, b)         returns a + b (integers)
    fail(reason)      raises: the result has isError true
    slow(seconds)     sleeps, then returns "slept"
    image()           returns an image block and a text block
    big(size)         returns a text of `size` bytes (the hostile-size tests)

The endpoint is `<url>/mcp`; it answers in SSE streams, or in JSON bodies with
`json_response`. With `require_token`, requests without
`Authorization: Bearer <token>` get HTTP 401. The SDK's Host check accepts 127.0.0.1 and
localhost, and the names in `host_names` (any port); `hosts` records the Host headers seen. `GET <url>/_mcp/calls` returns the call counts
and `GET <url>/_mcp/headers` the Authorization headers seen, for process mode:

    python -m tests.support.mcp_server --port 0 [--require-token T] [--json-response]
"""

from __future__ import annotations

import argparse
import asyncio
import threading
from collections import Counter
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import ImageContent, TextContent
from starlette.requests import Request
from starlette.responses import JSONResponse

from .threaded_server import Cleanup, ServerThread, serve_uvicorn


class McpTestServer:
    """The test MCP server; `start()` serves it from a background thread."""

    def __init__(
        self,
        *,
        require_token: str | None = None,
        port: int = 0,
        json_response: bool = False,
        host_names: tuple[str, ...] = (),
    ) -> None:
        self.require_token = require_token
        self.json_response = json_response
        self.host_names = host_names
        self.hosts: list[str | None] = []
        self.port = port
        self.calls: Counter[str] = Counter()
        self.auth_headers: list[str | None] = []
        self._lock = threading.Lock()
        self._thread = ServerThread("mcp-server")
        self.mcp = self._build()

    def _count(self, name: str) -> None:
        with self._lock:
            self.calls[name] += 1

    def _build(self) -> MCPServer:
        mcp = MCPServer("ordo-test-mcp", log_level="WARNING")

        @mcp.tool(description="Echo the text back.")
        def echo(text: str) -> str:
            self._count("echo")
            return text

        @mcp.tool(description="Add two integers.")
        def add(a: int, b: int) -> int:
            self._count("add")
            return a + b

        @mcp.tool(description="Always fails with the given reason.")
        def fail(reason: str) -> str:
            self._count("fail")
            raise ToolError(f"failed on purpose: {reason}")

        @mcp.tool(description="Sleep, then answer.")
        async def slow(seconds: float) -> str:
            self._count("slow")
            await asyncio.sleep(seconds)
            return "slept"

        @mcp.tool(description="An image and a caption.")
        def image() -> list[Any]:
            self._count("image")
            return [
                ImageContent(type="image", data="iVBORw0KGgo=", mime_type="image/png"),
                TextContent(type="text", text="a caption"),
            ]

        @mcp.tool(description="A text of `size` bytes.")
        def big(size: int) -> str:
            self._count("big")
            return "x" * size

        @mcp.custom_route("/_mcp/calls", methods=["GET"])
        async def calls(request: Request) -> JSONResponse:
            with self._lock:
                return JSONResponse(dict(self.calls))

        @mcp.custom_route("/_mcp/headers", methods=["GET"])
        async def headers(request: Request) -> JSONResponse:
            with self._lock:
                return JSONResponse(list(self.auth_headers))

        return mcp

    def app(self) -> Any:
        names = ("127.0.0.1", "localhost", *self.host_names)
        security = TransportSecuritySettings(
            allowed_hosts=[f"{name}:*" for name in names],
            allowed_origins=[f"http://{name}:*" for name in names],
        )
        inner = self.mcp.streamable_http_app(
            host="127.0.0.1", json_response=self.json_response, transport_security=security
        )

        async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] == "http" and scope["path"].startswith("/mcp"):
                headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
                auth = headers.get("authorization")
                with self._lock:
                    self.auth_headers.append(auth)
                    self.hosts.append(headers.get("host"))
                if self.require_token is not None and auth != f"Bearer {self.require_token}":
                    await JSONResponse({"error": "unauthorized"}, status_code=401)(
                        scope, receive, send
                    )
                    return
            await inner(scope, receive, send)

        return app

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def _config(self) -> uvicorn.Config:
        return uvicorn.Config(
            self.app(), host="127.0.0.1", port=self.port, log_level="warning", lifespan="on"
        )

    def start(self) -> McpTestServer:
        async def setup() -> tuple[int, Cleanup]:
            return await serve_uvicorn(self._config())

        self.port = self._thread.start(setup)
        return self

    def stop(self) -> None:
        self._thread.stop()

    def __enter__(self) -> McpTestServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="MCP test server (streamable HTTP)")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--require-token", default=None)
    parser.add_argument("--json-response", action="store_true")
    args = parser.parse_args(argv)
    test_server = McpTestServer(
        require_token=args.require_token, port=args.port, json_response=args.json_response
    )

    async def run() -> None:
        # In the main thread uvicorn handles SIGINT/SIGTERM itself: serve until it returns.
        server = uvicorn.Server(test_server._config())
        task = asyncio.create_task(server.serve())
        while not server.started:
            if task.done():
                await task
                return
            await asyncio.sleep(0.01)
        test_server.port = server.servers[0].sockets[0].getsockname()[1]
        print(f"listening on {test_server.url}", flush=True)
        await task

    asyncio.run(run())


if __name__ == "__main__":
    main()
