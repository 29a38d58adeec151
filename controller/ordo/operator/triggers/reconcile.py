"""One pass over one TaskSchedule: read its Tasks, decide (decide.py), act (history, Replace's
cancels, the Task of the due time), post Events, count, and write the status conditionally on
the object's resourceVersion, so two replicas never both count one decision.

Exactly one Task per scheduled time comes from the Task's name, not from this pass: a pass
killed after the create and before the status write is followed by one that finds the Task
(a duplicate) and writes the status then.

The Events and counts of a decision that is not a write (a missed, skipped or refused time, a
duplicate) wait for the status write: a pass whose write fails (409: the object changed) is
decided again from the start, and would otherwise post and count the same times twice.
`Created` and `Replaced` report writes that happened, so they are posted at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from ...api.taskschedule import TaskScheduleSpec
from ...api.triggers import TriggerOutcome
from ...timestamps import parse
from ..kube.client import ApiError, KubeClient
from ..tasks.conditions import set_condition
from ..tasks.recorder import EventRecorder
from ..telemetry.metrics import Metrics
from .decide import MAX_MISSED, Decision, ScheduleState, decide
from .scheduletask import KIND, create_task, owned_tasks, rfc3339, selector, task_body

log = logging.getLogger("ordo.triggers")

INVALID = "InvalidSchedule"


@dataclass
class _Report:
    """Events and counts that stand once the status records the decision."""

    events: list[tuple[str, str, bool]] = field(default_factory=list)
    counts: list[tuple[TriggerOutcome, int]] = field(default_factory=list)

    def event(self, reason: str, message: str, *, warning: bool = False) -> None:
        self.events.append((reason, message, warning))

    def count(self, outcome: TriggerOutcome, n: int = 1) -> None:
        self.counts.append((outcome, n))


class ScheduleReconciler:
    """Decides and acts for TaskSchedules; `reconcile` returns when to look again."""

    def __init__(
        self,
        client: KubeClient,
        metrics: Metrics,
        events: EventRecorder,
        clock: Callable[[], datetime],
    ) -> None:
        self._client = client
        self._metrics = metrics
        self._events = events
        self._clock = clock

    def _count(self, outcome: TriggerOutcome, n: int = 1) -> None:
        if n > 0:
            self._metrics.trigger_tasks.labels(KIND, outcome).inc(n)

    async def reconcile(self, body: dict[str, Any]) -> datetime | None:
        """One pass; the time to look again (None: on a change only). Raises ApiError on a
        failure to retry (409 on the status write: the object changed, read it again)."""
        meta = body["metadata"]
        status = body.get("status") or {}
        try:
            spec = TaskScheduleSpec.model_validate(body.get("spec") or {})
        except ValidationError as exc:
            await self._invalid(body, _first_error(exc))
            return None
        items = await self._client.list("Task", meta["namespace"], selector(meta["name"]))
        state = ScheduleState(
            name=meta["name"],
            created_at=parse(meta.get("creationTimestamp")) or self._clock(),
            last_decision_time=parse(status.get("lastDecisionTime")),
            last_schedule_time=parse(status.get("lastScheduleTime")),
            observed_schedule=status.get("observedSchedule"),
        )
        d = decide(spec, state, owned_tasks(items, meta["uid"]), self._clock())
        report = _Report()
        created = await self._act(body, d, report)
        await self._write_status(body, d, created)
        for reason, message, warning in report.events:
            await self._events.post(body, reason, message, warning=warning)
        for outcome, n in report.counts:
            self._count(outcome, n)
        return d.next_wake

    async def _act(self, body: dict[str, Any], d: Decision, report: _Report) -> str | None:
        """Carry the decision out; the name of the Task of the due time if it exists now."""
        ns = body["metadata"]["namespace"]
        for name in d.delete:
            await self._client.delete("Task", ns, name, propagation="Background")
        warnings = []
        if d.too_many_missed:
            warnings.append(
                (
                    "TooManyMissedTimes",
                    f"at least {MAX_MISSED + 1} scheduled times were due at once and counting "
                    f"stopped there: missedRuns grew by {d.missed} (the true number of missed "
                    "times may be larger); only the most recent was considered (set "
                    "startingDeadlineSeconds to bound how late a run may be)",
                )
            )
        if d.late is not None:
            deadline = body["spec"].get("startingDeadlineSeconds")
            warnings.append(
                (
                    "MissedSchedule",
                    f"the time {rfc3339(d.late)} was missed: more than {deadline}s late "
                    "(startingDeadlineSeconds)",
                )
            )
        for reason, message in warnings:
            report.event(reason, message, warning=True)
        report.count("missed", d.missed)
        if d.skipped is not None:
            report.event(
                "SkippedConcurrent",
                f"the time {rfc3339(d.skipped)} was skipped: concurrencyPolicy Forbid and "
                f"{', '.join(d.active)} has not ended",
            )
            report.count("skipped")
        if d.duplicate_of is not None:
            report.count("duplicate")
            return str(task_body(body, d.duplicate_of)["metadata"]["name"])
        if d.create_for is None:
            return None
        for name in d.cancel:
            await self._client.patch("Task", ns, name, {"spec": {"cancel": True}})
            await self._events.post(
                body, "Replaced", f"cancelled Task {name} (concurrencyPolicy Replace)"
            )
            self._count("replaced")
        return await self._create(body, d.create_for, report)

    async def _create(self, body: dict[str, Any], at: datetime, report: _Report) -> str | None:
        task = task_body(body, at)
        name = str(task["metadata"]["name"])
        try:
            result = await create_task(self._client, task, body["metadata"]["uid"])
        except ApiError as exc:
            if exc.transient:
                raise
            # Refused (admission, quota, a template the API server rejects): the time passes.
            report.event(
                "FailedCreate",
                f"could not create Task {name} for {rfc3339(at)}: "
                f"{exc.api_reason or exc.status} (check the taskTemplate and the namespace's "
                "admission policies and quotas)",
                warning=True,
            )
            report.count("failed")
            return None
        if result == "taken":
            report.event(
                "TaskNameTaken",
                f"a Task named {name} exists and is not this schedule's: the time "
                f"{rfc3339(at)} is not run (delete or rename that Task)",
                warning=True,
            )
            report.count("failed")
            return None
        if result == "duplicate":
            report.count("duplicate")
            return name
        await self._events.post(body, "Created", f"created Task {name} for {rfc3339(at)}")
        self._count("created")
        return name

    async def _write_status(self, body: dict[str, Any], d: Decision, task: str | None) -> None:
        meta = body["metadata"]
        old = body.get("status") or {}
        new: dict[str, Any] = {
            "observedGeneration": meta.get("generation"),
            "active": sorted({*d.active, *([task] if task else [])}) or None,
            "observedSchedule": d.observed_schedule,
            "conditions": set_condition(
                old.get("conditions"),
                "Ready",
                "True",
                "Scheduled",
                f"schedule {d.observed_schedule}",
                meta.get("generation"),
            ),
        }
        if d.decided_through is not None:
            new["lastDecisionTime"] = rfc3339(d.decided_through)
        if task is not None and d.decided_through is not None:
            new["lastScheduleTime"] = rfc3339(d.decided_through)
        if d.missed:
            new["missedRuns"] = int(old.get("missedRuns") or 0) + d.missed
        last_ok = parse(old.get("lastSuccessfulTime"))
        if d.last_successful_time is not None and (
            last_ok is None or d.last_successful_time > last_ok
        ):
            new["lastSuccessfulTime"] = rfc3339(d.last_successful_time)
        if all(old.get(k) == v for k, v in new.items()):
            return
        await self._client.patch(
            KIND,
            meta["namespace"],
            meta["name"],
            {"metadata": {"resourceVersion": meta["resourceVersion"]}, "status": new},
            status=True,
        )

    async def _invalid(self, body: dict[str, Any], why: str) -> None:
        """Ready False (InvalidSchedule) naming the field, once per generation; no Task."""
        meta = body["metadata"]
        old = body.get("status") or {}
        ready: dict[str, Any] = next(
            (c for c in old.get("conditions") or [] if c.get("type") == "Ready"), {}
        )
        if ready.get("reason") == INVALID and ready.get("observedGeneration") == meta.get(
            "generation"
        ):
            return
        message = f"TaskSchedule {meta['namespace']}/{meta['name']}: {why}"
        conditions = set_condition(
            old.get("conditions"), "Ready", "False", INVALID, message, meta.get("generation")
        )
        await self._client.patch(
            KIND,
            meta["namespace"],
            meta["name"],
            {
                "metadata": {"resourceVersion": meta["resourceVersion"]},
                "status": {"observedGeneration": meta.get("generation"), "conditions": conditions},
            },
            status=True,
        )
        # After the write: a 409 is decided again, and would post and count it twice.
        await self._events.post(body, INVALID, message, warning=True)
        self._count("invalid")


def _first_error(exc: ValidationError) -> str:
    """`spec.<field>: <message>` of the first validation error (messages name values the
    user wrote in the spec, never secrets: a TaskSchedule holds none)."""
    err = exc.errors()[0]
    where = ".".join(str(p) for p in ("spec", *err["loc"]))
    return f"{where}: {err['msg']}"
