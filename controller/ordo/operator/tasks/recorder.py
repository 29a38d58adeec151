"""Kubernetes Events for Tasks and other ordo objects (core/v1, so `kubectl describe` shows
them). Messages name objects, steps and reasons only."""

from __future__ import annotations

import logging
from typing import Any

from ..kube.client import ApiError, KubeClient
from .conditions import now

log = logging.getLogger("ordo.events")


class EventRecorder:
    def __init__(self, client: KubeClient, component: str = "ordo-operator") -> None:
        self._client = client
        self._component = component

    async def post(
        self, body: dict[str, Any], reason: str, message: str, *, warning: bool = False
    ) -> None:
        meta = body.get("metadata", {})
        namespace = meta.get("namespace", "default")
        stamp = now()
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta.get('name', 'ordo')}.", "namespace": namespace},
            "involvedObject": {
                "apiVersion": body.get("apiVersion"),
                "kind": body.get("kind"),
                "name": meta.get("name"),
                "namespace": namespace,
                "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            },
            "reason": reason,
            "message": message[:1024],
            "type": "Warning" if warning else "Normal",
            "source": {"component": self._component},
            "reportingComponent": self._component,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        try:
            await self._client.create("Event", namespace, event)
        except (ApiError, OSError) as exc:  # events are best effort
            log.warning(
                "could not post event",
                extra={
                    "ordo": {
                        "reason": reason,
                        "error": str(getattr(exc, "status", type(exc).__name__)),
                    }
                },
            )
