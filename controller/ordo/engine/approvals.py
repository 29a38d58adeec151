"""Human approval of tool calls (issue 16 §3): which calls need one, and the pure state machine
that settles a call waiting for it.

A call needs approval when its Tool says so (`spec.approval.required`) or any AgentPolicy that
selects the Agent lists it in `approvalRequired` (memory tools spelled as in `blockedTools`).
Requirements only add up: a re-read policy can add one mid-run, nothing removes one
(`requirement` consults the start-time governance too), and the shortest timeout applies.

The loop asks `settle` about a governed, allowed call whose arguments passed the guardrails:

- no decision yet, deadline not passed → `waiting`: the call does not run; it is recorded in
  `RunState.approvals` (call id, tool, step, requested-at, deadline), and once every call of
  the response was looked at the run ends `AwaitingApproval` (not terminal) with a checkpoint;
- any `Reject` (before the deadline) → `rejected` (reject wins over approve: fail closed);
- `Approve`s (before the deadline) by as many distinct approvers as the rule requires
  (`requiredApprovals`, default 1; one person counts once, however many ToolApprovals they
  create) → `approved`: the call runs, once (the pre-call checkpoint of a non-idempotent tool
  applies as to any call). Which Approves may count at all (bound to the call's argument
  digest, not by the Task's requester when the rule excludes them) is the decider's to say:
  the operator's filters the ToolApprovals (operator/tasks/approvals.py);
- no decision by the deadline → `timedOut`, handled as rejected.

A rejected or timed-out call gets an error result the model sees, or ends the run
`ApprovalRejected` / `ApprovalTimedOut` when `onToolDenied` is `Fail`. A decision's free-text
reason never enters the engine: only the verdict, the name of the decision and the identity
of who made it (the record's `approvedBy`).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from ..api.task import Reason
from .governance import ApprovalRule, Governance, memory_operation, memory_policy_names

if TYPE_CHECKING:
    from .tooling import ToolBinding

__all__ = [
    "AWAITING",
    "DEFAULT_TIMEOUT_SECONDS",
    "REJECTED",
    "TIMED_OUT",
    "ApprovalDecider",
    "ApprovalDecision",
    "ApprovalRule",
    "PendingApproval",
    "Refusal",
    "Settled",
    "Verdict",
    "Waiting",
    "approvers",
    "args_digest",
    "awaiting_message",
    "call_digest",
    "earliest_deadline",
    "merged",
    "refusal",
    "request",
    "requirement",
    "resume_pause",
    "settle",
]

DEFAULT_TIMEOUT_SECONDS = 24 * 3600.0
"""How long a call waits for a decision unless the Tool or the operator says otherwise."""

Verdict = Literal["Approve", "Reject"]
Settled = Literal["approved", "rejected", "timedOut", "waiting"]

REJECTED = "ApprovalRejected"
TIMED_OUT = "ApprovalTimedOut"
AWAITING = "AwaitingApproval"


@dataclass(frozen=True, slots=True)
class ApprovalDecision:
    """One human decision on one call, as the decider found it. `by` names the decision (a
    ToolApproval's name, `ordo run`); `at` is when it was made (epoch seconds; None: now);
    `approver` is who made it (a ToolApproval's `spec.approvedBy`, which admission ties to
    the creating user; "" unknown); `sole`: this decision alone settles the call, whatever
    number of approvers it needs (`ordo run`: the person running it owns the run)."""

    verdict: Verdict
    by: str = ""
    at: float | None = None
    approver: str = ""
    sole: bool = False


def args_digest(arguments: dict[str, Any]) -> str:
    """The digest an approval is bound to (issue 26 §5): `sha256:` and the hex SHA-256 of the
    call's parsed arguments as canonical JSON (keys sorted, no whitespace, UTF-8, non-ASCII
    kept). `ordo approvals` shows it, a ToolApproval names it, and the operator approves a call
    only when it equals the digest of the arguments the call will run with."""
    canonical = json.dumps(
        arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


def call_digest(arguments: dict[str, Any]) -> str:
    """`args_digest(arguments)`, or "" for arguments it cannot digest (NaN or infinity, which
    canonical JSON has no spelling for): no ToolApproval can name "", so such a call can only
    be rejected or time out."""
    try:
        return args_digest(arguments)
    except ValueError:
        return ""


@dataclass(frozen=True, slots=True)
class PendingApproval:
    """A call waiting for a decision (in the checkpoint; status names id and tool only)."""

    call_id: str
    tool: str
    """The name the model used."""
    step: int
    requested_at: float
    """Epoch seconds."""
    deadline: float
    """Epoch seconds; `math.inf` never times out."""
    required_by: str = ""
    approvals: int = 1
    """Distinct approvers the call needs."""
    requester_excluded: bool = False
    """The Task's requester cannot approve it."""

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "callId": self.call_id,
            "tool": self.tool,
            "step": self.step,
            "requestedAt": self.requested_at,
            "deadline": None if math.isinf(self.deadline) else self.deadline,
            "requiredBy": self.required_by,
        }
        if self.approvals != 1:
            d["requiredApprovals"] = self.approvals
        if self.requester_excluded:
            d["requesterExcluded"] = True
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PendingApproval:
        deadline = d.get("deadline")
        return cls(
            str(d["callId"]),
            str(d["tool"]),
            int(d.get("step", 0)),
            float(d["requestedAt"]),
            math.inf if deadline is None else float(deadline),
            str(d.get("requiredBy", "")),
            max(1, int(d.get("requiredApprovals", 1))),
            bool(d.get("requesterExcluded", False)),
        )


