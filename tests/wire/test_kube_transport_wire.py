"""KubeClient over its aiohttp transport (operator/kube/transport.py) against real local
servers: which failures count as "never sent" (retried even for a create) and which may
have been applied (not retried for a create), timeouts, streamed watches, TLS with the
kubeconfig's CA, relogin on 401."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import kopf
import pytest
from aiohttp import web
from tests.support.faultproxy import FaultProxy
from tests.support.threaded_server import serve_aiohttp

from ordo.operator.kube.client import KubeClient
from ordo.operator.kube.errors import ApiError
from ordo.operator.kube.transport import AiohttpTransport

TASK = {"apiVersion": "ordo.dev/v1alpha1", "kind": "Task", "metadata": {"name": "t1"}}
CREATED = json.dumps(TASK).encode()


def info(server: str, **kwargs: Any) -> kopf.ConnectionInfo:
    return kopf.ConnectionInfo(server=server, **kwargs)


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """One HTTP/1.1 request (headers and a Content-Length body)."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return head + await reader.readexactly(length)


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@contextlib.asynccontextmanager
async def raw_server(handler: Handler) -> AsyncIterator[str]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), 2)


async def answer(writer: asyncio.StreamWriter, status: int, body: bytes) -> None:
    writer.write(
        f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    await writer.drain()


CONDITIONAL = {**TASK, "metadata": {"name": "t1", "resourceVersion": "7"}}


@pytest.mark.parametrize("verb", ["create", "replace"])
@pytest.mark.parametrize("how", ["close", "reset"])
async def test_lost_after_send_is_not_retried_for_a_write(how: str, verb: str) -> None:
    """The server reads the whole request, then closes (or resets) instead of answering: the
    create (or conditional replace) may have been applied, so it must not be repeated (a
    retry could create twice or answer 409 for our own write). `httpx-aiohttp` maps this to
    ConnectTimeout ("never sent"), which KubeClient would retry; aiohttp itself silently
    repeats a PUT once after a disconnect unless told not to."""
    seen: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await read_request(reader))
        if how == "reset":
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.close()

    async with raw_server(handler) as url:
        client = KubeClient(info(url), backoff=0.01)
        try:
            with pytest.raises(ApiError) as caught:
                if verb == "create":
                    await client.create("Task", "ns", TASK)
                else:
                    await client.replace("Task", "ns", "t1", CONDITIONAL)
        finally:
            await client.close()
    assert (caught.value.status, caught.value.api_reason) == (0, "TransportError")
    assert caught.value.transient
    assert len(seen) == 1
    line = b"POST /apis/ordo.dev/v1alpha1/namespaces/ns/tasks "
    if verb == "replace":
        line = b"PUT /apis/ordo.dev/v1alpha1/namespaces/ns/tasks/t1 "
    assert seen[0].startswith(line)


async def test_lost_after_send_is_retried_for_a_read() -> None:
    calls: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        calls.append(await read_request(reader))
        if len(calls) < 3:
            writer.close()
            return
        await answer(writer, 200, CREATED)

    async with raw_server(handler) as url:
        client = KubeClient(info(url), backoff=0.01)
        try:
            assert await client.get("Task", "ns", "t1") == TASK
        finally:
            await client.close()
    assert len(calls) == 3


