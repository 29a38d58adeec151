"""Human approval of tool calls in the operator (issue 16 §3).

A run that stops for approvals (engine/approvals.py) ends `AwaitingApproval`: the runner
writes the checkpoint (it holds the arguments; never status), the Task's condition
`AwaitingApproval=True` naming call ids and tools, `status.pendingApprovals` (ids, tools,
deadlines), an Event; it releases its lease and concurrency slot, and the Task stays `Running`.

`ApprovalGate.wait` holds the Task's scheduler job, with no slot, until every pending call has
a valid decision (a ToolApproval in the watch-fed cache) or its deadline passed (or does not
parse: only the checkpoint knows it then, `deadline_unreadable`); then the scheduler resumes
the Task from its checkpoint, and the run's decider (`decider`) finds the same ToolApprovals. State lives in objects only, so a restarted operator waits (or resumes)
the same way.

A ToolApproval is valid for a call when it names the Task and the call id and was created no
earlier than the Task (a leftover approval of a deleted Task of the same name does not
count). An Approve counts only if its `argsDigest` is the digest of the call's arguments
(issue 26 §5: the run checks it against the arguments in its own state; the gate and
`acceptance`, which have no arguments, against the published calls, pendingcalls.py, when
those are readable and consistent) and, for a call whose rule excludes the requester, only if
its `approvedBy` is not the Task's `ordo.dev/requested-by` (a Task without one: no Approve
counts). `acceptance` gives every ToolApproval its `Accepted` condition. A ToolApproval's
`spec.reason` is never read here.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Sequence
from typing import Any

from ... import timestamps
from ...api import TERMINAL_PHASES
from ...api.toolapproval import ToolApproval
from ...engine.approvals import (
    REJECTED,
    TIMED_OUT,
    ApprovalDecider,
    ApprovalDecision,
    PendingApproval,
    call_digest,
    settle,
)
from ...runtime.store import ObjectStore
from ..kube.client import ApiError
from . import taskstatus
from .approvalmatch import (
    Digests,
    decisions_for,
    decisions_of,
    published_digests,
    refusal_of,
)
from .conditions import set_condition

log = logging.getLogger("ordo.operator")
CONDITION = taskstatus.AWAITING_APPROVAL
KIND = "ToolApproval"


def rfc3339(epoch: float) -> str:
    return timestamps.format_seconds(epoch)


def epoch(value: Any) -> float | None:
    """Epoch seconds of an RFC 3339 timestamp, or None (ordo/timestamps.py: never local time)."""
    return timestamps.epoch(value)


# -- the Task side ----------------------------------------------------------------------


def awaiting(body: dict[str, Any]) -> bool:
    """The Task's condition `AwaitingApproval` is True."""
    for c in (body.get("status") or {}).get("conditions") or []:
        if c.get("type") == CONDITION:
            return bool(c.get("status") == "True")
    return False


def pending_of(body: dict[str, Any]) -> list[PendingApproval]:
    """The calls a Task waits for, from its status (ids, tools, deadlines; no arguments)."""
    if not awaiting(body):
        return []
    out = []
    for p in (body.get("status") or {}).get("pendingApprovals") or []:
        deadline = epoch(p.get("deadline"))
        requested = epoch(p.get("requestedAt")) or 0.0
        out.append(
            PendingApproval(
                str(p.get("callId", "")),
                str(p.get("tool", "")),
                int(p.get("step") or 1),
                requested,
                math.inf if deadline is None else deadline,
                approvals=max(1, _int(p.get("requiredApprovals"))),
                requester_excluded=p.get("requesterExcluded") is True,
            )
        )
    return out


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 1


def deadline_unreadable(body: dict[str, Any]) -> bool:
    """A waiting call's `status.pendingApprovals[].deadline` is there but is not an RFC 3339
    timestamp with a zone (hand-edited, or restored by a tool that rewrote it). The checkpoint
    holds the real deadline: the Task must resume so that the run settles the call against it
    (or stops again and writes a readable one), instead of waiting for a time nobody knows."""
    if not awaiting(body):
        return False
    return any(
        isinstance(p, dict) and p.get("deadline") is not None and epoch(p["deadline"]) is None
        for p in (body.get("status") or {}).get("pendingApprovals") or []
    )