class Waiting(Protocol):
    """The part of a run's state (engine/state.py `RunState`) that waiting for approvals reads
    and writes; a protocol, so that the state, which holds PendingApprovals, is not imported
    here."""

    step: int
    approvals: dict[str, PendingApproval]
    awaiting_since: float | None
    paused_seconds: float


ApprovalDecider = Callable[[PendingApproval, dict[str, Any]], Awaitable[Sequence[ApprovalDecision]]]
"""Finds the decisions on one waiting call, given its arguments: a prompt (`ordo run` shows
them to the person running it), the ToolApprovals of the Task (the operator, which ignores
them). Returning none leaves the call waiting."""


def requirement(gov: Governance, binding: ToolBinding) -> ApprovalRule | None:
    """Whether a call of `binding` needs approval, here or in the governance this one narrows
    (the start-time one carries the Tools' own requirements); the shortest timeout wins."""
    names: tuple[str, ...] = (binding.object_name,)
    if binding.builtin:
        op = memory_operation(binding.object_name)
        names = memory_policy_names(op) if op is not None else names
    found: list[ApprovalRule] = []
    level: Governance | None = gov
    while level is not None:
        found += [level.approvals[n] for n in names if n in level.approvals]
        level = level.within
    if not found:
        return None
    return _strictest(found)


def _strictest(rules: Sequence[ApprovalRule]) -> ApprovalRule:
    """Several requirements of one tool as one: the first source, the shortest timeout, the
    most approvers, and the requester excluded if any excludes them."""
    timeouts = [r.timeout for r in rules if r.timeout is not None]
    return ApprovalRule(
        rules[0].source,
        min(timeouts) if timeouts else None,
        max(r.approvals for r in rules),
        any(r.requester_excluded for r in rules),
    )


def merged(
    *layers: dict[str, ApprovalRule],
) -> dict[str, ApprovalRule]:
    """Requirements of several sources (Tools, policies by name) as one map: a name required
    twice keeps the first source, the shortest timeout, the most approvers and any requester
    exclusion."""
    out: dict[str, ApprovalRule] = {}
    for layer in layers:
        for name, rule in layer.items():
            known = out.get(name)
            out[name] = rule if known is None else _strictest([known, rule])
    return out


