"""The seam between the loop and tool executors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """A tool's answer as text for the model. `is_error` marks a failure the model should see."""

    content: str
    is_error: bool = False


class ToolExecutor(Protocol):
    """Runs one call of one tool. Raise ToolFailure for an error the model should see."""

    async def __call__(self, arguments: dict[str, Any]) -> ToolOutput: ...


class ToolFailure(Exception):
    """A tool call failed (non-2xx, timeout, connection refused). The message goes to the
    model as an error result, so it must not carry secrets."""


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
    """Built-in memory tools: never removed after use, not subject to Tool governance."""
    idempotent: bool = False
    timeout: float | None = None
