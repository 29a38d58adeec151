"""The agent step loop (DESIGN §3, steps 4-6).

`run_agent` is the one readable function for the loop; the decisions it makes per tool call
are factored into `_screen_call` and the Governance object, both unit-tested.

One step is one model call plus the tool calls it requested:
1. stop if cancelled or `max_steps` model calls were made;
2. call the model with the history and the tools still on offer;
3. stop on a text answer (validated against the output schema), or on the token budget;
4. for each tool call: screen (duplicate, governance, already used, arguments), then execute;
   every call gets exactly one result in the history;
5. checkpoint, and go again.
The whole run is bounded by `timeout`, which cancels an in-flight model or tool call.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..api.task import Reason
from ..errors import Interrupted, LeaseLost, OrdoError
from . import approvals, livepolicy
from . import guardsteps as guard
from . import output as output_mod
from .events import (
    Checkpoint,
    Event,
    Listener,
    ModelResponded,
    RunFinished,
    RunStarted,
    StepFinished,
    StepStarted,
    ToolDecided,
    ToolFinished,
    public_tool_name,
)
from .governance import bounded_reason
from .guardrails import GuardrailBinding
from .jsonsize import MAX_STRUCTURED_OUTPUT_BYTES, json_size
from .model import ModelCallError, ModelClient, ModelRequest, ToolDefinition
from .sanitize import normalise_response
from .state import Phase, RunConfig, RunResult, RunState, ToolCallRecord
from .stepcalls import check_arguments, complete_unless_cancelled, loop_deadline
from .tooling import ToolBinding, ToolFailure, failure_cause
from .transcript import AssistantMessage, SystemMessage, ToolCall, ToolResult, UserMessage


@dataclass(frozen=True, slots=True)
class Screened:
    """The verdict on one tool call before anything executes."""

    record: ToolCallRecord
    result: ToolResult | None
    """Set when the call must not execute: the error result the model gets instead."""
    binding: ToolBinding | None = None


def initial_state(config: RunConfig) -> RunState:
    return RunState(items=[SystemMessage(config.system_prompt), UserMessage(config.user_message)])


async def run_agent(
    config: RunConfig,
    model: ModelClient,
    tools: Sequence[ToolBinding],
    *,
    listeners: Iterable[Listener] = (),
    state: RunState | None = None,
    fresh: bool | None = None,
    cancel: asyncio.Event | None = None,
    guardrails: Sequence[GuardrailBinding] = (),
) -> RunResult:
    """Run (or resume, given `state`) one agent to a terminal result. Never raises for
    anything the model or a tool does; cancellation of the calling task propagates.

    The loop updates `state` in place, so a caller that passes its own (`initial_state` and
    `fresh=True` for a new run) still knows the step, usage and tool calls reached when
    something unexpected raises out of the loop. `fresh` (default: `state is None`) says the
    run starts here: only then is its input screened (a resumed run did that at its start)."""
    sinks = tuple(listeners)
    bound = frozenset(t.name for t in tools)  # names that events may carry (events.py)
    fresh = state is None if fresh is None else fresh
    state = state if state is not None else initial_state(config)
    deadline = (
        time.monotonic() + config.timeout - config.elapsed if config.timeout is not None else None
    )

    async def emit(event: Event) -> None:
        for sink in sinks:
            await sink(event)

    async def finish(
        phase: Phase,
        reason: Reason,
        message: str,
        structured: dict[str, Any] | None = None,
        error: OrdoError | None = None,
    ) -> RunResult:
        text = state.items[-1].text if isinstance(state.items[-1], AssistantMessage) else ""
        out = text if phase == "Succeeded" else _last_text(state)
        if phase != "Succeeded" and guard.guards_output(guardrails):
            out = ""  # a partial answer never passed the output guardrails
        result = RunResult(phase, reason, message, out, structured, state, error)
        await emit(RunFinished(result))
        return result

    async def policy_boundary() -> RunResult | None:
        """Re-read the policies (engine/livepolicy.py); a suspension ends the run here."""
        nonlocal config
        config, suspended_by = await livepolicy.at_boundary(config)
        if suspended_by is None:
            return None
        _fill_unanswered(state)
        return await finish(
            "Failed", "AgentSuspended", livepolicy.stopped(suspended_by, state.step)
        )

    async def awaiting() -> RunResult:
        """Calls wait for a human decision (approvals.py): checkpoint and stop, not terminal
        (a cancel request ends the run instead)."""
        if cancel is not None and cancel.is_set():
            state.approvals.clear()
            _fill_unanswered(state)
            return await finish("Cancelled", "Cancelled", f"cancelled after {state.step} step(s)")
        state.awaiting_since = config.clock()
        await emit(Checkpoint(state))
        return await finish(
            "AwaitingApproval", "AwaitingApproval", approvals.awaiting_message(state)
        )

    await emit(RunStarted(resumed_from_step=state.step))
    try:
        async with asyncio.timeout_at(loop_deadline(deadline)):
            # guardrails: the Task input, before any model call (a resumed run did it before)
            violation = await guard.check_input(guardrails, config, state, emit) if fresh else None
            if violation is not None:
                return await finish("Failed", "GuardrailViolation", violation)
            denied = await _complete_pending_calls(config, state, tools, emit, guardrails)
            if denied is not None:
                _fill_unanswered(state)
                return await finish(
                    "Failed",
                    approvals.ended_by(denied) or guard.denial_reason(denied),
                    f"tool {public_tool_name(denied.tool, bound)!r} denied: {denied.reason}",
                )
            if state.approvals:
                return await awaiting()
            while True:
                if cancel is not None and cancel.is_set():
                    return await finish(
                        "Cancelled", "Cancelled", f"cancelled after {state.step} step(s)"
                    )
                if deadline is not None and time.monotonic() >= deadline:
                    raise TimeoutError  # also when nothing awaited yielded to the timer
                if (stopped := await policy_boundary()) is not None:
                    return stopped
                if state.step >= config.max_steps:
                    return await finish(
                        "Failed",
                        "MaxStepsExceeded",
                        f"no final answer after {config.max_steps} model call(s) (maxSteps)",
                    )
                state.step += 1
                step = state.step
                await emit(StepStarted(step))
                offered = [
                    t
                    for t in tools
                    if (t.builtin or t.name not in state.used_tools)
                    and config.governance.offers(t.object_name, builtin=t.builtin)
                ]
                started = time.monotonic()
                request = ModelRequest(
                    items=tuple(state.items),  # a snapshot: the history grows after the call
                    tools=tuple(
                        ToolDefinition(t.name, t.description, t.parameters) for t in offered
                    ),
                    output_schema=config.output_schema,
                    deadline=loop_deadline(deadline),
                )
                answer = await complete_unless_cancelled(model, request, cancel)
                if answer is None:  # cancelled while the model was thinking
                    state.step -= 1  # that call never answered: it is not a step
                    return await finish(
                        "Cancelled", "Cancelled", f"cancelled after {state.step} step(s)"
                    )
                response = answer

                response = normalise_response(response, step=step, seen_ids=state.seen_ids)
                state.usage = state.usage + response.usage
                state.items.append(AssistantMessage(response.text, response.tool_calls))
                await emit(
                    ModelResponded(
                        step,
                        response.usage,
                        len(response.tool_calls),
                        time.monotonic() - started,
                        response.finish_reason,
                        response.response_model,
                    )
                )

                if (
                    config.token_budget is not None
                    and state.usage.total_tokens > config.token_budget
                ):
                    _fill_unanswered(state)  # the over-budget response's calls do not run
                    return await finish(
                        "Failed",
                        "TokenBudgetExceeded",
                        f"used {state.usage.total_tokens} tokens, budget {config.token_budget}",
                    )
                if not response.tool_calls:
                    text, violation = response.text, None
                    if guardrails:  # guardrails: the final answer
                        text, violation = await guard.check_output(
                            guardrails, config, text, state, emit
                        )
                    if violation is not None:
                        return await finish("Failed", "GuardrailViolation", violation)
                    return await _final_answer(config, text, finish)
                if (stopped := await policy_boundary()) is not None:
                    return stopped
                denied = await _run_calls(
                    response.tool_calls, config, tools, state, emit, guardrails=guardrails
                )
                if denied is not None:
                    _fill_unanswered(state)
                    return await finish(
                        "Failed",
                        approvals.ended_by(denied) or guard.denial_reason(denied),
                        f"tool {public_tool_name(denied.tool, bound)!r} denied at step "
                        f"{step}: {denied.reason}",
                    )
                if state.approvals:
                    return await awaiting()
                await emit(Checkpoint(state))
                await emit(StepFinished(state))
    except TimeoutError:
        _fill_unanswered(state)
        return await finish(
            "Failed", "Timeout", f"the run did not finish within {config.timeout or 0:g}s (timeout)"
        )
    except LeaseLost:
        raise  # another execution owns the Task now: this one ends without a verdict
    except (ModelCallError, Interrupted) as exc:
        _fill_unanswered(state)
        return await finish("Failed", exc.reason, str(exc), error=exc)
    except OrdoError as exc:  # e.g. a checkpoint that cannot be written
        _fill_unanswered(state)
        return await finish("Failed", exc.reason, str(exc), error=exc)


def _last_text(state: RunState) -> str:
    for item in reversed(state.items):
        if isinstance(item, AssistantMessage) and item.text:
            return item.text
    return ""


async def _final_answer(config: RunConfig, text: str, finish: Any) -> RunResult:
    if config.output_schema is None:
        result: RunResult = await finish("Succeeded", "Succeeded", "the agent answered")
        return result
    try:
        structured = await output_mod.parse_answer(text, config.output_schema)
        if json_size(structured, MAX_STRUCTURED_OUTPUT_BYTES) > MAX_STRUCTURED_OUTPUT_BYTES:
            raise output_mod.InvalidOutput(
                "the answer satisfies the output schema but is over "
                f"{MAX_STRUCTURED_OUTPUT_BYTES} bytes as JSON, the most "
                "status.structuredOutput holds; bound it in the outputSchema (maxItems, "
                "maxLength) or ask for a shorter answer"
            )
    except output_mod.InvalidOutput as exc:
        result = await finish("Failed", exc.reason, str(exc), error=exc)
        return result
    result = await finish(
        "Succeeded", "Succeeded", "the agent answered with valid structured output", structured
    )
    return result


async def _screen_call(
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

    def refuse(decision: str, reason: str, text: str) -> Screened:
        record = ToolCallRecord(step, call.name, decision, reason, "skipped", call.id)  # type: ignore[arg-type]
        return Screened(record, ToolResult(call.id, call.name, text, is_error=True))

    if call.name in seen_in_response:
        return refuse(
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
        return refuse(
            "denied",
            decision.reason,
            f"error: calling {call.name} is not permitted ({decision.reason.split(':')[0]}).",
        )
    if binding is None:  # governance allows only bound names; stay closed regardless
        return refuse("denied", "NotOffered", f"error: {call.name} is not an available tool.")
    reason = decision.reason
    if not binding.builtin and call.name in used:
        return refuse(
            "rejected",
            "AlreadyCalled",
            f"error: {call.name} was already called in an earlier step; use that result.",
        )
    if call.arguments is None:
        return refuse(
            "rejected", "InvalidArguments", "error: the arguments are not a valid JSON object."
        )
    problem = await check_arguments(binding.parameters, call.arguments)
    if problem:
        return refuse("rejected", "InvalidArguments", f"error: invalid arguments: {problem}")
    return Screened(
        ToolCallRecord(step, call.name, "allowed", reason, None, call.id), None, binding
    )


async def _execute(
    screened: Screened, call: ToolCall, state: RunState, emit: Any
) -> tuple[ToolCallRecord, ToolResult]:
    binding = screened.binding
    assert binding is not None
    if not binding.idempotent and not binding.builtin:
        state.started_calls.add(call.id)
        await emit(Checkpoint(state))
    started = time.monotonic()
    arguments = call.arguments or {}
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
    record = ToolCallRecord(
        state.step, call.name, "allowed", screened.record.reason, outcome, call.id, cause
    )
    return record, result


async def _run_calls(
    calls: Sequence[ToolCall],
    config: RunConfig,
    tools: Sequence[ToolBinding],
    state: RunState,
    emit: Any,
    *,
    resuming: bool = False,
    guardrails: Sequence[GuardrailBinding] = (),
) -> ToolCallRecord | None:
    """Screen and execute the tool calls of one response, appending exactly one result per
    call. Returns the denial record when `onToolDenied: Fail` must end the run."""
    by_name = {t.name: t for t in tools}
    seen: set[str] = set()
    for call in calls:
        screened = await _screen_call(call, state.step, config, by_name, state.used_tools, seen)
        seen.add(call.name)
        if (
            resuming
            and screened.binding is not None
            and call.id in state.started_calls
            and not screened.binding.idempotent
        ):
            state.records.append(
                ToolCallRecord(
                    state.step, call.name, "allowed", screened.record.reason, "interrupted", call.id
                )
            )
            raise Interrupted(
                f"tool {screened.binding.object_name!r} may have run before the restart and is "
                "not idempotent; it was not repeated"
            )
        if screened.binding is not None and guardrails:  # guardrails: the arguments
            call, refused = await guard.check_arguments(guardrails, call, config, state, emit)
            if refused is not None:
                screened = Screened(*refused)
        if screened.binding is not None:
            gated = await _approval_gate(call, screened, config, state)
            if gated is None:
                continue  # waits for a human decision: no result yet (approvals.py)
            screened = gated
        await emit(ToolDecided(screened.record, offered=call.name in by_name))
        if screened.binding is None:
            state.records.append(screened.record)
            assert screened.result is not None
            state.items.append(screened.result)
            if screened.record.decision == "denied" and config.on_tool_denied == "Fail":
                return screened.record
            continue
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
            return record
        guard.enforce_budget(config.token_budget, state)  # a result judge's tokens
    return None


def _unanswered(state: RunState) -> list[ToolCall]:
    """Tool calls of the last assistant message that have no result yet."""
    for item in reversed(state.items):
        if isinstance(item, AssistantMessage):
            answered = {i.call_id for i in state.items if isinstance(i, ToolResult)}
            return [c for c in item.tool_calls if c.id not in answered]
    return []


def _fill_unanswered(state: RunState) -> None:
    """Give every tool call of the last assistant message a result, so the transcript stays
    well-formed for a provider even when the run stops mid-step."""
    for call in _unanswered(state):
        state.items.append(
            ToolResult(call.id, call.name, "error: not executed: the run stopped", True)
        )


async def _complete_pending_calls(
    config: RunConfig,
    state: RunState,
    tools: Sequence[ToolBinding],
    emit: Any,
    guardrails: Sequence[GuardrailBinding] = (),
) -> ToolCallRecord | None:
    """After a restart: finish the tool calls of the last step that have no result yet.
    A call that may have started is repeated only if its tool is idempotent."""
    pending = _unanswered(state)
    if not pending:
        return None
    answered = {r.call_id for r in state.records}
    pending = [c for c in pending if c.id not in answered]
    denied = await _run_calls(
        pending, config, tools, state, emit, resuming=True, guardrails=guardrails
    )
    if denied is None and not state.approvals:
        await emit(Checkpoint(state))
        await emit(StepFinished(state))
    return denied


async def _approval_gate(
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
    reason, text = approvals.refusal(settled, by)
    record = ToolCallRecord(
        pending.step, call.name, "denied", bounded_reason(reason), "skipped", call.id
    )
    return Screened(record, ToolResult(call.id, call.name, text, is_error=True))
