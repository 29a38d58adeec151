"""Task: one run of an Agent, and its status contract (DESIGN §5)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, GetCoreSchemaHandler, field_validator

# The reasons, phases and usage of a Task have homes of their own (ordo/reasons.py, phases.py,
# usage.py); importing them from here keeps working.
from ..reasons import REASONS as REASONS
from ..reasons import Reason as Reason
from .base import (
    CelRule,
    Condition,
    JsonObject,
    JsonValue,
    Name,
    OrdoModel,
    PositiveDuration,
    Resource,
)
from .guardrail import MAX_GUARDRAIL_RECORDS, GuardrailRecord
from .jsonschemas import user_schema
from .phases import TERMINAL_PHASES as TERMINAL_PHASES
from .phases import Phase as Phase
from .phases import RunPhase as RunPhase
from .phases import TerminalPhase as TerminalPhase
from .records import status_record
from .toolapproval import MAX_APPROVER_CHARS, MAX_REQUIRED_APPROVALS
from .usage import Usage as Usage
from .waits import MAX_CHILDREN, MAX_PENDING_APPROVALS, ChildTaskStatus, PendingApprovalStatus

ToolDecision = Literal["allowed", "denied", "rejected"]
ToolOutcome = Literal["succeeded", "error", "skipped", "interrupted"]

MAX_OUTPUT_CHARS = 32768
MAX_TOOL_CALL_RECORDS = 100
REQUESTER_ANNOTATION = "ordo.dev/requested-by"
"""Who created the Task: the chart's ValidatingAdmissionPolicy lets only the creating user set
it (and nobody change it), so approvals can exclude the requester (docs/governance.md)."""


class TaskLimits(OrdoModel):
    """Limits that may only narrow the Agent's (the smaller value wins)."""

    max_steps: Annotated[int, Field(ge=1, le=1000)] | None = None
    """Most model calls."""
    timeout: PositiveDuration | None = None
    """Deadline of the run (the Agent's, when that is shorter)."""
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    """Token budget."""


class TaskSpec(OrdoModel):
    """Desired state of a Task. Immutable after creation, except `cancel` and
    `ttlSecondsAfterFinished` (the API server
    enforces it for every field but `input`, whose untyped value CEL cannot compare; the
    operator runs the input it read when it claimed the Task)."""

    agent_ref: Name | None = None
    """The Agent to run (exactly one of `agentRef` and `teamRef`)."""
    team_ref: Name | None = None
    """The Team to run instead of one Agent (docs/concepts.md#teams): its members run as child
    Tasks; `skill`, `instructions` and `limits.maxSteps` are then not allowed."""
    input: JsonValue | None = None
    """String or object: the user input, as text or as a JSON object (the schema cannot say
    both, so `kubectl explain` shows `<Object>`). Edits after creation are accepted but have
    no effect: a run uses the input it read when it claimed the Task."""
    instructions: Annotated[str, Field(max_length=65536)] | None = None
    """Extra instructions appended to the user message."""
    skill: Annotated[str, Field(min_length=1, max_length=63)] | None = None
    """A skill of the Agent to narrow the run to."""
    output_schema: JsonObject | None = None
    """JSON Schema of the answer; overrides the Agent's."""
    limits: TaskLimits | None = None
    """Narrower limits for this run."""
    idempotency_key: Annotated[str, Field(min_length=1, max_length=253)] | None = None
    """A second Task in the namespace with the same key fails with `DuplicateExecution`."""
    cancel: bool = False
    """Set to true to stop the run at the next step boundary (phase `Cancelled`)."""
    ttl_seconds_after_finished: Annotated[int, Field(ge=0, le=2147483647)] | None = None
    """Seconds after `status.completedAt` at which the operator deletes the finished Task and
    what it owns (its checkpoint ConfigMap, Lease, Job); 0 deletes it as soon as it ends.
    Unset: the operator's `--task-ttl` (default: keep). May be changed at any time (as a
    Job's): the Task is re-evaluated."""

    _check_output_schema = field_validator("output_schema")(user_schema)

    cel_rules: ClassVar[tuple[CelRule, ...]] = (
        CelRule(
            rule="has(self.agentRef) != has(self.teamRef)",
            message="exactly one of spec.agentRef and spec.teamRef must be set",
            check=lambda s: (s.agent_ref is None) != (s.team_ref is None),
        ),
        CelRule(
            rule="!has(self.teamRef) || (!has(self.skill) && !has(self.instructions) && "
            "!(has(self.limits) && has(self.limits.maxSteps)))",
            message="spec.teamRef does not allow skill, instructions or limits.maxSteps",
            check=lambda s: (
                s.team_ref is None
                or (
                    s.skill is None
                    and s.instructions is None
                    and not (s.limits and s.limits.max_steps)
                )
            ),
        ),
    )

    @property
    def runs(self) -> str:
        """What the Task runs, for messages and labels: `agent NAME` or `team NAME`."""
        return f"team {self.team_ref}" if self.team_ref is not None else f"agent {self.agent_ref}"


