"""What a worker child (child.py) runs Tasks with: the real engine, logged in like the
operator (its own KubeClient, TaskWriter, Metrics and Runner), and the heartbeat that is its
execution leases' liveness."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ...api import Task
from ...credentials import Destination, Release
from ...runtime import Snapshot, default_model_factory
from ...runtime.store import ObjectStore, StoreError
from ..kube.client import KubeClient, login
from ..tasks import sealing
from ..tasks.claim import Claim
from ..tasks.coalesce import FLUSH_SECONDS
from ..tasks.reaper import CheckpointReaper
from ..tasks.runner import Runner, RunResult
from ..tasks.writer import TaskWriter
from ..telemetry.metrics import Metrics
from .protocol import Message

log = logging.getLogger("ordo.operator")


class RunsTasks(Protocol):
    async def run(
        self,
        claim: Claim,
        task: Task,
        cancel: asyncio.Event,
        store: ObjectStore | None = None,
        snapshot: Snapshot | None = None,
    ) -> RunResult: ...


@dataclass
class Engine:
    """What a child runs Tasks with."""

    runner: RunsTasks
    client: KubeClient
    metrics: Metrics
    close: Callable[[], Awaitable[None]]


class NoDefaultStore:
    """A worker's Runner has no store of its own: every run brings its RemoteStore."""

    async def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        raise StoreError("a worker reads only through its run's store")

    async def list(self, kind: str, namespace: str) -> list[dict[str, Any]]:
        raise StoreError("a worker reads only through its run's store")

    async def credential(
        self, namespace: str, name: str, key: str, dest: Destination | None
    ) -> Release:
        raise StoreError("a worker reads only through its run's store")


async def build_engine(config: Message) -> Engine:
    """The real engine: logged in like the operator (handlers.py `_startup`), the Runner built
    with the scheduler's arguments."""
    if keys := config.get("checkpointKeys"):  # control's keyring (children.config_message)
        ephemeral = bool(config.get("checkpointKeysEphemeral"))
        sealing.install(sealing.restore(list(keys), ephemeral=ephemeral))
    metrics = Metrics()
    client = KubeClient(
        login(), relogin=login, max_connections=int(config.get("maxConnections") or 16)
    )
    client.on_request = lambda verb: metrics.kube_requests.labels(verb).inc()
    reaper = CheckpointReaper(client)
    runner = Runner(
        TaskWriter(client, metrics),
        NoDefaultStore(),
        metrics,
        default_model_factory,
        keep_checkpoints=bool(config.get("keepCheckpoints")),
        flush_seconds=float(config.get("flushSeconds", FLUSH_SECONDS)),
        approval_timeout=config.get("approvalTimeout"),
        max_delegation_depth=config.get("maxDelegationDepth"),
        reaper=reaper,
    )

    async def close() -> None:
        try:
            await reaper.close()
        except Exception:
            log.warning("checkpoints of finished Tasks could not be deleted at worker exit")
        await client.close()

    return Engine(runner, client, metrics, close)


EngineFactory = Callable[[Message], Awaitable[Engine]]


class Heartbeat:
    """Control's beats: how long this child may still trust its control process's Lease."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._until = 0.0
        self.earlier: Callable[[], None] | None = None
        """Called when a beat moves the deadline earlier (control's Lease is failing)."""

    def beat(self, valid_for: float) -> None:
        until = self._clock() + max(0.0, valid_for)
        earlier, self._until = until < self._until, until
        if earlier and self.earlier is not None:
            self.earlier()

    def valid_for(self) -> float:
        """Seconds left: received_at + validFor - now (0 once lapsed)."""
        return max(0.0, self._until - self._clock())
