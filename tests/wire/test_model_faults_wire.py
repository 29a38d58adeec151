"""Fault cases over real HTTP, for both SDK families: each ends in the documented reason after
exactly the documented number of requests, counted by the server (docs/providers.md).

Endpoints here: retry.maxAttempts 3, backoff 10ms, timeout 5s unless the case says otherwise.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest
from tests.support.anthropic_server import AnthropicServer
from tests.support.http_tool_server import HttpToolServer
from tests.support.openai_server import OpenAIServer
from tests.support.scripted import ScriptedServer, Step
from tests.support.wire import CANARY, calls, endpoint, resolved, run_config, text

from ordo.engine.loop import run_agent
from ordo.engine.model import ModelError, ModelRequest, ModelUnavailable
from ordo.engine.state import RunResult
from ordo.engine.transcript import SystemMessage, UserMessage
from ordo.providers import build_model_client
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
