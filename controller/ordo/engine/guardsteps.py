"""Where the step loop applies guardrails (engine/guardrails.py): the Task input before the
first model call (`check_input`), each allowed tool call's arguments before it runs
(`check_arguments`), each result before the model sees it (`check_result`), and the final answer
before it is validated and written (`check_output`).

Every screening adds the judge's tokens to the run's usage and its records to the run state,
and the token budget is checked right after it (`enforce_budget`): a judge that takes the run
over its budget at a tool call stops the run before the tool runs, or before the model sees
the result. Each judge's call count is kept in the run state too, so its `maxCallsPerTask`
holds across a resume (the checkpoint carries it; a call made after the last checkpoint is
not in it, and the resumed run makes it again and counts it then). A denied tool call or result is answered with an error result naming the
guardrail; whether that ends the run is the policy's `onToolDenied`, as for a governance denial.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence

from ..errors import OrdoError
from .events import GuardrailFired, Listener
from .guardrails import (
    GUARDRAIL_REASON,
    GuardrailBinding,
    GuardrailRecord,
    ModelJudge,
    Screening,
    screen,
)
from .jsontext import MAX_JSON_DEPTH, bounded_json_loads
from .state import RunConfig, RunState, ToolCallRecord
from .transcript import AssistantMessage, ToolCall, ToolResult, UserMessage

Emit = Listener
"""The loop's `emit`: every listener of the run gets the event."""

__all__ = [
    "GUARDRAIL_REASON",
    "check_arguments",
    "check_input",
    "check_output",
    "check_result",
    "enforce_budget",
    "fired_message",
    "guard_arguments",
    "guard_result",
    "guard_text",
    "guards_output",
    "over_budget",
    "violation_reason",
]


async def _fired(state: RunState, records: Sequence[GuardrailRecord], emit: Emit | None) -> None:
    """Keep the records in the run state and tell the listeners (Events, metrics, logs)."""
    state.guardrail_records.extend(records)
    if emit is not None:
        for record in records:
            await emit(GuardrailFired(record))


async def guard_text(
    guards: Sequence[GuardrailBinding],
    point: str,
    text: str,
    state: RunState,
    *,
    tool: str | None = None,
    emit: Emit | None = None,
) -> Screening:
    """Screen `text` at `point` and account for it in `state` (tokens, records, events, the
    judges' call counts)."""
    step = 0 if point == "input" else state.step
    judges = [(g.name, g.check) for g in guards if isinstance(g.check, ModelJudge)]
    for name, judge in judges:  # a resumed run's new judge goes on from the checkpoint's count
        judge.calls = max(judge.calls, state.judge_calls.get(name, 0))
    checked = await screen(guards, point, text, step=step, tool=tool)  # type: ignore[arg-type]
    for name, judge in judges:
        state.judge_calls[name] = max(judge.calls, state.judge_calls.get(name, 0))
    state.usage = state.usage + checked.usage
    await _fired(state, checked.records, emit)
    return checked


def over_budget(budget: int | None, state: RunState) -> str | None:
    """The status message when a judge's tokens took the run over its budget, else None."""
    if budget is None or state.usage.total_tokens <= budget:
        return None
    return f"used {state.usage.total_tokens} tokens (guardrail judges included), budget {budget}"


def enforce_budget(budget: int | None, state: RunState) -> None:
    """Raise (ending the run `TokenBudgetExceeded`) when judges took it over its budget."""
    if (over := over_budget(budget, state)) is not None:
        raise OrdoError(over, reason="TokenBudgetExceeded")


def guards_output(guards: Sequence[GuardrailBinding]) -> bool:
    """True when a guardrail checks the final answer: then no unchecked partial answer may be
    written to status when the run fails."""
    return any("output" in g.points for g in guards)


_POINT_WORDS = {
    "input": "the Task input",
    "toolArguments": "the arguments of tool",
    "toolResult": "the result of tool",
    "output": "the final answer",
}


def fired_message(record: GuardrailRecord) -> str:
    """What a guardrail did, where (the status message of a violation, the Event and log of
    any firing): names, the point and a fail-closed cause; never the text."""
    where = _POINT_WORDS[record.point]
    if record.tool:
        where += f" {record.tool!r}"
    how = f" (it failed closed: {record.cause})" if record.cause else ""
    return f"guardrail {record.guardrail!r} {record.action} {where} at step {record.step}{how}"


def violation_reason(record: GuardrailRecord) -> str:
    """`status.toolCalls[].reason` of a call a guardrail denied."""
    return f"{GUARDRAIL_REASON}: {record.guardrail} ({record.point})"


