"""What the two trigger kinds share (docs/triggers.md): the Task template, the labels and
annotations on the Tasks they create, the names those Tasks get and the outcomes counted in
`ordo_trigger_tasks_total{kind,outcome}`.

A `TaskSchedule` (api/taskschedule.py) creates a Task per scheduled time; a `TaskWebhook`
(api/taskwebhook.py) one per signed delivery. Either way exactly once: the Task's name is
derived from what identifies the occasion (the scheduled time; the delivery), so the API
server's name uniqueness refuses a second one, across restarts and replicas.
"""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import Field

from .base import API_VERSION, OrdoModel
from .task import REQUESTER_ANNOTATION, TaskSpec

TriggerKind = Literal["TaskSchedule", "TaskWebhook"]

TRIGGER_KIND_LABEL = "ordo.dev/trigger-kind"
"""On every Task a trigger creates: `TaskSchedule` or `TaskWebhook`."""
TRIGGER_NAME_LABEL = "ordo.dev/trigger"
"""On every Task a trigger creates: the trigger object's name (same namespace)."""
SCHEDULED_AT_ANNOTATION = "ordo.dev/scheduled-at"
"""On a scheduled Task: the scheduled time it runs for (RFC 3339, UTC), as a CronJob's
`batch.kubernetes.io/cronjob-scheduled-timestamp`."""
DELIVERY_ANNOTATION = "ordo.dev/delivery"
"""On a webhook's Task: the sha256 digest of the delivery's identity (the dedupe header's
value, else the signature), never the header itself (it is untrusted input)."""

TriggerOutcome = Literal[
    "created",  # a Task was created
    "duplicate",  # the occasion's Task already existed (a redelivery; a restart or a replica)
    "skipped",  # concurrencyPolicy Forbid while a Task runs; or suspended
    "replaced",  # concurrencyPolicy Replace cancelled a running Task for a new one
    "missed",  # a scheduled time older than startingDeadlineSeconds; never run
    "refused",  # a delivery without a valid signature (401), or outside the tolerance
    "too_large",  # a delivery over the size or depth cap (413)
    "rate_limited",  # a delivery over the webhook's rate (429)
    "invalid",  # the payload does not map into the template (400), or the template is invalid
    "failed",  # the API server refused the Task (e.g. admission, quota); reported in an Event
]
"""The `outcome` label of `ordo_trigger_tasks_total` (a fixed set: bounded cardinality)."""

_NAME_PREFIX_CHARS = 40
_INVALID = re.compile(r"[^a-z0-9-]")


def _prefix(name: str) -> str:
    return _INVALID.sub("-", name.lower())[:_NAME_PREFIX_CHARS].strip("-") or "trigger"


def scheduled_task_name(schedule_name: str, scheduled_time: datetime) -> str:
    """The Task of one scheduled time: the schedule's name (shortened) and the time in minutes
    since the epoch, as a CronJob names its Jobs. At most 52 characters: a valid object name
    and label value (child Tasks carry it in `ordo.dev/parent`)."""
    minutes = int(scheduled_time.astimezone(UTC).timestamp()) // 60
    return f"{_prefix(schedule_name)}-{minutes}"


def delivery_digest(webhook_uid: str, delivery_key: str) -> str:
    """The sha256 of a delivery's identity within one webhook object (its uid: a webhook
    deleted and created again starts afresh)."""
    return hashlib.sha256(f"{webhook_uid}\x00{delivery_key}".encode()).hexdigest()


def delivery_task_name(webhook_name: str, webhook_uid: str, delivery_key: str) -> str:
    """The Task of one delivery: the webhook's name (shortened) and a digest of its uid and
    the delivery's key (the dedupe header's value, else the signature). A redelivery gets the
    same name, so the API server refuses a second Task. At most 51 characters."""
    return f"{_prefix(webhook_name)}-{delivery_digest(webhook_uid, delivery_key)[:10]}"


def _reserved(key: str) -> bool:
    """A key in ordo's domain (`ordo.dev/...`, `policy.ordo.dev/...`): ordo's to set."""
    prefix, _, _ = key.rpartition("/")
    return prefix == "ordo.dev" or prefix.endswith(".ordo.dev")


def template_metadata(template: dict[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """The labels and annotations a template gives its Tasks: all but those in ordo's domain.
    ordo sets its own (the trigger labels, scheduled-at, the delivery, the trigger's
    requester); a template must not name a requester, a parent, a root or a delegation chain,
    nor a policy label."""
    meta = template.get("metadata") or {}
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if not _reserved(k)}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if not _reserved(k)}
    return labels, annotations


def controller_uid(obj: dict[str, Any], kind: TriggerKind) -> str | None:
    """The uid of `obj`'s controller owner when that is a `kind` (a trigger's Task, or not)."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == kind:
            uid = ref.get("uid")
            return uid if isinstance(uid, str) else None
    return None


def trigger_task(
    trigger: dict[str, Any],
    kind: TriggerKind,
    name: str,
    annotation: tuple[str, str],
    spec: dict[str, Any],
) -> dict[str, Any]:
    """The Task a trigger creates, named `name`: the template's metadata outside ordo's domain,
    the trigger labels, `annotation` (its occasion: scheduled-at, delivery), the trigger's own
    requester (never the template's), a controller ownerReference to the trigger, and `spec`."""
    meta = trigger["metadata"]
    labels, annotations = template_metadata(trigger["spec"]["taskTemplate"])
    labels |= {TRIGGER_KIND_LABEL: kind, TRIGGER_NAME_LABEL: meta["name"]}
    annotations[annotation[0]] = annotation[1]
    requester = (meta.get("annotations") or {}).get(REQUESTER_ANNOTATION)
    if requester:
        annotations[REQUESTER_ANNOTATION] = requester
    owner = {
        "apiVersion": API_VERSION,
        "kind": kind,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
    }
    return {
        "apiVersion": API_VERSION,
        "kind": "Task",
        "metadata": {
            "name": name,
            "namespace": meta["namespace"],
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [owner],
        },
        "spec": spec,
    }


class TaskTemplateMetadata(OrdoModel):
    """Labels and annotations copied onto every Task the trigger creates, except keys in ordo's
    domain (`ordo.dev/`, `policy.ordo.dev/`), which only ordo sets (`template_metadata`)."""

    labels: Annotated[dict[str, str], Field(max_length=64)] | None = None
    annotations: Annotated[dict[str, str], Field(max_length=64)] | None = None


class TaskTemplate(OrdoModel):
    """The Task a trigger creates, as a CronJob's `jobTemplate`: metadata and a Task spec."""

    metadata: TaskTemplateMetadata | None = None
    """Labels and annotations of the created Tasks."""
    spec: TaskSpec
    """The created Task's spec (a webhook sets `input` from the delivery's payload)."""
