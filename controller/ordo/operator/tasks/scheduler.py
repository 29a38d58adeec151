"""Runs each Task exactly once per claim, bounded by --max-concurrent-tasks.

The Task feed (taskfeed.py, ordo's own informer) delivers watch events to
`TaskScheduler.observe` (thin and synchronous). The
scheduler keeps one job per Task uid in this process; the job waits for another holder's
lease and for capacity, claims the Task (claim.py), and runs it (runner.py). State lives in
the object: the claim and progress in `status`, the transcript in a checkpoint ConfigMap the
Task owns, so a restarted operator resumes a `Running` Task from its last completed step.

Failures of the job itself are bounded: a transient Kubernetes API failure (transport error,
429, 5xx) is retried with backoff up to RETRY_ATTEMPTS times; anything else ends the Task
`Failed/InternalError`. A run never fails into a retry: `execute` always returns an outcome,
so no model request is ever repeated because the operator stumbled. A periodic `sweep` picks
up Tasks whose job gave up on transient errors.

References (the Agent for the execution mode, the GitOps pre-check, the run's resolution) are
read through `store`; in the operator that is the watch-fed cache (cache.py), and a Task is
not claimed until the caches of its namespace are synced.

Waiting for capacity is in capacity.py; the steps of execution mode Job (record the mode,
start and supervise the Task's batch Job) are in jobmode.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import socket
import uuid
import zlib
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from ...api import TERMINAL_PHASES, Task
from ...errors import validation_problem
from ...runtime import ModelFactory, TaskOutcome, default_model_factory, internal_error
from ...runtime.store import ObjectStore
from ..jobmode.steps import NO_RUNNER_IMAGE, record_mode, resume_supervision, run_in_job
from ..jobmode.supervisor import JobSupervisor, runs_in_job, select_mode
from ..kube.cache import NotSynced, ObjectCache
from ..kube.client import ApiError, KubeClient
from ..kube.store import KubeStore
from ..settings import SchedulerSettings
from ..telemetry import logs
from ..telemetry.metrics import Metrics
from .approvals import ApprovalGate
from .approvals import awaiting as awaiting_approval
from .capacity import SLOT, TAKEN, acquire, mark_waiting
from .claim import Claimer
from .lease import held_elsewhere, lease_of
from .reaper import CheckpointReaper
from .references import ReferenceWait, WaitForReferences
from .runner import RunAbandoned, Runner
from .taskstore import SecretsReadOnce
from .writer import FINALIZER, TaskWriter

RELEASE_GRACE_SECONDS = 5.0
"""How long a finished Task may keep ordo's finalizer before a process that did not run it
removes it (the one that ran it does so right after its terminal write)."""
WAITING_MARK_AFTER_SECONDS = 3.0
"""A Task that waits this long for a slot is marked `Scheduled=False/WaitingForCapacity`
(once, by the replica its hash prefers). A shorter wait is not written: in a burst that
would be one more write per queued Task, for a state nobody sees. A process with no free
slot never reserves a new Task meanwhile (a replica with a free slot takes it, or this one
once a slot frees)."""
DEFER_TO_PREFERRED_SECONDS = 0.1
"""How long a process leaves a new Task to the replica that the Task's hash prefers
(`TaskScheduler._preferred`) before reserving it itself."""
FRESH_BODY_WAIT_SECONDS = 1.0
"""After a refused conditional write, how long to wait for the Task's next watch event
before reading it instead."""
LEASE_EXPIRY_SLACK_SECONDS = 0.5
"""Added to another holder's remaining lease before looking at its Task again."""
RETRY_FIRST_SECONDS = 2.0
RETRY_MAX_SECONDS = 30.0
RETRY_ATTEMPTS = 6
"""Attempts of one job after transient API failures (about 90 s in all)."""
log = logging.getLogger("ordo.operator")


