"""ordo's transport under the SDKs (providers/sdk_transport.py) over real sockets: the SDKs'
own error types still come out of it (a refused connection, a stalled answer, a connection cut
mid-body, an HTTP error status), bodies stay bounded however they are framed, and the
environment's proxy is used.

The server here is a raw asyncio socket server, so that a test can send exactly the bytes (or
the silence, or the cut) it wants; the SDK clients are the real ones, on the shared client
ordo gives them (`sdk_http.POOL`).
"""

from __future__ import annotations

import asyncio
import base64
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anthropic
import httpx2
import openai
import pytest
from tests.support.wire import endpoint

from ordo.engine.model import ModelError, ModelRequest, ModelUnavailable
from ordo.engine.transcript import UserMessage
from ordo.providers import build_model_client, sdk_http
from ordo.providers.errors import ResponseTooLarge

COMPLETION = json.dumps(
    {"choices": [{"message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]}
).encode()
"""All that ordo reads of a Chat Completions answer."""

Writer = Callable[[asyncio.StreamWriter], Awaitable[None]]


def answer(status: int, body: bytes, headers: dict[str, str] | None = None) -> bytes:
    head = [
        f"HTTP/1.1 {status} X",
        f"Content-Length: {len(body)}",
        "Content-Type: application/json",
    ]
    head += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


class RawServer:
    """Answers each request with what `respond` writes; records request heads."""

    def __init__(self, respond: Writer) -> None:
        self.respond = respond
        self.heads: list[str] = []
        self.port = 0

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
                self.heads.append(head)
                length = 0
                for line in head.split("\r\n"):
                    if line.lower().startswith("content-length:"):
                        length = int(line.split(":", 1)[1])
                await reader.readexactly(length)
                await self.respond(writer)
                if writer.is_closing():
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    @asynccontextmanager
    async def running(self) -> AsyncIterator[RawServer]:
        server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        try:
            yield self
        finally:
            server.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@asynccontextmanager
async def sdk_client(sdk: str, port: int, timeout: float = 5.0) -> AsyncIterator[Any]:
    """The SDK's client on ordo's shared HTTP client, as the providers build it."""
    http_client = sdk_http.POOL.acquire(sdk)
    factory: Any = openai.AsyncOpenAI if sdk == "openai" else anthropic.AsyncAnthropic
    base = f"http://127.0.0.1:{port}" + ("/v1" if sdk == "openai" else "")
    try:
        yield factory(
            base_url=base, api_key="sk-x", max_retries=0, timeout=timeout, http_client=http_client
        )
    finally:
        await sdk_http.POOL.release(http_client)


async def _call(sdk: str, client: Any) -> Any:
    path = "/chat/completions" if sdk == "openai" else "/v1/messages"
    return await sdk_http.post_json(client, path, {"model": "m"}, {}, client.timeout)


def _errors(sdk: str) -> Any:
    return openai if sdk == "openai" else anthropic


SDKS = ["openai", "anthropic"]


@pytest.mark.parametrize("sdk", SDKS)
async def test_a_refused_connection_is_the_sdks_connection_error(sdk: str) -> None:
    async with sdk_client(sdk, _free_port()) as client:
        with pytest.raises(_errors(sdk).APIConnectionError) as caught:
            await _call(sdk, client)
    assert not isinstance(caught.value, _errors(sdk).APITimeoutError)
    assert isinstance(caught.value.__cause__, httpx2.ConnectError)


@pytest.mark.parametrize("sdk", SDKS)
async def test_a_server_that_never_answers_is_the_sdks_timeout(sdk: str) -> None:
    async def stall(writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(5)

    async with RawServer(stall).running() as server, sdk_client(sdk, server.port, 0.3) as client:
        with pytest.raises(_errors(sdk).APITimeoutError):
            await _call(sdk, client)


@pytest.mark.parametrize("sdk", SDKS)
async def test_a_connection_cut_mid_body_is_the_sdks_connection_error(sdk: str) -> None:
    async def cut(writer: asyncio.StreamWriter) -> None:
        writer.write(answer(200, COMPLETION)[:-10])
        await writer.drain()
        writer.close()

    async with RawServer(cut).running() as server, sdk_client(sdk, server.port) as client:
        with pytest.raises(_errors(sdk).APIConnectionError) as caught:
            await _call(sdk, client)
    assert isinstance(caught.value.__cause__, httpx2.RemoteProtocolError)


@pytest.mark.parametrize("sdk", SDKS)
@pytest.mark.parametrize(
    ("status", "kind"),
    [(429, "RateLimitError"), (500, "InternalServerError"), (400, "BadRequestError")],
)
async def test_an_error_status_is_the_sdks_status_error(sdk: str, status: int, kind: str) -> None:
    body = json.dumps({"error": {"type": "some_error", "message": "no"}}).encode()

    async def fail(writer: asyncio.StreamWriter) -> None:
        writer.write(answer(status, body, {"Retry-After": "0"}))
        await writer.drain()

    async with RawServer(fail).running() as server, sdk_client(sdk, server.port) as client:
        with pytest.raises(getattr(_errors(sdk), kind)) as caught:
            await _call(sdk, client)
    assert caught.value.status_code == status


@pytest.mark.parametrize("sdk", SDKS)
async def test_a_chunked_body_past_the_cap_is_refused_while_read(
    sdk: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No Content-Length to refuse on: the count of bytes read stops it."""
    monkeypatch.setattr(sdk_http, "MAX_RESPONSE_BYTES", 1000)
    sent: list[int] = []

    async def chunked(writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        chunk = b'{"pad": "' + b"x" * 400
        for _ in range(50):  # 20 KB in all, if nobody stops reading
            writer.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            await writer.drain()
            sent.append(len(chunk))
            await asyncio.sleep(0.001)
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async with RawServer(chunked).running() as server, sdk_client(sdk, server.port) as client:
        with pytest.raises(Exception) as caught:
            await _call(sdk, client)
    cause: BaseException | None = caught.value
    while cause is not None and not isinstance(cause, ResponseTooLarge):
        cause = cause.__cause__
    assert isinstance(cause, ResponseTooLarge), repr(caught.value)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_a_cut_connection_is_retried_then_model_unavailable(provider: str) -> None:
    async def cut(writer: asyncio.StreamWriter) -> None:
        writer.write(answer(200, COMPLETION)[:-10])
        await writer.drain()
        writer.close()

    async with RawServer(cut).running() as server:
        url = f"http://127.0.0.1:{server.port}" + ("/v1" if provider == "openai" else "")
        client = build_model_client(endpoint(provider, url), "sk-x")
        with pytest.raises(ModelUnavailable) as caught:
            await client.complete(ModelRequest(items=(UserMessage("hi"),), tools=()))
        await client.close()  # type: ignore[attr-defined]
    assert "connection error (ClientPayloadError)" in str(caught.value)
    assert len(server.heads) == 3  # the endpoint's retry.maxAttempts


async def test_the_proxy_of_the_environment_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """HTTP_PROXY as httpx2 would honour it (a custom transport gets none from httpx2): the
    request goes to the proxy in absolute form, with the proxy URL's credentials; NO_PROXY
    hosts go direct."""

    async def ok(writer: asyncio.StreamWriter) -> None:
        writer.write(answer(200, COMPLETION))
        await writer.drain()

    async with RawServer(ok).running() as proxy, RawServer(ok).running() as direct:
        monkeypatch.setenv("HTTP_PROXY", f"http://proxy-user:p%40ss@127.0.0.1:{proxy.port}")
        monkeypatch.setenv("NO_PROXY", "direct.invalid")
        monkeypatch.delenv("http_proxy", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        via_proxy = build_model_client(endpoint("openai", "http://models.invalid:8000/v1"), "k")
        reply = await via_proxy.complete(ModelRequest(items=(UserMessage("hi"),), tools=()))
        assert reply.text == "hi"
        assert proxy.heads[0].startswith(
            "POST http://models.invalid:8000/v1/chat/completions HTTP/1.1"
        )
        credentials = base64.b64encode(b"proxy-user:p@ss").decode()
        assert f"proxy-authorization: basic {credentials}".lower() in proxy.heads[0].lower()
        await via_proxy.close()  # type: ignore[attr-defined]
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        bypass = build_model_client(endpoint("openai", f"http://127.0.0.1:{direct.port}/v1"), "k")
        assert (
            await bypass.complete(ModelRequest(items=(UserMessage("hi"),), tools=()))
        ).text == "hi"
        await bypass.close()  # type: ignore[attr-defined]
    assert len(proxy.heads) == 1 and direct.heads[0].startswith("POST /v1/chat/completions")


async def test_an_unreadable_model_error_names_no_body(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sdk_http, "MAX_RESPONSE_BYTES", 100)

    async def big(writer: asyncio.StreamWriter) -> None:
        writer.write(answer(200, b'{"secret": "' + b"s" * 500 + b'"}'))
        await writer.drain()

    async with RawServer(big).running() as server:
        client = build_model_client(endpoint("openai", f"http://127.0.0.1:{server.port}/v1"), "k")
        with pytest.raises(ModelError) as caught:
            await client.complete(ModelRequest(items=(UserMessage("hi"),), tools=()))
        await client.close()  # type: ignore[attr-defined]
    assert "unreadable response (ResponseTooLarge)" in str(caught.value)
    assert "sss" not in str(caught.value) and len(server.heads) == 1
