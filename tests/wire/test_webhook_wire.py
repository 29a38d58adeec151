"""TaskWebhook deliveries over real HTTP: the gateway's app under uvicorn on 127.0.0.1 (the
API server faked behind it). A signed delivery gets 202; a body over `maxBodyBytes` gets 413
while the sender is still sending (a chunked body that never ends, and a declared length
over the cap with almost nothing sent): the gateway never waits for, or buffers, the rest."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import httpx
import pytest
import uvicorn
from tests.support.threaded_server import Cleanup, ServerThread, serve_uvicorn
from tests.support.webhooks import SECRET, Api, gateway, webhook

from ordo.gateway.signatures import sign_github


@pytest.fixture
def served() -> Iterator[tuple[Api, int]]:
    api = Api(webhook(maxBodyBytes=1024))
    app = gateway(api).app()
    thread = ServerThread("gateway")

    async def setup() -> tuple[int, Cleanup]:
        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning")
        return await serve_uvicorn(config)

    port = thread.start(setup)
    yield api, port
    thread.stop()


def raw_post(port: int, headers: bytes, *parts: bytes) -> int:
    """Send a request's head and `parts` of its body (never its end); the answer's status."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"POST /hooks/ns/issues HTTP/1.1\r\nHost: gw\r\n" + headers + b"\r\n")
        for part in parts:
            sock.sendall(part)
        sock.settimeout(10)
        return int(sock.recv(4096).decode("latin-1").split(" ", 2)[1])


def test_a_signed_delivery_over_http(served: tuple[Api, int]) -> None:
    api, port = served
    body = json.dumps({"issue": {"title": "t"}}).encode()
    headers = {"X-Hub-Signature-256": sign_github(SECRET, body), "X-GitHub-Delivery": "w-1"}
    response = httpx.post(f"http://127.0.0.1:{port}/hooks/ns/issues", content=body, headers=headers)
    assert response.status_code == 202
    assert list(api.tasks) == [response.json()["task"]]


def test_an_endless_chunked_body_is_refused_without_waiting_for_its_end(
    served: tuple[Api, int],
) -> None:
    api, port = served
    head = b"Transfer-Encoding: chunked\r\nX-Hub-Signature-256: sha256=" + b"0" * 64 + b"\r\n"
    chunk = b"200\r\n" + b"x" * 512 + b"\r\n"
    # 1536 bytes: over the cap; the terminating chunk is never sent.
    assert raw_post(port, head, chunk, chunk, chunk) == 413
    assert api.tasks == {}


def test_a_declared_length_over_the_cap_is_refused_before_the_body(
    served: tuple[Api, int],
) -> None:
    api, port = served
    assert raw_post(port, b"Content-Length: 104857600\r\n", b"{") == 413
    assert api.tasks == {}
