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

from ..api.triggers import (
    DELIVERY_ANNOTATION,
    TriggerKind,
    controller_uid,
    delivery_digest,
    delivery_task_name,
    trigger_task,
)

KIND: TriggerKind = "TaskWebhook"
MAX_KEY = 200
"""A dedupe header value longer than this is refused (400): it is hashed, never stored."""


def owned_by(task: dict[str, Any], webhook: dict[str, Any]) -> bool:
    """Whether `task`'s controller reference is this webhook object (its uid)."""
    uid: str = webhook["metadata"]["uid"]
    return controller_uid(task, KIND) == uid


def header_key(value: str) -> str:
    """The delivery key of a dedupe header's value (apart from any signature's)."""
    return "header:" + value


def task_name(webhook: dict[str, Any], key: str) -> str:
    meta = webhook["metadata"]
    return delivery_task_name(meta["name"], meta["uid"], key)


def task_body(webhook: dict[str, Any], key: str, task_input: Any) -> dict[str, Any]:
    """The Task for the delivery whose key is `key` (the dedupe header's value, else the
    signature) and whose payload is `task_input` (api/triggers.trigger_task)."""
    meta = webhook["metadata"]
    return trigger_task(
        webhook,
        KIND,
        task_name(webhook, key),
        (DELIVERY_ANNOTATION, delivery_digest(meta["uid"], key)),
        {**webhook["spec"]["taskTemplate"]["spec"], "input": task_input},
    )
