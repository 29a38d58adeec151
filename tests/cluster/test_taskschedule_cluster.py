"""TaskSchedule with the operator as a subprocess (issue 29): a `* * * * *` schedule creates
exactly one Task per minute across an operator SIGKILL and restart in the same minute and with
two replicas; `Forbid` skips while a Task runs (held by a tool call waiting for approval);
`Replace` cancels it for the next; `suspend` creates nothing; the history limit prunes; a
Task name taken by someone else is never adopted; a schedule only the cron library refuses
is Ready False.

The scenarios share one namespace and one run over the same three minute boundaries (the
module fixture), then each test asserts its part: real minutes, so never one after another."""

from __future__ import annotations

import calendar
import functools
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from tests.support.operator import OperatorProcess, apply, doc, events, get_json, wait_for

from ordo.api.triggers import (
    SCHEDULED_AT_ANNOTATION,
    TRIGGER_KIND_LABEL,
    TRIGGER_NAME_LABEL,
    scheduled_task_name,
)
from ordo_devcluster import ControlPlane

MINUTES = 3
"""Minute boundaries the run spans after the schedules exist."""
EVERY_MINUTE = "* * * * *"


def schedule(name: str, agent: str, cron: str = EVERY_MINUTE, **fields: Any) -> str:
    body = json.loads(
        doc(
            "TaskSchedule",
            name,
            {"schedule": cron, "taskTemplate": {"spec": {"agentRef": agent}}, **fields},
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


def setup(cp: ControlPlane, ns: str) -> int:
    """The objects, then every schedule in one request; the first minute boundary after the
    schedules' creation (epoch seconds)."""
    apply(cp, ns, OBJECTS)
    schedules = [
        schedule("once", "quick", successfulTasksHistoryLimit=10),
        schedule("forbid", "held", concurrencyPolicy="Forbid"),
        schedule("paused", "quick", suspend=True),
        # Limits 1 and 0: its first Task may end Failed (Interrupted by the SIGKILL), and is
        # then pruned too.
        schedule("pruned", "quick", successfulTasksHistoryLimit=1, failedTasksHistoryLimit=0),
        schedule("replace", "held", concurrencyPolicy="Replace", failedTasksHistoryLimit=5),
        schedule("taken", "quick", successfulTasksHistoryLimit=10),
        # The CRD's pattern accepts it; only the cron library knows minute 61 does not exist.
        schedule("invalid", "quick", cron="61 * * * *"),
    ]
    apply(cp, ns, "\n---\n".join(schedules))
    stamps = [
        calendar.timegm(time.strptime(s["metadata"]["creationTimestamp"], "%Y-%m-%dT%H:%M:%SZ"))
        for s in get_json(cp, "taskschedules", "-n", ns)["items"]
    ]
    return (max(stamps) // 60 + 1) * 60


def blocker(cp: ControlPlane, ns: str, at: int) -> str:
    """A Task someone else created under the name of `taken`'s Task for `at`, with the trigger
    labels too (labels are not ownership): the schedule must not adopt it."""
    name = scheduled_task_name("taken", datetime.fromtimestamp(at, UTC))
    body = json.loads(doc("Task", name, {"agentRef": "quick"}))
    body["metadata"]["labels"] = {TRIGGER_KIND_LABEL: "TaskSchedule", TRIGGER_NAME_LABEL: "taken"}
    apply(cp, ns, json.dumps(body))
    return name


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
    boundaries: list[str]
    """The minute boundaries passed since, as `ordo.dev/scheduled-at` writes them."""
    blocker: str
    """The Task that took the name of `taken`'s Task for the second minute."""
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
        m1 = setup(cp, ns)
        taken = blocker(cp, ns, m1 + 60)
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
        def phases() -> list[tuple[str, str | None]]:
            return [
                (minute(t), (t.get("status") or {}).get("phase")) for t in owned(cp, ns, "pruned")
            ]

        try:
            wait_for(lambda: phases() == [(rfc(last), "Succeeded")], 60, interval=1)
        except AssertionError:
            raise AssertionError(f"history not pruned to the last Task: {phases()}") from None
        yield Run(cp, ns, [rfc(m1 + 60 * i) for i in range(MINUTES)], taken, first, second)
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


def test_a_task_name_taken_by_someone_else_is_never_adopted(run: Run) -> None:
    sched = get_json(run.cp, "taskschedule", "taken", "-n", run.ns)
    blocker = get_json(run.cp, "task", run.blocker, "-n", run.ns)
    assert not blocker["metadata"].get("ownerReferences")
    mine = [
        t
        for t in owned(run.cp, run.ns, "taken")
        if [r["uid"] for r in t["metadata"].get("ownerReferences") or []]
        == [sched["metadata"]["uid"]]
    ]
    assert sorted(minute(t) for t in mine) == [run.boundaries[0], *run.boundaries[2:]]
    said = [e["message"] for e in events(run.cp, run.ns, "taken") if e["reason"] == "TaskNameTaken"]
    assert said and all(run.blocker in m for m in said), said
    assert run.blocker not in (sched["status"].get("active") or [])


def test_an_invalid_schedule_is_ready_false_naming_the_field(run: Run) -> None:
    status = get_json(run.cp, "taskschedule", "invalid", "-n", run.ns)["status"]
    ready = {c["type"]: c for c in status["conditions"]}["Ready"]
    assert ready["status"] == "False" and ready["reason"] == "InvalidSchedule"
    assert "spec.schedule" in ready["message"]
    assert owned(run.cp, run.ns, "invalid") == []
    reasons = [e["reason"] for e in events(run.cp, run.ns, "invalid")]
    assert "InvalidSchedule" in reasons
