"""The child Task a parent's `ChildRequest` asks for, as an object body (docs/concepts.md#trees):
the same object whether the operator creates it (a real Task, owned by its parent) or
`ordo run` runs it in process.

Its name derives from the parent's uid and the request's key (`child_name`), so a resumed
parent finds it again; labels name its parent (name and uid) and its root, an annotation the
chain of Agents from the root down (`Lineage.child`); the parent's requester annotation is
copied (approvals that exclude the requester keep excluding them), and the traceparent of
the call's span set (the child's run span nests under it); the spec narrows the
child to what the parent has left (`limits.timeout` whole seconds rounded up, `maxTokens`);
a controller ownerReference makes the child go with its parent.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

from ..api import API_VERSION, Task
from ..api.task import REQUESTER_ANNOTATION
from ..engine.delegation import (
    CHAIN_ANNOTATION,
    PARENT_LABEL,
    PARENT_UID_LABEL,
    ROOT_LABEL,
    ChildRequest,
    Lineage,
    child_name,
)
from .tracing import TRACEPARENT_ANNOTATION

__all__ = ["child_body_of", "child_task_body", "parent_uid"]


def parent_uid(parent: Task) -> str:
    """The parent's uid; for a Task that has none (`ordo run`'s manifests) a stand-in derived
    from its namespace and name (a valid label value)."""
    if parent.metadata.uid:
        return parent.metadata.uid
    digest = hashlib.sha256(f"{parent.namespace}/{parent.name}".encode()).hexdigest()[:20]
    return f"local-{digest}"


def child_task_body(parent: Task, lineage: Lineage, request: ChildRequest) -> dict[str, Any]:
    """The child Task of `request` (the parent's own `lineage`), as an object body."""
    return child_body_of(
        parent.name,
        parent.namespace,
        parent_uid(parent),
        parent.metadata.annotations or {},
        lineage,
        request,
    )


def child_body_of(
    name: str,
    namespace: str,
    uid: str,
    parent_annotations: dict[str, str],
    lineage: Lineage,
    request: ChildRequest,
) -> dict[str, Any]:
    """The child Task of `request` for the parent `namespace/name` (`uid`, its
    `parent_annotations`): the one builder `ordo run` and the operator share."""
    annotations = {CHAIN_ANNOTATION: json.dumps(list(lineage.child(request.agent).chain))}
    requester = parent_annotations.get(REQUESTER_ANNOTATION)
    if isinstance(requester, str) and requester:
        annotations[REQUESTER_ANNOTATION] = requester
    if request.traceparent:
        annotations[TRACEPARENT_ANNOTATION] = request.traceparent
    limits: dict[str, Any] = {}
    if request.timeout is not None:
        limits["timeout"] = f"{max(1, math.ceil(request.timeout))}s"
    if request.token_budget is not None:
        limits["maxTokens"] = request.token_budget
    spec: dict[str, Any] = {"agentRef": request.agent, "input": request.input}
    if limits:
        spec["limits"] = limits
    if request.output_schema is not None:
        spec["outputSchema"] = request.output_schema
    return {
        "apiVersion": API_VERSION,
        "kind": "Task",
        "metadata": {
            "name": child_name(name, uid, request.key),
            "namespace": namespace,
            "labels": {PARENT_LABEL: name, PARENT_UID_LABEL: uid, ROOT_LABEL: lineage.root},
            "annotations": annotations,
            "ownerReferences": [
                {
                    "apiVersion": API_VERSION,
                    "kind": "Task",
                    "name": name,
                    "uid": uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
    }
