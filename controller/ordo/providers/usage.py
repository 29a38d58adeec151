"""Token usage when the server reports none (docs/providers.md, "Usage").

Some OpenAI-compatible servers send `usage: null` or no `usage` at all, and a proxy may strip
it from an Anthropic answer. A run's token budget (`maxTokens`, `maxTokensPerTask`) must hold
anyway, so the provider estimates what is missing: ceil(characters / 4) of the request (every
transcript item's text, tool-call names and argument text, tool definitions) for the input,
and of the answer (text, tool names and argument text) for the output, and marks the usage
`estimated`. A count the server did report is kept as reported.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any

from ..engine.model import ModelRequest
from ..engine.transcript import AssistantMessage, ToolCall, ToolResult, Usage

CHARS_PER_TOKEN = 4


def estimate_tokens(chars: int) -> int:
    return math.ceil(chars / CHARS_PER_TOKEN) if chars > 0 else 0


def request_chars(request: ModelRequest) -> int:
    """Characters of what a request carries (the prompt side of an estimate)."""
    total = 0
    for item in request.items:
        if isinstance(item, ToolResult):
            total += len(item.content) + len(item.name)
        else:
            total += len(item.text)
        if isinstance(item, AssistantMessage):
            total += sum(len(c.name) + len(c.raw_arguments) for c in item.tool_calls)
    for tool in request.tools:
        total += len(tool.name) + len(tool.description) + len(json.dumps(tool.parameters))
    if request.output_schema is not None:
        total += len(json.dumps(request.output_schema))
    return total


def answer_chars(text: str, calls: Iterable[ToolCall]) -> int:
    return len(text) + sum(len(c.name) + len(c.raw_arguments) for c in calls)


def reported(value: Any) -> int | None:
    """A token count as the server reported it, or None when it is missing or not a count."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def usage_or_estimate(
    input_tokens: int | None,
    output_tokens: int | None,
    request: ModelRequest,
    text: str,
    calls: Iterable[ToolCall],
) -> Usage:
    """The reported counts, each missing one estimated (and the result marked so)."""
    estimated = input_tokens is None or output_tokens is None
    if input_tokens is None:
        input_tokens = estimate_tokens(request_chars(request))
    if output_tokens is None:
        output_tokens = max(1, estimate_tokens(answer_chars(text, calls)))
    return Usage(input_tokens, output_tokens, estimated)
