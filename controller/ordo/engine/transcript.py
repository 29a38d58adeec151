"""The provider-neutral transcript: ordo's own typed history items.

Each provider maps these to and from its wire format at the edge. The transcript is also the
checkpoint a restarted operator resumes from, so every item round-trips through `to_dict`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ..api.usage import Usage as Usage  # one record for a call, a run and `status.usage`


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call the model asked for. `arguments` is None when `raw_arguments` did not parse."""

    id: str
    name: str
    arguments: dict[str, Any] | None
    raw_arguments: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "arguments": self.arguments,
            "raw": self.raw_arguments,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ToolCall:
        return cls(d["id"], d["name"], d.get("arguments"), d.get("raw", ""))


@dataclass(frozen=True, slots=True)
class SystemMessage:
    text: str
    role: Literal["system"] = "system"


@dataclass(frozen=True, slots=True)
class UserMessage:
    text: str
    role: Literal["user"] = "user"


@dataclass(frozen=True, slots=True)
class AssistantMessage:
    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    role: Literal["assistant"] = "assistant"


@dataclass(frozen=True, slots=True)
class ToolResult:
    """The result of one tool call, sent back to the model (content is never logged)."""

    call_id: str
    name: str
    content: str
    is_error: bool = False
    role: Literal["tool"] = "tool"


Item = SystemMessage | UserMessage | AssistantMessage | ToolResult


def item_to_dict(item: Item) -> dict[str, Any]:
    if isinstance(item, AssistantMessage):
        return {
            "role": "assistant",
            "text": item.text,
            "toolCalls": [c.to_dict() for c in item.tool_calls],
        }
    if isinstance(item, ToolResult):
        return {
            "role": "tool",
            "callId": item.call_id,
            "name": item.name,
            "content": item.content,
            "isError": item.is_error,
        }
    return {"role": item.role, "text": item.text}


def item_from_dict(d: dict[str, Any]) -> Item:
    role = d["role"]
    if role == "system":
        return SystemMessage(d["text"])
    if role == "user":
        return UserMessage(d["text"])
    if role == "assistant":
        calls = tuple(ToolCall.from_dict(c) for c in d.get("toolCalls", []))
        return AssistantMessage(d.get("text", ""), calls)
    if role == "tool":
        return ToolResult(d["callId"], d["name"], d["content"], bool(d.get("isError")))
    raise ValueError(f"unknown transcript role {role!r}")
