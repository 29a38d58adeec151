"""An event-loop stall watchdog for tests.

    async with StallWatchdog() as watchdog:
        await code_under_test()
    assert watchdog.longest < 1.0, watchdog.report()

A heartbeat task on the running loop sleeps `interval` (10 ms) at a time and records how late
each tick is; `longest` is the longest gap between two ticks (or between the last tick and the
end of the block), which is at least as long as the longest time any one callback held the
loop. Synchronous CPU work inside the block (a backtracking regex, a deep recursion) shows up
as one long gap even if it never awaits: the gap is measured when the block exits.
"""

from __future__ import annotations

import asyncio
import time
from types import TracebackType


class StallWatchdog:
    """Measures the longest event-loop stall while the `async with` block runs."""

    def __init__(self, interval: float = 0.01) -> None:
        self.interval = interval
        self.longest = 0.0
        self.ticks = 0
        self._last = 0.0
        self._task: asyncio.Task[None] | None = None

    def _gap(self) -> None:
        now = time.perf_counter()
        self.longest = max(self.longest, now - self._last)
        self._last = now

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            self._gap()
            self.ticks += 1

    async def __aenter__(self) -> StallWatchdog:
        self._last = time.perf_counter()
        self._task = asyncio.get_running_loop().create_task(self._beat())
        await asyncio.sleep(0)  # let the heartbeat start before the block runs
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._gap()  # a block that never yielded is one long stall
        assert self._task is not None
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # the block itself is being cancelled: do not swallow that
        self._task = None

    def report(self) -> str:
        return f"longest event-loop stall {self.longest:.3f}s over {self.ticks} heartbeats"
