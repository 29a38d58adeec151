"""The Task reason vocabulary (docs/reasons.md): the bottom of the package.

`ordo.errors` gives every error a reason and `ordo.api.task` makes it the type of
`status.reason`; both import it from here, so neither imports the other for it (the api
raises ordo's errors, e.g. `InvalidSchema`, so errors must not import the api).
"""

from __future__ import annotations

from typing import Literal

Reason = Literal[
    "Succeeded",
    "AgentNotFound",
    "TeamNotFound",
    "ModelEndpointNotFound",
    "ToolNotFound",
    "ReservedToolName",
    "SecretNotFound",
    "CredentialNotAllowed",
    "MemoryNotFound",
    "InvalidSpec",
    "ModelNotAllowed",
    "ToolDenied",
    "MaxStepsExceeded",
    "Timeout",
    "TokenBudgetExceeded",
    "InvalidOutput",
    "ModelError",
    "ModelUnavailable",
    "ToolError",
    "Interrupted",
    "Cancelled",
    "DuplicateExecution",
    "PolicyUnavailable",
    "InternalError",
    "PodFailed",
    "ImageUnavailable",
    "AgentSuspended",
    "GuardrailMissing",
    "GuardrailViolation",
    "ApprovalRejected",
    "ApprovalTimedOut",
    "AwaitingApproval",
    "WorkerLost",
    "CheckpointUntrusted",
    "DelegationCycle",
    "DelegationDepthExceeded",
    "ChildFailed",
    "ChildVanished",
    "ChildNotOwned",
    "AwaitingChildren",
]
REASONS: tuple[str, ...] = Reason.__args__  # type: ignore[attr-defined]
