"""An HTTP tool endpoint on 127.0.0.1 for http-tool tests, recording every request.

Routes (any method):
    /echo            200 JSON: method, path, query (lists), json body, the Host header, and
                     which auth-ish headers were present
    /big?size=N      200 text of N bytes (default 200 KiB); `&char=é` repeats that character
    /status/<code>   that status, with a body that must never reach the model
    /slow?seconds=S  waits, then 200 "slow"
    /redirect        302 to /echo (`?to=URL`: to that URL)
    /drip?seconds=S  200 headers at once, then one byte every 50 ms for S seconds
    /endless         200 text, 64 KiB chunks until the reader leaves (`endless_done` is set then)
    /set-cookie      200, with a `Set-Cookie` header
    /then-close      200 "ok" over a keep-alive connection, which the server closes 100 ms later
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
        self.endless_done = threading.Event()
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
            raise web.HTTPFound(request.query.get("to", "/echo"))
        if path == "/drip":
            return await self._drip(request, float(request.query.get("seconds", "3")))
        if path == "/endless":
            return await self._endless(request)
        if path == "/set-cookie":
            response = web.Response(text="ok")
            response.set_cookie("session", "TOOL-COOKIE")
            return response
        if path == "/then-close":
            transport = request.transport
            if transport is not None:
                asyncio.get_running_loop().call_later(0.1, transport.close)
            return web.Response(text="ok")
        return web.Response(status=404, text="no such route")

    @staticmethod
    async def _drip(request: web.Request, seconds: float) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        try:
            while loop.time() < end:
                await response.write(b"x")
                await asyncio.sleep(0.05)
            await response.write_eof()
        except (ConnectionError, RuntimeError):
            pass
        return response

    async def _endless(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        try:
            await response.prepare(request)
            while True:
                await response.write(b"y" * 65536)
        except (ConnectionError, RuntimeError):
            self.endless_done.set()
        return response

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