def ready(
    task: dict[str, Any], approvals: Sequence[dict[str, Any]], now: float, digests: Digests = None
) -> tuple[bool, float | None]:
    """Whether every call the Task waits for is settled (decided or timed out), and if not,
    when the next one times out (None: never). A deadline that does not parse settles at
    once: the run then decides against the checkpoint's deadline (`deadline_unreadable`)."""
    if deadline_unreadable(task):
        return True, None
    waiting = [
        p
        for p in pending_of(task)
        if settle(p, decisions_of(approvals, task, p, digests), now)[0] == "waiting"
    ]
    deadlines = [p.deadline for p in waiting if not math.isinf(p.deadline)]
    return not waiting, (min(deadlines) if deadlines else None)


def decider(store: ObjectStore, task: dict[str, Any]) -> ApprovalDecider:
    """The run's decider: the ToolApprovals of the Task's namespace, through `store` (the
    watch-fed cache in the operator)."""
    namespace = (task.get("metadata") or {}).get("namespace", "default")

    async def decide(
        pending: PendingApproval, arguments: dict[str, Any]
    ) -> Sequence[ApprovalDecision]:
        found = await store.list(KIND, namespace)
        digest = call_digest(arguments)  # of the arguments the call will run with
        return decisions_for(found, task, pending.call_id, digest=digest, pending=pending)

    return decide


def acceptance(
    approval: dict[str, Any],
    task: dict[str, Any] | None,
    digests: Digests = None,
    others: Sequence[dict[str, Any]] = (),
) -> tuple[str, str, str]:
    """(status, reason, message) of a ToolApproval's `Accepted` condition; `others`: the
    namespace's ToolApprovals (for duplicates), `digests` as for `ready`."""
    spec = approval.get("spec") or {}
    task_name, call_id = spec.get("taskRef", ""), spec.get("callId", "")
    if task is None:
        return "False", "TaskNotFound", f"no Task {task_name!r} in this namespace"
    born = epoch((task.get("metadata") or {}).get("creationTimestamp")) or 0.0
    created = epoch((approval.get("metadata") or {}).get("creationTimestamp")) or 0.0
    if created < born:
        return "False", "UnknownCall", f"created before Task {task_name!r} existed"
    status = task.get("status") or {}
    name = (approval.get("metadata") or {}).get("name", "")
    for record in status.get("toolCalls") or []:
        if record.get("callId") != call_id:
            continue
        reason = str(record.get("reason") or "")
        verdict, _, names = reason.partition(": ")
        if verdict in ("Approved", REJECTED) and name in names.split(", "):
            return "True", "Applied", f"the call was decided by this {KIND}"
        if reason.startswith(("Approved", REJECTED, TIMED_OUT)):
            return "False", "CallSettled", "the call was already decided (or timed out)"
    if status.get("phase") in TERMINAL_PHASES:
        return "False", "TaskFinished", f"Task {task_name!r} has finished"
    waiting = next((p for p in pending_of(task) if p.call_id == call_id), None)
    if waiting is not None:
        if not decisions_for([approval], task, call_id):  # as the run will see it
            return "False", "UnknownCall", f"not a valid decision on a call of {task_name!r}"
        if created > waiting.deadline:
            return "False", "CallSettled", "made after the call's deadline: it timed out"
        return _pending(approval, task, waiting, digests, others)
    return "False", "UnknownCall", f"Task {task_name!r} does not wait for call {call_id!r}"


def _pending(
    approval: dict[str, Any],
    task: dict[str, Any],
    waiting: PendingApproval,
    digests: Digests,
    others: Sequence[dict[str, Any]],
) -> tuple[str, str, str]:
    """`acceptance` of a valid decision on a waiting call, made before its deadline."""
    model = ToolApproval.model_validate(approval)
    digest = None if digests is None else digests.get(waiting.call_id)
    refused = refusal_of(model, task, waiting, digest)
    if refused is not None:
        return "False", *refused
    later = "the Task resumes once all its waiting calls are decided"
    if model.spec.decision != "Approve":
        return "True", "Pending", later
    counted = decisions_of([*others, approval], task, waiting, digests)
    approves = [d for d in counted if d.verdict == "Approve"]
    first = next((d for d in approves if d.approver == model.spec.approved_by), None)
    if first is not None and first.by != model.name:
        return "False", "DuplicateApprover", f"{model.spec.approved_by} already approved this call"
    people = len({d.approver for d in approves if d.approver})
    if waiting.approvals > 1:
        later = (
            f"{min(people, waiting.approvals)} of {waiting.approvals} approvers so far; " + later
        )
    return "True", "Pending", later


