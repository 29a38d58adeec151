"""kopf handlers: thin adapters from watch events to the scheduler and the readiness
reconciler. All run logic is the engine's; all Task lifecycle logic is the scheduler's."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any

import kopf

from ..api import GROUP, VERSION
from .health import HealthServer
from .kube import KubeClient, login
from .metrics import Metrics
from .readiness import ReadinessReconciler
from .scheduler import SchedulerSettings, TaskScheduler

log = logging.getLogger("ordo.operator")


@dataclass
class OperatorConfig:
    """Settings of one operator process (from `ordo operator` flags)."""

    max_concurrent_tasks: int = 10
    metrics_port: int | None = 8080
    health_port: int | None = 8081
    resync_seconds: float = 60.0
    keep_checkpoints: bool = False
    lease_seconds: float = 30.0
    namespaces: list[str] = field(default_factory=list)
    peering: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class _State:
    config = OperatorConfig()
    client: KubeClient | None = None
    scheduler: TaskScheduler | None = None
    readiness: ReadinessReconciler | None = None
    health: HealthServer | None = None
    metrics: Metrics | None = None
    resync: asyncio.Task[None] | None = None


STATE = _State()


@kopf.on.login()
def _login(**_: Any) -> kopf.ConnectionInfo:
    return login()


@kopf.on.startup()
async def _startup(settings: kopf.OperatorSettings, **_: Any) -> None:
    cfg = STATE.config
    settings.posting.enabled = False  # ordo posts its own, sanitised Events
    # Serve the namespaces given on the command line (or all) and the ordo CRDs present at
    # startup. Without this kopf lists and watches Namespaces and CRDs cluster-wide, which the
    # least-privilege RBAC does not grant (a namespaced install has no ClusterRole at all):
    # it retries the forbidden requests for about a minute before serving any Task. Install
    # or upgrade the CRDs before the operator (docs/operations.md).
    settings.scanning.disabled = True
    settings.persistence.finalizer = "ordo.dev/kopf"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="ordo.dev")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix="ordo.dev")
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.queueing.exit_timeout = 10
    STATE.metrics = STATE.metrics or Metrics()
    STATE.client = KubeClient(
        login(), relogin=login, max_connections=max(16, cfg.max_concurrent_tasks * 2)
    )
    metrics = STATE.metrics
    STATE.client.on_request = lambda verb: metrics.kube_requests.labels(verb).inc()
    STATE.scheduler = TaskScheduler(
        STATE.client,
        settings=SchedulerSettings(
            cfg.max_concurrent_tasks, cfg.keep_checkpoints, cfg.lease_seconds
        ),
        metrics=STATE.metrics,
        **cfg.extra,
    )
    STATE.readiness = ReadinessReconciler(STATE.client)
    STATE.health = HealthServer(STATE.client, STATE.metrics, cfg.health_port, cfg.metrics_port)
    STATE.health.namespaces = list(cfg.namespaces)
    await STATE.health.start()
    STATE.resync = asyncio.create_task(_resync_loop(cfg.resync_seconds))
    log.info("operator started", extra={"ordo": {"maxConcurrentTasks": cfg.max_concurrent_tasks}})


async def _resync_loop(interval: float) -> None:
    while True:
        await asyncio.sleep(interval)
        if STATE.readiness is not None:
            try:
                await STATE.readiness.resync()
            except Exception:
                log.exception("readiness resync failed")


@kopf.on.cleanup()
async def _cleanup(**_: Any) -> None:
    if STATE.resync is not None:
        STATE.resync.cancel()
    if STATE.scheduler is not None:
        await STATE.scheduler.shutdown()
    if STATE.health is not None:
        await STATE.health.stop()
    if STATE.client is not None:
        await STATE.client.close()


@kopf.on.event(GROUP, VERSION, "tasks")
async def _task_event(event: kopf.RawEvent, body: kopf.Body, **_: Any) -> None:
    if STATE.scheduler is not None:
        STATE.scheduler.observe(_plain(body), event.get("type"))
        if STATE.health is not None:
            STATE.health.watching = True


async def _readiness_event(kind: str, event: kopf.RawEvent, body: kopf.Body) -> None:
    if STATE.readiness is not None:
        with contextlib.suppress(Exception):
            await STATE.readiness.observe(kind, _plain(body), event.get("type"))


@kopf.on.event(GROUP, VERSION, "agents")
async def _agent_event(event: kopf.RawEvent, body: kopf.Body, **_: Any) -> None:
    await _readiness_event("Agent", event, body)


@kopf.on.event(GROUP, VERSION, "modelendpoints")
async def _endpoint_event(event: kopf.RawEvent, body: kopf.Body, **_: Any) -> None:
    await _readiness_event("ModelEndpoint", event, body)


@kopf.on.event(GROUP, VERSION, "tools")
async def _tool_event(event: kopf.RawEvent, body: kopf.Body, **_: Any) -> None:
    await _readiness_event("Tool", event, body)


@kopf.on.event(GROUP, VERSION, "memories")
async def _memory_event(event: kopf.RawEvent, body: kopf.Body, **_: Any) -> None:
    await _readiness_event("Memory", event, body)


@kopf.on.event(GROUP, VERSION, "agentroles")
async def _role_event(event: kopf.RawEvent, body: kopf.Body, **_: Any) -> None:
    await _readiness_event("AgentRole", event, body)


def _plain(body: kopf.Body) -> dict[str, Any]:
    import copy

    return copy.deepcopy(dict(body))
