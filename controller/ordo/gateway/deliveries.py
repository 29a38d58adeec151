"""The Task of one webhook delivery (docs/triggers.md#webhooks): named from the webhook and
the delivery's key (api/triggers.delivery_task_name), owned by the webhook (a controller
reference: a Task of that name it does not own is never adopted), labelled with its trigger,
its input the delivery's payload.

The template's labels and annotations are copied except those in the `ordo.dev/` domain:
ordo sets its own (the trigger labels, the delivery digest), and a template must not name a
requester, a parent or a delegation chain the gateway would then vouch for. The requester is
the webhook's own `ordo.dev/requested-by` (the chart's admission policy makes it its
creator's name), never anything in the delivery."""

from __future__ import annotations

from typing import Any

from ..api.task import REQUESTER_ANNOTATION
from ..api.triggers import (
    DELIVERY_ANNOTATION,
    TRIGGER_KIND_LABEL,
    TRIGGER_NAME_LABEL,
    delivery_digest,
    delivery_task_name,
    template_metadata,
)

KIND = "TaskWebhook"
MAX_KEY = 200
"""A dedupe header value longer than this is refused (400): it is hashed, never stored."""


def owner_reference(webhook: dict[str, Any]) -> dict[str, Any]:
    meta = webhook["metadata"]
    return {
        "apiVersion": webhook.get("apiVersion", "ordo.dev/v1alpha1"),
        "kind": KIND,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
    }


def owned_by(task: dict[str, Any], webhook: dict[str, Any]) -> bool:
    """Whether `task`'s controller reference is this webhook object (its uid)."""
    uid = webhook["metadata"]["uid"]
    return any(
        ref.get("controller") and ref.get("kind") == KIND and ref.get("uid") == uid
        for ref in (task.get("metadata") or {}).get("ownerReferences") or []
    )


def header_key(value: str) -> str:
    """The delivery key of a dedupe header's value (apart from any signature's)."""
    return "header:" + value


def task_name(webhook: dict[str, Any], key: str) -> str:
    meta = webhook["metadata"]
    return delivery_task_name(meta["name"], meta["uid"], key)


def task_body(webhook: dict[str, Any], key: str, task_input: Any) -> dict[str, Any]:
    """The Task for the delivery whose key is `key` (the dedupe header's value, else the
    signature) and whose payload is `task_input`."""
    meta = webhook["metadata"]
    template = webhook["spec"]["taskTemplate"]
    labels, annotations = template_metadata(template)
    labels |= {TRIGGER_KIND_LABEL: KIND, TRIGGER_NAME_LABEL: meta["name"]}
    annotations[DELIVERY_ANNOTATION] = delivery_digest(meta["uid"], key)
    requester = (meta.get("annotations") or {}).get(REQUESTER_ANNOTATION)
    if requester:
        annotations[REQUESTER_ANNOTATION] = requester
    return {
        "apiVersion": "ordo.dev/v1alpha1",
        "kind": "Task",
        "metadata": {
            "name": task_name(webhook, key),
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [owner_reference(webhook)],
        },
        "spec": {**template["spec"], "input": task_input},
    }
