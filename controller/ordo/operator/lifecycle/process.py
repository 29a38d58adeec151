"""One attempt of a Task's job (job.py runs them in its bounded loop): wait for the caches
and for approvals, for another holder's lease and for capacity, reserve a new Task, check
its references, claim it (tasks/claim.py) and run it (tasks/runner.py, or a batch Job: jobmode/). Each
ends in a `Step` value; none is reported through a side channel.

State lives in the object: the claim and progress in `status`, the transcript in a
checkpoint ConfigMap the Task owns, so a restarted operator resumes a `Running` Task from its
last completed step. The Task is resolved once per claim: the references pre-check's
snapshot is the one the run uses (Secrets read once, taskstore.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any, assert_never

from pydantic import ValidationError

from ...api import TERMINAL_PHASES, Task
from ...errors import validation_problem
from ...runtime import Snapshot, TaskOutcome, internal_error
from ..jobmode.steps import NO_RUNNER_IMAGE, record_mode, resume_supervision, run_in_job
from ..jobmode.supervisor import remaining_timeout, runs_in_job, select_mode
from ..kube.cache import NotSynced
from ..kube.client import ApiError
from ..tasks.capacity import SLOT, TAKEN, acquire, mark_waiting
from ..tasks.claim import Claimed, Held, Lost, NotSettled
from ..tasks.references import Missing
from ..tasks.runner import Abandoned, Finished, Parked
from ..tasks.taskstore import SecretsReadOnce, credential_warning
from ..tasks.writer import FINALIZER
from .job import Done, Job, Step
from .workerloss import count_loss

if TYPE_CHECKING:
    from .scheduler import TaskScheduler

WAITING_MARK_AFTER_SECONDS = 3.0
"""A Task that waits this long for a slot is marked `Scheduled=False/WaitingForCapacity`
(once, by the replica its hash prefers). A shorter wait is not written: in a burst that
would be one more write per queued Task, for a state nobody sees. A process with no free
slot never reserves a new Task meanwhile (a replica with a free slot takes it, or this one
once a slot frees)."""
FRESH_BODY_WAIT_SECONDS = 1.0
"""After a refused conditional write, how long to wait for the Task's next watch event
before reading it instead."""
log = logging.getLogger("ordo.operator")


class TaskProcess:
    """The attempts of one Task's job, with the parts of its scheduler `s`."""

    def __init__(self, s: TaskScheduler, namespace: str, name: str, job: Job, in_job: bool):
        self.s = s
        self.namespace = namespace
        self.name = name
        self.job = job
        self.in_job = in_job

    async def give_up(self, exc: Exception) -> None:
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
            body = await self.s.client.get("Task", self.namespace, self.name)
            if body is None or (body.get("status") or {}).get("phase") in TERMINAL_PHASES:
                return
            await self.s.writer.finish(body, outcome)
        except Exception:
            log.error("the task could not be marked failed; it is left for the next sweep")

    async def attempt(self) -> Step:
        s, job, namespace, name = self.s, self.job, self.namespace, self.name
        await self._wait_synced()
        if job.awaiting:  # holds no slot while tool calls wait for a human decision
            await s.approvals.wait(namespace, name, job.wake, job.cancel)
        elif job.children:  # holds no slot while child Tasks run
            await s.children.wait(namespace, name, job.wake, job.cancel, self._time_left)
        s.metrics.pending.inc()
        waiting = True
        try:
            body: dict[str, Any] | None = None
            if self.in_job:
                # Its pod holds the execution lease: supervise the Job, do not wait for it.
                body = await s.client.get("Task", namespace, name)
                if body is None or (body.get("status") or {}).get("phase") in TERMINAL_PHASES:
                    return Done()
                if not runs_in_job(body):
                    body = None
            if body is None:
                body = job.take_pending() or await s.claimer.wait_for_other_holder(namespace, name)
            if body is None:
                return Done()
            meta = body["metadata"]
            pending = not self.in_job and (body.get("status") or {}).get("phase") in (
                None,
                "Pending",
            )
            # A new Task nobody reserved yet (a reserved one is looked at here only after its
            # events stopped for a lease period, or by the job that reserved it).
            new = pending and FINALIZER not in (meta.get("finalizers") or [])
            must_wait = s.capacity.locked()
            marker: asyncio.Task[None] | None = None
            if must_wait and not job.cancel.is_set():
                marker = asyncio.create_task(self._mark_later(body, new))
            try:
                # A new Task is not reserved while it waits: a replica with a free slot may
                # take it, and its reservation (the Task's next event) ends the wait here.
                got = await acquire(
                    s.capacity,
                    job.cancel,
                    job.wake if new else None,
                    job.taken_elsewhere if new else None,
                )
            finally:
                if marker is not None:
                    marker.cancel()
            s.metrics.pending.dec()
            waiting = False
            if got == TAKEN:
                job.revisit = job.body
                return Done()
            try:
                s.running += 1
                s.metrics.running.inc()
                return await self._reserve_and_process(body, pending, must_wait)
            finally:
                s.running -= 1
                s.metrics.running.dec()
                if got == SLOT:
                    s.capacity.release()
        finally:
            if waiting:
                s.metrics.pending.dec()

    async def _reserve_and_process(
        self, body: dict[str, Any], pending: bool, must_wait: bool
    ) -> Step:
        """After a wait for capacity the Task may have changed: its latest watch event or,
        without one, a fresh read (a Pending Task's reservation is conditional on its
        resourceVersion, so a stale body costs a refused write, not a read)."""
        job = self.job
        fresh: dict[str, Any] | None = body
        if pending:
            reserved = await self.s.claimer.reserve(job.take_pending() or body, self.fresh)
            if isinstance(reserved, Lost):
                job.revisit = job.seen
                return Done()
            if isinstance(reserved, NotSettled):
                return reserved
            fresh = reserved
        elif must_wait:
            fresh = job.take_pending() or await self.s.client.get("Task", self.namespace, self.name)
        return Done() if fresh is None else await self.process(fresh)

    async def _mark_later(self, body: dict[str, Any], new: bool) -> None:
        """Mark the Task `WaitingForCapacity` once it has waited WAITING_MARK_AFTER_SECONDS
        (cancelled when the wait ends first): by the replica its hash prefers, so one
        replica writes it; not once another process took the Task."""
        s, job = self.s, self.job
        await asyncio.sleep(WAITING_MARK_AFTER_SECONDS)
        if new and (job.taken_elsewhere() or s.preferred(body["metadata"]["uid"]) != s.identity):
            return
        try:
            await mark_waiting(s.client, job.body or body, s.settings.max_concurrent_tasks)
        except ApiError as exc:
            log.info(
                "could not mark the Task as waiting for capacity",
                extra={"ordo": {"errorStatus": exc.status, "errorReason": exc.api_reason}},
            )

    async def fresh(self) -> dict[str, Any] | None:
        """The Task as it is now, after a refused write: its next watch event (the write that
        beat ours is usually on its way), else a read."""
        job = self.job
        job.wake.clear()
        if job.body is None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(job.wake.wait(), FRESH_BODY_WAIT_SECONDS)
        body, job.body = job.body, None
        if body is None:
            body = await self.s.client.get("Task", self.namespace, self.name)
        job.seen = body
        return body

    async def _wait_synced(self) -> None:
        """Until the caches of the namespace are synced the Task waits Pending, unclaimed (a
        cancel ends the wait: cancelling reads no reference)."""
        cache = self.s.cache
        if cache is None or cache.synced(self.namespace):
            return
        log.info("waiting for the operator's caches of the namespace to sync")
        synced = asyncio.create_task(cache.wait_synced(self.namespace))
        cancelled = asyncio.create_task(self.job.cancel.wait())
        try:
            await asyncio.wait({synced, cancelled}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            synced.cancel()
            cancelled.cancel()

    async def _agent(self, name: str) -> dict[str, Any] | None:
        """The Agent (for its execution mode): from the cache (NotSynced when unreadable),
        or from the API without one."""
        if self.s.cache is None:
            return await self.s.client.get("Agent", self.namespace, name)
        return self.s.cache.get("Agent", self.namespace, name)

    async def _time_left(self, body: dict[str, Any]) -> float:
        """Seconds left of the Task's timeout (its Agent's and its own, anchored at its
        first start, as the run computes it)."""
        agent = await self._agent(str((body.get("spec") or {}).get("agentRef", "")))
        return remaining_timeout(body, agent, time.time())

    async def process(self, body: dict[str, Any]) -> Step:
        """Validate, check references, claim and run (or supervise in a Job) the Task."""
        s, job, namespace = self.s, self.job, self.namespace
        phase = (body.get("status") or {}).get("phase")
        if phase in TERMINAL_PHASES:
            return Done()
        try:
            task = Task.model_validate(body)
        except ValidationError as exc:
            problem = f"Task is invalid at {validation_problem(exc)}"
            await s.writer.finish(body, TaskOutcome("Failed", "InvalidSpec", problem))
            return Done()
        if runs_in_job(body):
            fresh = await resume_supervision(s.jobs, s.claimer, body, job.wake, job.cancel)
            if fresh is None:
                return Done()
            if isinstance(fresh, Parked):  # its run waits: without a slot, then a new Job
                return fresh
            body, phase = fresh, (fresh.get("status") or {}).get("phase")
        if job.cancel.is_set():
            await s.writer.finish(
                body, TaskOutcome("Cancelled", "Cancelled", "cancelled before it started")
            )
            return Done()

        # A Team Task runs in the operator (its members are Tasks with their own modes).
        agent = await self._agent(task.spec.agent_ref) if task.spec.agent_ref else None
        mode = select_mode(
            agent,
            s.settings.default_execution_mode,
            (body.get("status") or {}).get("executionMode"),
        )
        if mode == "Job" and not s.settings.job.image:
            await s.writer.finish(body, NO_RUNNER_IMAGE)
            return Done()

        resuming = phase == "Running"
        # The pre-check and the run read each Secret once; Warn-mode warnings go to the Task.
        store = SecretsReadOnce(s.store, credential_warning(s.writer, body))
        snapshot: Snapshot | None = None
        if not resuming:
            checked = await s.references.check(task, body, store)  # GitOps order: bounded
            if isinstance(checked, Missing):
                return checked
            snapshot = checked.snapshot
        if s.cache is not None and not s.cache.synced(namespace):
            raise NotSynced("references", namespace)  # never claim on an unreadable cache
        async with s.claim_lock(namespace):
            if not resuming and task.spec.idempotency_key:
                other = await s.claimer.duplicate_of(body)
                if other is not None:
                    await s.writer.finish(
                        body,
                        TaskOutcome(
                            "Failed",
                            "DuplicateExecution",
                            f"Task {other!r} already uses idempotencyKey of this Task",
                        ),
                    )
                    return Done()
            claimed = await s.claimer.claim(body, resuming, mode)
        match claimed:
            case Lost() | Held():
                return Done()
            case NotSettled():
                return claimed
            case Claimed(claim=claim):
                pass
            case _:
                assert_never(claimed)
        claim = await record_mode(s.client, claim, mode)
        if mode == "Job":
            fresh = await run_in_job(s.client, s.writer, s.jobs, claim, agent, job.wake, job.cancel)
            if isinstance(fresh, Parked):
                return fresh
            return Done() if fresh is None else await self.process(fresh)
        uid = str(body["metadata"]["uid"])
        before = s.pool.losses(uid) if s.pool is not None else 0
        ran = await s.runner.run(claim, task, job.cancel, store, snapshot)
        if s.pool is not None:
            if isinstance(ran, Abandoned) and s.pool.losses(uid) > before:
                if await count_loss(s.client, s.writer, claim):
                    s.pool.forget(uid)
                    return Done()
            elif isinstance(ran, Finished):
                s.pool.forget(uid)
        return Done() if isinstance(ran, Finished) else ran
