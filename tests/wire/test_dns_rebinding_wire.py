"""DNS rebinding: network tools connect to the address the SSRF guard checked (issue 23).

A rebinding attacker's DNS answers the guard's lookup with an address it allows, and the
client's own lookup a moment later with another one. The seam is the event loop's resolver:
`netguard`, aiohttp and anyio (under httpx) all resolve through `loop.getaddrinfo`, so a loop
whose `getaddrinfo` answers `CHECKED` for the first lookup of `NAME` and `REBOUND` for every
later one is that attacker, with no client method replaced. Nothing listens on `REBOUND`
(127.0.0.2): a client that resolved again fails to connect; one that connects to the checked
address reaches the server, and the server sees the original host name in `Host`.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Awaitable, Callable
from typing import Any

from tests.support.http_tool_server import HttpToolServer
from tests.support.mcp_server import McpTestServer
from tests.support.wire import resolved

from ordo.tools import build_executor

NAME = "tools.rebind.test"
CHECKED = "127.0.0.1"
REBOUND = "127.0.0.2"


class RebindingLoop(asyncio.SelectorEventLoop):
    """An event loop whose resolver answers `CHECKED` for the first lookup of `NAME` and
    `REBOUND` for every later one (other names resolve as usual)."""

    def __init__(self) -> None:
        super().__init__()
        self.lookups = 0

    async def getaddrinfo(  # type: ignore[override]
        self,
        host: Any,
        port: Any,
        *,
        family: int = 0,
        type: int = 0,
        proto: int = 0,
        flags: int = 0,
    ) -> list[tuple[Any, ...]]:
        if host != NAME:
            return await super().getaddrinfo(
                host, port, family=family, type=type, proto=proto, flags=flags
            )
        self.lookups += 1
        address = CHECKED if self.lookups == 1 else REBOUND
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, int(port)))]


def run_rebinding(main: Callable[[], Awaitable[Any]]) -> tuple[Any, int]:
    """`main()` on a RebindingLoop; its result and how many lookups of NAME there were."""
    loops: list[RebindingLoop] = []

    def factory() -> RebindingLoop:
        loops.append(RebindingLoop())
        return loops[-1]

    with asyncio.Runner(loop_factory=factory) as runner:
        result = runner.run(main())
    return result, loops[0].lookups


def test_an_mcp_call_goes_to_the_checked_address() -> None:
    with McpTestServer(host_names=(NAME,)) as server:
        url = f"http://{NAME}:{server.port}/mcp"
        tool = build_executor(resolved("echo", {"type": "mcp", "mcp": {"url": url}}))

        async def call() -> Any:
            return await tool({"text": "pinned"})

        out, lookups = run_rebinding(call)
        assert (out.content, out.is_error) == ("pinned", False)
        assert server.calls["echo"] == 1
        assert set(server.hosts) == {f"{NAME}:{server.port}"}
    assert lookups == 1  # resolved once, by the guard


def test_an_mcp_listing_goes_to_the_checked_address() -> None:
    with McpTestServer(host_names=(NAME,)) as server:
        url = f"http://{NAME}:{server.port}/mcp"
        tool = build_executor(resolved("add", {"type": "mcp", "mcp": {"url": url}}))
        described, lookups = run_rebinding(tool.describe)  # type: ignore[attr-defined]
    assert described[0] == "Add two integers."
    assert lookups == 1


def test_an_http_call_goes_to_the_checked_address() -> None:
    with HttpToolServer() as server:
        url = f"http://{NAME}:{server.port}/echo"
        tool = build_executor(resolved("echo", {"type": "http", "http": {"url": url}}))

        async def call() -> Any:
            return await tool({"q": "pinned"})

        out, lookups = run_rebinding(call)
    assert json.loads(out.content)["host"] == f"{NAME}:{server.port}"
    assert lookups == 1