IMMUTABLE_TASK_FIELDS = (
    "agentRef",
    "teamRef",
    "input",
    "instructions",
    "skill",
    "outputSchema",
    "limits",
    "idempotencyKey",
)


CEL_INVISIBLE_TASK_FIELDS = ("input",)
"""Immutable fields a CEL rule cannot read: `input` is string-or-object, so its schema has no
`type`, and kube-apiserver refuses a rule that names it (`undefined field 'input'`). The
operator enforces these: it snapshots them when it claims the Task."""


def _immutable_rule() -> str:
    parts = []
    for f in IMMUTABLE_TASK_FIELDS:
        if f in CEL_INVISIBLE_TASK_FIELDS:
            continue
        parts.append(f"(has(self.{f}) == has(oldSelf.{f}))")
        parts.append(f"(!has(self.{f}) || self.{f} == oldSelf.{f})")
    return " && ".join(parts)


TASK_SPEC_IMMUTABLE = CelRule(
    rule=_immutable_rule(),
    message="Task spec is immutable after creation, except spec.cancel and "
    "spec.ttlSecondsAfterFinished",
    check=None,
)


@dataclass(frozen=True, slots=True)
class ToolCallRecord:
    """One governance decision on a tool call the model asked for (never arguments or
    results): the engine keeps it in the run state (`to_dict` is its checkpoint form) and
    `status.toolCalls[]` shows it (`_ToolCallFields`, each string capped by
    runtime/status.py)."""

    step: int
    tool: str
    decision: ToolDecision
    reason: str
    """Empty when there is none (not shown in the status)."""
    outcome: ToolOutcome | None = None
    call_id: str | None = None
    error: str | None = None
    """Why an allowed call failed, sanitised (`HTTPStatus 503`, `ConnectError`, `Timeout`)."""
    tool_object: str | None = None
    """The Tool object the name was bound to in this run; None for a built-in or a name
    bound to nothing."""
    builtin: bool = False
    """The name is a built-in tool's (`memory_<op>`), which no Tool object may have."""
    approved_by: tuple[str, ...] = ()
    """Who approved the call (ToolApprovals' `spec.approvedBy`, user names only)."""
    _given: frozenset[str] | None = field(default=None, init=False, compare=False, repr=False)
    """The status fields it was read with; None: ordo built it (api/records.py)."""

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "step": self.step,
            "tool": self.tool,
            "decision": self.decision,
            "reason": self.reason,
        }
        if self.outcome:
            d["outcome"] = self.outcome
        if self.call_id:
            d["callId"] = self.call_id
        if self.error:
            d["error"] = self.error
        if self.tool_object:
            d["toolObject"] = self.tool_object
        if self.builtin:
            d["builtin"] = True
        if self.approved_by:
            d["approvedBy"] = list(self.approved_by)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ToolCallRecord:
        return cls(
            d["step"],
            d["tool"],
            d["decision"],
            d.get("reason", ""),
            d.get("outcome"),
            d.get("callId"),
            d.get("error"),
            d.get("toolObject"),
            bool(d.get("builtin", False)),
            tuple(str(a) for a in d.get("approvedBy") or ()),
        )

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> Any:  # pydantic_core's CoreSchema (pydantic_core is not a declared dependency)
        return status_record(handler, cls, _ToolCallFields, _tool_call, _tool_call_shown)


