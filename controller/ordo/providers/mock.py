"""The `mock` provider: deterministic, scripted from the ModelEndpoint.

Turn N of `spec.mock.turns` answers the N-th model call of a run (counted from the history,
so a resumed run continues the script). When the script is unset or used up, the mock calls
every offered tool it has not called yet (arguments synthesised from each tool's schema), then
answers with a short summary, or with JSON synthesised from the output schema. Token usage
is estimated as characters / 4, like a real provider reports it.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from typing import Any

from ..api import ModelEndpoint, parse_duration
from ..api.modelendpoint import MockTurn
from ..engine.model import ModelRequest, ModelResponse
from ..engine.transcript import AssistantMessage, ToolCall, ToolResult, Usage


def estimate_tokens(text: str) -> int:
    return math.ceil(len(text) / 4) if text else 0


def sample(schema: dict[str, Any], depth: int = 0) -> Any:
    """A small value that satisfies common JSON Schemas."""
    if depth > 6:
        return None
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "object" or "properties" in schema:
        props = schema.get("properties", {})
        required = schema.get("required", list(props))
        return {k: sample(props.get(k, {}), depth + 1) for k in required}
    if kind == "array":
        count = max(1, int(schema.get("minItems", 1)))
        return [sample(schema.get("items", {}), depth + 1) for _ in range(count)]
    if kind == "integer":
        return int(schema.get("minimum", 1))
    if kind == "number":
        return float(schema.get("minimum", 1))
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    text = "example"
    min_len = int(schema.get("minLength", 0))
    return text + "x" * max(0, min_len - len(text))


def hold_the_loop(seconds: float) -> None:
    """Compute for `seconds` without yielding to the event loop (`MockTurn.busy`)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


class MockModelClient:
    provider = "mock"

    def __init__(self, endpoint: ModelEndpoint) -> None:
        self.model = endpoint.spec.effective_model()
        script = endpoint.spec.mock
        self._turns: list[MockTurn] = list(script.turns or []) if script else []
        self.requests: list[ModelRequest] = []

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        index = sum(1 for i in request.items if isinstance(i, AssistantMessage))
        if index < len(self._turns):
            turn = self._turns[index]
            if turn.delay:
                await asyncio.sleep(parse_duration(turn.delay))
            if turn.busy:
                hold_the_loop(turn.busy)
            calls = tuple(
                ToolCall(
                    f"call_{index + 1}_{n}",
                    c.tool,
                    dict(c.arguments or {}),
                    json.dumps(c.arguments or {}),
                )
                for n, c in enumerate(turn.tool_calls or [])
            )
            text = turn.text or ""
            usage = self._usage(request, text, calls)
            if turn.usage is not None:
                usage = Usage(
                    turn.usage.input_tokens
                    if turn.usage.input_tokens is not None
                    else usage.input_tokens,
                    turn.usage.output_tokens
                    if turn.usage.output_tokens is not None
                    else usage.output_tokens,
                )
            return ModelResponse(text, calls, usage, "tool_calls" if calls else "stop")
        return self._default(request, index)

    def _default(self, request: ModelRequest, index: int) -> ModelResponse:
        called = {i.name for i in request.items if isinstance(i, ToolResult)}
        fresh = [
            t for t in request.tools if t.name not in called and not t.name.startswith("memory_")
        ]
        if fresh:
            calls = tuple(
                ToolCall(f"call_{index + 1}_{n}", t.name, args, json.dumps(args))
                for n, t in enumerate(fresh)
                for args in [sample(t.parameters) or {}]
            )
            return ModelResponse("", calls, self._usage(request, "", calls), "tool_calls")
        if request.output_schema is not None:
            text = json.dumps(sample(request.output_schema))
        else:
            text = f"Done. I used {', '.join(sorted(called))}." if called else "Done."
        return ModelResponse(text, (), self._usage(request, text, ()), "stop")

    @staticmethod
    def _usage(request: ModelRequest, text: str, calls: tuple[ToolCall, ...]) -> Usage:
        prompt = 0
        for item in request.items:
            prompt += len(getattr(item, "text", "") or getattr(item, "content", ""))
            for call in getattr(item, "tool_calls", ()):
                prompt += len(call.raw_arguments) + len(call.name)
        for tool in request.tools:
            prompt += len(tool.name) + len(tool.description) + len(json.dumps(tool.parameters))
        completion = len(text) + sum(len(c.name) + len(c.raw_arguments) for c in calls)
        return Usage(math.ceil(prompt / 4), max(1, math.ceil(completion / 4)))
