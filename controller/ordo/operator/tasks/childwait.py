"""A parent Task waiting for its child Tasks, and the cancel cascade (docs/concepts.md).

A run whose `agent` calls wait for children stops `AwaitingChildren`: the runner writes the
checkpoint, condition `AwaitingChildren=True` naming the children, `status.children`, and
releases its lease and its slot; the Task stays `Running`. `ChildGate.wait` then holds the
parent's scheduler job, with no slot, until every child `status.children` lists as not ended
has ended (or is gone): the scheduler resumes the parent from its checkpoint and the engine
asks its delegator again, which finds the ended child and hands over its answer. Each watch
event of a child (label PARENT_UID_LABEL) wakes its parent's job, which brings the parent's
`status.children[]` up to date (phase, reason, tokens, `awaitingApproval`: a child waiting
for a human is visible on its parent) — without gating anything of the parent's own.

The cascade: a parent that ends while children of its run are not ended (cancelled, failed,
timed out) sets `spec.cancel: true` on each of them; a parent being deleted deletes them
too (their controller ownerReference lets the garbage collector do it where one runs; a
control plane without one, or a child created by a stale execution, is covered here).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from ...api import TERMINAL_PHASES
from ...runtime.delegation import PARENT_UID_LABEL
from ..kube.client import ApiError, Fenced, KubeClient
from ..telemetry.metrics import Metrics
from . import taskstatus
from .children import KIND, owned_by, state_of
from .conditions import set_condition

log = logging.getLogger("ordo.operator")
CONDITION = "AwaitingChildren"
"""The condition (and Event reason) of a Task whose run waits for child Tasks."""
POLL_SECONDS = 60.0
"""A waiting parent looks at its children this often even without a child's event (an event
missed while the watch restarted)."""
DEADLINE_SLACK_SECONDS = 0.5
"""A parent waits this long past its own deadline before it is resumed to end `Timeout`."""
TimeLeft = Callable[[dict[str, Any]], Awaitable[float]]
"""Seconds left of a Task's timeout (anchored at its first start; negative once passed)."""


def awaiting_children(body: dict[str, Any]) -> bool:
    """The Task's condition `AwaitingChildren` is True."""
    for c in (body.get("status") or {}).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == CONDITION:
            return c.get("status") == "True"
    return False


