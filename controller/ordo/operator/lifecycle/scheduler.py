"""Runs each Task exactly once per claim, bounded by --max-concurrent-tasks.

The story of a Task in this process: the Task feed (feed.py, ordo's own informer) delivers
each watch event to `TaskScheduler.observe` (thin and synchronous), which reads it once into
a `TaskView` (view.py), asks the pure `decide` (decide.py) for an `Action`, and applies it
here: the dispatcher `_apply` is the only code that touches timers, jobs and spawned writes.
A `StartJob` starts the Task's job (job.py: its state and bounded loop of attempts), whose
attempt (process.py) waits for another holder's lease and for capacity, reserves and claims
the Task (tasks/claim.py) and runs it (tasks/runner.py) or supervises its batch Job
(jobmode/); each ends in a typed result (`Claimed | Lost | Held | NotSettled`, `Finished | Parked |
Abandoned`).

References (the Agent for the execution mode, the GitOps pre-check, the run's resolution) are
read through `store`; in the operator that is the watch-fed cache (kube/cache.py), and a Task
is not claimed until the caches of its namespace are synced. A periodic `sweep` picks up
Tasks whose job gave up on transient errors.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import socket
import uuid
from collections.abc import Coroutine
from datetime import UTC, datetime
from typing import Any, assert_never

from ...runtime import ModelFactory, default_model_factory
from ...runtime.store import ObjectStore
from ..jobmode.supervisor import JobSupervisor
from ..kube.cache import ObjectCache
from ..kube.client import ApiError, KubeClient
from ..kube.store import KubeStore
from ..settings import SchedulerSettings
from ..tasks.approvals import ApprovalGate
from ..tasks.childwait import ChildGate
from ..tasks.claim import Claimer
from ..tasks.processlease import ProcessLeases, identity_name
from ..tasks.reaper import CheckpointReaper
from ..tasks.references import ReferenceWait
from ..tasks.runner import Runner
from ..tasks.writer import TaskWriter
from ..telemetry import logs
from ..telemetry.metrics import Metrics
from ..workers.pool import WorkerPool, WorkerSettings
from .decide import (
    Action,
    Graces,
    Ignore,
    Local,
    LookLater,
    NotifyJob,
    Release,
    Reobserve,
    StartJob,
    StopJob,
    decide,
    preferred,
)
from .job import Job, attempts
from .process import TaskProcess
from .view import TaskView

log = logging.getLogger("ordo.operator")


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
        leases: ProcessLeases | None = None,
    ) -> None:
        """`store` resolves references (default: the API, `KubeStore`); with `cache` (the
        operator's watch-fed cache, behind `store`) a Task waits until the caches of its
        namespace are synced, and the Agent read for its execution mode is a cache read.
        With `leases` (started: processlease.py) the Tasks this process runs live as long
        as its Lease, and the replicas new Tasks are split with are the peers' Leases;
        without, each run renews its Task's own lease and this process splits with nobody."""
        self.client = client
        self.cache = cache
        self.settings = settings or SchedulerSettings()
        self.metrics = metrics or Metrics()
        self.writer = TaskWriter(client, self.metrics)
        self.leases = leases
        self.identity = (
            leases.identity
            if leases is not None
            else identity_name(socket.gethostname(), uuid.uuid4().hex[:8])
        )
        """This process, as the holder of execution leases."""
        self.claimer = Claimer(
            client, self.identity, self.settings.lease_seconds, metrics=self.metrics, leases=leases
        )
        store = store or KubeStore(client, self.settings.credential_policy)
        self.store = store
        self.reaper = CheckpointReaper(client)
        """Deletes the checkpoints of the Tasks this process finished, in batches."""
        self.references = ReferenceWait(
            client, store, self.writer.recorder, self.settings.reference_grace_seconds
        )
        self.runner: Runner | WorkerPool = Runner(
            self.writer,
            store,
            self.metrics,
            model_factory,
            keep_checkpoints=self.settings.keep_checkpoints,
            approval_timeout=self.settings.approval_timeout,
            max_delegation_depth=self.settings.max_delegation_depth,
            reaper=self.reaper,
        )
        self.pool: WorkerPool | None = None
        """With --workers N > 0: the runs execute in N supervised children (workers/pool.py),
        behind the Runner's interface, so process.py calls `runner.run` either way."""
        if self.settings.workers > 0:
            self.pool = WorkerPool(
                self.settings.workers,
                store,
                self.metrics,
                WorkerSettings(
                    keep_checkpoints=self.settings.keep_checkpoints,
                    approval_timeout=self.settings.approval_timeout,
                    max_delegation_depth=self.settings.max_delegation_depth,
                ),
                valid_for=leases.own.valid_for if leases is not None else None,
                stall_seconds=self.settings.worker_stall_seconds,
                log_format=self.settings.job.log_format,  # this process's (main.py)
                log_level=self.settings.job.log_level,
            )
            self.runner = self.pool
        self.approvals = ApprovalGate(client, cache, self.metrics)
        """Holds the jobs of Tasks that wait for tool-call approvals (approvals.py)."""
        self.children = ChildGate(client, self.metrics)
        """Holds the jobs of parent Tasks that wait for their children (childwait.py)."""
        self.jobs = JobSupervisor(
            client,
            self.writer,
            self.metrics,
            dataclasses.replace(self.settings.job, lease_seconds=self.settings.lease_seconds),
            poll_seconds=self.settings.job_poll_seconds,
            cancel_grace_seconds=self.settings.job_cancel_grace_seconds,
            keep_checkpoints=self.settings.keep_checkpoints,
        )
        self.capacity = asyncio.Semaphore(self.settings.max_concurrent_tasks)
        """The slots of --max-concurrent-tasks (tasks/capacity.py waits for one)."""
        self.graces = Graces(self.settings.lease_seconds)
        """The waits `decide` uses (its lease period follows the settings')."""
        self._jobs: dict[str, Job] = {}
        self._later: dict[str, tuple[asyncio.TimerHandle, str]] = {}
        """Per Task uid: a look at a Task that needs none now (`LookLater`), and the
        resourceVersion it was decided on. Every event of the Task that changed it replaces
        the look."""
        self._claim_locks: dict[str, asyncio.Lock] = {}
        self._housekeeping: set[asyncio.Task[None]] = set()
        self._namespaces: set[str] = set()
        self._peers_expire = math.inf
        """When the first peer's Lease lapses (loop time): the `Local`s are rebuilt then."""
        if leases is not None:
            leases.peers.on_change = self._peers_changed
        self._locals: tuple[Local, Local] | None = None
        """This process without and with a job for a Task (`local`)."""
        self.running = 0

    # -- watch event -> view -> decide -> action ------------------------------------------

    def observe(self, body: dict[str, Any], event_type: str | None) -> None:
        """React to one watch event of a Task. Never blocks; never raises."""
        view = TaskView.of(body, event_type)
        if view is None:
            return
        self._namespaces.add(view.namespace)
        if self.children.waiting:  # a child's event wakes its waiting parent
            self.children.child_changed(body)
        later = self._later.get(view.uid)
        if later is not None:
            if event_type is None and later[1] and later[1] == _version(view.body):
                # The sweep observing the object the look was decided on, unchanged: not an
                # event, so the look keeps its time (a reservation whose process died is
                # taken over after a lease period, however often it is observed).
                return
            del self._later[view.uid]
            later[0].cancel()
        self._apply(decide(view, self.local(view.uid)))

    def local(self, uid: str) -> Local:
        """This process's state as a decision about the Task `uid` sees it. Two `Local`s
        serve every event (with and without a job), rebuilt only when a peer's Lease
        changes or lapses, or the lease period changed: building one per event would cost
        more than the rest of `observe`."""
        if (
            self._locals is None
            or asyncio.get_running_loop().time() >= self._peers_expire
            or self._locals[0].graces is not self.graces
            or self.graces.lease_seconds != self.settings.lease_seconds
        ):
            self._locals = self._rebuild_locals()
        return self._locals[uid in self._jobs]

    def _peers_changed(self) -> None:
        self._locals = None

    def _rebuild_locals(self) -> tuple[Local, Local]:
        """The live peers (their Leases) and the two `Local`s with them."""
        lease_seconds = self.settings.lease_seconds
        loop_now = asyncio.get_running_loop().time()
        peers: tuple[str, ...] = ()
        self._peers_expire = math.inf
        left = None
        if self.leases is not None:
            now = datetime.now(UTC)
            found = self.leases.peers.peers(now)
            peers = tuple(name for name, _ in found)
            if found:
                first = min(expires for _, expires in found)
                self._peers_expire = loop_now + (first - now).total_seconds()
            left = self.leases.left
        if self.graces.lease_seconds != lease_seconds:
            self.graces = dataclasses.replace(self.graces, lease_seconds=lease_seconds)
        graces = self.graces
        return (
            Local(self.identity, False, peers, graces, left),
            Local(self.identity, True, peers, graces, left),
        )

    def preferred(self, uid: str) -> str:
        """The replica whose share of new Tasks `uid` is (decide.preferred)."""
        return preferred(uid, self.identity, self.local(uid).peers)

    def _apply(self, action: Action) -> None:
        """The dispatcher: the one place where decisions touch timers, jobs and spawns."""
        match action:
            case Ignore():
                pass
            case StopJob(uid=uid):
                job = self._jobs.get(uid)
                if job is not None and job.task is not None:
                    job.task.cancel()
            case NotifyJob(uid=uid, cancel=cancel, awaiting=awaiting, body=body):
                job = self._jobs.get(uid)
                if job is not None:
                    job.notify(cancel, awaiting, body)
            case StartJob(view=view):
                self._start(view)
            case Release(view=view):
                self._spawn(self.writer.release(view.namespace, view.name, view.body))
            case Reobserve(view=view):
                self.observe(view.body, None)  # a fresh view: the lease's time has passed
            case LookLater(delay=delay, then=then):
                self._look_later(action.uid, delay, then)
            case _:
                assert_never(action)

    def _look_later(self, uid: str, delay: float, then: StartJob | Release | Reobserve) -> None:
        def fire() -> None:
            self._later.pop(uid, None)
            self._apply(then)

        handle = asyncio.get_running_loop().call_later(delay, fire)
        self._later[uid] = (handle, _version(then.view.body))

    def _start(self, view: TaskView) -> None:
        """Start the job of a Task that has none in this process."""
        if view.uid in self._jobs:
            return
        job = Job.of(view)
        self._jobs[view.uid] = job
        job.task = asyncio.create_task(self._job(view, job), name=f"ordo-task-{view.uid}")

    async def _job(self, view: TaskView, job: Job) -> None:
        """Process one Task (job.py), then forget its job; a Task another process reserved
        meanwhile is looked at again if its events stop for a lease period."""
        logs.bind(namespace=view.namespace, task=view.name)
        process = TaskProcess(self, view.namespace, view.name, job, view.in_job)
        try:
            await attempts(job, process.attempt, process.give_up)
        finally:
            self._jobs.pop(view.uid, None)
            revisit = TaskView.of(job.revisit) if job.revisit is not None else None
            if revisit is not None and view.uid not in self._later:
                self._look_later(view.uid, self.settings.lease_seconds, StartJob(revisit))

    def claim_lock(self, namespace: str) -> asyncio.Lock:
        """Serialises the duplicate check and the claim of Tasks in one namespace."""
        return self._claim_locks.setdefault(namespace, asyncio.Lock())

    # -- the other watch events -------------------------------------------------------------

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

    async def start(self) -> None:
        """Start what runs beside the watches: the worker children (when --workers > 0)."""
        if self.pool is not None:
            await self.pool.start()

    async def shutdown(self) -> None:
        """Stop every run; `Running` Tasks keep their checkpoints and resume on restart."""
        for later, _ in self._later.values():
            later.cancel()
        self._later.clear()
        tasks = [j.task for j in self._jobs.values() if j.task is not None] + list(
            self._housekeeping
        )
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self.pool is not None:  # after the runs stopped: their children flushed them
            await self.pool.close()
        try:
            await self.reaper.close()
        except Exception:
            log.warning("checkpoints of finished Tasks could not be deleted at shutdown")

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        t: asyncio.Task[None] = asyncio.create_task(coro)
        self._housekeeping.add(t)
        t.add_done_callback(self._housekeeping.discard)


def _version(body: dict[str, Any]) -> str:
    """The object's resourceVersion ("" if it has none)."""
    return str((body.get("metadata") or {}).get("resourceVersion") or "")
