"""The seam between the loop and a model provider."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from ..errors import ModelCallError, ModelError, ModelUnavailable
from .transcript import Item, ToolCall, Usage

__all__ = [
    "ModelCallError",
    "ModelClient",
    "ModelError",
    "ModelRequest",
    "ModelResponse",
    "ModelUnavailable",
    "ToolDefinition",
]


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
    response_model: str = ""
    """The model name the provider reports in its answer (traces only; may be empty)."""


class ModelClient(Protocol):
    """A provider adapter. Raises ModelError (not retryable) or ModelUnavailable."""

    provider: str
    model: str

    async def complete(self, request: ModelRequest) -> ModelResponse: ...
