"""The one writer of Task status: every change to a Task's `status` the operator (or a Job
pod) makes is built here from the api models (`TaskStatus`, `Condition`, `TaskLease`,
`PendingApprovalStatus`), dumped with their aliases (camelCase), and written through the few
write functions at the end. A Task's story in status writes:

- waiting before the claim: `waiting_for_capacity`, `waiting_for_references` (phase Pending);
- the claim (`claimed`: phase Running, a new executionId, the lease; conditional on the
  resourceVersion read: of two claimers one wins), then `execution_mode` (fenced);
- the run: `progress` per flushed step, `awaiting_approval` when it stops for people and
  `resumed` when they decided, then `terminal` (or `reduced_terminal` when the API server
  refused it for its size), all fenced by the executionId;
- the lease (`lease`, `lease_renewal`, `lease_release`): JSON Patches that `test` the
  executionId and the holder.

What is absent stays absent: a builder sends the fields it sets, and a field it sets to None
is sent as null only where a merge patch must remove it (`claimed`'s observedGeneration of an
object without a generation, as before). Conditions the Task has are carried over as the API
server returned them (conditions.py). The models are validated on construction (a few us
each); `terminal` copies the `TaskStatus` the run produced instead of building it again."""

from __future__ import annotations

import time
from typing import Any

from ... import timestamps
from ...api.agent import ExecutionMode
from ...api.task import TaskLease, TaskStatus
from ...engine.approvals import awaiting_message
from ...engine.state import RunState
from ...runtime import TaskOutcome
from ...runtime import status as status_mod
from ..kube.client import JsonPatch, KubeClient
from .conditions import now, set_condition

Fields = dict[str, Any]
"""Top-level `status` fields as they are sent (camelCase JSON values)."""

KIND = "Task"
AWAITING_APPROVAL = "AwaitingApproval"
"""The condition (and Event reason) of a Task whose run waits for tool-call approvals."""


def _given(status: TaskStatus) -> Fields:
    """The fields passed to the model, None sent as null (a merge patch removes them)."""
    return status.model_dump(by_alias=True, exclude_unset=True, mode="json")


def _present(status: TaskStatus) -> Fields:
    """The fields of the model that are not None."""
    return status.model_dump(by_alias=True, exclude_none=True, mode="json")


# -- before the claim --------------------------------------------------------------------


def waiting_for_capacity(body: dict[str, Any], limit: int) -> Fields:
    """A Pending Task waiting for one of the operator's `limit` slots."""
    message = (
        f"{limit} Task(s) are running, the limit of this operator (--max-concurrent-tasks {limit})"
    )
    return _pending(body, "Scheduled", "WaitingForCapacity", message)


def waiting_for_references(body: dict[str, Any], message: str) -> Fields:
    """A Pending Task waiting for the objects it references to appear (GitOps order)."""
    return _pending(body, "Ready", "WaitingForReferences", message)


def _pending(body: dict[str, Any], type_: str, reason: str, message: str) -> Fields:
    """Phase Pending, and condition `type_` False for `reason`."""
    conditions = set_condition(
        (body.get("status") or {}).get("conditions"), type_, "False", reason, message
    )
    return {**_given(TaskStatus(phase="Pending")), "conditions": conditions}


# -- the claim ---------------------------------------------------------------------------


def claimed(
    body: dict[str, Any],
    execution_id: str,
    resuming: bool,
    mode: ExecutionMode | None = None,
    lease: Fields | None = None,
) -> Fields:
    """The claim of execution `execution_id`: phase Running, Scheduled and Running True, Ready
    False; startedAt and step kept from an earlier execution; the mode and the lease when
    given."""
    meta = body["metadata"]
    status = body.get("status") or {}
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
    conditions = set_condition(
        conditions, "Ready", "False", "Running", "the run has not finished yet"
    )
    fields = _given(
        TaskStatus(
            phase="Running",
            execution_id=execution_id,
            started_at=status.get("startedAt") or now(),
            observed_generation=meta.get("generation"),
            step=status.get("step", 0),
        )
    )
    fields["conditions"] = conditions
    if mode is not None:
        fields.update(execution_mode(mode))
    if lease is not None:
        fields["lease"] = lease
    return fields


