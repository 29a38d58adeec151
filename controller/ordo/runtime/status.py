"""The one place where a run's results become Task status: built from, and validated by, the
`api` TaskStatus model, with every string capped to its CRD length and every status write
within `MAX_STATUS_BYTES` (engine/jsonsize.py's measure, an upper bound of what is sent and
what etcd stores), so the API server never refuses one for its content or its size (a refused
terminal write would leave the Task `Running`). The per-field caps alone do not add up to
that total (100 tool-call records of model-chosen names and ids in 12-byte characters come
to more than 1 MB), so `bounded` enforces it; `reduced` is the terminal status that must land
when the API server refuses even that (a Task whose spec leaves little room)."""

from __future__ import annotations

import hashlib
import math
from typing import Any, cast

from ..api.guardrail import MAX_GUARDRAIL_RECORDS, GuardrailRecord
from ..api.phases import TerminalPhase
from ..api.task import (
    MAX_OUTPUT_CHARS,
    MAX_TOOL_CALL_RECORDS,
    Reason,
    TaskStatus,
    ToolCallRecord,
    ToolOutcome,
)
from ..api.toolapproval import MAX_APPROVER_CHARS
from ..api.usage import Usage
from ..api.waits import (
    MAX_CHILDREN,
    MAX_PENDING_APPROVALS,
    ChildTaskStatus,
    PendingApprovalStatus,
)
from ..engine.jsonsize import MAX_STRUCTURED_OUTPUT_BYTES, json_size
from ..engine.state import RunState
from ..engine.state import ToolCallRecord as EngineRecord
from ..timestamps import format_seconds

MAX_MESSAGE_CHARS = 4096
MAX_TOOL_NAME_CHARS = 128
MAX_RECORD_REASON_CHARS = 1024
MAX_CALL_ID_CHARS = 256
TRUNCATION_MARKER = "…"
MAX_STATUS_BYTES = 524_288
"""Most bytes (engine/jsonsize.py) of a status write the operator builds: a third of etcd's
1.5 MiB request limit, leaving the rest for the Task's spec and metadata."""
REDUCED_MESSAGE_CHARS = 512
REDUCED_NOTE = (
    " (status reduced: the API server refused the full status for its size; toolCalls, "
    "guardrails, output and structuredOutput are omitted)"
)


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


def record_model(record: EngineRecord) -> ToolCallRecord:
    """The engine's record as the status shows it, every string within its CRD length."""
    return ToolCallRecord(
        step=max(1, record.step),
        tool=capped_name(record.tool) or "(empty)",
        decision=record.decision,
        reason=cap(record.reason, MAX_RECORD_REASON_CHARS) if record.reason else "",
        outcome=_outcome(record.outcome),
        call_id=cap(record.call_id, MAX_CALL_ID_CHARS) if record.call_id else None,
        error=cap(record.error, 128) if record.error else None,  # the CRD maxLength
        tool_object=record.tool_object,  # an object name: at most 253 characters already
        builtin=record.builtin,
        approved_by=tuple(cap(a, MAX_APPROVER_CHARS) for a in record.approved_by),
    )


def _outcome(outcome: str | None) -> ToolOutcome | None:
    """The record's outcome (TaskStatus validates it is one of `ToolOutcome`)."""
    return cast(ToolOutcome, outcome) if outcome else None


def progress(state: RunState) -> TaskStatus:
    """`step`, `usage` and the bounded `toolCalls` of a run."""
    records = state.records[-MAX_TOOL_CALL_RECORDS:]
    return TaskStatus(
        step=state.step,
        usage=state.usage,
        tool_calls=[record_model(r) for r in records] if records else None,
        tool_calls_truncated=True if len(state.records) > MAX_TOOL_CALL_RECORDS else None,
        guardrails=guardrail_models(state),
        children=children_status(state) or None,
    )


def children_status(state: RunState) -> list[ChildTaskStatus]:
    """The child Tasks the run started, as `status.children` (the oldest `MAX_CHILDREN`):
    names, Agents, phases, reasons and tokens, never input or output."""
    return [
        ChildTaskStatus(
            name=c.name,
            agent=c.agent,
            call_id=cap(c.key, MAX_CALL_ID_CHARS) if c.member is None else None,
            member=c.member,
            phase=c.phase,
            reason=c.reason,
            awaiting_approval=True if c.awaiting_approval and not c.ended else None,
            tokens=max(c.tokens, 0),
        )
        for c in list(state.children.values())[:MAX_CHILDREN]
    ]


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


def pending_approvals(state: RunState) -> list[PendingApprovalStatus]:
    """The calls a stopped run waits for, as `status.pendingApprovals` (ids, tools, steps and
    times, never arguments): the first `MAX_PENDING_APPROVALS`, timestamps in whole seconds,
    the deadline rounded up (the gate must never see a call time out before the run does) and
    absent when the call never times out."""
    return [
        PendingApprovalStatus(
            call_id=cap(p.call_id, MAX_CALL_ID_CHARS),
            tool=capped_name(p.tool),
            step=max(p.step, 1),
            requested_at=format_seconds(p.requested_at),
            deadline=None if math.isinf(p.deadline) else format_seconds(math.ceil(p.deadline)),
            required_approvals=p.approvals if p.approvals > 1 else None,
            requester_excluded=True if p.requester_excluded else None,
        )
        for p in list(state.approvals.values())[:MAX_PENDING_APPROVALS]
    ]


