"""Coalesced run writes: which checkpoints and progress patches a run makes, and when.

The engine asks for a checkpoint (`Checkpoint`) before every non-idempotent tool call and at
the end of every step, and reports each finished tool call (`ToolFinished`) and step
(`StepFinished`). Writing each of those costs two or three API requests per step; this
listener writes

- **at once, and awaited,** the checkpoint before a non-idempotent call (the state records the
  call as started). This is the write exactly-once depends on: the call starts only after it
  landed and the execution lease was checked;
- **at once, and awaited,** the end-of-step checkpoint of a step in which a non-idempotent
  call ran in this execution (its `ToolFinished`, and its id in `started_calls`): the result
  is durable before the next model call is sent (one round trip before a call that takes
  seconds), so a crash during that model call resumes the run instead of ending it. The lease
  is checked after it too. A failed write (an API error after the client's retries) is logged
  and the run goes on: the call ran, and a crash later ends `Interrupted` as it would have;
- **at most once per flush window** (`flush_seconds` after a step ended, if nothing newer was
  written meanwhile) the end-of-step checkpoint of the other steps, and then the progress
  patch of the Task's status (of every step), in that order, from a copy of the state taken at
  the step boundary. A run whose steps are fast writes neither: its terminal status carries
  the progress.

What a restart costs: a SIGKILL inside a non-idempotent call, or after it and before its
result's checkpoint was acknowledged, resumes from the checkpoint that records the call as
started without a result, so the Task ends `Failed/Interrupted` (the call is never repeated);
a SIGKILL at any moment after that write resumes from it. Steps with idempotent calls only are
lost up to the window and simply run again. Results loaded from a checkpoint are durable
already: only calls that finished in this execution trigger a write. `status.step > 0` is
only ever written after a checkpoint of at least that step, so "progress in the status but no
checkpoint" still means the checkpoint was lost (the run ends `Interrupted`), and "no
checkpoint, no progress" means nothing non-idempotent ran: starting over is safe.

All checkpoint writes of a run go through one lock, in the order the states were taken, so an
older state never overwrites a newer one. The flush runs beside the loop; `close()` (the run
ended) cancels a flush that has not started and waits for one in flight, so a progress patch
never lands after the terminal status.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable

from ...engine.events import Checkpoint, Event, RunFinished, StepFinished, ToolFinished
from ...engine.state import RunState
from ...engine.transcript import AssistantMessage, ToolResult
from ...errors import LeaseLost, OrdoError
from ..kube.client import ApiError
from .checkpoint import CheckpointStore, encode
from .lease import ExecutionLease

FLUSH_SECONDS = 2.0
"""Default flush window: how long a finished step may stay unwritten."""

log = logging.getLogger("ordo.operator")

ProgressWrite = Callable[[RunState], Awaitable[None]]


def side_effect_pending(state: RunState) -> bool:
    """True if a non-idempotent call of the last model response is recorded as started and has
    no result yet: the checkpoint the engine asks for now must land before the call starts."""
    if not state.started_calls:
        return False
    answered: set[str] = set()
    for item in reversed(state.items):
        if isinstance(item, ToolResult):
            answered.add(item.call_id)
        elif isinstance(item, AssistantMessage):
            return any(
                c.id in state.started_calls and c.id not in answered for c in item.tool_calls
            )
    return False


def copy_state(state: RunState) -> RunState:
    """A copy that later steps do not change (items and records are immutable values)."""
    return dataclasses.replace(
        state,
        items=list(state.items),
        records=list(state.records),
        used_tools=set(state.used_tools),
        started_calls=set(state.started_calls),
        seen_ids=set(state.seen_ids),
        approvals=dict(state.approvals),
        children=dict(state.children),
        remote_tasks=dict(state.remote_tasks),
    )


class RunWrites:
    """A run listener that writes the run's checkpoints and progress, coalesced (see the
    module docstring). `progress` writes one progress patch of the Task's status."""

    def __init__(
        self,
        checkpoints: CheckpointStore,
        progress: ProgressWrite,
        *,
        lease: ExecutionLease | None = None,
        flush_seconds: float = FLUSH_SECONDS,
    ) -> None:
        self._checkpoints = checkpoints
        self._progress = progress
        self._lease = lease
        self._flush_seconds = flush_seconds
        self._lock = asyncio.Lock()
        self._taken = 0
        """Sequence number of the newest state taken (a checkpoint or a boundary copy)."""
        self._written = 0
        """Sequence number of the newest state written to the checkpoint."""
        self._boundary: tuple[int, RunState] | None = None
        """The last step boundary not flushed yet."""
        self._flush: asyncio.Task[None] | None = None
        self._flushing = False
        self._failure: LeaseLost | None = None
        """A flush's failure that must stop the run (raised at its next event)."""
        self._finished_calls: set[str] = set()
        """Ids of the calls that finished in this execution since the last step boundary
        written at once (the non-idempotent ones among them are in `started_calls`)."""
        self.flushes = 0

    async def __call__(self, event: Event) -> None:
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise failure
        if isinstance(event, Checkpoint):
            if side_effect_pending(event.state):
                await self._save(event.state)
                if self._lease is not None:
                    self._lease.check()
        elif isinstance(event, ToolFinished):
            if event.call_id:
                self._finished_calls.add(event.call_id)
        elif isinstance(event, StepFinished):
            self._taken += 1
            self._boundary = (self._taken, copy_state(event.state))
            self._finished_calls &= event.state.started_calls
            if self._flush_seconds <= 0:
                await self._write_boundary()
                self._finished_calls.clear()
            elif self._finished_calls:
                await self._write_results(self._boundary)
            if self._boundary is not None and self._flush is None:
                self._flush = asyncio.create_task(self._flush_later())
        elif isinstance(event, RunFinished):
            await self.close()
            if self._failure is not None:
                failure, self._failure = self._failure, None
                raise failure

    async def _save(self, state: RunState) -> None:
        async with self._lock:
            self._taken += 1
            seq = self._taken
            # Anchored in the status before the call starts: no older copy resumes (checkpoint.py).
            await self._checkpoints.save_encoded(encode(state), anchor=True)
            self._written = max(self._written, seq)

    async def _write_results(self, boundary: tuple[int, RunState]) -> None:
        """Write the boundary's checkpoint now: it holds a non-idempotent call's result (see
        the module docstring). Its progress patch is left to the flush."""
        try:
            await self._write_checkpoint(*boundary)
        except ApiError as exc:  # after the client's retries: a crash now ends Interrupted
            log.warning(
                "checkpoint of a non-idempotent call's result failed; the run goes on",
                extra={"ordo": {"errorStatus": exc.status, "errorReason": exc.api_reason}},
            )
            return
        except LeaseLost:
            raise  # Fenced: another execution owns the Task
        except OrdoError as exc:  # e.g. CheckpointTooLarge: the next save says so
            log.warning("checkpoint of a result failed", extra={"ordo": {"error": exc.reason}})
            return
        self._finished_calls.clear()
        if self._lease is not None:
            self._lease.check()

    async def _flush_later(self) -> None:
        """Flush the newest step boundary `flush_seconds` after it was taken, until none is
        left (a step that finished during a flush gets a window of its own)."""
        try:
            while self._boundary is not None:
                await asyncio.sleep(self._flush_seconds)
                self._flushing = True
                try:
                    await self._write_boundary()
                except ApiError as exc:  # best effort: a later flush or the end carries it
                    log.warning(
                        "progress flush failed",
                        extra={"ordo": {"errorStatus": exc.status, "errorReason": exc.api_reason}},
                    )
                except LeaseLost as exc:  # Fenced: another execution owns the Task
                    self._failure = exc
                    return
                except OrdoError as exc:  # e.g. CheckpointTooLarge: the next save says so
                    log.warning("checkpoint flush failed", extra={"ordo": {"error": exc.reason}})
                finally:
                    self._flushing = False
        finally:
            self._flush = None

    async def _write_boundary(self) -> None:
        boundary, self._boundary = self._boundary, None
        if boundary is None:
            return
        await self._write_checkpoint(*boundary)
        # Progress only after a checkpoint of at least this step exists (see above).
        await self._progress(boundary[1])
        self.flushes += 1

    async def _write_checkpoint(self, seq: int, state: RunState) -> None:
        """Write the state taken as `seq` unless a newer one was written meanwhile."""
        async with self._lock:
            if seq > self._written:
                await self._checkpoints.save_encoded(encode(state))
                self._written = seq

    async def close(self, *, flush: bool = False) -> None:
        """The run ended: drop a flush that has not started, wait for one in flight. With
        `flush` (the run was stopped, e.g. by a shutdown, and will be resumed), write the
        pending step boundary now instead of dropping it (best effort)."""
        pending, self._flush = self._flush, None
        if pending is not None:
            if not self._flushing:
                pending.cancel()
            await asyncio.gather(pending, return_exceptions=True)
        if flush and self._boundary is not None:
            try:
                await self._write_boundary()
            except Exception as exc:  # fenced, lease lost, API down: resume from the last one
                log.warning("final flush failed", extra={"ordo": {"error": type(exc).__name__}})
