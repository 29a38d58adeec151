"""What a process does with the watch events of Tasks it does not run (issue 14: a second
replica must not pay for them): a Task Running under another holder's live lease gets no
job and no request until the lease could have expired; a finished Task keeps its finalizer
for its runner to remove, and is released here only if it is still there after a grace."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import kopf
import pytest

from ordo.operator.kube.client import KubeClient
from ordo.operator.lifecycle import process as process_mod
from ordo.operator.lifecycle.decide import Graces
from ordo.operator.lifecycle.scheduler import TaskScheduler
from ordo.operator.tasks.processlease import LABEL, SCOPE_ANNOTATION, ProcessLeases
from ordo.operator.tasks.writer import FINALIZER


class Api:
    """An in-process API that records requests: every PATCH answered `patch` (code, reason;
    None: like any other request), everything else 404 (no object)."""

    def __init__(self, patch: tuple[int, str] | None = None) -> None:
        self.requests: list[httpx.Request] = []
        self.patch = patch

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        code, reason = self.patch if request.method == "PATCH" and self.patch else (404, "NotFound")
        return httpx.Response(
            code, json={"kind": "Status", "code": code, "reason": reason, "message": "m"}
        )


def client_for(api: Api) -> KubeClient:
    return KubeClient(
        kopf.ConnectionInfo(server="https://kube.invalid"),
        wrap_transport=lambda _real: httpx.MockTransport(api),
        backoff=0.001,
    )


def scheduler_for(api: Api) -> TaskScheduler:
    return TaskScheduler(client_for(api))


def scheduler_with_peer(api: Api, peer: str, *, renewed: float, duration: int) -> TaskScheduler:
    """A scheduler whose peer table holds the process Lease of `peer`, renewed `renewed`
    seconds from now for `duration` seconds (as its watch would deliver it)."""
    client = client_for(api)
    leases = ProcessLeases(client, "ops", "me-00000001", 30.0, None)
    leases.peers.apply(
        "ADDED",
        {
            "metadata": {
                "name": peer,
                "labels": {LABEL: "true"},
                "annotations": {SCOPE_ANNOTATION: "*"},
            },
            "spec": {"renewTime": stamp(renewed), "leaseDurationSeconds": duration},
        },
    )
    return TaskScheduler(client, leases=leases)


def stamp(delta: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=delta)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def task(status: dict[str, Any], finalizers: list[str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "t1",
            "namespace": "ns",
            "uid": "u-1",
            "resourceVersion": "5",
            "finalizers": finalizers or [],
        },
        "spec": {"agentRef": "a", "input": "hi"},
        "status": status,
    }


def running(holder: str, renewed: float, duration: int = 30) -> dict[str, Any]:
    return task(
        {
            "phase": "Running",
            "executionId": "e-other",
            "lease": {"holder": holder, "renewTime": stamp(renewed), "durationSeconds": duration},
        },
        [FINALIZER],
    )


async def test_a_task_running_under_another_live_lease_costs_no_job_and_no_request() -> None:
    api = Api()
    s = scheduler_for(api)
    for _ in range(5):  # progress writes and renewals of the other holder
        s.observe(running("replica-b", -1), "MODIFIED")
    await asyncio.sleep(0.05)
    assert api.requests == []  # the look again (test_decide) is a timer, not a job
    await s.shutdown()
    await asyncio.sleep(0.05)
    assert api.requests == []


async def test_an_expired_or_released_lease_starts_a_job() -> None:
    api = Api()
    s = scheduler_for(api)
    s.graces = Graces(s.settings.lease_seconds, slack=0.0)
    s.observe(running("replica-b", -29.9), "MODIFIED")  # expires in 0.1 s, no event after
    await asyncio.sleep(0.01)
    assert api.requests == []
    await asyncio.sleep(0.3)
    # The look-again started a job, which read the Task (to claim it once the lease is free).
    assert [r.method for r in api.requests] == ["GET"]
    await s.shutdown()

    api = Api()
    s = scheduler_for(api)
    s.observe(running("replica-b", -1, duration=0), "MODIFIED")  # released
    await asyncio.sleep(0.05)
    assert [r.method for r in api.requests] == ["GET"]  # a job, at once
    await s.shutdown()


async def test_our_own_lease_or_none_starts_a_job() -> None:
    api = Api()
    s = scheduler_for(api)
    s.observe(running(s.identity, -1), "MODIFIED")  # ours, but no job here: look at it
    await asyncio.sleep(0.05)
    assert [r.method for r in api.requests] == ["GET"]
    await s.shutdown()
    api = Api()
    s = scheduler_for(api)
    s.observe(task({"phase": "Running", "executionId": "e-old"}, [FINALIZER]), None)
    await asyncio.sleep(0.05)
    assert [r.method for r in api.requests] == ["GET"]  # no lease in status (older version)
    await s.shutdown()


async def test_a_finished_task_is_released_only_if_its_runner_did_not() -> None:
    api = Api()
    s = scheduler_for(api)
    s.graces = Graces(s.settings.lease_seconds, release=0.1)
    done = task({"phase": "Succeeded", "executionId": "e-other"}, [FINALIZER])
    s.observe(done, "MODIFIED")
    # The runner removes the finalizer itself: its event cancels our look.
    s.observe(task({"phase": "Succeeded", "executionId": "e-other"}), "MODIFIED")
    await asyncio.sleep(0.3)
    assert api.requests == []
    # Left with the finalizer (its runner stopped in between): released after the grace.
    s.observe(done, "MODIFIED")
    await asyncio.sleep(0.3)
    assert [(r.method, r.url.path) for r in api.requests] == [
        ("PATCH", "/apis/ordo.dev/v1alpha1/namespaces/ns/tasks/t1")
    ]
    await s.shutdown()


CONFLICT = (409, "Conflict")
"""Another process wrote first."""
MAYBE_APPLIED = (500, "InternalError")
"""The write may or may not have landed."""


async def test_the_loser_of_a_reservation_stops_after_one_refused_write() -> None:
    """Two processes see a new Task: the one whose finalizer write lands goes on; the other
    learns from the Task's next watch event (no read) that it lost, and starts nothing else."""
    api = Api(patch=CONFLICT)
    s = scheduler_for(api)
    new = task({})
    s.observe(new, "ADDED")
    await asyncio.sleep(0.05)  # the job tried to reserve: refused
    assert [r.method for r in api.requests] == ["PATCH"]
    s.observe(task({}, [FINALIZER]), "MODIFIED")  # the winner's finalizer write
    await asyncio.sleep(0.1)
    assert [r.method for r in api.requests] == ["PATCH"]
    assert s.metrics.claims.labels("lost")._value.get() == 1
    # From now on the Task is the other process's: its events start nothing here.
    s.observe(task({"phase": "Pending"}, [FINALIZER]), "MODIFIED")
    await asyncio.sleep(0.05)
    assert len(api.requests) == 1
    await s.shutdown()


