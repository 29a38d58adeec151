"""ToolApproval: a human's decision on one tool call a Task waits for (issue 16 §3).

Requesters create Tasks; approvers create ToolApprovals (a separate RBAC role, the chart's
`ordo-approver`), so the two can be different people. The spec is immutable: a decision is
made once, by creating the object; a second ToolApproval for the same call can only reject
it (any rejection wins). `spec.reason` is for people reading the object: ordo never copies
it into a Task's status, an Event, a log line or a metric."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from .base import CelRule, Name, OrdoModel, Resource, StatusBase

ApprovalVerdict = Literal["Approve", "Reject"]
MAX_CALL_ID_CHARS = 256
"""As `status.toolCalls[].callId` of a Task."""


class ToolApprovalSpec(OrdoModel):
    """Desired state of a ToolApproval: immutable once created."""

    task_ref: Name
    """The Task (same namespace) whose call this decides."""
    call_id: Annotated[str, Field(min_length=1, max_length=MAX_CALL_ID_CHARS)]
    """The call id, as `ordo approvals TASK` and the Task's `AwaitingApproval` condition show it."""
    decision: ApprovalVerdict
    """`Approve` lets the call run once; `Reject` gives the model an error result (or fails the
    Task `ApprovalRejected` when its policy's `onToolDenied` is `Fail`)."""
    reason: Annotated[str, Field(max_length=1024)] | None = None
    """Why, for people reading this object; never copied anywhere by ordo."""

    cel_rules: ClassVar[tuple[CelRule, ...]] = ()


TOOL_APPROVAL_IMMUTABLE = CelRule(
    rule="self == oldSelf",
    message="a ToolApproval's spec is immutable: create another one (a Reject always wins)",
    check=None,
)


class ToolApprovalStatus(StatusBase):
    """Whether the operator matched the decision to a waiting call: condition `Accepted`
    (False with `TaskNotFound`, `TaskFinished`, `UnknownCall` or `CallSettled`)."""


class ToolApproval(Resource):
    """A human decision on one tool call a Task waits for."""

    kind: Literal["ToolApproval"] = "ToolApproval"
    spec: ToolApprovalSpec
    status: ToolApprovalStatus | None = None
