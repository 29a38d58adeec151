"""Child Tasks as Kubernetes objects: the operator's `Delegator` (runtime/delegation.py).

`KubeDelegator.start` is create-or-get, keyed by the child's name (`child_name` of the
parent's name and uid and the request's key, which survives every resume): it reads the
object of that name; a missing one is created (a 409 means another attempt of this parent
created it: read it); a transient failure of the create may hide a create the server applied,
so the object is read back once before the error goes up. An object of that name whose
controller ownerReference is not the parent's uid is never adopted (`ChildNotOwned`: someone
created it to capture the parent's input or feed it an answer). A child the parent's state
already recorded (`request.known`) that is gone is reported `ChildVanished` and never created
again: a second child could repeat its side effects.

The child carries its place in the tree (labels PARENT_LABEL, PARENT_UID_LABEL, ROOT_LABEL,
annotation CHAIN_ANNOTATION), the parent's `ordo.dev/requested-by`, what is left of the
parent's limits (`spec.limits`) and a controller ownerReference to the parent, so deleting the
parent deletes its children (garbage collector), and the operator's cancel cascade
(cascade.py) finds them by label. Metrics count outcomes (`ordo_delegations_total`) and an
Event `ChildCreated` on the parent names the child; neither carries input or output.
"""

from __future__ import annotations

import logging
from typing import Any

from ...api.usage import Usage
from ...runtime.childtask import child_body_of
from ...runtime.delegation import (
    ChildNotOwned,
    ChildRequest,
    ChildState,
    Lineage,
    child_name,
)
from ..kube.client import ApiError, KubeClient
from ..telemetry.metrics import Metrics
from .recorder import EventRecorder

log = logging.getLogger("ordo.operator")
KIND = "Task"
CHILD_CREATED = "ChildCreated"
"""The Event reason on a parent Task when it created a child Task."""


def owned_by(body: dict[str, Any], parent_uid: str) -> bool:
    """The object's controller ownerReference is the Task `parent_uid`."""
    for ref in (body.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") is True:
            return bool(ref.get("kind") == KIND and ref.get("uid") == parent_uid)
    return False


def asked_for(body: dict[str, Any], request: ChildRequest) -> bool:
    """The Task runs what `request` asks: its Agent and its input. (Anyone who may create
    Tasks can set an ownerReference to a parent whose uid they read; a Task of another Agent
    or input under the child's name is then still refused.)"""
    spec = body.get("spec") or {}
    return bool(spec.get("agentRef") == request.agent and spec.get("input") == request.input)


def child_body(parent: dict[str, Any], lineage: Lineage, request: ChildRequest) -> dict[str, Any]:
    """The child Task the parent `parent` (at `lineage`) creates for `request`."""
    meta = parent["metadata"]
    return child_body_of(
        meta["name"],
        meta["namespace"],
        meta["uid"],
        meta.get("annotations") or {},
        lineage,
        request,
    )


def awaiting_approval(body: dict[str, Any]) -> bool:
    """The Task's condition `AwaitingApproval` is True."""
    for c in (body.get("status") or {}).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == "AwaitingApproval":
            return c.get("status") == "True"
    return False


def state_of(body: dict[str, Any]) -> ChildState:
    """A child Task as its parent sees it, from its status."""
    meta = body.get("metadata") or {}
    status = body.get("status") or {}
    usage = status.get("usage") or {}
    structured = status.get("structuredOutput")
    return ChildState(
        name=str(meta.get("name", "")),
        agent=str((body.get("spec") or {}).get("agentRef", "")),
        phase=status.get("phase") or "Pending",
        reason=status.get("reason") or None,
        message=str(status.get("message") or ""),
        output=str(status.get("output") or ""),
        structured=structured if isinstance(structured, dict) else None,
        usage=Usage(
            int(usage.get("inputTokens") or 0),
            int(usage.get("outputTokens") or 0),
        ),
        awaiting_approval=awaiting_approval(body),
    )


class KubeDelegator:
    """The children of one parent Task (`parent`, the Task body the run was claimed with)
    as Task objects in its namespace."""

    def __init__(
        self,
        client: KubeClient,
        parent: dict[str, Any],
        lineage: Lineage,
        metrics: Metrics | None = None,
        recorder: EventRecorder | None = None,
    ) -> None:
        self.client = client
        self.parent = parent
        self.lineage = lineage
        self.metrics = metrics
        self.recorder = recorder

    def _count(self, outcome: str) -> None:
        if self.metrics is not None:
            namespace = str(self.parent["metadata"].get("namespace", ""))
            self.metrics.delegations.labels(namespace, outcome).inc()

    async def start(self, request: ChildRequest) -> ChildState:
        meta = self.parent["metadata"]
        namespace, parent_uid = str(meta["namespace"]), str(meta["uid"])
        name = child_name(meta["name"], parent_uid, request.key)
        found = await self.client.get(KIND, namespace, name)
        if found is None and request.known:
            self._count("vanished")
            return ChildState(
                name,
                request.agent,
                "Failed",
                "ChildVanished",
                f"child Task {name!r} was deleted before its parent read its result; "
                "not created again",
            )
        created = False
        if found is None:
            found, created = await self._create(namespace, name, request)
        if not owned_by(found, parent_uid) or not asked_for(found, request):
            self._count("notOwned")
            raise ChildNotOwned(
                f"Task {name!r} exists but is not a child of this Task (its controller "
                "ownerReference is not this Task's uid, or it runs another Agent or input); "
                "it is never adopted: delete it, or this call stays failed"
            )
        if created:
            self._count("created")
            if self.recorder is not None:
                await self.recorder.post(
                    self.parent,
                    CHILD_CREATED,
                    f"created child Task {name} (agent {request.agent})",
                )
        else:
            self._count("found")
        return state_of(found)

    async def _create(
        self, namespace: str, name: str, request: ChildRequest
    ) -> tuple[dict[str, Any], bool]:
        """Create the child; (the object, whether this call created it)."""
        body = child_body(self.parent, self.lineage, request)
        try:
            return await self.client.create(KIND, namespace, body), True
        except ApiError as exc:
            if not (exc.conflict or exc.transient):
                raise
            # 409: it exists (an earlier attempt); transient: the create may have been applied.
            existing = await self.client.get(KIND, namespace, name)
            if existing is None:
                raise
            return existing, False
