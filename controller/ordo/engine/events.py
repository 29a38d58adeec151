"""The one event stream out of the engine.

Status writers, metrics, logs and `ordo run`'s live view are listeners; none of them steers
the run. Events carry names, counts and decisions, never prompts, arguments or results; the
Checkpoint event carries the run state so that a listener can persist it.

Tool names in events are names of tools the run offers (its Tools and memory operations) or
`NOT_OFFERED_TOOL`: a name the model invented is model output, and it never reaches a metric
label, a span, an Event or a log line through an event (the series and the text a model could
otherwise fill at will). Only the run state (`status.toolCalls[]`, the checkpoint) keeps it.
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

from .transcript import Usage

NOT_OFFERED_TOOL = "<not-offered>"
"""What events (and so metrics, spans, Events and logs) say instead of a tool name that no tool
of the run offers."""


def public_tool_name(name: str, offered: Container[str]) -> str:
    """`name` if the run offers a tool of that name, else NOT_OFFERED_TOOL."""
    return name if name in offered else NOT_OFFERED_TOOL


if TYPE_CHECKING:
    from .guardrails import GuardrailRecord
    from .state import RunResult, RunState, ToolCallRecord


@dataclass(frozen=True, slots=True)
class RunStarted:
    resumed_from_step: int


@dataclass(frozen=True, slots=True)
class StepStarted:
    step: int


@dataclass(frozen=True, slots=True)
class ModelResponded:
    step: int
    usage: Usage
    tool_calls: int
    duration: float
    finish_reason: str = ""
    response_model: str = ""
    """The model that answered, as the provider reported it (empty when it did not)."""


@dataclass(frozen=True, slots=True)
class ToolDecided:
    """A decision on one call. `offered` says whether the run binds a tool of the record's
    name; when it does not, the event's record names NOT_OFFERED_TOOL (the run state keeps the
    model's name)."""

    record: ToolCallRecord
    offered: bool

    def __post_init__(self) -> None:
        if not self.offered and self.record.tool != NOT_OFFERED_TOOL:
            object.__setattr__(self, "record", replace(self.record, tool=NOT_OFFERED_TOOL))


@dataclass(frozen=True, slots=True)
class ToolRuleEvaluated:
    """An AgentPolicy tool rule evaluated on a call (engine/toolrules.py): the policy and
    rule names (objects), the rule's action and mode, and `matched`, `notMatched` or
    `error`; never the arguments."""

    policy: str
    rule: str
    action: str
    mode: str
    result: str


@dataclass(frozen=True, slots=True)
class ToolFinished:
    step: int
    tool: str
    outcome: str
    duration: float
    call_id: str = ""
    cause: str | None = None
    """Why a call that ran failed, sanitised (as ToolCallRecord.error)."""


@dataclass(frozen=True, slots=True)
class GuardrailFired:
    """A guardrail denied or redacted a text (engine/guardsteps.py); the record names the
    guardrail, the point, the tool and a fail-closed cause, never the text."""

    record: GuardrailRecord


@dataclass(frozen=True, slots=True)
class StepFinished:
    state: RunState


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """Persist `state` before continuing: emitted before a non-idempotent tool starts and at
    the end of every step. A listener that stores it makes restart-resume possible."""

    state: RunState


@dataclass(frozen=True, slots=True)
class RunFinished:
    result: RunResult


Event = (
    RunStarted
    | StepStarted
    | ModelResponded
    | ToolDecided
    | ToolRuleEvaluated
    | ToolFinished
    | GuardrailFired
    | StepFinished
    | Checkpoint
    | RunFinished
)


class Listener(Protocol):
    async def __call__(self, event: Event) -> None: ...
