"""ordo's model-call transport (providers/transport.py) over real HTTP: one aiohttp session per
event loop shared by every model client, and nothing of one client leaks into another's calls.

What is shared is the connection pool only: each request carries its own client's key, no
cookie is kept, a redirect is not followed (a key goes only to the URL its endpoint names), the
session closes when its last client does. Connection errors, cut-off and oversized bodies end
in the documented reasons, and a cancelled call leaves the pool usable.
"""

from __future__ import annotations

import asyncio
import gc
import json
import socket
from typing import Any

import pytest
from tests.support.anthropic_server import AnthropicServer
from tests.support.openai_server import OpenAIServer
from tests.support.scripted import ScriptedServer
from tests.support.wire import endpoint

from ordo.engine.model import ModelError, ModelRequest, ModelUnavailable
from ordo.engine.transcript import UserMessage
from ordo.providers import build_model_client, transport

PROVIDERS = ["openai", "anthropic"]
COMPLETION = {
    "id": "c1",
    "object": "chat.completion",
    "model": "gpt-test",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}


def _server(provider: str, script: Any = None, fallback: Any = None) -> ScriptedServer:
    cls = OpenAIServer if provider == "openai" else AnthropicServer
    return cls(script, fallback=fallback).start()


def _base(provider: str, server: ScriptedServer) -> str:
    return server.url + "/v1" if provider == "openai" else server.url


def _request(text: str = "hello") -> ModelRequest:
    return ModelRequest(items=(UserMessage(text),), tools=())


def _key_of(provider: str, server: ScriptedServer, n: int) -> str:
    headers = server.requests[n].headers
    if provider == "openai":
        return str(headers["authorization"]).removeprefix("Bearer ")
    return str(headers["x-api-key"])


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_concurrent_clients_share_one_session_and_send_only_their_own_key(
    provider: str,
) -> None:
    a, b = _server(provider), _server(provider)
    try:
        clients = [
            build_model_client(endpoint(provider, _base(provider, a)), "sk-tenant-a"),
            build_model_client(endpoint(provider, _base(provider, b)), "sk-tenant-b"),
            build_model_client(endpoint(provider, _base(provider, a)), "sk-tenant-c"),
        ]
        for _ in range(3):
            await asyncio.gather(*(c.complete(_request()) for c in clients))
        sessions = {id(c._http._session) for c in clients}  # type: ignore[attr-defined]
        assert len(sessions) == 1 and None not in sessions
        (shared,) = sessions
        assert transport.POOL.users()[shared] == 3
        keys_a = sorted(_key_of(provider, a, n) for n in range(a.count))
        keys_b = sorted(_key_of(provider, b, n) for n in range(b.count))
        assert keys_a == ["sk-tenant-a"] * 3 + ["sk-tenant-c"] * 3
        assert keys_b == ["sk-tenant-b"] * 3
        for client in clients:
            await client.close()  # type: ignore[attr-defined]
        assert shared not in transport.POOL.users()
    finally:
        a.stop()
        b.stop()


async def test_a_cookie_set_for_one_client_is_never_sent_by_another() -> None:
    body = json.dumps(COMPLETION)
    server = _server(
        "openai",
        [
            {"body": body, "headers": {"Set-Cookie": "sid=tenant-a; Path=/"}},
            {"body": body},
            {"body": body},
        ],
    )
    try:
        first = build_model_client(endpoint("openai", server.url + "/v1"), "sk-a")
        second = build_model_client(endpoint("openai", server.url + "/v1"), "sk-b")
        await first.complete(_request())
        await second.complete(_request())
        await first.complete(_request())
        assert [r.headers.get("cookie") for r in server.requests] == [None, None, None]
        await first.close()  # type: ignore[attr-defined]
        await second.close()  # type: ignore[attr-defined]
    finally:
        server.stop()


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_redirect_is_not_followed_and_the_key_stays_home(provider: str) -> None:
    elsewhere = _server(provider)
    target = _base(provider, elsewhere) + ("/chat/completions" if provider == "openai" else "")
    server = _server(provider, [{"body": "", "status": 307, "headers": {"Location": target}}])
    try:
        client = build_model_client(endpoint(provider, _base(provider, server)), "sk-home")
        with pytest.raises(ModelError) as caught:
            await client.complete(_request())
        assert "HTTP 307" in str(caught.value)
        assert (server.count, elsewhere.count) == (1, 0)
        await client.close()  # type: ignore[attr-defined]
    finally:
        server.stop()
        elsewhere.stop()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_connection_refused_is_retried_then_model_unavailable(provider: str) -> None:
    url = f"http://127.0.0.1:{_free_port()}" + ("/v1" if provider == "openai" else "")
    client = build_model_client(endpoint(provider, url), "sk-x")
    with pytest.raises(ModelUnavailable) as caught:
        await client.complete(_request())
    message = str(caught.value)
    assert "connection error (ClientConnectorError)" in message
    assert "3 attempt(s)" in message and "127.0.0.1" in message
    await client.close()  # type: ignore[attr-defined]


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_body_longer_than_the_cap_is_model_error_without_retry(
    provider: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(transport, "MAX_RESPONSE_BYTES", 1000)
    server = _server(provider, [{"text": "x" * 5000}])
    try:
        client = build_model_client(endpoint(provider, _base(provider, server)), "sk-x")
        with pytest.raises(ModelError) as caught:
            await client.complete(_request())
        assert "unreadable response (ResponseTooLarge)" in str(caught.value)
        assert server.count == 1
        await client.close()  # type: ignore[attr-defined]
    finally:
        server.stop()


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_cancelled_call_leaves_the_shared_session_usable(provider: str) -> None:
    server = _server(provider, {"slow": [{"delay": 5, "text": "late"}]}, {"text": "ok"})
    try:
        slow = build_model_client(endpoint(provider, _base(provider, server)), "sk-a")
        other = build_model_client(endpoint(provider, _base(provider, server)), "sk-b")
        call = asyncio.ensure_future(slow.complete(_request("slow")))
        while server.count == 0:
            await asyncio.sleep(0.01)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert (await other.complete(_request("fast"))).text == "ok"
        assert (await slow.complete(_request("fast"))).text == "ok"
        await slow.close()  # type: ignore[attr-defined]
        await other.close()  # type: ignore[attr-defined]
    finally:
        server.stop()


async def test_the_last_client_out_closes_the_session_even_without_close() -> None:
    server = _server("openai")
    try:
        kept = build_model_client(endpoint("openai", server.url + "/v1"), "sk-a")
        dropped = build_model_client(endpoint("openai", server.url + "/v1"), "sk-b")
        await kept.complete(_request())
        await dropped.complete(_request())
        session = kept._http._session  # type: ignore[attr-defined]
        assert session is not None
        del dropped
        gc.collect()
        assert transport.POOL.users()[id(session)] == 1 and not session.closed
        await kept.close()  # type: ignore[attr-defined]
        assert session.closed and id(session) not in transport.POOL.users()
        abandoned = build_model_client(endpoint("openai", server.url + "/v1"), "sk-c")
        await abandoned.complete(_request())
        session = abandoned._http._session  # type: ignore[attr-defined]
        del abandoned
        gc.collect()
        await asyncio.sleep(0.05)  # the finaliser schedules the close on the loop
        assert session.closed and id(session) not in transport.POOL.users()
    finally:
        server.stop()
