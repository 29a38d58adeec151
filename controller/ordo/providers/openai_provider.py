"""OpenAI Chat Completions through the official `openai` SDK: providers `openai`,
`azure-openai`, `openai-compatible` (vLLM, LiteLLM, ...) and `ollama`.

Transcript mapping: system and user items become `system`/`user` messages; an assistant item
becomes an `assistant` message with `tool_calls` (function name + the model's raw argument
text); each tool result becomes a `role: tool` message with its `tool_call_id`.
Structured output is requested with `response_format: json_schema` for openai and
azure-openai; openai-compatible and ollama rely on the system-prompt instruction the engine
adds (set `extraBody.response_format` to turn on a server's JSON mode).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import openai
from openai.types.chat import ChatCompletion

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
from ..tls import shared_ssl_context
from .errors import UNREADABLE, classify, endpoint_label
from .retry import RetryPolicy, call_with_retries
from .usage import reported, usage_or_estimate

DEFAULT_BASE_URLS = {
    "openai": "https://api.openai.com/v1",
    "ollama": "http://localhost:11434/v1",
}
DEFAULT_AZURE_API_VERSION = "2024-10-21"
NATIVE_STRUCTURED_OUTPUT = ("openai", "azure-openai")
"""Providers sent `response_format: json_schema` when the run has an output schema."""
_NO_KEY = "no-key"
"""The SDK insists on a key; keyless endpoints get this and the header is omitted."""


class _HttpClient(openai.DefaultAsyncHttpxClient):
    """The SDK's default HTTP client (its timeout, connection limits and redirects) with the
    shared TLS context; like the SDK's own default it closes itself when it is collected."""

    def __del__(self) -> None:
        if self.is_closed:
            return
        with contextlib.suppress(RuntimeError):  # no running loop: nothing to close with
            asyncio.get_running_loop().create_task(self.aclose())


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


def post_arguments(params: dict[str, Any]) -> tuple[dict[str, Any], openai.RequestOptions]:
    """`request_params` split into the JSON body and the SDK request options, as
    `chat.completions.create` would pass them (`extra_body` merged into the body by the SDK,
    `extra_headers` as headers, bearer auth)."""
    body = {k: v for k, v in params.items() if k not in ("extra_body", "extra_headers")}
    options: openai.RequestOptions = {"security": {"bearer_auth": True}}
    if "extra_headers" in params:
        options["headers"] = params["extra_headers"]
    if "extra_body" in params:
        options["extra_json"] = params["extra_body"]
    return body, options


class OpenAIModelClient:
    """A ModelClient speaking Chat Completions."""

    def __init__(self, endpoint: ModelEndpoint, api_key: str | None) -> None:
        spec = endpoint.spec
        self.provider: str = spec.provider
        self.model: str = spec.effective_model()
        self._spec = spec
        self._policy = RetryPolicy.from_endpoint(endpoint)
        self._what = endpoint_label(endpoint)
        self._keyless = not api_key
        key = api_key or _NO_KEY
        if spec.provider == "azure-openai":
            if not spec.base_url:
                raise ValueError(
                    "azure-openai needs spec.baseUrl (https://<resource>.openai.azure.com)"
                )
            self._client: openai.AsyncOpenAI = openai.AsyncAzureOpenAI(
                azure_endpoint=spec.base_url,
                azure_deployment=spec.option("deployment", self.model),
                api_version=spec.option("api_version", DEFAULT_AZURE_API_VERSION),
                api_key=key,
                max_retries=0,
                timeout=self._policy.timeout,
                http_client=_HttpClient(timeout=self._policy.timeout, verify=shared_ssl_context()),
            )
        else:
            base_url = spec.base_url or DEFAULT_BASE_URLS.get(spec.provider)
            if not base_url:
                raise ValueError(f"provider {spec.provider} needs spec.baseUrl")
            self._client = openai.AsyncOpenAI(
                api_key=key,
                base_url=base_url,
                max_retries=0,
                timeout=self._policy.timeout,
                http_client=_HttpClient(timeout=self._policy.timeout, verify=shared_ssl_context()),
            )

    def request_params(self, request: ModelRequest) -> dict[str, Any]:
        """The keyword arguments of `chat.completions.create` for one request."""
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
            params["extra_body"] = dict(spec.extra_body)
        if self._keyless:
            params["extra_headers"] = {"Authorization": openai.Omit()}
        return params

    async def complete(self, request: ModelRequest) -> ModelResponse:
        params = self.request_params(request)
        body, options = post_arguments(params)

        async def attempt(timeout: float) -> Any:
            # The SDK's generic `post`, as `chat.completions.create` calls it, minus create's
            # TypedDict transform: that walks every message and tool schema against the
            # param types' unions and costs about as much as the rest of the call (half the
            # client CPU of a step, see docs/benchmarks.md), while ordo's params are plain
            # JSON already. Same URL, headers, auth, timeout, errors and ChatCompletion.
            return await self._client.post(
                "/chat/completions",
                cast_to=ChatCompletion,
                body=body,
                options={**options, "timeout": timeout},
            )

        completion = await call_with_retries(
            attempt, classify, self._policy, request.deadline, self._what
        )
        try:
            return self._response(completion, request)
        except UNREADABLE as exc:  # a body of the wrong shape (the SDK does not validate)
            raise ModelError(f"{self._what}: unreadable response ({type(exc).__name__})") from None

    def _response(self, completion: Any, request: ModelRequest) -> ModelResponse:
        """The answer as ordo's types. Missing ids stay empty and odd names stay as sent: the
        engine's normaliser (engine/sanitize.py) makes them unique and safe."""
        choices = getattr(completion, "choices", None)
        if not choices:
            raise ModelError(f"{self._what}: the response has no choices")
        choice = choices[0]
        message = choice.message
        calls: list[ToolCall] = []
        for call in message.tool_calls or []:
            function = getattr(call, "function", None)
            if function is None:  # a custom (non-function) tool call: never offered
                continue
            raw = function.arguments if isinstance(function.arguments, str) else ""
            name = function.name if isinstance(function.name, str) else ""
            call_id = call.id if isinstance(call.id, str) else ""
            calls.append(ToolCall(call_id, name, parse_arguments(raw), raw))
        text = message.content if isinstance(message.content, str) else ""
        usage = getattr(completion, "usage", None)
        return ModelResponse(
            text=text,
            tool_calls=tuple(calls),
            usage=usage_or_estimate(
                reported(getattr(usage, "prompt_tokens", None)),
                reported(getattr(usage, "completion_tokens", None)),
                request,
                text,
                calls,
            ),
            finish_reason=choice.finish_reason if isinstance(choice.finish_reason, str) else "",
            response_model=getattr(completion, "model", ""),  # checked by engine/sanitize.py
        )

    async def close(self) -> None:
        await self._client.close()
