"""Runs one claimed Task through `ordo.runtime.execute`, adding only what is Kubernetes-
specific: the execution lease (kept while the run lasts, through the process Lease or renewed
per Task; losing it stops the run before any further side effect), the checkpoint (resume from it; a Task that made progress but has
no checkpoint ends `Interrupted`, never starts over), and the status/Event writers. The
checkpoint and progress writes are coalesced (coalesce.py).

A run ends in one of three values: `Finished` (the terminal status is written), `Parked`
(stopped for tool-call approvals: checkpoint and status written, the Task stays Running,
the scheduler waits for the decisions and resumes it) or `Abandoned` (this execution no
longer owns the Task: its lease was lost, or another execution claimed it; nothing was
written for the run). Lease loss is structured: the run and its lease keeper are sibling
tasks, and the keeper's loss ends the run (cancelled at its next await, so it starts no
further side effect and writes nothing)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any

from ... import timestamps
from ...api import Task
from ...engine.state import RunState
from ...errors import Interrupted
from ...runtime import ModelFactory, Prepared, Snapshot, TaskOutcome, execute
from ...runtime import status as status_mod
from ...runtime.delegation import lineage_of
from ...runtime.store import ObjectStore
from ...runtime.team import TeamRun, chain_entry
from ..kube.client import ApiError, Fenced
from ..telemetry import logs
from ..telemetry.metrics import Metrics
from . import approvals, childwait, pendingcalls, taskstatus, teamrun
from .checkpoint import SEQUENCE_STATUS, CheckpointDeleter, CheckpointStore
from .children import KubeDelegator
from .claim import Claim
from .coalesce import FLUSH_SECONDS, RunWrites
from .conditions import set_condition
from .writer import ProgressWriter, TaskWriter, log_events

log = logging.getLogger("ordo.operator")


def parse_time(value: str | None) -> float | None:
    """Epoch seconds of an RFC 3339 timestamp, or None (ordo/timestamps.py)."""
    return timestamps.epoch(value)


@dataclass(frozen=True, slots=True)
class Finished:
    """The Task's terminal status is written."""


@dataclass(frozen=True, slots=True)
class Parked:
    """The run stopped for tool-call approvals (AwaitingApproval) or for child Tasks
    (AwaitingChildren); the Task stays Running."""

    approvals: bool = True
    """Calls wait for human decisions (the scheduler waits for those first)."""
    children: bool = False
    """Calls wait for child Tasks to end."""


@dataclass(frozen=True, slots=True)
class Abandoned:
    """Nothing was written for the run: this execution no longer owns the Task. The
    scheduler looks at the Task again: it waits for any other holder's lease, then resumes
    from the checkpoint, or finds the Task finished."""

    why: str


RunResult = Finished | Parked | Abandoned


