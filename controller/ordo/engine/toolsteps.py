"""How the step loop runs the tool calls of one response (engine/loop.py): each call is
screened (engine/screening.py), its arguments guarded, gated on a human approval, executed,
and its result guarded, and gets exactly one result in the history, or waits for approval
with none yet. A refusal that must end the run comes back as a `Denial` (engine/verdicts.py).

After a restart, `complete_pending` finishes the calls of the last step that have no result:
a call that may have started runs again only if its tool is idempotent (else the run ends
`Interrupted`); an `a2a` call polls its remote task instead (engine/remotecalls.py). `fill_unanswered` keeps the transcript well-formed when a run stops mid-step.

Every record names what the model's name was bound to (`_attributed`): the Tool object, or a
built-in, so the audit trail tells a Tool's call from a built-in's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import replace

from ..api.task import ToolOutcome
from ..errors import Interrupted
from . import guardsteps as guard
from .delegating import delegate, to_start
from .events import (
    Checkpoint,
    Listener,
    StepFinished,
    ToolDecided,
    ToolFinished,
    ToolRuleEvaluated,
)
from .governance import memory_operation
from .guardrails import GuardrailBinding
from .remotecalls import call_remote
from .screening import Screened, approval_gate, screen_call
from .state import RunConfig, RunState, ToolCallRecord
from .tooling import ToolBinding, ToolFailure, failure_cause
from .transcript import AssistantMessage, ToolCall, ToolResult
from .verdicts import Denial

__all__ = ["complete_pending", "fill_unanswered", "run_calls"]


def _attributed(record: ToolCallRecord, bound: ToolBinding | None) -> ToolCallRecord:
    """`record` with the Tool object its name was bound to, or marked built-in: a bound
    built-in, or a built-in's name the run did not bind (no Tool may be named so)."""
    if bound is not None and not bound.builtin:
        return replace(record, tool_object=bound.object_name, builtin=False)
    builtin = bound is not None or memory_operation(record.tool) is not None
    return replace(record, tool_object=None, builtin=builtin)


async def _execute(
    screened: Screened, call: ToolCall, state: RunState, emit: Listener
) -> tuple[ToolCallRecord, ToolResult]:
    binding = screened.binding
    assert binding is not None
    if not binding.idempotent and not binding.builtin:
        state.started_calls.add(call.id)
        await emit(Checkpoint(state))
    started = time.monotonic()
    arguments = call.arguments or {}
    outcome: ToolOutcome
    cause: str | None = None
    try:
        if binding.timeout:
            async with asyncio.timeout(binding.timeout):
                out = await binding.executor(arguments)
        else:
            out = await binding.executor(arguments)
        outcome = "error" if out.is_error else "succeeded"
        if out.is_error:
            cause = out.cause or "ToolError"
        result = ToolResult(call.id, call.name, out.content, out.is_error)
    except ToolFailure as exc:
        outcome, cause = "error", failure_cause(exc)
        result = ToolResult(call.id, call.name, f"error: {exc}", True)
    except TimeoutError:  # the tool's own timeout; the run deadline arrives as cancellation
        outcome, cause = "error", "Timeout"
        result = ToolResult(
            call.id, call.name, f"error: the tool did not answer within {binding.timeout:g}s", True
        )
    except Exception as exc:  # an executor bug must not crash the run; name the type only
        outcome, cause = "error", failure_cause(exc)
        result = ToolResult(
            call.id, call.name, f"error: the tool failed ({type(exc).__name__})", True
        )
    duration = time.monotonic() - started
    await emit(ToolFinished(state.step, call.name, outcome, duration, call.id, cause))
    record = replace(screened.record, step=state.step, outcome=outcome, error=cause)
    return record, result


