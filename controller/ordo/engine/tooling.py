"""The seam between the loop and tool executors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from ..api import Tool
from ..errors import ToolFailure

__all__ = ["ResolvedTool", "ToolBinding", "ToolExecutor", "ToolFailure", "ToolOutput"]


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """A tool's answer as text for the model. `is_error` marks a failure the model should see."""

    content: str
    is_error: bool = False


class ToolExecutor(Protocol):
    """Runs one call of one tool. Raise ToolFailure for an error the model should see."""

    async def __call__(self, arguments: dict[str, Any]) -> ToolOutput: ...


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


@dataclass(frozen=True)
class ResolvedTool:
    """A Tool object as resolved for one run: the object, the name the model sees and its
    Secret value (if any)."""

    tool: Tool
    model_name: str
    secret: str | None = None
