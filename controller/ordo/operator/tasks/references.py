"""A bounded wait for references, for GitOps: tools apply objects in any order, so a Task may
arrive a moment before its Agent (or Team), ModelEndpoint, Tool, Memory or Secret. Such a Task stays
`Pending` (condition `Ready=False`, reason `WaitingForReferences`, naming what is missing, and
one Event), is looked at again every few seconds, and fails with the `*NotFound` reason only
once its grace period has passed. Nothing is claimed and no model is called meanwhile.

The grace period is the operator's `--reference-grace` (default 60 s), or per Task the
annotation `ordo.dev/reference-grace` (a duration; `0s` fails at once, as before).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ... import timestamps
from ...api import Task, parse_duration
from ...errors import ResolutionError
from ...runtime import Snapshot, resolve
from ...runtime.store import ObjectStore
from ...runtime.team import resolve_team
from ..kube.client import KubeClient
from . import taskstatus
from .recorder import EventRecorder

GRACE_ANNOTATION = "ordo.dev/reference-grace"

RECHECK_SECONDS = 3.0
WAITABLE = frozenset(
    {
        "AgentNotFound",
        "TeamNotFound",
        "ModelEndpointNotFound",
        "ToolNotFound",
        "SecretNotFound",
        "MemoryNotFound",
    }
)


def grace_seconds(body: dict[str, Any], default: float) -> float:
    """The Task's grace period: its annotation if it parses, else the operator default."""
    value = ((body.get("metadata") or {}).get("annotations") or {}).get(GRACE_ANNOTATION)
    if isinstance(value, str):
        try:
            return max(0.0, parse_duration(value))
        except ValueError:
            return default
    return default


def age_seconds(body: dict[str, Any], now: float | None = None) -> float:
    created = (body.get("metadata") or {}).get("creationTimestamp")
    if not created:
        return 0.0
    at = timestamps.epoch(created)
    if at is None:
        return 0.0
    return max(0.0, (now if now is not None else time.time()) - at)


@dataclass(frozen=True, slots=True)
class Resolved:
    """The Task may be claimed; `snapshot` is its resolution when the check made one."""

    snapshot: Snapshot | None


@dataclass(frozen=True, slots=True)
class Missing:
    """The Task's references are not all there yet: look again after `delay` seconds."""

    delay: float


class ReferenceWait:
    def __init__(
        self, client: KubeClient, store: ObjectStore, recorder: EventRecorder, grace: float
    ) -> None:
        self.client = client
        self.store = store
        self.recorder = recorder
        self.grace = grace

    async def check(
        self, task: Task, body: dict[str, Any], store: ObjectStore | None = None
    ) -> Resolved | Missing:
        """`Resolved` when the Task may be claimed: every reference resolves (the snapshot,
        for the run to use as is), resolution fails for a reason that waiting cannot fix,
        or the grace period is over (the run then fails with the `*NotFound` reason; no
        snapshot: the run resolves again and ends with the reason). `Missing` otherwise."""
        grace = grace_seconds(body, self.grace)
        if grace <= 0:
            return Resolved(None)
        try:
            if task.spec.team_ref is not None:  # the Team and its members' Agents
                await resolve_team(task, store or self.store)
                return Resolved(None)
            return Resolved(await resolve(task, store or self.store))
        except ResolutionError as exc:
            if exc.reason not in WAITABLE:
                return Resolved(None)
            missing = exc.message
        left = grace - age_seconds(body)
        if left <= 0:
            return Resolved(None)
        await self._mark(body, missing, grace)
        return Missing(min(RECHECK_SECONDS, left))

    async def _mark(self, body: dict[str, Any], missing: str, grace: float) -> None:
        status = body.get("status") or {}
        message = f"{missing}; waiting up to {grace:g}s from creation for it to appear"
        before = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
        if before is not None and before.get("message") == message[:1024]:
            return  # already shown; no second write, no second Event
        meta = body["metadata"]
        await taskstatus.merge(
            self.client,
            meta["namespace"],
            meta["name"],
            taskstatus.waiting_for_references(body, message),
        )
        await self.recorder.post(body, "WaitingForReferences", message[:1024], warning=True)
