"""Finished-Task retention (operator/lifecycle/retention.py): which TTL applies, when a Task is due, and
that a changed TTL moves its timer. The deletions themselves: tests/cluster/test_retention.py."""

from __future__ import annotations

import asyncio
from typing import Any

import kopf
import pytest
from pydantic import ValidationError

from ordo.api.task import TASK_SPEC_IMMUTABLE, TaskSpec
from ordo.operator.kube.client import KubeClient
from ordo.operator.lifecycle.retention import (
    Retention,
    due_at,
    finished_at,
    parse_time,
    ttl_seconds,
)
from ordo.operator.telemetry.metrics import Metrics

T0 = parse_time("2030-01-01T00:00:00Z")
assert T0 is not None


def task(
    phase: str | None = "Succeeded",
    ttl: int | None = None,
    completed: str | None = "2030-01-01T00:00:00Z",
    uid: str = "u1",
    **meta: Any,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"agentRef": "a"}
    if ttl is not None:
        spec["ttlSecondsAfterFinished"] = ttl
    status: dict[str, Any] = {}
    if phase is not None:
        status["phase"] = phase
    if completed is not None:
        status["completedAt"] = completed
    return {
        "metadata": {"name": "t", "namespace": "ns", "uid": uid, **meta},
        "spec": spec,
        "status": status,
    }


# -- which TTL applies ----------------------------------------------------------------------


def test_the_tasks_own_ttl_wins_over_the_operator_default() -> None:
    assert ttl_seconds(task(ttl=5), 3600.0) == 5.0
    assert ttl_seconds(task(ttl=0), 3600.0) == 0.0  # 0 on the Task: delete as soon as it ends
    assert ttl_seconds(task(), 3600.0) == 3600.0
    assert ttl_seconds(task(), None) is None
    assert ttl_seconds(task(), 0.0) is None  # 0 as the operator default: keep


@pytest.mark.parametrize("bad", [-1, "5", True, 1.5, None])
def test_a_ttl_that_is_not_a_non_negative_integer_is_ignored(bad: object) -> None:
    body = task()
    body["spec"]["ttlSecondsAfterFinished"] = bad
    assert ttl_seconds(body, None) is None
    assert ttl_seconds(body, 60.0) == 60.0


# -- when a Task is due ----------------------------------------------------------------------


def test_due_is_completed_at_plus_ttl() -> None:
    assert due_at(task(ttl=2), None, seen=0.0) == T0 + 2
    assert due_at(task(), 86400.0, seen=0.0) == T0 + 86400
    assert due_at(task(completed="2030-01-01T00:00:00.500000+00:00", ttl=1), None, 0.0) == (
        T0 + 1.5
    )


@pytest.mark.parametrize("phase", ["Succeeded", "Failed", "Cancelled"])
def test_every_terminal_phase_expires(phase: str) -> None:
    assert due_at(task(phase, ttl=1), None, seen=0.0) == T0 + 1


@pytest.mark.parametrize("phase", [None, "Pending", "Running"])
def test_an_unfinished_task_is_never_due(phase: str | None) -> None:
    assert due_at(task(phase, ttl=0), 1.0, seen=0.0) is None


def test_a_task_being_deleted_or_without_ttl_is_not_scheduled() -> None:
    assert due_at(task(ttl=1, deletionTimestamp="2030-01-01T00:00:05Z"), None, 0.0) is None
    assert due_at(task(), None, 0.0) is None


def test_without_completed_at_the_end_condition_then_first_sight_count() -> None:
    body = task(completed=None, ttl=10)
    body["status"]["conditions"] = [
        {"type": "Running", "status": "False", "lastTransitionTime": "2029-01-01T00:00:00Z"},
        {"type": "Failed", "status": "True", "lastTransitionTime": "2030-01-01T00:00:00Z"},
    ]
    assert finished_at(body) == T0
    assert due_at(body, None, seen=0.0) == T0 + 10
    bare = task(completed=None, ttl=10)
    assert finished_at(bare) is None
    assert due_at(bare, None, seen=1000.0) == 1010.0
    garbled = task(completed="yesterday", ttl=10)
    assert due_at(garbled, None, seen=1000.0) == 1010.0
    assert parse_time("2030-01-01T00:00:00") is None  # no zone: not trusted


# -- the API field ---------------------------------------------------------------------------


def test_the_field_is_a_bounded_non_negative_integer_and_mutable() -> None:
    assert TaskSpec.model_validate({"agentRef": "a", "ttlSecondsAfterFinished": 0})
    for bad in (-1, 2**31):
        with pytest.raises(ValidationError):
            TaskSpec.model_validate({"agentRef": "a", "ttlSecondsAfterFinished": bad})
    assert "ttlSecondsAfterFinished" not in TASK_SPEC_IMMUTABLE.rule
    assert "ttlSecondsAfterFinished" in TASK_SPEC_IMMUTABLE.message


# -- timers ----------------------------------------------------------------------------------


def _client() -> KubeClient:
    # Never contacted: every timer below is far in the future.
    return KubeClient(kopf.ConnectionInfo(server="https://127.0.0.1:9"))


async def test_observe_schedules_moves_and_forgets_timers() -> None:
    now = [T0]
    retention = Retention(_client(), Metrics(), None, clock=lambda: now[0])
    try:
        retention.observe(task("Running", ttl=3600), None)
        assert retention.scheduled() == {}
        retention.observe(task(ttl=3600), None)
        assert retention.scheduled() == {"u1": T0 + 3600}
        retention.observe(task(ttl=7200), "MODIFIED")  # a TTL edit moves the timer
        assert retention.scheduled() == {"u1": T0 + 7200}
        retention.observe(task(ttl=None), "MODIFIED")  # the TTL removed: kept
        assert retention.scheduled() == {}
        retention.observe(task(ttl=3600), "MODIFIED")
        retention.observe(task(ttl=3600, uid="u2"), None)
        assert set(retention.scheduled()) == {"u1", "u2"}
        retention.observe(task(ttl=3600), "DELETED")
        assert set(retention.scheduled()) == {"u2"}
        retention.observe(task(ttl=3600, uid="u2", deletionTimestamp="x"), "MODIFIED")
        assert retention.scheduled() == {}
    finally:
        await retention.shutdown()


async def test_the_operator_default_applies_and_a_missing_end_counts_from_first_sight() -> None:
    now = [T0]
    retention = Retention(_client(), Metrics(), 600.0, clock=lambda: now[0])
    try:
        retention.observe(task(completed=None), None)
        assert retention.scheduled() == {"u1": T0 + 600}
        now[0] = T0 + 100  # seen again later: still counted from the first sight
        retention.observe(task(completed=None), "MODIFIED")
        assert retention.scheduled() == {"u1": T0 + 600}
        await asyncio.sleep(0)
    finally:
        await retention.shutdown()


async def test_observe_neither_changes_nor_keeps_the_body() -> None:
    # The operator hands one copy of each Task event to retention, then to the scheduler
    # (handlers._task_event): retention must leave it as it was and keep no part of it.
    import copy

    retention = Retention(_client(), Metrics(), None, clock=lambda: T0)
    try:
        body = task(ttl=3600)
        before = copy.deepcopy(body)
        retention.observe(body, None)
        assert body == before
        body["spec"]["ttlSecondsAfterFinished"] = 1  # the scheduler's, from now on
        body["status"]["completedAt"] = "2031-01-01T00:00:00Z"
        assert retention.scheduled() == {"u1": T0 + 3600}
    finally:
        await retention.shutdown()
