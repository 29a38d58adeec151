"""Runs in worker processes (issue 25, operator/workers/) against a real API server.

Two parts:
- `WorkerPool` driven directly (no operator): a claimed Task runs to Succeeded in a child with
  the real engine (its own login, KubeClient, Runner; reads served from the test's store),
  and a SIGKILLed child's run resumes from its checkpoint in the replacement without
  repeating the non-idempotent tool call. These need nothing but the control plane.
- `ordo operator --workers 2`: Tasks run to Succeeded in the workers, and a SIGKILLed worker's
  run resumes without repeating a non-idempotent call; the workers die with their operator."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from tests.support.http_tool_server import HttpToolServer
from tests.support.openai_server import OpenAIServer
from tests.support.operator import (
    OperatorProcess,
    apply,
    effect_manifests,
    effect_model,
    effect_tasks,
    events,
    wait_for,
    wait_task,
)

from ordo.api import Task
from ordo.operator.kube.client import KubeClient, login
from ordo.operator.kube.store import KubeStore
from ordo.operator.tasks.claim import Claimed, Claimer
from ordo.operator.tasks.coalesce import FLUSH_SECONDS
from ordo.operator.tasks.runner import Abandoned, Finished
from ordo.operator.tasks.taskstore import SecretsReadOnce
from ordo.operator.telemetry.metrics import Metrics
from ordo.operator.workers.pool import WorkerPool
from ordo_devcluster import ControlPlane

pytestmark = [pytest.mark.cluster]

LEASE_SECONDS = 6.0
CHILD = "ordo.operator.workers.child"


# -- WorkerPool with the real engine, no operator ------------------------------------------


@pytest.fixture
def kube_env(control_plane: ControlPlane, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.setenv("KUBECONFIG", str(control_plane.kubeconfig))
    return dict(os.environ)


def metrics_text(metrics: Metrics) -> str:
    return generate_latest(metrics.registry).decode()


def succeeded(text: str, namespace: str) -> float:
    """ordo_tasks_total of Succeeded Tasks in `namespace`, from an exposition."""
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "ordo_tasks"
        for sample in family.samples
        if sample.labels.get("namespace") == namespace and sample.labels.get("phase") == "Succeeded"
    )


async def claimed(client: KubeClient, claimer: Claimer, ns: str, name: str, resuming: bool) -> Any:
    body = await client.get("Task", ns, name)
    assert body is not None
    got = await claimer.claim(body, resuming)
    assert isinstance(got, Claimed), got
    return got.claim, Task.model_validate(got.claim.body)


async def test_a_claimed_task_runs_in_a_worker_with_the_real_engine(
    control_plane: ControlPlane, namespace: str, kube_env: dict[str, str]
) -> None:
    client = KubeClient(login())
    metrics = Metrics()
    pool = WorkerPool(2, KubeStore(client), metrics, env=kube_env, log_format="text")
    try:
        with HttpToolServer() as tools, effect_model() as model:
            docs = effect_manifests(model.url, tools.url, tool_delay=0, timeout="60s")
            await asyncio.to_thread(apply, control_plane, namespace, docs)
            await asyncio.to_thread(apply, control_plane, namespace, effect_tasks(["one"]))
            await pool.start()
            claimer = Claimer(client, "test-control", LEASE_SECONDS)
            claim, task = await claimed(client, claimer, namespace, "one", False)
            store = SecretsReadOnce(KubeStore(client))
            assert await pool.run(claim, task, asyncio.Event(), store) == Finished()
            status = (await client.get("Task", namespace, "one"))["status"]  # type: ignore[index]
            assert status["phase"] == "Succeeded", status
            assert status["executionId"] == claim.execution_id
            assert tools.effects_snapshot() == {
                ("one", "one/place-order"): 1,
                ("one", "one/send-invoice"): 1,
            }
            # the child's counts reach this process's metrics with its next beat
            deadline = time.monotonic() + 5
            while succeeded(metrics_text(metrics), namespace) < 1 and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            assert succeeded(metrics_text(metrics), namespace) == 1
            assert metrics.kube_requests.labels("patch")._value.get() > 0  # the child's writes
    finally:
        await pool.close()
        await client.close()


async def test_a_killed_workers_run_resumes_without_repeating_a_side_effect(
    control_plane: ControlPlane, namespace: str, kube_env: dict[str, str]
) -> None:
    """Step 1 runs the non-idempotent `place-order`; step 2's model call hangs; the worker is
    SIGKILLed. The run is Abandoned (worker lost), its loss counted; claimed again (resuming),
    it runs in the replacement child from the checkpoint written before step 2's call, and
    succeeds with the tool run once."""
    client = KubeClient(login())
    pool = WorkerPool(1, KubeStore(client), Metrics(), env=kube_env, log_format="text")
    order = {"task": "order", "call": "order/place-order"}
    script = [
        {"tool_calls": [{"name": "place-order", "arguments": order, "id": "call_1"}]},
        {"delay": 60.0, "text": "never sent: the worker is killed first"},
    ]
    try:
        with HttpToolServer() as tools, OpenAIServer(script) as model:
            docs = effect_manifests(model.url, tools.url, tool_delay=0, timeout="120s")
            await asyncio.to_thread(apply, control_plane, namespace, docs)
            await asyncio.to_thread(apply, control_plane, namespace, effect_tasks(["order"]))
            await pool.start()
            (worker,) = pool.pids()
            claimer = Claimer(client, "test-control", LEASE_SECONDS)
            claim, task = await claimed(client, claimer, namespace, "order", False)
            store = SecretsReadOnce(KubeStore(client))
            running = asyncio.create_task(pool.run(claim, task, asyncio.Event(), store))
            while model.count < 2:  # step 2's model call arrived: the checkpoint is written
                assert not running.done(), running
                await asyncio.sleep(0.005)
            os.kill(worker, signal.SIGKILL)
            assert await asyncio.wait_for(running, 10) == Abandoned("worker lost: exit")
            assert pool.losses(claim.body["metadata"]["uid"]) == 1
            mid = (await client.get("Task", namespace, "order"))["status"]  # type: ignore[index]
            assert mid["phase"] == "Running" and mid["executionId"] == claim.execution_id
            model.set_script([{"text": "ordered"}] * 3)
            deadline = time.monotonic() + 30
            while not pool.pids() or pool.pids() == [worker]:
                assert time.monotonic() < deadline, "no replacement worker"
                await asyncio.sleep(0.1)
            again, task = await claimed(client, claimer, namespace, "order", True)
            assert again.execution_id != claim.execution_id  # the new claim fences the old
            assert await pool.run(again, task, asyncio.Event(), store) == Finished()
            status = (await client.get("Task", namespace, "order"))["status"]  # type: ignore[index]
            assert (status["phase"], status["step"]) == ("Succeeded", 2), status
            assert tools.effects_snapshot() == {("order", "order/place-order"): 1}
            reasons = [
                e["reason"]
                for e in await asyncio.to_thread(events, control_plane, namespace, "order")
            ]
            assert "Resumed" in reasons
    finally:
        await pool.close()
        await client.close()


# -- ordo operator --workers 2 ------------------------------------------------------------


def worker_pids(op: OperatorProcess) -> list[int]:
    """The operator's worker children (`python -m ordo.operator.workers.child`)."""
    assert op.proc is not None
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        ppid = int(stat.rsplit(") ", 1)[1].split()[1])
        if ppid == op.proc.pid and CHILD.encode() in cmdline:
            found.append(int(entry.name))
    return sorted(found)


