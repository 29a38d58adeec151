"""An HTTP tool endpoint on 127.0.0.1 for http-tool tests, recording every request.

Routes (any method):
    /echo            200 JSON: method, path, query (lists), json body, the Host header, and
                     which auth-ish headers were present
    /big?size=N      200 text of N bytes (default 200 KiB); `&char=é` repeats that character
    /status/<code>   that status, with a body that must never reach the model
    /slow?seconds=S  waits, then 200 "slow"
    /redirect        302 to /echo
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from aiohttp import web


class HttpToolServer:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def count(self) -> int:
        with self._lock:
            return len(self.requests)

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
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            app = web.Application()
            app.router.add_route("*", "/{tail:.*}", self._handle)
            runner = web.AppRunner(app, access_log=None, handle_signals=False)
            loop.run_until_complete(runner.setup())
            site = web.TCPSite(runner, "127.0.0.1", 0)
            loop.run_until_complete(site.start())
            server = site._server
            assert server is not None
            self.port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            ready.set()
            loop.run_forever()
            loop.run_until_complete(runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=run, name="http-tool-server", daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._thread = None

    def __enter__(self) -> HttpToolServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