async def test_a_reservation_whose_events_stop_is_taken_over() -> None:
    api = Api()
    s = scheduler_for(api)
    s.settings.lease_seconds = 0.1
    s.observe(task({"phase": "Pending"}, [FINALIZER]), None)  # e.g. the sweep after a crash
    await asyncio.sleep(0.01)
    assert api.requests == []  # no job before the lease period
    await asyncio.sleep(0.3)
    assert api.requests  # a job looked at it (and found it gone: the API answers 404)
    await s.shutdown()


async def test_a_reservation_is_taken_over_even_when_the_sweep_observes_it_more_often() -> None:
    # The reserving process died. The resync sweep observes the unchanged Task every 0.05 s,
    # more often than the lease period (0.2 s): an unchanged object is not an event, so it
    # must not push the look back each time (the Task would never start).
    api = Api()
    s = scheduler_for(api)
    s.settings.lease_seconds = 0.2
    reserved = task({"phase": "Pending"}, [FINALIZER])
    for _ in range(12):
        s.observe(reserved, None)
        await asyncio.sleep(0.05)
    assert api.requests  # a job looked at it within the 0.6 s
    await s.shutdown()


async def test_a_task_running_in_a_job_is_supervised_even_under_its_pods_lease() -> None:
    """After an operator restart the Job of a running Job-mode Task needs a supervisor at
    once (pod failures, cancel, deadline), though its pod holds a live lease."""
    api = Api()
    s = scheduler_for(api)
    body = running("ordo-task-u-1-abcde", -1)
    body["status"]["executionMode"] = "Job"
    s.observe(body, None)
    await asyncio.sleep(0.05)
    assert [r.method for r in api.requests] == ["GET"]  # its job reads it at once
    await s.shutdown()


