"""The runs of this operator process in N supervised worker children (child.py), behind the
Runner's interface: the control process keeps watches, caches, claims, scheduling, health and
metrics; `WorkerPool.run` sends the claimed Task to the child with the fewest runs and returns
what the Runner would (`Finished | Parked | Abandoned`).

- Store reads of a run are served from the store given to `run` (its SecretsReadOnce: a
  Secret is read once per run); the snapshot is not sent, the child resolves through them.
- Metrics: the child sends its counter and histogram increments with each beat, added to
  this process's Metrics (metricsync.py): one exposition, no duplicate series.
- Cancel: a set `cancel` Event is forwarded (`cancel`); a cancelled `run` (shutdown, a
  deleted Task) stops the child's run (`stop`) and waits for it to flush and release.
- Supervision: control beats every `beat_seconds` (validFor: how long this process's Lease
  stays valid, the child's lease liveness); a child beats from its event loop. A child that
  exits, or sends no beat for `stall_seconds`, is SIGKILLed and replaced; each of its runs
  returns `Abandoned`, and the scheduler resumes it from its checkpoint (exactly once: the
  writes are fenced by executionId, the new claim renews it).
- Losses: a Task whose run was on a worker that stalled or died counts one loss
  (`losses(uid)`); when the child's watchdog named the run that held its loop, only that
  run counts (`Abandoned("worker stalled")`), the others return `Abandoned("worker lost:
  stall")` uncounted. A child that exits counts every run it had (the cause is unknown: a
  hostile Task that crashes or exhausts memory must not take every worker in turn)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence

from ...api import Task
from ...runtime import Snapshot
from ...runtime.store import ObjectStore
from ..tasks.claim import Claim
from ..tasks.runner import Abandoned, RunResult
from ..telemetry.metrics import Metrics
from . import protocol
from .children import (
    BEAT_SECONDS,
    CLOSE_SECONDS,
    LOST,
    RESTART_BACKOFF,
    STALL_SECONDS,
    STALLED,
    START_SECONDS,
    STOP_SECONDS,
    WorkerRunError,
    WorkerSettings,
    WorkerStartError,
    _Run,
    _Worker,
    answer_read,
    blame,
    config_message,
    finish,
    forward_cancel,
    ready,
    start_process,
)
from .metricsync import Applier
from .protocol import Message
from .remotestore import READS

__all__ = ["WorkerPool", "WorkerRunError", "WorkerSettings", "WorkerStartError"]

log = logging.getLogger("ordo.operator")


class WorkerPool:
    def __init__(
        self,
        workers: int,
        store: ObjectStore,
        metrics: Metrics,
        settings: WorkerSettings | None = None,
        *,
        valid_for: Callable[[], float] | None = None,
        stall_seconds: float = STALL_SECONDS,
        beat_seconds: float = BEAT_SECONDS,
        start_seconds: float = START_SECONDS,
        command: Sequence[str] | None = None,
        env: Mapping[str, str] | None = None,
        log_format: str = "json",
        log_level: str = "INFO",
    ) -> None:
        """`store` serves the reads of a run given none; `valid_for` is how long this
        process's Lease stays valid (ProcessLease.valid_for; None: taken from a running
        claim's lease, per Task leases are renewed by the children). `command` starts a child
        (default: this Python, `-m ordo.operator.workers.child`)."""
        if workers < 1:
            raise ValueError("a worker pool needs at least one worker")
        self.size = workers
        self.store = store
        self.metrics = metrics
        self.settings = settings or WorkerSettings()
        self.valid_for = valid_for
        self.stall_seconds = stall_seconds
        self.beat_seconds = beat_seconds
        self.start_seconds = start_seconds
        self.command = list(command or [sys.executable, "-m", "ordo.operator.workers.child"])
        self.env = dict(env) if env is not None else None
        self.log_format = log_format
        self.log_level = log_level
        self._applier = Applier(metrics)
        self._workers: dict[int, _Worker] = {}
        self._available = asyncio.Event()
        self._ids = itertools.count(1)
        self._losses: dict[str, int] = {}
        self._supervisor: asyncio.Task[None] | None = None
        self._replacing: set[asyncio.Task[None]] = set()
        self._closing = False
        self.replaced = 0
        """Children started to replace lost ones."""
        self.startup_seconds: float | None = None
        """From `start` until every child said hello (logged in, ready)."""

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        """Start the children and wait until each is ready (logged in: `hello`)."""
        started = time.monotonic()
        try:
            await asyncio.gather(*(self._spawn(i) for i in range(self.size)))
        except BaseException:
            await self.close()
            raise
        self.startup_seconds = time.monotonic() - started
        self._supervisor = asyncio.create_task(self._supervise(), name="ordo-worker-pool")
        log.info(
            "worker processes started",
            extra={
                "ordo": {"workers": self.size, "startupSeconds": round(self.startup_seconds, 2)}
            },
        )

    async def close(self) -> None:
        """End the children: their stdin closes, they stop their runs (flush, release) and
        exit; one that takes longer than CLOSE_SECONDS is killed."""
        self._closing = True
        for task in [self._supervisor, *self._replacing]:
            if task is not None:
                task.cancel()
        workers = list(self._workers.values())
        for worker in workers:  # they stop their runs, whose last reads are still served
            worker.send({"type": "close"})
        for worker in workers:
            try:
                await asyncio.wait_for(worker.proc.wait(), CLOSE_SECONDS)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    worker.proc.kill()
                await worker.proc.wait()
            if worker.proc.stdin is not None:
                worker.proc.stdin.close()
            if worker.reader is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await worker.reader
            self._lose(worker, "closed")

    async def _spawn(self, index: int) -> _Worker:
        proc = await start_process(self.command, self.log_format, self.log_level, self.env)
        loop = asyncio.get_running_loop()
        worker = _Worker(index, proc, time.monotonic(), loop.create_future())
        worker.reader = asyncio.create_task(self._read(worker), name=f"ordo-worker-{index}")
        worker.send(config_message(self.settings, self.beat_seconds, self.stall_seconds))
        try:
            async with asyncio.timeout(self.start_seconds):
                await asyncio.shield(worker.ready)
        except BaseException as exc:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            if isinstance(exc, TimeoutError):
                raise WorkerStartError(
                    f"worker {index} did not start within {self.start_seconds:g}s"
                ) from None
            raise
        self._workers[index] = worker
        self.metrics.workers.set(len(self._workers))
        self._available.set()
        worker.last_beat = time.monotonic()
        worker.send({"type": "beat", "validFor": self._valid_for()})
        return worker

    # -- what control and child say to each other ----------------------------------------

    async def _read(self, worker: _Worker) -> None:
        stdout = worker.proc.stdout
        assert stdout is not None
        why = "exit"
        try:
            while True:
                message = await protocol.read(stdout)
                if message is None:
                    break
                self._handle(worker, message)
        except (ValueError, asyncio.LimitOverrunError, asyncio.IncompleteReadError):
            why = "protocol"
        await worker.proc.wait()
        if not worker.ready.done():
            worker.ready.set_exception(
                WorkerStartError(
                    f"worker {worker.index} exited with {worker.proc.returncode} before it was ready"
                )
            )
        if self._workers.get(worker.index) is worker and not self._closing:
            self._lose(worker, why)

    def _handle(self, worker: _Worker, message: Message) -> None:
        kind = message["type"]
        if metrics := message.get("metrics"):  # a beat's, or a finished run's at once
            self._applier.apply(metrics)
        if kind == "beat":
            worker.last_beat = time.monotonic()
        elif kind in READS:
            run = worker.runs.get(int(message.get("id", -1)))
            read = asyncio.create_task(answer_read(worker, run, message))
            worker.reads.add(read)
            read.add_done_callback(worker.reads.discard)
        elif kind == "done":
            run = worker.runs.get(int(message["id"]))
            if run is not None and not run.result.done():
                finish(run, message)
        elif kind == "stalled":
            blame(worker, int(message["id"]))
        elif kind == "hello":
            ready(worker, message)

    # -- supervision ---------------------------------------------------------------------

    def _valid_for(self) -> float:
        """What control's beats say: how long this process's Lease stays valid."""
        if self.valid_for is not None:
            return max(0.0, self.valid_for())
        for worker in self._workers.values():
            for run in worker.runs.values():
                if run.claim.lease.per_process:
                    return run.claim.lease.expires_in()
        return 0.0

    async def _supervise(self) -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(self.beat_seconds)
            now = time.monotonic()
            # After a stall of this loop the children's beats are still queued unread:
            # judge them on the next tick, not this one.
            late = now - last > 2 * self.beat_seconds + 0.5
            last = now
            valid_for = self._valid_for()
            for worker in list(self._workers.values()):
                worker.send({"type": "beat", "validFor": valid_for})
                if not late and now - worker.last_beat > self.stall_seconds:
                    self._lose(worker, "stall")

    def _lose(self, worker: _Worker, why: str) -> None:
        """`worker` is gone (`exit`, `protocol`), stalled or closed: kill it, end its runs,
        replace it."""
        if worker.lost is not None:
            return
        worker.lost = why
        if worker.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                worker.proc.send_signal(signal.SIGKILL)
        if self._workers.get(worker.index) is worker:
            del self._workers[worker.index]
            self.metrics.workers.set(len(self._workers))
        if not self._workers:
            self._available.clear()
        for read in worker.reads:
            read.cancel()
        blamed = worker.blamed & set(worker.runs)
        for run in worker.runs.values():
            if run.result.done():
                continue
            if why == "closed":
                run.result.set_result(Abandoned("the worker pool closed"))
                continue
            counted = not blamed or run.id in blamed
            if counted:
                self._losses[run.uid] = self._losses.get(run.uid, 0) + 1
            if why == "stall" and counted:
                run.result.set_result(Abandoned(STALLED))
            else:
                run.result.set_result(Abandoned(f"{LOST}: {why}"))
        if why == "closed":
            return
        self.metrics.worker_restarts.labels("stalled" if why == "stall" else "exited").inc()
        log.warning(
            "worker lost; its runs resume from their checkpoints",
            extra={
                "ordo": {
                    "workerPid": worker.pid,
                    "reason": why,
                    "exitCode": worker.proc.returncode,
                    "runs": len(worker.runs),
                    "blamed": len(blamed),
                }
            },
        )
        if not self._closing:
            task = asyncio.create_task(self._replace(worker.index))
            self._replacing.add(task)
            task.add_done_callback(self._replacing.discard)

    async def _replace(self, index: int) -> None:
        delay, longest = RESTART_BACKOFF
        while not self._closing:
            try:
                await self._spawn(index)
                self.replaced += 1
                return
            except (WorkerStartError, OSError) as exc:
                log.error(
                    "a worker could not be started; trying again",
                    extra={"ordo": {"error": str(exc), "retryInSeconds": delay}},
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, longest)

    # -- the Runner's interface ----------------------------------------------------------

    async def _pick(self) -> _Worker:
        while True:
            ready = [w for w in self._workers.values() if w.lost is None]
            if ready:
                return min(ready, key=lambda w: (len(w.runs), w.index))
            self._available.clear()
            await self._available.wait()

    async def run(
        self,
        claim: Claim,
        task: Task,
        cancel: asyncio.Event,
        store: ObjectStore | None = None,
        snapshot: Snapshot | None = None,
    ) -> RunResult:
        """Run the claimed Task in a worker (the Runner's contract). `snapshot` is not sent:
        the child resolves the Task through `store` (module docstring)."""
        if self._closing:
            return Abandoned("the worker pool closed")
        worker = await self._pick()
        run = _Run(
            next(self._ids),
            str(claim.body["metadata"]["uid"]),
            store or self.store,
            claim,
            asyncio.get_running_loop().create_future(),
        )
        worker.runs[run.id] = run
        lease = claim.lease
        worker.send(
            {
                "type": "run",
                "id": run.id,
                "body": claim.body,
                "executionId": claim.execution_id,
                "resuming": claim.resuming,
                "holder": lease.holder,
                "duration": lease.duration,
                "holderLease": lease.holder_lease,
                "leaseLeft": lease.expires_in(),
                "validFor": self._valid_for(),
            }
        )
        forward = asyncio.create_task(forward_cancel(worker, run.id, cancel))
        try:
            return await asyncio.shield(run.result)
        except asyncio.CancelledError:
            if not run.result.done():
                worker.send({"type": "stop", "id": run.id})
                with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                    await asyncio.wait_for(asyncio.shield(run.result), STOP_SECONDS)
            raise
        finally:
            forward.cancel()
            worker.runs.pop(run.id, None)
            worker.blamed.discard(run.id)

    # -- for the scheduler ---------------------------------------------------------------

    def losses(self, uid: str) -> int:
        """How many times a run of Task `uid` was on a worker that stalled (blamed) or died."""
        return self._losses.get(uid, 0)

    def forget(self, uid: str) -> None:
        """The Task ended or is gone: drop its count."""
        self._losses.pop(uid, None)

    def pids(self) -> list[int]:
        """The process ids of the ready children, by index."""
        return [self._workers[i].pid for i in sorted(self._workers)]

    def runs(self) -> int:
        return sum(len(w.runs) for w in self._workers.values())
