"""Finished-Task retention: delete a Task `ttlSecondsAfterFinished` seconds after it ended.

A Task's own `spec.ttlSecondsAfterFinished` wins; without it the operator's `--task-ttl`
applies (default: none, the Task is kept). The due time is `status.completedAt` + TTL. Every
watch event of a Task goes through `Retention.observe`, which keeps one timer per finished
Task with a TTL and moves it when the TTL changes (the field is mutable, as a Job's). State
is only the objects: after a restart the watch lists every Task again and the timers are
re-created; a Task that became due while the operator was down is deleted at once.

The deletion is a DELETE of the Task as last read, conditional on its resourceVersion (so a
Task re-created under the same name, or changed since it was read, is never deleted on a
stale decision: it is read and judged again), with `propagationPolicy: Background`. The API
server honours finalizers: a Task that still carries one stays, marked for deletion, until
its owner removes it. What the Task owns (checkpoint ConfigMap, published pending calls,
Job-mode Job) is garbage-collected through its ownerReferences on a real cluster; once the Task is
gone the operator also deletes those it knows, each only if it is still owned by that Task's
uid, so they do not outlive it where no garbage collector runs.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ... import timestamps
from ...api import TERMINAL_PHASES
from ..jobmode import supervisor as jobs
from ..kube.client import ApiError, KubeClient
from ..tasks import checkpoint, pendingcalls
from ..telemetry.metrics import Metrics

log = logging.getLogger("ordo.operator")

FIELD = "ttlSecondsAfterFinished"
MAX_CONCURRENT_DELETIONS = 4
"""Deletions in flight at once (after a restart many Tasks may be due together)."""
RETRY_FIRST_SECONDS = 2.0
RETRY_MAX_SECONDS = 300.0


def ttl_seconds(body: dict[str, Any], default: float | None) -> float | None:
    """The TTL that applies to a Task: its `spec.ttlSecondsAfterFinished` (0 = as soon as it
    ends), else the operator's default; None keeps the Task."""
    value = (body.get("spec") or {}).get(FIELD)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return float(value)
    if default is not None and default > 0:
        return default
    return None


def parse_time(value: Any) -> float | None:
    """An RFC 3339 timestamp as epoch seconds; None if absent or not a timestamp."""
    return timestamps.epoch(value)


def finished_at(body: dict[str, Any]) -> float | None:
    """When a terminal Task ended: `status.completedAt`, else the time its `Complete` or
    `Failed` condition turned True; None if neither says (the caller then counts from when it
    first saw the Task finished, which can only make the Task live longer)."""
    status = body.get("status") or {}
    at = parse_time(status.get("completedAt"))
    if at is not None:
        return at
    for condition in status.get("conditions") or []:
        if (
            isinstance(condition, dict)
            and condition.get("type") in ("Complete", "Failed")
            and condition.get("status") == "True"
        ):
            at = parse_time(condition.get("lastTransitionTime"))
            if at is not None:
                return at
    return None


def due_at(body: dict[str, Any], default: float | None, seen: float) -> float | None:
    """When a Task is to be deleted (epoch seconds), or None if it is kept: not finished, being
    deleted already, or no TTL applies. `seen` stands in for a missing completion time."""
    meta = body.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return None
    if (body.get("status") or {}).get("phase") not in TERMINAL_PHASES:
        return None
    ttl = ttl_seconds(body, default)
    if ttl is None:
        return None
    end = finished_at(body)
    return (seen if end is None else end) + ttl


@dataclass
class _Entry:
    namespace: str
    name: str
    seen: float
    """When this process first saw the Task finished (stands in for a missing completedAt)."""
    due: float | None = None
    timer: asyncio.TimerHandle | None = None
    work: asyncio.Task[None] | None = None


