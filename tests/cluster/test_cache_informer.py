"""The operator's watch-fed cache against the real kube-apiserver (issue 14):

- a ToolPermission or AgentPolicy change is what the next read returns as soon as its watch
  event arrived (the test waits on the informer, never on time), and reads cost no request;
- a broken watch makes reads fail closed (policies: `PolicyUnavailable`; permissions: the
  cannot-decide state) until the watch is resumed, which then brings the changes made
  meanwhile;
- an expired watch (410 Gone) relists, and the relist drops what was deleted meanwhile;
- the scheduler claims no Task while its namespace's caches are not synced, and runs it once
  they are;
- end to end (the run re-reads its governance at each step boundary, engine/livepolicy.py):
  a ToolPermission change made while a Task's model call is in flight decides that Task's
  next tool call, and a watch broken meanwhile ends it `PolicyUnavailable`; the tool never
  runs in either case.

Watches are broken by an httpx transport in front of the real one (`CutTransport` below):
it cuts the open watch streams, refuses new connections while told to, and can answer the
next watch with the apiserver's `410 Gone` ERROR event.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import kopf
import pytest
from aiohttp import web
from tests.support.counting_tool import CountingTool
from tests.support.openai_server import OpenAIServer

from ordo.api import Agent
from ordo.errors import PolicyUnavailable, StoreError
from ordo.operator.kube.cache import CachedStore, ObjectCache
from ordo.operator.kube.client import KubeClient
from ordo.operator.lifecycle.scheduler import TaskScheduler
from ordo.operator.settings import SchedulerSettings
from ordo.operator.telemetry.metrics import Metrics
from ordo.runtime.policies import permissions, selecting_policies
from ordo_devcluster import ControlPlane


class _CutStream(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream, cut: asyncio.Event) -> None:
        self._inner = inner
        self._cut = cut

    async def __aiter__(self) -> AsyncIterator[bytes]:
        chunks = self._inner.__aiter__()
        while True:
            read = asyncio.ensure_future(chunks.__anext__())
            cut = asyncio.ensure_future(self._cut.wait())
            await asyncio.wait({read, cut}, return_when=asyncio.FIRST_COMPLETED)
            if not read.done():
                read.cancel()
                await asyncio.gather(read, return_exceptions=True)
                raise httpx.ReadError("test: watch stream cut")
            cut.cancel()
            try:
                yield read.result()
            except StopAsyncIteration:
                return

    async def aclose(self) -> None:
        await self._inner.aclose()


@dataclass
class CutTransport(httpx.AsyncBaseTransport):
    inner: httpx.AsyncBaseTransport
    refusing: bool = False
    expire_next_watch: str = ""
    """A path fragment: the next watch whose path contains it is answered 410 Gone."""
    watches: int = 0
    reads: list[str] = field(default_factory=list)
    """Method and path of every request that is not a watch."""
    _cut: asyncio.Event = field(default_factory=asyncio.Event)

    def cut(self) -> None:
        """Break every open watch stream (the client sees a reset connection)."""
        self._cut.set()
        self._cut = asyncio.Event()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        cut = self._cut  # a stream opened across a cut() is cut as well
        if self.refusing:
            raise httpx.ConnectError("test: connection refused", request=request)
        watch = request.url.params.get("watch") == "true"
        if not watch:
            self.reads.append(f"{request.method} {request.url.path}")
            return await self.inner.handle_async_request(request)
        self.watches += 1
        if self.expire_next_watch and self.expire_next_watch in request.url.path:
            self.expire_next_watch = ""
            gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}
            return httpx.Response(200, content=json.dumps(gone).encode() + b"\n", request=request)
        response = await self.inner.handle_async_request(request)
        assert isinstance(response.stream, httpx.AsyncByteStream)
        response.stream = _CutStream(response.stream, cut)
        return response


@dataclass
class Rig:
    admin: KubeClient
    cache: ObjectCache
    store: CachedStore
    transport: CutTransport
    metrics: Metrics
    cache_client: KubeClient


@pytest.fixture
async def rig(
    control_plane: ControlPlane, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Callable[[], Rig]]:
    monkeypatch.setenv("KUBECONFIG", str(control_plane.kubeconfig))
    info = kopf.login_with_kubeconfig(settings=kopf.OperatorSettings())
    assert info is not None
    made: list[tuple[KubeClient, ...]] = []
    caches: list[ObjectCache] = []

    def make() -> Rig:
        holder: list[CutTransport] = []

        def wrap(inner: httpx.AsyncBaseTransport) -> CutTransport:
            holder.append(CutTransport(inner))
            return holder[0]

        client = KubeClient(info, wrap_transport=wrap, backoff=0.05)
        admin = KubeClient(info)
        metrics = Metrics()
        cache = ObjectCache(client, [namespace], metrics=metrics, backoff=(0.05, 0.2))
        caches.append(cache)
        made.append((client, admin))
        return Rig(admin, cache, CachedStore(cache, client), holder[0], metrics, client)

    yield make
    for cache in caches:
        await cache.stop()
    for clients in made:
        for client in clients:
            await client.close()


def ordo(kind: str, name: str, spec: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "ordo.dev/v1alpha1",
        "kind": kind,
        "metadata": {"name": name, **meta},
        "spec": spec,
    }


async def within(coro: Any, seconds: float = 30) -> Any:
    return await asyncio.wait_for(coro, seconds)  # a hang fails; nothing is timed


async def seen(rig: Rig, kind: str, namespace: str, written: dict[str, Any] | None) -> None:
    """Wait until the cache's informer applied the event of `written` (or any change)."""
    informer = rig.cache.informer(kind, namespace)
    assert informer is not None
    version = int(written["metadata"]["resourceVersion"]) if written else 0

    def caught_up() -> bool:
        return informer.synced and int(informer.resource_version or 0) >= version

    await within(informer.wait_until(caught_up))


