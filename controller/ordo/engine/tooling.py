"""The seam between the loop and tool executors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from ..api import Tool
from ..errors import ToolFailure
from .remote import RemoteTarget

__all__ = [
    "MAX_CAUSE_CHARS",
    "AgentTarget",
    "ResolvedTool",
    "ToolBinding",
    "ToolCallFailed",
    "ToolExecutor",
    "ToolFailure",
    "ToolOutput",
    "failure_cause",
]

MAX_CAUSE_CHARS = 128
"""`status.toolCalls[].error` is at most this long (the CRD's maxLength)."""


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """A tool's answer as text for the model. `is_error` marks a failure the model should see;
    `cause` is its sanitised kind for the audit trail (e.g. `MCP isError`), never content."""

    content: str
    is_error: bool = False
    cause: str | None = None


class ToolCallFailed(ToolFailure):
    """A ToolFailure that names its cause for the audit trail (`status.toolCalls[].error`,
    the `ToolFailed` Event, the log line): an exception class and an HTTP status at most,
    such as `HTTPStatus 503`, `ConnectError` or `Timeout`; never a URL, header or body."""

    def __init__(self, message: str, *, cause: str) -> None:
        super().__init__(message)
        self.cause = cause[:MAX_CAUSE_CHARS]


def failure_cause(exc: BaseException) -> str:
    """The sanitised cause of a failed call: the executor's own, else the exception type."""
    if isinstance(exc, ToolCallFailed):
        return exc.cause
    if isinstance(exc, TimeoutError):
        return "Timeout"
    return type(exc).__name__[:MAX_CAUSE_CHARS]


class ToolExecutor(Protocol):
    """Runs one call of one tool. Raise ToolFailure for an error the model should see."""

    async def __call__(self, arguments: dict[str, Any]) -> ToolOutput: ...


@dataclass(frozen=True, slots=True)
class AgentTarget:
    """What an `agent` Tool's call delegates to (engine/delegating.py)."""

    agent: str
    """The Agent each call runs as a child Task."""
    whole_arguments: bool = False
    """The Tool has its own input schema: the arguments object is the child's input (else
    the default schema's `input` string is)."""


@dataclass(frozen=True, slots=True)
class ToolBinding:
    """A tool the run can offer: the model-visible name, its schema and how to execute it."""

    name: str
    """Name the model sees (`[a-zA-Z0-9_-]{1,64}`)."""
    object_name: str
    """The Tool object's name (governance and status use this); for built-ins, `name`."""
    description: str
    parameters: dict[str, Any]
    executor: ToolExecutor
    builtin: bool = False
    """Built-in memory tools: never removed after use; governed as `memory_<op>` (see
    engine/governance.py)."""
    idempotent: bool = False
    timeout: float | None = None
    agent: AgentTarget | None = None
    """Set for an `agent` Tool: a call starts a child Task through the run's delegator
    instead of the executor (which answers that delegation is not available)."""
    remote: RemoteTarget | None = None
    """Set for an `a2a` Tool: a call is a task of a remote agent (engine/remotecalls.py)
    instead of the executor (which is then never called)."""


@dataclass(frozen=True)
class ResolvedTool:
    """A Tool object as resolved for one run: the object, the name the model sees and its
    Secret value (if any)."""

    tool: Tool
    model_name: str
    secret: str | None = None
