"""A worker child: `python -m ordo.operator.workers.child`, started and supervised by the
control process (pool.py), speaking protocol.py on stdin/stdout; its JSON log lines go to
stderr (inherited: the pod log).

It never outlives its control process: PR_SET_PDEATHSIG=SIGKILL (Linux), a check that the
parent is still the one that started it, and an exit when stdin ends. It logs in and builds
its own KubeClient, TaskWriter, Metrics and Runner (with the scheduler's settings from the
`config` message), and runs each `run` with a RemoteStore whose reads control serves from
that run's store. The Claim is rebuilt here: the execution lease is the process's (its
liveness is control's heartbeat, `Heartbeat.valid_for`) when control's claim named a holder
Lease, else this child renews the Task's own lease.

Beats come from the event loop, so a run that holds the loop stops them and control kills
this child after its stall bound; a watchdog thread names the run that holds the loop
(`stalled`) before that, so control blames that run only."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import contextvars
import ctypes
import importlib
import logging
import os
import signal
import sys
import threading
import time
import weakref
from typing import IO, Any

from ...api import Task
from ...runtime import tracing
from ..kube.client import ApiError
from ..tasks.claim import Claim
from ..tasks.lease import ExecutionLease, valid_until
from ..tasks.runner import Abandoned, Finished, Parked
from ..telemetry import logs
from . import protocol
from .engine import Engine, EngineFactory, Heartbeat, build_engine
from .metricsync import Deltas
from .protocol import Message
from .remotestore import RemoteStore

log = logging.getLogger("ordo.operator")

PR_SET_PDEATHSIG = 1
STOP_SECONDS = 10.0
"""At the end of stdin, how long the runs may take to stop (flush, release) before exit."""

RUN_ID: contextvars.ContextVar[int | None] = contextvars.ContextVar("ordo_worker_run", default=None)
"""The run (control's id) whose code an asyncio task runs: every task a run creates inherits it."""


class Child:
    def __init__(self, out: IO[bytes], factory: EngineFactory = build_engine) -> None:
        self._out = out
        self._lock = threading.Lock()
        self._factory = factory
        self.heartbeat = Heartbeat()
        self.engine: Engine | None = None
        self._runs: dict[int, asyncio.Task[None]] = {}
        self._cancels: dict[int, asyncio.Event] = {}
        self._stores: dict[int, RemoteStore] = {}
        self._leases: dict[int, ExecutionLease] = {}
        self._deltas: Deltas | None = None
        """The runs' leases that live as long as control's heartbeat says."""
        self._guard_wake = asyncio.Event()
        self.heartbeat.earlier = self._guard_wake.set
        self._task_runs: weakref.WeakKeyDictionary[asyncio.Task[Any], int] = (
            weakref.WeakKeyDictionary()
        )
        self._beats = 0.0
        """When the loop last beat (monotonic): the watchdog's view of the loop."""
        self._beat_seconds = 1.0
        self._stall_seconds = 10.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closing = threading.Event()

    def send(self, message: Message) -> None:
        data = protocol.encode(message)
        with self._lock:
            try:
                self._out.write(data)
                self._out.flush()
            except (BrokenPipeError, ValueError):  # control is gone: stdin ends next
                pass

    # -- the loop ------------------------------------------------------------------------

    async def serve(self, reader: asyncio.StreamReader) -> None:
        loop = self._loop = asyncio.get_running_loop()
        loop.set_task_factory(self._task_factory)
        first = await protocol.read(reader)
        if first is None:
            return
        if first["type"] != "config":
            raise ValueError("a worker's first message must be its config")
        self._beat_seconds = float(first.get("beatSeconds", 1.0))
        self._stall_seconds = float(first.get("stallSeconds", 10.0))
        started = time.monotonic()
        self.engine = await self._factory(first)
        self._beats = time.monotonic()
        self.send(
            {"type": "hello", "pid": os.getpid(), "seconds": round(time.monotonic() - started, 3)}
        )
        self._deltas = Deltas(self.engine.metrics)
        beats = asyncio.create_task(self._beat(self._deltas))
        guard = asyncio.create_task(self._guard())
        watchdog = threading.Thread(target=self._watch, name="ordo-worker-watchdog", daemon=True)
        watchdog.start()
        try:
            while True:
                message = await protocol.read(reader)
                if message is None or message["type"] == "close":
                    break
                self._handle(message)
            if message is not None:  # `close`: control still serves the stopping runs' reads
                self._closing.set()
                reading = asyncio.create_task(self._read_on(reader))
                await self._stop_runs()
                reading.cancel()
        finally:
            self._closing.set()
            await self._stop_runs()
            for task in (beats, guard):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await self.engine.close()

    def _task_factory(
        self, loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any
    ) -> asyncio.Task[Any]:
        task: asyncio.Task[Any] = asyncio.Task(coro, loop=loop, **kwargs)
        context = kwargs.get("context")
        run_id = context.get(RUN_ID) if context is not None else RUN_ID.get()
        if run_id is not None:
            self._task_runs[task] = run_id
        return task

    async def _beat(self, deltas: Deltas) -> None:
        while True:
            self._beats = time.monotonic()
            message: Message = {"type": "beat", "runs": len(self._runs)}
            changed = deltas.take()
            if changed:
                message["metrics"] = changed
            self.send(message)
            await asyncio.sleep(self._beat_seconds)

    async def _guard(self) -> None:
        """Declare the per-process leases lost once control's heartbeat lapses. A lease's
        `keep` waits for the validity it last saw; a beat that shortens it wakes this."""
        while True:
            left = self.heartbeat.valid_for()
            if left <= 0:
                for lease in self._leases.values():  # their `keep` may wait on a longer one
                    lease.lose("the control process's heartbeat lapsed")
            self._guard_wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left if left > 0 else None):
                    await self._guard_wake.wait()

    def _watch(self) -> None:
        """The watchdog thread: when the loop has not beaten for half the stall bound, say
        which run's code holds it (once per stall)."""
        reported = False
        interval = max(0.05, self._stall_seconds / 20)
        while not self._closing.wait(interval):
            late = time.monotonic() - self._beats > max(
                self._stall_seconds / 2, 2 * self._beat_seconds
            )
            if not late:
                reported = False
                continue
            if reported or self._loop is None:
                continue
            with contextlib.suppress(Exception):  # a racy read of another thread's state
                task = asyncio.current_task(self._loop)
                run_id = self._task_runs.get(task) if task is not None else None
                if run_id is not None:
                    self.send({"type": "stalled", "id": run_id})
                    reported = True

    def _handle(self, message: Message) -> None:
        kind = message["type"]
        if kind == "beat":
            self.heartbeat.beat(float(message.get("validFor", 0.0)))
        elif kind == "got":
            store = self._stores.get(int(message.get("id", -1)))
            if store is not None:
                store.answer(message)
        elif kind == "run":
            run_id = int(message["id"])
            if "validFor" in message:
                self.heartbeat.beat(float(message["validFor"]))
            self._cancels[run_id] = asyncio.Event()
            run = asyncio.create_task(self._run(run_id, message), name=f"ordo-worker-run-{run_id}")
            self._task_runs[run] = run_id  # the tasks it creates inherit RUN_ID
            self._runs[run_id] = run
        elif kind == "cancel":
            cancel = self._cancels.get(int(message["id"]))
            if cancel is not None:
                cancel.set()
        elif kind == "stop":
            stopping = self._runs.get(int(message["id"]))
            if stopping is not None:
                stopping.cancel()

    async def _read_on(self, reader: asyncio.StreamReader) -> None:
        while (message := await protocol.read(reader)) is not None:
            self._handle(message)

    async def _stop_runs(self) -> None:
        runs = list(self._runs.values())
        for run in runs:
            run.cancel()
        if runs:
            await asyncio.wait(runs, timeout=STOP_SECONDS)

    # -- one run -------------------------------------------------------------------------

    def claim_of(self, message: Message) -> Claim:
        """The Claim control made, rebuilt: the same executionId and holder; the lease is this
        process's heartbeat when control's named a holder Lease, else it is renewed here, and
        trusted from the moment control's own view of it says (`leaseLeft`)."""
        assert self.engine is not None
        body = message["body"]
        holder_lease = message.get("holderLease")
        lease = ExecutionLease(
            self.engine.client,
            body,
            str(message["holder"]),
            float(message["duration"]),
            str(message["executionId"]),
            liveness=self.heartbeat.valid_for if holder_lease else None,
            holder_lease=holder_lease,
        )
        left = float(message.get("leaseLeft", 0.0))
        held_for = valid_until(0.0, lease.duration, lease.lease_seconds, lease.safety_margin)
        lease.held_since(lease.clock() - max(0.0, held_for - left))
        return Claim(body, str(message["executionId"]), lease, bool(message.get("resuming")))

    async def _run(self, run_id: int, message: Message) -> None:
        assert self.engine is not None
        RUN_ID.set(run_id)
        store = RemoteStore(lambda read: self.send({**read, "id": run_id}))
        self._stores[run_id] = store
        done: Message = {"type": "done", "id": run_id}
        try:
            claim = self.claim_of(message)
            if claim.lease.per_process:
                self._leases[run_id] = claim.lease
            meta = claim.body["metadata"]
            logs.bind(namespace=meta.get("namespace"), task=meta.get("name"))
            task = Task.model_validate(claim.body)
            result = await self.engine.runner.run(claim, task, self._cancels[run_id], store, None)
            match result:
                case Finished():
                    done["result"] = "finished"
                case Parked(approvals=approvals, children=children):
                    done.update(result="parked", approvals=approvals, children=children)
                case Abandoned(why=why):
                    done.update(result="abandoned", why=why)
        except asyncio.CancelledError:
            done.update(result="abandoned", why="stopped")
        except ApiError as exc:
            text = str(exc).removeprefix(f"{exc.status} {exc.api_reason}: ")
            done.update(result="error", apiError=[exc.status, exc.api_reason, text])
        except Exception as exc:
            log.exception("a run failed in the worker")
            done.update(result="error", errorType=type(exc).__name__, message=str(exc)[:500])
        finally:
            store.fail_all("the run ended")
            self._stores.pop(run_id, None)
            self._leases.pop(run_id, None)
            self._cancels.pop(run_id, None)
            self._runs.pop(run_id, None)
        if self._deltas is not None and (changed := self._deltas.take()):
            done["metrics"] = changed  # the run's counts land with its result, not a beat later
        self.send(done)


