"""An MCP server that lists a tool whose inputSchema costs more to evaluate than ordo's bound
(issue 23): the tool is not offered, InvalidSchema names it and the subschema, nothing is
called, and the check does not hold the event loop."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any

import pytest
from mcp.server.mcpserver import MCPServer
from pydantic import Field
from tests.support.mcp_server import McpTestServer
from tests.support.stall import StallWatchdog
from tests.support.wire import resolved

from ordo.errors import InvalidSchema
from ordo.tools import binding

TOKEN = "mcp-token"


def branches(depth: int, width: int) -> dict[str, Any]:
    """`anyOf` x`width`, `depth` levels deep, with `unevaluatedProperties: false` at each."""
    schema: dict[str, Any] = {"type": "object"}
    for _ in range(depth):
        schema = {"anyOf": [schema] * width, "unevaluatedProperties": False}
    return schema


class CostlySchemaServer(McpTestServer):
    """The test server plus a tool whose listed schema multiplies past the bound."""

    def _build(self) -> MCPServer:
        mcp = super()._build()

        @mcp.tool(description="Its argument's schema branches 3 ways, 4 levels deep.")
        def costly(
            query: Annotated[dict[str, Any], Field(json_schema_extra=branches(4, 3))],
        ) -> str:
            self._count("costly")
            return "ran"

        return mcp


@pytest.fixture
def costly_server() -> Iterator[CostlySchemaServer]:
    with CostlySchemaServer(require_token=TOKEN) as server:
        yield server


async def test_a_listed_schema_over_the_cost_bound_is_not_offered(
    costly_server: CostlySchemaServer,
) -> None:
    spec: dict[str, Any] = {"type": "mcp", "mcp": {"url": costly_server.url}, "timeout": "5s"}
    async with StallWatchdog() as dog:
        with pytest.raises(InvalidSchema) as caught:
            await binding(resolved("costly", spec, secret=TOKEN))
    assert dog.longest < 1.0, dog.report()
    message = str(caught.value)
    assert "tool 'costly'" in message and "(at $.properties.query)" in message
    assert caught.value.reason == "InvalidSpec"
    assert costly_server.calls["costly"] == 0