def terminal(
    phase: TerminalPhase,
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
        fields = {"step": 0, "usage": Usage()}
    if output:
        fields["output"] = cap(output, MAX_OUTPUT_CHARS)
        if len(output) > MAX_OUTPUT_CHARS:
            fields["output_truncated"] = True
    if (
        structured_output is not None
        and json_size(structured_output, MAX_STRUCTURED_OUTPUT_BYTES) > MAX_STRUCTURED_OUTPUT_BYTES
    ):  # the engine fails such an answer `InvalidOutput`; never carried whatever the caller
        structured_output = None
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


_MARGIN = 128
"""Bytes kept free for the flags `bounded` adds (`outputTruncated`, `toolCallsTruncated`)."""
_RECORDS = ("toolCalls", "guardrails")


def bounded(fields: dict[str, Any], limit: int = MAX_STATUS_BYTES) -> dict[str, Any]:
    """`fields` (a status patch, camelCase) within `limit` bytes; `fields` itself when it fits.
    Otherwise what must land stays whole (phase, reason, message, step, usage, conditions,
    timestamps: some 120 KB at most by their caps), then `structuredOutput` whole or not at
    all, then the newest `toolCalls` and `guardrails` records, with at least half the room
    left if `output` needs it, then `output` cut to what remains; each cut is flagged."""
    if json_size(fields, limit) <= limit:
        return fields
    out = {k: v for k, v in fields.items() if k not in (*_RECORDS, "output", "structuredOutput")}
    room = limit - _MARGIN - json_size(out, limit)
    structured = fields.get("structuredOutput")
    if structured is not None:
        cost = _member_size("structuredOutput", structured, room)
        if cost <= room:
            out["structuredOutput"] = structured
            room -= cost
        else:
            out["outputTruncated"] = True
    output = fields.get("output")
    output_cost = _member_size("output", output, limit) if output is not None else 0
    for key in _RECORDS:
        records = fields.get(key)
        if records:
            kept, used = _newest(key, records, max(room - output_cost, room // 2))
            out[key] = kept
            room -= used
            if len(kept or ()) < len(records) and key == "toolCalls":
                out["toolCallsTruncated"] = True
    if output is not None:
        text = _fit_text(output, room - len("output") - 6)
        out["output"] = text
        if text != output:
            out["outputTruncated"] = True
    if json_size(out, limit) > limit:  # by construction never; the bound holds regardless
        out.update({k: None for k in (*_RECORDS, "output", "structuredOutput")})
    return out


def _member_size(key: str, value: Any, limit: int) -> int:
    """Bytes `"key": value, ` adds to an object."""
    return json_size(value, limit) + len(key) + 6


def _newest(key: str, records: list[Any], room: int) -> tuple[list[Any] | None, int]:
    """The newest records whose member `"key": [...]` fits in `room`, and the bytes used."""
    used = len(key) + 8  # the key, its quotes and separators, the brackets
    kept: list[Any] = []
    for record in reversed(records):
        cost = json_size(record, room) + 2
        if used + cost > room:
            break
        kept.append(record)
        used += cost
    if not kept:
        return None, 0
    kept.reverse()
    return kept, used


def _fit_text(text: str, room: int) -> str | None:
    """`text`, or its longest capped prefix (ending in the marker) of at most `room` bytes."""
    if json_size(text, room) <= room:
        return text
    low, high = 0, len(text)  # the longest prefix that fits is in [low, high)
    while high - low > 1:
        middle = (low + high) // 2
        if json_size(cap(text, middle), room) <= room:
            low = middle
        else:
            high = middle
    return cap(text, low) if low > len(TRUNCATION_MARKER) else None


def reduced(fields: dict[str, Any]) -> dict[str, Any]:
    """The terminal status that must land when the API server refused `fields` for its size:
    phase, reason, step, usage and the timestamps; the message capped and saying so; the
    large fields set to null, which removes them from the stored status (kube-apiserver
    prunes nulls), also what earlier progress writes stored. The caller adds conditions."""
    keep = (
        "phase",
        "reason",
        "step",
        "usage",
        "startedAt",
        "completedAt",
        "observedGeneration",
        "agentGeneration",
        "snapshotHash",
        "traceId",
    )
    out: dict[str, Any] = {k: fields[k] for k in keep if k in fields}
    out["message"] = cap(fields.get("message") or "", REDUCED_MESSAGE_CHARS) + REDUCED_NOTE
    out.update({k: None for k in (*_RECORDS, "output", "structuredOutput")})
    if fields.get("output") is not None or fields.get("structuredOutput") is not None:
        out["outputTruncated"] = True
    if fields.get("toolCalls"):
        out["toolCallsTruncated"] = True
    return out