class Runner:
    def __init__(
        self,
        writer: TaskWriter,
        store: ObjectStore,
        metrics: Metrics,
        model_factory: ModelFactory,
        *,
        keep_checkpoints: bool = False,
        flush_seconds: float = FLUSH_SECONDS,
        approval_timeout: float | None = None,
        max_delegation_depth: int | None = None,
        reaper: CheckpointDeleter | None = None,
    ) -> None:
        self.writer = writer
        self.reaper = reaper
        """Deletes finished Tasks' checkpoints in batches (reaper.py); None: one by one."""
        self.store = store
        self.metrics = metrics
        self.model_factory = model_factory
        self.keep_checkpoints = keep_checkpoints
        self.flush_seconds = flush_seconds
        """How long a finished step may stay unwritten (coalesce.py); 0 writes every step."""
        self.approval_timeout = approval_timeout
        """Default seconds a tool call waits for a human decision (--approval-timeout)."""
        self.max_delegation_depth = max_delegation_depth
        """The deepest a tree of Tasks may grow (--max-delegation-depth; None: the default)."""

    async def run(
        self,
        claim: Claim,
        task: Task,
        cancel: asyncio.Event,
        store: ObjectStore | None = None,
        snapshot: Snapshot | None = None,
    ) -> RunResult:
        """Run the claimed Task to its end while keeping the lease; write the outcome unless
        another execution took the Task over. `store` (default: the runner's) resolves it,
        unless `snapshot` is the Task already resolved (the references pre-check's)."""
        logs.bind(executionId=claim.execution_id, agent=chain_entry(task))
        lost = asyncio.Event()
        renewer = asyncio.create_task(claim.lease.keep(lost.set))
        run = asyncio.create_task(self._run(claim, task, cancel, store or self.store, snapshot))
        result: RunResult | None = None
        try:
            await asyncio.wait({run, renewer}, return_when=asyncio.FIRST_COMPLETED)
            if not run.done() and lost.is_set():
                log.warning("execution lease lost; stopping this run")
                run.cancel()
                await asyncio.wait({run})  # a cancel of this task still propagates
                if run.cancelled():
                    result = Abandoned("the execution lease was lost")
                else:  # it ended just before the cancel
                    result = run.result()
            else:
                result = await run
            return result
        finally:
            if not run.done():  # this task was cancelled (shutdown): stop the run first
                run.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await run
            renewer.cancel()
            # A renewal in flight must not land after the conditional delete.
            with contextlib.suppress(asyncio.CancelledError):
                await renewer
            # A Task that ended is taken over by nobody: no write to release its lease.
            await claim.lease.release(write=not isinstance(result, Finished))

    async def _run(
        self,
        claim: Claim,
        task: Task,
        cancel: asyncio.Event,
        store: ObjectStore,
        snapshot: Snapshot | None,
    ) -> RunResult:
        started = time.monotonic()
        body, execution_id = claim.body, claim.execution_id
        status = body.get("status") or {}
        checkpoints = CheckpointStore(self.writer.client, body, execution_id)
        writes: RunWrites | None = None

        async def prepare(snapshot: Snapshot) -> Prepared:
            nonlocal writes
            checkpoints.snapshot_hash = snapshot.content_hash
            state = None
            if claim.resuming:
                state = await self._resume_state(
                    checkpoints, snapshot, int(status.get("step") or 0)
                )
                if approvals.awaiting(body):  # the waiting calls were decided (or timed out)
                    fields = taskstatus.resumed(status.get("conditions"))
                    await taskstatus.fenced(
                        self.writer.client, task.namespace, task.name, execution_id, fields
                    )
                    body.setdefault("status", {}).update(fields)
                    await self._withdraw(body)
                if childwait.awaiting_children(body):  # the children it waited for ended
                    fields = childwait.resumed_fields(body["status"].get("conditions"))
                    await taskstatus.fenced(
                        self.writer.client, task.namespace, task.name, execution_id, fields
                    )
                    body["status"].update(fields)
            await self.writer.recorder.post(
                body,
                "Resumed" if claim.resuming else "Started",
                f"execution {execution_id} "
                + (f"resumed at step {state.step}" if state else "started")
                + f" (agent {task.spec.agent_ref}, maxSteps {snapshot.max_steps})",
            )
            run_metrics = self.metrics.listener(
                task.namespace,
                snapshot.agent.name,
                snapshot.endpoint.spec.provider,
                snapshot.endpoint.spec.effective_model(),
            )
            progress = ProgressWriter(self.writer, body, snapshot, execution_id)
            # The lease is checked after each checkpoint written before a non-idempotent tool
            # call, so a run that lost its lease never starts one.
            writes = RunWrites(
                checkpoints, progress.write, lease=claim.lease, flush_seconds=self.flush_seconds
            )
            lineage = lineage_of(task.name, snapshot.agent.name, body.get("metadata"))
            return Prepared(
                state,
                [writes, progress, run_metrics, log_events],
                approval_decider=approvals.decider(store, body),
                approval_timeout=self.approval_timeout,
                delegator=KubeDelegator(
                    self.writer.client, body, lineage, self.metrics, self.writer.recorder
                ),
                max_delegation_depth=self.max_delegation_depth,
            )

        async def prepare_team(team: TeamRun) -> Prepared:
            return await teamrun.prepared(
                team, claim, body, self.writer, self.metrics, self.max_delegation_depth, checkpoints
            )

        try:
            outcome: TaskOutcome = await execute(
                task,
                store,
                prepare=prepare,
                prepare_team=prepare_team,
                cancel=cancel,
                model_factory=self.model_factory,
                started_at=parse_time(status.get("startedAt")),
                snapshot=snapshot,
            )
        except BaseException:
            if writes is not None:  # stopped (shutdown): keep the last finished step
                await writes.close(flush=True)
            raise
        if writes is not None:  # no flush may land after the terminal write
            await writes.close()
        if outcome.abandoned:
            log.warning(
                "this execution no longer owns the Task (lease lost or another execution "
                "claimed it); it stops without writing its outcome"
            )
            return Abandoned("this execution no longer owns the Task")
        if (outcome.awaiting or outcome.awaiting_children) and outcome.result is not None:
            children = bool(outcome.result.state.waiting_children)
            if outcome.awaiting:
                await self._await_approval(body, outcome, checkpoints, execution_id)
            else:
                await self._await_children(body, outcome, checkpoints, execution_id)
            return Parked(approvals=outcome.awaiting, children=children)
        if self.keep_checkpoints and outcome.result is not None:
            # Kept for debugging and replay: the final state of every Task, also of a run so
            # fast that coalescing never wrote a checkpoint (coalesce.py).
            try:
                await checkpoints.save(outcome.result.state)
            except Exception as exc:
                log.warning(
                    "final checkpoint (--keep-checkpoints) could not be written",
                    extra={"ordo": {"errorType": type(exc).__name__}},
                )
        await self.writer.finish(body, outcome, execution_id=execution_id, started=started)
        if not self.keep_checkpoints and checkpoints.touched:
            if self.reaper is not None and checkpoints.release_to(self.reaper):
                return Finished()
            try:
                await checkpoints.delete()
            except Exception:
                log.warning("checkpoint could not be deleted; the Task's deletion will remove it")
        return Finished()

    async def _await_approval(
        self,
        body: dict[str, Any],
        outcome: TaskOutcome,
        checkpoints: CheckpointStore,
        execution_id: str,
    ) -> None:
        """The run stopped for approvals: checkpoint, the waiting calls' arguments and digests
        for approvers (pendingcalls.py), then the condition, the pending calls (ids and tools)
        and the progress in status, an Event. The lease and the slot are released by the
        caller; the Task stays Running."""
        assert outcome.result is not None
        state = outcome.result.state
        await checkpoints.save(state)
        client = self.writer.client
        published = None
        try:
            published = await pendingcalls.publish(client, body, execution_id, state)
        except ApiError as exc:
            # The Task still waits; approvers then lack the arguments (`ordo approve --digest`).
            log.warning(
                "the waiting calls could not be published for approvers",
                extra={"ordo": {"errorStatus": exc.status, "errorReason": exc.api_reason}},
            )
        meta = body["metadata"]
        status = body.get("status") or {}
        fields = taskstatus.awaiting_approval(state, status.get("conditions"))
        fields.update(children_condition(state, fields["conditions"]))
        fields[SEQUENCE_STATUS] = checkpoints.sequence  # the anchor (checkpoint.py)
        try:
            await taskstatus.fenced(client, meta["namespace"], meta["name"], execution_id, fields)
        except Fenced:
            # Another execution owns the Task: what we published is not what it waits for.
            if published is not None:
                await pendingcalls.withdraw(client, body, published)
            raise
        await self.writer.recorder.post(body, approvals.CONDITION, outcome.message)
        log.info(
            "run stopped to wait for tool-call approvals",
            extra={"ordo": {"calls": len(state.approvals)}},
        )

    async def _await_children(
        self,
        body: dict[str, Any],
        outcome: TaskOutcome,
        checkpoints: CheckpointStore,
        execution_id: str,
    ) -> None:
        """The run stopped for child Tasks (childwait.py): checkpoint, then the progress,
        `status.children` and condition `AwaitingChildren=True` naming them, an Event. The
        lease and the slot are released by the caller; the Task stays Running."""
        assert outcome.result is not None
        state = outcome.result.state
        await checkpoints.save(state)
        meta = body["metadata"]
        conditions = (body.get("status") or {}).get("conditions")
        fields = status_mod.to_patch(status_mod.progress(state))
        fields.update(children_condition(state, conditions))
        fields[SEQUENCE_STATUS] = checkpoints.sequence  # the anchor (checkpoint.py)
        await taskstatus.fenced(
            self.writer.client, meta["namespace"], meta["name"], execution_id, fields
        )
        message = childwait.waiting_message(waiting_children(state))
        await self.writer.recorder.post(body, childwait.CONDITION, message)
        log.info(
            "run stopped to wait for child tasks",
            extra={"ordo": {"children": len(waiting_children(state))}},
        )

    async def _withdraw(self, body: dict[str, Any]) -> None:
        """Delete the published calls of a resumed Task, best effort: a publication left over
        names an earlier execution, which no reader shows (pendingcalls.py)."""
        try:
            await pendingcalls.withdraw(self.writer.client, body)
        except ApiError:
            log.warning(
                "the published pending calls could not be deleted; the Task's deletion will"
            )

    @staticmethod
    async def _resume_state(checkpoints: CheckpointStore, snapshot: Snapshot, step: int) -> Any:
        loaded = await checkpoints.load()
        if loaded is None:
            if step > 0:
                raise Interrupted(
                    f"the run made {step} model call(s) before it was interrupted and its "
                    "checkpoint is gone; not started over (a tool with side effects may have run)"
                )
            return None
        state, annotations = loaded
        recorded = annotations.get("ordo.dev/snapshot-hash")
        if recorded and not snapshot.same_content(recorded):  # old checkpoints: old formula
            raise Interrupted(
                "the Agent or its references changed while the Task was interrupted; not resumed"
            )
        return state


def waiting_children(state: RunState) -> list[str]:
    """The names of the children the run's state records as not ended."""
    return [c.name for c in state.waiting_children]


def children_condition(state: RunState, conditions: list[dict[str, Any]] | None) -> dict[str, Any]:
    """Condition `AwaitingChildren=True` naming the children that have not ended, when there
    are any (`status.children` itself is in every progress write: runtime/status.py)."""
    waiting = waiting_children(state)
    if not waiting:
        return {}
    message = childwait.waiting_message(waiting)
    return {
        "conditions": set_condition(
            conditions, childwait.CONDITION, "True", childwait.CONDITION, message
        )
    }