async def setup_governance(admin: KubeClient, ns: str) -> Agent:
    await admin.create("ModelEndpoint", ns, ordo("ModelEndpoint", "m", mock_endpoint()))
    await admin.create(
        "Tool",
        ns,
        ordo("Tool", "search", {"type": "http", "http": {"url": "http://127.0.0.1:9/x"}}),
    )
    body = await admin.create(
        "Agent",
        ns,
        ordo(
            "Agent",
            "a",
            {"modelRef": "m", "tools": ["search"], "roles": ["reader"]},
            labels={"team": "x"},
        ),
    )
    await admin.create(
        "AgentRole", ns, ordo("AgentRole", "reader", {"permissions": ["tool:search:invoke"]})
    )
    await admin.create(
        "ToolPermission",
        ns,
        ordo(
            "ToolPermission",
            "search",
            {"toolRef": "search", "requiredPermissions": ["tool:search:invoke"]},
        ),
    )
    await admin.create("AgentPolicy", ns, ordo("AgentPolicy", "p", {"blockedTools": []}))
    return Agent.model_validate(body)


def mock_endpoint(turns: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"provider": "mock", "mock": {"turns": turns or [{"text": "done"}]}}


async def started(rig: Callable[[], Rig], namespace: str) -> tuple[Rig, Agent]:
    """A rig over the governance objects, its cache synced."""
    r = rig()
    agent = await setup_governance(r.admin, namespace)
    await r.cache.start()
    await within(r.cache.wait_synced(namespace))
    return r, agent


async def break_watches(r: Rig) -> None:
    """The API becomes unreachable for the cache's client and its watches break; returns
    once every informer noticed."""
    r.transport.refusing = True
    r.transport.cut()
    for informer in r.cache.informers.values():
        await within(informer.wait_until(lambda i=informer: not i.synced))  # type: ignore[misc]