async def test_refused_before_send_is_retried_for_a_create() -> None:
    """Connection refused: nothing was sent, so even a create is repeated; it succeeds once
    the server listens (started when the client saw the first refusal)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
    port = sock.getsockname()[1]
    errors: list[BaseException] = []
    requests: list[bytes] = []
    servers: list[asyncio.Server] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        requests.append(await read_request(reader))
        await answer(writer, 201, CREATED)

    class Watching(httpx.AsyncBaseTransport):
        def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
            self.inner = inner

        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            try:
                return await self.inner.handle_async_request(request)
            except Exception as exc:
                errors.append(exc)
                if not servers:
                    sock.listen()
                    servers.append(await asyncio.start_server(handler, sock=sock))
                raise

        async def aclose(self) -> None:
            await self.inner.aclose()

    client = KubeClient(info(f"http://127.0.0.1:{port}"), wrap_transport=Watching, backoff=0.01)
    try:
        assert await client.create("Task", "ns", TASK) == TASK
    finally:
        await client.close()
        for server in servers:
            server.close()
        sock.close()
    assert [type(e) for e in errors] == [httpx.ConnectError]
    assert len(requests) == 1


async def test_read_timeout_is_a_read_timeout() -> None:
    """No answer within the read timeout: ReadTimeout (the request was sent), not a
    connect timeout."""
    stall = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await stall.wait()
        writer.close()

    async with raw_server(handler) as url:
        transport = AiohttpTransport(False, limit=4)
        async with httpx.AsyncClient(
            base_url=url, transport=transport, timeout=httpx.Timeout(5.0, read=0.2)
        ) as client:
            with pytest.raises(httpx.ReadTimeout):
                await client.post("/x", content=b"{}")
        stall.set()


async def test_watch_streams_events_and_does_not_hold_a_request_slot() -> None:
    """A watch yields each event as it arrives (the second is sent only after the client
    got the first), and while it is open a request still gets through with a pool of one
    connection (watches have their own connector)."""
    got_first = asyncio.Event()

    async def watch(request: web.Request) -> web.StreamResponse:
        assert request.query["watch"] == "true"
        response = web.StreamResponse()
        await response.prepare(request)
        await response.write(b'{"type":"ADDED","object":{"n":1}}\n')
        await got_first.wait()
        await response.write(b'{"type":"MODIFIED","object":{"n":2}}\n')
        await response.write_eof()
        return response

    async def get(request: web.Request) -> web.Response:
        return web.json_response(TASK)

    app = web.Application()
    app.router.add_get("/apis/ordo.dev/v1alpha1/namespaces/ns/tasks", watch)
    app.router.add_get("/apis/ordo.dev/v1alpha1/namespaces/ns/tasks/t1", get)
    port, cleanup = await serve_aiohttp(app)
    client = KubeClient(info(f"http://127.0.0.1:{port}"), max_connections=1)
    events: list[dict[str, Any]] = []
    try:
        async for event in client.watch("Task", "ns", "1"):
            events.append(event)
            if len(events) == 1:
                assert await client.get("Task", "ns", "t1") == TASK
                got_first.set()
    finally:
        await client.close()
        await cleanup()
    assert [e["object"]["n"] for e in events] == [1, 2]


async def test_watch_stalled_mid_stream_times_out() -> None:
    stall = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        event = b'{"type":"ADDED","object":{}}\n'
        writer.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
        await writer.drain()
        await stall.wait()
        writer.close()

    async with raw_server(handler) as url:
        transport = AiohttpTransport(False, limit=4)
        async with httpx.AsyncClient(base_url=url, transport=transport) as client:
            lines: list[str] = []
            with pytest.raises(httpx.ReadTimeout):
                async with client.stream(
                    "GET", "/w?watch=true", timeout=httpx.Timeout(5.0, read=0.3)
                ) as response:
                    async for line in response.aiter_lines():
                        lines.append(line)
        stall.set()
    assert lines == ['{"type":"ADDED","object":{}}']


async def test_tls_with_the_kubeconfig_ca(tmp_path: Path) -> None:
    """HTTPS verified against the kubeconfig's CA works; without that CA the handshake
    fails as a transport error (nothing was sent)."""
    stand_in = SimpleNamespace(workdir=tmp_path)
    server_ctx, ca_pem = FaultProxy._serving_context(stand_in)  # type: ignore[arg-type]
    ca_path = tmp_path / "ca.crt"
    ca_path.write_bytes(ca_pem)

    async def get(request: web.Request) -> web.Response:
        return web.json_response(TASK)

    app = web.Application()
    app.router.add_get("/apis/ordo.dev/v1alpha1/namespaces/ns/tasks/t1", get)
    port, cleanup = await serve_aiohttp(app, ssl_context=server_ctx)
    server = f"https://127.0.0.1:{port}"
    trusted = KubeClient(info(server, ca_path=str(ca_path)), backoff=0.01)
    untrusted = KubeClient(info(server), backoff=0.01)
    try:
        assert await trusted.get("Task", "ns", "t1") == TASK
        with pytest.raises(ApiError) as caught:
            await untrusted.get("Task", "ns", "t1")
        assert caught.value.status == 0
    finally:
        await trusted.close()
        await untrusted.close()
        await cleanup()


async def test_relogin_on_401_then_close() -> None:
    tokens: list[str] = []

    async def get(request: web.Request) -> web.Response:
        tokens.append(request.headers.get("Authorization", ""))
        if request.headers.get("Authorization") != "Bearer new":
            return web.json_response({"reason": "Unauthorized"}, status=401)
        return web.json_response(TASK)

    app = web.Application()
    app.router.add_get("/apis/ordo.dev/v1alpha1/namespaces/ns/tasks/t1", get)
    port, cleanup = await serve_aiohttp(app)
    server = f"http://127.0.0.1:{port}"
    client = KubeClient(info(server, token="old"), relogin=lambda: info(server, token="new"))
    try:
        assert await client.get("Task", "ns", "t1") == TASK
    finally:
        await client.close()
        await cleanup()
    assert tokens == ["Bearer old", "Bearer new"]


async def test_watch_lines_split_across_chunks_blank_lines_and_utf8_are_read_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Watch events are split on newlines as bytes (no text decoding first): an event cut
    across chunks, even inside a multi-byte character, is read whole; blank lines are
    skipped; a line past the bound ends the watch with a clear error, not unbounded memory."""
    from ordo.operator.kube import watchlines

    first = '{"type":"ADDED","object":{"name":"caf\u00e9"}}\n'.encode()
    cut = first.index(b"\xa9")  # inside the two bytes of the e-acute

    async def watch(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        await response.write(first[:cut])
        await response.write(first[cut:] + b"\n  \n" + b'{"type":"MODIFIED",')
        await response.write(b'"object":{"n":2}}')  # the last line needs no newline
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_get("/apis/ordo.dev/v1alpha1/namespaces/ns/tasks", watch)
    port, cleanup = await serve_aiohttp(app)
    client = KubeClient(info(f"http://127.0.0.1:{port}"))
    try:
        events = [e async for e in client.watch("Task", "ns", "1")]
        assert events == [
            {"type": "ADDED", "object": {"name": "caf\u00e9"}},
            {"type": "MODIFIED", "object": {"n": 2}},
        ]
        monkeypatch.setattr(watchlines, "MAX_WATCH_EVENT_BYTES", 10)
        with pytest.raises(ApiError, match="larger than the bound"):
            _ = [e async for e in client.watch("Task", "ns", "1")]
    finally:
        await client.close()
        await cleanup()
