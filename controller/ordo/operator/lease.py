"""An execution lease per running Task (coordination.k8s.io/v1 Lease `ordo-task-<uid>`, owned
by the Task). The process that runs a Task renews it; another process — a restarted
operator, or a second replica — resumes a `Running` Task only once the lease has expired,
and takes it over with a conditional update, so at most one process executes a Task."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from .kube import ApiError, KubeClient

PREFIX = "ordo-task-"


def _micro(dt: datetime) -> str:
    return dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(value: str | None) -> datetime | None:
    if not value:
        return None
    for fmt in ("%Y-%m-%dT%H:%M:%S.%fZ", "%Y-%m-%dT%H:%M:%SZ"):
        try:
            return datetime.strptime(value, fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
    return None


class ExecutionLease:
    def __init__(
        self, client: KubeClient, task: dict[str, Any], holder: str, duration: float
    ) -> None:
        self._client = client
        self._task = task
        meta = task["metadata"]
        self.namespace = meta["namespace"]
        self.name = PREFIX + meta["uid"]
        self.holder = holder
        self.duration = duration
        self._body: dict[str, Any] | None = None

    def _spec(self, acquire: datetime | None = None) -> dict[str, Any]:
        now = datetime.now(UTC)
        spec: dict[str, Any] = {
            "holderIdentity": self.holder,
            "leaseDurationSeconds": max(1, round(self.duration)),
            "renewTime": _micro(now),
        }
        spec["acquireTime"] = _micro(acquire or now)
        return spec

    def _remaining(self, body: dict[str, Any]) -> float:
        spec = body.get("spec") or {}
        renewed = _parse(spec.get("renewTime")) or _parse(spec.get("acquireTime"))
        if renewed is None:
            return 0.0
        expires = renewed + timedelta(
            seconds=float(spec.get("leaseDurationSeconds", self.duration))
        )
        return max(0.0, (expires - datetime.now(UTC)).total_seconds())

    async def held_elsewhere(self) -> float:
        """Seconds until another holder's live lease expires (0 when free, expired or ours)."""
        body = await self._client.get("Lease", self.namespace, self.name)
        if body is None or (body.get("spec") or {}).get("holderIdentity") == self.holder:
            return 0.0
        return self._remaining(body)

    async def acquire(self) -> bool:
        """Create the lease, or take over an expired (or our own) one. False if someone else
        holds a live lease or wins the race."""
        meta = self._task["metadata"]
        body: dict[str, Any] = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": {"app.kubernetes.io/managed-by": "ordo"},
                "ownerReferences": [
                    {
                        "apiVersion": self._task["apiVersion"],
                        "kind": "Task",
                        "name": meta["name"],
                        "uid": meta["uid"],
                        "controller": True,
                        "blockOwnerDeletion": False,
                    }
                ],
            },
            "spec": self._spec(),
        }
        try:
            self._body = await self._client.create("Lease", self.namespace, body)
            return True
        except ApiError as exc:
            if exc.status != 409:
                raise
        current = await self._client.get("Lease", self.namespace, self.name)
        if current is None:
            return False
        if (current.get("spec") or {}).get("holderIdentity") != self.holder and self._remaining(
            current
        ) > 0:
            return False
        body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        try:
            self._body = await self._client.replace("Lease", self.namespace, self.name, body)
        except ApiError as exc:
            if exc.status in (404, 409):
                return False
            raise
        return True

    async def renew_until_cancelled(self, on_lost: Callable[[], None]) -> None:
        """Renew every third of the duration; call `on_lost` if another holder took over."""
        while True:
            await asyncio.sleep(self.duration / 3)
            body = self._body
            if body is None:
                return
            update = dict(body)
            update["spec"] = dict(
                body["spec"], renewTime=_micro(datetime.now(UTC)), holderIdentity=self.holder
            )
            try:
                self._body = await self._client.replace("Lease", self.namespace, self.name, update)
            except ApiError as exc:
                if exc.status in (404, 409):
                    on_lost()
                    return
            except OSError:
                continue  # transient: the next renewal may succeed before the lease expires

    async def release(self) -> None:
        """Delete the lease if it is still ours (conditional on its resourceVersion)."""
        body, self._body = self._body, None
        if body is None:
            return
        with contextlib.suppress(ApiError, OSError):
            await self._client.delete(
                "Lease",
                self.namespace,
                self.name,
                resource_version=body["metadata"]["resourceVersion"],
            )
