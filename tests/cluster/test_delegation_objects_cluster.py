"""The operator's side of delegation against a real API server, without an operator process:
`KubeDelegator` (create-or-get of child Tasks, never adopting an impostor, never recreating a
vanished child), `ChildGate` (a waiting parent wakes when its children end, and shows their
progress) and the cancel cascade (operator/tasks/children.py, childwait.py)."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from typing import Any

import pytest
from prometheus_client import generate_latest

from ordo.operator.kube.client import KubeClient, login
from ordo.operator.tasks import childwait
from ordo.operator.tasks.children import KubeDelegator
from ordo.operator.telemetry.metrics import Metrics
from ordo.runtime.delegation import (
    CHAIN_ANNOTATION,
    PARENT_LABEL,
    PARENT_UID_LABEL,
    ROOT_LABEL,
    ChildNotOwned,
    ChildRequest,
    child_name,
    lineage_of,
)
from ordo_devcluster import ControlPlane


@pytest.fixture
async def client(
    control_plane: ControlPlane, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[KubeClient]:
    monkeypatch.setenv("KUBECONFIG", str(control_plane.kubeconfig))
    assert os.environ["KUBECONFIG"]
    c = KubeClient(login())
    try:
        yield c
    finally:
        await c.close()


def task(name: str, agent: str = "boss", **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "ordo.dev/v1alpha1",
        "kind": "Task",
        "metadata": {"name": name, **meta},
        "spec": {"agentRef": agent, "input": "go"},
    }


def request(key: str = "call_1", known: bool = False) -> ChildRequest:
    return ChildRequest(
        key=key,
        agent="helper",
        input="find it",
        timeout=12.3,
        token_budget=500,
        tool="ask-helper",
        known=known,
    )


async def parent_in(client: KubeClient, ns: str, name: str = "root") -> dict[str, Any]:
    body = task(name, annotations={"ordo.dev/requested-by": "alice"})
    return await client.create("Task", ns, body)


def delegator(client: KubeClient, parent: dict[str, Any], metrics: Metrics) -> KubeDelegator:
    lineage = lineage_of(parent["metadata"]["name"], "boss", parent["metadata"])
    return KubeDelegator(client, parent, lineage, metrics)


def counted(metrics: Metrics, ns: str, outcome: str) -> bool:
    text = generate_latest(metrics.registry).decode()
    return f'ordo_delegations_total{{namespace="{ns}",outcome="{outcome}"}} 1.0' in text


async def test_a_child_is_created_once_as_the_contract_says(
    client: KubeClient, namespace: str
) -> None:
    parent = await parent_in(client, namespace)
    metrics = Metrics()
    d = delegator(client, parent, metrics)
    first = await d.start(request())
    again = await d.start(request())
    uid = parent["metadata"]["uid"]
    assert first.name == again.name == child_name("root", uid, "call_1")
    assert (first.phase, first.ended) == ("Pending", False)
    children = await client.list("Task", namespace, f"{PARENT_UID_LABEL}={uid}")
    (child,) = children
    meta = child["metadata"]
    assert meta["labels"] == {PARENT_LABEL: "root", PARENT_UID_LABEL: uid, ROOT_LABEL: "root"}
    assert json.loads(meta["annotations"][CHAIN_ANNOTATION]) == ["boss", "helper"]
    assert meta["annotations"]["ordo.dev/requested-by"] == "alice"
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "ordo.dev/v1alpha1",
            "kind": "Task",
            "name": "root",
            "uid": uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert {k: v for k, v in child["spec"].items() if k != "cancel"} == {
        "agentRef": "helper",
        "input": "find it",
        "limits": {"timeout": "13s", "maxTokens": 500},
    }
    assert counted(metrics, namespace, "created") and counted(metrics, namespace, "found")
    # Its status, as the parent sees it.
    await client.patch(
        "Task",
        namespace,
        first.name,
        {
            "status": {
                "phase": "Succeeded",
                "reason": "Succeeded",
                "output": "42",
                "usage": {"inputTokens": 7, "outputTokens": 3, "totalTokens": 10},
            }
        },
        status=True,
    )
    ended = await d.start(request(known=True))
    assert (ended.phase, ended.output, ended.usage.total_tokens, ended.ended) == (
        "Succeeded",
        "42",
        10,
        True,
    )


async def test_an_impostor_is_refused_and_a_vanished_child_is_not_recreated(
    client: KubeClient, namespace: str
) -> None:
    parent = await parent_in(client, namespace)
    metrics = Metrics()
    d = delegator(client, parent, metrics)
    name = child_name("root", parent["metadata"]["uid"], "call_x")
    await client.create("Task", namespace, task(name, "helper"))
    with pytest.raises(ChildNotOwned):
        await d.start(request("call_x"))
    impostor = await client.get("Task", namespace, name)
    assert impostor is not None and not impostor["metadata"].get("ownerReferences")
    assert counted(metrics, namespace, "notOwned")
    # Owned (anyone who reads the parent's uid may set that), but running another input.
    owned = task(child_name("root", parent["metadata"]["uid"], "call_y"), "helper")
    ref = {"apiVersion": "ordo.dev/v1alpha1", "kind": "Task", "name": "root"}
    owned["metadata"]["ownerReferences"] = [
        {**ref, "uid": parent["metadata"]["uid"], "controller": True}
    ]
    await client.create("Task", namespace, owned)
    with pytest.raises(ChildNotOwned):
        await d.start(request("call_y"))
    gone = await d.start(request("call_gone", known=True))
    assert (gone.phase, gone.reason) == ("Failed", "ChildVanished")
    vanished = child_name("root", parent["metadata"]["uid"], "call_gone")
    assert await client.get("Task", namespace, vanished) is None
    assert counted(metrics, namespace, "vanished")


async def test_a_waiting_parent_wakes_when_its_child_ends_and_shows_its_progress(
    client: KubeClient, namespace: str
) -> None:
    parent = await parent_in(client, namespace)
    child = await delegator(client, parent, Metrics()).start(request())
    await client.patch(
        "Task",
        namespace,
        "root",
        {
            "status": {
                "phase": "Running",
                "executionId": "exec-1",
                "children": [{"name": child.name, "agent": "helper", "phase": "Pending"}],
                "conditions": [
                    {
                        "type": "AwaitingChildren",
                        "status": "True",
                        "reason": "AwaitingChildren",
                        "message": "waiting",
                        "lastTransitionTime": "2026-01-01T00:00:00Z",
                    }
                ],
            }
        },
        status=True,
    )
    metrics = Metrics()
    gate = childwait.ChildGate(client, metrics)
    wake, cancel = asyncio.Event(), asyncio.Event()

    async def past(body: dict[str, Any]) -> float:
        return -5.0

    # Past its deadline the parent resumes (to end Timeout) whatever its children do.
    await asyncio.wait_for(gate.wait(namespace, "root", wake, cancel, past), 10)

    async def plenty(body: dict[str, Any]) -> float:
        return 600.0

    waiting = asyncio.create_task(gate.wait(namespace, "root", wake, cancel, plenty))
    approval = [
        {
            "type": "AwaitingApproval",
            "status": "True",
            "reason": "AwaitingApproval",
            "message": "m",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
    ]
    await client.patch(
        "Task",
        namespace,
        child.name,
        {"status": {"phase": "Running", "conditions": approval}},
        status=True,
    )
    for _ in range(100):  # the watch would deliver the event; the test delivers it
        gate.child_changed(await client.get("Task", namespace, child.name) or {})
        shown = ((await client.get("Task", namespace, "root")) or {})["status"]["children"][0]
        if shown.get("awaitingApproval"):
            break
        await asyncio.sleep(0.1)
    assert (shown["phase"], shown.get("awaitingApproval")) == ("Running", True)
    assert not waiting.done()
    assert "ordo_tasks_awaiting_children 1.0" in generate_latest(metrics.registry).decode()
    await client.patch(
        "Task",
        namespace,
        child.name,
        {"status": {"phase": "Failed", "reason": "MaxStepsExceeded", "conditions": []}},
        status=True,
    )
    gate.child_changed(await client.get("Task", namespace, child.name) or {})
    await asyncio.wait_for(waiting, 10)
    shown = ((await client.get("Task", namespace, "root")) or {})["status"]["children"][0]
    assert (shown["phase"], shown["reason"], shown.get("awaitingApproval")) == (
        "Failed",
        "MaxStepsExceeded",
        None,
    )
    assert gate.waiting == {}
    assert "ordo_tasks_awaiting_children 0.0" in generate_latest(metrics.registry).decode()


async def test_the_cascade_cancels_running_children_and_deletes_those_of_a_deleted_parent(
    client: KubeClient, namespace: str
) -> None:
    parent = await parent_in(client, namespace)
    d = delegator(client, parent, Metrics())
    running = await d.start(request("a"))
    ended = await d.start(request("b"))
    await client.patch(
        "Task", namespace, ended.name, {"status": {"phase": "Succeeded"}}, status=True
    )
    await childwait.cascade(client, parent)
    assert ((await client.get("Task", namespace, running.name)) or {})["spec"].get("cancel") is True
    assert not ((await client.get("Task", namespace, ended.name)) or {})["spec"].get("cancel")
    # A parent being deleted (a finalizer keeps it) takes its children with it.
    await client.patch("Task", namespace, "root", {"metadata": {"finalizers": ["test/hold"]}})
    await client.delete("Task", namespace, "root")
    deleting = await client.get("Task", namespace, "root")
    assert deleting is not None and deleting["metadata"].get("deletionTimestamp")
    await childwait.cascade(client, deleting)
    assert await client.get("Task", namespace, running.name) is None
    assert await client.get("Task", namespace, ended.name) is None
    await client.patch("Task", namespace, "root", {"metadata": {"finalizers": None}})
