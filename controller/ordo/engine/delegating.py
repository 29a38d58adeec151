"""How the step loop runs a call of an `agent` Tool (docs/concepts.md#trees): the call was
screened like any other (engine/screening.py: governance, rules, a cycle or too deep, argument
guardrails, approval); here it asks the run's `Delegator` for its child Task.

- The request carries what is left of the parent's limits: its remaining time, and a share of
  its token budget not yet used nor held by a child that is still running, divided among the
  delegating calls of the response still to start (parallel children together never exceed
  it). A child the state already records (`RunState.children`) keeps its reservation and is
  asked for as `known` (gone then means `ChildVanished`, never a second child).
- A child that ended answers the call: its structured output as JSON text or its answer, or
  an error result naming the child, its phase and reason (cause `Child<Phase>: <Reason>`).
  Its usage joins the run's at that moment, once (a budget covers the tree: the caller then
  enforces the budget).
- A child still running leaves the call without a result, recorded in the state; once the
  response's calls were all looked at the run stops `AwaitingChildren` (engine/loop.py), and
  on resume `complete_pending` asks again (the delegator is create-or-get).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import replace

from ..api.task import ToolOutcome
from ..errors import LeaseLost, OrdoError
from .delegation import ChildNotOwned, ChildRecord, ChildRequest, ChildState
from .events import Checkpoint, Listener, ToolFinished
from .screening import Screened
from .state import RunConfig, RunState, ToolCallRecord
from .tooling import MAX_CAUSE_CHARS, ToolBinding, failure_cause
from .transcript import ToolCall, ToolResult

__all__ = ["children_message", "delegate", "finish_call", "to_start"]

MAX_CHILD_MESSAGE_CHARS = 1000


def to_start(
    calls: Sequence[ToolCall], by_name: dict[str, ToolBinding], state: RunState
) -> list[str]:
    """Ids of the calls of a response that would start a new child (an `agent` Tool's call
    whose child the state does not record yet): those that share the unreserved budget."""
    return [
        c.id
        for c in calls
        if (b := by_name.get(c.name)) is not None
        and b.agent is not None
        and c.id not in state.children
    ]


def _share(config: RunConfig, state: RunState, starting: int) -> int | None:
    """Tokens one new child may use: what the run has neither used nor reserved for its
    running children, divided among the `starting` children still to start (None: no
    budget)."""
    if config.token_budget is None:
        return None
    held = sum(c.reserved_tokens or 0 for c in state.waiting_children)
    left = config.token_budget - state.usage.total_tokens - held
    return left // max(starting, 1)


def _input(call: ToolCall, screened: Screened) -> object:
    binding = screened.binding
    assert binding is not None and binding.agent is not None
    arguments = call.arguments or {}
    return arguments if binding.agent.whole_arguments else arguments.get("input", "")


def _answer(child: ChildState) -> tuple[str, bool, str | None]:
    """(result text, is error, cause) of a child that ended."""
    if child.phase == "Succeeded":
        if child.structured is not None:
            return json.dumps(child.structured, ensure_ascii=False), False, None
        return child.output, False, None
    reason = child.reason or child.phase
    cause = "ChildVanished" if reason == "ChildVanished" else f"Child{child.phase}: {reason}"
    told = f": {child.message[:MAX_CHILD_MESSAGE_CHARS]}" if child.message else ""
    text = (
        f"error: the child Task {child.name} (agent {child.agent}) ended {child.phase} "
        f"({reason}){told}"
    )
    return text, True, cause[:MAX_CAUSE_CHARS]


async def delegate(
    call: ToolCall,
    screened: Screened,
    config: RunConfig,
    state: RunState,
    emit: Listener,
    *,
    deadline: float | None,
    starting: int,
) -> tuple[ToolCallRecord, ToolResult] | None:
    """Start (or look again at) the child of one allowed `agent` call: its record and result
    once the child ended (or could not be started), None while it runs."""
    binding = screened.binding
    assert binding is not None and binding.agent is not None and config.delegator is not None
    known = state.children.get(call.id)
    if known is not None:  # decided before its child started: keep that decision's record
        reason = known.decided or screened.record.reason
        record = replace(screened.record, reason=reason, approved_by=known.approved_by)
        screened = replace(screened, record=record)
    remaining = deadline - time.monotonic() if deadline is not None else None
    if remaining is not None and remaining <= 0:
        raise TimeoutError  # the run's deadline: no child gets an empty one
    reserved = known.reserved_tokens if known is not None else _share(config, state, starting)
    started = time.monotonic()
    if reserved is not None and reserved <= 0:
        text = f"error: the run has no token budget left for agent {binding.agent.agent}"
        return await finish_call(call, screened, state, emit, started, (text, True, "NoBudgetLeft"))
    request = ChildRequest(
        key=call.id,
        agent=binding.agent.agent,
        input=_input(call, screened),
        timeout=remaining,
        token_budget=reserved,
        tool=binding.object_name,
        known=known is not None,
    )
    if known is None:
        # The call id must be durable before a child named from it can exist: a parent that
        # died after the create and before any checkpoint with this call would ask the model
        # again, get a new call id and start a second child. Recorded as started, the call's
        # checkpoint is written at once (as before a non-idempotent call) and a resume asks
        # the delegator again under the same key, which finds the child.
        state.started_calls.add(call.id)
        await emit(Checkpoint(state))
    try:
        child = await config.delegator.start(request)
    except LeaseLost:
        raise
    except ChildNotOwned as exc:
        answer = (f"error: {exc}", True, exc.reason)
        return await finish_call(call, screened, state, emit, started, answer)
    except Exception as exc:  # the delegator failed: the model sees an error, names only the type
        cause = exc.reason if isinstance(exc, OrdoError) else failure_cause(exc)
        text = f"error: the child Task could not be started ({type(exc).__name__})"
        return await finish_call(call, screened, state, emit, started, (text, True, cause))
    state.children[call.id] = ChildRecord(
        call.id,
        child.name,
        child.agent,
        call.name,
        known.step if known is not None else state.step,
        reserved,
        child.phase,
        child.reason,
        child.usage.total_tokens,
        child.awaiting_approval,
        screened.record.reason,
        screened.record.approved_by,
    )
    if not child.ended:
        return None  # the call waits for its child (no result yet)
    if known is None or not known.ended:  # its tokens count once, when it is seen ended
        state.usage = state.usage + child.usage
    return await finish_call(call, screened, state, emit, started, _answer(child))


async def finish_call(
    call: ToolCall,
    screened: Screened,
    state: RunState,
    emit: Listener,
    started: float,
    answer: tuple[str, bool, str | None],
) -> tuple[ToolCallRecord, ToolResult]:
    """The record and result of a call that was answered without its executor: `answer` is
    (result text, is error, cause)."""
    text, is_error, cause = answer
    outcome: ToolOutcome = "error" if is_error else "succeeded"
    await emit(
        ToolFinished(state.step, call.name, outcome, time.monotonic() - started, call.id, cause)
    )
    record = replace(screened.record, step=state.step, outcome=outcome, error=cause)
    return record, ToolResult(call.id, call.name, text, is_error)


def children_message(state: RunState) -> str:
    """The message of a run that waits for children: their names and Agents."""
    waiting = state.waiting_children
    shown = ", ".join(f"{c.name} ({c.agent})" for c in waiting[:10])
    more = " ..." if len(waiting) > 10 else ""
    return f"waiting for {len(waiting)} child Task(s): {shown}{more}"