def execution_mode(mode: ExecutionMode) -> Fields:
    """Where the claimed Task runs (`InProcess` or `Job`)."""
    return _given(TaskStatus(execution_mode=mode))


# -- the lease ---------------------------------------------------------------------------


def worker_lost(execution_id: str, losses: int) -> JsonPatch:
    """`status.workerLosses` = `losses` (the times an operator worker was lost while running
    the Task; at WORKER_LOSS_LIMIT it ends `WorkerLost`), fenced by the executionId."""
    return [
        {"op": "test", "path": "/status/executionId", "value": execution_id},
        {"op": "add", "path": "/status/workerLosses", "value": losses},
    ]


def lease(holder: str, duration_seconds: int, holder_lease: str | None = None) -> Fields:
    """`status.lease` as `holder` writes it now (renewTime with microseconds, its clock);
    `holderLease` is always present, null without one, so that a merge patch of a holder that
    renews per Task (a Job pod taking over from its operator) drops the operator's."""
    model = TaskLease(
        holder=holder,
        renew_time=timestamps.format_micros(time.time()),
        duration_seconds=duration_seconds,
        holder_lease=holder_lease,
    )
    return model.model_dump(by_alias=True, mode="json")


def _fenced_by_holder(execution_id: str, holder: str, *ops: dict[str, Any]) -> JsonPatch:
    """`ops` after a `test` of the executionId and the lease holder."""
    return [
        {"op": "test", "path": "/status/executionId", "value": execution_id},
        {"op": "test", "path": "/status/lease/holder", "value": holder},
        *ops,
    ]


def lease_renewal(execution_id: str, holder: str, fields: Fields) -> JsonPatch:
    """The renewal of `holder`'s lease to `fields` (from `lease`)."""
    return _fenced_by_holder(
        execution_id,
        holder,
        {"op": "add", "path": "/status/lease/renewTime", "value": fields["renewTime"]},
        {"op": "add", "path": "/status/lease/durationSeconds", "value": fields["durationSeconds"]},
    )


def lease_release(execution_id: str, holder: str) -> JsonPatch:
    """The release of `holder`'s lease (durationSeconds 0: others need not wait)."""
    return _fenced_by_holder(
        execution_id, holder, {"op": "add", "path": "/status/lease/durationSeconds", "value": 0}
    )


# -- the run -----------------------------------------------------------------------------


def progress(
    state: RunState, snapshot_hash: str | None = None, agent_generation: int | None = None
) -> Fields:
    """The bounded progress summary of a run; with `snapshot_hash` (the first write of an
    execution), the resolved objects it runs."""
    fields = status_mod.bounded(status_mod.to_patch(status_mod.progress(state)))
    if snapshot_hash is not None:
        fields.update(
            _present(TaskStatus(snapshot_hash=snapshot_hash, agent_generation=agent_generation))
        )
    return fields


def awaiting_approval(state: RunState, conditions: list[dict[str, Any]] | None) -> Fields:
    """A run stopped for approvals: its progress, the waiting calls (ids, tools, deadlines;
    never arguments) and condition `AwaitingApproval=True`."""
    fields = status_mod.to_patch(status_mod.progress(state))
    fields.update(pending_approvals(state, conditions))
    return fields


def pending_approvals(state: RunState, conditions: list[dict[str, Any]] | None) -> Fields:
    """`pendingApprovals` and condition `AwaitingApproval=True` of a run that waits."""
    pending = status_mod.pending_approvals(state)  # its one home (runtime/status.py)
    return {
        **_present(TaskStatus(pending_approvals=pending)),
        "conditions": set_condition(
            conditions, AWAITING_APPROVAL, "True", AWAITING_APPROVAL, awaiting_message(state)
        ),
    }


def resumed(conditions: list[dict[str, Any]] | None) -> Fields:
    """A Task resumed after waiting for approvals (the decisions are in toolCalls)."""
    return {
        **_present(TaskStatus(pending_approvals=[])),
        "conditions": set_condition(
            conditions, AWAITING_APPROVAL, "False", "Resumed", "the waiting tool calls were decided"
        ),
    }


