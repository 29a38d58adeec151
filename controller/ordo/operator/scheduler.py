"""Runs each Task exactly once per claim, bounded by --max-concurrent-tasks.

kopf delivers watch events to `TaskScheduler.observe` (a thin, synchronous handler). The
scheduler keeps one job per Task uid in this process; the job waits for capacity, claims the
Task with a conditional write (resourceVersion precondition: a second writer gets 409),
resolves, runs the engine, and writes the terminal status. State lives in the object: the
claim and progress in `status`, the transcript in a checkpoint ConfigMap the Task owns, so a
restarted operator resumes a `Running` Task from its last completed step.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from ..api import TERMINAL_PHASES, Task
from ..engine.events import (
    Event,
    ModelResponded,
    RunFinished,
    RunStarted,
    StepFinished,
    StepStarted,
    ToolDecided,
    ToolFinished,
)
from ..engine.resolve import ResolutionError, Snapshot, resolve
from ..engine.state import RunState
from ..execution import (
    ModelFactory,
    TaskOutcome,
    default_model_factory,
    progress_fields,
    run_snapshot,
)
from . import logs
from .checkpoint import CheckpointStore
from .conditions import now, set_condition
from .kube import ApiError, KubeClient
from .lease import ExecutionLease
from .metrics import Metrics
from .recorder import EventRecorder
from .store import KubeStore

FINALIZER = "ordo.dev/run"
RETRY_FIRST_SECONDS = 2.0
RETRY_MAX_SECONDS = 60.0
log = logging.getLogger("ordo.operator")


@dataclass
class SchedulerSettings:
    max_concurrent_tasks: int = 10
    """Tasks executing at once in this process; the rest wait Pending."""
    keep_checkpoints: bool = False
    """Keep the checkpoint ConfigMap after a Task ends (for debugging / replay)."""
    lease_seconds: float = 30.0
    """Execution lease duration: how long after a crash another process may resume a Task."""


@dataclass
class Job:
    task: asyncio.Task[None] | None = None
    cancel: asyncio.Event = field(default_factory=asyncio.Event)


class TaskScheduler:
    def __init__(
        self,
        client: KubeClient,
        *,
        settings: SchedulerSettings | None = None,
        metrics: Metrics | None = None,
        model_factory: ModelFactory = default_model_factory,
    ) -> None:
        self.client = client
        self.settings = settings or SchedulerSettings()
        self.metrics = metrics or Metrics()
        self.recorder = EventRecorder(client)
        self.store = KubeStore(client)
        self.model_factory = model_factory
        self._capacity = asyncio.Semaphore(self.settings.max_concurrent_tasks)
        self._jobs: dict[str, Job] = {}
        self._claim_locks: dict[str, asyncio.Lock] = {}
        self._housekeeping: set[asyncio.Task[None]] = set()
        self.running = 0
        self.identity = f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}"
        """This process, as the holder of execution leases."""

    # -- the kopf-facing entry point ------------------------------------------------------

    def observe(self, body: dict[str, Any], event_type: str | None) -> None:
        """React to one watch event of a Task. Never blocks; never raises."""
        meta = body.get("metadata") or {}
        uid = meta.get("uid")
        if not uid:
            return
        spec = body.get("spec") or {}
        phase = (body.get("status") or {}).get("phase")
        deleting = bool(meta.get("deletionTimestamp"))
        job = self._jobs.get(uid)
        if event_type == "DELETED":
            if job is not None and job.task is not None:
                job.task.cancel()
            return
        if job is not None:
            if deleting or spec.get("cancel"):
                job.cancel.set()
            return
        if phase in TERMINAL_PHASES:
            if FINALIZER in (meta.get("finalizers") or []):
                self._spawn(self._release(meta["namespace"], meta["name"]))
            return
        job = Job()
        if deleting or spec.get("cancel"):
            job.cancel.set()
        self._jobs[uid] = job
        job.task = asyncio.create_task(
            self._job(uid, meta["namespace"], meta["name"], job), name=f"ordo-task-{uid}"
        )

    async def shutdown(self) -> None:
        """Stop every run; `Running` Tasks keep their checkpoints and resume on restart."""
        tasks = [j.task for j in self._jobs.values() if j.task is not None] + list(
            self._housekeeping
        )
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _spawn(self, coro: Any) -> None:
        t: asyncio.Task[None] = asyncio.create_task(coro)
        self._housekeeping.add(t)
        t.add_done_callback(self._housekeeping.discard)

    # -- one job per Task -----------------------------------------------------------------

    async def _job(self, uid: str, namespace: str, name: str, job: Job) -> None:
        """Process one Task; on an unexpected error (API refused, network), retry with
        backoff rather than wait for a watch event that may never come."""
        logs.bind(namespace=namespace, task=name)
        backoff = RETRY_FIRST_SECONDS
        try:
            while True:
                try:
                    await self._attempt(namespace, name, job)
                    return
                except asyncio.CancelledError:
                    return
                except Exception as exc:
                    status = getattr(exc, "status", None)
                    log.error(
                        "task job failed; retrying",
                        exc_info=True,
                        extra={"ordo": {"errorStatus": status, "retryInSeconds": backoff}},
                    )
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, RETRY_MAX_SECONDS)
        finally:
            self._jobs.pop(uid, None)

    async def _attempt(self, namespace: str, name: str, job: Job) -> None:
        self.metrics.pending.inc()
        waiting = True
        try:
            body = await self._wait_for_other_holder(namespace, name)
            if body is None:
                return
            must_wait = self._capacity.locked()
            if must_wait and not job.cancel.is_set():
                await self._mark_waiting(body)
            acquired = await self._acquire(job.cancel)
            self.metrics.pending.dec()
            waiting = False
            try:
                self.running += 1
                self.metrics.running.inc()
                # After a wait for capacity the Task may have changed: read it again.
                fresh = await self.client.get("Task", namespace, name) if must_wait else body
                if fresh is not None:
                    await self._process(fresh, job)
            finally:
                self.running -= 1
                self.metrics.running.dec()
                if acquired:
                    self._capacity.release()
        finally:
            if waiting:
                self.metrics.pending.dec()

    async def _wait_for_other_holder(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Task, once no other process holds it: a `Running` Task may be executing
        elsewhere, so wait until its execution lease expires. None if it is gone or ended."""
        while True:
            body = await self.client.get("Task", namespace, name)
            if body is None:
                return None
            phase = (body.get("status") or {}).get("phase")
            if phase != "Running":
                return None if phase in TERMINAL_PHASES else body
            lease = ExecutionLease(self.client, body, self.identity, self.settings.lease_seconds)
            remaining = await lease.held_elsewhere()
            if remaining <= 0:
                return body
            log.info(
                "task is held by another execution; waiting for its lease",
                extra={"ordo": {"seconds": round(remaining, 1)}},
            )
            await asyncio.sleep(remaining + 0.2)

    async def _acquire(self, cancel: asyncio.Event) -> bool:
        """Wait for capacity, or for a cancel request (which needs no capacity)."""
        if cancel.is_set():
            return False
        acquire = asyncio.ensure_future(self._capacity.acquire())
        cancelled = asyncio.ensure_future(cancel.wait())
        try:
            await asyncio.wait({acquire, cancelled}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            cancelled.cancel()
            if not acquire.done():
                acquire.cancel()
        return acquire.done() and not acquire.cancelled()

    async def _mark_waiting(self, body: dict[str, Any]) -> None:
        if (body.get("status") or {}).get("phase") not in (None, "Pending"):
            return
        namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
        limit = self.settings.max_concurrent_tasks
        conditions = set_condition(
            (body.get("status") or {}).get("conditions"),
            "Scheduled",
            "False",
            "WaitingForCapacity",
            f"{limit} Task(s) are running, the limit of this operator (--max-concurrent-tasks {limit})",
        )
        await self.client.patch(
            "Task",
            namespace,
            name,
            {"status": {"phase": "Pending", "conditions": conditions}},
            status=True,
        )

    async def _process(self, body: dict[str, Any], job: Job) -> None:
        namespace = body["metadata"]["namespace"]
        status = body.get("status") or {}
        phase = status.get("phase")
        if phase in TERMINAL_PHASES:
            return
        try:
            task = Task.model_validate(body)
        except ValidationError as exc:
            err = exc.errors()[0]
            await self._finish(
                body,
                TaskOutcome(
                    "Failed",
                    "InvalidSpec",
                    f"Task is invalid at {'.'.join(map(str, err['loc']))}: {err['msg']}",
                ),
            )
            return
        if job.cancel.is_set():
            await self._finish(
                body, TaskOutcome("Cancelled", "Cancelled", "cancelled before it started")
            )
            return

        resuming = phase == "Running"
        async with self._claim_locks.setdefault(namespace, asyncio.Lock()):
            if not resuming and task.spec.idempotency_key:
                other = await self._duplicate_of(body)
                if other is not None:
                    await self._finish(
                        body,
                        TaskOutcome(
                            "Failed",
                            "DuplicateExecution",
                            f"Task {other!r} already uses idempotencyKey of this Task",
                        ),
                    )
                    return
            claimed = await self._claim(body, resuming)
        if claimed is None:
            return
        body, execution_id, lease = claimed
        logs.bind(executionId=execution_id, agent=task.spec.agent_ref)
        current = asyncio.current_task()

        def lost() -> None:
            log.warning("execution lease taken over by another process; stopping this run")
            if current is not None:
                current.cancel()

        renewer = asyncio.create_task(lease.renew_until_cancelled(lost))
        try:
            await self._run(body, task, execution_id, resuming, job)
        finally:
            renewer.cancel()
            await lease.release()

    async def _duplicate_of(self, body: dict[str, Any]) -> str | None:
        """The name of an earlier Task with the same idempotencyKey, if any. A Task that was
        claimed wins over one that was not; otherwise the older (then by name) wins."""
        key = body["spec"]["idempotencyKey"]
        me = body["metadata"]
        mine = (me.get("creationTimestamp", ""), me["name"])
        for other in await self.client.list("Task", me["namespace"]):
            ometa = other["metadata"]
            if ometa["uid"] == me["uid"] or (other.get("spec") or {}).get("idempotencyKey") != key:
                continue
            ostatus = other.get("status") or {}
            if ostatus.get("reason") == "DuplicateExecution":
                continue
            if (
                ostatus.get("executionId")
                or (ometa.get("creationTimestamp", ""), ometa["name"]) < mine
            ):
                return str(ometa["name"])
        return None

    async def _claim(
        self, body: dict[str, Any], resuming: bool
    ) -> tuple[dict[str, Any], str, ExecutionLease] | None:
        """Add the finalizer, take the execution lease, and write the claim; the writes are
        conditional (resourceVersion), so of two racing processes one claims, one backs off."""
        meta = body["metadata"]
        ns, name = meta["namespace"], meta["name"]
        for _ in range(5):
            try:
                if FINALIZER not in (meta.get("finalizers") or []):
                    body = await self.client.patch(
                        "Task",
                        ns,
                        name,
                        {
                            "metadata": {
                                "resourceVersion": meta["resourceVersion"],
                                "finalizers": [*(meta.get("finalizers") or []), FINALIZER],
                            }
                        },
                    )
                    meta = body["metadata"]
                status = body.get("status") or {}
                if status.get("phase") in TERMINAL_PHASES or (
                    status.get("phase") == "Running" and not resuming
                ):
                    return None  # someone else claimed or finished it meanwhile
                lease = ExecutionLease(
                    self.client, body, self.identity, self.settings.lease_seconds
                )
                if not await lease.acquire():
                    return None  # another process holds a live lease on this Task
                execution_id = uuid.uuid4().hex[:12]
                conditions = set_condition(
                    status.get("conditions"),
                    "Scheduled",
                    "True",
                    "Claimed",
                    f"execution {execution_id} claimed the Task",
                )
                conditions = set_condition(
                    conditions,
                    "Running",
                    "True",
                    "Resumed" if resuming else "Started",
                    f"execution {execution_id}",
                )
                claim = {
                    "metadata": {"resourceVersion": meta["resourceVersion"]},
                    "status": {
                        "phase": "Running",
                        "executionId": execution_id,
                        "startedAt": status.get("startedAt") or now(),
                        "observedGeneration": meta.get("generation"),
                        "conditions": conditions,
                        "step": status.get("step", 0),
                    },
                }
                body = await self.client.patch("Task", ns, name, claim, status=True)
                return body, execution_id, lease
            except ApiError as exc:
                if not exc.conflict:
                    raise
                fresh = await self.client.get("Task", ns, name)
                if fresh is None:
                    return None
                body, meta = fresh, fresh["metadata"]
                if (fresh.get("status") or {}).get("phase") in TERMINAL_PHASES:
                    return None
        log.warning("could not claim the Task after repeated conflicts; waiting for the next event")
        return None

    async def _run(
        self, body: dict[str, Any], task: Task, execution_id: str, resuming: bool, job: Job
    ) -> None:
        started = time.monotonic()
        checkpoints = CheckpointStore(self.client, body, execution_id)
        state: RunState | None = None
        try:
            snapshot = await resolve(task, self.store)
        except ResolutionError as exc:
            await self._finish(
                body, TaskOutcome("Failed", exc.reason, exc.message), started=started
            )
            return
        checkpoints.snapshot_hash = snapshot.content_hash
        if resuming:
            loaded = await checkpoints.load()
            if loaded is not None:
                state, annotations = loaded
                if annotations.get("ordo.dev/snapshot-hash") not in (
                    "",
                    None,
                    snapshot.content_hash,
                ):
                    await self._finish(
                        body,
                        TaskOutcome(
                            "Failed",
                            "Interrupted",
                            "the Agent or its references changed while the Task was interrupted; not resumed",
                            snapshot=snapshot,
                        ),
                        started=started,
                    )
                    return
        await self.recorder.post(
            body,
            "Resumed" if resuming else "Started",
            f"execution {execution_id} {'resumed at step ' + str(state.step) if state else 'started'} (agent {task.spec.agent_ref}, maxSteps {snapshot.max_steps})",
        )
        writer = StatusWriter(self, body, snapshot)
        run_metrics = self.metrics.listener(
            task.namespace,
            task.spec.agent_ref,
            snapshot.endpoint.spec.provider,
            snapshot.endpoint.spec.effective_model(),
        )
        outcome = await run_snapshot(
            snapshot,
            listeners=[checkpoints, writer, run_metrics, log_events],
            state=state,
            cancel=job.cancel,
            model_factory=self.model_factory,
        )
        await self._finish(body, outcome, started=started)
        if not self.settings.keep_checkpoints:
            await checkpoints.delete()

    async def _finish(
        self, body: dict[str, Any], outcome: TaskOutcome, *, started: float | None = None
    ) -> None:
        """Write the terminal status, post the Event, count it, release the finalizer."""
        meta = body["metadata"]
        ns, name = meta["namespace"], meta["name"]
        status = body.get("status") or {}
        fields = outcome.status()
        conditions = set_condition(
            status.get("conditions"), "Running", "False", outcome.reason, "the run ended"
        )
        conditions = set_condition(
            conditions,
            "Succeeded",
            "True" if outcome.phase == "Succeeded" else "False",
            outcome.reason,
            outcome.message,
        )
        fields.update(
            {
                "completedAt": now(),
                "conditions": conditions,
                "observedGeneration": meta.get("generation"),
            }
        )
        if "startedAt" not in status:
            fields["startedAt"] = fields["completedAt"]
        try:
            updated = await self.client.patch("Task", ns, name, {"status": fields}, status=True)
        except ApiError as exc:
            if exc.not_found:
                return
            raise
        agent = (body.get("spec") or {}).get("agentRef", "")
        event_reason = outcome.phase if outcome.phase != "Failed" else "Failed"
        await self.recorder.post(
            body,
            event_reason,
            f"{outcome.reason}: {outcome.message}",
            warning=outcome.phase == "Failed",
        )
        self.metrics.tasks.labels(ns, agent, outcome.phase, outcome.reason).inc()
        if started is not None:
            self.metrics.task_duration.labels(ns, agent).observe(time.monotonic() - started)
        self.metrics.task_steps.labels(ns, agent).observe(fields.get("step", 0))
        log.info(
            "task finished",
            extra={
                "ordo": {
                    "phase": outcome.phase,
                    "reason": outcome.reason,
                    "step": fields.get("step", 0),
                }
            },
        )
        await self._release(ns, name, updated)

    async def _release(
        self, namespace: str, name: str, known: dict[str, Any] | None = None
    ) -> None:
        """Remove ordo's finalizer (conditional on resourceVersion, retried on conflict).
        `known` is the object as the last write returned it, which saves a read."""
        for _ in range(5):
            body = known or await self.client.get("Task", namespace, name)
            known = None
            if body is None:
                return
            finalizers = body["metadata"].get("finalizers") or []
            if FINALIZER not in finalizers:
                return
            try:
                await self.client.patch(
                    "Task",
                    namespace,
                    name,
                    {
                        "metadata": {
                            "resourceVersion": body["metadata"]["resourceVersion"],
                            "finalizers": [f for f in finalizers if f != FINALIZER],
                        }
                    },
                )
                return
            except ApiError as exc:
                if exc.not_found:
                    return
                if not exc.conflict:
                    raise


class StatusWriter:
    """Patches a bounded progress summary after each completed step, and posts a Warning
    Event for each denied tool call."""

    def __init__(self, scheduler: TaskScheduler, body: dict[str, Any], snapshot: Snapshot) -> None:
        self._s = scheduler
        self._body = body
        self._snapshot = snapshot
        meta = body["metadata"]
        self._ns, self._name = meta["namespace"], meta["name"]
        self._first = True

    async def __call__(self, event: Event) -> None:
        if isinstance(event, StepFinished):
            patch = progress_fields(event.state)
            if self._first:
                patch["snapshotHash"] = self._snapshot.content_hash
                if self._snapshot.agent_generation is not None:
                    patch["agentGeneration"] = self._snapshot.agent_generation
                self._first = False
            with contextlib.suppress(ApiError):
                await self._s.client.patch(
                    "Task", self._ns, self._name, {"status": patch}, status=True
                )
        elif isinstance(event, ToolDecided) and event.record.decision == "denied":
            r = event.record
            await self._s.recorder.post(
                self._body,
                "ToolDenied",
                f"tool {r.tool} denied at step {r.step}: {r.reason}",
                warning=True,
            )


async def log_events(event: Event) -> None:
    """Structured log lines for engine events: names, counts and decisions only."""
    if isinstance(event, RunStarted):
        log.info("run started", extra={"ordo": {"resumedFromStep": event.resumed_from_step}})
    elif isinstance(event, StepStarted):
        logs.bind(step=event.step)
        log.info("model call", extra={"ordo": {"step": event.step}})
    elif isinstance(event, ModelResponded):
        log.info(
            "model responded",
            extra={
                "ordo": {
                    "toolCalls": event.tool_calls,
                    "inputTokens": event.usage.input_tokens,
                    "outputTokens": event.usage.output_tokens,
                }
            },
        )
    elif isinstance(event, ToolDecided):
        r = event.record
        level = logging.WARNING if r.decision == "denied" else logging.INFO
        log.log(
            level,
            "tool decision",
            extra={"ordo": {"tool": r.tool, "decision": r.decision, "reason": r.reason}},
        )
    elif isinstance(event, ToolFinished):
        log.info("tool finished", extra={"ordo": {"tool": event.tool, "outcome": event.outcome}})
    elif isinstance(event, RunFinished):
        log.info(
            "run finished",
            extra={"ordo": {"phase": event.result.phase, "reason": event.result.reason}},
        )
