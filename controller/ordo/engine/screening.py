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
from dataclasses import dataclass, replace

from ..api.task import Reason, ToolDecision
from . import approvals, toolrules
from .governance import ApprovalRule, bounded_reason, memory_operation, memory_policy_names
from .state import RunConfig, RunState, ToolCallRecord
from .stepcalls import check_arguments
from .tooling import ToolBinding
from .toolrules import RuleEvaluation
from .transcript import ToolCall, ToolResult, Usage

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
    Fail`): ToolDenied (governance), GuardrailViolation, ApprovalRejected, ApprovalTimedOut,
    DelegationCycle, DelegationDepthExceeded."""
    rule_approval: ApprovalRule | None = None
    """Set when an AgentPolicy tool rule requires a human approval of this call."""
    rule_notes: tuple[str, ...] = ()
    """What the tool rules noted (engine/toolrules.py), kept on the record's reason."""
    rule_evaluations: tuple[RuleEvaluation, ...] = ()
    """Every tool rule evaluated on the call (for the `ToolRuleEvaluated` events)."""


def _with_notes(reason: str, notes: tuple[str, ...]) -> str:
    return bounded_reason("; ".join((reason, *notes)) if notes else reason)


def _rule_names(binding: ToolBinding) -> tuple[str, ...]:
    """How `toolRules[].tools` may name the call's tool (memory tools as `memory.<op>`)."""
    op = memory_operation(binding.object_name) if binding.builtin else None
    return memory_policy_names(op) if op is not None else (binding.object_name,)


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
    usage: Usage | None = None,
) -> Screened:
    """Decide one tool call before anything runs: duplicate in this response, governance
    (every call, built-in memory tools included), already used in an earlier step (not for
    built-ins), argument validity, then the policies' tool rules (`usage`: the run's so far)."""
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
    if binding.agent is not None:  # a cycle or too deep: refused before any child exists
        refusal = config.lineage.refusal(binding.agent.agent, config.max_delegation_depth)
        if refusal is not None:
            kind, why = refusal
            refused = _refuse(call, step, "denied", f"{kind}: {why}", f"error: {why}.")
            return replace(refused, ends_as=kind)
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
    verdict = await toolrules.check(
        config.governance,
        _rule_names(binding),
        call.arguments,
        config.rule_subject,
        step,
        usage or Usage(),
    )
    if verdict.denied is not None:
        told = f": {verdict.message}" if verdict.message else ""
        refused = _refuse(
            call,
            step,
            "denied",
            _with_notes(verdict.denied, verdict.notes),
            f"error: calling {call.name} is not permitted by a policy rule{told}",
        )
        return replace(refused, rule_evaluations=verdict.evaluations)
    reason = _with_notes(decision.reason, verdict.notes)
    record = ToolCallRecord(step, call.name, "allowed", reason, None, call.id)
    return Screened(
        record, None, binding, "ToolDenied", verdict.approval, verdict.notes, verdict.evaluations
    )


async def approval_gate(
    call: ToolCall, screened: Screened, config: RunConfig, state: RunState
) -> Screened | None:
    """A call that needs a human approval (approvals.py): None while it waits; else the
    call to run (approved, or no approval needed) or its refusal (rejected, timed out)."""
    assert screened.binding is not None
    rule = approvals.requirement(config.governance, screened.binding) or screened.rule_approval
    known = state.approvals.get(call.id)
    if rule is None and known is not None:  # it waits already: nothing re-read lifts that
        rule = ApprovalRule(known.required_by)
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
        reason = _with_notes(f"Approved: {by}" if by else "Approved", screened.rule_notes)
        record = replace(
            ToolCallRecord(pending.step, call.name, "allowed", reason, None, call.id),
            approved_by=approvals.approvers(pending, decisions),
        )
        return Screened(record, None, screened.binding)
    refusal = approvals.refusal(settled, by)
    reason = _with_notes(refusal.record_reason, screened.rule_notes)
    record = ToolCallRecord(pending.step, call.name, "denied", reason, "skipped", call.id)
    result = ToolResult(call.id, call.name, refusal.text, is_error=True)
    return Screened(record, result, ends_as=refusal.ends_as)
