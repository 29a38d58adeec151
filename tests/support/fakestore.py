"""A fake Kubernetes API holding objects of any kind by path, for the TaskSchedule controller's
unit tests: create (409 if the name exists), get, list by label selector, JSON merge patch of
an object or its status (409 when `metadata.resourceVersion` does not match), delete; Events
are kept in a list. `refuse` makes the next requests of a method and kind answer an error."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import httpx

from ordo.operator.kube.client import KubeClient

from .fakeapi import mock_kube

Key = tuple[str, str, str]
"""(plural, namespace, name)."""


def merge(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """RFC 7386 JSON merge patch."""
    out = dict(target)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merge(out[k], v)
        else:
            out[k] = v
    return out


def _status(code: int, reason: str = "") -> httpx.Response:
    return httpx.Response(code, json={"kind": "Status", "code": code, "reason": reason})


class FakeStore:
    def __init__(self) -> None:
        self.objects: dict[Key, dict[str, Any]] = {}
        self.events: list[dict[str, Any]] = []
        self.requests: list[tuple[str, str]] = []
        self.refusals: dict[tuple[str, str], list[int]] = defaultdict(list)
        self._version = 0
        self.client: KubeClient = mock_kube(self.answer)

    def put(self, plural: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Store `obj` as the API server would (a new resourceVersion)."""
        meta = obj["metadata"]
        self._version += 1
        meta["resourceVersion"] = str(self._version)
        meta.setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
        meta.setdefault("uid", f"uid-{meta['name']}")
        self.objects[(plural, meta["namespace"], meta["name"])] = obj
        return obj

    def get(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.objects.get((plural, namespace, name))

    def refuse(self, method: str, plural: str, *codes: int) -> None:
        """The next len(codes) `method` requests on `plural` answer these codes."""
        self.refusals[(method, plural)].extend(codes)

    def reasons(self) -> list[str]:
        return [e["reason"] for e in self.events]

    def answer(self, request: httpx.Request) -> httpx.Response:
        parts = request.url.path.strip("/").split("/")
        ns_at = parts.index("namespaces")
        namespace, plural = parts[ns_at + 1], parts[ns_at + 2]
        name = parts[ns_at + 3] if len(parts) > ns_at + 3 else None
        subresource = parts[ns_at + 4] if len(parts) > ns_at + 4 else None
        self.requests.append((request.method, plural))
        pending = self.refusals.get((request.method, plural))
        if pending:
            return _status(pending.pop(0), "Forbidden")
        if plural == "events":
            self.events.append(json.loads(request.content))
            return httpx.Response(201, json={})
        if name is None and request.method == "POST":
            body = json.loads(request.content)
            if (plural, namespace, body["metadata"]["name"]) in self.objects:
                return _status(409, "AlreadyExists")
            return httpx.Response(201, json=self.put(plural, {**body}))
        if name is None:
            return httpx.Response(200, json={"items": self._list(plural, namespace, request)})
        found = self.objects.get((plural, namespace, name))
        if found is None:
            return _status(404, "NotFound")
        if request.method == "DELETE":
            del self.objects[(plural, namespace, name)]
            return httpx.Response(200, json={})
        if request.method == "PATCH":
            return self._patch(plural, found, json.loads(request.content), subresource)
        return httpx.Response(200, json=found)

    def _patch(
        self, plural: str, found: dict[str, Any], patch: dict[str, Any], subresource: str | None
    ) -> httpx.Response:
        wanted = (patch.get("metadata") or {}).get("resourceVersion")
        if wanted is not None and wanted != found["metadata"]["resourceVersion"]:
            return _status(409, "Conflict")
        if subresource == "status":
            patch = {"status": patch.get("status")}
        return httpx.Response(200, json=self.put(plural, merge(found, patch)))

    def _list(self, plural: str, namespace: str, request: httpx.Request) -> list[dict[str, Any]]:
        wanted = dict(
            term.split("=", 1)
            for term in (request.url.params.get("labelSelector") or "").split(",")
            if term
        )
        return [
            obj
            for (p, ns, _), obj in self.objects.items()
            if p == plural
            and ns == namespace
            and all((obj["metadata"].get("labels") or {}).get(k) == v for k, v in wanted.items())
        ]
