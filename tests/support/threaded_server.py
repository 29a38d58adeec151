"""Serve an asyncio server (aiohttp or uvicorn) from a background thread with its own loop.

The test servers (http tool, MCP, scripted models, the API fault proxy) all need the same
thing: bind a port on 127.0.0.1, return once it is bound (re-raising a startup error in the
caller's thread), serve until `stop()`, then clean up on the server's own loop.

    thread = ServerThread("my-server")
    port = thread.start(lambda: serve_aiohttp(app))
    ...
    thread.stop()
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from aiohttp import web

Cleanup = Callable[[], Awaitable[None]]
Setup = Callable[[], Awaitable[tuple[int, Cleanup]]]
T = TypeVar("T")


class ServerThread:
    """An event loop in a daemon thread that serves until `stop()`."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.loop: asyncio.AbstractEventLoop | None = None
        self.port = 0
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, setup: Setup, timeout: float = 10.0) -> int:
        """Run `setup` (which binds and returns `(port, cleanup)`) on a new loop in a new
        thread; return the port once it is bound. A startup error is raised here."""
        ready = threading.Event()
        errors: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            self.loop = loop
            try:
                self.port, cleanup = loop.run_until_complete(setup())
            except BaseException as exc:  # reported to the starting thread
                errors.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                with contextlib.suppress(Exception):
                    loop.run_until_complete(cleanup())
                loop.close()

        self._thread = threading.Thread(target=run, name=self.name, daemon=True)
        self._thread.start()
        if not ready.wait(timeout):
            raise RuntimeError(f"{self.name} did not start within {timeout:g}s")
        if errors:
            self._thread.join(timeout)
            self._thread = None
            raise errors[0]
        return self.port

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 10.0) -> T:
        """Run a coroutine on the server's loop from another thread; return its result."""
        assert self.loop is not None, "not started"
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self, timeout: float = 10.0) -> None:
        if self.loop is not None and self._thread is not None:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout)
        self._thread = None


async def serve_aiohttp(
    app: web.Application,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    ssl_context: ssl.SSLContext | None = None,
    reuse_address: bool | None = None,
) -> tuple[int, Cleanup]:
    """Start `app` on the running loop; return the bound port and its cleanup."""
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=ssl_context, reuse_address=reuse_address)
    await site.start()
    server = site._server
    assert server is not None
    sockets: Any = getattr(server, "sockets", None)  # asyncio.Server (AbstractServer lacks it)
    bound = int(sockets[0].getsockname()[1])
    return bound, runner.cleanup


async def serve_uvicorn(config: Any) -> tuple[int, Cleanup]:
    """Start a `uvicorn.Server(config)` on the running loop; return the bound port and its
    cleanup (which asks it to exit and waits)."""
    import uvicorn

    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            await task  # raises the startup error
            raise RuntimeError("uvicorn exited before it started")
        await asyncio.sleep(0.01)
    bound = int(server.servers[0].sockets[0].getsockname()[1])

    async def cleanup() -> None:
        server.should_exit = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 10)

    return bound, cleanup