async def test_a_reservation_whose_answer_was_lost_is_looked_at_again() -> None:
    """Our finalizer write failed but landed (its answer lost): the Task shows a finalizer
    nobody here holds. The job stops, and the Task is looked at again once its events stop
    for a lease period: it is never left Pending for good (found by test_faults)."""
    api = Api(patch=MAYBE_APPLIED)
    s = scheduler_for(api)
    s.settings.lease_seconds = 0.2
    s.observe(task({}), "ADDED")
    await asyncio.sleep(0.05)
    s.observe(task({}, [FINALIZER]), "MODIFIED")  # our own write, its answer lost
    await asyncio.sleep(0.05)
    assert not any(r.url.path.endswith("/status") for r in api.requests)
    await asyncio.sleep(0.5)
    # Looked at again: a job went on with the reserved Task, up to its claim write.
    assert any(r.url.path.endswith("/status") for r in api.requests)
    await s.shutdown()


def task_named(
    uid: str, status: dict[str, Any], finalizers: list[str] | None = None
) -> dict[str, Any]:
    body = task(status, finalizers)
    body["metadata"] |= {"name": f"t-{uid}", "uid": uid}
    return body


def writes(api: Api) -> list[tuple[str, str]]:
    return [(r.method, r.url.path) for r in api.requests if r.method != "GET"]


def pending(s: TaskScheduler) -> float:
    """`ordo_tasks_pending`: jobs waiting for a slot."""
    return float(s.metrics.pending._value.get())


async def full_with_a_new_task(api: Api) -> TaskScheduler:
    """A process whose one slot is taken (a Task runs here), seeing a new Task t1."""
    s = scheduler_for(api)
    s.settings.max_concurrent_tasks = 1
    s.capacity = asyncio.Semaphore(1)
    await s.capacity.acquire()
    s.observe(task({}), "ADDED")
    return s


