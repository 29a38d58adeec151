"""The console's live stream (console/live.py) against a small API server over real HTTP
(aiohttp on 127.0.0.1 serving a Task watch): a change becomes `changed` (never the object),
the watch's ERROR event `reload`, a refused watch `refused` with the API server's answer; the
stream carries no object content; closing the stream (the page going) closes the watch
connection; at most `limit` streams are open."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import kopf
import pytest
from aiohttp import web
from tests.support.threaded_server import serve_aiohttp

from ordo.console import live
from ordo.operator.kube.client import KubeClient
from ordo.operator.kube.paths import collection_path

CANARY = "canary-live-content"


@dataclass
class FakeWatch:
    """Answers Task watches with `events` (then holds the connection open), or `status`."""

    events: list[dict[str, Any]]
    status: int = 200
    open: int = 0
    params: list[dict[str, str]] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.params.append(dict(request.query))
        if self.status != 200:
            body = {"kind": "Status", "reason": "Forbidden", "message": "tasks is forbidden"}
            return web.json_response(body, status=self.status)
        response = web.StreamResponse()
        await response.prepare(request)
        self.open += 1
        try:
            for event in self.events:
                await response.write(json.dumps(event).encode() + b"\n")
            while request.transport is not None and not request.transport.is_closing():
                await asyncio.sleep(0.02)
        finally:
            self.open -= 1
        return response


def task_event(kind: str, version: str) -> dict[str, Any]:
    meta = {"name": "t", "namespace": "a", "resourceVersion": version}
    return {"type": kind, "object": {"metadata": meta, "spec": {"input": CANARY}}}


@pytest.fixture
async def api() -> AsyncIterator[tuple[FakeWatch, KubeClient]]:
    fake = FakeWatch([])
    app = web.Application()
    app.router.add_get(collection_path("Task", "a"), fake.handle)
    port, cleanup = await serve_aiohttp(app)
    kube = KubeClient(kopf.ConnectionInfo(server=f"http://127.0.0.1:{port}"))
    try:
        yield fake, kube
    finally:
        await kube.close()
        await cleanup()


async def until(predicate: Any) -> None:
    for _ in range(500):
        if predicate():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("timed out")


async def test_changes_become_one_changed_event_and_closing_closes_the_watch(
    api: tuple[FakeWatch, KubeClient],
) -> None:
    fake, kube = api
    fake.events = [task_event("ADDED", "11"), task_event("MODIFIED", "12")]
    streams = live.Streams()
    stream = live.stream(kube, ["a"], "10", streams, field_selector="metadata.name=t")
    assert await anext(stream) == "retry: 5000\n\n"
    seen = await anext(stream)
    assert seen == "event: changed\ndata: \n\n" and CANARY not in seen
    assert streams.open == 1 and fake.open == 1
    assert fake.params[0]["resourceVersion"] == "10"
    assert fake.params[0]["fieldSelector"] == "metadata.name=t"
    await stream.aclose()  # the page went
    assert streams.open == 0
    await until(lambda: fake.open == 0)


async def test_an_expired_history_reloads_and_a_refusal_is_shown(
    api: tuple[FakeWatch, KubeClient],
) -> None:
    fake, kube = api
    gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}
    fake.events = [gone]
    texts = [t async for t in live.stream(kube, ["a"], "1", live.Streams())]
    assert texts == ["retry: 5000\n\n", "event: reload\ndata: \n\n"]
    fake.status = 403
    stream = live.stream(kube, ["a"], "1", live.Streams())
    await anext(stream)
    refused = await anext(stream)
    assert refused.startswith("event: refused\ndata: 403 Forbidden") and "forbidden" in refused
    await stream.aclose()


async def test_streams_beyond_the_limit_are_refused(api: tuple[FakeWatch, KubeClient]) -> None:
    _, kube = api
    texts = [t async for t in live.stream(kube, ["a"], "1", live.Streams(limit=0))]
    assert texts == ["event: refused\ndata: too many live pages open; reload this one later\n\n"]


def test_sse_lines() -> None:
    assert live.sse("refused", "a\nb") == "event: refused\ndata: a\ndata: b\n\n"
