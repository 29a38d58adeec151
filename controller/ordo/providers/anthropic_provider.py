"""Anthropic Messages through the official `anthropic` SDK.

Transcript mapping: system items become the `system` parameter; an assistant item becomes an
`assistant` message of a text block and `tool_use` blocks; the tool results that follow it
become ONE `user` message of `tool_result` blocks (`tool_use_id`, `is_error`). Adjacent items
of the same role are merged, as the API wants roles to alternate.

Structured output uses a forced tool: the run's output schema is offered as the tool
`_final_answer` and the model is made to call a tool (`tool_choice: tool` when it is the only
one, `any` while other tools are on offer); its input becomes the JSON text of the answer.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic

from ..api import ModelEndpoint
from ..engine.model import ModelError, ModelRequest, ModelResponse
from ..engine.transcript import (
    AssistantMessage,
    Item,
    SystemMessage,
    ToolCall,
    ToolResult,
    Usage,
    UserMessage,
)
from ..tls import shared_ssl_context
from .retry import (
    Failure,
    RetryPolicy,
    call_with_retries,
    parse_retry_after,
    safe_token,
    status_failure,
)

DEFAULT_BASE_URL = "https://api.anthropic.com"
DEFAULT_MAX_TOKENS = 1024
OUTPUT_TOOL = "_final_answer"
"""The forced tool that carries a structured answer (a leading `_` cannot clash with a Tool
object's model name, which starts with a letter or digit)."""
_EMPTY_TEXT = "(no text)"


def split_system(items: list[Item] | tuple[Item, ...]) -> tuple[str, list[dict[str, Any]]]:
    """The `system` parameter and the `messages` of a transcript."""
    system = "\n\n".join(i.text for i in items if isinstance(i, SystemMessage) and i.text)
    turns: list[tuple[str, list[dict[str, Any]]]] = []
    for item in items:
        blocks: list[dict[str, Any]]
        if isinstance(item, SystemMessage):
            continue
        if isinstance(item, UserMessage):
            role, blocks = "user", [{"type": "text", "text": item.text or _EMPTY_TEXT}]
        elif isinstance(item, AssistantMessage):
            blocks = [{"type": "text", "text": item.text}] if item.text else []
            blocks += [
                {
                    "type": "tool_use",
                    "id": call.id,
                    "name": call.name,
                    "input": call.arguments if call.arguments is not None else {},
                }
                for call in item.tool_calls
            ]
            role = "assistant"
            if not blocks:
                blocks = [{"type": "text", "text": _EMPTY_TEXT}]
        else:
            assert isinstance(item, ToolResult)
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": item.call_id,
                "content": item.content,
            }
            if item.is_error:
                block["is_error"] = True
            role, blocks = "user", [block]
        if turns and turns[-1][0] == role:
            turns[-1][1].extend(blocks)
        else:
            turns.append((role, blocks))
    messages: list[dict[str, Any]] = []
    for role, blocks in turns:
        if role == "user":  # tool results must come first in a user message
            blocks.sort(key=lambda b: b["type"] != "tool_result")
        if len(blocks) == 1 and blocks[0]["type"] == "text":
            messages.append({"role": role, "content": blocks[0]["text"]})
        else:
            messages.append({"role": role, "content": blocks})
    return system, messages


def classify(exc: Exception) -> Failure | None:
    """An SDK exception as a content-free Failure (None: not an SDK error)."""
    if isinstance(exc, anthropic.APIStatusError):
        error_type = safe_token(getattr(exc, "error_code", None)) or safe_token(exc.type)
        headers = dict(exc.response.headers) if exc.response is not None else None
        return status_failure(exc.status_code, error_type, parse_retry_after(headers))
    if isinstance(exc, anthropic.APITimeoutError):
        return Failure(True, "the HTTP request timed out")
    if isinstance(exc, anthropic.APIConnectionError):
        cause = type(exc.__cause__).__name__ if exc.__cause__ is not None else "unknown"
        return Failure(True, f"connection error ({cause})")
    if isinstance(exc, anthropic.AnthropicError | ValueError):
        return Failure(False, f"unreadable response ({type(exc).__name__})")
    return None