async def test_a_full_process_does_not_reserve_a_new_task(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process with no free slot must not take a Task it cannot run yet: a replica with a
    free slot (or this one, once a slot frees) takes it. Reserving while full let a small or
    busy replica hoard Tasks that a free one could have run (found by a 2-replica run with
    bounds 1 and 50: 58 s instead of about 6 s for 300 Tasks)."""
    monkeypatch.setattr(process_mod, "WAITING_MARK_AFTER_SECONDS", 0.01)
    api = Api(patch=CONFLICT)
    s = await full_with_a_new_task(api)
    await asyncio.sleep(0.1)
    # At most the WaitingForCapacity mark (a status write conditional on the
    # resourceVersion), never the finalizer: the Task is not reserved.
    assert all(path.endswith("/status") for _, path in writes(api)), writes(api)
    assert pending(s) == 1  # its job waits for a slot
    # Another replica with a free slot reserves it: this job ends without a write.
    before = len(api.requests)
    s.observe(task({"phase": "Pending"}, [FINALIZER]), "MODIFIED")
    await asyncio.sleep(0.05)
    assert pending(s) == 0 and len(api.requests) == before
    s.capacity.release()
    await asyncio.sleep(0.05)
    assert len(api.requests) == before  # the freed slot does not go to the lost Task
    await s.shutdown()


async def test_a_full_process_reserves_once_a_slot_frees(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(process_mod, "WAITING_MARK_AFTER_SECONDS", 0.01)
    api = Api(patch=CONFLICT)
    s = await full_with_a_new_task(api)
    await asyncio.sleep(0.1)
    assert not any(not p.endswith("/status") for _, p in writes(api))
    s.capacity.release()
    await asyncio.sleep(0.05)
    # Now it reserves: the finalizer write (refused here: another process won).
    assert ("PATCH", "/apis/ordo.dev/v1alpha1/namespaces/ns/tasks/t1") in writes(api)
    await s.shutdown()


async def test_a_task_another_replica_prefers_is_left_to_it_for_a_moment() -> None:
    """Replicas that see each other's process Leases split new Tasks by a stable hash of
    the Task's uid and the holders (rendezvous hashing): the preferred one reserves at once,
    the others only if it has not after a moment. So two replicas with free slots do not
    both write for every new Task."""
    api = Api(patch=CONFLICT)
    s = scheduler_with_peer(api, "replica-b", renewed=-1, duration=30)
    s.graces = Graces(s.settings.lease_seconds, defer=0.1)
    uids = [f"u-{i}" for i in range(2, 40)]
    theirs = [u for u in uids if s.preferred(u) == "replica-b"]
    mine = [u for u in uids if s.preferred(u) == s.identity]
    assert theirs and mine  # the hash splits them
    s.observe(task_named(theirs[0], {}), "ADDED")
    s.observe(task_named(mine[0], {}), "ADDED")
    await asyncio.sleep(0.03)
    assert [p for _, p in writes(api)] == [
        f"/apis/ordo.dev/v1alpha1/namespaces/ns/tasks/t-{mine[0]}"
    ]
    # The peer reserves its Task: nothing more here.
    s.observe(task_named(theirs[0], {"phase": "Pending"}, [FINALIZER]), "MODIFIED")
    await asyncio.sleep(0.2)
    assert len(writes(api)) == 1
    # A Task the peer does not take (full, or gone) is reserved here after the moment.
    s.observe(task_named(theirs[1], {}), "ADDED")
    await asyncio.sleep(0.03)
    assert len(writes(api)) == 1
    await asyncio.sleep(0.2)
    assert writes(api)[-1][1].endswith(f"/tasks/t-{theirs[1]}")
    await s.shutdown()


async def test_a_short_wait_for_a_slot_is_not_written(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Task that gets a slot within the grace is never marked WaitingForCapacity (in a
    burst that would be one more write per queued Task), and the grace does not hold the
    slot back: a slot that frees during it is taken at once."""
    monkeypatch.setattr(process_mod, "WAITING_MARK_AFTER_SECONDS", 10.0)
    api = Api(patch=CONFLICT)
    s = await full_with_a_new_task(api)
    await asyncio.sleep(0.05)
    assert writes(api) == []
    s.capacity.release()
    await asyncio.sleep(0.05)
    # The reservation at once, and no mark (a status write) at all.
    assert writes(api) == [("PATCH", "/apis/ordo.dev/v1alpha1/namespaces/ns/tasks/t1")]
    await s.shutdown()


async def test_a_long_wait_for_a_slot_is_written_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(process_mod, "WAITING_MARK_AFTER_SECONDS", 0.05)
    api = Api(patch=CONFLICT)
    s = await full_with_a_new_task(api)
    await asyncio.sleep(0.2)
    marks = [r for r in api.requests if r.url.path.endswith("/status")]
    assert len(marks) == 1
    sent = json.loads(marks[0].content)
    assert sent["metadata"]["resourceVersion"] == "5"  # conditional: a peer's write wins
    assert sent["status"]["conditions"][0]["reason"] == "WaitingForCapacity"
    await s.shutdown()


async def test_a_peer_whose_lease_lapsed_gets_no_share_of_new_tasks() -> None:
    s = scheduler_with_peer(Api(), "replica-b", renewed=-0.85, duration=1)
    uids = [f"u-{i}" for i in range(2, 40)]
    assert any(s.preferred(u) == "replica-b" for u in uids)
    await asyncio.sleep(0.2)  # its Lease lapsed without a renewal
    assert all(s.preferred(u) == s.identity for u in uids)
    await s.shutdown()


async def test_a_peer_in_another_scope_gets_no_share_and_a_deleted_one_none() -> None:
    """Replicas that watch other namespaces (shards) are not peers; a peer whose Lease is
    deleted (it shut down) stops being one at once."""
    s = scheduler_with_peer(Api(), "replica-b", renewed=-1, duration=30)
    uids = [f"u-{i}" for i in range(2, 40)]
    assert any(s.preferred(u) == "replica-b" for u in uids)
    assert s.leases is not None
    s.leases.peers.apply("DELETED", {"metadata": {"name": "replica-b"}})
    assert all(s.preferred(u) == s.identity for u in uids)
    s.leases.peers.apply(
        "ADDED",
        {
            "metadata": {
                "name": "shard-b",
                "labels": {LABEL: "true"},
                "annotations": {SCOPE_ANNOTATION: "team-b"},
            },
            "spec": {"renewTime": stamp(-1), "leaseDurationSeconds": 30},
        },
    )
    assert all(s.preferred(u) == s.identity for u in uids)
    await s.shutdown()