def _error_text(record: GuardrailRecord) -> str:
    subject = "call" if record.point == "toolArguments" else "result"
    return f"error: the tool {subject} was blocked by guardrail {record.guardrail!r}."


async def guard_arguments(
    guards: Sequence[GuardrailBinding], call: ToolCall, state: RunState, emit: Emit | None = None
) -> tuple[ToolCall, GuardrailRecord | None]:
    """The call with its arguments as the guardrails leave them (redacted), or the denial. The
    guardrails see the arguments as compact JSON; a redaction that does not leave a JSON object
    denies (fail closed)."""
    text = json.dumps(call.arguments or {}, ensure_ascii=False, separators=(",", ":"))
    checked = await guard_text(guards, "toolArguments", text, state, tool=call.name, emit=emit)
    if checked.denied is not None:
        return call, checked.denied
    if checked.text == text:
        return call, None
    try:
        arguments = bounded_json_loads(checked.text, max_depth=MAX_JSON_DEPTH)
    except Exception:
        arguments = None
    if not isinstance(arguments, dict):
        last = checked.records[-1]
        denial = GuardrailRecord(
            last.step, last.point, last.guardrail, "denied", call.name, "RedactionBrokeArguments"
        )
        await _fired(state, [denial], emit)
        return call, denial
    return ToolCall(call.id, call.name, arguments), None


async def guard_result(
    guards: Sequence[GuardrailBinding],
    result: ToolResult,
    state: RunState,
    emit: Emit | None = None,
) -> tuple[ToolResult, GuardrailRecord | None]:
    """The result as the model may see it (redacted), or an error result and the denial."""
    checked = await guard_text(
        guards, "toolResult", result.content, state, tool=result.name, emit=emit
    )
    if checked.denied is not None:
        denied = checked.denied
        return ToolResult(result.call_id, result.name, _error_text(denied), True), denied
    if checked.text == result.content:
        return result, None
    return ToolResult(result.call_id, result.name, checked.text, result.is_error), None


def refusal(record: GuardrailRecord, call: ToolCall) -> ToolResult:
    """The error result the model gets for a call a guardrail denied."""
    return ToolResult(call.id, call.name, _error_text(record), True)


# -- the four points, as the loop calls them ----------------------------------------------------


async def check_input(
    guards: Sequence[GuardrailBinding], config: RunConfig, state: RunState, emit: Emit
) -> str | None:
    """Screen the Task input (the user message) before the first model call; the violation
    message, or None with the user message replaced by what the guardrails left of it."""
    if not guards:
        return None
    checked = await guard_text(guards, "input", config.user_message, state, emit=emit)
    if checked.denied is not None:
        return fired_message(checked.denied)
    enforce_budget(config.token_budget, state)
    state.items[1] = UserMessage(checked.text)
    return None


async def check_output(
    guards: Sequence[GuardrailBinding], config: RunConfig, text: str, state: RunState, emit: Emit
) -> tuple[str, str | None]:
    """Screen the final answer (the last assistant message): the answer as the guardrails
    leave it (also in the transcript), and the violation message or None."""
    checked = await guard_text(guards, "output", text, state, emit=emit)
    if checked.denied is not None:
        return text, fired_message(checked.denied)
    enforce_budget(config.token_budget, state)
    state.items[-1] = AssistantMessage(checked.text, ())
    return checked.text, None


async def check_arguments(
    guards: Sequence[GuardrailBinding],
    call: ToolCall,
    config: RunConfig,
    state: RunState,
    emit: Emit,
) -> tuple[ToolCall, tuple[ToolCallRecord, ToolResult] | None]:
    """Screen an allowed call's arguments before it runs: the call as it may run (redacted),
    or the denial record and the error result the model gets instead."""
    call, blocked = await guard_arguments(guards, call, state, emit)
    if blocked is not None:
        reason = violation_reason(blocked)
        record = ToolCallRecord(state.step, call.name, "denied", reason, "skipped", call.id)
        return call, (record, refusal(blocked, call))
    enforce_budget(config.token_budget, state)
    return call, None


async def check_result(
    guards: Sequence[GuardrailBinding],
    record: ToolCallRecord,
    result: ToolResult,
    state: RunState,
    emit: Emit,
) -> tuple[ToolCallRecord, ToolResult, bool]:
    """Screen a tool's result before the model sees it: the record (its reason names the
    guardrail when one withheld the result), the result as the model may see it, and whether
    it was withheld. The caller records both, then calls `enforce_budget`."""
    result, withheld = await guard_result(guards, result, state, emit)
    if withheld is None:
        return record, result, False
    return dataclasses.replace(record, reason=violation_reason(withheld)), result, True