@pytest.fixture
def tools() -> Iterator[HttpToolServer]:
    with HttpToolServer() as server:
        yield server


def test_operator_with_two_workers_runs_tasks_to_succeeded(
    control_plane: ControlPlane, namespace: str, tmp_path: Path, tools: HttpToolServer
) -> None:
    op = OperatorProcess(
        control_plane, namespace, tmp_path, "--workers", "2", "--lease-seconds", "6"
    ).start()
    try:
        pids = worker_pids(op)
        assert len(pids) == 2, pids
        with effect_model() as model:
            docs = effect_manifests(model.url, tools.url, tool_delay=0, timeout="60s")
            apply(control_plane, namespace, docs)
            names = [f"t{i}" for i in range(6)]
            apply(control_plane, namespace, effect_tasks(names))
            for name in names:
                status = wait_task(control_plane, namespace, name, timeout=90)["status"]
                assert status["phase"] == "Succeeded", (name, status)
        assert set(tools.effects_by_task().values()) == {2}  # each tool once per Task
        assert worker_pids(op) == pids  # nobody was lost
        # the runs' counts (in the workers) are in the control process's /metrics, once
        wait_for(lambda: succeeded(op.metrics(), namespace) == 6, 10, what="the workers' counts")
        assert op.metrics().count("# TYPE ordo_tasks_total counter") == 1
    finally:
        op.stop()


