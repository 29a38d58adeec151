"""Where the step loop applies guardrails (engine/guardrails.py): the Task input before the
first model call, each allowed tool call's arguments before it runs, each result before the
model sees it, and the final answer before it is validated and written.

Every screening adds the judge's tokens to the run's usage and its records to the run state.
A denied tool call or result is answered with an error result naming the guardrail; whether
that ends the run is the policy's `onToolDenied`, as for a governance denial.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from .guardrails import GUARDRAIL_REASON, GuardrailBinding, GuardrailRecord, Screening, screen
from .jsontext import MAX_JSON_DEPTH, bounded_json_loads
from .state import RunState
from .transcript import ToolCall, ToolResult

__all__ = [
    "GUARDRAIL_REASON",
    "guard_arguments",
    "guard_result",
    "guard_text",
    "guards_output",
    "over_budget",
    "violation_message",
    "violation_reason",
]


async def guard_text(
    guards: Sequence[GuardrailBinding],
    point: str,
    text: str,
    state: RunState,
    *,
    tool: str | None = None,
) -> Screening:
    """Screen `text` at `point` and account for it in `state` (tokens, records)."""
    step = 0 if point == "input" else state.step
    checked = await screen(guards, point, text, step=step, tool=tool)  # type: ignore[arg-type]
    state.usage = state.usage + checked.usage
    state.guardrail_records.extend(checked.records)
    return checked


def over_budget(budget: int | None, state: RunState) -> str | None:
    """The status message when a judge's tokens took the run over its budget, else None."""
    if budget is None or state.usage.total_tokens <= budget:
        return None
    return f"used {state.usage.total_tokens} tokens (guardrail judges included), budget {budget}"


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


def violation_message(record: GuardrailRecord) -> str:
    """The status message of a violation: which guardrail, where; never the text."""
    where = _POINT_WORDS[record.point]
    if record.tool:
        where += f" {record.tool!r}"
    how = f" (it failed closed: {record.cause})" if record.cause else ""
    return f"guardrail {record.guardrail!r} denied {where} at step {record.step}{how}"


def violation_reason(record: GuardrailRecord) -> str:
    """`status.toolCalls[].reason` of a call a guardrail denied."""
    return f"{GUARDRAIL_REASON}: {record.guardrail} ({record.point})"


def _error_text(record: GuardrailRecord) -> str:
    subject = "call" if record.point == "toolArguments" else "result"
    return f"error: the tool {subject} was blocked by guardrail {record.guardrail!r}."


async def guard_arguments(
    guards: Sequence[GuardrailBinding], call: ToolCall, state: RunState
) -> tuple[ToolCall, GuardrailRecord | None]:
    """The call with its arguments as the guardrails leave them (redacted), or the denial. The
    guardrails see the arguments as compact JSON; a redaction that does not leave a JSON object
    denies (fail closed)."""
    text = json.dumps(call.arguments or {}, ensure_ascii=False, separators=(",", ":"))
    checked = await guard_text(guards, "toolArguments", text, state, tool=call.name)
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
        state.guardrail_records.append(denial)
        return call, denial
    return ToolCall(call.id, call.name, arguments), None


async def guard_result(
    guards: Sequence[GuardrailBinding], result: ToolResult, state: RunState
) -> tuple[ToolResult, GuardrailRecord | None]:
    """The result as the model may see it (redacted), or an error result and the denial."""
    checked = await guard_text(guards, "toolResult", result.content, state, tool=result.name)
    if checked.denied is not None:
        denied = checked.denied
        return ToolResult(result.call_id, result.name, _error_text(denied), True), denied
    if checked.text == result.content:
        return result, None
    return ToolResult(result.call_id, result.name, checked.text, result.is_error), None


def refusal(record: GuardrailRecord, call: ToolCall) -> ToolResult:
    """The error result the model gets for a call a guardrail denied."""
    return ToolResult(call.id, call.name, _error_text(record), True)
