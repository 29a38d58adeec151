"""OpenAI Chat Completions through the official `openai` SDK: providers `openai`,
`azure-openai`, `openai-compatible` (vLLM, LiteLLM, ...) and `ollama`.

The SDK's generic `post` sends ordo's already-JSON body to `/chat/completions` (the URL,
headers, auth, Azure deployment routing and errors are the SDK's) over the loop's shared
aiohttp client (sdk_http.py); the answer is read as raw JSON (`cast_to=httpx2.Response`), not
as pydantic `ChatCompletion` models: the cheapest SDK path (docs/decisions.md).

Transcript mapping: system and user items become `system`/`user` messages; an assistant item
becomes an `assistant` message with `tool_calls` (function name + the model's raw argument
text); each tool result becomes a `role: tool` message with its `tool_call_id`.
Structured output is requested with `response_format: json_schema` for openai and
azure-openai; openai-compatible and ollama rely on the system-prompt instruction the engine
adds (set `extraBody.response_format` to turn on a server's JSON mode).
"""

from __future__ import annotations

import json
from typing import Any

import openai

from ..api import ModelEndpoint
from ..engine.jsontext import MAX_JSON_CHARS, MAX_JSON_DEPTH, bounded_json_loads
from ..engine.model import ModelError, ModelRequest, ModelResponse
from ..engine.transcript import (
    AssistantMessage,
    Item,
    SystemMessage,
    ToolCall,
    ToolResult,
    UserMessage,
)
from ..errors import UntrustedInputTooLarge
from . import DEFAULT_BASE_URLS
from .errors import UNREADABLE, classify, endpoint_label
from .retry import RetryPolicy, call_with_retries
from .sdk_http import Lease, post_json
from .usage import reported, usage_or_estimate

DEFAULT_AZURE_API_VERSION = "2024-10-21"
NATIVE_STRUCTURED_OUTPUT = ("openai", "azure-openai")
"""Providers sent `response_format: json_schema` when the run has an output schema."""
_NO_KEY = "no-key"
"""The SDK insists on a key; keyless endpoints get this and the header is omitted."""
_KEYLESS: openai.RequestOptions = {
    "headers": {"Authorization": openai.Omit(), "api-key": openai.Omit()}
}


def to_messages(items: list[Item] | tuple[Item, ...]) -> list[dict[str, Any]]:
    """The transcript as Chat Completions messages."""
    messages: list[dict[str, Any]] = []
    for item in items:
        if isinstance(item, SystemMessage):
            messages.append({"role": "system", "content": item.text})
        elif isinstance(item, UserMessage):
            messages.append({"role": "user", "content": item.text})
        elif isinstance(item, AssistantMessage):
            message: dict[str, Any] = {"role": "assistant", "content": item.text or None}
            if item.tool_calls:
                message["tool_calls"] = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": _argument_text(call)},
                    }
                    for call in item.tool_calls
                ]
            elif not item.text:
                message["content"] = ""
            messages.append(message)
        elif isinstance(item, ToolResult):
            messages.append({"role": "tool", "tool_call_id": item.call_id, "content": item.content})
    return messages


def _argument_text(call: ToolCall) -> str:
    if call.raw_arguments:
        return call.raw_arguments
    return json.dumps(call.arguments if call.arguments is not None else {})