@dataclass
class Job:
    task: asyncio.Task[None] | None = None
    cancel: asyncio.Event = field(default_factory=asyncio.Event)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    """Set on every watch event of the Task or its batch Job (Job mode: re-check now)."""
    awaiting: bool = False
    """The Task's last event showed `AwaitingApproval=True` (approvals.py gates the job)."""
    seen: dict[str, Any] | None = None
    """The Task as the job last looked at it after a refused write (`_fresh`)."""
    revisit: dict[str, Any] | None = None
    """Set when another process (or a write of ours whose answer was lost) reserved the
    Task: once the job ends, look at the Task again if its events stop for a lease period."""
    body: dict[str, Any] | None = None
    """The Task as its latest watch event showed it, not yet used. A Pending Task is claimed
    from it instead of a GET: the claim's writes are fenced by its resourceVersion, so a stale
    body costs one conflict and a re-read, never a wrong claim."""

    def taken_elsewhere(self) -> bool:
        """The Task's latest watch event shows it reserved, claimed or ended. Asked only of a
        Task that was not reserved when its job began, before the job reserves it (a new Task
        is reserved only once it has a slot): so another process did."""
        if self.body is None:
            return False
        meta = self.body.get("metadata") or {}
        return FINALIZER in (meta.get("finalizers") or []) or (self.body.get("status") or {}).get(
            "phase"
        ) not in (None, "Pending")

    def take_pending(self) -> dict[str, Any] | None:
        """The watched body if it shows a Pending (never claimed) Task, once; else None."""
        body, self.body = self.body, None
        if body is None or (body.get("status") or {}).get("phase") not in (None, "Pending"):
            return None
        return body


