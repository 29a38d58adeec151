"""Which ToolApprovals count for a waiting call (issue 16 §3, issue 26 §5): named for the
Task and the call, made no earlier than the Task; an Approve only when its `argsDigest` is the
digest of the call's arguments and, where the call's rule excludes the requester, its
`approvedBy` is not the Task's `ordo.dev/requested-by`. The run asks with the digest of the
arguments in its own state; the gate and the `Accepted` condition, which hold no arguments,
with the published calls' digests (pendingcalls.py) when readable and consistent. Pure except
`published_digests`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from ... import timestamps
from ...api.task import REQUESTER_ANNOTATION
from ...api.toolapproval import ToolApproval
from ...engine.approvals import ApprovalDecision, PendingApproval
from ..kube.client import ApiError
from . import pendingcalls

Digests = dict[str, str] | None
"""Call id → the digest of its arguments, as far as known (None: not known; any digest may
count until the run checks it against its own state)."""


def requester(task: dict[str, Any]) -> str:
    """The Task's requester as its annotation names it ("" none)."""
    annotations = (task.get("metadata") or {}).get("annotations") or {}
    value = annotations.get(REQUESTER_ANNOTATION)
    return value if isinstance(value, str) else ""


def refusal_of(
    approval: ToolApproval,
    task: dict[str, Any],
    pending: PendingApproval | None,
    digest: str | None,
) -> tuple[str, str] | None:
    """Why an Approve cannot count for the call (reason, message), or None. `digest`: the
    digest of the call's arguments (None: not known here)."""
    spec = approval.spec
    if spec.decision != "Approve":
        return None
    if digest is not None and spec.args_digest != digest:
        return "DigestMismatch", "spec.argsDigest is not the digest of the call's arguments"
    who = requester(task)
    if pending is not None and pending.requester_excluded and who in ("", spec.approved_by):
        return "RequesterExcluded", (
            "the call needs an approver other than the Task's requester (annotation "
            f"{REQUESTER_ANNOTATION}, which this Task "
            + ("names as the approver)" if who else "lacks)")
        )
    return None


def decisions_for(
    approvals: Sequence[dict[str, Any]],
    task: dict[str, Any],
    call_id: str,
    *,
    digest: str | None = None,
    pending: PendingApproval | None = None,
) -> list[ApprovalDecision]:
    """The valid decisions on one call of `task`, oldest first (ties by name). `digest` and
    `pending` (the call's rule) leave out the Approves that cannot count (`refusal_of`)."""
    meta = task.get("metadata") or {}
    born = timestamps.epoch(meta.get("creationTimestamp")) or 0.0
    out: list[tuple[float, str, ApprovalDecision]] = []
    for body in approvals:
        spec = body.get("spec") or {}
        if spec.get("taskRef") != meta.get("name") or spec.get("callId") != call_id:
            continue
        created = timestamps.epoch((body.get("metadata") or {}).get("creationTimestamp"))
        if created is None or created < born:
            continue  # made before this Task existed: not for it
        try:
            approval = ToolApproval.model_validate(body)
        except ValidationError:
            continue
        if refusal_of(approval, task, pending, digest) is not None:
            continue
        decision = ApprovalDecision(
            approval.spec.decision, approval.name, created, approval.spec.approved_by or ""
        )
        out.append((created, approval.name, decision))
    return [d for _, _, d in sorted(out, key=lambda x: (x[0], x[1]))]


def decisions_of(
    approvals: Sequence[dict[str, Any]], task: dict[str, Any], p: PendingApproval, d: Digests
) -> list[ApprovalDecision]:
    """`decisions_for` the call `p` with its digest from `d`."""
    digest = None if d is None else d.get(p.call_id)
    return decisions_for(approvals, task, p.call_id, digest=digest, pending=p)


async def published_digests(client: Any, task: dict[str, Any]) -> Digests:
    """The digests of the Task's waiting calls from its published calls, if readable and
    consistent (pendingcalls.py); None otherwise: the run will check them itself."""
    try:
        published = await pendingcalls.read(client, task)
    except (ApiError, pendingcalls.Unavailable):
        return None
    if not all(p.verified for p in published.values()):
        return None
    return {call_id: p.digest for call_id, p in published.items()}


# -- the ToolApproval side ----------------------------------------------------------------
