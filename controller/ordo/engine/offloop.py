"""Work on untrusted data that may take longer than the event loop can wait: run in a daemon
thread, a bounded number at a time, within a deadline that fails closed.

The event loop holds every run of the process (and, in the operator, every lease and the
health endpoint), so nothing on it may take more than ~100 ms (docs/security.md). Work whose
worst case is longer — RE2 over a large text with a large pattern (RE2 releases the GIL), a
JSON Schema validation of a large value (pure Python: the thread and the loop share the GIL,
which Python hands over every 5 ms, so the loop keeps turning) — runs here instead. Past the
deadline (waiting for a free thread included) the awaiting coroutine gets `TimeoutError` and
the caller fails closed; the thread is told to stop (`stop` is set) and its own bound (a work
budget, the pattern it is in) ends it. Threads are daemons: they never delay the process's exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

SLOT_POLL_SECONDS = 0.005
"""How often a caller waiting for a free thread looks again."""


class OffLoop:
    """At most `threads` pieces of work at a time, each within `seconds` of its call."""

    def __init__(self, name: str, *, threads: int, seconds: float) -> None:
        self.name = name
        self.threads = threads
        self.seconds = seconds
        self._slots = threading.BoundedSemaphore(threads)

    async def run(self, work: Callable[[threading.Event], T]) -> T:
        """`work(stop)` in a daemon thread; raises TimeoutError past the deadline (and sets
        `stop` for the thread to give up), or whatever `work` raised."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        stop = threading.Event()

        def settle(result: T | None, error: BaseException | None) -> None:
            if future.done():
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)  # type: ignore[arg-type]

        def run() -> None:
            try:
                result, error = work(stop), None
            except BaseException as exc:  # handed to the awaiting coroutine
                result, error = None, exc
            finally:
                self._slots.release()
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
                loop.call_soon_threadsafe(settle, result, error)

        try:
            async with asyncio.timeout(self.seconds):
                while not self._slots.acquire(blocking=False):
                    await asyncio.sleep(SLOT_POLL_SECONDS)
                threading.Thread(target=run, name=self.name, daemon=True).start()
                return await future
        finally:
            stop.set()


__all__ = ["OffLoop"]
