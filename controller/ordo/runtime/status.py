"""The one place where a run's results become Task status: built from, and validated by, the
`api` TaskStatus model, with every string capped to its CRD length so a status write can never
be refused by the API server (a refused terminal write would leave the Task `Running`)."""

from __future__ import annotations

import hashlib
from typing import Any, cast

from ..api.guardrail import MAX_GUARDRAIL_RECORDS, GuardrailRecord
from ..api.task import (
    MAX_OUTPUT_CHARS,
    MAX_TOOL_CALL_RECORDS,
    Phase,
    Reason,
    TaskStatus,
    ToolCallRecord,
    ToolOutcome,
    Usage,
)
from ..engine.state import RunState
from ..engine.state import ToolCallRecord as EngineRecord
from ..engine.transcript import Usage as EngineUsage

MAX_MESSAGE_CHARS = 4096
MAX_TOOL_NAME_CHARS = 128
MAX_RECORD_REASON_CHARS = 1024
MAX_CALL_ID_CHARS = 256
TRUNCATION_MARKER = "…"


def cap(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters, ending in a marker when it was cut; lone
    surrogates (which JSON cannot carry to the API server) are replaced."""
    if len(text) > limit:
        text = text[: limit - len(TRUNCATION_MARKER)] + TRUNCATION_MARKER
    return text.encode("utf-8", "replace").decode("utf-8") if _has_surrogate(text) else text


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def capped_name(name: str) -> str:
    """A model-chosen tool name as it may appear in status: at most 128 characters; a longer
    one keeps a prefix and a short hash so distinct names stay distinct."""
    if len(name) <= MAX_TOOL_NAME_CHARS and not _has_surrogate(name):
        return name
    digest = hashlib.sha256(name.encode("utf-8", "replace")).hexdigest()[:8]
    return cap(name, MAX_TOOL_NAME_CHARS - 10) + f"-{digest}"


def usage_model(usage: EngineUsage) -> Usage:
    return Usage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        total_tokens=usage.total_tokens,
    )


def record_model(record: EngineRecord) -> ToolCallRecord:
    """The engine's record as the API's, every string within its CRD length."""
    return ToolCallRecord(
        step=max(1, record.step),
        tool=capped_name(record.tool) or "(empty)",
        decision=record.decision,
        reason=cap(record.reason, MAX_RECORD_REASON_CHARS) if record.reason else None,
        outcome=cast(ToolOutcome, record.outcome) if record.outcome else None,
        call_id=cap(record.call_id, MAX_CALL_ID_CHARS) if record.call_id else None,
        error=cap(record.error, 128) if record.error else None,  # the CRD maxLength
    )


def progress(state: RunState) -> TaskStatus:
    """`step`, `usage` and the bounded `toolCalls` of a run."""
    records = state.records[-MAX_TOOL_CALL_RECORDS:]
    return TaskStatus(
        step=state.step,
        usage=usage_model(state.usage),
        tool_calls=[record_model(r) for r in records] if records else None,
        tool_calls_truncated=True if len(state.records) > MAX_TOOL_CALL_RECORDS else None,
        guardrails=guardrail_models(state),
    )


def guardrail_models(state: RunState) -> list[GuardrailRecord] | None:
    """The newest guardrail records as the API's (names and points only, never text)."""
    records = state.guardrail_records[-MAX_GUARDRAIL_RECORDS:]
    return [
        GuardrailRecord(
            step=r.step,
            point=r.point,
            guardrail=cap(r.guardrail, 253),
            action=r.action,
            tool=capped_name(r.tool) if r.tool else None,
            cause=cap(r.cause, 128) if r.cause else None,
        )
        for r in records
    ] or None


def terminal(
    phase: Phase,
    reason: Reason,
    message: str,
    *,
    state: RunState | None = None,
    output: str = "",
    structured_output: dict[str, Any] | None = None,
    snapshot_hash: str | None = None,
    agent_generation: int | None = None,
) -> TaskStatus:
    """The terminal status fields of a run (the operator adds conditions and timestamps)."""
    fields: dict[str, Any] = {}
    if state is not None:
        fields = progress(state).model_dump(exclude_none=True)
    else:
        fields = {"step": 0, "usage": Usage(input_tokens=0, output_tokens=0, total_tokens=0)}
    if output:
        fields["output"] = cap(output, MAX_OUTPUT_CHARS)
        if len(output) > MAX_OUTPUT_CHARS:
            fields["output_truncated"] = True
    return TaskStatus(
        phase=phase,
        reason=reason,
        message=cap(message, MAX_MESSAGE_CHARS),
        structured_output=structured_output,
        snapshot_hash=snapshot_hash,
        agent_generation=agent_generation,
        **fields,
    )


def to_patch(status: TaskStatus) -> dict[str, Any]:
    """The status as a merge-patch body: camelCase, only the fields that are set."""
    return status.model_dump(by_alias=True, exclude_none=True, mode="json")