async def test_a_change_is_read_as_soon_as_its_watch_event_arrives_without_requests(
    rig: Callable[[], Rig], namespace: str
) -> None:
    r, agent = await started(rig, namespace)
    assert r.metrics.registry.get_sample_value("ordo_cache_synced", {"kind": "AgentPolicy"}) == 1
    rules = (await permissions(r.store, agent)).rules
    assert rules["search"][0].required == ("tool:search:invoke",)
    before = dict(r.cache_client.requests)

    permission = await r.admin.get("ToolPermission", namespace, "search")
    assert permission is not None
    permission["spec"]["requiredPermissions"] = ["tool:search:admin"]
    written = await r.admin.replace("ToolPermission", namespace, "search", permission)
    await seen(r, "ToolPermission", namespace, written)
    now = await permissions(r.store, agent)
    assert now.rules["search"][0].required == ("tool:search:admin",)
    assert now.unreadable is None

    written = await r.admin.patch(
        "AgentPolicy", namespace, "p", {"spec": {"blockedTools": ["search"]}}
    )
    await seen(r, "AgentPolicy", namespace, written)
    policies = await selecting_policies(r.store, agent)
    assert [p.spec.blocked_tools for p in policies] == [["search"]]

    written = await r.admin.create(
        "AgentPolicy", namespace, ordo("AgentPolicy", "q", {"maxSteps": 3})
    )
    await seen(r, "AgentPolicy", namespace, written)
    assert [p.name for p in await selecting_policies(r.store, agent)] == ["p", "q"]
    # Everything above came from the watch: no GET or LIST by the cache's client.
    assert {k: v for k, v in r.cache_client.requests.items() if k != "watch"} == {
        k: v for k, v in before.items() if k != "watch"
    }


async def test_a_broken_watch_fails_policy_reads_closed_until_it_is_resumed(
    rig: Callable[[], Rig], namespace: str
) -> None:
    r, agent = await started(rig, namespace)
    policies = r.cache.informer("AgentPolicy", namespace)
    assert policies is not None

    await break_watches(r)
    with pytest.raises(PolicyUnavailable, match="could not be listed"):
        await selecting_policies(r.store, agent)  # never "no policies"
    perms = await permissions(r.store, agent)
    assert perms.unreadable is not None  # governance cannot decide: every tool call denied
    with pytest.raises(StoreError):
        await r.store.get("Agent", namespace, "a")
    assert not r.cache.synced(namespace)
    # Changed while the watch is down: seen once it is resumed.
    written = await r.admin.patch("AgentPolicy", namespace, "p", {"spec": {"suspend": True}})

    r.transport.refusing = False
    await seen(r, "AgentPolicy", namespace, written)
    assert (await selecting_policies(r.store, agent))[0].spec.suspend is True
    sample = r.metrics.registry.get_sample_value
    assert (
        sample("ordo_cache_watch_restarts_total", {"kind": "AgentPolicy", "reason": "failed"}) or 0
    ) >= 1
    assert policies.lists == 1  # resumed from its resourceVersion, not relisted


async def test_an_expired_watch_relists_and_drops_what_was_deleted(
    rig: Callable[[], Rig], namespace: str
) -> None:
    r, agent = await started(rig, namespace)
    roles = r.cache.informer("AgentRole", namespace)
    assert roles is not None
    await break_watches(r)
    await r.admin.delete("AgentRole", namespace, "reader")
    r.transport.expire_next_watch = "/agentroles"  # the resume meets 410 Gone
    r.transport.refusing = False
    await within(roles.wait_until(lambda: roles.lists >= 2 and roles.synced))
    assert roles.get(namespace, "reader") is None
    assert (await permissions(r.store, agent)).missing_roles == ("reader",)
    sample = r.metrics.registry.get_sample_value
    assert (
        sample("ordo_cache_watch_restarts_total", {"kind": "AgentRole", "reason": "expired"}) == 1
    )


