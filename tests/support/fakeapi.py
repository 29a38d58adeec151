"""A fake Kubernetes API for the gateway's unit tests: a KubeClient over an httpx handler, and
the Task collection that handler delegates to (created once, then 409; read by name)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import kopf

from ordo.operator.kube.client import KubeClient


def mock_kube(handler: Callable[[httpx.Request], httpx.Response]) -> KubeClient:
    return KubeClient(
        kopf.ConnectionInfo(server="https://kube.invalid"),
        wrap_transport=lambda _real: httpx.MockTransport(handler),
        backoff=0.001,
    )


def tasks_answer(tasks: dict[str, dict[str, Any]], request: httpx.Request) -> httpx.Response:
    """A POST creates a Task once (then 409); any other request reads one by the last path
    segment (404 when there is none)."""
    if request.method == "POST":
        body = json.loads(request.content)
        if body["metadata"]["name"] in tasks:
            return httpx.Response(409, json={"kind": "Status", "code": 409})
        body["metadata"]["resourceVersion"] = "1"
        tasks[body["metadata"]["name"]] = body
        return httpx.Response(201, json=body)
    name = request.url.path.rsplit("/", 1)[-1]
    if name in tasks:
        return httpx.Response(200, json=tasks[name])
    return httpx.Response(404, json={"kind": "Status", "code": 404})