def parse_arguments(raw: Any) -> dict[str, Any] | None:
    """Tool-call arguments as an object, or None when the text is not a JSON object, is
    longer than MAX_JSON_CHARS or nests deeper than MAX_JSON_DEPTH (bounded, linear-time
    parsing: never an exception). An empty text is an empty object (some servers send it for
    argument-less calls)."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}
    if not isinstance(raw, str):
        return None
    try:
        value = bounded_json_loads(raw, max_chars=MAX_JSON_CHARS, max_depth=MAX_JSON_DEPTH)
    except (ValueError, UntrustedInputTooLarge):
        return None
    return value if isinstance(value, dict) else None


class OpenAIModelClient:
    """A ModelClient speaking Chat Completions."""

    def __init__(self, endpoint: ModelEndpoint, api_key: str | None) -> None:
        spec = endpoint.spec
        self.provider: str = spec.provider
        self.model: str = spec.effective_model()
        self._spec = spec
        self._policy = RetryPolicy.from_endpoint(endpoint)
        self._what = endpoint_label(endpoint)
        self._options: openai.RequestOptions = {} if api_key else _KEYLESS
        self._sdk_args: dict[str, Any] = {
            "api_key": api_key or _NO_KEY,
            "max_retries": 0,  # retry.py owns retries
            "timeout": self._policy.timeout,
        }
        if spec.provider == "azure-openai":
            if not spec.base_url:
                raise ValueError(
                    "azure-openai needs spec.baseUrl (https://<resource>.openai.azure.com)"
                )
            self._sdk_args |= {
                "azure_endpoint": spec.base_url,
                "azure_deployment": spec.option("deployment", self.model),
                "api_version": spec.option("api_version", DEFAULT_AZURE_API_VERSION),
            }
        else:
            base_url = spec.base_url or DEFAULT_BASE_URLS.get(spec.provider)
            if not base_url:
                raise ValueError(f"provider {spec.provider} needs spec.baseUrl")
            self._sdk_args["base_url"] = base_url
        self._lease = Lease("openai")
        self._client: openai.AsyncOpenAI | None = None

    def _sdk(self) -> openai.AsyncOpenAI:
        """The SDK client, built on the loop's shared HTTP client at the first call."""
        http_client, new = self._lease.take()
        if new or self._client is None:
            factory = (
                openai.AsyncAzureOpenAI
                if "azure_endpoint" in self._sdk_args
                else openai.AsyncOpenAI
            )
            self._client = factory(**self._sdk_args, http_client=http_client)
        return self._client

    def request_params(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body of one request (`extraBody` merged in last, as `create` merges
        `extra_body`)."""
        spec = self._spec
        params: dict[str, Any] = {
            "model": self.model,
            "messages": to_messages(request.items),
        }
        if request.tools:
            params["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": tool.parameters,
                    },
                }
                for tool in request.tools
            ]
        for option, name in (("temperature", "temperature"), ("top_p", "top_p")):
            value = spec.option(option)
            if value is not None:
                params[name] = value
        max_tokens = spec.option("max_tokens")
        if max_tokens is not None:
            native = spec.provider in NATIVE_STRUCTURED_OUTPUT
            params["max_completion_tokens" if native else "max_tokens"] = max_tokens
        if request.output_schema is not None and spec.provider in NATIVE_STRUCTURED_OUTPUT:
            params["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "output", "schema": request.output_schema, "strict": False},
            }
        if spec.extra_body:
            params.update(spec.extra_body)
        return params

    async def complete(self, request: ModelRequest) -> ModelResponse:
        body = self.request_params(request)
        client = self._sdk()

        async def attempt(timeout: float) -> Any:
            return await post_json(client, "/chat/completions", body, self._options, timeout)

        completion = await call_with_retries(
            attempt, classify, self._policy, request.deadline, self._what
        )
        try:
            return self._response(completion, request)
        except UNREADABLE as exc:  # a body of the wrong shape
            raise ModelError(f"{self._what}: unreadable response ({type(exc).__name__})") from None

    def _response(self, completion: Any, request: ModelRequest) -> ModelResponse:
        """The answer as ordo's types, read from the JSON body. Missing ids stay empty and odd
        names stay as sent: the engine's normaliser (engine/sanitize.py) makes them unique and
        safe. A field of the wrong type raises TypeError/AttributeError (unreadable)."""
        choices = completion.get("choices") if isinstance(completion, dict) else None
        if not choices or not isinstance(choices, list):
            raise ModelError(f"{self._what}: the response has no choices")
        choice = choices[0]
        message = choice.get("message") or {}
        calls: list[ToolCall] = []
        for call in message.get("tool_calls") or []:
            function = call.get("function")
            if not isinstance(function, dict):  # a custom (non-function) tool call: never offered
                continue
            raw = _text(function.get("arguments"))
            calls.append(
                ToolCall(
                    _text(call.get("id")), _text(function.get("name")), parse_arguments(raw), raw
                )
            )
        text = _text(message.get("content"))
        usage = completion.get("usage")
        if not isinstance(usage, dict):
            usage = {}
        return ModelResponse(
            text=text,
            tool_calls=tuple(calls),
            usage=usage_or_estimate(
                reported(usage.get("prompt_tokens")),
                reported(usage.get("completion_tokens")),
                request,
                text,
                calls,
            ),
            finish_reason=_text(choice.get("finish_reason")),
            response_model=_text(completion.get("model")),
        )

    async def close(self) -> None:
        """Give the shared HTTP client back (never the SDK client's `close()`: that would
        close the pool every other model client of the loop uses)."""
        self._client = None
        await self._lease.release()


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""