class Retention:
    """Deletes finished Tasks whose TTL has passed. `observe` is the watch-facing entry."""

    def __init__(
        self,
        client: KubeClient,
        metrics: Metrics,
        default_ttl: float | None = None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.metrics = metrics
        self.default_ttl = default_ttl if default_ttl and default_ttl > 0 else None
        self.clock = clock
        self._entries: dict[str, _Entry] = {}
        self._gone: dict[str, str] = {}
        """uid → namespace of Tasks this process deleted that were still present (a
        finalizer held them): their dependents are deleted on the DELETED event."""
        self._slots = asyncio.Semaphore(MAX_CONCURRENT_DELETIONS)
        self._housekeeping: set[asyncio.Task[None]] = set()

    # -- the watch-facing entry point -----------------------------------------------------

    def observe(self, body: dict[str, Any], event_type: str | None) -> None:
        """React to one watch event of a Task. Never blocks; never raises."""
        meta = body.get("metadata") or {}
        uid = meta.get("uid")
        if not uid:
            return
        if event_type == "DELETED":
            self._forget(uid)
            namespace = self._gone.pop(uid, None)
            if namespace is not None:
                self._spawn(self._delete_dependents(namespace, uid))
            return
        entry = self._entries.get(uid)
        seen = entry.seen if entry is not None else self.clock()
        due = due_at(body, self.default_ttl, seen)
        if due is None:
            self._forget(uid)
            return
        if entry is None:
            entry = _Entry(meta.get("namespace", ""), meta.get("name", ""), seen)
            self._entries[uid] = entry
        if entry.due == due and (entry.timer is not None or entry.work is not None):
            return  # a resync or a status-only event: nothing changed
        self._schedule(uid, entry, due)

    def scheduled(self) -> dict[str, float]:
        """uid → due time of every Task waiting for its TTL (for tests and debugging)."""
        return {uid: e.due for uid, e in self._entries.items() if e.due is not None}

    async def shutdown(self) -> None:
        tasks: list[asyncio.Task[None]] = list(self._housekeeping)
        for uid in list(self._entries):
            entry = self._entries[uid]
            if entry.work is not None:
                tasks.append(entry.work)
            self._forget(uid)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- timers ---------------------------------------------------------------------------

    def _schedule(self, uid: str, entry: _Entry, due: float) -> None:
        if entry.timer is not None:
            entry.timer.cancel()
            entry.timer = None
        entry.due = due
        if entry.work is not None:
            return  # the running check reads the Task again and sees the new TTL
        delay = max(0.0, due - self.clock())
        entry.timer = asyncio.get_running_loop().call_later(delay, self._fire, uid)

    def _forget(self, uid: str) -> None:
        entry = self._entries.pop(uid, None)
        if entry is not None and entry.timer is not None:
            entry.timer.cancel()

    def _fire(self, uid: str) -> None:
        entry = self._entries.get(uid)
        if entry is None:
            return
        entry.timer = None
        entry.work = asyncio.create_task(self._expire(uid, entry), name=f"ordo-ttl-{uid}")

    def _spawn(self, coro: Any) -> None:
        t: asyncio.Task[None] = asyncio.create_task(coro)
        self._housekeeping.add(t)
        t.add_done_callback(self._housekeeping.discard)

    # -- deletion -------------------------------------------------------------------------

    async def _expire(self, uid: str, entry: _Entry) -> None:
        backoff = RETRY_FIRST_SECONDS
        try:
            while True:
                try:
                    async with self._slots:
                        again = await self._check(uid, entry)
                except ApiError as exc:
                    log.warning(
                        "could not delete an expired task; retrying",
                        extra={
                            "ordo": {
                                "namespace": entry.namespace,
                                "task": entry.name,
                                "errorStatus": exc.status,
                                "errorReason": exc.api_reason,
                                "retryInSeconds": backoff,
                            }
                        },
                    )
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, RETRY_MAX_SECONDS)
                    continue
                if again is None:
                    if self._entries.get(uid) is entry:
                        del self._entries[uid]
                    return
                if again > self.clock():
                    entry.work = None
                    if self._entries.get(uid) is entry:
                        self._schedule(uid, entry, again)
                    return
        except asyncio.CancelledError:
            return
        except Exception:
            log.exception(
                "expired task not deleted",
                extra={"ordo": {"namespace": entry.namespace, "task": entry.name}},
            )
            if self._entries.get(uid) is entry:
                del self._entries[uid]
        finally:
            if entry.work is asyncio.current_task():
                entry.work = None

    async def _check(self, uid: str, entry: _Entry) -> float | None:
        """Read the Task and delete it if it is due. Returns None when done (deleted, gone,
        re-created, kept), else the due time to look at it again (not due yet, or changed
        between the read and the delete)."""
        body = await self.client.get("Task", entry.namespace, entry.name)
        if body is None or (body.get("metadata") or {}).get("uid") != uid:
            return None  # gone, or a new Task of the same name: never ours to delete
        due = due_at(body, self.default_ttl, entry.seen)
        if due is None:
            return None
        now = self.clock()
        if due > now:
            return due
        try:
            await self.client.delete(
                "Task",
                entry.namespace,
                entry.name,
                resource_version=body["metadata"]["resourceVersion"],
                propagation="Background",
            )
        except ApiError as exc:
            if exc.conflict:
                return now  # changed since read (a TTL edit, a finalizer): judge it again
            raise
        self.metrics.tasks_deleted.labels(entry.namespace).inc()
        log.info(
            "deleted a finished task after its TTL",
            extra={
                "ordo": {
                    "namespace": entry.namespace,
                    "task": entry.name,
                    "phase": (body.get("status") or {}).get("phase"),
                    "ttlSeconds": ttl_seconds(body, self.default_ttl),
                }
            },
        )
        after = await self.client.get("Task", entry.namespace, entry.name)
        if after is not None and (after.get("metadata") or {}).get("uid") == uid:
            self._gone[uid] = entry.namespace  # a finalizer holds it: dependents on DELETED
        else:
            await self._delete_dependents(entry.namespace, uid)
        return None

    async def _delete_dependents(self, namespace: str, uid: str) -> None:
        """Delete what the (now gone) Task `uid` owned, each only if still owned by it. Best
        effort: on a real cluster the garbage collector does the same."""
        task = {"metadata": {"uid": uid}}
        owned = (
            ("ConfigMap", checkpoint.name_for(task), None),
            ("ConfigMap", pendingcalls.name_for(task), None),
            ("Job", jobs.job_name(task), "Background"),
        )
        for kind, name, propagation in owned:
            try:
                body = await self.client.get(kind, namespace, name)
                if body is None:
                    continue
                refs = (body.get("metadata") or {}).get("ownerReferences") or []
                if not any(r.get("uid") == uid for r in refs if isinstance(r, dict)):
                    continue
                await self.client.delete(
                    kind,
                    namespace,
                    name,
                    resource_version=body["metadata"]["resourceVersion"],
                    propagation=propagation,
                )
            except ApiError as exc:
                log.warning(
                    "could not delete an object of a deleted task; garbage collection will",
                    extra={
                        "ordo": {
                            "namespace": namespace,
                            "kind": kind,
                            "errorStatus": exc.status,
                            "errorReason": exc.api_reason,
                        }
                    },
                )
