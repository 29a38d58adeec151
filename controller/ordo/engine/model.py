"""The seam between the loop and a model provider."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from .transcript import Item, ToolCall, Usage


@dataclass(frozen=True, slots=True)
class ToolDefinition:
    """A tool as offered to the model: name, description and JSON Schema of the arguments."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """One model call: the whole history and the tools still on offer."""

    items: tuple[Item, ...] | list[Item]
    tools: tuple[ToolDefinition, ...]
    output_schema: dict[str, Any] | None = None
    deadline: float | None = None
    """Loop-clock time by which the call must finish (the Task deadline)."""


@dataclass(frozen=True, slots=True)
class ModelResponse:
    """What the model answered: text, tool calls, usage."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
    finish_reason: str = ""


class ModelClient(Protocol):
    """A provider adapter. Raises ModelError (not retryable) or ModelUnavailable."""

    provider: str
    model: str

    async def complete(self, request: ModelRequest) -> ModelResponse: ...


class ModelCallError(Exception):
    """Base of the errors a model call ends in; messages never carry keys or content."""

    reason = "ModelError"


class ModelError(ModelCallError):
    """The provider rejected the request (4xx other than 429): retrying will not help."""

    reason = "ModelError"


class ModelUnavailable(ModelCallError):
    """429, 5xx or connection errors until retries or the deadline ran out."""

    reason = "ModelUnavailable"
