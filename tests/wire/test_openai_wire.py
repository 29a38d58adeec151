"""The openai-family providers over real HTTP: request mapping, the full engine loop with real
tool executors, structured output, Azure and keyless endpoints."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tests.support.http_tool_server import HttpToolServer
from tests.support.openai_server import OpenAIServer
from tests.support.wire import CANARY, calls, endpoint, resolved, run_config, text

from ordo.engine.loop import run_agent
from ordo.engine.model import ModelRequest, ToolDefinition
from ordo.engine.sanitize import normalise_response
from ordo.engine.transcript import (
    AssistantMessage,
    SystemMessage,
    ToolCall,
    ToolResult,
    UserMessage,
)
from ordo.providers import build_model_client
from ordo.providers.openai_provider import OpenAIModelClient, parse_arguments
from ordo.tools import binding

SEARCH_SCHEMA = {
    "type": "object",
    "properties": {"q": {"type": "string"}},
    "required": ["q"],
    "additionalProperties": False,
}


async def http_tools(server: HttpToolServer, *names: str) -> list[Any]:
    return [
        await binding(
            resolved(
                name,
                {
                    "type": "http",
                    "description": f"the {name} tool",
                    "inputSchema": SEARCH_SCHEMA,
                    "http": {"url": server.url + "/echo"},
                    "timeout": "5s",
                },
            )
        )
        for name in names
    ]


async def test_engine_round_trip_over_chat_completions(
    openai_server: Callable[..., OpenAIServer], http_tool_server: HttpToolServer
) -> None:
    model = openai_server(
        [
            {
                **calls({"name": "web-search", "arguments": {"q": "ordo"}, "id": "call_abc"}),
                "usage": {"input_tokens": 11, "output_tokens": 3},
            },
            {
                **calls({"name": "lookup", "arguments": {"q": "kopf"}, "id": "call_def"}),
                "usage": {"input_tokens": 23, "output_tokens": 4},
            },
            {**text("final answer"), "usage": {"input_tokens": 40, "output_tokens": 5}},
        ]
    )
    client = build_model_client(endpoint("openai", model.url + "/v1"), CANARY)
    tools = await http_tools(http_tool_server, "web-search", "lookup")
    result = await run_agent(
        run_config(["web-search", "lookup"], system="SYSTEM PROMPT", user="find things"),
        client,
        tools,
    )

    assert (result.phase, result.reason, result.output) == (
        "Succeeded",
        "Succeeded",
        "final answer",
    )
    assert result.step == 3 and model.count == 3 and http_tool_server.count == 2
    assert result.usage.to_dict() == {"inputTokens": 74, "outputTokens": 12, "totalTokens": 86}

    first, second, third = model.requests
    for request in model.requests:
        assert request.path == "/v1/chat/completions"
        assert request.headers["Authorization"] == f"Bearer {CANARY}"
        assert request.body["model"] == "gpt-test"
    # The system prompt is the first message, the user input the second.
    assert first.body["messages"] == [
        {"role": "system", "content": "SYSTEM PROMPT"},
        {"role": "user", "content": "find things"},
    ]
    # The shrinking tool list: each used tool is no longer offered; no tools, no `tools` key.
    assert [t["function"]["name"] for t in first.body["tools"]] == ["web-search", "lookup"]
    assert first.body["tools"][0] == {
        "type": "function",
        "function": {
            "name": "web-search",
            "description": "the web-search tool",
            "parameters": SEARCH_SCHEMA,
        },
    }
    assert [t["function"]["name"] for t in second.body["tools"]] == ["lookup"]
    assert "tools" not in third.body
    # tool_call_id round trip: assistant tool_calls, then a role tool message with the same id.
    assistant, tool_message = second.body["messages"][2:4]
    assert assistant == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_abc",
                "type": "function",
                "function": {"name": "web-search", "arguments": '{"q": "ordo"}'},
            }
        ],
    }
    assert tool_message["role"] == "tool" and tool_message["tool_call_id"] == "call_abc"
    assert json.loads(tool_message["content"])["json"] == {"q": "ordo"}
    assert [m["role"] for m in third.body["messages"]] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
    ]
    assert third.body["messages"][5]["tool_call_id"] == "call_def"


async def test_two_calls_in_one_response_get_two_tool_messages_in_order(
    openai_server: Callable[..., OpenAIServer], http_tool_server: HttpToolServer
) -> None:
    model = openai_server(
        [
            calls(
                {"name": "a", "arguments": {"q": "1"}, "id": "call_1"},
                {"name": "b", "arguments": {"q": "2"}, "id": "call_2"},
            ),
            text("done"),
        ]
    )
    client = build_model_client(endpoint("openai-compatible", model.url + "/v1"), None)
    result = await run_agent(
        run_config(["a", "b"]), client, await http_tools(http_tool_server, "a", "b")
    )
    assert result.phase == "Succeeded" and model.count == 2 and http_tool_server.count == 2
    messages = model.requests[1].body["messages"]
    assert [m.get("tool_call_id") for m in messages[3:5]] == ["call_1", "call_2"]
    assert [c["id"] for c in messages[2]["tool_calls"]] == ["call_1", "call_2"]


def _request(**kw: Any) -> ModelRequest:
    return ModelRequest(
        items=[SystemMessage("sys"), UserMessage("hi")],
        tools=(ToolDefinition("t", "d", {"type": "object", "properties": {}}),),
        **kw,
    )


async def test_options_extra_body_and_structured_output_for_openai(
    openai_server: Callable[..., OpenAIServer],
) -> None:
    model = openai_server([{"json": {"answer": 42}}])
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "integer"}},
        "required": ["answer"],
    }
    client = build_model_client(
        endpoint(
            "openai",
            model.url + "/v1",
            options={"temperature": 0.5, "topP": 0.9, "maxTokens": 77},
            extraBody={"seed": 7, "metadata": {"team": "x"}},
        ),
        CANARY,
    )
    response = await client.complete(_request(output_schema=schema))
    assert json.loads(response.text) == {"answer": 42}
    body = model.requests[0].body
    assert body["temperature"] == 0.5 and body["top_p"] == 0.9
    assert body["max_completion_tokens"] == 77 and "max_tokens" not in body
    assert body["seed"] == 7 and body["metadata"] == {"team": "x"}
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": schema, "strict": False},
    }


async def test_structured_output_through_the_engine(
    openai_server: Callable[..., OpenAIServer],
) -> None:
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "integer"}},
        "required": ["answer"],
    }
    model = openai_server([{"json": {"answer": 42}}])
    client = build_model_client(endpoint("azure-openai", model.url), CANARY)
    result = await run_agent(run_config([], output_schema=schema), client, [])
    assert result.phase == "Succeeded" and result.structured_output == {"answer": 42}
    assert model.requests[0].body["response_format"]["json_schema"]["schema"] == schema


async def test_compatible_endpoints_get_max_tokens_and_no_response_format(
    openai_server: Callable[..., OpenAIServer],
) -> None:
    model = openai_server([text('{"answer": 1}'), text("ok")])
    schema = {"type": "object"}
    for provider in ("openai-compatible", "ollama"):
        client = build_model_client(
            endpoint(provider, model.url + "/v1", options={"maxTokens": 5}), None
        )
        await client.complete(_request(output_schema=schema))
    for request in model.requests:
        assert request.body["max_tokens"] == 5 and "max_completion_tokens" not in request.body
        assert "response_format" not in request.body
        # Keyless endpoints send no Authorization header at all.
        assert "Authorization" not in request.headers


async def test_azure_deployment_path_api_version_and_api_key_header(
    openai_server: Callable[..., OpenAIServer],
) -> None:
    model = openai_server([text("hello")])
    client = build_model_client(
        endpoint(
            "azure-openai",
            model.url,
            model="gpt-4o",
            options={"deployment": "prod-gpt4o", "apiVersion": "2024-06-01"},
        ),
        CANARY,
    )
    response = await client.complete(_request())
    assert response.text == "hello"
    request = model.requests[0]
    assert request.path == "/openai/deployments/prod-gpt4o/chat/completions"
    assert request.query == {"api-version": "2024-06-01"}
    assert request.headers["api-key"] == CANARY
    assert "Authorization" not in request.headers


async def test_keyed_compatible_endpoint_sends_bearer(
    openai_server: Callable[..., OpenAIServer],
) -> None:
    model = openai_server([text("x")], require_key="litellm-key")
    client = build_model_client(endpoint("openai-compatible", model.url + "/v1"), "litellm-key")
    assert (await client.complete(_request())).text == "x"
    assert model.requests[0].headers["authorization"] == "Bearer litellm-key"


async def test_transcript_mapping_keeps_raw_arguments_and_error_results(
    openai_server: Callable[..., OpenAIServer],
) -> None:
    model = openai_server([text("ok")])
    client = OpenAIModelClient(endpoint("openai", model.url + "/v1"), CANARY)
    items = [
        SystemMessage("s"),
        UserMessage("u"),
        AssistantMessage("thinking", (ToolCall("c1", "t", None, "{broken"),)),
        ToolResult("c1", "t", "error: the arguments are not a valid JSON object.", True),
        AssistantMessage("", (ToolCall("c2", "t", {"a": 1}, ""),)),
        ToolResult("c2", "t", "fine"),
    ]
    await client.complete(ModelRequest(items=items, tools=()))
    messages = model.requests[0].body["messages"]
    assert messages[2]["content"] == "thinking"
    assert messages[2]["tool_calls"][0]["function"]["arguments"] == "{broken"
    assert messages[3] == {
        "role": "tool",
        "tool_call_id": "c1",
        "content": "error: the arguments are not a valid JSON object.",
    }
    assert messages[4]["tool_calls"][0]["function"]["arguments"] == '{"a": 1}'


def test_parse_arguments() -> None:
    assert parse_arguments('{"a": 1}') == {"a": 1}
    assert parse_arguments("") == {}
    assert parse_arguments("  ") == {}
    assert parse_arguments("{bad") is None
    assert parse_arguments("[1, 2]") is None
    assert parse_arguments('"text"') is None


async def test_missing_ids_are_made_by_the_engine_and_usage_is_read(
    openai_server: Callable[..., OpenAIServer],
) -> None:
    raw = {
        "id": "x",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "", "type": "function", "function": {"name": "t", "arguments": ""}}
                    ],
                },
            }
        ],
        "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11},
    }
    model = openai_server([{"body": json.dumps(raw)}])
    client = build_model_client(endpoint("ollama", model.url + "/v1"), None)
    response = await client.complete(_request())
    assert response.tool_calls == (ToolCall("", "t", {}, ""),)
    assert (response.usage.input_tokens, response.usage.output_tokens) == (9, 2)
    assert not response.usage.estimated
    # The engine's normaliser gives the call an id unique across the run.
    normalised = normalise_response(response, step=3, seen_ids=set())
    assert normalised.tool_calls == (ToolCall("ordo_3_0", "t", {}, ""),)
    assert response.finish_reason == "tool_calls"