async def test_the_scheduler_claims_nothing_until_the_namespace_caches_sync(
    rig: Callable[[], Rig], namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    r = rig()
    await setup_governance(r.admin, namespace)
    r.transport.refusing = True  # no informer can list yet
    await r.cache.start()
    scheduler = TaskScheduler(
        r.cache_client,
        settings=SchedulerSettings(max_concurrent_tasks=2),
        metrics=r.metrics,
        store=r.store,
        cache=r.cache,
    )
    try:
        task = await r.admin.create(
            "Task", namespace, ordo("Task", "t1", {"agentRef": "a", "input": "hi"})
        )
        caplog.set_level(logging.INFO, logger="ordo.operator")
        scheduler.observe(task, "ADDED")

        async def held() -> None:
            while not any("caches of the namespace to sync" in m for m in caplog.messages):
                await asyncio.sleep(0.02)

        await within(held())
        status = (await r.admin.get("Task", namespace, "t1") or {}).get("status") or {}
        assert "executionId" not in status and status.get("phase") in (None, "Pending")

        r.transport.refusing = False
        done: dict[str, Any] = {}

        async def finished() -> None:
            while True:
                body = await r.admin.get("Task", namespace, "t1") or {}
                if (body.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                    done.update(body["status"])
                    return
                await asyncio.sleep(0.1)

        await within(finished(), 60)
        assert (done["phase"], done.get("output")) == ("Succeeded", "done"), done
    finally:
        await scheduler.shutdown()


class HeldModel(OpenAIServer):
    """The scripted OpenAI server; the first model call is answered only once `release` is
    set, and `arrived` is set when it comes in."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.arrived = threading.Event()
        self.release = threading.Event()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if self.is_model_call(request) and not self.arrived.is_set():
            self.arrived.set()
            await asyncio.to_thread(self.release.wait, 120)
        return await super()._handle(request)


async def run_held(
    r: Rig, namespace: str, while_held: Callable[[], Any]
) -> tuple[dict[str, Any], int, int]:
    """Run one Task of an Agent allowed to call `order` (role + ToolPermission) whose model
    asks for `order` after its first call, held open while `while_held()` runs. Returns the
    final status, the model calls and the tool calls."""
    ns = namespace
    call = {"name": "order", "arguments": {"item": "widget"}, "id": "call_1"}
    with CountingTool() as tool, HeldModel([{"tool_calls": [call]}, {"text": "ordered"}]) as model:
        endpoint = {"provider": "openai-compatible", "baseUrl": model.url + "/v1", "model": "m"}
        for kind, name, spec in (
            ("ModelEndpoint", "model", endpoint),
            ("Tool", "order", {"type": "http", "http": {"url": tool.url}}),
            ("AgentRole", "buyer", {"permissions": ["tool:order:invoke"]}),
            (
                "ToolPermission",
                "order",
                {"toolRef": "order", "requiredPermissions": ["tool:order:invoke"]},
            ),
            ("Agent", "agent", {"modelRef": "model", "tools": ["order"], "roles": ["buyer"]}),
        ):
            await r.admin.create(kind, ns, ordo(kind, name, spec))
        await r.cache.start()
        await within(r.cache.wait_synced(ns))
        # The scheduler writes with its own client: only the cache's watches break here.
        scheduler = TaskScheduler(r.admin, metrics=r.metrics, store=r.store, cache=r.cache)
        try:
            task = await r.admin.create(
                "Task", ns, ordo("Task", "t", {"agentRef": "agent", "input": "buy"})
            )
            scheduler.observe(task, "ADDED")
            assert await asyncio.to_thread(model.arrived.wait, 60), "no model call"
            await while_held()
            model.release.set()

            async def finished() -> dict[str, Any]:
                while True:
                    status = (await r.admin.get("Task", ns, "t") or {}).get("status") or {}
                    if status.get("phase") in ("Succeeded", "Failed"):
                        return status
                    await asyncio.sleep(0.1)

            status = await within(finished(), 60)
            return status, model.count, tool.count
        finally:
            await scheduler.shutdown()


async def test_a_toolpermission_change_decides_the_next_tool_call_of_a_running_task(
    rig: Callable[[], Rig], namespace: str
) -> None:
    r = rig()

    async def require_more() -> None:
        written = await r.admin.patch(
            "ToolPermission",
            namespace,
            "order",
            {"spec": {"requiredPermissions": ["tool:order:admin"]}},
        )
        await seen(r, "ToolPermission", namespace, written)

    status, model_calls, tool_calls = await run_held(r, namespace, require_more)
    assert (status["phase"], status["reason"]) == ("Failed", "ToolDenied"), status
    assert [c["decision"] for c in status["toolCalls"]] == ["denied"]
    assert (model_calls, tool_calls) == (1, 0)  # denied before it ran


async def test_a_watch_broken_mid_run_ends_the_task_policy_unavailable(
    rig: Callable[[], Rig], namespace: str
) -> None:
    r = rig()
    status, model_calls, tool_calls = await run_held(r, namespace, lambda: break_watches(r))
    assert (status["phase"], status["reason"]) == ("Failed", "PolicyUnavailable"), status
    assert "not synced" in status["message"]
    assert (model_calls, tool_calls) == (1, 0)
