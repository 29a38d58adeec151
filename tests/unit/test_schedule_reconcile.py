"""The TaskSchedule controller (operator/triggers/reconcile.py, schedules.py) against a fake
API (tests/support/fakestore.py) and an injected clock: what it creates, posts, counts and
writes, and how its loop ends and wakes. No real minutes pass."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from tests.support.fakestore import FakeStore

from ordo.api.triggers import (
    SCHEDULED_AT_ANNOTATION,
    TRIGGER_KIND_LABEL,
    TRIGGER_NAME_LABEL,
    scheduled_task_name,
)
from ordo.operator.kube.client import ApiError
from ordo.operator.tasks.recorder import EventRecorder
from ordo.operator.telemetry.metrics import Metrics
from ordo.operator.triggers.reconcile import ScheduleReconciler
from ordo.operator.triggers.schedules import ScheduleController

T0 = datetime(2026, 1, 1, tzinfo=UTC)
UID = "uid-nightly"
KEY = ("ns", "nightly")


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def stamp(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


class Rig:
    """A fake API holding one TaskSchedule (every 5 minutes, created at T0), a reconciler
    and a controller over it, on an injected clock."""

    def __init__(self, now: datetime, **spec: Any) -> None:
        self.store = FakeStore()
        self.clock = Clock(now)
        self.metrics = Metrics()
        self.reconciler = ScheduleReconciler(
            self.store.client, self.metrics, EventRecorder(self.store.client), self.clock
        )
        self.controller = ScheduleController(self.store.client, self.reconciler, self.clock)
        self.store.put(
            "taskschedules",
            {
                "apiVersion": "ordo.dev/v1alpha1",
                "kind": "TaskSchedule",
                "metadata": {
                    "name": "nightly",
                    "namespace": "ns",
                    "uid": UID,
                    "generation": 1,
                    "creationTimestamp": stamp(T0),
                },
                "spec": {
                    "schedule": "*/5 * * * *",
                    "taskTemplate": {"spec": {"agentRef": "a", "input": "go"}},
                    **spec,
                },
            },
        )

    @property
    def schedule(self) -> dict[str, Any]:
        found = self.store.get("taskschedules", *KEY)
        assert found is not None
        return found

    @property
    def status(self) -> dict[str, Any]:
        return self.schedule.get("status") or {}

    def task(self, minutes: float, *, owner: str = UID, phase: str | None = None) -> str:
        """Store a Task of the time `minutes` after T0, owned by `owner`."""
        name = scheduled_task_name("nightly", at(minutes))
        self.store.put(
            "tasks",
            {
                "metadata": {
                    "name": name,
                    "namespace": "ns",
                    "creationTimestamp": stamp(at(minutes)),
                    "labels": {TRIGGER_KIND_LABEL: "TaskSchedule", TRIGGER_NAME_LABEL: "nightly"},
                    "annotations": {SCHEDULED_AT_ANNOTATION: stamp(at(minutes))},
                    "ownerReferences": [
                        {
                            "kind": "TaskSchedule",
                            "name": "nightly",
                            "uid": owner,
                            "controller": True,
                        }
                    ],
                },
                "spec": {"agentRef": "a"},
                "status": {"phase": phase, "completedAt": stamp(at(minutes + 1))} if phase else {},
            },
        )
        return name

    def tasks(self) -> list[str]:
        return sorted(name for (plural, _, name) in self.store.objects if plural == "tasks")

    def count(self, outcome: str) -> float:
        value = self.metrics.registry.get_sample_value(
            "ordo_trigger_tasks_total", {"kind": "TaskSchedule", "outcome": outcome}
        )
        return value or 0.0

    async def reconcile(self) -> datetime | None:
        return await self.reconciler.reconcile(self.schedule)

    def edit(self, **spec: Any) -> dict[str, Any]:
        body = self.schedule
        body["spec"] = {**body["spec"], **spec}
        body["metadata"]["generation"] += 1
        return self.store.put("taskschedules", body)


async def until(check: Any, what: str) -> None:
    """Poll `check` (a bounded number of short sleeps; no time is asserted)."""
    for _ in range(500):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never: {what}")


def loop_running() -> bool:
    return any(t.get_name() == f"schedule {KEY}" and not t.done() for t in asyncio.all_tasks())


async def test_a_due_time_creates_its_task_posts_created_and_writes_the_status() -> None:
    rig = Rig(at(5.5))
    wake = await rig.reconcile()
    name = scheduled_task_name("nightly", at(5))
    assert rig.tasks() == [name]
    assert rig.store.reasons() == ["Created"]
    assert rig.status["lastScheduleTime"] == stamp(at(5))
    assert rig.status["lastDecisionTime"] == stamp(at(5))
    assert rig.status["active"] == [name]
    assert rig.count("created") == 1
    assert wake == at(10)
    # The next pass at the same time finds the Task listed and changes nothing.
    await rig.reconcile()
    assert rig.store.reasons() == ["Created"]
    assert rig.count("created") == 1


async def test_409_on_a_task_this_schedule_owns_is_a_duplicate_without_a_second_event() -> None:
    rig = Rig(at(5.5))
    name = rig.task(5)
    # Not listed yet (a stale list), so the pass creates and gets 409.
    del rig.store.objects[("tasks", "ns", name)]["metadata"]["labels"]
    await rig.reconcile()
    assert ("POST", "tasks") in rig.store.requests
    assert rig.store.reasons() == []
    assert rig.count("duplicate") == 1
    assert rig.count("created") == 0
    assert rig.status["lastScheduleTime"] == stamp(at(5))


async def test_a_task_of_that_name_someone_else_owns_is_never_adopted() -> None:
    rig = Rig(at(5.5))
    name = rig.task(5, owner="someone-else")
    before = dict(rig.store.objects[("tasks", "ns", name)])
    await rig.reconcile()
    assert rig.store.reasons() == ["TaskNameTaken"]
    assert rig.count("failed") == 1
    assert rig.store.objects[("tasks", "ns", name)] == before
    assert ("PATCH", "tasks") not in rig.store.requests
    assert "lastScheduleTime" not in rig.status
    assert rig.status["lastDecisionTime"] == stamp(at(5))
    assert not rig.status.get("active")


async def test_a_status_write_conflict_is_read_again_and_retried_never_lost_or_doubled() -> None:
    rig = Rig(at(15.5))  # 00:05 and 00:10 missed, 00:15 runs
    stale = dict(rig.schedule, metadata=dict(rig.schedule["metadata"]))
    rig.edit()  # someone changed the object after the controller read it
    rig.controller.observe(stale, None)
    try:
        await until(lambda: "lastScheduleTime" in rig.status, "the status is written")
    finally:
        await rig.controller.stop()
    assert rig.tasks() == [scheduled_task_name("nightly", at(15))]
    assert rig.store.reasons() == ["Created"]
    assert rig.status["lastScheduleTime"] == stamp(at(15))
    assert rig.status["missedRuns"] == 2
    assert rig.count("created") == 1
    assert rig.count("missed") == 2


@pytest.mark.parametrize("code", [403, 422])
async def test_a_refused_create_posts_failed_create_and_later_times_still_run(code: int) -> None:
    rig = Rig(at(5.5))
    rig.store.refuse("POST", "tasks", code)
    await rig.reconcile()
    assert rig.tasks() == []
    assert rig.store.reasons() == ["FailedCreate"]
    assert rig.count("failed") == 1
    assert rig.status["lastDecisionTime"] == stamp(at(5))
    assert "lastScheduleTime" not in rig.status
    rig.clock.now = at(10.5)
    await rig.reconcile()
    assert rig.tasks() == [scheduled_task_name("nightly", at(10))]
    assert rig.store.reasons() == ["FailedCreate", "Created"]
    assert "missedRuns" not in rig.status


async def test_replace_cancels_the_running_task_before_creating() -> None:
    rig = Rig(at(10.5), concurrencyPolicy="Replace")
    old = rig.task(5, phase="Running")
    await rig.reconcile()
    assert rig.store.objects[("tasks", "ns", old)]["spec"]["cancel"] is True
    patched = rig.store.requests.index(("PATCH", "tasks"))
    assert patched < rig.store.requests.index(("POST", "tasks"))
    assert rig.store.reasons() == ["Replaced", "Created"]
    assert rig.count("replaced") == 1
    assert set(rig.status["active"]) == {old, scheduled_task_name("nightly", at(10))}


async def test_history_beyond_the_limits_is_deleted_oldest_first() -> None:
    rig = Rig(at(60), suspend=True, successfulTasksHistoryLimit=2, failedTasksHistoryLimit=1)
    ok = [rig.task(m, phase="Succeeded") for m in (5, 10, 15, 20)]
    bad = [rig.task(m, phase="Failed") for m in (25, 30, 35)]
    running = rig.task(40, phase="Running")
    await rig.reconcile()
    assert rig.tasks() == sorted([*ok[2:], bad[2], running])
    assert rig.status["lastSuccessfulTime"] == stamp(at(21))
    assert rig.store.reasons() == []


async def test_a_deleted_schedule_ends_its_loop() -> None:
    rig = Rig(at(5.5), suspend=True)
    rig.controller.observe(rig.schedule, None)
    await until(lambda: "observedSchedule" in rig.status, "the first pass")
    assert loop_running()
    rig.controller.observe(rig.schedule, "DELETED")
    await until(lambda: not loop_running(), "the loop ends on DELETED")


async def test_a_schedule_gone_from_the_api_ends_its_loop_without_a_delete_event() -> None:
    rig = Rig(at(5.5), suspend=True)
    body = rig.schedule
    del rig.store.objects[("taskschedules", *KEY)]
    rig.controller.observe(body, None)
    try:
        await until(lambda: not loop_running(), "the loop ends when the object is gone")
    finally:
        await rig.controller.stop()
    assert rig.tasks() == []


async def test_the_loop_wakes_on_an_edit_without_waiting_for_the_next_time() -> None:
    rig = Rig(at(5.5), suspend=True)
    rig.controller.observe(rig.schedule, None)
    try:
        await until(lambda: "observedSchedule" in rig.status, "the suspended pass")
        assert rig.tasks() == []
        rig.controller.observe(rig.edit(suspend=False), None)
        await until(lambda: rig.tasks(), "a Task after the resume")
    finally:
        await rig.controller.stop()
    assert rig.tasks() == [scheduled_task_name("nightly", at(5))]


async def test_a_transient_failure_is_raised_for_the_loop_to_retry() -> None:
    rig = Rig(at(5.5))
    rig.store.refuse("GET", "tasks", 500, 500, 500, 500, 500, 500)
    with pytest.raises(ApiError):
        await rig.reconcile()
    assert rig.store.reasons() == []


async def test_too_many_missed_times_say_what_was_counted() -> None:
    rig = Rig(at(5 * 300 + 1))  # 300 times due at once
    await rig.reconcile()
    assert rig.tasks() == [scheduled_task_name("nightly", at(5 * 300))]
    assert rig.store.reasons() == ["Created", "TooManyMissedTimes"]
    assert "missedRuns grew by 100 " in rig.store.events[1]["message"]
    assert rig.status["missedRuns"] == 100
    assert rig.count("missed") == 100


async def test_an_invalid_schedule_is_reported_once_per_generation_after_its_status() -> None:
    rig = Rig(at(5.5), schedule="61 * * * *")
    stale = dict(rig.schedule, metadata=dict(rig.schedule["metadata"]))
    rig.store.put("taskschedules", rig.schedule)  # changed after the read: the write gets 409
    with pytest.raises(ApiError):
        await rig.reconciler.reconcile(stale)
    assert rig.store.reasons() == []
    await rig.reconcile()
    await rig.reconcile()
    assert rig.store.reasons() == ["InvalidSchedule"]
    assert rig.count("invalid") == 1
    ready = rig.status["conditions"][0]
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSchedule")
    assert rig.tasks() == []
