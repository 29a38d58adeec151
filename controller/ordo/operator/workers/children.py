"""The control process's side of one worker child (pool.py): the child, its runs, what
ends them, and the pool's settings and limits."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ...runtime.store import ObjectStore
from ..kube.client import ApiError
from ..tasks import sealing
from ..tasks.claim import Claim
from ..tasks.coalesce import FLUSH_SECONDS
from ..tasks.runner import Abandoned, Finished, Parked, RunResult
from . import protocol
from .protocol import Message
from .remotestore import serve

log = logging.getLogger("ordo.operator")

STALL_SECONDS = 10.0
BEAT_SECONDS = 1.0
START_SECONDS = 60.0
"""How long a child may take to log in and say hello."""
STOP_SECONDS = 15.0
"""How long a stopped run may take to flush and release in its child."""
CLOSE_SECONDS = 20.0
"""At close (`close` message), how long the children may take to stop their runs and exit."""
RESTART_BACKOFF = (1.0, 30.0)
"""First and longest delay between attempts to replace a lost child that fails to start."""
LOST = "worker lost"
STALLED = "worker stalled"


class WorkerStartError(RuntimeError):
    """A worker child exited or did not say hello in time."""


class WorkerRunError(RuntimeError):
    """A run raised in its worker (its type and message, never a body)."""


@dataclass(frozen=True)
class WorkerSettings:
    """What each child's Runner is built with (the scheduler's arguments to its Runner)."""

    keep_checkpoints: bool = False
    approval_timeout: float | None = None
    max_delegation_depth: int | None = None
    flush_seconds: float = FLUSH_SECONDS
    max_connections: int = 16


@dataclass
class _Run:
    id: int
    uid: str
    store: ObjectStore
    claim: Claim
    result: asyncio.Future[RunResult]


@dataclass
class _Worker:
    index: int
    proc: asyncio.subprocess.Process
    spawned: float
    ready: asyncio.Future[Message]
    runs: dict[int, _Run] = field(default_factory=dict)
    last_beat: float = 0.0
    blamed: set[int] = field(default_factory=set)
    lost: str | None = None
    reader: asyncio.Task[None] | None = None
    reads: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def send(self, message: Message) -> None:
        stdin = self.proc.stdin
        if stdin is None or self.lost is not None or stdin.is_closing():
            return
        with contextlib.suppress(ConnectionError, RuntimeError):
            stdin.write(protocol.encode(message))


def finish(run: _Run, message: Message) -> None:
    """End `run` with what its child's `done` says."""
    result = message.get("result")
    if result == "finished":
        run.result.set_result(Finished())
    elif result == "parked":
        run.result.set_result(
            Parked(message.get("approvals") is not False, message.get("children") is True)
        )
    elif result == "abandoned":
        run.result.set_result(Abandoned(str(message.get("why") or "abandoned in its worker")))
    elif "apiError" in message:
        status, reason, text = message["apiError"]
        run.result.set_exception(ApiError(int(status), str(reason), str(text)))
    else:
        run.result.set_exception(
            WorkerRunError(f"{message.get('errorType')}: {message.get('message')}")
        )


async def start_process(
    command: Sequence[str], log_format: str, log_level: str, env: Mapping[str, str] | None
) -> asyncio.subprocess.Process:
    """A child: stdin and stdout are the protocol's pipes; stderr (its logs) is inherited."""
    return await asyncio.create_subprocess_exec(
        *command,
        "--parent",
        str(os.getpid()),
        "--log-format",
        log_format,
        "--log-level",
        log_level,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        limit=protocol.STREAM_LIMIT,
        env=env,
    )


def config_message(settings: WorkerSettings, beat_seconds: float, stall_seconds: float) -> Message:
    """A child's first message: what its Runner is built with, and its beat and stall."""
    keyring = sealing.current()
    return {
        "type": "config",
        "keepCheckpoints": settings.keep_checkpoints,
        # The process's checkpoint keyring: a child seals and opens what its control does.
        "checkpointKeys": sealing.export(keyring),
        "checkpointKeysEphemeral": keyring.ephemeral,
        "approvalTimeout": settings.approval_timeout,
        "maxDelegationDepth": settings.max_delegation_depth,
        "flushSeconds": settings.flush_seconds,
        "maxConnections": settings.max_connections,
        "beatSeconds": beat_seconds,
        "stallSeconds": stall_seconds,
    }


async def answer_read(worker: _Worker, run: _Run | None, message: Message) -> None:
    """Answer a child's store read from its run's store (an unknown run: an error)."""
    if run is None:
        answer: Message = {
            "type": "got",
            "id": message.get("id"),
            "rid": message["rid"],
            "error": "the run is no longer known to the control process",
        }
    else:
        answer = await serve(run.store, message)
    worker.send(answer)


async def forward_cancel(worker: _Worker, run_id: int, cancel: asyncio.Event) -> None:
    """Tell the child once the Task is cancelled (its run's cancel Event)."""
    await cancel.wait()
    worker.send({"type": "cancel", "id": run_id})


def blame(worker: _Worker, run_id: int) -> None:
    """The child's watchdog says run `run_id` holds its event loop."""
    worker.blamed.add(run_id)
    stalled = worker.runs.get(run_id)
    log.warning(
        "a run holds its worker's event loop",
        extra={
            "ordo": {
                "workerPid": worker.pid,
                "taskUid": stalled.uid if stalled else None,
                "executionId": stalled.claim.execution_id if stalled else None,
            }
        },
    )


def ready(worker: _Worker, hello: Message) -> None:
    """The child logged in and said hello."""
    worker.last_beat = time.monotonic()
    if not worker.ready.done():
        worker.ready.set_result(hello)
    log.info(
        "worker ready",
        extra={
            "ordo": {
                "workerPid": worker.pid,
                "worker": worker.index,
                "seconds": round(time.monotonic() - worker.spawned, 3),
            }
        },
    )
