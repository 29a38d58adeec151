"""The TaskSchedule controller: one asyncio task per TaskSchedule this process watches, which
runs a pass (reconcile.py) and sleeps until the next scheduled time, or until the object or
one of its Tasks changes (kopf's watch of TaskSchedules and the operator's Task feed poke it).

A sleeping schedule costs a timer and nothing else; a pass is a list of the schedule's Tasks
and, when something changed, a few writes. Every replica runs every schedule: the Task names
make two replicas' creates one Task, and the conditional status write makes them count once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from ...api.triggers import TRIGGER_KIND_LABEL, TRIGGER_NAME_LABEL
from ..kube.client import ApiError, KubeClient
from .reconcile import ScheduleReconciler
from .scheduletask import KIND

log = logging.getLogger("ordo.triggers")

MAX_SLEEP_SECONDS = 300.0
"""Longest sleep between passes even when the next time is later (a clock step, a missed
poke: a pass that finds nothing due changes nothing)."""
MAX_BACKOFF_SECONDS = 60.0

Key = tuple[str, str]


@dataclass
class _Schedule:
    body: dict[str, Any]
    poked: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None


class ScheduleController:
    """Runs the TaskSchedules of this process (`observe` from kopf, `observe_task` from the
    Task feed)."""

    def __init__(
        self,
        client: KubeClient,
        reconciler: ScheduleReconciler,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._client = client
        self._reconciler = reconciler
        self._clock = clock
        self._schedules: dict[Key, _Schedule] = {}

    def observe(self, body: dict[str, Any], event_type: str | None) -> None:
        """A TaskSchedule was listed, added, changed or deleted."""
        meta = body.get("metadata") or {}
        key = (meta.get("namespace", "default"), meta.get("name", ""))
        if event_type == "DELETED" or meta.get("deletionTimestamp"):
            gone = self._schedules.pop(key, None)
            if gone is not None and gone.task is not None:
                gone.task.cancel()
            return
        entry = self._schedules.get(key)
        if entry is None:
            entry = self._schedules[key] = _Schedule(body)
            entry.task = asyncio.create_task(self._run(key, entry), name=f"schedule {key}")
        entry.body = body
        entry.poked.set()

    def observe_task(self, body: dict[str, Any], event_type: str | None) -> None:
        """A Task changed: a schedule's Task that ended or went away wakes its schedule (its
        `active` list, its history)."""
        meta = body.get("metadata") or {}
        labels = meta.get("labels") or {}
        if labels.get(TRIGGER_KIND_LABEL) != KIND:
            return
        phase = (body.get("status") or {}).get("phase")
        if event_type != "DELETED" and phase not in ("Succeeded", "Failed", "Cancelled"):
            return
        entry = self._schedules.get(
            (meta.get("namespace", "default"), labels.get(TRIGGER_NAME_LABEL, ""))
        )
        if entry is not None:
            entry.poked.set()

    async def stop(self) -> None:
        tasks = [e.task for e in self._schedules.values() if e.task is not None]
        self._schedules.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self, key: Key, entry: _Schedule) -> None:
        backoff = 1.0
        while True:
            entry.poked.clear()
            wake: float | None
            try:
                next_time = await self._reconciler.reconcile(entry.body)
                backoff = 1.0
                wake = None
                if next_time is not None:
                    wake = max(0.0, (next_time - self._clock()).total_seconds())
            except ApiError as exc:
                read = await self._refresh(key, entry) if exc.conflict or exc.not_found else None
                if read == "gone":
                    return  # the TaskSchedule is gone (its DELETED event may come later)
                if exc.conflict and read == "read":  # changed since read: decide again
                    wake = 0.0
                else:
                    log.warning(
                        "TaskSchedule pass failed; retrying",
                        extra={"ordo": {"schedule": f"{key[0]}/{key[1]}", "status": exc.status}},
                    )
                    wake, backoff = backoff, min(backoff * 2, MAX_BACKOFF_SECONDS)
            except Exception:
                log.exception(
                    "TaskSchedule pass failed; retrying",
                    extra={"ordo": {"schedule": f"{key[0]}/{key[1]}"}},
                )
                wake, backoff = backoff, min(backoff * 2, MAX_BACKOFF_SECONDS)
            timeout = MAX_SLEEP_SECONDS if wake is None else min(wake, MAX_SLEEP_SECONDS)
            if timeout > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(entry.poked.wait(), timeout)

    async def _refresh(self, key: Key, entry: _Schedule) -> Literal["read", "gone", "failed"]:
        """Read the TaskSchedule again. `gone` (and forgotten) when it no longer exists, so
        no pass acts on a deleted schedule's stale body; `failed` when the read failed (the
        loop backs off: an exception here would end it)."""
        try:
            found = await self._client.get(KIND, *key)
        except ApiError:
            return "failed"
        if found is None:
            if self._schedules.get(key) is entry:
                del self._schedules[key]
            return "gone"
        if self._schedules.get(key) is entry:
            entry.body = found
        return "read"