class _ToolCallFields(OrdoModel):
    """One governance decision (never arguments or results)."""

    step: Annotated[int, Field(ge=1)]
    """Step (model call) that requested the tool."""
    tool: Annotated[str, Field(max_length=128)]
    """The name the model used."""
    tool_object: Annotated[str, Field(max_length=253)] | None = None
    """The Tool object that name was bound to in this run (the model sees a Tool `web.search`
    as `web_search`); unset for a built-in tool and for a name bound to nothing."""
    builtin: bool | None = None
    """`true` when `tool` is a built-in memory tool (`memory_<op>`): no Tool object may be
    named in the built-in namespace (`memory.*`), so such a record is never a Tool's call."""
    decision: ToolDecision
    """`allowed`; `denied` by governance; or `rejected` by the loop (duplicate in one response,
    already called in an earlier step, invalid arguments): a rejected call never runs."""
    reason: Annotated[str, Field(max_length=1024)] | None = None
    """Why, e.g. `NotOffered`, `BlockedByPolicy: strict`, `MissingPermission: tool:x:invoke`."""
    outcome: ToolOutcome | None = None
    """What happened after the decision."""
    call_id: Annotated[str, Field(max_length=256)] | None = None
    """The provider's call id."""
    error: Annotated[str, Field(max_length=128)] | None = None
    """Why an allowed call failed: the kind only, e.g. `HTTPStatus 503`, `ConnectError`,
    `Timeout` (never a URL, arguments or the response)."""
    approved_by: (
        Annotated[
            list[Annotated[str, Field(max_length=MAX_APPROVER_CHARS)]],
            Field(max_length=MAX_REQUIRED_APPROVALS),
        ]
        | None
    ) = None
    """Who approved the call: the `spec.approvedBy` of the ToolApprovals that counted (user
    names as the API server authenticated them; see docs/governance.md)."""


def _tool_call(f: _ToolCallFields) -> ToolCallRecord:
    return ToolCallRecord(
        f.step,
        f.tool,
        f.decision,
        f.reason or "",
        f.outcome,
        f.call_id,
        f.error,
        f.tool_object,
        bool(f.builtin),
        tuple(f.approved_by or ()),
    )


def _tool_call_shown(r: ToolCallRecord) -> dict[str, Any]:
    """The status fields (what is empty is unset)."""
    return {
        "step": r.step,
        "tool": r.tool,
        "toolObject": r.tool_object or None,
        "builtin": True if r.builtin else None,
        "decision": r.decision,
        "reason": r.reason or None,
        "outcome": r.outcome or None,
        "callId": r.call_id or None,
        "error": r.error or None,
        "approvedBy": list(r.approved_by) or None,
    }


class TaskLease(OrdoModel):
    """The execution lease of a running Task, kept in its status: which process runs it, and
    until when others must not take it over (while the holder's process Lease is renewed,
    with `holderLease`; else until `renewTime` + `durationSeconds`)."""

    holder: Annotated[str, Field(max_length=253)]
    """The process that holds it: an operator (`<hostname>-<random>`) or a Job pod's name."""
    renew_time: str
    """When the holder last renewed it (RFC 3339, microseconds; the holder's clock)."""
    duration_seconds: Annotated[int, Field(ge=0)]
    """Another process may take the Task over `durationSeconds` after `renewTime`; 0 means
    released. With `holderLease`, the holder does not renew it here: it is how long a
    process that does not read process Leases (an ordo before them) must wait."""
    holder_lease: Annotated[str, Field(max_length=317)] | None = None
    """`<namespace>/<name>` of the holder's `coordination.k8s.io` Lease, one per operator
    process: while that Lease is renewed the holder is alive and keeps the Task; absent for a
    holder that renews `renewTime` itself (a Job pod, or an operator on a CRD without this
    field)."""