def pending_children(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The entries of `status.children` whose phase is not terminal."""
    children = (body.get("status") or {}).get("children") or []
    return [c for c in children if isinstance(c, dict) and c.get("phase") not in TERMINAL_PHASES]


def waiting_message(names: list[str]) -> str:
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return f"waiting for child Task(s) {shown} to end"


def resumed_fields(conditions: list[dict[str, Any]] | None) -> dict[str, Any]:
    """Condition `AwaitingChildren=False` of a parent resumed after its children ended."""
    return {
        "conditions": set_condition(
            conditions, CONDITION, "False", "Resumed", "the child Tasks it waited for ended"
        )
    }


def refreshed(entry: dict[str, Any], child: dict[str, Any] | None) -> dict[str, Any]:
    """A `status.children[]` entry as the child Task `child` (None: gone) shows it now."""
    out = dict(entry)
    if child is None:
        out.update(phase="Failed", reason="ChildVanished")
        out.pop("awaitingApproval", None)
        return out
    state = state_of(child)
    out["phase"] = state.phase
    if state.reason:
        out["reason"] = state.reason
    if state.awaiting_approval:
        out["awaitingApproval"] = True
    else:
        out.pop("awaitingApproval", None)
    if state.usage.total_tokens:
        out["tokens"] = state.usage.total_tokens
    return out


class ChildGate:
    """Holds the scheduler jobs of parents that wait for their children (no slot, no
    lease). `waiting` maps a waiting parent's uid to its job's wake event; its size is the
    gauge `ordo_tasks_awaiting_children`."""

    def __init__(self, client: KubeClient, metrics: Metrics | None = None) -> None:
        self.client = client
        self.metrics = metrics
        self.waiting: dict[str, asyncio.Event] = {}

    def _gauge(self) -> None:
        if self.metrics is not None:
            self.metrics.awaiting_children.set(len(self.waiting))

    def child_changed(self, body: dict[str, Any]) -> None:
        """A watch event of a Task: if it is a child of a waiting parent, wake the parent."""
        labels = (body.get("metadata") or {}).get("labels")
        if not labels:
            return
        parent = labels.get(PARENT_UID_LABEL)
        if parent:
            wake = self.waiting.get(parent)
            if wake is not None:
                wake.set()

    async def wait(
        self,
        namespace: str,
        name: str,
        wake: asyncio.Event,
        cancel: asyncio.Event,
        time_left: TimeLeft | None = None,
    ) -> None:
        """Return when the Task does not wait for children (any more), every child it waits
        for has ended or is gone, its deadline passed (the run then ends `Timeout`; with
        `time_left`, which says how long the Task has), or a cancel request arrives (the run
        then ends `Cancelled`); the cascade cancels the children that still run."""
        uid: str | None = None
        try:
            while not cancel.is_set():
                body = await self.client.get(KIND, namespace, name)
                if body is None or not awaiting_children(body):
                    return
                uid = str(body["metadata"]["uid"])
                if uid not in self.waiting:
                    self.waiting[uid] = wake
                    self._gauge()
                wake.clear()  # before the reads: an event during them is not lost
                left = POLL_SECONDS
                if time_left is not None:
                    left = await time_left(body)
                    if left + DEADLINE_SLACK_SECONDS <= 0:
                        log.info("a task waiting for its children reached its deadline")
                        return
                if await self._look(body):
                    return
                waiter = asyncio.ensure_future(wake.wait())
                stopper = asyncio.ensure_future(cancel.wait())
                try:
                    await asyncio.wait(
                        {waiter, stopper},
                        timeout=min(POLL_SECONDS, max(left, 0.0) + DEADLINE_SLACK_SECONDS),
                        return_when=asyncio.FIRST_COMPLETED,
                    )
                finally:
                    waiter.cancel()
                    stopper.cancel()
        finally:
            if uid is not None and self.waiting.pop(uid, None) is not None:
                self._gauge()

    async def _look(self, body: dict[str, Any]) -> bool:
        """Read the children the parent waits for, bring its `status.children` up to date;
        True when none of them is still running."""
        meta, status = body["metadata"], body.get("status") or {}
        entries = [c for c in status.get("children") or [] if isinstance(c, dict)]
        updated, running = [], False
        for entry in entries:
            if entry.get("phase") in TERMINAL_PHASES:
                updated.append(entry)
                continue
            child = await self.client.get(KIND, meta["namespace"], str(entry.get("name", "")))
            if child is not None and not owned_by(child, str(meta["uid"])):
                child = None  # not its child: the run reports ChildNotOwned when it resumes
            now = refreshed(entry, child)
            running = running or now.get("phase") not in TERMINAL_PHASES
            updated.append(now)
        if updated != entries and status.get("executionId"):
            try:
                await taskstatus.fenced(
                    self.client,
                    meta["namespace"],
                    meta["name"],
                    str(status["executionId"]),
                    {"children": updated},
                )
            except (ApiError, Fenced) as exc:  # shown a little later, or another execution
                log.info(
                    "the children's progress could not be written to the parent",
                    extra={"ordo": {"errorType": type(exc).__name__}},
                )
        return not running


async def cascade(client: KubeClient, parent: dict[str, Any]) -> None:
    """The parent ended: cancel its children that have not ended; a parent being deleted
    deletes them. Best effort: a failure is logged, the children run to their own ends
    (their deadlines and budgets are inside the parent's)."""
    meta = parent.get("metadata") or {}
    namespace, uid = meta.get("namespace"), meta.get("uid")
    if not namespace or not uid:
        return
    deleting = bool(meta.get("deletionTimestamp"))
    try:
        children = await client.list(KIND, namespace, f"{PARENT_UID_LABEL}={uid}")
        for child in children:
            if not owned_by(child, str(uid)):
                continue
            name = child["metadata"]["name"]
            if deleting:
                await client.delete(KIND, namespace, name)
            elif (child.get("status") or {}).get("phase") not in TERMINAL_PHASES and not (
                child.get("spec") or {}
            ).get("cancel"):
                await client.patch(KIND, namespace, name, {"spec": {"cancel": True}})
    except ApiError as exc:
        log.warning(
            "the children of an ended Task could not all be cancelled",
            extra={"ordo": {"errorStatus": exc.status, "errorReason": exc.api_reason}},
        )


def has_children(parent: dict[str, Any], status: dict[str, Any] | None = None) -> bool:
    """The parent's status (as read, or as it is being written) lists a child."""
    return bool(((parent.get("status") or {}).get("children")) or (status or {}).get("children"))
