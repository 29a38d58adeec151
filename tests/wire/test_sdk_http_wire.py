"""The SDKs' shared HTTP client (providers/sdk_http.py) over real HTTP: one aiohttp-backed
httpx2 client per SDK per event loop, shared by every model client, and nothing of one client
leaks into another's calls.

What is shared is the connection pool only: each request carries its own client's key, no
cookie is kept (neither by httpx2 nor by the aiohttp session under it), a redirect is not
followed (a key goes only to the URL its endpoint names), and the shared client closes when its
last model client does, never when one of them closes. Connection errors, oversized and
compressed bodies end in the documented reasons, and a cancelled call leaves the pool usable.
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
from ordo.providers import build_model_client, sdk_http

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


def _base(provider: str, server: ScriptedServer, host: str = "127.0.0.1") -> str:
    url = server.url.replace("127.0.0.1", host)
    return url + "/v1" if provider == "openai" else url


def _request(text: str = "hello") -> ModelRequest:
    return ModelRequest(items=(UserMessage(text),), tools=())


def _key_of(provider: str, server: ScriptedServer, n: int) -> str:
    headers = server.requests[n].headers
    if provider == "anthropic" and "x-api-key" in headers:
        return str(headers["x-api-key"])
    return str(headers["authorization"]).removeprefix("Bearer ")


def _shared(client: Any) -> Any:
    return client._lease.client


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_concurrent_clients_share_one_http_client_and_send_only_their_own_key(
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
        shared = {id(_shared(c)) for c in clients}
        assert len(shared) == 1 and id(None) not in shared
        (shared_id,) = shared
        assert sdk_http.POOL.users()[shared_id] == 3
        keys_a = sorted(_key_of(provider, a, n) for n in range(a.count))
        keys_b = sorted(_key_of(provider, b, n) for n in range(b.count))
        assert keys_a == ["sk-tenant-a"] * 3 + ["sk-tenant-c"] * 3
        assert keys_b == ["sk-tenant-b"] * 3
        for request in a.requests + b.requests:
            assert request.headers.get("accept-encoding") == "identity"
        http_client = _shared(clients[0])
        for client in clients:
            await client.close()  # type: ignore[attr-defined]
        assert shared_id not in sdk_http.POOL.users() and http_client.is_closed
    finally:
        a.stop()
        b.stop()


async def test_the_two_sdks_do_not_share_a_client() -> None:
    o, a = _server("openai"), _server("anthropic")
    try:
        first = build_model_client(endpoint("openai", _base("openai", o)), "sk-o")
        second = build_model_client(endpoint("anthropic", _base("anthropic", a)), "sk-a")
        await first.complete(_request())
        await second.complete(_request())
        assert _shared(first) is not _shared(second)
        await first.close()  # type: ignore[attr-defined]
        await second.close()  # type: ignore[attr-defined]
    finally:
        o.stop()
        a.stop()


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_cookie_set_for_one_client_is_never_sent_by_another(provider: str) -> None:
    """By host name, not IP: aiohttp's default cookie jar keeps cookies only for names."""
    ok = json.dumps(COMPLETION) if provider == "openai" else None
    cookie = {"headers": {"Set-Cookie": "sid=tenant-a; Path=/"}}
    step: dict[str, Any] = {"body": ok, **cookie} if ok else {"text": "hi", **cookie}
    server = _server(provider, None, fallback={"text": "hi"})
    server.set_script([step, {"text": "hi"}, {"text": "hi"}], fallback={"text": "hi"})
    try:
        base = _base(provider, server, "localhost")
        first = build_model_client(endpoint(provider, base), "sk-a")
        second = build_model_client(endpoint(provider, base), "sk-b")
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
    """Not "timed out": the openai SDK's transport maps a refused connection to httpx2's
    ConnectTimeout; errors.py names the root cause."""
    url = f"http://127.0.0.1:{_free_port()}" + ("/v1" if provider == "openai" else "")
    client = build_model_client(endpoint(provider, url), "sk-x")
    with pytest.raises(ModelUnavailable) as caught:
        await client.complete(_request())
    message = str(caught.value)
    assert "connection error (ClientConnectorError)" in message
    assert "3 attempt(s)" in message and "127.0.0.1" in message
    await client.close()  # type: ignore[attr-defined]


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize(
    ("step", "reason"),
    [
        ({"body": json.dumps({"pad": "x" * 5000})}, "ResponseTooLarge"),
        # The SDK reads an error body in full: the cap sits under it, in the response hook.
        ({"body": json.dumps({"pad": "x" * 5000}), "status": 500}, "ResponseTooLarge"),
        # The cap counts bytes on the wire, so a body marked compressed is refused on its
        # header, before a byte is inflated (ordo asks for `Accept-Encoding: identity`).
        ({"body": "{}", "headers": {"Content-Encoding": "gzip"}}, "EncodedResponse"),
    ],
    ids=["answer", "error-body", "gzip"],
)
async def test_a_body_past_the_bounds_is_model_error_without_retry(
    provider: str, step: dict[str, Any], reason: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sdk_http, "MAX_RESPONSE_BYTES", 1000)
    server = _server(provider, [step])
    try:
        client = build_model_client(endpoint(provider, _base(provider, server)), "sk-x")
        with pytest.raises(ModelError) as caught:
            await client.complete(_request())
        assert f"unreadable response ({reason})" in str(caught.value)
        assert server.count == 1
        await client.close()  # type: ignore[attr-defined]
    finally:
        server.stop()


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_cancelled_call_leaves_the_shared_client_usable(provider: str) -> None:
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


