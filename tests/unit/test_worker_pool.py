"""WorkerPool (operator/workers/pool.py) with real child processes: the runs execute in the
children with the test engine below (`engine`, loaded in the child by `--engine`), store
reads are served from the run's store, results, errors, cancel and stop cross the pipe, a
stalled or killed child is SIGKILLed and replaced with its runs Abandoned and their losses
counted, metrics reach the control process, and a child dies with its control process."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

from ordo.credentials import NOWHERE, Destination, Release
from ordo.operator.kube.client import ApiError
from ordo.operator.tasks.claim import Claim
from ordo.operator.tasks.lease import ExecutionLease
from ordo.operator.tasks.runner import Abandoned, Finished, Parked
from ordo.operator.telemetry.metrics import Metrics
from ordo.operator.workers import child as workerchild
from ordo.operator.workers.pool import WorkerPool, WorkerRunError

HERE = Path(__file__).resolve().parent
ENGINE = "test_worker_pool:engine"


# -- the test engine (runs in the child) ---------------------------------------------------


class FakeRunner:
    """Does what the Task's spec.input says (one word), with the store it is given."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    async def run(self, claim, task, cancel, store=None, snapshot=None):  # type: ignore[no-untyped-def]
        ns, what = task.namespace, task.spec.input
        await store.get("Pid", ns, str(os.getpid()))  # tells the test where it ran
        if what == "echo":
            agent = await store.get("Agent", ns, task.spec.agent_ref)
            key = (await store.credential(ns, "key", "api-key", NOWHERE)).value
            missing = await store.get("Agent", ns, "missing")
            self.metrics.tasks.labels(ns, "a", "Succeeded", "Completed").inc()
            self.metrics.task_steps.labels(ns, "a").observe(3)
            self.metrics.model_requests.labels("mock", "m", "success").inc(2)
            if agent is None or key != "sk-1" or missing is not None or snapshot is not None:
                return Abandoned("wrong reads")
            return Finished()
        if what == "park":
            return Parked()
        if what == "wait":  # until cancelled (the Task's cancel Event)
            await cancel.wait()
            return Abandoned("cancel seen")
        if what == "sleep":
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                await store.get("Stopped", ns, task.name)
                raise
        if what == "burn":  # holds the child's event loop, in a task of its own as Runner's
            await asyncio.create_task(asyncio.to_thread(int))  # (a first await)
            await asyncio.create_task(burn())
        if what == "crash":
            os._exit(3)
        if what == "error":
            raise ValueError("boom")
        if what == "apierror":
            raise ApiError(503, "ServiceUnavailable", "try later")
        if what == "lease":
            lease = claim.lease
            facts = {
                "perProcess": lease.per_process,
                "left": round(lease.expires_in(), 1),
                "executionId": claim.execution_id,
                "resuming": claim.resuming,
                "holder": lease.holder,
            }
            return Abandoned(json.dumps(facts))
        if what == "keep":  # keep the lease until it is lost
            lost = asyncio.Event()
            keeper = asyncio.create_task(claim.lease.keep(lost.set))
            await lost.wait()
            keeper.cancel()
            return Abandoned("lease lost")
        return Abandoned(f"unknown {what}")


async def burn() -> None:
    time.sleep(3600)


async def engine(config: dict[str, Any]) -> workerchild.Engine:
    metrics = Metrics()

    async def close() -> None:
        return None

    return workerchild.Engine(FakeRunner(metrics), None, metrics, close)  # type: ignore[arg-type]


# -- control side ------------------------------------------------------------------------


class DictStore:
    def __init__(self) -> None:
        self.reads: list[tuple[str, ...]] = []

    async def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        self.reads.append((kind, namespace, name))
        if kind == "Agent" and name == "a":
            return {"kind": "Agent", "metadata": {"name": "a"}}
        return None

    async def list(self, kind: str, namespace: str) -> list[dict[str, Any]]:
        return []

    async def credential(
        self, namespace: str, name: str, key: str, dest: Destination | None
    ) -> Release:
        self.reads.append(("Secret", namespace, name, key))
        return Release("sk-1" if (name, key) == ("key", "api-key") else None)

    def pids(self) -> list[int]:
        return [int(r[2]) for r in self.reads if r[0] == "Pid"]


def body(name: str, what: str) -> dict[str, Any]:
    return {
        "apiVersion": "ordo.dev/v1alpha1",
        "kind": "Task",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "resourceVersion": "1",
        },
        "spec": {"agentRef": "a", "input": what},
        "status": {"phase": "Running", "executionId": f"x-{name}"},
    }


def claim(name: str, what: str, *, liveness: Any = None) -> tuple[Claim, Any]:
    from ordo.api import Task

    b = body(name, what)
    lease = ExecutionLease(
        None,  # type: ignore[arg-type]
        b,
        "holder-1",
        9.0,
        f"x-{name}",
        liveness=liveness,
        holder_lease="ordo-system/holder-1" if liveness else None,
    )
    lease.held_since(lease.clock())
    return Claim(b, f"x-{name}", lease, True), Task.model_validate(b)


