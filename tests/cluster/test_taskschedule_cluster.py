"""TaskSchedule with the operator as a subprocess (issue 29): a `* * * * *` schedule creates
exactly one Task per minute across an operator SIGKILL and restart in the same minute and with
two replicas; `Forbid` skips while a Task runs (held by a tool call waiting for approval);
`Replace` cancels it for the next; `suspend` creates nothing; the history limit prunes.

The scenarios share one namespace and one run over the same three minute boundaries (the
module fixture), then each test asserts its part: real minutes, so never one after another."""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.support.operator import OperatorProcess, apply, doc, events, get_json, wait_for

from ordo.api.triggers import SCHEDULED_AT_ANNOTATION, TRIGGER_NAME_LABEL
from ordo_devcluster import ControlPlane

MINUTES = 3
"""Minute boundaries the run spans after the schedules exist."""
EVERY_MINUTE = "* * * * *"


def schedule(name: str, agent: str, **fields: Any) -> str:
    body = json.loads(
        doc(
            "TaskSchedule",
            name,
            {"schedule": EVERY_MINUTE, "taskTemplate": {"spec": {"agentRef": agent}}, **fields},
        )
    )
    if name == "once":
        body["metadata"]["annotations"] = {"ordo.dev/requested-by": "admin"}
        body["spec"]["taskTemplate"]["metadata"] = {"labels": {"team": "reports"}}
    return json.dumps(body)


OBJECTS = """
apiVersion: ordo.dev/v1alpha1
kind: ModelEndpoint
metadata: {name: quick}
spec: {provider: mock, mock: {turns: [{text: ok}]}}
---
# Its Tasks wait: the one model turn calls a Tool that needs an approval nobody gives.
apiVersion: ordo.dev/v1alpha1
kind: ModelEndpoint
metadata: {name: hold}
spec: {provider: mock, mock: {turns: [{toolCalls: [{tool: gate, arguments: {}}]}]}}
---
apiVersion: ordo.dev/v1alpha1
kind: Tool
metadata: {name: gate}
spec:
  type: mock
  description: waits for a human
  mock: {result: opened}
  approval: {required: true, timeout: 1h}
---
apiVersion: ordo.dev/v1alpha1
kind: Agent
metadata: {name: held}
spec: {modelRef: hold, tools: [gate]}
---
apiVersion: ordo.dev/v1alpha1
kind: Agent
metadata: {name: quick}
spec: {modelRef: quick, limits: {maxSteps: 2}}
"""


def setup(cp: ControlPlane, ns: str) -> None:
    apply(cp, ns, OBJECTS)
    for manifest in (
        schedule("once", "quick", successfulTasksHistoryLimit=10),
        schedule("forbid", "held", concurrencyPolicy="Forbid"),
        schedule("paused", "quick", suspend=True),
        schedule("pruned", "quick", successfulTasksHistoryLimit=1),
        schedule("replace", "held", concurrencyPolicy="Replace", failedTasksHistoryLimit=5),
    ):
        apply(cp, ns, manifest)