# -- the end -----------------------------------------------------------------------------


def terminal_conditions(
    conditions: list[dict[str, Any]] | None, phase: str, reason: str, message: str
) -> list[dict[str, Any]]:
    """The conditions of a finished Task, in the shapes tools understand:
    - `Complete=True` on success, `Failed=True` on failure or cancel (as a batch/v1 Job has
      them), so `kubectl wait --for=condition=Complete` / `--for=condition=Failed` return;
    - `Ready` (kstatus, Flux): True on success, False with the Task's reason otherwise, plus
      `Stalled=True` on failure (kstatus' "will not make progress");
    - `Running=False` and `Succeeded` (True/False), kept for existing dashboards."""
    succeeded = phase == "Succeeded"
    out = set_condition(conditions, "Running", "False", reason, "the run ended")
    out = set_condition(out, "Succeeded", "True" if succeeded else "False", reason, message)
    out = set_condition(out, "Ready", "True" if succeeded else "False", reason, message)
    out = set_condition(out, "Complete" if succeeded else "Failed", "True", reason, message)
    if not succeeded:
        out = set_condition(out, "Stalled", "True", reason, message)
    return out


def terminal(
    body: dict[str, Any], outcome: TaskOutcome, status: TaskStatus | None = None
) -> Fields:
    """The terminal status of `outcome` (whose `status()` is `status`, when the caller has
    it) within `status_mod.MAX_STATUS_BYTES`: the run's `TaskStatus` with completedAt,
    observedGeneration, startedAt (when the Task has none) and the terminal conditions. An
    outcome that knows no run state keeps the step and usage the Task shows (never zeros)."""
    meta = body["metadata"]
    current = body.get("status") or {}
    status = outcome.status() if status is None else status
    completed = now()
    update: dict[str, Any] = {"completed_at": completed}
    if outcome.known_state is None:
        update.update({key: None for key in ("step", "usage") if key in current})
    if meta.get("generation") is not None:
        update["observed_generation"] = meta["generation"]
    if "startedAt" not in current:
        update["started_at"] = completed
    fields = status_mod.to_patch(status.model_copy(update=update))
    fields["conditions"] = terminal_conditions(
        current.get("conditions"), outcome.phase, outcome.reason, status.message or ""
    )
    return status_mod.bounded(fields)


def reduced_terminal(body: dict[str, Any], outcome: TaskOutcome, fields: Fields) -> Fields:
    """The terminal status `fields` reduced (status_mod.reduced), for when the API server
    refused it for its size; the conditions carry the reduced message."""
    out = status_mod.reduced(fields)
    out["conditions"] = terminal_conditions(
        (body.get("status") or {}).get("conditions"), outcome.phase, outcome.reason, out["message"]
    )
    return out


# -- the writes --------------------------------------------------------------------------


async def merge(
    client: KubeClient,
    namespace: str,
    name: str,
    fields: Fields,
    *,
    resource_version: str | None = None,
) -> dict[str, Any]:
    """Merge-patch the status `fields`, conditional on `resource_version` when given (a
    Conflict if the Task changed since it was read). Returns the updated Task."""
    body: dict[str, Any] = {"status": fields}
    if resource_version is not None:
        body = {"metadata": {"resourceVersion": resource_version}, "status": fields}
    return await client.patch(KIND, namespace, name, body, status=True)


async def fenced(
    client: KubeClient, namespace: str, name: str, execution_id: str, fields: Fields
) -> dict[str, Any]:
    """Set the status `fields` only while `status.executionId` is `execution_id` (`Fenced`
    otherwise: nothing is written). Returns the updated Task."""
    return await client.patch_status_fenced(KIND, namespace, name, execution_id, fields)


async def apply(client: KubeClient, namespace: str, name: str, ops: JsonPatch) -> dict[str, Any]:
    """Apply the JSON Patch `ops` (which start with their `test`s) to the status; safe to
    retry after a transient failure."""
    return await client.patch_json(KIND, namespace, name, ops, status=True, idempotent=True)
