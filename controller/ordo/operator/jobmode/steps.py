"""The scheduler's steps for execution mode `Job` (lifecycle/process.py calls them from
`TaskProcess.process`): record the mode in the claimed Task's status, create its Job and hand the execution lease to
the pod, and supervise the Job (through supervisor.py:JobSupervisor) until the Task ends. When the
Job vanishes while the Task still runs, these return the Task so the scheduler runs it again
(in a new Job)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import Any

from ...api.agent import ExecutionMode
from ...runtime import TaskOutcome
from ..kube.client import ApiError, KubeClient
from ..tasks import taskstatus
from ..tasks.approvals import awaiting
from ..tasks.childwait import awaiting_children
from ..tasks.claim import Claim, Claimer
from ..tasks.runner import Parked
from ..tasks.writer import TaskWriter
from ..telemetry import logs
from .supervisor import JobGone, JobSupervisor

log = logging.getLogger("ordo.operator")

NO_RUNNER_IMAGE = TaskOutcome(
    "Failed",
    "InvalidSpec",
    "the Agent asks for execution mode Job, but this operator has no runner "
    "image (ordo operator --job-image; Helm value jobs.image)",
)
"""How a Task ends whose Agent asks for Job mode from an operator without `--job-image`."""


async def resume_supervision(
    jobs: JobSupervisor,
    claimer: Claimer,
    body: dict[str, Any],
    wake: asyncio.Event,
    cancel: asyncio.Event,
) -> dict[str, Any] | Parked | None:
    """Supervise the Job of a Task already running in one (found after a restart or a
    re-observe). None once the Task has ended; `Parked` when its run waits (approvals or
    children: the caller waits for them, holding no slot); the Task, re-read once no other
    holder has its lease, if its Job disappeared while it ran (the caller claims it again)."""
    try:
        return await jobs.supervise(body, body["status"].get("executionId", ""), wake, cancel)
    except JobGone:
        if awaiting(body) or awaiting_children(body):  # its run parked: its Job was removed
            log.info("the Task's wait is over; resuming it in a new Job")
        else:
            log.warning("the Task's Job is gone while the Task runs; resuming it in a new Job")
        meta = body["metadata"]
        return await claimer.wait_for_other_holder(meta["namespace"], meta["name"])


async def record_mode(client: KubeClient, claim: Claim, mode: ExecutionMode) -> Claim:
    """Write `status.executionMode` right after the claim (fenced by its executionId), unless
    the claim already wrote it (`Claimer.claim(..., mode)`: no second write)."""
    if (claim.body.get("status") or {}).get("executionMode") == mode:
        return claim
    meta = claim.body["metadata"]
    try:
        updated = await taskstatus.fenced(
            client,
            meta["namespace"],
            meta["name"],
            claim.execution_id,
            taskstatus.execution_mode(mode),
        )
    except BaseException:
        await claim.lease.release()
        raise
    return dataclasses.replace(claim, body=updated)


async def run_in_job(
    client: KubeClient,
    writer: TaskWriter,
    jobs: JobSupervisor,
    claim: Claim,
    agent: dict[str, Any] | None,
    wake: asyncio.Event,
    cancel: asyncio.Event,
) -> dict[str, Any] | Parked | None:
    """Create the Task's Job, hand the execution lease over to its pod, and supervise it
    (the caller holds this Task's capacity slot meanwhile). Returns the Task, re-read, if
    its Job disappeared while it ran (the caller processes it again); `Parked` if its run
    waits (approvals or children); else None."""
    started = time.monotonic()
    logs.bind(executionId=claim.execution_id)
    try:
        await jobs.start(claim.body, agent, claim.execution_id)
    except ApiError as exc:
        if exc.transient or exc.conflict:
            raise
        # Refused for good (invalid resources in the Agent, a quota, an admission
        # policy): the Task cannot run in a Job; say why instead of InternalError.
        await writer.finish(
            claim.body,
            TaskOutcome(
                "Failed",
                "InvalidSpec",
                f"the API server refused the Task's Job ({exc.message}); check the Agent's "
                "spec.execution.resources and the namespace's quotas and policies",
            ),
            execution_id=claim.execution_id,
            started=started,
        )
        return None
    finally:
        # The pod takes the lease under its own name; ours only covered the claim.
        await claim.lease.release()
    try:
        return await jobs.supervise(claim.body, claim.execution_id, wake, cancel, started)
    except JobGone:
        log.warning("the Task's Job is gone while the Task runs; resuming it in a new Job")
        meta = claim.body["metadata"]
        return await client.get("Task", meta["namespace"], meta["name"])