def owned(cp: ControlPlane, ns: str, name: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = get_json(
        cp, "tasks", "-n", ns, "-l", f"{TRIGGER_NAME_LABEL}={name}"
    )["items"]
    return items


def minute(task: dict[str, Any]) -> str:
    return str(task["metadata"]["annotations"][SCHEDULED_AT_ANNOTATION])


@dataclass
class Run:
    cp: ControlPlane
    ns: str
    created_at: float
    """When the schedules were created (epoch seconds)."""
    boundaries: list[str]
    """The minute boundaries passed since, as `ordo.dev/scheduled-at` writes them."""
    killed_in: str
    """The minute in which the first operator was SIGKILLed and restarted."""
    first: OperatorProcess
    second: OperatorProcess


def rfc(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


@pytest.fixture(scope="module")
def run(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    cp = control_plane
    ns = cp.create_namespace(prefix="tsch")
    logs: Path = tmp_path_factory.mktemp("tsch")
    first = OperatorProcess(cp, ns, logs).start()
    second = OperatorProcess(cp, ns, logs)  # the same checkpoint keyring, its own log
    second.log_path = logs / "operator-second.log"
    try:
        setup(cp, ns)
        created_at = time.time()
        m1 = (int(created_at) // 60 + 1) * 60
        # The first minute's Task, then a SIGKILL and a restart within that minute.
        wait_for(
            lambda: any(minute(t) == rfc(m1) for t in owned(cp, ns, "once")),
            75,
            interval=0.5,
            what="the first scheduled Task",
        )
        first.kill_and_restart()
        assert time.time() < m1 + 60, "the restart took the rest of the minute"
        second.start()  # a second replica for the minutes after
        last = m1 + (MINUTES - 1) * 60
        wait_for(
            lambda: any(minute(t) == rfc(last) for t in owned(cp, ns, "once")),
            last - time.time() + 30,
            interval=1,
            what="the last minute's Task",
        )

        # The pruned schedule's newest Task succeeds, then its older ones go.
        def pruned() -> bool:
            tasks = owned(cp, ns, "pruned")
            return len(tasks) == 1 and (tasks[0].get("status") or {}).get("phase") == "Succeeded"

        wait_for(
            pruned,
            30,
            interval=1,
            what="history pruned to one Task",
        )
        yield Run(
            cp, ns, created_at, [rfc(m1 + 60 * i) for i in range(MINUTES)], rfc(m1), first, second
        )
    finally:
        first.stop()
        second.stop()


def test_one_task_per_minute_across_a_sigkill_and_two_replicas(run: Run) -> None:
    tasks = owned(run.cp, run.ns, "once")
    minutes = sorted(minute(t) for t in tasks)
    assert minutes == run.boundaries  # each minute once: none missing, none twice
    assert len({t["metadata"]["name"] for t in tasks}) == len(tasks)
    sched = get_json(run.cp, "taskschedule", "once", "-n", run.ns)
    for task in tasks:
        meta = task["metadata"]
        (ref,) = meta["ownerReferences"]
        assert ref["kind"] == "TaskSchedule" and ref["controller"] is True
        assert ref["uid"] == sched["metadata"]["uid"]
        assert meta["labels"]["team"] == "reports"
        assert meta["labels"]["ordo.dev/trigger-kind"] == "TaskSchedule"
        assert meta["annotations"]["ordo.dev/requested-by"] == "admin"
    # Exactly one create per minute reached the API server: one Created Event each.
    created = [e for e in events(run.cp, run.ns, "once") if e["reason"] == "Created"]
    assert len(created) == len(run.boundaries), [e["message"] for e in created]
    status = sched["status"]
    assert status["lastScheduleTime"] == run.boundaries[-1]
    assert status.get("missedRuns") is None
    ready = {c["type"]: c for c in status["conditions"]}["Ready"]
    assert ready["status"] == "True"
    text = run.second.metrics() + run.first.metrics()
    assert 'ordo_trigger_tasks_total{kind="TaskSchedule",outcome="created"}' in text


def test_forbid_skips_while_a_task_runs(run: Run) -> None:
    tasks = owned(run.cp, run.ns, "forbid")
    assert [minute(t) for t in tasks] == run.boundaries[:1]
    assert tasks[0]["status"]["phase"] not in ("Succeeded", "Failed", "Cancelled")
    skipped = {
        e["message"] for e in events(run.cp, run.ns, "forbid") if e["reason"] == "SkippedConcurrent"
    }
    for later in run.boundaries[1:]:
        assert any(later in m for m in skipped), skipped
    status = get_json(run.cp, "taskschedule", "forbid", "-n", run.ns)["status"]
    assert status["active"] == [tasks[0]["metadata"]["name"]]
    assert status["lastScheduleTime"] == run.boundaries[0]


def test_suspend_stops_it(run: Run) -> None:
    assert owned(run.cp, run.ns, "paused") == []
    status = get_json(run.cp, "taskschedule", "paused", "-n", run.ns).get("status") or {}
    assert status.get("lastScheduleTime") is None


def test_history_limit_prunes_the_oldest(run: Run) -> None:
    (kept,) = owned(run.cp, run.ns, "pruned")
    assert minute(kept) == run.boundaries[-1]
    assert kept["status"]["phase"] == "Succeeded"
    status = get_json(run.cp, "taskschedule", "pruned", "-n", run.ns)["status"]
    assert status["lastSuccessfulTime"] >= run.boundaries[-1]
    assert not status.get("active")


def test_replace_cancels_the_running_task_for_the_next(run: Run) -> None:
    def cancelled(name: str) -> bool:
        task = get_json(run.cp, "task", name, "-n", run.ns)
        return (task.get("status") or {}).get("phase") == "Cancelled"

    tasks = sorted(owned(run.cp, run.ns, "replace"), key=minute)
    assert [minute(t) for t in tasks] == run.boundaries
    for older in tasks[:-1]:
        assert older["spec"]["cancel"] is True
        name = older["metadata"]["name"]
        wait_for(functools.partial(cancelled, name), 30, what=f"{name} Cancelled")
    assert not tasks[-1]["spec"].get("cancel")
    replaced = [e for e in events(run.cp, run.ns, "replace") if e["reason"] == "Replaced"]
    assert {t["metadata"]["name"] for t in tasks[:-1]} <= {
        e["message"].split()[2] for e in replaced
    }