class ApprovalGate:
    """Holds the scheduler job of a Task that waits for approvals (no slot, no lease) until
    every waiting call is settled. `waiting` (Task → its job's wake event) sizes the gauge
    `ordo_tasks_awaiting_approval`."""

    def __init__(self, client: Any, cache: Any, metrics: Any) -> None:
        self.client = client
        self.cache = cache
        self.metrics = metrics
        self.waiting: dict[tuple[str, str], asyncio.Event] = {}

    def _gauge(self) -> None:
        self.metrics.awaiting_approval.set(len(self.waiting))

    async def _approvals(self, namespace: str) -> list[dict[str, Any]]:
        if self.cache is not None:
            return list(self.cache.list(KIND, namespace))
        return list(await self.client.list(KIND, namespace))

    async def wait(
        self, namespace: str, name: str, wake: asyncio.Event, cancel: asyncio.Event
    ) -> None:
        """Return when the Task does not wait for approvals (any more), every waiting call is
        settled, or a cancel request arrives (the run then ends `Cancelled`)."""
        key = (namespace, name)
        try:
            while not cancel.is_set():
                body = await self.client.get("Task", namespace, name)
                if body is None or not awaiting(body):
                    return
                digests = await published_digests(self.client, body)
                found = await self._approvals(namespace)
                settled, wake_at = ready(body, found, time.time(), digests)
                if settled:
                    if deadline_unreadable(body):
                        log.warning(
                            "a waiting tool call's deadline in status does not parse; resuming "
                            "the task to settle it against its checkpoint"
                        )
                    return
                await self._accept_all(body, found, digests)
                if key not in self.waiting:
                    self.waiting[key] = wake
                    self._gauge()
                    log.info("task waits for tool-call approvals")
                wake.clear()
                timeout = None if wake_at is None else max(0.0, wake_at - time.time()) + 0.2
                waiter = asyncio.ensure_future(wake.wait())
                stopper = asyncio.ensure_future(cancel.wait())
                try:
                    await asyncio.wait(
                        {waiter, stopper}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                    )
                finally:
                    waiter.cancel()
                    stopper.cancel()
        finally:
            if self.waiting.pop(key, None) is not None:
                self._gauge()

    async def observe(self, body: dict[str, Any], event_type: str | None) -> None:
        """A ToolApproval changed: once the cache has it, wake the Task's job, then write the
        ToolApproval's `Accepted` condition if it changed."""
        meta = body.get("metadata") or {}
        namespace, name = meta.get("namespace", "default"), meta.get("name", "")
        if event_type == "DELETED" or not name:
            return
        if self.cache is not None and meta.get("resourceVersion"):
            await self.cache.wait_caught_up(KIND, namespace, str(meta["resourceVersion"]))
        task_name = (body.get("spec") or {}).get("taskRef", "")
        wake = self.waiting.get((namespace, task_name))
        if wake is not None:
            wake.set()
        await self.accept(body)

    async def _accept_all(
        self, task: dict[str, Any], found: list[dict[str, Any]], digests: Digests
    ) -> None:
        """Re-judge the waiting Task's ToolApprovals: what a run that stopped again refused
        (another digest than its arguments') is no longer `Pending`."""
        name = (task.get("metadata") or {}).get("name")
        for approval in found:
            if (approval.get("spec") or {}).get("taskRef") != name:
                continue
            try:
                await self._write(approval, acceptance(approval, task, digests, found))
            except ApiError as exc:
                log.warning(
                    "a ToolApproval's Accepted condition could not be written",
                    extra={"ordo": {"errorStatus": exc.status, "errorReason": exc.api_reason}},
                )

    async def accept(self, body: dict[str, Any]) -> None:
        meta = body.get("metadata") or {}
        namespace = meta.get("namespace", "default")
        task = await self.client.get("Task", namespace, (body.get("spec") or {}).get("taskRef", ""))
        digests = others = None
        if task is not None and awaiting(task):
            digests = await published_digests(self.client, task)
            others = await self._approvals(namespace)
        await self._write(body, acceptance(body, task, digests, others or ()))

    async def _write(self, body: dict[str, Any], accepted: tuple[str, str, str]) -> None:
        """Patch the ToolApproval's `Accepted` condition unless it already says that."""
        meta = body.get("metadata") or {}
        namespace, name = meta.get("namespace", "default"), meta.get("name", "")
        status, reason, message = accepted
        current = (body.get("status") or {}).get("conditions") or []
        known = next((c for c in current if c.get("type") == "Accepted"), None)
        if known is not None and (known.get("status"), known.get("reason")) == (status, reason):
            return
        fields: dict[str, Any] = {
            "conditions": set_condition(
                current, "Accepted", status, reason, message, meta.get("generation")
            )
        }
        if meta.get("generation") is not None:
            fields["observedGeneration"] = meta["generation"]
        await self.client.patch(KIND, namespace, name, {"status": fields}, status=True)
