"""The `Ready` verdict of a TaskWebhook (the readiness reconciler, reconciler.py, evaluates it):
its Secret key is usable (verdicts.credential with the destination NOWHERE: the gateway only
verifies signatures with it, nothing is sent; `SecretNotFound` also for a Secret not opted in,
with the same message) and the template's Agent or Team exists (`MissingReferences`).

The gateway serves deliveries whatever this says (it checks the Secret on each one and the
operator runs or refuses the Task): `Ready` tells the webhook's owner what will go wrong."""

from __future__ import annotations

from typing import Any

from ...api.manifests import references
from ...api.taskwebhook import TaskWebhook
from ...credentials import NOWHERE
from ...runtime.store import ObjectStore
from .verdicts import Verdict, credential


async def webhook_verdict(body: dict[str, Any], store: ObjectStore) -> Verdict:
    hook = TaskWebhook.model_validate(body)
    checked = await credential(store, hook.namespace, hook.spec.auth.secret_ref, NOWHERE)
    if checked.problem:
        return checked.problem
    missing = [
        f"{kind}/{name}"
        for _, kind, name in references(hook)
        if await store.get(kind, hook.namespace, name) is None
    ]
    if missing:
        return Verdict("False", "MissingReferences", "not found: " + ", ".join(missing))
    profile = hook.spec.auth.profile
    return checked.noted(
        Verdict(
            "True", "Configured", f"{profile} deliveries at /hooks/{hook.namespace}/{hook.name}"
        )
    )
