"""A canary API key never appears in logs (every logger at DEBUG, SDKs and httpx included),
exception messages, the RunResult, or the Task status shaped from it, whatever the model
server answers: success with tools, retried 429/5xx, a 401 that echoes the key, resets."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from tests.support.anthropic_server import AnthropicServer
from tests.support.http_tool_server import HttpToolServer
from tests.support.openai_server import OpenAIServer
from tests.support.scripted import ScriptedServer
from tests.support.wire import CANARY, calls, endpoint, resolved, run_config, text

from ordo.engine.loop import run_agent
from ordo.engine.model import ModelCallError, ModelRequest
from ordo.engine.transcript import SystemMessage, UserMessage
from ordo.providers import build_model_client
from ordo.runtime import TaskOutcome
from ordo.tools import binding

SCRIPT = [
    {"status": 429, "headers": {"Retry-After": "0"}},
    {"status": 500},
    calls({"name": "lookup", "arguments": {"q": "x"}}),
    {"reset": True},
    text("done"),
]
NOISY_LOGGERS = (
    "openai",
    "anthropic",
    "httpx",
    "httpx2",
    "httpcore",
    "httpcore2",
    "ordo",
    "asyncio",
)


@pytest.fixture
def debug_logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    caplog.set_level(logging.DEBUG)
    for name in NOISY_LOGGERS:
        caplog.set_level(logging.DEBUG, logger=name)
    yield caplog


def everything_logged(caplog: pytest.LogCaptureFixture) -> str:
    parts = [caplog.text]
    for record in caplog.records:
        parts.append(record.getMessage())
        parts.append(repr(record.args))
        parts.append(repr(record.__dict__))
    return "\n".join(parts)


def server_for(provider: str, script: list[Any], **kw: Any) -> ScriptedServer:
    cls = AnthropicServer if provider == "anthropic" else OpenAIServer
    return cls(script, **kw).start()


def base_url(provider: str, server: ScriptedServer) -> str:
    return server.url if provider in ("anthropic", "azure-openai") else server.url + "/v1"


@pytest.mark.parametrize("provider", ["openai", "azure-openai", "anthropic"])
async def test_canary_key_is_never_logged_or_reported(
    provider: str, debug_logs: pytest.LogCaptureFixture
) -> None:
    model = server_for(provider, SCRIPT)
    try:
        with HttpToolServer() as tools_server:
            tool = await binding(
                resolved(
                    "lookup",
                    {
                        "type": "http",
                        "inputSchema": {"type": "object"},
                        "http": {"url": tools_server.url + "/echo"},
                    },
                )
            )
            client = build_model_client(
                endpoint(
                    provider,
                    base_url(provider, model),
                    retry={"maxAttempts": 3, "backoff": "10ms"},
                ),
                CANARY,
            )
            result = await run_agent(run_config(["lookup"]), client, [tool])
    finally:
        model.stop()
    assert result.phase == "Succeeded" and model.count == 5
    # The key really went over the wire ...
    sent = json.dumps([dict(r.headers) for r in model.requests])
    assert CANARY in sent
    # ... and nowhere else.
    assert CANARY not in everything_logged(debug_logs)
    assert CANARY not in repr(result) and CANARY not in json.dumps(result.state.to_dict())
    status = TaskOutcome(result.phase, result.reason, result.message, result).status().to_dict()
    assert CANARY not in json.dumps(status)


@pytest.mark.parametrize("provider", ["openai", "azure-openai", "anthropic"])
async def test_canary_key_echoed_by_a_401_stays_out_of_errors(
    provider: str, debug_logs: pytest.LogCaptureFixture
) -> None:
    # The server answers 401 "Incorrect API key provided: <the key>", like real providers do.
    model = server_for(provider, [text("never")], require_key="another-key")
    try:
        client = build_model_client(endpoint(provider, base_url(provider, model)), CANARY)
        with pytest.raises(ModelCallError) as caught:
            await client.complete(ModelRequest([SystemMessage("s"), UserMessage("u")], ()))
        result = await run_agent(run_config([]), client, [])
    finally:
        model.stop()
    assert model.count == 2
    error = caught.value
    assert error.reason == "ModelError" and "HTTP 401" in str(error)
    chain = [str(error), repr(error), str(error.__cause__), str(error.__context__)]
    assert all(CANARY not in part for part in chain)
    assert result.reason == "ModelError" and CANARY not in result.message
    assert CANARY not in everything_logged(debug_logs)
    status = TaskOutcome(result.phase, result.reason, result.message, result).status().to_dict()
    assert CANARY not in json.dumps(status)


async def test_tool_secrets_stay_out_of_results_and_logs(
    debug_logs: pytest.LogCaptureFixture,
) -> None:
    with HttpToolServer() as tools_server:
        executor = (
            await binding(
                resolved(
                    "lookup",
                    {"type": "http", "http": {"url": tools_server.url + "/status/401"}},
                    secret=CANARY,
                )
            )
        ).executor
        with pytest.raises(Exception) as caught:
            await executor({"q": "x"})
        assert tools_server.requests[0]["headers"]["authorization"] == f"Bearer {CANARY}"
    assert "HTTP 401" in str(caught.value)
    assert CANARY not in str(caught.value) and "MUST-NOT-LEAK" not in str(caught.value)
    assert CANARY not in everything_logged(debug_logs)