class AnthropicModelClient:
    """A ModelClient speaking the Anthropic Messages API."""

    provider = "anthropic"

    def __init__(self, endpoint: ModelEndpoint, api_key: str | None) -> None:
        spec = endpoint.spec
        self.model: str = spec.effective_model()
        self._spec = spec
        self._policy = RetryPolicy.from_endpoint(endpoint)
        base_url = (spec.base_url or DEFAULT_BASE_URL).rstrip("/")
        if base_url.endswith("/v1"):  # the SDK adds /v1/messages itself
            base_url = base_url[: -len("/v1")]
        self._client = anthropic.AsyncAnthropic(
            api_key=api_key or "",
            base_url=base_url,
            max_retries=0,
            timeout=self._policy.timeout,
            http_client=anthropic.DefaultAsyncHttpxClient(
                timeout=self._policy.timeout, verify=shared_ssl_context()
            ),
        )

    def request_params(self, request: ModelRequest) -> dict[str, Any]:
        """The keyword arguments of `messages.create` for one request."""
        spec = self._spec
        system, messages = split_system(request.items)
        params: dict[str, Any] = {
            "model": self.model,
            "max_tokens": spec.option("max_tokens", DEFAULT_MAX_TOKENS),
            "messages": messages,
        }
        if system:
            params["system"] = system
        tools: list[dict[str, Any]] = []
        for tool in request.tools:
            entry: dict[str, Any] = {
                "name": tool.name,
                "input_schema": _object_schema(tool.parameters),
            }
            if tool.description:
                entry["description"] = tool.description
            tools.append(entry)
        if request.output_schema is not None:
            params["tool_choice"] = (
                {"type": "any"} if tools else {"type": "tool", "name": OUTPUT_TOOL}
            )
            tools.append(
                {
                    "name": OUTPUT_TOOL,
                    "description": "Give the final answer: call this exactly once, when done, "
                    "with the answer as the input.",
                    "input_schema": _object_schema(request.output_schema),
                }
            )
        if tools:
            params["tools"] = tools
        # Sampling options go in the body directly: recent SDKs dropped them as arguments.
        extra: dict[str, Any] = {}
        for option, name in (("temperature", "temperature"), ("top_p", "top_p")):
            value = spec.option(option)
            if value is not None:
                extra[name] = value
        extra.update(spec.extra_body or {})
        if extra:
            params["extra_body"] = extra
        return params

    async def complete(self, request: ModelRequest) -> ModelResponse:
        params = self.request_params(request)

        async def attempt(timeout: float) -> Any:
            return await self._client.messages.create(**params, timeout=timeout)

        message = await call_with_retries(
            attempt, classify, self._policy, request.deadline, "anthropic model call"
        )
        return self._response(message, structured=request.output_schema is not None)

    def _response(self, message: Any, *, structured: bool) -> ModelResponse:
        content = getattr(message, "content", None)
        if content is None:
            raise ModelError("anthropic model call: the response has no content")
        texts: list[str] = []
        calls: list[ToolCall] = []
        answer: str | None = None
        for block in content:
            kind = getattr(block, "type", None)
            if kind == "text":
                texts.append(block.text)
            elif kind == "tool_use":
                raw_input = block.input
                if structured and block.name == OUTPUT_TOOL:
                    answer = json.dumps(raw_input)
                    continue
                arguments = raw_input if isinstance(raw_input, dict) else None
                raw = json.dumps(raw_input) if arguments is not None else str(raw_input)
                calls.append(ToolCall(block.id, block.name, arguments, raw))
        text = "".join(texts)
        if answer is not None and not calls:
            text = answer
        usage = message.usage
        input_tokens = 0
        output_tokens = 0
        if usage is not None:
            input_tokens = (
                (usage.input_tokens or 0)
                + (getattr(usage, "cache_creation_input_tokens", None) or 0)
                + (getattr(usage, "cache_read_input_tokens", None) or 0)
            )
            output_tokens = usage.output_tokens or 0
        return ModelResponse(
            text=text,
            tool_calls=tuple(calls),
            usage=Usage(input_tokens, output_tokens),
            finish_reason=getattr(message, "stop_reason", None) or "",
        )

    async def close(self) -> None:
        await self._client.close()


def _object_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Anthropic wants `input_schema` to be an object schema."""
    if schema.get("type") == "object":
        return schema
    return {"type": "object", **schema} if "type" not in schema else schema
