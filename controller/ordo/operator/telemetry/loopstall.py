"""How late the control process's event loop runs: a tick every TICK_SECONDS measures how
much later than asked it woke (`ordo_event_loop_stall_seconds`). The watches, the process
Lease's renewals and /healthz all wait on this loop; with the runs in worker processes
(operator/workers/) nothing a run computes can hold it."""

from __future__ import annotations

import asyncio

from .metrics import Metrics

TICK_SECONDS = 0.1


class LoopStall:
    def __init__(self, metrics: Metrics, tick: float = TICK_SECONDS) -> None:
        self.metrics = metrics
        self.tick = tick
        self.longest = 0.0
        """The longest lateness seen (seconds), for benchmarks and logs."""
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="ordo-loop-stall")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            asked = loop.time() + self.tick
            await asyncio.sleep(self.tick)
            late = max(0.0, loop.time() - asked)
            self.longest = max(self.longest, late)
            self.metrics.loop_stall.observe(late)
