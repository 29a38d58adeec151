"""The checkpoints of finished Tasks are deleted in batches (operator/tasks/reaper.py): one
`deletecollection` per namespace and flush instead of one DELETE per Task."""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import parse_qs

import httpx
import kopf

from ordo.operator.kube.client import KubeClient
from ordo.operator.tasks.checkpoint import UID_LABEL, CheckpointStore
from ordo.operator.tasks.reaper import CheckpointReaper


class Api:
    """Records requests; `refuse` answers every DELETE of a collection with that code."""

    def __init__(self, refuse: int | None = None) -> None:
        self.requests: list[httpx.Request] = []
        self.refuse = refuse

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        collection = request.url.path.endswith("/configmaps")
        if request.method == "DELETE" and collection and self.refuse:
            return httpx.Response(self.refuse, json={"kind": "Status", "code": self.refuse})
        if request.method == "DELETE" and collection:
            return httpx.Response(200, json={"kind": "PartialObjectMetadataList", "items": [{}]})
        if request.method == "POST":
            body = json.loads(request.content)
            body["metadata"]["resourceVersion"] = "1"
            return httpx.Response(201, json=body)
        return httpx.Response(200, json={"kind": "Status", "code": 200})


def client_for(api: Api) -> KubeClient:
    return KubeClient(
        kopf.ConnectionInfo(server="https://kube.invalid"),
        wrap_transport=lambda _real: httpx.MockTransport(api),
        backoff=0.001,
    )


def selector(request: httpx.Request) -> str:
    return parse_qs(request.url.query.decode())["labelSelector"][0]


async def test_checkpoints_of_one_flush_go_in_one_request_per_namespace() -> None:
    api = Api()
    reaper = CheckpointReaper(client_for(api), flush_seconds=0.05)
    for uid in ("u-1", "u-2", "u-3"):
        reaper.delete_later("ns-a", uid)
    reaper.delete_later("ns-b", "u-4")
    assert api.requests == []  # nothing before the flush
    await asyncio.sleep(0.2)
    deletes = sorted((r.url.path, selector(r)) for r in api.requests)
    assert deletes == [
        ("/api/v1/namespaces/ns-a/configmaps", f"{UID_LABEL} in (u-1,u-2,u-3)"),
        ("/api/v1/namespaces/ns-b/configmaps", f"{UID_LABEL} in (u-4)"),
    ]
    # Only the deleted objects' metadata comes back, not the transcripts.
    assert all("PartialObjectMetadataList" in r.headers["accept"] for r in api.requests)


async def test_a_batch_is_bounded_and_close_flushes_what_is_pending() -> None:
    api = Api()
    reaper = CheckpointReaper(client_for(api), flush_seconds=3600, max_batch=2)
    for i in range(5):
        reaper.delete_later("ns", f"u-{i}")
    await reaper.close()  # at shutdown: no wait for the flush period
    assert [selector(r).count(",") + 1 for r in api.requests] == [2, 2, 1]


async def test_a_refused_batch_is_deleted_one_by_one() -> None:
    """RBAC without `deletecollection` (an older Role) must not leave transcripts behind."""
    api = Api(refuse=403)
    reaper = CheckpointReaper(client_for(api), flush_seconds=3600)
    reaper.delete_later("ns", "u-1")
    reaper.delete_later("ns", "u-2")
    await reaper.close()
    assert [(r.method, r.url.path) for r in api.requests[1:]] == [
        ("DELETE", "/api/v1/namespaces/ns/configmaps/ordo-checkpoint-u-1"),
        ("DELETE", "/api/v1/namespaces/ns/configmaps/ordo-checkpoint-u-2"),
    ]


def task() -> dict[str, Any]:
    return {
        "apiVersion": "ordo.dev/v1alpha1",
        "kind": "Task",
        "metadata": {"name": "t1", "namespace": "ns", "uid": "u-1"},
    }


async def test_a_checkpoint_this_execution_created_is_labelled_and_handed_over() -> None:
    api = Api()
    client = client_for(api)
    store = CheckpointStore(client, task(), "e-1")
    await store.save_encoded(b"x")
    created = json.loads(api.requests[0].content)
    assert created["metadata"]["labels"][UID_LABEL] == "u-1"
    reaper = CheckpointReaper(client, flush_seconds=3600)
    assert store.release_to(reaper)
    assert not store.release_to(reaper)  # handed over once
    await reaper.close()
    assert selector(api.requests[-1]) == f"{UID_LABEL} in (u-1)"


async def test_a_checkpoint_not_created_here_is_not_handed_over() -> None:
    """Nothing written (or one of an earlier version, without the label): the caller deletes
    it one by one, with its precondition."""
    store = CheckpointStore(client_for(Api()), task(), "e-1")
    assert not store.release_to(CheckpointReaper(client_for(Api())))
