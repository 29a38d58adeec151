"""What a running Task waits on, as its status lists it: tool calls waiting for a human
decision (`status.pendingApprovals`) and child Tasks (`status.children`)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from ..reasons import Reason
from .base import Name, OrdoModel
from .phases import Phase
from .toolapproval import MAX_REQUIRED_APPROVALS


class PendingApprovalStatus(OrdoModel):
    """A tool call waiting for a human decision (never its arguments: `ordo approvals TASK`
    reads them, with their digest, from the ConfigMap `ordo-approval-<task uid>`)."""

    call_id: Annotated[str, Field(max_length=256)]
    """The provider's call id: what a ToolApproval's `spec.callId` names."""
    tool: Annotated[str, Field(max_length=128)]
    """The name the model used."""
    step: Annotated[int, Field(ge=1)]
    """Step that requested the call."""
    requested_at: str | None = None
    """When the run stopped for it (RFC 3339)."""
    deadline: str | None = None
    """When it counts as rejected (`ApprovalTimedOut`) without a decision (RFC 3339)."""
    required_approvals: Annotated[int, Field(ge=2, le=MAX_REQUIRED_APPROVALS)] | None = None
    """Distinct approvers the call needs, when more than one."""
    requester_excluded: bool | None = None
    """`true`: the Task's requester (annotation `ordo.dev/requested-by`) cannot approve it."""


MAX_PENDING_APPROVALS = 64


class ChildTaskStatus(OrdoModel):
    """A child Task this Task started (an `agent` Tool call or a Team member): what it is and
    how it ended; never its input or output (read the child Task for those, with its RBAC)."""

    name: Name
    """The child Task (same namespace)."""
    agent: Name
    """Its Agent."""
    call_id: Annotated[str, Field(max_length=256)] | None = None
    """The tool call that started it (absent for a Team member)."""
    member: Annotated[str, Field(max_length=63)] | None = None
    """The Team member it runs (absent for a tool call)."""
    phase: Phase | None = None
    """Its phase when this Task last looked."""
    reason: Reason | None = None
    """Its reason, once it ended."""
    awaiting_approval: bool | None = None
    """`true` while the child waits for a human decision on one of its own tool calls."""
    tokens: Annotated[int, Field(ge=0)] | None = None
    """Tokens it used (counted in this Task's `usage` once it ended)."""


MAX_CHILDREN = 64
"""The most children `status.children` lists (the oldest first)."""