async def test_closing_one_client_leaves_the_pool_to_the_others_and_the_last_closes_it() -> None:
    server = _server("openai")
    try:
        kept = build_model_client(endpoint("openai", _base("openai", server)), "sk-a")
        closed = build_model_client(endpoint("openai", _base("openai", server)), "sk-b")
        dropped = build_model_client(endpoint("openai", _base("openai", server)), "sk-c")
        for client in (kept, closed, dropped):
            await client.complete(_request())
        http_client = _shared(kept)
        await closed.close()  # type: ignore[attr-defined]
        del dropped, client
        gc.collect()
        assert sdk_http.POOL.users()[id(http_client)] == 1 and not http_client.is_closed
        assert (await kept.complete(_request())).text  # still served on the same pool
        assert (await closed.complete(_request())).text  # a closed client takes it again
        assert _shared(closed) is http_client
        await closed.close()  # type: ignore[attr-defined]
        await kept.close()  # type: ignore[attr-defined]
        assert http_client.is_closed and id(http_client) not in sdk_http.POOL.users()
        abandoned = build_model_client(endpoint("openai", _base("openai", server)), "sk-d")
        await abandoned.complete(_request())
        http_client = _shared(abandoned)
        assert http_client is not None and not http_client.is_closed
        del abandoned
        gc.collect()
        await asyncio.sleep(0.05)  # the finaliser schedules the close on the loop
        assert http_client.is_closed and id(http_client) not in sdk_http.POOL.users()
    finally:
        server.stop()


@pytest.mark.parametrize("provider", ["openai-compatible", "azure-openai", "anthropic"])
async def test_a_keyless_endpoint_sends_no_credential_header(provider: str) -> None:
    """The SDKs insist on a key; ordo gives them a placeholder and omits the header."""
    server = _server("anthropic" if provider == "anthropic" else "openai")
    try:
        base = server.url + ("/v1" if provider == "openai-compatible" else "")
        client = build_model_client(endpoint(provider, base), None)
        assert (await client.complete(_request())).text
        headers = server.requests[0].headers
        assert not {"authorization", "api-key", "x-api-key"} & set(headers)
        await client.close()  # type: ignore[attr-defined]
    finally:
        server.stop()


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_post_json_never_lets_the_sdk_retry_whatever_its_client_says(provider: str) -> None:
    """retry.py owns every retry (the count a provider sees is `retry.maxAttempts`): a post
    makes one request even on an SDK client built with retries of its own."""
    import anthropic
    import openai

    server = _server(provider, [{"status": 500, "headers": {"retry-after-ms": "1"}}] * 3)
    lease = sdk_http.Lease(provider)
    http_client, _ = lease.take()
    try:
        sdk: Any
        if provider == "openai":
            sdk = openai.AsyncOpenAI(
                api_key="sk-x", base_url=_base(provider, server), http_client=http_client
            )
            path, body = "/chat/completions", {"model": "m", "messages": []}
        else:
            sdk = anthropic.AsyncAnthropic(
                api_key="sk-x", base_url=_base(provider, server), http_client=http_client
            )
            path, body = "/v1/messages", {"model": "m", "max_tokens": 1, "messages": []}
        assert sdk.max_retries > 0
        with pytest.raises((openai.InternalServerError, anthropic.InternalServerError)):
            await sdk_http.post_json(sdk, path, body, {}, 5.0)
        assert server.count == 1
    finally:
        await lease.release()
        server.stop()
