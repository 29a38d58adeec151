"""Garbage collection and namespace deletion with the operator running, on the single node
(kube-controller-manager's garbage collector and namespace controller are real here).

The operator is a Helm release (`ordo-gc`, every namespace) with `operator.keepCheckpoints:
true`: it never deletes a checkpoint ConfigMap itself, so when one disappears, the garbage
collector removed it through its ownerReference to the Task.

The Tasks are examples/openai's against the scripted OpenAI server on the node's IP: the first
model answer (a tool call) comes at once, so step 1 completes and is checkpointed; the second
takes 40 s, so the Task is Running, holding its execution lease (`status.lease`), when the
test deletes it.

- Deleting a running Task: the operator cancels the run and releases its finalizer, the Task
  goes, and so does its checkpoint ConfigMap `ordo-checkpoint-<uid>` (it carries a controller
  ownerReference to the Task).
- Deleting a namespace that holds a running Task completes: the namespace controller deletes the
  Task, the operator releases the finalizer, the namespace disappears.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from tests.node.installing import (
    MODEL_KEY,
    HostOpenAIServer,
    apply_docs,
    diagnostics,
    exists,
    get_json,
    helm_cmd,
    helm_install,
    import_operator_image,
    node_ip,
    openai_manifests,
    release_selector,
    task,
    the_ready_pod,
    wait_deployment_ready,
    wait_for,
    wait_task,
)

RELEASE = "ordo-gc"
SELECTOR = release_selector(RELEASE)
SLOW = 40.0


@pytest.fixture(scope="module")
def operator(node_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The release namespace of a running `ordo-gc` operator (keepCheckpoints on)."""
    tmp = tmp_path_factory.mktemp("gc-release")
    import_operator_image(node_cluster)
    namespace = node_cluster.create_namespace("ordo-gc")
    helm_install(tmp, node_cluster, RELEASE, namespace, {"operator": {"keepCheckpoints": True}})
    try:
        wait_deployment_ready(node_cluster, namespace, RELEASE, SELECTOR)
        pod = the_ready_pod(node_cluster, namespace, SELECTOR)
        assert "--keep-checkpoints" in pod["spec"]["containers"][0]["args"]
        yield namespace
    finally:
        helm_cmd(tmp, node_cluster, "uninstall", RELEASE, "-n", namespace, "--wait")


@pytest.fixture(scope="module")
def model(node_cluster: Any) -> Iterator[HostOpenAIServer]:
    script = {
        marker: [
            {"tool_calls": [{"name": "order-status", "arguments": {"orderId": "A-1001"}}]},
            {"delay": SLOW, "text": "too late"},
        ]
        for marker in ("gc-delete-task", "gc-delete-namespace")
    }
    # Other conversations (and anything past a script) get the stateless `auto` answers.
    with HostOpenAIServer(
        node_ip(node_cluster), script, fallback={"auto": True}, require_key=MODEL_KEY
    ) as server:
        yield server


def start_slow_task(
    cluster: Any, namespace: str, server: HostOpenAIServer, marker: str
) -> dict[str, Any]:
    """Apply examples/openai (its Task renamed, with `marker` in the input) and wait until step 1
    is checkpointed: the Task Running under a lease, its checkpoint ConfigMap present."""
    docs = openai_manifests(server.url, timeout="120s")
    for doc in docs:
        if doc["kind"] == "Task":
            doc["metadata"]["name"] = marker
            doc["spec"]["input"] = f"{marker}: where is my order A-1001?"
    apply_docs(cluster, namespace, docs)

    def checkpointed() -> dict[str, Any] | None:
        body = task(cluster, namespace, marker)
        status = body.get("status") or {}
        uid = body["metadata"]["uid"]
        if (
            status.get("phase") == "Running"
            and status.get("step", 0) >= 1
            and (status.get("lease") or {}).get("holder")
            and exists(cluster, "configmap", f"ordo-checkpoint-{uid}", "-n", namespace)
        ):
            return body
        return None

    body: dict[str, Any] = wait_for(
        checkpointed,
        90,
        f"Task {marker} Running with a checkpoint and a lease",
        diagnose=lambda: str(task(cluster, namespace, marker).get("status")),
    )
    return body


def model_calls(server: HostOpenAIServer, marker: str) -> list[Any]:
    return [r for r in server.requests if marker in server.user_text(r.body)]


def expected_owner(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "ordo.dev/v1alpha1",
            "kind": "Task",
            "name": body["metadata"]["name"],
            "uid": body["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": False,
        }
    ]