def die_with_parent(parent: int | None) -> None:
    """SIGKILL this process when its parent exits (Linux prctl), and exit now if the parent
    that started it is already gone (it died before the prctl)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            log.warning("PR_SET_PDEATHSIG failed (errno %s)", ctypes.get_errno())
    except (OSError, AttributeError):
        log.warning("PR_SET_PDEATHSIG is not available: the worker exits when stdin ends")
    if parent is not None and os.getppid() != parent:
        os._exit(1)


def _factory(path: str | None) -> EngineFactory:
    """`module:function` (a test engine), else the real one."""
    if not path:
        return build_engine
    module, _, name = path.partition(":")
    found: EngineFactory = getattr(importlib.import_module(module), name)
    return found


async def _main(factory: EngineFactory) -> None:
    # The protocol owns fd 1; anything else printed goes to stderr (the pod log).
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=protocol.STREAM_LIMIT)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin.buffer)
    await Child(out, factory).serve(reader)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="ordo-worker")
    parser.add_argument("--parent", type=int, default=None)
    parser.add_argument("--log-format", default="json")
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument("--engine", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    logs.configure(args.log_format, args.log_level.upper())
    if problem := tracing.configure_or_explain("ordo-operator"):  # the runs' spans
        log.error(problem)
        raise SystemExit(2)
    die_with_parent(args.parent)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # control ends it (stdin), not the pod's TERM
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        asyncio.run(_main(_factory(args.engine)))
    finally:
        tracing.shutdown()  # export what is buffered


if __name__ == "__main__":
    main()
