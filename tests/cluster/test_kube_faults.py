"""Exactly-once under Kubernetes API faults, against the real kube-apiserver: the execution
lease survives transient faults and is lost only to another holder (or its own expiry),
status writes are fenced by the executionId, and checkpoints are compressed, bounded and
fenced by the execution that owns them.

Faults are injected by an httpx transport in front of the real one (tests/support/kube_faults).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import kopf
import pytest
from tests.support.kube_faults import Fault, FaultTransport

from ordo.engine.state import RunState
from ordo.engine.transcript import AssistantMessage, SystemMessage, UserMessage
from ordo.errors import Interrupted, LeaseLost
from ordo.operator.kube.client import ApiError, Fenced, KubeClient
from ordo.operator.tasks.checkpoint import (
    EXECUTION_ANNOTATION,
    KEY,
    MAX_BYTES,
    CheckpointStore,
    CheckpointTooLarge,
    name_for,
)
from ordo.operator.tasks.lease import ExecutionLease
from ordo.operator.tasks.sealing import CheckpointUntrusted
from ordo_devcluster import ControlPlane

Factory = Callable[..., KubeClient]


@pytest.fixture
async def clients(
    control_plane: ControlPlane, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Factory]:
    """`clients()` a plain KubeClient; `clients(faults=True)` one behind a FaultTransport
    (reachable as `client.faults`)."""
    monkeypatch.setenv("KUBECONFIG", str(control_plane.kubeconfig))
    info = kopf.login_with_kubeconfig(settings=kopf.OperatorSettings())
    assert info is not None
    made: list[KubeClient] = []

    def make(*, faults: bool = False) -> KubeClient:
        holder: list[FaultTransport] = []

        def wrap(inner: Any) -> FaultTransport:
            transport = FaultTransport(inner)
            holder.append(transport)
            return transport

        client = KubeClient(info, wrap_transport=wrap if faults else None, backoff=0.05)
        if faults:
            client.faults = holder[0]  # type: ignore[attr-defined]
        made.append(client)
        return client

    yield make
    for client in made:
        await client.close()


async def new_task(client: KubeClient, namespace: str, name: str = "t1") -> dict[str, Any]:
    body = {
        "apiVersion": "ordo.dev/v1alpha1",
        "kind": "Task",
        "metadata": {"name": name},
        "spec": {"agentRef": "some-agent", "input": "hello"},
    }
    return await client.create("Task", namespace, body)


async def claimed_task(
    client: KubeClient, namespace: str, execution_id: str = "e1"
) -> dict[str, Any]:
    """A Task as a claim leaves it: Running under `execution_id` (the lease comes next)."""
    await new_task(client, namespace)
    return await client.patch(
        "Task",
        namespace,
        "t1",
        {"status": {"phase": "Running", "executionId": execution_id, "step": 0}},
        status=True,
    )


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float, what: str) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"not within {timeout}s: {what}")
        await asyncio.sleep(0.05)


# -- (a) the execution lease -----------------------------------------------------------------


async def test_lease_renewer_survives_transient_faults_and_loses_only_to_another_holder(
    clients: Factory, namespace: str
) -> None:
    api = clients()
    client = clients(faults=True)
    faults: FaultTransport = client.faults  # type: ignore[attr-defined]
    task = await claimed_task(api, namespace)
    lease = ExecutionLease(client, task, "replica-a", 6.0, "e1")  # renews every 2 s
    period = lease.duration / 3
    assert await lease.acquire()
    lost = asyncio.Event()
    renewer = asyncio.create_task(lease.keep(lost.set))

    async def renew_time() -> str:
        body = await api.get("Task", namespace, "t1")
        assert body is not None
        assert body["status"]["lease"]["holder"] == "replica-a"
        return str(body["status"]["lease"]["renewTime"])

    try:
        # Two bursts of failed renewals, of every kind: reset before the API saw it, a 500,
        # applied but the answer lost (the fenced retry passes its tests again), a timeout.
        for burst in (
            [Fault.RESET, Fault.HTTP_500, Fault.LOST],
            [Fault.TIMEOUT, Fault.HTTP_503, Fault.RESET],
        ):
            before = await renew_time()
            faults.fail(burst, method="PATCH", path_contains="/tasks/t1/status")
            await eventually(
                lambda: _true(faults.pending == 0), 4 * period, "the faults were injected"
            )
            settled = await renew_time()
            await eventually(
                lambda s=settled: _neq(renew_time(), s),  # type: ignore[misc]
                2 * period + 2,
                "a renewal succeeded after the faults",
            )
            assert await renew_time() != before
            assert not lost.is_set() and not renewer.done()
            assert lease.valid()
            lease.check()
        assert len(faults.injected) == 6
        assert {f.fault for f in faults.injected} == {
            Fault.RESET,
            Fault.HTTP_500,
            Fault.LOST,
            Fault.TIMEOUT,
            Fault.HTTP_503,
        }

        # Another process takes the lease over (as a replica does once it sees it expired).
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        await api.patch(
            "Task",
            namespace,
            "t1",
            {"status": {"lease": {"holder": "replica-b", "renewTime": now}}},
            status=True,
        )
        await asyncio.wait_for(lost.wait(), timeout=period + 2.0)  # within one renew period
        await asyncio.wait_for(renewer, timeout=2.0)  # and the renewer stopped
        assert not lease.valid()
        with pytest.raises(LeaseLost):
            lease.check()
        after = await api.get("Task", namespace, "t1")
        assert after is not None and after["status"]["lease"]["holder"] == "replica-b"
    finally:
        renewer.cancel()


async def test_lease_is_lost_when_it_expires_without_a_renewal(
    clients: Factory, namespace: str
) -> None:
    api = clients()
    client = clients(faults=True)
    faults: FaultTransport = client.faults  # type: ignore[attr-defined]
    task = await claimed_task(api, namespace)
    lease = ExecutionLease(client, task, "replica-a", 3.0, "e1")
    assert await lease.acquire()
    faults.fail_always(Fault.RESET, path_contains="/tasks/t1/status")
    lost = asyncio.Event()
    renewer = asyncio.create_task(lease.keep(lost.set))
    try:
        await asyncio.wait_for(lost.wait(), timeout=lease.duration + 2.0)
        await asyncio.wait_for(renewer, timeout=2.0)
        assert not lease.valid()
        with pytest.raises(LeaseLost):
            lease.check()
        assert len(faults.injected) >= 2  # it kept trying before giving up
    finally:
        renewer.cancel()


# -- (b) fenced status writes ----------------------------------------------------------------


async def test_status_write_is_fenced_by_the_execution_id(clients: Factory, namespace: str) -> None:
    api = clients()
    first = clients(faults=True)
    faults: FaultTransport = first.faults  # type: ignore[attr-defined]
    await new_task(api, namespace)
    with pytest.raises(Fenced):  # no executionId at all: nobody owns it yet
        await first.patch_status_fenced("Task", namespace, "t1", "exec-a", {"step": 1})
    await api.patch(
        "Task",
        namespace,
        "t1",
        {"status": {"phase": "Running", "executionId": "exec-a", "step": 0}},
        status=True,
    )

    # A fenced write is safe to retry: applied with its answer lost, the retry succeeds.
    faults.fail([Fault.LOST, Fault.HTTP_500], method="PATCH")
    written = await first.patch_status_fenced(
        "Task", namespace, "t1", "exec-a", {"step": 1, "usage": {"totalTokens": 5}}
    )
    assert written["status"]["step"] == 1 and written["status"]["usage"]["totalTokens"] == 5
    assert faults.pending == 0

    # A schema violation is an ApiError, not a fence.
    with pytest.raises(ApiError) as invalid:
        await first.patch_status_fenced("Task", namespace, "t1", "exec-a", {"step": "two"})
    assert invalid.value.status == 422 and not isinstance(invalid.value, Fenced)

    # A second executor claims the Task.
    await api.patch(
        "Task", namespace, "t1", {"status": {"executionId": "exec-b", "step": 1}}, status=True
    )
    before = (await api.get("Task", namespace, "t1") or {})["status"]
    with pytest.raises(Fenced) as fenced:
        await first.patch_status_fenced(
            "Task", namespace, "t1", "exec-a", {"step": 2, "phase": "Succeeded", "output": "x"}
        )
    assert isinstance(fenced.value, LeaseLost) and fenced.value.reason == "Interrupted"
    after = (await api.get("Task", namespace, "t1") or {})["status"]
    assert after == before
    # The current execution still writes.
    ok = await api.patch_status_fenced("Task", namespace, "t1", "exec-b", {"step": 2})
    assert ok["status"]["step"] == 2 and ok["status"]["executionId"] == "exec-b"


# -- (c) checkpoints -------------------------------------------------------------------------

WORDS = [
    "the",
    "agent",
    "calls",
    "a",
    "tool",
    "and",
    "reads",
    "the",
    "result",
    "then",
    "it",
    "plans",
    "the",
    "next",
    "step",
    "carefully",
    "with",
    "the",
    "search",
    "results",
    "weather",
    "forecast",
    "invoice",
    "customer",
    "order",
    "shipment",
    "delayed",
    "refund",
    "approved",
    "denied",
    "pending",
    "escalate",
    "summary",
    "report",
]


def transcript(chars: int, *, seed: int = 7, compressible: bool = True) -> RunState:
    rng = random.Random(seed)
    items: list[Any] = [SystemMessage("You are a careful agent."), UserMessage("Summarise.")]
    size = 0
    while size < chars:
        if compressible:
            text = " ".join(rng.choice(WORDS) for _ in range(2000))
        else:
            text = os.urandom(12_000).hex()
        items.append(AssistantMessage(text, ()) if len(items) % 2 else UserMessage(text))
        size += len(text)
    return RunState(items=items, step=len(items) // 2)


async def test_a_large_transcript_is_stored_compressed_and_reads_back_equal(
    clients: Factory, namespace: str
) -> None:
    api = clients()
    task = await new_task(api, namespace)
    state = transcript(3 * 1024 * 1024)
    store = CheckpointStore(api, task, "exec-a", "hash-1")
    await store.save(state)
    stored = await api.get("ConfigMap", namespace, name_for(task))
    assert stored is not None and KEY in stored["binaryData"] and not stored.get("data")
    assert len(stored["binaryData"][KEY]) * 3 // 4 <= MAX_BYTES
    loaded = await CheckpointStore(api, task, "exec-a").load()
    assert loaded is not None
    assert loaded[0].to_dict() == state.to_dict()
    assert loaded[1]["ordo.dev/snapshot-hash"] == "hash-1"


async def test_a_checkpoint_too_large_raises_and_keeps_the_previous_one(
    clients: Factory, namespace: str
) -> None:
    api = clients()
    task = await new_task(api, namespace)
    store = CheckpointStore(api, task, "exec-a")
    small = transcript(10_000)
    await store.save(small)
    with pytest.raises(CheckpointTooLarge) as too_large:
        await store.save(transcript(2 * 1024 * 1024, compressible=False))
    assert isinstance(too_large.value, Interrupted) and too_large.value.reason == "Interrupted"
    assert too_large.value.size > MAX_BYTES
    loaded = await CheckpointStore(api, task, "exec-a").load()
    assert loaded is not None and loaded[0].to_dict() == small.to_dict()


async def test_a_stale_executor_cannot_overwrite_the_checkpoint_of_a_newer_one(
    clients: Factory, namespace: str
) -> None:
    api = clients()
    task = await new_task(api, namespace)
    stale = CheckpointStore(api, task, "exec-a")
    await stale.save(transcript(1000, seed=1))

    newer = CheckpointStore(api, task, "exec-b")
    loaded = await newer.load()  # the resuming execution takes the checkpoint over
    assert loaded is not None and loaded[0].to_dict() == transcript(1000, seed=1).to_dict()
    with pytest.raises(Fenced):
        await stale.save(transcript(1000, seed=2))
    current = await CheckpointStore(api, task, "exec-c").load()
    assert current is not None and current[0].to_dict() == transcript(1000, seed=1).to_dict()

    # exec-c took it over in turn: exec-b is stale now, and neither deletes it.
    with pytest.raises(Fenced):
        await newer.save(transcript(1000, seed=3))
    assert not await stale.delete() and not await newer.delete()
    body = await api.get("ConfigMap", namespace, name_for(task))
    assert body is not None and body["metadata"]["annotations"][EXECUTION_ANNOTATION] == "exec-c"


async def test_a_resuming_execution_fences_a_stale_executor_that_had_no_checkpoint_yet(
    clients: Factory, namespace: str
) -> None:
    api = clients()
    task = await new_task(api, namespace)
    assert await CheckpointStore(api, task, "exec-b").load() is None  # none exists yet
    stale = CheckpointStore(api, task, "exec-a")
    with pytest.raises(Fenced):
        await stale.save(transcript(1000))  # the stale executor's first write
    assert await CheckpointStore(api, task, "exec-c").load() is None  # still no state


async def test_an_unsealed_checkpoint_of_an_earlier_version_is_refused(
    clients: Factory, namespace: str
) -> None:
    """Anyone with ConfigMap write access could have written it (sealing.py): never used."""
    api = clients()
    task = await new_task(api, namespace)
    state = transcript(5000)
    await api.create(
        "ConfigMap",
        namespace,
        {
            "metadata": {
                "name": name_for(task),
                "annotations": {EXECUTION_ANNOTATION: "old", "ordo.dev/snapshot-hash": "h"},
            },
            "data": {"state.json": json.dumps(state.to_dict())},
        },
    )
    with pytest.raises(CheckpointUntrusted) as refused:
        await CheckpointStore(api, task, "exec-new").load()
    assert refused.value.reason == "CheckpointUntrusted" and "unsealed" in str(refused.value)


async def _true(value: bool) -> bool:
    return value


async def _neq(current: Awaitable[str], old: str) -> bool:
    return await current != old
