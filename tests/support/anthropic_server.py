"""A scripted Anthropic Messages server: `POST /v1/messages`. Steps: see `tests.support.scripted`.

`{"usage": null}` or `{"usage": "omit"}` leaves `usage` out of the answer (as a proxy that
strips it would). A `{"json": {...}}` step answers with a `tool_use` block of the tool named in `tool_choice`
(the client's forced structured-output tool), or of the first offered tool whose name starts
with `_`, else with the JSON as text.

    python -m tests.support.anthropic_server --port 0 --script script.json [--require-key K]
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from .scripted import (
    RecordedRequest,
    ScriptedServer,
    Step,
    estimate_tokens,
    message_text,
    sample,
)

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


class AnthropicServer(ScriptedServer):
    name = "anthropic"

    def is_model_call(self, request: web.Request) -> bool:
        return request.method == "POST" and request.path.rstrip("/").endswith("/v1/messages")

    def presented_key(self, request: web.Request) -> str | None:
        """`x-api-key`, or `Authorization: Bearer` (what recent SDK versions send)."""
        if "x-api-key" in request.headers:
            return request.headers["x-api-key"]
        auth = request.headers.get("Authorization", "")
        return auth.removeprefix("Bearer ") if auth else None

    @staticmethod
    def presented_key_of(request: RecordedRequest) -> str | None:
        """The key a recorded request carried."""
        if "x-api-key" in request.headers:
            return str(request.headers["x-api-key"])
        auth = str(request.headers.get("authorization", ""))
        return auth.removeprefix("Bearer ") if auth else None

    def user_text(self, body: Any) -> str:
        return " ".join(
            message_text(m.get("content"))
            for m in body.get("messages", [])
            if isinstance(m, dict) and m.get("role") == "user"
        )

    def error_response(
        self, status: int, error: Mapping[str, Any], headers: Mapping[str, str]
    ) -> web.Response:
        payload = {
            "type": "error",
            "error": {
                "type": error.get("type", ERROR_TYPES.get(status, "api_error")),
                "message": error.get("message", f"scripted error {status}"),
            },
        }
        return web.json_response(payload, status=status, headers=dict(headers))

    def _answer_tool(self, body: dict[str, Any]) -> dict[str, Any] | None:
        choice = body.get("tool_choice") or {}
        tools = body.get("tools") or []
        if choice.get("type") == "tool":
            return next((t for t in tools if t.get("name") == choice.get("name")), None)
        return next((t for t in tools if str(t.get("name", "")).startswith("_")), None)

    def render(self, step: Step, body: dict[str, Any]) -> web.Response:
        if step.get("auto"):
            step = self.auto_step(body)
        blocks: list[dict[str, Any]] = []
        if step.get("text"):
            blocks.append({"type": "text", "text": step["text"]})
        if "json" in step:
            tool = self._answer_tool(body)
            if tool is not None:
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": self.next_id("toolu_"),
                        "name": tool["name"],
                        "input": step["json"],
                    }
                )
            else:
                blocks.append({"type": "text", "text": json.dumps(step["json"])})
        for call in step.get("tool_calls") or []:
            arguments: Any = call.get("arguments") or {}
            if call.get("raw_arguments") is not None:
                arguments = call["raw_arguments"]
            blocks.append(
                {
                    "type": "tool_use",
                    "id": call.get("id") or self.next_id("toolu_"),
                    "name": call["name"],
                    "input": arguments,
                }
            )
        has_tool_use = any(b["type"] == "tool_use" for b in blocks)
        usage = step.get("usage") or {}
        payload: dict[str, Any] = {
            "id": self.next_id("msg_"),
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "scripted"),
            "content": blocks,
            "stop_reason": step.get("finish_reason", "tool_use" if has_tool_use else "end_turn"),
            "stop_sequence": None,
            "usage": {
                "input_tokens": usage.get("input_tokens", estimate_tokens(json.dumps(body))),
                "output_tokens": usage.get("output_tokens", estimate_tokens(json.dumps(blocks))),
            }
            if isinstance(usage, dict)
            else {},
        }
        if "usage" in step and (step["usage"] is None or step["usage"] == "omit"):
            del payload["usage"]
        return web.json_response(payload, headers=step.get("headers"))

    def auto_step(self, body: dict[str, Any]) -> Step:
        """Call each offered tool that was not called yet; then answer."""
        called = {
            b.get("name")
            for m in body.get("messages", [])
            if isinstance(m, dict)
            and m.get("role") == "assistant"
            and isinstance(m.get("content"), list)
            for b in m["content"]
            if isinstance(b, dict) and b.get("type") == "tool_use"
        }
        answer = self._answer_tool(body)
        fresh = [
            t
            for t in body.get("tools") or []
            if t.get("name") not in called
            and t is not answer
            and not str(t.get("name", "")).startswith(("_", "memory_"))
        ]
        if fresh:
            return {
                "tool_calls": [
                    {"name": t["name"], "arguments": sample(t.get("input_schema") or {}) or {}}
                    for t in fresh
                ]
            }
        if answer is not None:
            return {"json": sample(answer.get("input_schema") or {})}
        return {"text": "Done." if not called else f"Done. I used {', '.join(sorted(called))}."}


def main() -> None:
    AnthropicServer.main()


if __name__ == "__main__":
    main()