class TaskStatus(OrdoModel):
    """Observed state of a Task (the status contract)."""

    phase: Phase | None = None
    """Pending, Running, Succeeded, Failed or Cancelled."""
    reason: Reason | None = None
    """Stable CamelCase reason of the terminal phase (see docs/reasons.md)."""
    message: Annotated[str, Field(max_length=4096)] | None = None
    """Sanitised explanation; never secrets, prompts, tool arguments or results."""
    conditions: list[Condition] | None = None
    """`Scheduled`, `Running`, `Ready` (kstatus), and at the end `Complete` or `Failed` (as a
    Job has them; `kubectl wait --for=condition=Complete|Failed`), `Stalled` on failure,
    `Succeeded`."""
    execution_id: Annotated[str, Field(max_length=64)] | None = None
    """Id of the execution that claimed the Task."""
    worker_losses: Annotated[int, Field(ge=0)] | None = None
    """Times an operator worker process was lost (killed for a stall, or died) while running
    the Task; at the second the Task ends `WorkerLost` instead of being resumed again."""
    checkpoint_sequence: Annotated[int, Field(ge=0)] | None = None
    """Sequence number of the sealed checkpoint written before the last tool call with side
    effects (or before the run waited for approvals): a resumed run refuses an older one
    (`CheckpointUntrusted`), so a restored copy cannot make that call run again."""
    agent_generation: Annotated[int, Field(ge=0)] | None = None
    """The Agent's metadata.generation at resolution."""
    snapshot_hash: Annotated[str, Field(max_length=128)] | None = None
    """Content hash of the resolved objects the run uses."""
    started_at: str | None = None
    """When the Task was claimed (RFC 3339)."""
    completed_at: str | None = None
    """When the Task became terminal (RFC 3339)."""
    step: Annotated[int, Field(ge=0)] | None = None
    """Model calls completed."""
    output: Annotated[str, Field(max_length=MAX_OUTPUT_CHARS + 64)] | None = None
    """The final (or, on MaxStepsExceeded, the last partial) answer, capped."""
    output_truncated: bool | None = None
    """True when `output` was cut to the cap (or to fit the status's size), or
    `structuredOutput` was left out for its size."""
    structured_output: JsonObject | None = None
    """The answer parsed as JSON when an output schema applies; at most 131,072 bytes as JSON
    (a larger valid answer fails `InvalidOutput`)."""
    usage: Usage | None = None
    """Token usage."""
    tool_calls: Annotated[list[ToolCallRecord], Field(max_length=MAX_TOOL_CALL_RECORDS)] | None = (
        None
    )
    """Governance decisions, oldest first, capped."""
    tool_calls_truncated: bool | None = None
    """True when older records were dropped from `toolCalls`."""
    guardrails: Annotated[list[GuardrailRecord], Field(max_length=MAX_GUARDRAIL_RECORDS)] | None = (
        None
    )
    """Guardrails that fired (redacted or denied): where, which, never the text; capped."""
    observed_generation: Annotated[int, Field(ge=0)] | None = None
    """The .metadata.generation this status describes."""
    execution_mode: Literal["InProcess", "Job"] | None = None
    """Where the run executes: `InProcess` (the operator's process) or `Job` (the batch/v1
    Job `ordo-task-<uid>`); written when the Task is claimed."""
    pending_approvals: (
        Annotated[list[PendingApprovalStatus], Field(max_length=MAX_PENDING_APPROVALS)] | None
    ) = None
    """Tool calls waiting for a human decision while condition `AwaitingApproval` is True."""
    children: Annotated[list[ChildTaskStatus], Field(max_length=MAX_CHILDREN)] | None = None
    """The child Tasks this Task started (docs/concepts.md#trees), while they run and after."""
    lease: TaskLease | None = None
    """The execution lease while the Task runs (renewed every third of its duration)."""
    trace_id: Annotated[str, Field(pattern=r"^[0-9a-f]{32}$")] | None = None
    """The OpenTelemetry trace of the run (W3C trace id; the trace of the Task's
    `ordo.dev/traceparent` annotation when it has one); the run's log lines carry it too."""


class Task(Resource):
    """One agent run."""

    kind: Literal["Task"] = "Task"
    spec: TaskSpec
    status: TaskStatus | None = None

    def input_text(self) -> str:
        value: Any = self.spec.input
        if value is None:
            return ""
        if isinstance(value, str):
            return value
        import json

        return json.dumps(value, sort_keys=True)
