"""The informer's state machine and the cache's fail-closed reads, against a scripted list+
watch source (the real API is in tests/cluster/test_cache_informer.py): sync only after
the first LIST, 410/ERROR relist, a broken watch is unreadable until resumed, and a resolve
through an unsynced cache fails closed instead of reading "empty"."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from ordo.api import Task
from ordo.errors import PolicyUnavailable, StoreError
from ordo.operator.kube.cache import CachedStore, NotSynced, ObjectCache
from ordo.operator.kube.client import ApiError
from ordo.operator.kube.informer import LAST_APPLIED, Informer
from ordo.operator.telemetry.metrics import Metrics
from ordo.runtime import resolve

End = None
"""Ends a scripted watch stream cleanly (the server's timeout)."""


def obj(kind: str, name: str, rv: int, ns: str = "ns", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "ordo.dev/v1alpha1",
        "kind": kind,
        "metadata": {
            "name": name,
            "namespace": ns,
            "resourceVersion": str(rv),
            "managedFields": [{"manager": "kubectl"}],
            "annotations": {LAST_APPLIED: "{...}", "keep": "me"},
        },
        "spec": spec,
    }


class Source:
    """A scripted API for one or more kinds: `lists[kind]` answers LISTs in order (an
    exception is raised), `watches[kind]` hands out one queue per WATCH request (an
    exception instead: the request fails); every request is recorded."""

    def __init__(self) -> None:
        self.lists: dict[str, list[Any]] = {}
        self.watches: dict[str, asyncio.Queue[Any]] = {}
        self.calls: list[tuple[str, str, str]] = []

    def stream(self, kind: str) -> asyncio.Queue[Any]:
        return self.watches.setdefault(kind, asyncio.Queue())

    async def list_versioned(
        self, kind: str, namespace: str | None
    ) -> tuple[list[dict[str, Any]], str]:
        self.calls.append(("list", kind, ""))
        answers = self.lists.get(kind) or []
        answer = answers.pop(0) if len(answers) > 1 else (answers[0] if answers else ([], "1"))
        if isinstance(answer, Exception):
            raise answer
        items, rv = answer
        return [dict(i, metadata=dict(i["metadata"])) for i in items], rv

    async def list_tasks_probe(self, namespace: str | None) -> None:
        """/readyz's probe of the API: answers."""

    async def watch(
        self,
        kind: str,
        namespace: str | None,
        resource_version: str,
        *,
        timeout_seconds: int,
        on_open: Callable[[], None] | None = None,
    ) -> AsyncIterator[dict[str, Any]]:
        self.calls.append(("watch", kind, resource_version))
        session = await self.stream(kind).get()
        if isinstance(session, Exception):
            raise session
        assert isinstance(session, asyncio.Queue)
        if on_open is not None:
            on_open()
        while True:
            event = await session.get()
            if event is End:
                return
            if isinstance(event, Exception):
                raise event
            yield event


@pytest.fixture
async def running() -> AsyncIterator[Callable[[Informer], Informer]]:
    tasks: list[asyncio.Task[None]] = []

    def start(informer: Informer) -> Informer:
        tasks.append(asyncio.create_task(informer.run()))
        return informer

    yield start
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def informer(source: Source, kind: str = "ToolPermission", **kw: Any) -> Informer:
    return Informer(source, kind, "ns", backoff=(0.001, 0.002), **kw)  # type: ignore[arg-type]


async def within(coro: Any) -> None:
    await asyncio.wait_for(coro, 5)  # a hang is a failure, not a slow test


async def test_unsynced_until_the_first_list_then_serves_stripped_objects(
    running: Callable[[Informer], Informer],
) -> None:
    source = Source()
    source.lists["ToolPermission"] = [
        ApiError(403, "Forbidden", "no"),
        ([obj("ToolPermission", "a", 5)], "7"),
    ]
    restarts: list[tuple[str, str]] = []
    inf = running(informer(source, on_restart=lambda k, r: restarts.append((k, r))))
    assert not inf.synced
    await within(inf.wait_until(lambda: inf.synced))
    assert restarts == [("ToolPermission", "failed")]  # the refused LIST, retried
    body = inf.get("ns", "a")
    assert body is not None
    assert "managedFields" not in body["metadata"]
    assert body["metadata"]["annotations"] == {"keep": "me"}
    assert [b["metadata"]["name"] for b in inf.list("ns")] == ["a"]
    assert inf.list("other") == []
    await within(_until(lambda: ("watch", "ToolPermission", "7") in source.calls))


async def _until(check: Callable[[], bool]) -> None:
    while not check():
        await asyncio.sleep(0)


async def test_events_apply_in_order_and_bookmarks_advance_the_version(
    running: Callable[[Informer], Informer],
) -> None:
    source = Source()
    source.lists["ToolPermission"] = [([obj("ToolPermission", "a", 5)], "7")]
    stream: asyncio.Queue[Any] = asyncio.Queue()
    source.stream("ToolPermission").put_nowait(stream)
    inf = running(informer(source))
    await within(inf.wait_until(lambda: inf.synced))
    stream.put_nowait({"type": "ADDED", "object": obj("ToolPermission", "b", 8)})
    stream.put_nowait({"type": "MODIFIED", "object": obj("ToolPermission", "a", 9, x=1)})
    stream.put_nowait({"type": "DELETED", "object": obj("ToolPermission", "b", 10)})
    await within(inf.wait_until(lambda: inf.resource_version == "10"))
    assert inf.get("ns", "b") is None
    a = inf.get("ns", "a")
    assert a is not None and a["spec"] == {"x": 1}
    bookmark = {
        "type": "BOOKMARK",
        "object": {"kind": "ToolPermission", "metadata": {"resourceVersion": "42"}},
    }
    stream.put_nowait(bookmark)
    await within(inf.wait_until(lambda: inf.resource_version == "42"))
    assert len(inf) == 1
    # The server ends the stream (its timeout): resumed at once from the bookmark, still synced.
    source.stream("ToolPermission").put_nowait(asyncio.Queue())
    stream.put_nowait(End)
    await within(_until(lambda: ("watch", "ToolPermission", "42") in source.calls))
    assert inf.synced and inf.lists == 1


@pytest.mark.parametrize("code,reason", [(410, "expired"), (500, "error")])
async def test_an_error_event_relists_and_is_unreadable_meanwhile(
    running: Callable[[Informer], Informer], code: int, reason: str
) -> None:
    source = Source()
    relist: asyncio.Future[tuple[list[dict[str, Any]], str]] = (
        asyncio.get_running_loop().create_future()
    )
    source.lists["ToolPermission"] = [([obj("ToolPermission", "a", 5)], "7")]
    stream: asyncio.Queue[Any] = asyncio.Queue()
    source.stream("ToolPermission").put_nowait(stream)
    restarts: list[str] = []
    inf = running(informer(source, on_restart=lambda k, r: restarts.append(r)))
    await within(inf.wait_until(lambda: inf.synced))

    async def slow_relist(kind: str, namespace: str | None) -> tuple[list[dict[str, Any]], str]:
        return await relist

    source.list_versioned = slow_relist  # type: ignore[method-assign]
    stream.put_nowait({"type": "ERROR", "object": {"kind": "Status", "code": code}})
    await within(inf.wait_until(lambda: not inf.synced))
    assert restarts == [reason]
    relist.set_result(([obj("ToolPermission", "c", 20)], "21"))
    await within(inf.wait_until(lambda: inf.synced))
    assert inf.get("ns", "a") is None  # the relist replaced the index wholesale
    assert inf.get("ns", "c") is not None and inf.resource_version == "21"


async def test_a_broken_watch_is_unreadable_until_resumed_from_its_version(
    running: Callable[[Informer], Informer],
) -> None:
    source = Source()
    source.lists["ToolPermission"] = [([obj("ToolPermission", "a", 5)], "7")]
    stream: asyncio.Queue[Any] = asyncio.Queue()
    watches = source.stream("ToolPermission")
    watches.put_nowait(stream)
    inf = running(informer(source))
    await within(inf.wait_until(lambda: inf.synced))
    stream.put_nowait({"type": "MODIFIED", "object": obj("ToolPermission", "a", 8)})
    stream.put_nowait(ApiError(0, "TransportError", "ReadError"))  # the connection broke
    watches.put_nowait(ApiError(503, "ServiceUnavailable", "down"))  # the first resume fails
    await within(inf.wait_until(lambda: not inf.synced))
    resumed: asyncio.Queue[Any] = asyncio.Queue()
    watches.put_nowait(resumed)
    await within(inf.wait_until(lambda: inf.synced))
    assert [c for c in source.calls if c[0] == "watch"][-1] == ("watch", "ToolPermission", "8")
    assert inf.lists == 1  # resumed, not relisted


async def test_cached_store_fails_closed_and_resolve_reports_policy_unavailable() -> None:
    source = Source()
    ns = "ns"
    source.lists["Agent"] = [([obj("Agent", "a", 1, modelRef="m")], "2")]
    source.lists["ModelEndpoint"] = [
        ([obj("ModelEndpoint", "m", 1, provider="mock", model="x")], "2")
    ]
    for kind in ("Tool", "AgentRole", "ToolPermission", "Memory"):
        source.lists[kind] = [([], "2")]
    source.lists["AgentPolicy"] = [ApiError(403, "Forbidden", "no")]  # never syncs
    metrics = Metrics()
    cache = ObjectCache(source, [ns], metrics=metrics, backoff=(0.001, 0.002))  # type: ignore[arg-type]
    store = CachedStore(cache, source)  # type: ignore[arg-type]
    with pytest.raises(NotSynced):
        await store.get("Agent", ns, "a")  # nothing listed yet: not "not found"
    await cache.start()
    try:
        agents = cache.informers["Agent", ns]
        await within(agents.wait_until(lambda: agents.synced))
        assert (await store.get("Agent", ns, "a")) is not None
        with pytest.raises(StoreError):
            await store.list("AgentPolicy", ns)  # unreadable: never an empty list
        assert not cache.synced(ns) and cache.unsynced() == [f"AgentPolicy/{ns}"]
        assert not cache.synced("elsewhere")
        task = Task.model_validate(
            {"metadata": {"name": "t", "namespace": ns}, "spec": {"agentRef": "a", "input": "hi"}}
        )
        with pytest.raises(PolicyUnavailable):
            await resolve(task, store)
        sample = metrics.registry.get_sample_value
        assert sample("ordo_cache_synced", {"kind": "Agent"}) == 1
        assert sample("ordo_cache_synced", {"kind": "AgentPolicy"}) == 0
        assert (
            sample("ordo_cache_watch_restarts_total", {"kind": "AgentPolicy", "reason": "failed"})
            or 0
        ) >= 1
    finally:
        await cache.stop()


async def test_readyz_fails_until_the_caches_are_synced() -> None:
    import aiohttp

    from ordo.operator.telemetry.health import HealthServer

    source = Source()
    source.lists["Agent"] = [ApiError(403, "Forbidden", "no"), ([], "1")]
    cache = ObjectCache(source, ["ns"], kinds=["Agent"], backoff=(0.05, 0.05))  # type: ignore[arg-type]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = HealthServer(source, Metrics(), port, None, host="127.0.0.1")  # type: ignore[arg-type]
    server.cache = cache
    await server.start()
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{port}/readyz") as response:
                assert response.status == 503
                assert "caches not synced: Agent/ns" in await response.text()
            await cache.start()
            await within(cache.wait_synced("ns"))
            async with http.get(f"http://127.0.0.1:{port}/readyz") as response:
                assert response.status == 200
    finally:
        await cache.stop()
        await server.stop()


async def test_a_kind_whose_crd_is_missing_says_how_to_fix_it(
    running: Callable[[Informer], Informer], caplog: pytest.LogCaptureFixture
) -> None:
    """An operator upgraded before its CRDs lists a kind the API does not serve (404): the
    cache stays unsynced (no Task is claimed, /readyz is 503) and the log names the CRD to
    install, not only an HTTP status."""
    source = Source()
    source.lists["ToolApproval"] = [
        ApiError(404, "NotFound", "the server could not find the requested resource"),
        ApiError(404, "NotFound", "the server could not find the requested resource"),
        ([], "3"),
    ]
    caplog.set_level("WARNING", logger="ordo.operator")
    inf = running(informer(source, kind="ToolApproval"))
    await within(inf.wait_until(lambda: inf.synced))
    messages = [r.getMessage() for r in caplog.records]
    assert any("toolapprovals.ordo.dev" in m and "CRD" in m for m in messages), messages


# -- event feed (taskfeed.py): what kopf's Task event handler delivered --------------------


def _names(events: list[tuple[str | None, dict[str, Any]]]) -> list[tuple[str | None, str]]:
    return [(kind, body["metadata"]["name"]) for kind, body in events]


async def test_a_feed_gets_listed_objects_then_watch_events_and_gap_deletions(
    running: Callable[[Informer], Informer],
) -> None:
    source = Source()
    a, b = obj("Task", "a", 5), obj("Task", "b", 6)
    a["metadata"]["uid"], b["metadata"]["uid"] = "uid-a", "uid-b"
    source.lists["Task"] = [([a, b], "7"), ([obj("Task", "c", 30)], "31")]
    stream: asyncio.Queue[Any] = asyncio.Queue()
    source.stream("Task").put_nowait(stream)
    events: list[tuple[str | None, dict[str, Any]]] = []
    inf = running(
        informer(source, "Task", on_event=lambda k, body: events.append((k, body)), index=False)
    )
    await within(_until(lambda: len(events) == 2))
    assert _names(events) == [(None, "a"), (None, "b")]  # listed, as kopf reports them
    assert "managedFields" not in events[0][1]["metadata"]
    stream.put_nowait({"type": "MODIFIED", "object": obj("Task", "a", 9, cancel=True)})
    await within(_until(lambda: len(events) == 3))
    assert events[2][0] == "MODIFIED" and events[2][1]["spec"] == {"cancel": True}
    # The index keeps no body: the listener's copy is the only one.
    assert inf.get("ns", "a") == {"metadata": {"name": "a", "namespace": "ns"}}
    # The watch expires; the relist no longer has a and b (deleted meanwhile): DELETED for
    # each (with the uid the scheduler and retention key on), then the listed c.
    stream.put_nowait({"type": "ERROR", "object": {"kind": "Status", "code": 410}})
    await within(_until(lambda: len(events) == 6))
    assert _names(events[3:]) == [("DELETED", "a"), ("DELETED", "b"), (None, "c")]
    assert events[4][1]["metadata"]["uid"] == "uid-b"


async def test_a_failing_listener_does_not_stop_the_watch(
    running: Callable[[Informer], Informer],
) -> None:
    source = Source()
    source.lists["Task"] = [([], "7")]
    stream: asyncio.Queue[Any] = asyncio.Queue()
    source.stream("Task").put_nowait(stream)
    seen: list[str] = []

    def listener(kind: str | None, body: dict[str, Any]) -> None:
        seen.append(body["metadata"]["name"])
        if body["metadata"]["name"] == "bad":
            raise RuntimeError("listener bug")

    inf = running(informer(source, "Task", on_event=listener, index=False))
    await within(inf.wait_until(lambda: inf.synced))
    stream.put_nowait({"type": "ADDED", "object": obj("Task", "bad", 8)})
    stream.put_nowait({"type": "ADDED", "object": obj("Task", "good", 9)})
    await within(inf.wait_until(lambda: inf.resource_version == "9"))
    assert seen == ["bad", "good"] and inf.synced and inf.lists == 1


async def test_an_indexing_informer_hands_listeners_copies(
    running: Callable[[Informer], Informer],
) -> None:
    source = Source()
    source.lists["ToolPermission"] = [([obj("ToolPermission", "a", 5)], "7")]
    events: list[dict[str, Any]] = []
    inf = running(informer(source, on_event=lambda k, body: events.append(body)))
    await within(_until(lambda: len(events) == 1))
    events[0]["spec"]["changed"] = True
    held = inf.get("ns", "a")
    assert held is not None and held["spec"] == {}