def test_operator_resumes_a_killed_workers_run_without_repeating_a_side_effect(
    control_plane: ControlPlane, namespace: str, tmp_path: Path, tools: HttpToolServer
) -> None:
    """As test_chaos's SIGKILL in step 2's model call, but the worker is killed, not the
    operator: the operator replaces it and resumes the Task from its checkpoint itself."""
    op = OperatorProcess(
        control_plane, namespace, tmp_path, "--workers", "2", "--lease-seconds", "6"
    ).start()
    order = {"task": "order", "call": "order/place-order"}
    script = [
        {"tool_calls": [{"name": "place-order", "arguments": order, "id": "call_1"}]},
        {"delay": 60.0, "text": "never sent: the worker is killed first"},
    ]
    try:
        with OpenAIServer(script) as model:
            docs = effect_manifests(model.url, tools.url, tool_delay=0, timeout="120s")
            apply(control_plane, namespace, docs)
            apply(control_plane, namespace, effect_tasks(["order"]))
            wait_for(lambda: model.count >= 2, 30, interval=0.005, what="step 2's model call")
            before = worker_pids(op)
            assert len(before) == 2, before
            for pid in before:  # the run is on one of them; both go
                os.kill(pid, signal.SIGKILL)
            killed = time.time()
            model.set_script([{"text": "ordered"}] * 3)
            status = wait_task(control_plane, namespace, "order", timeout=90)["status"]
            assert (status["phase"], status["step"]) == ("Succeeded", 2), status
            assert tools.effects_snapshot() == {("order", "order/place-order"): 1}
            assert "Resumed" in [e["reason"] for e in events(control_plane, namespace, "order")]
            assert op.alive, "the operator must survive its workers"
            wait_for(lambda: len(worker_pids(op)) == 2, 30, what="two workers again")
            assert not set(worker_pids(op)) & set(before)
            print(
                f"\nresumed {time.time() - killed:.1f}s after the SIGKILL (flush {FLUSH_SECONDS}s)"
            )
    finally:
        op.stop()


def test_workers_die_with_a_sigkilled_operator(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    op = OperatorProcess(control_plane, namespace, tmp_path, "--workers", "2").start()
    pids = worker_pids(op)
    assert len(pids) == 2
    op.kill()
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{pid}").exists() for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids)


HOSTILE = """
apiVersion: ordo.dev/v1alpha1
kind: ModelEndpoint
metadata: {name: hostile-model}
spec:
  provider: mock
  model: mock-1
  mock:
    turns:
      - {text: "computed for a long time", busy: 8}
---
apiVersion: ordo.dev/v1alpha1
kind: Agent
metadata: {name: hostile-agent}
spec:
  modelRef: hostile-model
  prompt: You compute.
  limits: {maxSteps: 2, timeout: 300s}
---
apiVersion: ordo.dev/v1alpha1
kind: ModelEndpoint
metadata: {name: calm-model}
spec:
  provider: mock
  model: mock-1
  mock:
    turns:
      - {text: "calm answer", delay: 20s}
---
apiVersion: ordo.dev/v1alpha1
kind: Agent
metadata: {name: calm-agent}
spec:
  modelRef: calm-model
  prompt: You wait.
  limits: {maxSteps: 2, timeout: 300s}
---
apiVersion: ordo.dev/v1alpha1
kind: Task
metadata: {name: calm}
spec: {agentRef: calm-agent, input: wait}
---
apiVersion: ordo.dev/v1alpha1
kind: Task
metadata: {name: hostile}
spec: {agentRef: hostile-agent, input: compute}
"""


def test_a_run_that_holds_its_loop_costs_only_its_own_task(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    """A run that computes without yielding stalls its worker, not the operator: the control
    process keeps serving (its /metrics answers) and the other run finishes; the stalled worker is
    killed and replaced, the hostile Task resumed once, and at the second loss it ends
    WorkerLost (status.workerLosses 2) instead of taking down every worker in turn."""
    op = OperatorProcess(
        control_plane,
        namespace,
        tmp_path,
        "--workers",
        "2",
        "--worker-stall-seconds",
        "2",
        "--lease-seconds",
        "6",
    ).start()
    try:
        apply(control_plane, namespace, HOSTILE)
        status = wait_task(control_plane, namespace, "hostile", timeout=120)["status"]
        assert (status["phase"], status["reason"]) == ("Failed", "WorkerLost"), status
        assert status["workerLosses"] == 2
        calm = wait_task(control_plane, namespace, "calm", timeout=120)["status"]
        assert calm["phase"] == "Succeeded", calm
        metrics = op.metrics()
        assert 'ordo_worker_restarts_total{reason="stalled"} 2.0' in metrics
        assert op.alive
        wait_for(lambda: len(worker_pids(op)) == 2, 30, what="two workers again")
    finally:
        op.stop()