def test_deleting_a_running_task_removes_its_checkpoint(
    node_cluster: Any, operator: str, model: HostOpenAIServer
) -> None:
    cluster = node_cluster
    namespace = cluster.create_namespace("gc-task")
    name = "gc-delete-task"
    body = start_slow_task(cluster, namespace, model, name)
    uid = body["metadata"]["uid"]
    assert "ordo.dev/run" in body["metadata"].get("finalizers", [])
    checkpoint = get_json(cluster, "configmap", f"ordo-checkpoint-{uid}", "-n", namespace)
    assert checkpoint["metadata"]["ownerReferences"] == expected_owner(body)

    deleted = time.monotonic()
    cluster.kubectl("delete", "task", name, "-n", namespace, "--wait=false")

    def diagnose() -> str:
        return (
            diagnostics(cluster, operator, SELECTOR)
            + "\n"
            + cluster.kubectl(
                "get", "configmaps,tasks", "-n", namespace, "-o", "wide", check=False
            ).stdout
        )

    # The operator cancels the run and lets the Task go (finalizer released) ...
    wait_for(
        lambda: not exists(cluster, "task", name, "-n", namespace),
        60,
        "the deleted Task to disappear",
        diagnose=diagnose,
    )
    task_gone = time.monotonic() - deleted
    # ... and the garbage collector removes what the Task owned (keepCheckpoints: the operator
    # itself never deletes the checkpoint).
    wait_for(
        lambda: not exists(cluster, "configmap", f"ordo-checkpoint-{uid}", "-n", namespace),
        60,
        "the checkpoint ConfigMap to be garbage-collected",
        diagnose=diagnose,
    )
    gc_done = time.monotonic() - deleted
    # The cancelled run made no further model call (the one in flight was abandoned).
    assert len(model_calls(model, name)) <= 2
    print(f"\nrunning Task deleted -> gone: {task_gone:.1f} s; checkpoint gone: {gc_done:.1f} s")
    the_ready_pod(cluster, operator, SELECTOR)  # still up, never restarted


def test_deleting_a_namespace_with_a_running_task_completes(
    node_cluster: Any, operator: str, model: HostOpenAIServer
) -> None:
    cluster = node_cluster
    namespace = cluster.create_namespace("gc-ns")
    name = "gc-delete-namespace"
    start_slow_task(cluster, namespace, model, name)

    deleted = time.monotonic()
    cluster.kubectl("delete", "namespace", namespace, "--wait=false")

    def diagnose() -> str:
        ns = cluster.kubectl("get", "namespace", namespace, "-o", "yaml", check=False).stdout
        left = cluster.kubectl(
            "get", "tasks,configmaps,secrets", "-n", namespace, "-o", "yaml", check=False
        ).stdout
        return f"{ns}\n{left[-4000:]}\n{diagnostics(cluster, operator, SELECTOR)}"

    wait_for(
        lambda: not exists(cluster, "namespace", namespace),
        150,
        f"namespace {namespace} (with a running Task) to be deleted",
        interval=1,
        diagnose=diagnose,
    )
    print(f"\nnamespace with a running Task deleted -> gone: {time.monotonic() - deleted:.1f} s")
    the_ready_pod(cluster, operator, SELECTOR)


def test_finished_task_keeps_its_checkpoint_until_deleted(
    node_cluster: Any, operator: str, model: HostOpenAIServer
) -> None:
    """With keepCheckpoints a finished Task's checkpoint stays (the operator does not delete
    it), so deleting the Task leaves the garbage collector as the only remover."""
    cluster = node_cluster
    namespace = cluster.create_namespace("gc-done")
    apply_docs(cluster, namespace, openai_manifests(model.url))
    name = next(d["metadata"]["name"] for d in openai_manifests(model.url) if d["kind"] == "Task")
    body = wait_task(cluster, namespace, name)
    assert body["status"]["phase"] == "Succeeded", body["status"]
    uid = body["metadata"]["uid"]
    assert exists(cluster, "configmap", f"ordo-checkpoint-{uid}", "-n", namespace)
    cluster.kubectl("delete", "task", name, "-n", namespace, "--wait=true", "--timeout=60s")
    wait_for(
        lambda: not exists(cluster, "configmap", f"ordo-checkpoint-{uid}", "-n", namespace),
        60,
        "the finished Task's checkpoint to be garbage-collected",
    )
