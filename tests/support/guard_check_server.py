"""A guardrail check service on 127.0.0.1 (the `http` Guardrail type), recording every request.

It speaks the documented protocol (ordo.tools.guardcheck): ordo POSTs
`{"guardrail", "point", "text"}` and reads `{"decision": ..., "text": ...}`. Every verdict it
gives carries `"reason": REASON`, a canary that ordo must never write anywhere.

Routes (POST):
    /allow             200 allow
    /deny              200 deny
    /redact            200 redact: every occurrence of `?word=W` (default SECRET) in the text
                       becomes [REDACTED]; allow when there is none
    /deny-if?word=W    200 deny when the text contains W, else allow
    /status/<code>     that status, with a body that must never reach anyone
    /garbage           200 "this is not JSON"
    /shape/<n>         200 the n-th wrong-shaped verdict of WRONG_SHAPES
    /slow?seconds=S    waits S seconds before answering (allow)
    /drip?every=S      200 headers at once, then a valid allow verdict one byte every S seconds
    /huge              200 a body of HUGE_BYTES, streamed in 64 KiB chunks (`huge_sent` counts
                       what was written before the reader went away; `huge_done` is set then)
    /redirect          302 to /allow
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

from aiohttp import web

from .threaded_server import Cleanup, ServerThread, serve_aiohttp

SECRET = "CANARY-guard-matched-5c1e"
"""Text the guardrails of the tests match (deny or redact)."""
REASON = "CANARY-guard-reason-a07b"
"""The check service's `reason` field: never in status, Events, logs or metrics."""
REDACTED = "[REDACTED]"
HUGE_BYTES = 64 * 1024 * 1024
WRONG_SHAPES: list[Any] = [
    {"decision": "maybe"},
    {"decision": "redact"},  # redact without the text
    {"decision": "allow", "extra": 1},
    [{"decision": "allow"}],
    {"verdict": "allow"},
    {"decision": "redact", "text": 42},
    "allow",
]


class GuardCheckServer:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.huge_sent = 0
        self.huge_done = threading.Event()
        self._lock = threading.Lock()
        self._thread = ServerThread("guard-check-server")
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def count(self) -> int:
        with self._lock:
            return len(self.requests)

    def bodies(self) -> list[Any]:
        with self._lock:
            return [r["json"] for r in self.requests]

    @staticmethod
    def _verdict(decision: str, text: str | None = None) -> web.Response:
        body: dict[str, Any] = {"decision": decision, "reason": REASON}
        if text is not None:
            body["text"] = text
        return web.json_response(body)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        with self._lock:
            self.requests.append(
                {
                    "path": request.path,
                    "json": body,
                    "headers": {k.lower(): v for k, v in request.headers.items()},
                }
            )
        text = body.get("text", "") if isinstance(body, dict) else ""
        path = request.path
        if path == "/allow":
            return self._verdict("allow")
        if path == "/deny":
            return self._verdict("deny")
        if path == "/redact":
            word = request.query.get("word", SECRET)
            if word in text:
                return self._verdict("redact", text.replace(word, REDACTED))
            return self._verdict("allow")
        if path == "/deny-if":
            return self._verdict("deny" if request.query.get("word", SECRET) in text else "allow")
        if path.startswith("/status/"):
            return web.Response(status=int(path.rsplit("/", 1)[1]), text=f"{REASON} MUST-NOT-LEAK")
        if path == "/garbage":
            return web.Response(text="this is not JSON", content_type="application/json")
        if path.startswith("/shape/"):
            return web.json_response(WRONG_SHAPES[int(path.rsplit("/", 1)[1])])
        if path == "/slow":
            await asyncio.sleep(float(request.query.get("seconds", "5")))
            return self._verdict("allow")
        if path == "/drip":
            return await self._drip(request, float(request.query.get("every", "0.05")))
        if path == "/huge":
            return await self._huge(request)
        if path == "/redirect":
            raise web.HTTPFound("/allow")
        return web.Response(status=404, text="no such route")

    async def _drip(self, request: web.Request, every: float) -> web.StreamResponse:
        payload = json.dumps({"decision": "allow"}).encode() + b" " * 60
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.content_length = len(payload)
        await response.prepare(request)
        try:
            for i in range(len(payload)):
                await response.write(payload[i : i + 1])
                await asyncio.sleep(every)
            await response.write_eof()
        except (ConnectionError, RuntimeError):
            pass  # the client gave up: that is the point
        return response

    async def _huge(self, request: web.Request) -> web.StreamResponse:
        chunk = b" " * 65536
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.content_length = HUGE_BYTES
        try:
            await response.prepare(request)
            while self.huge_sent < HUGE_BYTES:
                await response.write(chunk)
                self.huge_sent += len(chunk)
            await response.write_eof()
        except (ConnectionError, RuntimeError):
            pass
        finally:
            self.huge_done.set()
        return response

    def start(self) -> GuardCheckServer:
        async def setup() -> tuple[int, Cleanup]:
            app = web.Application()
            app.router.add_route("*", "/{tail:.*}", self._handle)
            return await serve_aiohttp(app)

        self.port = self._thread.start(setup)
        return self

    def stop(self) -> None:
        self._thread.stop()

    def __enter__(self) -> GuardCheckServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
