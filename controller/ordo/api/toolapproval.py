"""ToolApproval: a human's decision on one tool call a Task waits for (issue 16 §3, issue 26 §5).

Requesters create Tasks; approvers create ToolApprovals (a separate RBAC role, the chart's
`ordo-approver`), so the two can be different people. The spec is immutable: a decision is
made once, by creating the object; another ToolApproval for the same call can only reject it
(any rejection wins) or, where a call needs several approvers, add another person's approval.
An approval is bound to the call's arguments (`argsDigest`, as `ordo approvals` shows it) and
names its approver (`approvedBy`, which the chart's admission policy requires to be the
creating user). `spec.reason` is for people reading the object: ordo never copies it into a
Task's status, an Event, a log line or a metric."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from .base import CelRule, Name, OrdoModel, Resource, StatusBase

ApprovalVerdict = Literal["Approve", "Reject"]
MAX_CALL_ID_CHARS = 256
"""As `status.toolCalls[].callId` of a Task."""
MAX_APPROVER_CHARS = 256
"""A user name as the API server authenticates it (an OIDC e-mail, a ServiceAccount's
`system:serviceaccount:<ns>:<name>`)."""
MAX_REQUIRED_APPROVALS = 5
"""The most distinct approvers a call may need (`spec.approval.requiredApprovals`)."""
ARGS_DIGEST_PATTERN = r"^sha256:[0-9a-f]{64}$"
"""`engine.approvals.args_digest`: `sha256:` and 64 lowercase hex digits."""


class ToolApprovalSpec(OrdoModel):
    """Desired state of a ToolApproval: immutable once created."""

    task_ref: Name
    """The Task (same namespace) whose call this decides."""
    call_id: Annotated[str, Field(min_length=1, max_length=MAX_CALL_ID_CHARS)]
    """The call id, as `ordo approvals TASK` and the Task's `AwaitingApproval` condition show it."""
    decision: ApprovalVerdict
    """`Approve` lets the call run once (once enough distinct people approved it); `Reject`
    gives the model an error result (or fails the Task `ApprovalRejected` when its policy's
    `onToolDenied` is `Fail`)."""
    args_digest: Annotated[str, Field(pattern=ARGS_DIGEST_PATTERN)] | None = None
    """The digest of the arguments approved, as `ordo approvals TASK` shows it (`sha256:` and
    the hex SHA-256 of the arguments as canonical JSON). Required for `Approve`: the operator
    approves the call only if it equals the digest of the arguments the call will run with
    (else `Accepted=False`, `DigestMismatch`, and the call keeps waiting). A `Reject` needs
    none: it rejects the call whatever its arguments."""
    approved_by: Annotated[str, Field(min_length=1, max_length=MAX_APPROVER_CHARS)] | None = None
    """Who decides: the creating user's name as the API server authenticated it (`ordo
    approve` fills it in from a SelfSubjectReview). Required for `Approve`; the chart's
    ValidatingAdmissionPolicy refuses a ToolApproval whose `approvedBy` is not the user
    creating it. It is what `status.toolCalls[].approvedBy` of the Task records, and what
    counts distinct approvers."""
    reason: Annotated[str, Field(max_length=1024)] | None = None
    """Why, for people reading this object; never copied anywhere by ordo."""

    cel_rules: ClassVar[tuple[CelRule, ...]] = (
        CelRule(
            rule="self.decision != 'Approve' || (has(self.argsDigest) && has(self.approvedBy))",
            message="an Approve needs spec.argsDigest (as `ordo approvals TASK` shows it) and "
            "spec.approvedBy (your user name); `ordo approve` fills both in",
            check=lambda s: (
                s.decision != "Approve" or (s.args_digest is not None and s.approved_by is not None)
            ),
        ),
    )


TOOL_APPROVAL_IMMUTABLE = CelRule(
    rule="self == oldSelf",
    message="a ToolApproval's spec is immutable: create another one (a Reject always wins)",
    check=None,
)


class ToolApprovalStatus(StatusBase):
    """Whether the operator matched the decision to a waiting call: condition `Accepted`
    (True with `Pending` or `Applied`; False with `TaskNotFound`, `TaskFinished`,
    `UnknownCall`, `CallSettled`, `DigestMismatch`, `DuplicateApprover` or
    `RequesterExcluded`: docs/reasons.md)."""


class ToolApproval(Resource):
    """A human decision on one tool call a Task waits for."""

    kind: Literal["ToolApproval"] = "ToolApproval"
    spec: ToolApprovalSpec
    status: ToolApprovalStatus | None = None