class TaskScheduler:
    def __init__(
        self,
        client: KubeClient,
        *,
        settings: SchedulerSettings | None = None,
        metrics: Metrics | None = None,
        model_factory: ModelFactory = default_model_factory,
        store: ObjectStore | None = None,
        cache: ObjectCache | None = None,
    ) -> None:
        """`store` resolves references (default: the API, `KubeStore`); with `cache` (the
        operator's watch-fed cache, behind `store`) a Task waits until the caches of its
        namespace are synced, and the Agent read for its execution mode is a cache read."""
        self.client = client
        self.cache = cache
        self.settings = settings or SchedulerSettings()
        self.metrics = metrics or Metrics()
        self.writer = TaskWriter(client, self.metrics)
        self.identity = f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}"
        """This process, as the holder of execution leases."""
        self.claimer = Claimer(
            client, self.identity, self.settings.lease_seconds, metrics=self.metrics
        )
        store = store or KubeStore(client)
        self.store = store
        self.reaper = CheckpointReaper(client)
        """Deletes the checkpoints of the Tasks this process finished, in batches."""
        self.references = ReferenceWait(
            client, store, self.writer.recorder, self.settings.reference_grace_seconds
        )
        self.runner = Runner(
            self.writer,
            store,
            self.metrics,
            model_factory,
            keep_checkpoints=self.settings.keep_checkpoints,
            approval_timeout=self.settings.approval_timeout,
            reaper=self.reaper,
        )
        self.approvals = ApprovalGate(client, cache, self.metrics)
        """Holds the jobs of Tasks that wait for tool-call approvals (operator/approvals.py)."""
        self.jobs = JobSupervisor(
            client,
            self.writer,
            self.metrics,
            dataclasses.replace(self.settings.job, lease_seconds=self.settings.lease_seconds),
            poll_seconds=self.settings.job_poll_seconds,
            cancel_grace_seconds=self.settings.job_cancel_grace_seconds,
            keep_checkpoints=self.settings.keep_checkpoints,
        )
        self._capacity = asyncio.Semaphore(self.settings.max_concurrent_tasks)
        self._jobs: dict[str, Job] = {}
        self._later: dict[str, asyncio.TimerHandle] = {}
        """Per Task uid: a look at a Task that needs none now (another holder's live lease;
        a finalizer its runner is about to remove). Every watch event of the Task replaces it."""
        self._claim_locks: dict[str, asyncio.Lock] = {}
        self._housekeeping: set[asyncio.Task[None]] = set()
        self._namespaces: set[str] = set()
        self._peers: dict[str, float] = {}
        """Other processes (lease holders seen in Task events) -> when last seen (loop time):
        the replicas new Tasks are split with (`_preferred`)."""
        self.running = 0

    # -- the kopf-facing entry point ------------------------------------------------------

    def observe(self, body: dict[str, Any], event_type: str | None) -> None:
        """React to one watch event of a Task. Never blocks; never raises."""
        meta = body.get("metadata") or {}
        uid = meta.get("uid")
        if not uid:
            return
        self._namespaces.add(meta.get("namespace", ""))
        spec = body.get("spec") or {}
        phase = (body.get("status") or {}).get("phase")
        deleting = bool(meta.get("deletionTimestamp"))
        later = self._later.pop(uid, None)
        if later is not None:
            later.cancel()
        job = self._jobs.get(uid)
        if event_type == "DELETED":
            if job is not None and job.task is not None:
                job.task.cancel()
            return
        if job is not None:
            if deleting or spec.get("cancel"):
                job.cancel.set()
            job.awaiting = awaiting_approval(body)
            job.body = body
            job.wake.set()
            return
        if phase in TERMINAL_PHASES:
            if FINALIZER in (meta.get("finalizers") or []):
                # Whoever ran it removes it next; only a Task left with it (its runner
                # stopped in between) needs this process, so look again after a grace.
                self._look_later(uid, RELEASE_GRACE_SECONDS, self._release, body)
            return
        if phase == "Running":
            # Executing elsewhere under a live lease: no job, no reads, until its events stop
            # for longer than the lease (each renewal and progress write is an event). Not
            # for a Task running in a Job: its pod holds the lease, and an operator that
            # restarted must supervise the Job (failures, cancel, deadline) at once.
            remaining = 0.0 if runs_in_job(body) else held_elsewhere(body, self.identity)
            if remaining > 0:
                holder = lease_of(body).get("holder")
                if isinstance(holder, str):
                    self._peers[holder] = asyncio.get_running_loop().time()
                self._look_later(
                    uid, remaining + LEASE_EXPIRY_SLACK_SECONDS, self.observe, body, None
                )
                return
        elif (
            FINALIZER in (meta.get("finalizers") or []) and not deleting and not spec.get("cancel")
        ):
            # Pending and reserved by another process (Claimer.reserve), which has it queued
            # or is claiming it: look at it only if its events stop for a lease period.
            self._look_later(uid, self.settings.lease_seconds, self._start, body)
            return
        elif (
            phase in (None, "Pending")
            and not deleting
            and not spec.get("cancel")
            and self._preferred(uid) != self.identity
        ):
            # Another replica's share of new Tasks: it reserves at once if it has a free
            # slot, and its write is this Task's next event. No job here unless it has not.
            self._look_later(uid, DEFER_TO_PREFERRED_SECONDS, self._start, body)
            return
        self._start(body)

    def _start(self, body: dict[str, Any]) -> None:
        """Start the job of a Task that has none in this process."""
        meta, spec = body["metadata"], body.get("spec") or {}
        uid = meta["uid"]
        if uid in self._jobs:
            return
        job = Job(awaiting=awaiting_approval(body), body=body)
        if meta.get("deletionTimestamp") or spec.get("cancel"):
            job.cancel.set()
        self._jobs[uid] = job
        job.task = asyncio.create_task(
            self._job(uid, meta["namespace"], meta["name"], job, runs_in_job(body)),
            name=f"ordo-task-{uid}",
        )

    def _preferred(self, uid: str) -> str:
        """The process that should take the new Task `uid`: of this one and the replicas seen
        holding a lease in the last lease period, the one whose stable hash with the uid is
        highest (rendezvous hashing: every replica computes the same answer, and each gets an
        equal share; a replica that goes away only moves its own share)."""
        now = asyncio.get_running_loop().time()
        live = [self.identity]
        for peer, seen in list(self._peers.items()):
            if now - seen > self.settings.lease_seconds:
                del self._peers[peer]
            else:
                live.append(peer)
        return max(live, key=lambda p: (zlib.crc32(f"{uid}/{p}".encode()), p))

    def _look_later(self, uid: str, delay: float, callback: Any, *args: Any) -> None:
        def fire() -> None:
            self._later.pop(uid, None)
            callback(*args)

        self._later[uid] = asyncio.get_running_loop().call_later(delay, fire)

    def _release(self, body: dict[str, Any]) -> None:
        meta = body["metadata"]
        self._spawn(self.writer.release(meta["namespace"], meta["name"], body))

    def observe_job(self, body: dict[str, Any]) -> None:
        """React to a watch event of a batch Job ordo created: wake the supervisor of the
        Task that owns it. Never blocks; never raises."""
        for ref in (body.get("metadata") or {}).get("ownerReferences") or []:
            if ref.get("kind") == "Task":
                job = self._jobs.get(str(ref.get("uid")))
                if job is not None:
                    job.wake.set()

    def observe_approval(self, body: dict[str, Any], event_type: str | None) -> None:
        """React to a watch event of a ToolApproval: wake the Task it names, write its
        `Accepted` condition. Never blocks; never raises."""
        self._spawn(self._observe_approval(body, event_type))

    async def _observe_approval(self, body: dict[str, Any], event_type: str | None) -> None:
        try:
            await self.approvals.observe(body, event_type)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning(
                "ToolApproval could not be evaluated",
                extra={"ordo": {"errorType": type(exc).__name__}},
            )

    async def sweep(self) -> None:
        """Observe every Task of the namespaces seen so far again, so a Task whose job gave
        up (API unavailable for longer than the retry bound) is picked up once it returns."""
        for namespace in sorted(self._namespaces):
            try:
                bodies = await self.client.list("Task", namespace)
            except ApiError:
                continue
            for body in bodies:
                body.setdefault("metadata", {}).setdefault("namespace", namespace)
                self.observe(body, None)

    async def shutdown(self) -> None:
        """Stop every run; `Running` Tasks keep their checkpoints and resume on restart."""
        for later in self._later.values():
            later.cancel()
        self._later.clear()
        tasks = [j.task for j in self._jobs.values() if j.task is not None] + list(
            self._housekeeping
        )
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        try:
            await self.reaper.close()
        except Exception:
            log.warning("checkpoints of finished Tasks could not be deleted at shutdown")

    def _spawn(self, coro: Any) -> None:
        t: asyncio.Task[None] = asyncio.create_task(coro)
        self._housekeeping.add(t)
        t.add_done_callback(self._housekeeping.discard)

    # -- one job per Task -----------------------------------------------------------------

    async def _job(
        self, uid: str, namespace: str, name: str, job: Job, in_job: bool = False
    ) -> None:
        """Process one Task. Transient API failures are retried a bounded number of times;
        anything else ends the Task `InternalError` (never a retry that calls the model)."""
        logs.bind(namespace=namespace, task=name)
        backoff = RETRY_FIRST_SECONDS
        attempt = 0
        try:
            while attempt < RETRY_ATTEMPTS:
                attempt += 1
                try:
                    await self._attempt(namespace, name, job, in_job)
                    if uid in self.runner.left_waiting:  # stopped for approvals: wait for them
                        self.runner.left_waiting.discard(uid)
                        job.awaiting = True
                        attempt -= 1
                        continue
                    return
                except asyncio.CancelledError:
                    return
                except NotSynced:
                    attempt -= 1  # the cache lost its watch meanwhile: wait for it again
                except WaitForReferences as wait:
                    attempt -= 1  # bounded by the grace period, not by the retries
                    job.wake.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(job.wake.wait(), wait.delay)
                except RunAbandoned:
                    # Nothing was written for that run; look at the Task again (another
                    # holder's lease is waited for, a finished Task is left alone).
                    log.info(
                        "run abandoned; looking at the task again",
                        extra={"ordo": {"attempt": attempt, "retryInSeconds": backoff}},
                    )
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, RETRY_MAX_SECONDS)
                except ApiError as exc:
                    if not exc.transient or attempt == RETRY_ATTEMPTS:
                        await self._give_up(namespace, name, exc)
                        return
                    log.warning(
                        "kubernetes API failure; retrying the task job",
                        extra={
                            "ordo": {
                                "errorStatus": exc.status,
                                "errorReason": exc.api_reason,
                                "attempt": attempt,
                                "retryInSeconds": backoff,
                            }
                        },
                    )
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, RETRY_MAX_SECONDS)
                except Exception as exc:
                    await self._give_up(namespace, name, exc)
                    return
        finally:
            self._jobs.pop(uid, None)
            if job.revisit is not None and uid not in self._later:
                self._look_later(uid, self.settings.lease_seconds, self._start, job.revisit)

    async def _give_up(self, namespace: str, name: str, exc: Exception) -> None:
        """End the Task `Failed/InternalError` after a failure the job cannot retry. A
        transient failure that outlasted the retries leaves the Task for the next sweep."""
        if isinstance(exc, ApiError) and exc.transient:
            log.error(
                "kubernetes API unavailable; the task is left for the next sweep",
                extra={"ordo": {"errorStatus": exc.status, "errorReason": exc.api_reason}},
            )
            return
        outcome = internal_error(exc)
        try:
            body = await self.client.get("Task", namespace, name)
            if body is None or (body.get("status") or {}).get("phase") in TERMINAL_PHASES:
                return
            await self.writer.finish(body, outcome)
        except Exception:
            log.error("the task could not be marked failed; it is left for the next sweep")

    async def _attempt(self, namespace: str, name: str, job: Job, in_job: bool = False) -> None:
        await self._wait_synced(namespace, job)
        if job.awaiting:  # holds no slot while tool calls wait for a human decision
            await self.approvals.wait(namespace, name, job.wake, job.cancel)
        self.metrics.pending.inc()
        waiting = True
        try:
            body: dict[str, Any] | None = None
            if in_job:
                # Its pod holds the execution lease: supervise the Job, do not wait for it.
                body = await self.client.get("Task", namespace, name)
                if body is None or (body.get("status") or {}).get("phase") in TERMINAL_PHASES:
                    return
                if not runs_in_job(body):
                    body = None
            if body is None:
                body = job.take_pending() or await self.claimer.wait_for_other_holder(
                    namespace, name
                )
            if body is None:
                return
            meta = body["metadata"]
            pending = not in_job and (body.get("status") or {}).get("phase") in (None, "Pending")
            # A new Task nobody reserved yet (a reserved one is looked at here only after its
            # events stopped for a lease period, or by the job that reserved it).
            new = pending and FINALIZER not in (meta.get("finalizers") or [])
            must_wait = self._capacity.locked()
            marker: asyncio.Task[None] | None = None
            if must_wait and not job.cancel.is_set():
                marker = asyncio.create_task(self._mark_later(job, body, new))
            try:
                # A new Task is not reserved while it waits: a replica with a free slot may
                # take it, and its reservation (the Task's next event) ends the wait here.
                got = await acquire(
                    self._capacity,
                    job.cancel,
                    job.wake if new else None,
                    job.taken_elsewhere if new else None,
                )
            finally:
                if marker is not None:
                    marker.cancel()
            self.metrics.pending.dec()
            waiting = False
            if got == TAKEN:
                job.revisit = job.body
                return
            try:
                self.running += 1
                self.metrics.running.inc()
                # After a wait for capacity the Task may have changed: its latest watch event
                # or, without one, a fresh read (a Pending Task's reservation is conditional
                # on its resourceVersion, so a stale body costs a refused write, not a read).
                fresh: dict[str, Any] | None = body
                if pending:
                    fresh = await self.claimer.reserve(
                        job.take_pending() or body, lambda: self._fresh(job, namespace, name)
                    )
                    if fresh is None:
                        job.revisit = job.seen
                elif must_wait:
                    fresh = job.take_pending() or await self.client.get("Task", namespace, name)
                if fresh is not None:
                    await self._process(fresh, job)
            finally:
                self.running -= 1
                self.metrics.running.dec()
                if got == SLOT:
                    self._capacity.release()
        finally:
            if waiting:
                self.metrics.pending.dec()

    async def _mark_later(self, job: Job, body: dict[str, Any], new: bool) -> None:
        """Mark the Task `WaitingForCapacity` once it has waited WAITING_MARK_AFTER_SECONDS
        (cancelled when the wait ends first): by the replica its hash prefers, so one
        replica writes it; not once another process took the Task."""
        await asyncio.sleep(WAITING_MARK_AFTER_SECONDS)
        if new and (
            job.taken_elsewhere() or self._preferred(body["metadata"]["uid"]) != self.identity
        ):
            return
        try:
            await mark_waiting(self.client, job.body or body, self.settings.max_concurrent_tasks)
        except ApiError as exc:
            log.info(
                "could not mark the Task as waiting for capacity",
                extra={"ordo": {"errorStatus": exc.status, "errorReason": exc.api_reason}},
            )

    async def _fresh(self, job: Job, namespace: str, name: str) -> dict[str, Any] | None:
        """The Task as it is now, after a refused write: its next watch event (the write that
        beat ours is usually on its way), else a read."""
        job.wake.clear()
        if job.body is None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(job.wake.wait(), FRESH_BODY_WAIT_SECONDS)
        body, job.body = job.body, None
        if body is None:
            body = await self.client.get("Task", namespace, name)
        job.seen = body
        return body

    async def _wait_synced(self, namespace: str, job: Job) -> None:
        """Until the caches of `namespace` are synced the Task waits Pending, unclaimed (a
        cancel ends the wait: cancelling reads no reference)."""
        if self.cache is None or self.cache.synced(namespace):
            return
        log.info("waiting for the operator's caches of the namespace to sync")
        synced = asyncio.create_task(self.cache.wait_synced(namespace))
        cancelled = asyncio.create_task(job.cancel.wait())
        try:
            await asyncio.wait({synced, cancelled}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            synced.cancel()
            cancelled.cancel()

    async def _agent(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Agent (for its execution mode): from the cache (NotSynced when unreadable),
        or from the API without one."""
        if self.cache is None:
            return await self.client.get("Agent", namespace, name)
        return self.cache.get("Agent", namespace, name)

    async def _process(self, body: dict[str, Any], job: Job) -> None:
        namespace = body["metadata"]["namespace"]
        phase = (body.get("status") or {}).get("phase")
        if phase in TERMINAL_PHASES:
            return
        try:
            task = Task.model_validate(body)
        except ValidationError as exc:
            await self.writer.finish(
                body,
                TaskOutcome(
                    "Failed", "InvalidSpec", f"Task is invalid at {validation_problem(exc)}"
                ),
            )
            return
        if runs_in_job(body):
            fresh = await resume_supervision(self.jobs, self.claimer, body, job.wake, job.cancel)
            if fresh is None:
                return
            body, phase = fresh, (fresh.get("status") or {}).get("phase")
        if job.cancel.is_set():
            await self.writer.finish(
                body, TaskOutcome("Cancelled", "Cancelled", "cancelled before it started")
            )
            return

        agent = await self._agent(namespace, task.spec.agent_ref)
        mode = select_mode(
            agent,
            self.settings.default_execution_mode,
            (body.get("status") or {}).get("executionMode"),
        )
        if mode == "Job" and not self.settings.job.image:
            await self.writer.finish(body, NO_RUNNER_IMAGE)
            return

        resuming = phase == "Running"
        store = SecretsReadOnce(self.store)  # the pre-check and the run read each Secret once
        if not resuming:
            await self.references.check(task, body, store)  # GitOps order: a bounded wait
        if self.cache is not None and not self.cache.synced(namespace):
            raise NotSynced("references", namespace)  # never claim on an unreadable cache
        async with self._claim_locks.setdefault(namespace, asyncio.Lock()):
            if not resuming and task.spec.idempotency_key:
                other = await self.claimer.duplicate_of(body)
                if other is not None:
                    await self.writer.finish(
                        body,
                        TaskOutcome(
                            "Failed",
                            "DuplicateExecution",
                            f"Task {other!r} already uses idempotencyKey of this Task",
                        ),
                    )
                    return
            claim = await self.claimer.claim(body, resuming, mode)
        if claim is None:
            return
        claim = await record_mode(self.client, claim, mode)
        if mode == "Job":
            fresh = await run_in_job(
                self.client, self.writer, self.jobs, claim, agent, job.wake, job.cancel
            )
            if fresh is not None:
                await self._process(fresh, job)
        else:
            await self.runner.run(claim, task, job.cancel, store)
