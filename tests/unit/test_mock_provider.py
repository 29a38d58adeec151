"""The `mock` provider: scripted turns from the ModelEndpoint, a documented default when
unscripted, token usage estimated like a real provider."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import jsonschema
import pytest

from ordo.api import ModelEndpoint
from ordo.engine.model import ModelRequest, ToolDefinition
from ordo.engine.transcript import AssistantMessage, SystemMessage, ToolResult, Usage, UserMessage
from ordo.providers import build_model_client
from ordo.providers.mock import MockModelClient, estimate_tokens, sample
from ordo.runtime import Prepared, execute
from support.engine_fakes import (
    DictStore,
    ModelFactory,
    agent,
    assert_one_result_per_call,
    memory,
    mock_endpoint,
    mock_tool,
    task,
    turn_calls,
)


def client(turns: list[dict[str, Any]] | None = None, **spec: Any) -> MockModelClient:
    return MockModelClient(ModelEndpoint.model_validate(mock_endpoint(turns=turns, **spec)))


def request(
    *history: Any, tools: tuple[ToolDefinition, ...] = (), schema: Any = None
) -> ModelRequest:
    items = [SystemMessage("sys"), UserMessage("hello"), *history]
    return ModelRequest(items=items, tools=tools, output_schema=schema)


SEARCH = ToolDefinition(
    "search",
    "search the web",
    {"type": "object", "properties": {"q": {"type": "string", "minLength": 10}}, "required": ["q"]},
)
FETCH = ToolDefinition(
    "fetch",
    "fetch a page",
    {"type": "object", "properties": {"n": {"type": "integer", "minimum": 3}}},
)
MEM = ToolDefinition("memory_write", "write", {"type": "object", "properties": {}})


def test_build_model_client_picks_the_mock() -> None:
    endpoint = ModelEndpoint.model_validate(mock_endpoint(model="mock-7"))
    c = build_model_client(endpoint, None)
    assert isinstance(c, MockModelClient)
    assert (c.provider, c.model) == ("mock", "mock-7")
    assert client().model == "mock"  # no model set


async def test_turn_n_answers_the_nth_call_counted_from_history() -> None:
    c = client([turn_calls(("search", {"q": "x"}), text="looking"), {"text": "final"}])
    first = await c.complete(request(tools=(SEARCH,)))
    assert first.text == "looking"
    assert [(t.id, t.name, t.arguments) for t in first.tool_calls] == [
        ("call_1_0", "search", {"q": "x"})
    ]
    assert json.loads(first.tool_calls[0].raw_arguments) == {"q": "x"}
    assert first.finish_reason == "tool_calls"
    # the turn index comes from the history, not from how often this client was called:
    second = await client([turn_calls(("search", {"q": "x"})), {"text": "final"}]).complete(
        request(AssistantMessage("", first.tool_calls), ToolResult("call_1_0", "search", "r"))
    )
    assert (second.text, second.tool_calls, second.finish_reason) == ("final", (), "stop")


async def test_call_ids_are_unique_per_turn_and_position() -> None:
    c = client([turn_calls(("a", {}), ("b", {}))])
    response = await c.complete(request())
    assert [t.id for t in response.tool_calls] == ["call_1_0", "call_1_1"]
    assert [t.arguments for t in response.tool_calls] == [{}, {}]


async def test_scripted_tool_call_without_arguments_gets_an_empty_object() -> None:
    c = client([{"toolCalls": [{"tool": "a"}]}])
    (tc,) = (await c.complete(request())).tool_calls
    assert (tc.arguments, tc.raw_arguments) == ({}, "{}")


async def test_requests_are_recorded() -> None:
    c = client([{"text": "hi"}])
    req = request(tools=(SEARCH,))
    await c.complete(req)
    assert c.requests == [req]


async def test_scripted_usage_overrides_the_estimate() -> None:
    c = client([{"text": "hi", "usage": {"inputTokens": 1000, "outputTokens": 7}}])
    assert (await c.complete(request())).usage == Usage(1000, 7)
    partial = client([{"text": "hi", "usage": {"outputTokens": 7}}])
    usage = (await partial.complete(request())).usage
    assert usage.output_tokens == 7 and usage.input_tokens > 0


async def test_usage_is_estimated_from_characters() -> None:
    c = client([{"text": "x" * 40}])
    req = request(tools=(SEARCH,))
    usage = (await c.complete(req)).usage
    assert usage.output_tokens == 10
    prompt_chars = len("sys") + len("hello") + len("search") + len("search the web")
    prompt_chars += len(json.dumps(SEARCH.parameters))
    assert usage.input_tokens == -(-prompt_chars // 4)
    assert estimate_tokens("") == 0 and estimate_tokens("abcde") == 2


async def test_more_history_costs_more_input_tokens() -> None:
    c = client()
    short = (await c.complete(request())).usage.input_tokens
    longer = (await c.complete(request(AssistantMessage("y" * 400)))).usage.input_tokens
    assert longer >= short + 100


async def test_delay_is_a_cancellable_wait() -> None:
    c = client([{"text": "late", "delay": "10s"}])
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await c.complete(request())


# --------------------------------------------------------------------------------------
# Default behaviour (no script, or script used up)


async def test_default_calls_every_offered_tool_once_with_schema_valid_arguments() -> None:
    c = client()
    response = await c.complete(request(tools=(SEARCH, FETCH, MEM)))
    assert [t.name for t in response.tool_calls] == ["search", "fetch"]  # never memory_*
    for definition, tc in zip((SEARCH, FETCH), response.tool_calls, strict=True):
        assert tc.arguments is not None
        jsonschema.validate(tc.arguments, definition.parameters)
        assert json.loads(tc.raw_arguments) == tc.arguments


async def test_default_then_answers_naming_the_tools_it_used() -> None:
    c = client()
    history = (
        AssistantMessage("", ()),
        ToolResult("call_1_0", "search", "r1"),
        ToolResult("call_1_1", "fetch", "r2"),
    )
    response = await c.complete(request(*history, tools=(SEARCH, FETCH, MEM)))
    assert response.tool_calls == ()
    assert response.text == "Done. I used fetch, search."


async def test_default_without_tools_answers_done() -> None:
    assert (await client().complete(request())).text == "Done."


async def test_default_answers_json_matching_the_output_schema() -> None:
    schema = {
        "type": "object",
        "properties": {
            "category": {"type": "string", "enum": ["billing", "other"]},
            "score": {"type": "integer", "minimum": 3},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2},
            "ok": {"type": "boolean"},
        },
        "required": ["category", "score", "tags", "ok"],
        "additionalProperties": False,
    }
    response = await client().complete(request(schema=schema))
    jsonschema.validate(json.loads(response.text), schema)


async def test_default_takes_over_when_the_script_is_used_up() -> None:
    c = client([{"text": "only turn"}])
    history = (AssistantMessage("only turn"),)
    response = await c.complete(request(*history, tools=(SEARCH,)))
    assert [t.name for t in response.tool_calls] == ["search"]
    assert response.tool_calls[0].id == "call_2_0"


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "minLength": 12},
        {"type": "number", "minimum": 2.5},
        {"type": ["null", "integer"]},
        {"const": "fixed"},
        {"enum": ["a", "b"]},
        {
            "type": "object",
            "properties": {"a": {"type": "object", "properties": {"b": {"type": "boolean"}}}},
        },
        {"type": "array", "items": {"type": "integer"}, "minItems": 3},
    ],
)
def test_sample_satisfies_common_schemas(schema: dict[str, Any]) -> None:
    jsonschema.validate(sample(schema), schema)


# --------------------------------------------------------------------------------------
# Through the engine


async def test_unscripted_mock_exercises_the_tools_then_answers() -> None:
    store = DictStore(
        agent(tools=["search", "fetch"]),
        mock_endpoint(),
        mock_tool(
            "search",
            inputSchema={
                "type": "object",
                "properties": {"q": {"type": "string"}},
                "required": ["q"],
            },
        ),
        mock_tool("fetch"),
    )
    factory = ModelFactory(lambda s: MockModelClient(s.endpoint))
    outcome = await execute(task(), store, model_factory=factory)
    assert outcome.phase == "Succeeded"
    assert outcome.result is not None
    assert outcome.result.output == "Done. I used fetch, search."
    assert factory.calls == 2
    records = outcome.status().to_dict()["toolCalls"]
    assert [(r["tool"], r["decision"], r["step"]) for r in records] == [
        ("search", "allowed", 1),
        ("fetch", "allowed", 1),
    ]
    assert outcome.status().to_dict()["usage"]["totalTokens"] > 0


async def test_unscripted_mock_with_memory_does_not_loop_on_builtins() -> None:
    store = DictStore(
        agent(tools=["search"], memory={"ref": "mem-unscripted"}),
        mock_endpoint(),
        mock_tool("search"),
        memory("mem-unscripted"),
    )
    outcome = await execute(task(), store, model_factory=lambda s: MockModelClient(s.endpoint))
    assert outcome.phase == "Succeeded"
    assert outcome.result is not None and outcome.result.step == 2


async def test_mock_continues_its_script_after_a_resume() -> None:
    """A resumed run continues the script where the history left off."""
    turns = [turn_calls(("search", {})), turn_calls(("fetch", {})), {"text": "third"}]
    store = DictStore(
        agent(tools=["search", "fetch"]),
        mock_endpoint(turns=turns),
        mock_tool("search"),
        mock_tool("fetch"),
    )
    first = await execute(
        task(limits={"maxSteps": 1}), store, model_factory=lambda s: MockModelClient(s.endpoint)
    )
    assert first.reason == "MaxStepsExceeded" and first.result is not None
    state = first.result.state
    factory = ModelFactory(lambda s: MockModelClient(s.endpoint))

    async def prepare(snapshot: Any) -> Prepared:
        return Prepared(state=state)

    resumed = await execute(task(), store, prepare=prepare, model_factory=factory)
    assert resumed.phase == "Succeeded"
    assert resumed.result is not None and resumed.result.output == "third"
    assert factory.calls == 2
    assert_one_result_per_call(resumed.result.state)


async def test_timeout_with_a_slow_mock_turn() -> None:
    store = DictStore(
        agent(limits={"timeout": "200ms"}), mock_endpoint(turns=[{"text": "slow", "delay": "30s"}])
    )
    factory = ModelFactory(lambda s: MockModelClient(s.endpoint))
    outcome = await execute(task(), store, model_factory=factory)
    assert (outcome.phase, outcome.reason) == ("Failed", "Timeout")
    assert factory.calls == 1
    assert outcome.status().to_dict()["step"] == 1


async def test_task_timeout_narrows_the_agents() -> None:
    store = DictStore(agent(), mock_endpoint(turns=[{"text": "slow", "delay": "30s"}]))
    outcome = await execute(
        task(limits={"timeout": "200ms"}),
        store,
        model_factory=lambda s: MockModelClient(s.endpoint),
    )
    assert outcome.reason == "Timeout"


async def test_token_budget_with_scripted_usage_smallest_limit_applies() -> None:
    turns = [
        {"toolCalls": [{"tool": "search"}], "usage": {"inputTokens": 40, "outputTokens": 0}},
        {"toolCalls": [{"tool": "fetch"}], "usage": {"inputTokens": 40, "outputTokens": 0}},
        {"text": "done", "usage": {"inputTokens": 40, "outputTokens": 0}},
    ]
    objs = [
        agent(tools=["search", "fetch"], limits={"maxTokens": 1000}),
        mock_endpoint(turns=turns),
        mock_tool("search"),
        mock_tool("fetch"),
    ]

    async def run(t: Any, *extra: dict[str, Any]) -> tuple[str, int]:
        factory = ModelFactory(lambda s: MockModelClient(s.endpoint))
        outcome = await execute(t, DictStore(*objs, *extra), model_factory=factory)
        return outcome.reason, factory.calls

    from support.engine_fakes import policy

    assert await run(task()) == ("Succeeded", 3)
    assert await run(task(limits={"maxTokens": 100})) == ("TokenBudgetExceeded", 3)
    assert await run(task(limits={"maxTokens": 79})) == ("TokenBudgetExceeded", 2)
    assert await run(task(), policy("cap", maxTokensPerTask=39)) == ("TokenBudgetExceeded", 1)
    assert await run(task(limits={"maxTokens": 100}), policy("cap", maxTokensPerTask=500)) == (
        "TokenBudgetExceeded",
        3,
    )


async def test_recorded_requests_show_the_history_as_it_was_sent() -> None:
    store = DictStore(
        agent(tools=["search"]),
        mock_endpoint(turns=[turn_calls(("search", {})), {"text": "ok"}]),
        mock_tool("search"),
    )
    factory = ModelFactory(lambda s: MockModelClient(s.endpoint))
    await execute(task(), store, model_factory=factory)
    (model,) = factory.models
    assert [len(r.items) for r in model.requests] == [2, 4]
    assert [[t.name for t in r.tools] for r in model.requests] == [["search"], []]