async def run_calls(
    calls: Sequence[ToolCall],
    config: RunConfig,
    tools: Sequence[ToolBinding],
    state: RunState,
    emit: Listener,
    *,
    resuming: bool = False,
    guardrails: Sequence[GuardrailBinding] = (),
    deadline: float | None = None,
    cancel: asyncio.Event | None = None,
) -> Denial | None:
    """Screen and execute the tool calls of one response, appending exactly one result per
    call (none for a call that waits for approval or for its child Task). Returns the denial
    when `onToolDenied: Fail` must end the run. `deadline` (time.monotonic()) is the run's:
    a child Task gets what is left of it. `cancel` (a cancel request) ends the wait of an `a2a`
    call (its remote task is cancelled)."""
    by_name = {t.name: t for t in tools}
    seen: set[str] = set()
    starting = to_start(calls, by_name, state)
    for call in calls:
        # screened, guarded, approved before its child started or its remote task was sent
        started_child = call.id in state.children or call.id in state.remote_tasks
        sharing = len(starting)  # new children still to start, this call's included
        if call.id in starting:
            starting.remove(call.id)
        screened = await screen_call(
            call, state.step, config, by_name, state.used_tools, seen, state.usage
        )
        seen.add(call.name)
        for ev in screened.rule_evaluations:
            await emit(ToolRuleEvaluated(ev.policy, ev.rule, ev.action, ev.mode, ev.result))
        bound = by_name.get(call.name)
        if (
            resuming
            and screened.binding is not None
            and call.id in state.started_calls
            and not screened.binding.idempotent
            and screened.binding.agent is None  # a child is found again, never repeated
            and screened.binding.remote is None  # a remote task is polled, never sent twice
        ):
            interrupted = replace(screened.record, outcome="interrupted")
            state.records.append(_attributed(interrupted, bound))
            raise Interrupted(
                f"tool {screened.binding.object_name!r} may have run before the restart and is "
                "not idempotent; it was not repeated"
            )
        if screened.binding is not None and guardrails and not started_child:  # the arguments
            call, refused = await guard.check_arguments(guardrails, call, config, state, emit)
            if refused is not None:
                screened = Screened(*refused, ends_as="GuardrailViolation")
        if screened.binding is not None and not started_child:
            gated = await approval_gate(call, screened, config, state)
            if gated is None:
                continue  # waits for a human decision: no result yet (approvals.py)
            screened = gated
        screened = replace(screened, record=_attributed(screened.record, bound))
        if not started_child:
            await emit(ToolDecided(screened.record, offered=bound is not None))
        if screened.binding is None:
            state.records.append(screened.record)
            assert screened.result is not None
            state.items.append(screened.result)
            if screened.record.decision == "denied" and config.on_tool_denied == "Fail":
                return Denial(screened.record, screened.ends_as)
            continue
        if screened.binding.agent is not None and config.delegator is not None:
            done = await delegate(
                call, screened, config, state, emit, deadline=deadline, starting=sharing
            )
            if done is None:
                continue  # waits for its child Task: no result yet (delegating.py)
            record, result = done
        elif screened.binding.remote is not None:
            record, result = await call_remote(
                call, screened, config, state, emit, deadline=deadline, cancel=cancel
            )
        else:
            record, result = await _execute(screened, call, state, emit)
        withheld = False
        if guardrails:  # guardrails: the result, before the model sees it
            record, result, withheld = await guard.check_result(
                guardrails, record, result, state, emit
            )
        state.records.append(record)
        state.items.append(result)
        if not screened.binding.builtin:
            state.used_tools.add(call.name)
        if withheld and config.on_tool_denied == "Fail":
            return Denial(record, "GuardrailViolation")
        guard.enforce_budget(config.token_budget, state)  # a result judge's, a child's tokens
    return None


def _unanswered(state: RunState) -> list[ToolCall]:
    """Tool calls of the last assistant message that have no result yet."""
    for item in reversed(state.items):
        if isinstance(item, AssistantMessage):
            answered = {i.call_id for i in state.items if isinstance(i, ToolResult)}
            return [c for c in item.tool_calls if c.id not in answered]
    return []


def fill_unanswered(state: RunState) -> None:
    """Give every tool call of the last assistant message a result, so the transcript stays
    well-formed for a provider even when the run stops mid-step."""
    for call in _unanswered(state):
        state.items.append(
            ToolResult(call.id, call.name, "error: not executed: the run stopped", True)
        )


async def complete_pending(
    config: RunConfig,
    state: RunState,
    tools: Sequence[ToolBinding],
    emit: Listener,
    guardrails: Sequence[GuardrailBinding] = (),
    deadline: float | None = None,
    cancel: asyncio.Event | None = None,
) -> Denial | None:
    """After a restart: finish the tool calls of the last step that have no result yet.
    A call that may have started is repeated only if its tool is idempotent; a call whose
    child Task the state records asks its delegator again (create-or-get)."""
    pending = _unanswered(state)
    if not pending:
        return None
    answered = {r.call_id for r in state.records}
    pending = [c for c in pending if c.id not in answered]
    denied = await run_calls(
        pending,
        config,
        tools,
        state,
        emit,
        resuming=True,
        guardrails=guardrails,
        deadline=deadline,
        cancel=cancel,
    )
    if denied is None and not state.approvals and not state.waiting_children:
        await emit(Checkpoint(state))
        await emit(StepFinished(state))
    return denied
