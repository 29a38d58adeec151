"""A run lost with its worker process (workers/pool.py: killed for a stall, or died): count it
in `status.workerLosses`, and at WORKER_LOSS_LIMIT end the Task `WorkerLost` instead of
resuming it again, so one hostile Task cannot take every worker down in turn. Below the
limit the Task stays Running under this process's holder and is resumed from its
checkpoint (the scheduler sees its own holder on a Task it has no job for)."""

from __future__ import annotations

import logging

from ...runtime import TaskOutcome
from ..kube.client import ApiError, KubeClient, patch_test_failed
from ..tasks import taskstatus
from ..tasks.claim import Claim
from ..tasks.writer import TaskWriter

WORKER_LOSS_LIMIT = 2
log = logging.getLogger("ordo.operator")


async def count_loss(client: KubeClient, writer: TaskWriter, claim: Claim) -> bool:
    """Count one worker loss of the claimed Task; True if it ended the Task (`WorkerLost`).
    Both writes are fenced by the claim's executionId: a Task another execution took over
    meanwhile is left alone."""
    meta = claim.body["metadata"]
    losses = int((claim.body.get("status") or {}).get("workerLosses") or 0) + 1
    log.warning(
        "the worker process running the Task was lost",
        extra={"ordo": {"workerLosses": losses, "limit": WORKER_LOSS_LIMIT}},
    )
    try:
        body = await taskstatus.apply(
            client,
            meta["namespace"],
            meta["name"],
            taskstatus.worker_lost(claim.execution_id, losses),
        )
    except ApiError as exc:
        if exc.not_found or patch_test_failed(exc, "/status/executionId"):
            return False
        raise
    if losses < WORKER_LOSS_LIMIT:
        return False
    await writer.finish(
        body,
        TaskOutcome(
            "Failed",
            "WorkerLost",
            f"the operator worker running this Task was lost {losses} times (stalled or "
            "died); not resumed again",
        ),
        execution_id=claim.execution_id,
    )
    return True
