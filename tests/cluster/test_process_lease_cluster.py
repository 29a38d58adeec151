"""Liveness per process (issue 25; operator/tasks/processlease.py) on a real API server: one
coordination.k8s.io Lease per operator process, named by the Tasks it runs; no per-Task
renewals while runs wait on a model; takeover only once the holder's Lease lapses; and an
upgrade from an ordo that renews each Task's lease takes its running Tasks over safely."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from tests.cluster.test_writes_coalesced import requests_by_verb
from tests.support.oldordo import controller_at
from tests.support.operator import OperatorProcess, apply, get_json, wait_for, wait_task

from ordo import timestamps
from ordo_devcluster import ControlPlane

BEFORE_PROCESS_LEASES = "7895bcc"
"""The last commit whose operator renews every running Task's lease (the upgrade's `from`)."""

LEASE_SECONDS = 6


def slow_manifests(delay: str, *, steps: int = 2) -> str:
    return f"""
apiVersion: ordo.dev/v1alpha1
kind: ModelEndpoint
metadata: {{name: slow-model}}
spec:
  provider: mock
  model: mock-1
  mock:
    turns:
      - {{text: "done after a long think", delay: {delay}}}
---
apiVersion: ordo.dev/v1alpha1
kind: Agent
metadata: {{name: slow-agent}}
spec:
  modelRef: slow-model
  prompt: You take your time.
  limits: {{maxSteps: {steps}, timeout: 300s}}
"""


def tasks_manifest(names: list[str]) -> str:
    return "\n---\n".join(
        f"""apiVersion: ordo.dev/v1alpha1
kind: Task
metadata: {{name: {name}}}
spec: {{agentRef: slow-agent, input: think}}"""
        for name in names
    )


def task_status(cp: ControlPlane, ns: str, name: str) -> dict[str, Any]:
    status: dict[str, Any] = get_json(cp, "task", name, "-n", ns).get("status") or {}
    return status


def wait_running(cp: ControlPlane, ns: str, name: str) -> None:
    wait_for(
        lambda: task_status(cp, ns, name).get("phase") == "Running", 30, what=f"{name} Running"
    )


def process_leases(cp: ControlPlane, ns: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = get_json(
        cp, "leases", "-n", ns, "-l", "ordo.dev/operator-lease=true"
    )["items"]
    return items


def operator_with_leases(
    factory: Callable[..., OperatorProcess], namespace: str, *args: str
) -> OperatorProcess:
    return factory(
        "--lease-seconds",
        str(LEASE_SECONDS),
        "--lease-namespace",
        namespace,
        "--resync-seconds",
        "3600",
        *args,
    )


def test_in_flight_tasks_cost_no_liveness_write_of_their_own(
    control_plane: ControlPlane,
    namespace: str,
    operator_factory: Callable[..., OperatorProcess],
) -> None:
    """24 Tasks inside a 40 s model call: the operator's API requests stay ≤ 3/s over two
    lease periods (per-Task renewals every lease/3 would be 24 / 2 s = 12/s), no Task's
    renewTime moves, and every Task names the process's Lease as its holder."""
    op = operator_with_leases(operator_factory, namespace, "--max-concurrent-tasks", "30")
    apply(control_plane, namespace, slow_manifests("40s"))
    names = [f"wait-{i}" for i in range(24)]
    apply(control_plane, namespace, tasks_manifest(names))
    wait_for(
        lambda: all(
            task_status(control_plane, namespace, n).get("phase") == "Running" for n in names
        ),
        60,
        what="every Task Running",
    )
    time.sleep(2)  # the claims' and first checkpoints' writes settle
    [lease] = process_leases(control_plane, namespace)
    ref = f"{namespace}/{lease['metadata']['name']}"
    before = {n: task_status(control_plane, namespace, n)["lease"] for n in names}
    assert {b.get("holderLease") for b in before.values()} == {ref}
    assert {b["durationSeconds"] for b in before.values()} == {LEASE_SECONDS * 10}
    counts = requests_by_verb(op)
    start = time.monotonic()
    time.sleep(2 * LEASE_SECONDS)
    elapsed = time.monotonic() - start
    after = requests_by_verb(op)
    made = {verb: after.get(verb, 0) - counts.get(verb, 0) for verb in after}
    rate = sum(made.values()) / elapsed
    assert rate <= 3, f"{rate:.1f} API requests/s with 24 Tasks waiting: {made}"
    assert made.get("patch", 0) >= 1, "the process Lease is renewed (a merge patch)"
    for n in names:
        assert (
            task_status(control_plane, namespace, n)["lease"]["renewTime"] == before[n]["renewTime"]
        )
    renewed = process_leases(control_plane, namespace)[0]["spec"]["renewTime"]
    assert renewed > lease["spec"]["renewTime"]


