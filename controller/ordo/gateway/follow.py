"""Following one Task through a watch: every version of the object until it is deleted,
resuming from the last version seen when the watch ends or fails (re-reading the Task
when the API says that version is gone)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from ..operator.kube.client import ApiError, KubeClient

WATCH_SECONDS = 60


async def versions(
    kube: KubeClient, namespace: str, name: str, start: dict[str, Any]
) -> AsyncIterator[dict[str, Any]]:
    """Each later version of Task `name` (starting after `start`), until it is deleted."""
    version = str((start.get("metadata") or {}).get("resourceVersion") or "")
    while True:
        stale = False
        try:
            async for event in kube.watch(
                "Task", namespace, version, timeout_seconds=WATCH_SECONDS
            ):
                kind = event.get("type")
                obj = event.get("object") or {}
                if kind == "ERROR":
                    stale = True
                    break
                meta = obj.get("metadata") or {}
                version = str(meta.get("resourceVersion") or version)
                if kind == "BOOKMARK" or meta.get("name") != name:
                    continue
                if kind == "DELETED":
                    return
                yield obj
        except ApiError:
            stale = True
        if stale:
            current = await kube.get("Task", namespace, name)
            if current is None:
                return
            version = str(current["metadata"].get("resourceVersion") or "")
            yield current