def pool(workers: int = 1, **kwargs: Any) -> WorkerPool:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
    kwargs.setdefault("metrics", Metrics())
    return WorkerPool(
        workers,
        DictStore(),
        command=[sys.executable, "-m", "ordo.operator.workers.child", "--engine", ENGINE],
        env=env,
        log_format="text",
        **kwargs,
    )


async def run(p: WorkerPool, name: str, what: str, store: Any = None, **kw: Any) -> Any:
    c, task = claim(name, what, **kw)
    return await p.run(c, task, asyncio.Event(), store)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (not yet reaped) counts as gone
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(") ", 1)[1][0] != "Z"


async def wait_until(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


# -- tests -----------------------------------------------------------------------------------


async def test_runs_in_a_child_reading_through_the_runs_store_and_counting_metrics() -> None:
    metrics = Metrics()
    p = pool(2, metrics=metrics, beat_seconds=0.2)
    await p.start()
    try:
        assert len(p.pids()) == 2 and os.getpid() not in p.pids()
        store = DictStore()
        assert await run(p, "t1", "echo", store) == Finished()
        assert store.pids()[0] in p.pids()
        assert ("Secret", "ns", "key", "api-key") in store.reads
        assert ("Agent", "ns", "missing") in store.reads
        assert await run(p, "t2", "park") == Parked()

        def counted() -> bool:
            text = generate_latest(metrics.registry).decode()
            return (
                'ordo_model_requests_total{model="m",outcome="success",provider="mock"} 2.0' in text
            )

        await wait_until(counted, 5, "the child's metrics in control's registry")
        text = generate_latest(metrics.registry).decode()
        assert 'ordo_task_steps_count{agent="a",namespace="ns"} 1.0' in text
        assert 'ordo_task_steps_sum{agent="a",namespace="ns"} 3.0' in text
        assert text.count("ordo_tasks_total{") == 1  # one series, not one per process
    finally:
        await p.close()


async def test_runs_go_to_the_child_with_fewest_runs_and_stop_when_cancelled() -> None:
    p = pool(2)
    await p.start()
    try:
        store = DictStore()
        one = asyncio.create_task(run(p, "s1", "sleep", store))
        await wait_until(lambda: len(store.pids()) == 1, 10, "the first run")
        two = asyncio.create_task(run(p, "s2", "sleep", store))
        await wait_until(lambda: len(store.pids()) == 2, 10, "the second run")
        assert sorted(store.pids()) == sorted(p.pids())  # one on each
        assert p.runs() == 2
        one.cancel()  # shutdown: the child stops the run (which still reads, then ends)
        with pytest.raises(asyncio.CancelledError):
            await one
        assert ("Stopped", "ns", "s1") in store.reads
        two.cancel()
        with pytest.raises(asyncio.CancelledError):
            await two
        assert p.runs() == 0
    finally:
        await p.close()


async def test_cancel_reaches_the_runs_cancel_event() -> None:
    p = pool(1)
    await p.start()
    try:
        c, task = claim("c", "wait")
        cancel = asyncio.Event()
        running = asyncio.create_task(p.run(c, task, cancel))
        await asyncio.sleep(0.3)
        assert not running.done()
        cancel.set()
        assert await asyncio.wait_for(running, 10) == Abandoned("cancel seen")
    finally:
        await p.close()


async def test_errors_cross_the_pipe_as_their_kind() -> None:
    p = pool(1)
    await p.start()
    try:
        with pytest.raises(WorkerRunError, match="ValueError: boom"):
            await run(p, "e", "error")
        with pytest.raises(ApiError) as caught:
            await run(p, "e2", "apierror")
        assert caught.value.status == 503 and caught.value.transient
        assert str(caught.value) == "503 ServiceUnavailable: try later"
    finally:
        await p.close()


async def test_the_claim_is_rebuilt_with_its_lease() -> None:
    p = pool(1, valid_for=lambda: 7.0)
    await p.start()
    try:
        per_task = await run(p, "l1", "lease")  # renewed in the child: trusted as long as here
        assert isinstance(per_task, Abandoned)
        facts = json.loads(per_task.why)
        assert facts["perProcess"] is False and 6.0 <= facts["left"] <= 7.2
        assert (facts["executionId"], facts["resuming"], facts["holder"]) == (
            "x-l1",
            True,
            "holder-1",
        )
        per_process = await run(p, "l2", "lease", liveness=lambda: 7.0)
        assert isinstance(per_process, Abandoned)
        facts = json.loads(per_process.why)
        assert facts["perProcess"] is True and 6.0 <= facts["left"] <= 7.0  # the heartbeat
    finally:
        await p.close()


async def test_the_childs_lease_lapses_with_controls_heartbeat() -> None:
    lease_until = {"at": time.monotonic() + 30}  # this process's Lease, by its own clock
    p = pool(1, valid_for=lambda: max(0.0, lease_until["at"] - time.monotonic()), beat_seconds=0.2)
    await p.start()
    try:
        keeping = asyncio.create_task(run(p, "k", "keep", liveness=lambda: 30.0))
        await asyncio.sleep(1.0)
        assert not keeping.done()  # the beats keep it
        lease_until["at"] = time.monotonic() + 0.5  # its renewals failed: it lapses soon
        started = time.monotonic()
        assert await asyncio.wait_for(keeping, 10) == Abandoned("lease lost")
        assert time.monotonic() - started < 3
    finally:
        await p.close()


async def test_a_stalled_child_is_killed_and_replaced_blaming_the_run_that_held_it() -> None:
    p = pool(1, stall_seconds=2.0, beat_seconds=0.2)
    await p.start()
    try:
        (old,) = p.pids()
        store = DictStore()
        innocent = asyncio.create_task(run(p, "quiet", "sleep", store))
        await wait_until(lambda: len(store.pids()) == 1, 10, "the quiet run")
        started = time.monotonic()
        hostile = await asyncio.wait_for(run(p, "hostile", "burn", store), 15)
        assert hostile == Abandoned("worker stalled")
        assert 1.5 <= time.monotonic() - started < 8  # stall_seconds after its last beat
        assert await asyncio.wait_for(innocent, 5) == Abandoned("worker lost: stall")
        assert (p.losses("uid-hostile"), p.losses("uid-quiet")) == (1, 0)
        await wait_until(lambda: not alive(old), 5, "the stalled child to be gone")
        await wait_until(lambda: len(p.pids()) == 1, 15, "its replacement")
        assert p.pids() != [old] and p.replaced == 1
        assert await run(p, "after", "echo") == Finished()
        p.forget("uid-hostile")
        assert p.losses("uid-hostile") == 0
    finally:
        await p.close()


async def test_a_child_that_dies_abandons_every_run_it_had_and_counts_them() -> None:
    p = pool(1)
    await p.start()
    try:
        (old,) = p.pids()
        store = DictStore()
        runs = [asyncio.create_task(run(p, f"r{i}", "sleep", store)) for i in range(2)]
        await wait_until(lambda: len(store.pids()) == 2, 10, "both runs")
        os.kill(old, signal.SIGKILL)
        results = await asyncio.wait_for(asyncio.gather(*runs), 10)
        assert results == [Abandoned("worker lost: exit")] * 2
        assert p.losses("uid-r0") == p.losses("uid-r1") == 1
        await wait_until(lambda: len(p.pids()) == 1 and p.pids() != [old], 15, "a new child")
        crashed = await asyncio.wait_for(run(p, "boom", "crash"), 10)
        assert crashed == Abandoned("worker lost: exit") and p.losses("uid-boom") == 1
    finally:
        await p.close()


async def test_close_stops_the_runs_and_ends_the_children() -> None:
    p = pool(2)
    await p.start()
    pids = p.pids()
    store = DictStore()
    running = asyncio.create_task(run(p, "z", "sleep", store))
    await wait_until(lambda: len(store.pids()) == 1, 10, "the run")
    await p.close()
    assert isinstance(await asyncio.wait_for(running, 5), Abandoned)
    assert ("Stopped", "ns", "z") in store.reads  # stopped in its child, not killed
    assert not any(alive(pid) for pid in pids)
    assert await run(p, "late", "echo") == Abandoned("the worker pool closed")


HOLDER = textwrap.dedent(
    """
    import asyncio, os, sys
    sys.path.insert(0, {here!r})
    import test_worker_pool as t

    async def main():
        p = t.pool(1, stall_seconds=3600)
        await p.start()
        print(p.pids()[0], flush=True)
        # a run that holds the child's loop: it cannot see its stdin end
        await t.run(p, "burn", "burn")

    asyncio.run(main())
    """
)


def test_a_child_dies_with_its_control_process() -> None:
    """SIGKILL the process holding the pool while its child's loop is blocked (so the child
    cannot notice stdin's end): PR_SET_PDEATHSIG kills the child."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER.format(here=str(HERE))],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        pid = int(holder.stdout.readline())
        time.sleep(1.0)  # the burn has started
        assert alive(pid)
        holder.kill()
        holder.wait()
        deadline = time.monotonic() + 5
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(pid)
    finally:
        if holder.poll() is None:
            holder.kill()


def test_a_child_started_after_its_parent_died_exits() -> None:
    """The parent check: a child whose --parent is not its parent exits at once."""
    done = subprocess.run(
        [sys.executable, "-m", "ordo.operator.workers.child", "--parent", "1"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=30,
    )
    assert done.returncode == 1


def test_the_heartbeat_is_received_at_plus_valid_for() -> None:
    now = [100.0]
    beat = workerchild.Heartbeat(lambda: now[0])
    assert beat.valid_for() == 0.0
    beat.beat(5.0)
    now[0] = 103.0
    assert beat.valid_for() == 2.0
    now[0] = 106.0
    assert beat.valid_for() == 0.0
