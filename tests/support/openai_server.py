"""A scripted OpenAI-compatible Chat Completions server (also Azure OpenAI and Ollama paths).

Any POST to a path ending in `/chat/completions` is a model call: `/v1/chat/completions`,
Azure's `/openai/deployments/<name>/chat/completions?api-version=...`, Ollama's
`/v1/chat/completions`. Steps: see `tests.support.scripted`; besides, `{"usage": null}`
answers `"usage": null` and `{"usage": "omit"}` leaves the `usage` key out, as some
OpenAI-compatible servers do.

    python -m tests.support.openai_server --port 0 --script script.json [--require-key K]
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from .scripted import ScriptedServer, Step, estimate_tokens, message_text, sample


class OpenAIServer(ScriptedServer):
    name = "openai"

    def is_model_call(self, request: web.Request) -> bool:
        return request.method == "POST" and request.path.rstrip("/").endswith("/chat/completions")

    def presented_key(self, request: web.Request) -> str | None:
        if "api-key" in request.headers:  # Azure
            return request.headers["api-key"]
        auth = request.headers.get("Authorization", "")
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
            "error": {
                "message": error.get("message", f"scripted error {status}"),
                "type": error.get(
                    "type", "server_error" if status >= 500 else "invalid_request_error"
                ),
                "param": error.get("param"),
                "code": error.get("code"),
            }
        }
        return web.json_response(payload, status=status, headers=dict(headers))

    def render(self, step: Step, body: dict[str, Any]) -> web.Response:
        if step.get("auto"):
            step = self.auto_step(body)
        text = step.get("text")
        if "json" in step:
            text = json.dumps(step["json"])
        calls = []
        for call in step.get("tool_calls") or []:
            raw = call.get("raw_arguments")
            if raw is None:
                raw = json.dumps(call.get("arguments") or {})
            calls.append(
                {
                    "id": call.get("id") or self.next_id("call_"),
                    "type": "function",
                    "function": {"name": call["name"], "arguments": raw},
                }
            )
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if calls:
            message["tool_calls"] = calls
        usage = step.get("usage") or {}
        reported = isinstance(usage, dict)
        prompt = usage.get("input_tokens", estimate_tokens(json.dumps(body))) if reported else 0
        completion = (
            usage.get(
                "output_tokens",
                estimate_tokens((text or "") + json.dumps(calls) if calls else text or ""),
            )
            if reported
            else 0
        )
        payload: dict[str, Any] = {
            "id": self.next_id("chatcmpl-"),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "scripted"),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": step.get("finish_reason", "tool_calls" if calls else "stop"),
                    "logprobs": None,
                }
            ],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            },
        }
        if "usage" in step and step["usage"] is None:
            payload["usage"] = None
        elif step.get("usage") == "omit":
            del payload["usage"]
        return web.json_response(payload, headers=step.get("headers"))

    def auto_step(self, body: dict[str, Any]) -> Step:
        """Call each offered tool that was not called yet; then answer."""
        called = {
            c.get("function", {}).get("name")
            for m in body.get("messages", [])
            if isinstance(m, dict) and m.get("role") == "assistant"
            for c in m.get("tool_calls") or []
        }
        fresh = [
            t["function"]
            for t in body.get("tools") or []
            if t.get("type") == "function"
            and t["function"]["name"] not in called
            and not t["function"]["name"].startswith("memory_")
        ]
        if fresh:
            return {
                "tool_calls": [
                    {"name": f["name"], "arguments": sample(f.get("parameters") or {}) or {}}
                    for f in fresh
                ]
            }
        response_format = body.get("response_format") or {}
        if response_format.get("type") == "json_schema":
            return {"json": sample(response_format["json_schema"].get("schema") or {})}
        if response_format.get("type") == "json_object":
            return {"json": {"answer": "Done."}}
        return {"text": "Done." if not called else f"Done. I used {', '.join(sorted(called))}."}


def main() -> None:
    OpenAIServer.main()


if __name__ == "__main__":
    main()