def request(
    state: Waiting, call_id: str, tool: str, rule: ApprovalRule, default_timeout: float, now: float
) -> PendingApproval:
    """The waiting record of a call: the one already in `state`, else a new one (added)."""
    known = state.approvals.get(call_id)
    if known is not None:
        return known
    timeout = rule.timeout if rule.timeout is not None else default_timeout
    pending = PendingApproval(
        call_id,
        tool,
        state.step,
        now,
        now + timeout,
        rule.source,
        rule.approvals,
        rule.requester_excluded,
    )
    state.approvals[call_id] = pending
    return pending


def settle(
    pending: PendingApproval, decisions: Sequence[ApprovalDecision], now: float
) -> tuple[Settled, str]:
    """The state of a waiting call given the decisions found: (state, which decisions settled
    it: one name, or the approvals' names joined by ", "). A decision made after the deadline
    does not count (the call had timed out by then). Any Reject wins; else the call is
    approved once `pending.approvals` distinct approvers approved it (`approvers`)."""
    valid = [d for d in decisions if d.at is None or d.at <= pending.deadline]
    rejected = next((d for d in valid if d.verdict == "Reject"), None)
    if rejected is not None:
        return "rejected", rejected.by
    counted = _counted(pending, valid)
    if counted:
        return "approved", ", ".join(d.by for d in counted if d.by)
    if now >= pending.deadline:
        return "timedOut", ""
    return "waiting", ""


def _counted(pending: PendingApproval, valid: Sequence[ApprovalDecision]) -> list[ApprovalDecision]:
    """The Approves that approve the call (each approver's first), or [] if too few. An
    Approve whose approver is unknown counts only where one approval is enough."""
    approves = [d for d in valid if d.verdict == "Approve"]
    sole = next((d for d in approves if d.sole), None)
    if sole is not None:
        return [sole]
    if pending.approvals <= 1:
        return approves[:1]
    first: dict[str, ApprovalDecision] = {}
    for d in approves:
        if d.approver:
            first.setdefault(d.approver, d)
    return list(first.values()) if len(first) >= pending.approvals else []


def approvers(pending: PendingApproval, decisions: Sequence[ApprovalDecision]) -> tuple[str, ...]:
    """Who approved a call `settle` found approved: the identities of the decisions that
    counted (names only; none for a decision whose approver is unknown)."""
    valid = [d for d in decisions if d.at is None or d.at <= pending.deadline]
    return tuple(d.approver for d in _counted(pending, valid) if d.approver)


@dataclass(frozen=True, slots=True)
class Refusal:
    """A rejected or timed-out call: its `status.toolCalls[].reason`, the error result the
    model sees, and the Task reason if the refusal ends the run (`onToolDenied: Fail`)."""

    record_reason: str
    text: str
    ends_as: Reason


def refusal(settled: Settled, by: str) -> Refusal:
    """How a call that was not approved is answered (`settled` is rejected or timed out)."""
    if settled == "timedOut":
        return Refusal(
            TIMED_OUT,
            "error: this call needed a human approval that did not come in time.",
            "ApprovalTimedOut",
        )
    return Refusal(
        f"{REJECTED}: {by}" if by else REJECTED,
        "error: a human approver rejected this call; it was not run.",
        "ApprovalRejected",
    )


def resume_pause(state: Waiting, now: float) -> float:
    """A run resumed after waiting: add the wait to `paused_seconds` (time waiting for a human
    is not run time) and return the total paused so far."""
    if state.awaiting_since is not None:
        state.paused_seconds += max(0.0, now - state.awaiting_since)
        state.awaiting_since = None
    return state.paused_seconds


def awaiting_message(state: Waiting) -> str:
    """The message of a run that waits: call ids and tools, never arguments."""
    shown = ", ".join(f"{p.tool} ({p.call_id})" for p in list(state.approvals.values())[:10])
    more = " ..." if len(state.approvals) > 10 else ""
    return f"waiting for approval of {len(state.approvals)} tool call(s): {shown}{more}"


def earliest_deadline(pending: Sequence[PendingApproval]) -> float | None:
    """When the first waiting call times out (None: never, or nothing waits)."""
    finite = [p.deadline for p in pending if not math.isinf(p.deadline)]
    return min(finite) if finite else None
