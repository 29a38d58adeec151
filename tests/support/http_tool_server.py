"""An HTTP tool endpoint on 127.0.0.1 for http-tool tests, recording every request.

Routes (any method):
    /echo            200 JSON: method, path, query (lists), json body, the Host header, and
                     which auth-ish headers were present
    /big?size=N      200 text of N bytes (default 200 KiB); `&char=é` repeats that character
    /status/<code>   that status, with a body that must never reach the model
    /slow?seconds=S  waits, then 200 "slow"
    /redirect        302 to /echo
    /effect          a non-idempotent side effect: counts one execution of the call named by
                     the JSON body's "task" and "call" fields (`effects`, `effects_by_task`);
                     `?delay=S` waits S seconds *after* counting (the effect has happened,
                     the answer is still in flight), then 200 {"ok": true, "executions": n}
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from typing import Any

from aiohttp import web

from .threaded_server import Cleanup, ServerThread, serve_aiohttp


class HttpToolServer:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.effects: Counter[tuple[str, str]] = Counter()
        """Executions of `/effect` by (task, call)."""
        self._lock = threading.Lock()
        self._thread = ServerThread("http-tool-server")
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def count(self) -> int:
        with self._lock:
            return len(self.requests)

    def effects_snapshot(self) -> Counter[tuple[str, str]]:
        """A copy of `effects`, taken under the lock."""
        with self._lock:
            return Counter(self.effects)

    def effects_by_task(self) -> Counter[str]:
        """Executions of `/effect` per task (all its calls together)."""
        out: Counter[str] = Counter()
        for (task, _call), n in self.effects_snapshot().items():
            out[task] += n
        return out

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        body: Any = None
        if raw:
            try:
                body = await request.json()
            except ValueError:
                body = raw.decode("utf-8", "replace")
        record = {
            "method": request.method,
            "path": request.path,
            "query": {k: request.query.getall(k) for k in request.query},
            "json": body,
            "headers": {k.lower(): v for k, v in request.headers.items()},
        }
        with self._lock:
            self.requests.append(record)
        path = request.path
        if path == "/effect":
            fields = body if isinstance(body, dict) else {}
            key = (str(fields.get("task", "")), str(fields.get("call", "")))
            with self._lock:
                self.effects[key] += 1
                executions = self.effects[key]
            delay = float(request.query.get("delay", "0"))
            if delay > 0:
                await asyncio.sleep(delay)
            return web.json_response({"ok": True, "executions": executions})
        if path == "/echo":
            return web.json_response(
                {
                    "method": record["method"],
                    "query": record["query"],
                    "json": body,
                    "host": request.headers.get("Host"),
                }
            )
        if path == "/big":
            size = int(request.query.get("size", 200 * 1024))
            char = request.query.get("char", "x")
            count = size // len(char.encode())
            return web.Response(text=char * count, content_type="text/plain", charset="utf-8")
        if path.startswith("/status/"):
            code = int(path.rsplit("/", 1)[1])
            return web.Response(status=code, text="BODY-THAT-MUST-NOT-LEAK")
        if path == "/slow":
            await asyncio.sleep(float(request.query.get("seconds", "5")))
            return web.Response(text="slow")
        if path == "/redirect":
            raise web.HTTPFound("/echo")
        return web.Response(status=404, text="no such route")

    def start(self) -> HttpToolServer:
        async def setup() -> tuple[int, Cleanup]:
            app = web.Application()
            app.router.add_route("*", "/{tail:.*}", self._handle)
            return await serve_aiohttp(app)

        self.port = self._thread.start(setup)
        return self

    def stop(self) -> None:
        self._thread.stop()

    def __enter__(self) -> HttpToolServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
