"""kopf handlers: thin adapters from watch events to the scheduler and the readiness
reconciler. All run logic is the engine's; all Task lifecycle logic is the scheduler's."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kopf

from ..api import GROUP, VERSION
from ..api.agent import ExecutionMode
from ..credentials import Policy
from . import jobsettings as jobtable
from . import settings as table
from .jobmode.supervisor import COMPONENT, MANAGED_BY
from .kube.cache import CachedStore, ObjectCache
from .kube.client import ApiError, KubeClient, login
from .lifecycle.feed import TaskFeed
from .lifecycle.retention import Retention
from .lifecycle.scheduler import TaskScheduler
from .readiness.reconciler import ReadinessReconciler
from .settings import JobSettings, SchedulerSettings
from .tasks.processlease import ProcessLeases, identity_name
from .tasks.recorder import EventRecorder
from .telemetry.health import HealthServer, PortInUse
from .telemetry.loopstall import LoopStall
from .telemetry.metrics import Metrics
from .triggers.reconcile import ScheduleReconciler
from .triggers.schedules import ScheduleController

log = logging.getLogger("ordo.operator")


@dataclass
class OperatorConfig:
    """Settings of one operator process (from `ordo operator` flags; defaults: the settings
    table, operator/settings.py)."""

    max_concurrent_tasks: int = table.MAX_CONCURRENT_TASKS.default
    metrics_port: int | None = table.METRICS_PORT.default
    health_port: int | None = table.HEALTH_PORT.default
    resync_seconds: float = table.RESYNC_SECONDS.default
    keep_checkpoints: bool = table.KEEP_CHECKPOINTS.default
    lease_seconds: float = table.LEASE_SECONDS.default
    lease_namespace: str = table.LEASE_NAMESPACE.default
    """Namespace of this process's Lease ("": $POD_NAMESPACE, the ServiceAccount's, default)."""
    workers: int = 0
    """Worker processes for the runs (`--workers`, resolved; 0: on this process's loop)."""
    worker_stall_seconds: float = table.WORKER_STALL_SECONDS.default
    namespaces: list[str] = field(default_factory=list)
    peering: str | None = table.PEERING.default
    default_execution_mode: ExecutionMode = table.DEFAULT_EXECUTION_MODE.default
    job: JobSettings = field(default_factory=JobSettings)
    job_poll_seconds: float = jobtable.JOB_POLL_SECONDS.default
    job_cancel_grace_seconds: float = jobtable.JOB_CANCEL_GRACE_SECONDS.default
    reference_grace_seconds: float = table.REFERENCE_GRACE.default
    approval_timeout_seconds: float | None = table.APPROVAL_TIMEOUT.default
    """Default wait for a human decision on a tool call (None: the engine's, the same 24h)."""
    max_delegation_depth: int = table.MAX_DELEGATION_DEPTH.default
    credential_policy: Policy = table.CREDENTIAL_POLICY.default
    task_ttl_seconds: float | None = table.TASK_TTL.default or None
    """Delete finished Tasks this long after they end unless they set their own
    spec.ttlSecondsAfterFinished; None (or 0) keeps them."""


@dataclass
class OperatorState:
    """Everything one operator process holds, kept in kopf's memo (`memo.ordo`): handlers
    read it from there, never from a module global."""

    config: OperatorConfig
    client: KubeClient | None = None
    cache: ObjectCache | None = None
    scheduler: TaskScheduler | None = None
    readiness: ReadinessReconciler | None = None
    health: HealthServer | None = None
    metrics: Metrics | None = None
    resync: asyncio.Task[None] | None = None
    retention: Retention | None = None
    tasks: TaskFeed | None = None
    leases: ProcessLeases | None = None
    loop_stall: LoopStall | None = None
    schedules: ScheduleController | None = None


def new_memo(config: OperatorConfig) -> kopf.Memo:
    """The memo to pass to `kopf.operator(memo=...)`."""
    memo = kopf.Memo()
    memo["ordo"] = OperatorState(config)
    return memo


def _state(memo: kopf.Memo) -> OperatorState:
    state = memo.get("ordo")
    if not isinstance(state, OperatorState):
        state = OperatorState(OperatorConfig())
        memo["ordo"] = state
    return state


@kopf.on.login()
def _login(**_: Any) -> kopf.ConnectionInfo:
    return login()


@kopf.on.startup()
async def _startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    STATE = _state(memo)
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
    # References are read from a watch-fed cache (cache.py), scoped as kopf's watches are.
    STATE.cache = ObjectCache(STATE.client, cfg.namespaces or None, metrics=metrics)
    await STATE.cache.start()
    store = CachedStore(STATE.cache, STATE.client, cfg.credential_policy)
    STATE.leases = await _process_leases(STATE.client, cfg)
    STATE.scheduler = TaskScheduler(
        STATE.client,
        settings=SchedulerSettings(
            cfg.max_concurrent_tasks,
            cfg.keep_checkpoints,
            cfg.lease_seconds,
            default_execution_mode=cfg.default_execution_mode,
            credential_policy=cfg.credential_policy,
            job=cfg.job,
            job_poll_seconds=cfg.job_poll_seconds,
            job_cancel_grace_seconds=cfg.job_cancel_grace_seconds,
            reference_grace_seconds=cfg.reference_grace_seconds,
            approval_timeout=cfg.approval_timeout_seconds,
            max_delegation_depth=cfg.max_delegation_depth,
            workers=cfg.workers,
            worker_stall_seconds=cfg.worker_stall_seconds,
        ),
        metrics=STATE.metrics,
        store=store,
        cache=STATE.cache,
        leases=STATE.leases,
    )
    await STATE.scheduler.start()
    STATE.loop_stall = LoopStall(STATE.metrics)
    STATE.loop_stall.start()
    if STATE.scheduler.pool is not None:
        STATE.metrics.workers.set(STATE.scheduler.pool.size)
    STATE.retention = Retention(STATE.client, STATE.metrics, cfg.task_ttl_seconds)
    STATE.readiness = ReadinessReconciler(STATE.client, store, STATE.cache)
    STATE.schedules = ScheduleController(
        STATE.client,
        ScheduleReconciler(
            STATE.client, STATE.metrics, EventRecorder(STATE.client), lambda: datetime.now(UTC)
        ),
    )
    if cfg.peering is None:
        STATE.tasks = TaskFeed(
            STATE.client, cfg.namespaces or None, _task_listener(STATE), metrics=metrics
        )
        await STATE.tasks.start()
    # With kopf peering, Task events come through kopf (watch_tasks_through_kopf), so that a
    # paused operator (another one on the same peering object) stops taking Tasks too.
    STATE.health = HealthServer(STATE.client, STATE.metrics, cfg.health_port, cfg.metrics_port)
    STATE.health.namespaces = list(cfg.namespaces)
    STATE.health.cache = STATE.cache
    try:
        await STATE.health.start()
    except PortInUse as exc:  # exit, not kopf's endless retry of a startup handler
        log.error("cannot start: %s", exc)
        raise SystemExit(2) from None
    STATE.resync = asyncio.create_task(_resync_loop(STATE, cfg.resync_seconds))
    log.info("operator started", extra={"ordo": {"maxConcurrentTasks": cfg.max_concurrent_tasks}})


SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def lease_namespace(configured: str) -> str:
    """Where this process's Lease lives: --lease-namespace, else $POD_NAMESPACE (the chart
    sets it), else the ServiceAccount's namespace, else `default`."""
    if configured:
        return configured
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    with contextlib.suppress(OSError):
        found = SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
        if found:
            return found
    return "default"


async def _process_leases(client: KubeClient, cfg: OperatorConfig) -> ProcessLeases | None:
    """This process's Lease, created, with its peers' listed (processlease.py). Without the
    RBAC for Leases (a manifest from before them) the operator still runs, renewing each
    Task's own lease as before, and says so."""
    namespace = lease_namespace(cfg.lease_namespace)
    identity = identity_name(socket.gethostname(), uuid.uuid4().hex[:8])
    leases = ProcessLeases(client, namespace, identity, cfg.lease_seconds, cfg.namespaces or None)
    try:
        await leases.start()
    except ApiError as exc:
        if exc.status not in (403, 404):
            raise
        await leases.stop()
        log.warning(
            "cannot use a process Lease (coordination.k8s.io leases in namespace %s: %s); "
            "renewing every running Task's lease instead: grant the Lease rules "
            "(docs/operations.md)",
            namespace,
            exc.api_reason or exc.status,
        )
        return None
    return leases


async def _resync_loop(state: OperatorState, interval: float) -> None:
    """Every interval: re-evaluate readiness, and sweep Tasks (a Task whose job gave up on a
    Kubernetes API outage is picked up again once the API answers)."""
    while True:
        await asyncio.sleep(interval)
        # The sweep first: it is cheap (one list per namespace), and a readiness resync that
        # probes many endpoints must not delay picking up a stranded Task.
        # Not with kopf peering: the sweep reads Tasks past kopf, so it would run Tasks while
        # peering has paused this operator (test_packaging's peered operators test).
        if state.scheduler is not None and state.config.peering is None:
            try:
                await state.scheduler.sweep()
            except Exception:
                log.exception("task sweep failed")
        if state.leases is not None:  # the Leases of processes long gone
            try:
                await state.leases.peers.collect_garbage()
            except Exception:
                log.exception("process Lease garbage collection failed")
        if state.readiness is not None:
            try:
                await state.readiness.resync()
            except Exception:
                log.exception("readiness resync failed")


@kopf.on.cleanup()
async def _cleanup(memo: kopf.Memo, **_: Any) -> None:
    STATE = _state(memo)
    if STATE.resync is not None:
        STATE.resync.cancel()
    if STATE.loop_stall is not None:
        await STATE.loop_stall.stop()
    if STATE.tasks is not None:
        await STATE.tasks.stop()
    if STATE.schedules is not None:
        await STATE.schedules.stop()
    if STATE.scheduler is not None:
        await STATE.scheduler.shutdown()
    if STATE.leases is not None:  # after the runs released their Tasks
        await STATE.leases.stop()
    if STATE.retention is not None:
        await STATE.retention.shutdown()
    if STATE.health is not None:
        await STATE.health.stop()
    if STATE.cache is not None:
        await STATE.cache.stop()
    if STATE.client is not None:
        await STATE.client.close()


def _task_listener(state: OperatorState) -> Callable[[str | None, dict[str, Any]], None]:
    """Task events (taskfeed.py, not a kopf handler) to retention, then the scheduler."""

    def observe(event_type: str | None, body: dict[str, Any]) -> None:
        # The body is ours (the feed keeps none of it). Retention only reads it,
        # synchronously, and keeps nothing of it; the scheduler, which keeps it, goes last.
        if state.retention is not None:
            state.retention.observe(body, event_type)
        if state.schedules is not None:
            state.schedules.observe_task(body, event_type)
        if state.scheduler is not None:
            state.scheduler.observe(body, event_type)

    return observe


@kopf.on.event(
    "batch", "v1", "jobs", labels={**MANAGED_BY, "app.kubernetes.io/component": COMPONENT}
)
async def _job_event(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """A Job-mode Task's Job changed (a pod failed, the Job finished): wake its supervisor."""
    scheduler = _state(memo).scheduler
    if scheduler is not None:
        scheduler.observe_job(_plain(body))


@kopf.on.event(GROUP, VERSION, "toolapprovals")
async def _approval_event(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """A ToolApproval changed: wake the Task it names; write its Accepted condition."""
    scheduler = _state(memo).scheduler
    if scheduler is not None:
        scheduler.observe_approval(_plain(body), event.get("type"))


@kopf.on.event(GROUP, VERSION, "taskschedules")
async def _schedule_event(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """A TaskSchedule was listed, changed or deleted: (re)start or stop its loop."""
    schedules = _state(memo).schedules
    if schedules is not None:
        schedules.observe(_plain(body), event.get("type"))


READINESS_KINDS = {
    "agents": "Agent",
    "modelendpoints": "ModelEndpoint",
    "tools": "Tool",
    "memories": "Memory",
    "agentroles": "AgentRole",
    "toolpermissions": "ToolPermission",
    "agentpolicies": "AgentPolicy",
    "guardrails": "Guardrail",
    "teams": "Team",
    "taskwebhooks": "TaskWebhook",
}


def _readiness_handler(kind: str) -> Any:
    async def handler(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
        readiness = _state(memo).readiness
        if readiness is None:
            return
        try:
            await readiness.observe(kind, _plain(body), event.get("type"))
        except Exception:
            log.exception("readiness evaluation failed", extra={"ordo": {"kind": kind}})

    return handler


for _plural, _kind in READINESS_KINDS.items():
    kopf.on.event(GROUP, VERSION, _plural, id=f"ready-{_plural}")(_readiness_handler(_kind))


def watch_tasks_through_kopf() -> None:
    """Register the Task handler with kopf (only with `--peering`: kopf pauses the handlers of
    an operator that sees a peer, and ordo's own Task feed does not know of peering)."""

    @kopf.on.event(GROUP, VERSION, "tasks")
    async def _task_event(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
        _task_listener(_state(memo))(event.get("type"), _plain(body))


def _plain(body: kopf.Body) -> dict[str, Any]:
    """A private copy of a watched object (the consumers keep and change theirs), without
    `metadata.managedFields`: nothing in ordo reads it, and it is most of a Task's bytes. A
    JSON round trip (the object came as JSON) costs a fifth of `copy.deepcopy`."""
    out = dict(body)
    meta = out.get("metadata")
    if isinstance(meta, Mapping):
        out["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
    plain: dict[str, Any] = json.loads(json.dumps(out))
    return plain
