"""What the loop decides about one tool call before anything runs (engine/toolsteps.py runs
what is allowed): `screen_call` (duplicate in the response, governance, already used,
arguments) and, for an allowed call that needs a human, `approval_gate` (engine/approvals.py).

The verdict is a `Screened`: the record for `status.toolCalls[]`, the error result the model
gets instead when the call must not run, and, for a refusal, the Task reason the run ends
with if `onToolDenied: Fail` makes it end (`ends_as`): chosen here, where the refusal is
decided, so no reason is ever read back from a record's text.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..api.task import Reason, ToolDecision
from . import approvals
from .governance import bounded_reason
from .state import RunConfig, RunState, ToolCallRecord
from .stepcalls import check_arguments
from .tooling import ToolBinding
from .transcript import ToolCall, ToolResult

__all__ = ["Screened", "approval_gate", "screen_call"]


@dataclass(frozen=True, slots=True)
class Screened:
    """The verdict on one tool call before anything executes."""

    record: ToolCallRecord
    result: ToolResult | None
    """Set when the call must not execute: the error result the model gets instead."""
    binding: ToolBinding | None = None
    ends_as: Reason = "ToolDenied"
    """The Task reason when this refusal ends the run (a `denied` record and `onToolDenied:
    Fail`): ToolDenied (governance), GuardrailViolation, ApprovalRejected, ApprovalTimedOut."""


def _refuse(call: ToolCall, step: int, decision: ToolDecision, reason: str, text: str) -> Screened:
    record = ToolCallRecord(step, call.name, decision, reason, "skipped", call.id)
    return Screened(record, ToolResult(call.id, call.name, text, is_error=True))


async def screen_call(
    call: ToolCall,
    step: int,
    config: RunConfig,
    by_name: Mapping[str, ToolBinding],
    used: set[str],
    seen_in_response: set[str],
) -> Screened:
    """Decide one tool call before anything runs: duplicate in this response, governance
    (every call, built-in memory tools included), already used in an earlier step (not for
    built-ins), then argument validity."""
    if call.name in seen_in_response:
        return _refuse(
            call,
            step,
            "rejected",
            "DuplicateInResponse",
            f"error: {call.name} was already called in this response; it runs once per response.",
        )
    binding = by_name.get(call.name)
    if binding is None:
        decision = config.governance.decide(call.name)
    else:
        decision = config.governance.decide(binding.object_name, builtin=binding.builtin)
    if not decision.allowed:
        return _refuse(
            call,
            step,
            "denied",
            decision.reason,
            f"error: calling {call.name} is not permitted ({decision.reason.split(':')[0]}).",
        )
    if binding is None:  # governance allows only bound names; stay closed regardless
        return _refuse(
            call, step, "denied", "NotOffered", f"error: {call.name} is not an available tool."
        )
    if not binding.builtin and call.name in used:
        return _refuse(
            call,
            step,
            "rejected",
            "AlreadyCalled",
            f"error: {call.name} was already called in an earlier step; use that result.",
        )
    if call.arguments is None:
        return _refuse(
            call,
            step,
            "rejected",
            "InvalidArguments",
            "error: the arguments are not a valid JSON object.",
        )
    problem = await check_arguments(binding.parameters, call.arguments)
    if problem:
        return _refuse(
            call, step, "rejected", "InvalidArguments", f"error: invalid arguments: {problem}"
        )
    record = ToolCallRecord(step, call.name, "allowed", decision.reason, None, call.id)
    return Screened(record, None, binding)


async def approval_gate(
    call: ToolCall, screened: Screened, config: RunConfig, state: RunState
) -> Screened | None:
    """A call that needs a human approval (approvals.py): None while it waits; else the
    call to run (approved, or no approval needed) or its refusal (rejected, timed out)."""
    assert screened.binding is not None
    rule = approvals.requirement(config.governance, screened.binding)
    if rule is None:
        return screened
    pending = approvals.request(
        state, call.id, call.name, rule, config.approval_timeout, config.clock()
    )
    decider = config.approval_decider
    decisions = await decider(pending, call.arguments or {}) if decider else ()
    settled, by = approvals.settle(pending, decisions, config.clock())
    if settled == "waiting":
        return None
    del state.approvals[call.id]
    if settled == "approved":
        reason = bounded_reason(f"Approved: {by}" if by else "Approved")
        record = ToolCallRecord(pending.step, call.name, "allowed", reason, None, call.id)
        return Screened(record, None, screened.binding)
    refusal = approvals.refusal(settled, by)
    record = ToolCallRecord(
        pending.step, call.name, "denied", bounded_reason(refusal.record_reason), "skipped", call.id
    )
    result = ToolResult(call.id, call.name, refusal.text, is_error=True)
    return Screened(record, result, ends_as=refusal.ends_as)
