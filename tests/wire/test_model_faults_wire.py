"""Fault cases over real HTTP, for both SDK families: each ends in the documented reason after
exactly the documented number of requests, counted by the server (docs/providers.md).

Endpoints here: retry.maxAttempts 3, backoff 10ms, timeout 5s unless the case says otherwise.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import pytest
from tests.support.anthropic_server import AnthropicServer
from tests.support.engine_fakes import DictStore, mock_tool, policy, task
from tests.support.engine_fakes import agent as fake_agent
from tests.support.engine_fakes import endpoint as fake_endpoint
from tests.support.http_tool_server import HttpToolServer
from tests.support.openai_server import OpenAIServer
from tests.support.scripted import ScriptedServer, Step
from tests.support.wire import CANARY, calls, endpoint, resolved, run_config, text

from ordo.engine.loop import run_agent
from ordo.engine.model import ModelError, ModelRequest, ModelUnavailable
from ordo.engine.state import RunResult
from ordo.engine.transcript import SystemMessage, UserMessage
from ordo.providers import build_model_client
from ordo.runtime.execute import execute
from ordo.tools import binding

PROVIDERS = ["openai", "anthropic"]
SCHEMA = {
    "type": "object",
    "properties": {"q": {"type": "string"}},
    "required": ["q"],
    "additionalProperties": False,
}


@dataclass
class Outcome:
    result: RunResult
    model: ScriptedServer
    tool_calls: int


def start_server(provider: str, script: list[Step]) -> ScriptedServer:
    cls = OpenAIServer if provider == "openai" else AnthropicServer
    return cls(script).start()


def model_endpoint(provider: str, server: ScriptedServer, **spec: Any) -> Any:
    base = server.url + "/v1" if provider == "openai" else server.url
    return endpoint(provider, base, **spec)


async def run(
    provider: str,
    script: list[Step],
    *,
    endpoint_spec: dict[str, Any] | None = None,
    **config: Any,
) -> Outcome:
    model = start_server(provider, script)
    try:
        with HttpToolServer() as tools_server:
            tool = await binding(
                resolved(
                    "lookup",
                    {
                        "type": "http",
                        "description": "look things up",
                        "inputSchema": SCHEMA,
                        "http": {"url": tools_server.url + "/echo"},
                    },
                )
            )
            client = build_model_client(
                model_endpoint(provider, model, **(endpoint_spec or {})), CANARY
            )
            result = await run_agent(run_config(["lookup"], **config), client, [tool])
            return Outcome(result, model, tools_server.count)
    finally:
        model.stop()


def reason(outcome: Outcome) -> tuple[str, int]:
    return outcome.result.reason, outcome.model.count


# -- retried: 429, 5xx, connection reset, slow responses -------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_429_with_retry_after_is_retried_after_the_wait(provider: str) -> None:
    out = await run(
        provider,
        [{"status": 429, "headers": {"Retry-After": "1"}}, text("ok")],
    )
    assert reason(out) == ("Succeeded", 2)
    first, second = out.model.requests
    assert second.time - first.time >= 0.9  # the server's Retry-After was honoured


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_429_until_attempts_run_out_is_model_unavailable(provider: str) -> None:
    out = await run(provider, [{"status": 429, "headers": {"Retry-After": "0"}}] * 5)
    assert reason(out) == ("ModelUnavailable", 3)
    assert "HTTP 429" in out.result.message and "3 attempt(s)" in out.result.message


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_retry_after_beyond_the_task_deadline_is_not_waited_for(provider: str) -> None:
    out = await run(provider, [{"status": 429, "headers": {"Retry-After": "60"}}], timeout=5.0)
    assert reason(out) == ("ModelUnavailable", 1)
    assert "deadline" in out.result.message


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_500_three_times_is_model_unavailable(provider: str) -> None:
    out = await run(provider, [{"status": 500}] * 5)
    assert reason(out) == ("ModelUnavailable", 3)
    assert "HTTP 500" in out.result.message


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_503_then_an_answer_succeeds(provider: str) -> None:
    out = await run(provider, [{"status": 503}, text("ok")])
    assert reason(out) == ("Succeeded", 2)
    assert out.result.output == "ok"


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_connection_reset_is_retried(provider: str) -> None:
    out = await run(provider, [{"reset": True}, text("ok")])
    assert reason(out) == ("Succeeded", 2)


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_connection_reset_until_attempts_run_out(provider: str) -> None:
    out = await run(provider, [{"reset": True}] * 5)
    assert reason(out) == ("ModelUnavailable", 3)
    assert "connection error" in out.result.message


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_response_slower_than_the_endpoint_timeout(provider: str) -> None:
    out = await run(
        provider,
        [{"delay": 2, "text": "late"}] * 5,
        endpoint_spec={"timeout": "300ms"},
    )
    assert reason(out) == ("ModelUnavailable", 3)
    assert "within 0.3s" in out.result.message


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_response_slower_than_the_task_deadline_is_timeout(provider: str) -> None:
    out = await run(provider, [{"delay": 3, "text": "late"}], timeout=0.5)
    assert reason(out) == ("Timeout", 1)


# -- not retried: other 4xx, unreadable responses --------------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("status", [400, 401, 403, 404, 408, 422])
async def test_other_4xx_is_model_error_without_retry(provider: str, status: int) -> None:
    out = await run(provider, [{"status": status}, text("never")])
    assert reason(out) == ("ModelError", 1)
    assert f"HTTP {status}" in out.result.message


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_wrong_key_401_is_model_error_once(provider: str) -> None:
    cls = OpenAIServer if provider == "openai" else AnthropicServer
    with cls([text("never")], require_key="the-right-key") as model:
        client = build_model_client(model_endpoint(provider, model), CANARY)
        result = await run_agent(run_config([]), client, [])
        assert (result.reason, model.count) == ("ModelError", 1)
        assert "HTTP 401" in result.message and CANARY not in result.message


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_unreadable_response_body_is_model_error(provider: str) -> None:
    out = await run(provider, [{"body": "this is not json", "status": 200}, text("never")])
    assert reason(out) == ("ModelError", 1)


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_retry_after_longer_than_the_cap_is_not_waited_for(provider: str) -> None:
    with (OpenAIServer if provider == "openai" else AnthropicServer)(
        [{"status": 503, "headers": {"Retry-After": "3600"}}, text("never")]
    ) as model:
        client = build_model_client(model_endpoint(provider, model), CANARY)
        request = ModelRequest([SystemMessage("s"), UserMessage("u")], ())
        with pytest.raises(ModelUnavailable, match="Retry-After 3600s"):
            await client.complete(request)
        assert model.count == 1


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_direct_call_raises_model_error_and_unavailable(provider: str) -> None:
    with (OpenAIServer if provider == "openai" else AnthropicServer)(
        [{"status": 400}, {"status": 502}, {"status": 502}]
    ) as model:
        client = build_model_client(
            model_endpoint(provider, model, retry={"maxAttempts": 2, "backoff": "10ms"}), CANARY
        )
        request = ModelRequest([SystemMessage("s"), UserMessage("u")], ())
        with pytest.raises(ModelError):
            await client.complete(request)
        with pytest.raises(ModelUnavailable):
            await client.complete(request)
        assert model.count == 3


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_deadline_already_passed_is_timeout_without_a_request(provider: str) -> None:
    with (OpenAIServer if provider == "openai" else AnthropicServer)([text("never")]) as model:
        client = build_model_client(model_endpoint(provider, model), CANARY)
        loop = asyncio.get_running_loop()
        request = ModelRequest([SystemMessage("s"), UserMessage("u")], (), deadline=loop.time())
        with pytest.raises(TimeoutError):
            await client.complete(request)
        assert model.count == 0


# -- malformed model output: an error result the model can correct, never an execution -------


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_malformed_tool_call_json_becomes_an_error_result(provider: str) -> None:
    out = await run(
        provider,
        [
            calls({"name": "lookup", "raw_arguments": '{"q": "unterminated', "id": "c_bad"}),
            calls({"name": "lookup", "arguments": {"q": "fixed"}, "id": "c_good"}),
            text("done"),
        ],
    )
    assert reason(out) == ("Succeeded", 3)
    assert out.tool_calls == 1  # only the corrected call ran
    records = [(r.decision, r.reason) for r in out.result.tool_calls]
    assert records[0] == ("rejected", "InvalidArguments")
    second = out.model.requests[1].body
    assert "not a valid JSON object" in str(second["messages"])


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_invalid_arguments_become_an_error_result(provider: str) -> None:
    out = await run(
        provider,
        [
            calls({"name": "lookup", "arguments": {"query": "wrong field"}}),
            calls({"name": "lookup", "arguments": {"q": "right"}}),
            text("done"),
        ],
    )
    assert reason(out) == ("Succeeded", 3)
    assert out.tool_calls == 1
    assert out.result.tool_calls[0].reason == "InvalidArguments"
    assert "invalid arguments" in str(out.model.requests[1].body["messages"])


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_unknown_tool_name_is_denied_and_fails_by_default(provider: str) -> None:
    out = await run(provider, [calls({"name": "rm-rf", "arguments": {}}), text("never")])
    assert reason(out) == ("ToolDenied", 1)
    assert out.tool_calls == 0
    assert out.result.tool_calls[0].reason == "NotOffered"


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_unknown_tool_name_with_return_error_lets_the_model_correct(provider: str) -> None:
    out = await run(
        provider,
        [
            calls({"name": "rm-rf", "arguments": {}}),
            calls({"name": "lookup", "arguments": {"q": "x"}}),
            text("done"),
        ],
        on_tool_denied="ReturnError",
    )
    assert reason(out) == ("Succeeded", 3)
    assert out.tool_calls == 1
    assert "not permitted" in str(out.model.requests[1].body["messages"])


# -- missing usage: estimated, and the token budget holds -------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("usage", [None, "omit"])
async def test_missing_usage_is_estimated_and_marked(provider: str, usage: str | None) -> None:
    with (OpenAIServer if provider == "openai" else AnthropicServer)(
        [{"text": "an answer of some length", "usage": usage}]
    ) as model:
        client = build_model_client(model_endpoint(provider, model), CANARY)
        request = ModelRequest([SystemMessage("s" * 400), UserMessage("u" * 400)], ())
        response = await client.complete(request)
    assert response.usage.estimated
    assert response.usage.input_tokens >= 200  # ceil(800 characters / 4)
    assert response.usage.output_tokens == 6  # ceil(24 characters / 4)


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_reported_usage_is_not_marked_estimated(provider: str) -> None:
    with (OpenAIServer if provider == "openai" else AnthropicServer)(
        [{"text": "x", "usage": {"input_tokens": 7, "output_tokens": 2}}]
    ) as model:
        client = build_model_client(model_endpoint(provider, model), CANARY)
        response = await client.complete(ModelRequest([UserMessage("u")], ()))
    assert (response.usage.input_tokens, response.usage.output_tokens) == (7, 2)
    assert not response.usage.estimated


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("usage", [None, "omit"])
async def test_max_tokens_per_task_holds_when_the_server_omits_usage(
    provider: str, usage: str | None
) -> None:
    """An AgentPolicy `maxTokensPerTask` of 50; the server never reports usage; each answer
    calls the tool again with a long argument. The estimate crosses the budget and the run
    ends `TokenBudgetExceeded` (before the fix: usage 0, the run went on to `maxSteps`)."""
    long_call = calls({"name": "lookup", "arguments": {"q": "x" * 200}})
    model = start_server(provider, [{**long_call, "usage": usage}] * 4 + [text("never")])
    try:
        store = DictStore(
            fake_agent(tools=["lookup"], limits={"maxSteps": 5}),
            fake_endpoint(
                provider=provider,
                model="m",
                baseUrl=model.url + ("/v1" if provider == "openai" else ""),
                credentials={"secretRef": {"name": "key", "key": "k"}},
            ),
            mock_tool("lookup", "found"),
            policy("budget", maxTokensPerTask=50),
            secrets={("key", "k"): CANARY},
        )
        outcome = await execute(task(), store)
    finally:
        model.stop()
    assert (outcome.phase, outcome.reason) == ("Failed", "TokenBudgetExceeded")
    assert model.count == 1
    assert outcome.result is not None and outcome.result.usage.estimated
    assert outcome.result.usage.total_tokens > 50


# -- hostile answers over the wire: bounded, never an exception --------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_190_character_tool_name_is_denied_and_fits_the_status(provider: str) -> None:
    out = await run(provider, [calls({"name": "t" * 190, "arguments": {}}), text("never")])
    assert reason(out) == ("ToolDenied", 1)
    assert out.tool_calls == 0
    (record,) = out.result.tool_calls
    assert record.reason == "NotOffered"
    assert len(record.tool) <= 128 and record.tool.startswith("t" * 48 + "-x")


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_call_ids_repeated_across_steps_are_made_unique(provider: str) -> None:
    out = await run(
        provider,
        [
            calls({"name": "lookup", "arguments": {"q": "a"}, "id": "call_0"}),
            calls({"name": "lookup", "arguments": {"q": "b"}, "id": "call_0"}),
            text("done"),
        ],
        on_tool_denied="ReturnError",
    )
    assert reason(out) == ("Succeeded", 3)
    ids = [r.call_id for r in out.result.tool_calls]
    assert ids[0] == "call_0" and ids[1] != "call_0" and ids[1] == "ordo_2_0"
    # The third request carries both calls and both results, each under its own id.
    third = json.dumps(out.model.requests[2].body)
    assert third.count('"ordo_2_0"') == 2


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_arguments_nested_too_deep_are_rejected_not_raised(provider: str) -> None:
    """80 levels (parsable by json, deeper than MAX_JSON_DEPTH): the call is rejected with
    InvalidArguments and the model corrects itself."""
    nested: Any = "x"
    for _ in range(80):
        nested = [nested]
    out = await run(
        provider,
        [
            calls({"name": "lookup", "arguments": {"q": nested}}),
            calls({"name": "lookup", "arguments": {"q": "flat"}}),
            text("done"),
        ],
    )
    assert reason(out) == ("Succeeded", 3)
    assert out.tool_calls == 1
    assert out.result.tool_calls[0].reason == "InvalidArguments"
    # refused for its depth, before any schema validation looked at it
    assert "not a valid JSON object" in str(out.model.requests[1].body["messages"])


async def test_openai_arguments_nested_100000_deep_are_rejected_not_raised() -> None:
    out = await run(
        "openai",
        [
            calls(
                {"name": "lookup", "raw_arguments": '{"q": ' + "[" * 100_000 + "]" * 100_000 + "}"}
            ),
            calls({"name": "lookup", "arguments": {"q": "flat"}}),
            text("done"),
        ],
    )
    assert reason(out) == ("Succeeded", 3)
    assert out.result.tool_calls[0].reason == "InvalidArguments"


async def test_anthropic_body_nested_100000_deep_is_model_error_not_raised() -> None:
    """The SDK parses the whole body: too deep for json is an unreadable response (not
    retried), never a RecursionError out of the run."""
    deep = '{"q": ' + "[" * 100_000 + "]" * 100_000 + "}"
    body = (
        '{"id": "msg_1", "type": "message", "role": "assistant", "model": "m", '
        '"content": [{"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": '
        + deep
        + '}], "stop_reason": "tool_use", "usage": {"input_tokens": 1, "output_tokens": 1}}'
    )
    out = await run("anthropic", [{"body": body}, text("never")])
    assert reason(out) == ("ModelError", 1)
    assert "unreadable response (RecursionError)" in out.result.message
    assert "ModelEndpoint wire/model (anthropic, host 127.0.0.1:" in out.result.message


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_lone_surrogates_in_an_answer_become_replacement_characters(provider: str) -> None:
    # A JSON escape of a lone surrogate is valid JSON text but not Unicode.
    if provider == "openai":
        body = (
            '{"id": "c", "object": "chat.completion", "created": 0, "model": "m", "choices": '
            '[{"index": 0, "message": {"role": "assistant", "content": "bad \\ud800 text"}, '
            '"finish_reason": "stop"}]}'
        )
    else:
        body = (
            '{"id": "m", "type": "message", "role": "assistant", "model": "m", "content": '
            '[{"type": "text", "text": "bad \\ud800 text"}], "stop_reason": "end_turn"}'
        )
    out = await run(provider, [{"body": body}])
    assert reason(out) == ("Succeeded", 1)
    assert out.result.output == "bad \ufffd text"
    assert out.result.usage.estimated  # neither body has usage
