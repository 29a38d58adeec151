"""The liveness rule of process Leases (operator/tasks/processlease.py) and the execution
lease that follows one (operator/tasks/lease.py): pure functions and clocks, no API."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import kopf
import pytest

from ordo.operator.kube.client import KubeClient
from ordo.operator.tasks.lease import ExecutionLease, held_elsewhere
from ordo.operator.tasks.processlease import (
    HOLDER_LEASE_WAIT_FACTOR,
    LABEL,
    SCOPE_ANNOTATION,
    PeerLeases,
    expiry,
    identity_name,
    scope_of,
    task_lease_left,
)

NOW = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC)


def stamp(delta: float) -> str:
    return (NOW + timedelta(seconds=delta)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def task(**lease: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "t", "namespace": "ns", "uid": "u"},
        "status": {"phase": "Running", "executionId": "e1", "lease": lease},
    }


def process_lease(
    name: str, renewed: float, duration: int = 30, scope: str = "*"
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "resourceVersion": "1",
            "labels": {LABEL: "true"},
            "annotations": {SCOPE_ANNOTATION: scope},
        },
        "spec": {"renewTime": stamp(renewed), "leaseDurationSeconds": duration},
    }


def client() -> KubeClient:
    return KubeClient(
        kopf.ConnectionInfo(server="https://kube.invalid"),
        wrap_transport=lambda _real: httpx.MockTransport(lambda _r: httpx.Response(404)),
    )


def test_without_a_holder_lease_the_tasks_own_fields_decide() -> None:
    assert task_lease_left(
        task(holder="a", renewTime=stamp(-10), durationSeconds=30), NOW, None, unseen_grace=30
    ) == pytest.approx(20)
    assert task_lease_left(task(), NOW, None, unseen_grace=30) == 0.0
    released = task(holder="a", renewTime=stamp(-1), durationSeconds=0, holderLease="ops/a")
    assert (
        task_lease_left(released, NOW, lambda _ref: NOW + timedelta(hours=1), unseen_grace=30) == 0
    )


def test_with_a_holder_lease_the_holders_lease_decides_not_the_tasks_fields() -> None:
    # Claimed long ago with a short wait on the Task: its holder's Lease is what counts.
    body = task(holder="a", renewTime=stamp(-3600), durationSeconds=300, holderLease="ops/a")
    alive = {"ops/a": NOW + timedelta(seconds=12)}
    assert task_lease_left(body, NOW, alive.get, unseen_grace=30) == pytest.approx(12)
    lapsed = {"ops/a": NOW - timedelta(seconds=1)}
    assert task_lease_left(body, NOW, lapsed.get, unseen_grace=30) == 0.0
    # Unknown holder Lease (deleted, or not seen yet): from the claim's renewTime.
    fresh = task(holder="a", renewTime=stamp(-5), durationSeconds=300, holderLease="ops/a")
    assert task_lease_left(fresh, NOW, {}.get, unseen_grace=30) == pytest.approx(25)
    assert task_lease_left(body, NOW, {}.get, unseen_grace=30) == 0.0
    # An ordo that reads no process Leases waits the Task's own (long) duration.
    assert task_lease_left(fresh, NOW, None, unseen_grace=30) == pytest.approx(295)


def test_a_peer_table_that_cannot_be_trusted_judges_nobody_lapsed() -> None:
    def broken(_ref: str) -> datetime | None:
        raise LookupError("not synced")

    body = task(holder="a", renewTime=stamp(-3600), durationSeconds=300, holderLease="ops/a")
    assert task_lease_left(body, NOW, broken, unseen_grace=30) == 30


def test_peer_leases_follow_their_watch_events_and_scope() -> None:
    peers = PeerLeases(client(), "ops", "me", "*")
    changes: list[int] = []
    peers.on_change = lambda: changes.append(1)
    peers.apply("ADDED", process_lease("b", renewed=-5))
    peers.apply("ADDED", process_lease("c", renewed=-5, scope="team-c"))
    peers.apply("ADDED", process_lease("me", renewed=-1))
    peers.apply("ADDED", {"metadata": {"name": "other-controller"}, "spec": {}})  # not ours
    assert [name for name, _ in peers.peers(NOW)] == ["b"]
    with pytest.raises(LookupError):  # never listed: nobody is judged from it
        peers.expires("ops/b")
    peers.informer.synced = True  # as after the first LIST
    assert peers.expires("ops/b") == NOW + timedelta(seconds=25)
    assert peers.expires("elsewhere/b") is None  # another namespace: never known here
    peers.apply("DELETED", {"metadata": {"name": "b"}})
    assert peers.expires("ops/b") is None and peers.peers(NOW) == ()
    assert len(changes) == 4  # b, c, me, b deleted; the foreign Lease changed nothing


def test_a_process_lease_lapses_at_renew_time_plus_duration() -> None:
    assert expiry(process_lease("b", renewed=-5, duration=30)) == NOW + timedelta(seconds=25)
    assert expiry({"spec": {"renewTime": stamp(0), "leaseDurationSeconds": "30"}}) is None
    assert expiry({"spec": {"leaseDurationSeconds": 30}}) is None


def test_identities_are_lease_names_and_scopes_are_stable() -> None:
    assert identity_name("Build_Host.Example", "0a1b2c3d") == "build-host.example-0a1b2c3d"
    assert identity_name("___", "0a1b2c3d") == "ordo-0a1b2c3d"
    assert scope_of(["b", "a"]) == "a,b" and scope_of(None) == "*" and scope_of([]) == "*"


def test_held_elsewhere_uses_the_rule_it_is_given_but_never_for_our_own() -> None:
    body = task(holder="a", renewTime=stamp(-1), durationSeconds=300, holderLease="ops/a")
    assert held_elsewhere(body, "a", left=lambda _t: 99.0) == 0.0
    assert held_elsewhere(body, "b", left=lambda _t: 7.0) == 7.0


def per_process_lease(valid: list[float]) -> ExecutionLease:
    lease = ExecutionLease(
        client(),
        task(),
        "me",
        30.0,
        "e1",
        liveness=lambda: valid[0],
        holder_lease="ops/me",
    )
    lease.held_since(lease.clock())
    return lease


def test_a_per_process_lease_writes_its_holder_lease_and_a_long_wait() -> None:
    lease = per_process_lease([20.0])
    fields = lease.fields()
    assert fields["holderLease"] == "ops/me" and fields["holder"] == "me"
    assert fields["durationSeconds"] == 30 * HOLDER_LEASE_WAIT_FACTOR
    assert lease.per_process and lease.expires_in() == 20.0
    lease.per_task()  # a CRD that pruned holderLease: back to renewing the Task's own
    assert not lease.per_process and lease.fields()["holderLease"] is None
    assert lease.fields()["durationSeconds"] == 30


def test_a_per_process_lease_is_valid_while_its_process_lease_is() -> None:
    valid = [20.0]
    lease = per_process_lease(valid)
    lease.check()
    valid[0] = 0.0
    assert not lease.valid()
    with pytest.raises(Exception, match="lease"):
        lease.check()


async def test_keeping_a_per_process_lease_writes_nothing_and_ends_when_it_lapses() -> None:
    valid = [0.05]
    lease = per_process_lease(valid)
    lost: list[int] = []

    async def lapse() -> None:
        await asyncio.sleep(0.02)
        valid[0] = 0.0  # the process Lease renewals stopped

    asyncio.get_running_loop().create_task(lapse())
    await asyncio.wait_for(lease.keep(lambda: lost.append(1)), 2)
    assert lost == [1] and lease.renewals == 0 and not lease.valid()


async def test_losing_a_per_process_lease_ends_keep_at_once() -> None:
    lease = per_process_lease([3600.0])
    lost: list[int] = []
    keeper = asyncio.get_running_loop().create_task(lease.keep(lambda: lost.append(1)))
    await asyncio.sleep(0.01)
    lease.lose("the worker lost its control process")
    await asyncio.wait_for(keeper, 1)
    assert lost == [1] and not lease.valid()
