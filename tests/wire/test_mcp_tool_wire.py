"""The mcp tool against an MCP server built with the `mcp` SDK, over streamable HTTP."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Annotated, Any

import pytest
from mcp.server.mcpserver import MCPServer
from pydantic import Field
from tests.support.mcp_server import McpTestServer
from tests.support.openai_server import OpenAIServer
from tests.support.wire import CANARY, calls, endpoint, resolved, run_config, text

from ordo.engine.loop import run_agent
from ordo.engine.tooling import ToolFailure
from ordo.errors import InvalidSchema
from ordo.providers import build_model_client
from ordo.tools import binding, build_executor
from ordo.tools.mcp import McpToolExecutor, McpToolNotFound

TOKEN = "mcp-token"


def mcp_tool(server: McpTestServer, name: str, **mcp: Any) -> Any:
    spec: dict[str, Any] = {"type": "mcp", "mcp": {"url": server.url, **mcp}, "timeout": "5s"}
    return resolved(name, spec, secret=TOKEN)


async def test_describe_reads_the_servers_tool_list(mcp_server: McpTestServer) -> None:
    executor = build_executor(mcp_tool(mcp_server, "add"))
    assert isinstance(executor, McpToolExecutor)
    description, schema = await executor.describe()
    assert description == "Add two integers."
    assert schema["type"] == "object" and set(schema["required"]) == {"a", "b"}
    assert mcp_server.calls["add"] == 0  # listing is not calling


async def test_binding_takes_schema_from_the_server_unless_the_tool_sets_one(
    mcp_server: McpTestServer,
) -> None:
    remote = await binding(mcp_tool(mcp_server, "echo"))
    assert remote.description == "Echo the text back."
    assert remote.parameters["properties"]["text"]["type"] == "string"
    own_schema = {"type": "object", "properties": {"text": {"type": "string", "maxLength": 5}}}
    local = await binding(
        resolved(
            "echo",
            {
                "type": "mcp",
                "description": "mine",
                "inputSchema": own_schema,
                "mcp": {"url": mcp_server.url},
            },
            secret=TOKEN,
        )
    )
    assert (local.description, local.parameters) == ("mine", own_schema)


async def test_call_returns_text_and_sends_the_bearer_token(mcp_server: McpTestServer) -> None:
    out = await build_executor(mcp_tool(mcp_server, "sum", toolName="add"))({"a": 2, "b": 40})
    assert (out.content, out.is_error) == ("42", False)
    assert mcp_server.calls["add"] == 1
    assert mcp_server.auth_headers and set(mcp_server.auth_headers) == {f"Bearer {TOKEN}"}


async def test_tool_error_is_an_error_result(mcp_server: McpTestServer) -> None:
    out = await build_executor(mcp_tool(mcp_server, "fail"))({"reason": "disk full"})
    assert out.is_error and "disk full" in out.content
    assert mcp_server.calls["fail"] == 1


async def test_non_text_blocks_are_named_not_forwarded(mcp_server: McpTestServer) -> None:
    out = await build_executor(mcp_tool(mcp_server, "image"))({})
    assert out.content == "[image content omitted]\na caption"


async def test_a_tool_the_server_does_not_list_fails_to_describe(
    mcp_server: McpTestServer,
) -> None:
    executor = build_executor(mcp_tool(mcp_server, "nope"))
    assert isinstance(executor, McpToolExecutor)
    with pytest.raises(McpToolNotFound, match=r"'nope'.*add, big, echo, fail, image, slow"):
        await executor.describe()


async def test_wrong_token_is_a_tool_failure(mcp_server: McpTestServer) -> None:
    spec = {"type": "mcp", "mcp": {"url": mcp_server.url}}
    with pytest.raises(ToolFailure) as caught:
        await build_executor(resolved("echo", spec, secret="wrong"))({"text": "x"})
    assert "wrong" not in str(caught.value)
    assert mcp_server.calls["echo"] == 0


async def test_unreachable_server_is_a_tool_failure() -> None:
    spec = {"type": "mcp", "mcp": {"url": "http://127.0.0.1:1/mcp"}}
    with pytest.raises(ToolFailure, match="ConnectError"):
        await build_executor(resolved("echo", spec))({"text": "x"})


async def test_metadata_address_is_refused() -> None:
    spec = {"type": "mcp", "mcp": {"url": "http://169.254.169.254/mcp"}}
    with pytest.raises(ToolFailure, match="refused"):
        await build_executor(resolved("echo", spec))({"text": "x"})


async def test_engine_calls_an_mcp_tool_once(
    mcp_server: McpTestServer, openai_server: Callable[..., OpenAIServer]
) -> None:
    model = openai_server(
        [
            calls({"name": "echo", "arguments": {"text": "hello mcp"}, "id": "call_m1"}),
            calls({"name": "echo", "arguments": {"text": "again"}, "id": "call_m2"}),
            text("echoed"),
        ]
    )
    tool = await binding(mcp_tool(mcp_server, "echo"))
    client = build_model_client(endpoint("openai", model.url + "/v1"), CANARY)
    result = await run_agent(run_config(["echo"], on_tool_denied="ReturnError"), client, [tool])
    assert result.phase == "Succeeded" and model.count == 3
    assert mcp_server.calls["echo"] == 1  # the second call of a used tool is rejected
    messages = model.requests[1].body["messages"]
    assert messages[-1] == {"role": "tool", "tool_call_id": "call_m1", "content": "hello mcp"}
    assert model.requests[0].body["tools"][0]["function"]["parameters"]["required"] == ["text"]
    assert "tools" not in model.requests[1].body
    assert [r.reason for r in result.tool_calls][-1] == "AlreadyCalled"


class BadSchemaServer(McpTestServer):
    """The test server plus tools whose listed inputSchema ordo must refuse."""

    def _build(self) -> MCPServer:
        mcp = super()._build()

        @mcp.tool(description="Its pattern needs a backreference (RE2 cannot compile it).")
        def backref(text: Annotated[str, Field(json_schema_extra={"pattern": "(a)\\1"})]) -> str:
            self._count("backref")
            return text

        @mcp.tool(description="Its schema is not a valid JSON Schema.")
        def objekt(text: Annotated[str, Field(json_schema_extra={"type": "objekt"})]) -> str:
            self._count("objekt")
            return text

        return mcp


@pytest.fixture
def bad_schema_server() -> Iterator[BadSchemaServer]:
    with BadSchemaServer(require_token=TOKEN) as server:
        yield server


@pytest.mark.parametrize(
    ("name", "where"),
    [("backref", "$.properties.text.pattern"), ("objekt", "$.properties.text.type")],
)
async def test_a_listed_schema_ordo_cannot_use_is_refused_naming_the_tool(
    bad_schema_server: BadSchemaServer, name: str, where: str
) -> None:
    resolved_tool = mcp_tool(bad_schema_server, name)
    with pytest.raises(InvalidSchema) as caught:
        await binding(resolved_tool)  # the binding takes the server's schema: not offered
    message = str(caught.value)
    assert f"tool {name!r}" in message and where in message
    assert "(a)" not in message and "objekt" not in message.replace(f"{name!r}", "")
    assert caught.value.reason == "InvalidSpec"
    assert bad_schema_server.calls[name] == 0
    # The server's good tools are still usable, and a Tool that sets its own schema is too.
    assert (await binding(mcp_tool(bad_schema_server, "echo"))).parameters["required"] == ["text"]
    own = {"type": "object", "properties": {"text": {"type": "string"}}}
    spec = {
        "type": "mcp",
        "inputSchema": own,
        "description": "mine",
        "mcp": {"url": bad_schema_server.url},
    }
    assert (await binding(resolved(name, spec, secret=TOKEN))).parameters == own
