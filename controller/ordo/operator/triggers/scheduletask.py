"""The Task of one scheduled time: its body (name, labels, annotations, owner, the template's
spec), its creation (a 409 read back: ours is a duplicate, anyone else's is never adopted),
and what the schedule reads of the Tasks it owns."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from ...api.triggers import (
    SCHEDULED_AT_ANNOTATION,
    TRIGGER_KIND_LABEL,
    TRIGGER_NAME_LABEL,
    TriggerKind,
    controller_uid,
    scheduled_task_name,
    trigger_task,
)
from ...timestamps import parse
from ..kube.client import ApiError, KubeClient
from .decide import OwnedTask

KIND: TriggerKind = "TaskSchedule"

CreateResult = Literal["created", "duplicate", "taken"]


def selector(schedule_name: str) -> str:
    """The label selector of a schedule's Tasks."""
    return f"{TRIGGER_KIND_LABEL}={KIND},{TRIGGER_NAME_LABEL}={schedule_name}"


def rfc3339(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def task_body(schedule: dict[str, Any], scheduled_at: datetime) -> dict[str, Any]:
    """The Task for `scheduled_at` (api/triggers.trigger_task), with the template's spec."""
    return trigger_task(
        schedule,
        KIND,
        scheduled_task_name(schedule["metadata"]["name"], scheduled_at),
        (SCHEDULED_AT_ANNOTATION, rfc3339(scheduled_at)),
        schedule["spec"]["taskTemplate"]["spec"],
    )


async def create_task(client: KubeClient, body: dict[str, Any], owner_uid: str) -> CreateResult:
    """Create the Task. On 409, or a transient failure that may have created it, read it
    back: owned by this schedule (its uid) is `duplicate` (another replica, or this one
    before a restart or a lost answer); anyone else's is `taken`, never adopted. Other API
    errors are raised."""
    meta = body["metadata"]
    try:
        await client.create("Task", meta["namespace"], body)
        return "created"
    except ApiError as exc:
        if not (exc.conflict or exc.transient):
            raise
        found = await client.get("Task", meta["namespace"], meta["name"])
        if found is None:
            raise
    return "duplicate" if controller_uid(found, KIND) == owner_uid else "taken"


def owned_tasks(items: list[dict[str, Any]], owner_uid: str) -> list[OwnedTask]:
    """The listed Tasks whose controller is the schedule of `owner_uid` (a Task of the same
    labels that someone else created is not the schedule's)."""
    owned = []
    for item in items:
        if controller_uid(item, KIND) != owner_uid:
            continue
        meta = item.get("metadata") or {}
        status = item.get("status") or {}
        created = parse(meta.get("creationTimestamp"))
        if created is None:
            continue
        owned.append(
            OwnedTask(
                name=meta.get("name", ""),
                phase=status.get("phase"),
                scheduled_at=parse((meta.get("annotations") or {}).get(SCHEDULED_AT_ANNOTATION)),
                created_at=created,
                completed_at=parse(status.get("completedAt")),
                cancel_requested=bool((item.get("spec") or {}).get("cancel")),
            )
        )
    return owned
