"""The anthropic provider over real HTTP: the system parameter, tool_use blocks, one user
message of tool_result blocks per step, max_tokens, usage, structured output by forced tool."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tests.support.anthropic_server import AnthropicServer
from tests.support.http_tool_server import HttpToolServer
from tests.support.wire import CANARY, calls, endpoint, resolved, run_config, text

from ordo.engine.loop import run_agent
from ordo.engine.model import ModelRequest, ToolDefinition
from ordo.engine.transcript import (
    AssistantMessage,
    SystemMessage,
    ToolCall,
    ToolResult,
    UserMessage,
)
from ordo.providers import build_model_client
from ordo.providers.anthropic_provider import OUTPUT_TOOL, split_system
from ordo.tools import binding

SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}


async def http_tools(server: HttpToolServer, *names: str) -> list[Any]:
    return [
        await binding(
            resolved(
                name,
                {
                    "type": "http",
                    "description": f"the {name} tool",
                    "inputSchema": SCHEMA,
                    "http": {"url": server.url + "/echo"},
                },
            )
        )
        for name in names
    ]


async def test_engine_round_trip_over_messages(
    anthropic_server: Callable[..., AnthropicServer], http_tool_server: HttpToolServer
) -> None:
    model = anthropic_server(
        [
            {
                "text": "Let me look.",
                **calls(
                    {"name": "web-search", "arguments": {"q": "a"}, "id": "toolu_A"},
                    {"name": "lookup", "arguments": {"q": "b"}, "id": "toolu_B"},
                ),
                "usage": {"input_tokens": 100, "output_tokens": 20},
            },
            {**text("all done"), "usage": {"input_tokens": 150, "output_tokens": 7}},
        ]
    )
    client = build_model_client(endpoint("anthropic", model.url), CANARY)
    result = await run_agent(
        run_config(["web-search", "lookup"], system="SYSTEM PROMPT", user="question"),
        client,
        await http_tools(http_tool_server, "web-search", "lookup"),
    )
    assert (result.phase, result.output, result.step) == ("Succeeded", "all done", 2)
    assert model.count == 2 and http_tool_server.count == 2
    assert result.usage.to_dict() == {"inputTokens": 250, "outputTokens": 27, "totalTokens": 277}

    first, second = model.requests
    for request in model.requests:
        assert request.path == "/v1/messages"
        # The key goes as x-api-key or (recent SDKs) Authorization: Bearer.
        assert model.presented_key_of(request) == CANARY
        assert "anthropic-version" in request.headers
        assert request.body["model"] == "claude-test"
        assert request.body["max_tokens"] == 1024  # the default when options.maxTokens is unset
        assert request.body["system"] == "SYSTEM PROMPT"  # the system parameter, not a message
        assert all(m["role"] != "system" for m in request.body["messages"])
    assert first.body["messages"] == [{"role": "user", "content": "question"}]
    assert [t["name"] for t in first.body["tools"]] == ["web-search", "lookup"]
    assert first.body["tools"][0] == {
        "name": "web-search",
        "description": "the web-search tool",
        "input_schema": SCHEMA,
    }
    assert "tools" not in second.body  # both tools were used
    _user, assistant, results = second.body["messages"]
    assert assistant == {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "toolu_A", "name": "web-search", "input": {"q": "a"}},
            {"type": "tool_use", "id": "toolu_B", "name": "lookup", "input": {"q": "b"}},
        ],
    }
    # Both results in ONE user message, in call order, each with its tool_use_id.
    assert results["role"] == "user"
    assert [b["type"] for b in results["content"]] == ["tool_result", "tool_result"]
    assert [b["tool_use_id"] for b in results["content"]] == ["toolu_A", "toolu_B"]
    assert json.loads(results["content"][0]["content"])["json"] == {"q": "a"}


def test_split_system_merges_results_and_marks_errors() -> None:
    system, messages = split_system(
        [
            SystemMessage("one"),
            SystemMessage("two"),
            UserMessage("hi"),
            AssistantMessage("", (ToolCall("t1", "a", None, "{bad"), ToolCall("t2", "b", {}))),
            ToolResult("t1", "a", "error: bad arguments", True),
            ToolResult("t2", "b", "ok"),
            AssistantMessage("final"),
        ]
    )
    assert system == "one\n\ntwo"
    assert messages == [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "t1", "name": "a", "input": {}},
                {"type": "tool_use", "id": "t2", "name": "b", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "content": "error: bad arguments",
                    "is_error": True,
                },
                {"type": "tool_result", "tool_use_id": "t2", "content": "ok"},
            ],
        },
        {"role": "assistant", "content": "final"},
    ]


async def test_structured_output_by_forced_tool(
    anthropic_server: Callable[..., AnthropicServer],
) -> None:
    schema = {"type": "object", "properties": {"severity": {"enum": ["low", "high"]}}}
    model = anthropic_server([{"json": {"severity": "high"}}])
    client = build_model_client(endpoint("anthropic", model.url), CANARY)
    result = await run_agent(run_config([], output_schema=schema), client, [])
    assert result.phase == "Succeeded" and result.structured_output == {"severity": "high"}
    body = model.requests[0].body
    assert body["tool_choice"] == {"type": "tool", "name": OUTPUT_TOOL}
    assert body["tools"][-1]["name"] == OUTPUT_TOOL
    assert body["tools"][-1]["input_schema"] == schema


async def test_structured_output_with_tools_on_offer_uses_tool_choice_any(
    anthropic_server: Callable[..., AnthropicServer], http_tool_server: HttpToolServer
) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    model = anthropic_server([calls(("lookup", {"q": "x"})), {"json": {"n": 3}}])
    client = build_model_client(endpoint("anthropic", model.url), CANARY)
    result = await run_agent(
        run_config(["lookup"], output_schema=schema),
        client,
        await http_tools(http_tool_server, "lookup"),
    )
    assert result.structured_output == {"n": 3} and model.count == 2
    first, second = model.requests
    assert first.body["tool_choice"] == {"type": "any"}
    assert [t["name"] for t in first.body["tools"]] == ["lookup", OUTPUT_TOOL]
    assert second.body["tool_choice"] == {"type": "tool", "name": OUTPUT_TOOL}
    # The answer tool is never part of the transcript sent back.
    assert OUTPUT_TOOL not in json.dumps(second.body["messages"])


async def test_options_base_url_with_v1_and_extra_body(
    anthropic_server: Callable[..., AnthropicServer],
) -> None:
    model = anthropic_server([text("hi")])
    client = build_model_client(
        endpoint(
            "anthropic",
            model.url + "/v1/",
            options={"maxTokens": 64, "temperature": 0.1, "topP": 0.5},
            extraBody={"metadata": {"user_id": "u-1"}},
        ),
        CANARY,
    )
    request = ModelRequest(
        [SystemMessage("s"), UserMessage("u")], (ToolDefinition("t", "", {"type": "object"}),)
    )
    assert (await client.complete(request)).text == "hi"
    body = model.requests[0].body
    assert model.requests[0].path == "/v1/messages"
    assert (body["max_tokens"], body["temperature"], body["top_p"]) == (64, 0.1, 0.5)
    assert body["metadata"] == {"user_id": "u-1"}
    assert body["tools"] == [{"name": "t", "input_schema": {"type": "object"}}]


async def test_cache_tokens_count_as_input(
    anthropic_server: Callable[..., AnthropicServer],
) -> None:
    raw = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [{"type": "text", "text": "cached"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 5,
            "output_tokens": 2,
            "cache_creation_input_tokens": 10,
            "cache_read_input_tokens": 20,
        },
    }
    model = anthropic_server([{"body": json.dumps(raw)}])
    client = build_model_client(endpoint("anthropic", model.url), CANARY)
    response = await client.complete(ModelRequest([UserMessage("u")], ()))
    assert (response.usage.input_tokens, response.usage.output_tokens) == (35, 2)
    assert response.finish_reason == "end_turn"
