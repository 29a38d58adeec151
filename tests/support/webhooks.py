"""A TaskWebhook, its opted-in Secret and a fake API server holding them, for the gateway's
webhook tests (unit: through the ASGI app; wire: over real HTTP)."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

import httpx
from prometheus_client import CollectorRegistry

from ordo.gateway.app import Gateway, GatewayConfig
from ordo.gateway.metrics import GatewayMetrics

from .fakeapi import mock_kube, tasks_answer

SECRET = "canary-secret-7f3a"
CANARY = "canary-body-91c2"
UID = "0f1e2d3c-0000-4000-8000-000000000001"


def webhook(profile: str = "GitHub", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "ordo.dev/v1alpha1",
        "kind": "TaskWebhook",
        "metadata": {
            "name": "issues",
            "namespace": "ns",
            "uid": UID,
            "resourceVersion": "1",
            "annotations": {"ordo.dev/requested-by": "alice"},
        },
        "spec": {
            "auth": {"profile": profile, "secretRef": {"name": "hook", "key": "secret"}},
            "taskTemplate": {
                "metadata": {
                    "labels": {"team": "triage", "ordo.dev/parent-uid": "forged"},
                    "annotations": {"ordo.dev/requested-by": "mallory", "note": "n"},
                },
                "spec": {"agentRef": "triager"},
            },
            **spec,
        },
    }


def secret(opted_in: bool = True) -> dict[str, Any]:
    labels = {"ordo.dev/credential": "true"} if opted_in else {}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "hook", "namespace": "ns", "labels": labels},
        "data": {"secret": base64.b64encode(SECRET.encode()).decode()},
    }


class Api:
    """The TaskWebhook, its Secret, Tasks (created once, then 409), Events, status patches."""

    def __init__(self, hook: dict[str, Any], opted_in: bool = True) -> None:
        self.hook = hook
        self.secret = secret(opted_in)
        self.tasks: dict[str, dict[str, Any]] = {}
        self.events: list[dict[str, Any]] = []
        self.status: list[dict[str, Any]] = []
        self.read: Callable[[], dict[str, Any]] = lambda: self.hook
        """What a GET of the webhook answers (a test may serve a stale copy)."""
        self.refuse_tasks: int | None = None
        """An HTTP status every Task create gets instead (e.g. 403 from admission)."""

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path.endswith("/taskwebhooks/issues/status"):
            patch = json.loads(request.content)
            meta = self.hook["metadata"]
            if patch["metadata"]["resourceVersion"] != meta["resourceVersion"]:
                return httpx.Response(409, json={"kind": "Status", "code": 409})
            self.status.append(patch)
            self.hook["status"] = {**(self.hook.get("status") or {}), **patch["status"]}
            meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)
            return httpx.Response(200, json=self.hook)
        if path.endswith("/taskwebhooks/issues"):
            return httpx.Response(200, json=self.read())
        if path.endswith("/secrets/hook"):
            return httpx.Response(200, json=self.secret)
        if path.endswith("/events"):
            self.events.append(json.loads(request.content))
            return httpx.Response(201, json={})
        if self.refuse_tasks is not None and request.method == "POST":
            return httpx.Response(self.refuse_tasks, json={"kind": "Status", "code": 403})
        return tasks_answer(self.tasks, request)


def gateway(api: Api, **config: Any) -> Gateway:
    kube = mock_kube(api)
    return Gateway(
        kube, GatewayConfig(namespaces=("ns",), **config), GatewayMetrics(CollectorRegistry())
    )
