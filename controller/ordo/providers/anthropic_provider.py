"""Anthropic Messages through the official `anthropic` SDK.

The SDK's generic `post` sends ordo's already-JSON body to `/v1/messages` (the URL, auth and
`anthropic-version` headers and errors are the SDK's) over the loop's shared aiohttp client
(sdk_http.py); the answer is read as raw JSON (`cast_to=httpx2.Response`), not as pydantic
`Message` models: the cheapest SDK path (docs/decisions.md).

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
from ..engine.jsontext import MAX_JSON_CHARS
from ..engine.model import ModelError, ModelRequest, ModelResponse
from ..engine.sanitize import json_value_ok
from ..engine.transcript import (
    AssistantMessage,
    Item,
    SystemMessage,
    ToolCall,
    ToolResult,
    UserMessage,
)
from . import DEFAULT_BASE_URLS
from .errors import UNREADABLE, classify, endpoint_label
from .retry import RetryPolicy, call_with_retries
from .sdk_http import Lease, post_json
from .usage import reported, usage_or_estimate

DEFAULT_BASE_URL = DEFAULT_BASE_URLS["anthropic"]
DEFAULT_MAX_TOKENS = 1024
_KEYLESS: anthropic.RequestOptions = {
    "headers": {"Authorization": anthropic.Omit(), "X-Api-Key": anthropic.Omit()}
}
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


class AnthropicModelClient:
    """A ModelClient speaking the Anthropic Messages API."""

    provider = "anthropic"

    def __init__(self, endpoint: ModelEndpoint, api_key: str | None) -> None:
        spec = endpoint.spec
        self.model: str = spec.effective_model()
        self._spec = spec
        self._policy = RetryPolicy.from_endpoint(endpoint)
        self._what = endpoint_label(endpoint)
        base_url = (spec.base_url or DEFAULT_BASE_URL).rstrip("/")
        if base_url.endswith("/v1"):  # the SDK adds /v1/messages itself
            base_url = base_url[: -len("/v1")]
        self._base_url = base_url
        self._api_key = api_key or ""
        self._options: anthropic.RequestOptions = {} if api_key else _KEYLESS
        self._lease = Lease("anthropic")
        self._client: anthropic.AsyncAnthropic | None = None

    def _sdk(self) -> anthropic.AsyncAnthropic:
        """The SDK client, built on the loop's shared HTTP client at the first call."""
        http_client, new = self._lease.take()
        if new or self._client is None:
            self._client = anthropic.AsyncAnthropic(
                api_key=self._api_key,
                base_url=self._base_url,
                max_retries=0,  # retry.py owns retries
                timeout=self._policy.timeout,
                http_client=http_client,
            )
        return self._client

    def request_params(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body of one request (`extraBody` and the sampling options merged in last,
        as `create` merges `extra_body`)."""
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
        for option, name in (("temperature", "temperature"), ("top_p", "top_p")):
            value = spec.option(option)
            if value is not None:
                params[name] = value
        params.update(spec.extra_body or {})
        return params

    async def complete(self, request: ModelRequest) -> ModelResponse:
        body = self.request_params(request)
        client = self._sdk()

        async def attempt(timeout: float) -> Any:
            return await post_json(client, "/v1/messages", body, self._options, timeout)

        message = await call_with_retries(
            attempt, classify, self._policy, request.deadline, self._what
        )
        try:
            return self._response(message, request)
        except UNREADABLE as exc:  # a body of the wrong shape
            raise ModelError(f"{self._what}: unreadable response ({type(exc).__name__})") from None

    def _response(self, message: Any, request: ModelRequest) -> ModelResponse:
        """The answer as ordo's types, read from the JSON body. Odd names and ids stay as
        sent: the engine's normaliser (engine/sanitize.py) makes them unique and safe."""
        structured = request.output_schema is not None
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            raise ModelError(f"{self._what}: the response has no content")
        texts: list[str] = []
        calls: list[ToolCall] = []
        answer: str | None = None
        for block in content:
            kind = block.get("type")
            if kind == "text":
                if isinstance(block.get("text"), str):
                    texts.append(block["text"])
            elif kind == "tool_use":
                raw_input = block.get("input")
                name = _text(block.get("name"))
                # Refuse what is too deep or not plain JSON before serialising it
                # (arguments None: the loop rejects the call).
                plain = isinstance(raw_input, dict) and json_value_ok(raw_input)
                if structured and name == OUTPUT_TOOL:
                    answer = json.dumps(raw_input) if plain else ""
                    continue
                raw = json.dumps(raw_input) if plain else ""
                arguments = raw_input if plain and len(raw) <= MAX_JSON_CHARS else None
                calls.append(ToolCall(_text(block.get("id")), name, arguments, raw))
        text = "".join(texts)
        if answer is not None and not calls:
            text = answer
        usage = message.get("usage")
        if not isinstance(usage, dict):
            usage = {}
        input_tokens = reported(usage.get("input_tokens"))
        if input_tokens is not None:
            for cached in ("cache_creation_input_tokens", "cache_read_input_tokens"):
                input_tokens += reported(usage.get(cached)) or 0
        return ModelResponse(
            text=text,
            tool_calls=tuple(calls),
            usage=usage_or_estimate(
                input_tokens,
                reported(usage.get("output_tokens")),
                request,
                text,
                calls,
            ),
            finish_reason=_text(message.get("stop_reason")),
            response_model=_text(message.get("model")),
        )

    async def close(self) -> None:
        """Give the shared HTTP client back (never the SDK client's `close()`: that would
        close the pool every other model client of the loop uses)."""
        self._client = None
        await self._lease.release()


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _object_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Anthropic wants `input_schema` to be an object schema."""
    if schema.get("type") == "object":
        return schema
    return {"type": "object", **schema} if "type" not in schema else schema