def test_the_process_lease_lives_with_the_process(
    control_plane: ControlPlane,
    namespace: str,
    operator_factory: Callable[..., OperatorProcess],
) -> None:
    """Created at startup with its label and scope, renewed, deleted at shutdown (SIGTERM);
    the Task the process ran is released (durationSeconds 0) so the next one need not wait."""
    op = operator_with_leases(operator_factory, namespace)
    [lease] = process_leases(control_plane, namespace)
    assert lease["metadata"]["annotations"]["ordo.dev/scope"] == namespace
    assert lease["spec"]["leaseDurationSeconds"] == LEASE_SECONDS
    assert lease["spec"]["holderIdentity"] == lease["metadata"]["name"]
    apply(control_plane, namespace, slow_manifests("60s"))
    apply(control_plane, namespace, tasks_manifest(["one"]))
    wait_running(control_plane, namespace, "one")
    op.stop()
    assert process_leases(control_plane, namespace) == []
    lease_of_task = task_status(control_plane, namespace, "one")["lease"]
    assert lease_of_task["durationSeconds"] == 0


def test_a_killed_holders_task_is_taken_over_only_after_its_lease_lapses(
    control_plane: ControlPlane,
    namespace: str,
    operator_factory: Callable[..., OperatorProcess],
) -> None:
    """Its node dies (SIGKILL to the control process and its workers at once: no release, no
    delete): the next process resumes the Task only once the dead process's Lease lapsed,
    and deletes nothing it should not.

    The whole group is killed: a worker that outlives its SIGKILLed control process for a
    moment (until PR_SET_PDEATHSIG's SIGKILL lands) sees its stdin end, stops its run and may
    release the Task (durationSeconds 0), after which the next process rightly takes it at
    once, before the Lease lapses (seen in CI under load, with `OperatorProcess.kill`)."""
    op = operator_with_leases(operator_factory, namespace)
    apply(control_plane, namespace, slow_manifests("8s"))
    apply(control_plane, namespace, tasks_manifest(["survivor"]))
    wait_running(control_plane, namespace, "survivor")
    first = task_status(control_plane, namespace, "survivor")
    op.kill_all()
    # Its last renewal, as it stays (one still on the wire may land later: a later lapse).
    [dead] = process_leases(control_plane, namespace)
    lapses = parse(dead["spec"]["renewTime"]) + timedelta(seconds=LEASE_SECONDS)
    # Nothing released the Task: the new process has only the Lease's lapse to go by.
    assert task_status(control_plane, namespace, "survivor")["lease"] == first["lease"]
    op.start()
    done = wait_task(control_plane, namespace, "survivor", timeout=90)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert done["status"]["executionId"] != first["executionId"]
    # The resuming claim's renewTime is taken after its check that the Lease lapsed, on
    # the same clock as the Lease's renewTime: not before the lapse, by any margin.
    assert parse(done["status"]["lease"]["renewTime"]) >= lapses
    names = {lease["metadata"]["name"] for lease in process_leases(control_plane, namespace)}
    assert dead["metadata"]["name"] in names  # lapsed, not yet ten periods: kept


def parse(stamp: str) -> datetime:
    value = timestamps.parse(stamp)
    assert value is not None, stamp
    return value


@pytest.fixture(scope="module")
def old_controller(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The `controller/` of the ordo before process Leases, from git."""
    yield controller_at(BEFORE_PROCESS_LEASES, tmp_path_factory.mktemp("old-ordo"))


def test_an_upgrade_from_per_task_leases_takes_running_tasks_over_safely(
    control_plane: ControlPlane,
    namespace: str,
    tmp_path: Path,
    old_controller: Path,
    operator_factory: Callable[..., OperatorProcess],
) -> None:
    """An old operator (per-Task renewals) runs a Task; the new one starts beside it and
    leaves the Task alone while the old one renews it; the old one is SIGKILLed (the worst
    case of a Recreate rollout) and the new one resumes it once its lease lapsed."""
    old_dir = tmp_path / "old"
    old_dir.mkdir()
    env = {**os.environ, "PYTHONPATH": str(old_controller)}
    old = OperatorProcess(
        control_plane,
        namespace,
        old_dir,
        "--lease-seconds",
        str(LEASE_SECONDS),
        "--resync-seconds",
        "3600",
        env=env,
        checkpoint_key=False,  # before sealed checkpoints: no such flag
    ).start()
    try:
        apply(control_plane, namespace, slow_manifests("20s"))
        apply(control_plane, namespace, tasks_manifest(["carried"]))
        wait_running(control_plane, namespace, "carried")
        before = task_status(control_plane, namespace, "carried")
        assert "holderLease" not in before["lease"]
        new = operator_with_leases(operator_factory, namespace)
        time.sleep(2 * LEASE_SECONDS)  # the old one keeps renewing: the new one must wait
        during = task_status(control_plane, namespace, "carried")
        assert during["executionId"] == before["executionId"]
        assert during["lease"]["holder"] == before["lease"]["holder"]
        assert during["lease"]["renewTime"] > before["lease"]["renewTime"]
        old.kill()
        done = wait_task(control_plane, namespace, "carried", timeout=120)
    finally:
        if old.alive:
            old.stop()
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert done["status"]["executionId"] != before["executionId"]
    [lease] = process_leases(control_plane, namespace)
    assert new.alive and lease["metadata"]["name"] != before["lease"]["holder"]
