"""Task watch events to the scheduler and retention, through ordo's own informer
(informer.py), one per watched namespace or one across the cluster, as kopf's watches are.

Why not a kopf event handler (as before): for a handler that only hands the body on, kopf's
per-event machinery (object memories, cause detection, the diff-base, handler kwargs, the
patch application) was about a tenth of the operator's CPU per Task (issue 14); the body
also had to be copied out of kopf's hands. Here the parsed body goes to the listener as is
(the informer keeps only each Task's name, namespace and uid).

Same events as kopf delivered: ADDED/MODIFIED/DELETED from the watch, None for each Task a
LIST returned (at start and after a watch that could not be resumed), and DELETED for a Task
deleted while the watch was down. A watch the server ends is resumed; a failed one is
retried with backoff (counted in `ordo_cache_watch_restarts_total{kind="Task"}`). The
scheduler's periodic sweep stays the backstop for anything a watch gap hides.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from ..kube.client import KubeClient
from ..kube.informer import BACKOFF_FIRST, BACKOFF_MAX, EventListener, Informer, cancel_all, run_all
from ..telemetry.metrics import Metrics

KIND = "Task"


class TaskFeed:
    """`start()` launches the Task informers (it does not wait for them); `stop()` cancels
    them. `listener` gets (event type, body) and must not block."""

    def __init__(
        self,
        client: KubeClient,
        namespaces: Iterable[str] | None,
        listener: EventListener,
        *,
        metrics: Metrics | None = None,
        backoff: tuple[float, float] | None = None,
    ) -> None:
        """`namespaces`: the watched namespaces, or None for the whole cluster."""
        self._metrics = metrics
        scopes: tuple[str | None, ...] = (
            (None,) if namespaces is None else tuple(sorted(set(namespaces)))
        )
        self.informers = [
            Informer(
                client,
                KIND,
                ns,
                on_restart=self._restart,
                on_event=listener,
                index=False,
                backoff=backoff or (BACKOFF_FIRST, BACKOFF_MAX),
            )
            for ns in scopes
        ]
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        self._tasks += run_all((f"ordo-tasks-{i.namespace or '*'}", i) for i in self.informers)

    async def stop(self) -> None:
        await cancel_all(self._tasks)

    def _restart(self, kind: str, reason: str) -> None:
        if self._metrics is not None:
            self._metrics.cache_watch_restarts.labels(kind, reason).inc()
