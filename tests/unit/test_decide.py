"""`decide`: one watch event's view and this process's state to one action, for every
branch of the scheduler's `observe` (scheduler.py applies them; test_scheduler_observe.py
checks what the applied actions do)."""

from __future__ import annotations

import zlib
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ordo.operator.lifecycle import decide as d
from ordo.operator.lifecycle.view import TaskView
from ordo.operator.tasks.writer import FINALIZER

ME = "replica-a"
GRACES = d.Graces(30.0, release=5.0, defer=0.1, slack=0.5)


def stamp(delta: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=delta)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def body(
    status: dict[str, Any] | None = None,
    *,
    finalizer: bool = False,
    cancel: bool = False,
    deleting: bool = False,
    uid: str = "u-1",
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "t1", "namespace": "ns", "uid": uid, "resourceVersion": "5"}
    if finalizer:
        meta["finalizers"] = [FINALIZER]
    if deleting:
        meta["deletionTimestamp"] = stamp(0)
    spec: dict[str, Any] = {"agentRef": "a", "input": "hi"}
    if cancel:
        spec["cancel"] = True
    return {"metadata": meta, "spec": spec, "status": status or {}}


def view(b: dict[str, Any], event: str | None = "MODIFIED") -> TaskView:
    v = TaskView.of(b, event)
    assert v is not None
    return v


def local(*, job: bool = False, peers: tuple[str, ...] = ()) -> d.Local:
    return d.Local(ME, job, peers, GRACES)


def running(holder: str, renewed: float = -1, duration: int = 30, **kw: Any) -> dict[str, Any]:
    lease = {"holder": holder, "renewTime": stamp(renewed), "durationSeconds": duration}
    return body({"phase": "Running", "executionId": "e", "lease": lease}, finalizer=True, **kw)


def test_a_body_without_uid_has_no_view() -> None:
    assert TaskView.of({"metadata": {"name": "t"}}, "ADDED") is None


def test_the_view_reads_what_decisions_need() -> None:
    awaiting = {"type": "AwaitingApproval", "status": "True", "reason": "r", "message": "m"}
    b = running("replica-b", cancel=True)
    b["status"]["conditions"] = [awaiting]
    v = view(b)
    assert (v.uid, v.namespace, v.name, v.phase) == ("u-1", "ns", "t1", "Running")
    assert v.finalized and v.stopping and v.awaiting and not v.in_job and not v.deleted
    assert v.holder == "replica-b" and 28 < v.lease_left() <= 29
    assert v.body is b
    b["status"]["executionMode"] = "Job"
    assert view(b).in_job and view(b).holder is None


def test_deleted_stops_the_job_or_does_nothing() -> None:
    assert d.decide(view(body(), "DELETED"), local(job=True)) == d.StopJob("u-1")
    assert d.decide(view(body(), "DELETED"), local()) == d.Ignore()


@pytest.mark.parametrize(
    ("b", "cancel"),
    [
        (body({"phase": "Running"}, cancel=True), True),
        (body({"phase": "Pending"}, deleting=True), True),
        (body({"phase": "Succeeded"}), False),
    ],
)
def test_a_task_with_a_job_here_only_tells_it(b: dict[str, Any], cancel: bool) -> None:
    assert d.decide(view(b), local(job=True)) == d.NotifyJob("u-1", cancel, False, b)


def test_a_finished_task_with_a_finalizer_is_released_after_a_grace() -> None:
    v = view(body({"phase": "Succeeded"}, finalizer=True))
    assert d.decide(v, local()) == d.LookLater(5.0, d.Release(v))
    for phase in ("Succeeded", "Failed", "Cancelled"):
        assert d.decide(view(body({"phase": phase})), local()) == d.Ignore()


def test_running_under_another_holders_live_lease_is_looked_at_after_it() -> None:
    v = view(running("replica-b", renewed=-10))
    action = d.decide(v, local())
    assert isinstance(action, d.LookLater) and action.then == d.Reobserve(v)
    assert 20 < action.delay <= 20.5
    assert d.uid_of(action) == "u-1"


@pytest.mark.parametrize(
    "b",
    [
        running(ME),  # our own lease (this process restarted its job? look at it)
        running("replica-b", renewed=-31),  # expired
        running("replica-b", duration=0),  # released
        body({"phase": "Running", "executionId": "e-old"}, finalizer=True),  # no lease
    ],
)
def test_running_without_another_live_lease_starts_a_job(b: dict[str, Any]) -> None:
    v = view(b)
    assert d.decide(v, local()) == d.StartJob(v)


def test_running_in_a_job_is_supervised_at_once_under_its_pods_lease() -> None:
    b = running("ordo-task-u-1-abcde")
    b["status"]["executionMode"] = "Job"
    v = view(b)
    assert d.decide(v, local()) == d.StartJob(v)


def test_reserved_elsewhere_is_looked_at_after_a_lease_period() -> None:
    v = view(body({"phase": "Pending"}, finalizer=True))
    assert d.decide(v, local()) == d.LookLater(30.0, d.StartJob(v))
    # ... unless it is to be cancelled or deleted: its job ends it now.
    for b in (body({}, finalizer=True, cancel=True), body({}, finalizer=True, deleting=True)):
        assert d.decide(view(b), local()) == d.StartJob(view(b))


def uid_preferring(who: str, peers: tuple[str, ...]) -> str:
    return next(u for u in (f"u-{i}" for i in range(100)) if d.preferred(u, ME, peers) == who)


def test_a_new_task_is_left_for_a_moment_to_the_replica_it_prefers() -> None:
    peers = ("replica-b",)  # seen holding a lease in the last lease period
    theirs = view(body(uid=uid_preferring("replica-b", ("replica-b",))))
    mine = view(body(uid=uid_preferring(ME, ("replica-b",))))
    assert d.decide(theirs, local(peers=peers)) == d.LookLater(0.1, d.StartJob(theirs))
    assert d.decide(mine, local(peers=peers)) == d.StartJob(mine)
    # Alone (no peer seen for a lease period), every new Task is mine.
    assert d.decide(theirs, local()) == d.StartJob(theirs)
    # Cancelled or deleted: not deferred.
    b = body(uid=theirs.uid, cancel=True)
    assert d.decide(view(b), local(peers=peers)) == d.StartJob(view(b))


def test_a_new_task_starts_a_job() -> None:
    for b in (body(), body({"phase": "Pending"})):
        assert d.decide(view(b, "ADDED"), local()) == d.StartJob(view(b, "ADDED"))


def test_preferred_is_rendezvous_hashing() -> None:
    ps = ("replica-b", "replica-c")
    for uid in ("u-1", "u-2", "u-3"):
        best = max((ME, *ps), key=lambda p: (zlib.crc32(f"{uid}/{p}".encode()), p))
        assert d.preferred(uid, ME, ps) == best == d.preferred(uid, ME, reversed(ps))
