"""The pure parts of delegation in the operator (operator/tasks/children.py, childwait.py):
the child Task a parent creates, the child as its parent sees it, the parent's view of its
waiting children, the delegation metrics, and the job's children flag. The API-facing parts
run against a real API server in tests/cluster/test_delegation_objects_cluster.py."""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

import pytest
from prometheus_client import generate_latest

from ordo.engine.delegation import ChildRecord
from ordo.engine.events import ToolDecided
from ordo.engine.state import RunState, ToolCallRecord
from ordo.operator.flags import non_negative
from ordo.operator.jobmode import supervisor
from ordo.operator.lifecycle.job import Done, Job, attempts
from ordo.operator.tasks import childwait
from ordo.operator.tasks import runner as runner_mod
from ordo.operator.tasks.children import asked_for, child_body, owned_by, state_of
from ordo.operator.tasks.runner import Parked
from ordo.operator.telemetry.metrics import Metrics
from ordo.runtime.delegation import (
    CHAIN_ANNOTATION,
    PARENT_LABEL,
    PARENT_UID_LABEL,
    ROOT_LABEL,
    ChildRequest,
    Lineage,
    child_name,
)

PARENT: dict[str, Any] = {
    "apiVersion": "ordo.dev/v1alpha1",
    "kind": "Task",
    "metadata": {
        "name": "report",
        "namespace": "team",
        "uid": "u-1",
        "annotations": {"ordo.dev/requested-by": "alice"},
    },
    "spec": {"agentRef": "writer", "input": "go"},
}


def condition(type_: str, status: str = "True") -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": type_, "message": "m"}


def test_the_child_body_carries_the_tree_the_limits_and_the_owner() -> None:
    lineage = Lineage("top", ("planner", "writer"))
    request = ChildRequest(
        "call_9", "researcher", {"q": "x"}, 9.01, 300, output_schema={"type": "object"}
    )
    body = child_body(PARENT, lineage, request)
    meta = body["metadata"]
    assert meta["name"] == child_name("report", "u-1", "call_9")
    assert meta["labels"] == {PARENT_LABEL: "report", PARENT_UID_LABEL: "u-1", ROOT_LABEL: "top"}
    assert json.loads(meta["annotations"][CHAIN_ANNOTATION]) == [
        "planner",
        "writer",
        "researcher",
    ]
    assert meta["annotations"]["ordo.dev/requested-by"] == "alice"
    assert owned_by(body, "u-1") and not owned_by(body, "u-2")
    assert body["spec"] == {
        "agentRef": "researcher",
        "input": {"q": "x"},
        "limits": {"timeout": "10s", "maxTokens": 300},
        "outputSchema": {"type": "object"},
    }
    unlimited = child_body(
        {**PARENT, "metadata": {**PARENT["metadata"], "annotations": {}}},
        lineage,
        ChildRequest("k", "researcher", "hi", None, None),
    )
    assert "limits" not in unlimited["spec"]
    assert "ordo.dev/requested-by" not in unlimited["metadata"]["annotations"]


def test_only_a_controller_reference_to_the_parent_owns() -> None:
    ref = {"apiVersion": "ordo.dev/v1alpha1", "kind": "Task", "name": "report", "uid": "u-1"}
    assert not owned_by({"metadata": {"ownerReferences": [ref]}}, "u-1")  # not controller
    other = {**ref, "kind": "Agent", "controller": True}
    assert not owned_by({"metadata": {"ownerReferences": [other]}}, "u-1")
    assert not owned_by({"metadata": {}}, "u-1")


def test_the_child_as_its_parent_sees_it() -> None:
    fresh = state_of({"metadata": {"name": "c"}, "spec": {"agentRef": "r"}})
    assert (fresh.name, fresh.agent, fresh.phase, fresh.ended) == ("c", "r", "Pending", False)
    ended = state_of(
        {
            "metadata": {"name": "c"},
            "spec": {"agentRef": "r"},
            "status": {
                "phase": "Failed",
                "reason": "MaxStepsExceeded",
                "message": "too long",
                "structuredOutput": {"a": 1},
                "usage": {"inputTokens": 4, "outputTokens": 2, "totalTokens": 6},
                "conditions": [condition("AwaitingApproval", "False")],
            },
        }
    )
    assert (ended.phase, ended.reason, ended.structured, ended.usage.total_tokens) == (
        "Failed",
        "MaxStepsExceeded",
        {"a": 1},
        6,
    )
    assert ended.ended and not ended.awaiting_approval
    waiting = state_of({"metadata": {}, "status": {"conditions": [condition("AwaitingApproval")]}})
    assert waiting.awaiting_approval


def test_a_waiting_parents_view_of_its_children() -> None:
    body = {
        "status": {
            "conditions": [condition("AwaitingChildren")],
            "children": [
                {"name": "a", "agent": "r", "phase": "Running"},
                {"name": "b", "agent": "r", "phase": "Succeeded"},
            ],
        }
    }
    assert childwait.awaiting_children(body)
    assert [c["name"] for c in childwait.pending_children(body)] == ["a"]
    assert not childwait.awaiting_children({"status": {"conditions": []}})
    entry = {"name": "a", "agent": "r", "phase": "Running"}
    asking = {
        "metadata": {"name": "a"},
        "status": {"phase": "Running", "conditions": [condition("AwaitingApproval")]},
    }
    assert childwait.refreshed(entry, asking) == {**entry, "awaitingApproval": True}
    done = {
        "metadata": {"name": "a"},
        "status": {
            "phase": "Succeeded",
            "reason": "Succeeded",
            "usage": {"inputTokens": 5, "outputTokens": 1},
        },
    }
    shown = childwait.refreshed({**entry, "awaitingApproval": True}, done)
    assert shown == {**entry, "phase": "Succeeded", "reason": "Succeeded", "tokens": 6}
    assert childwait.refreshed(entry, None) == {
        **entry,
        "phase": "Failed",
        "reason": "ChildVanished",
    }
    names = [f"c{i}" for i in range(7)]
    assert childwait.waiting_message(names).endswith("c0, c1, c2, c3, c4 and 2 more to end")
    resumed = childwait.resumed_fields([condition("AwaitingChildren")])["conditions"]
    assert [(c["type"], c["status"]) for c in resumed] == [("AwaitingChildren", "False")]


def test_a_childs_event_wakes_only_its_waiting_parent() -> None:
    gate = childwait.ChildGate(client=None)  # type: ignore[arg-type]  # no reads here
    mine, other = asyncio.Event(), asyncio.Event()
    gate.waiting = {"u-1": mine, "u-2": other}
    gate.child_changed({"metadata": {"labels": {PARENT_UID_LABEL: "u-1"}}})
    gate.child_changed({"metadata": {"name": "no-labels"}})
    assert mine.is_set() and not other.is_set()


def test_has_children_reads_the_status_read_or_written() -> None:
    assert not childwait.has_children({"status": {}}, {"phase": "Succeeded"})
    assert childwait.has_children({"status": {"children": [{"name": "a"}]}})
    assert childwait.has_children({}, {"children": [{"name": "a"}]})


async def test_refused_delegations_are_counted_by_outcome() -> None:
    metrics = Metrics()
    listener = metrics.listener("team", "writer", "openai", "m")
    for reason in ("DelegationCycle: writer -> writer", "DelegationDepthExceeded: at 3"):
        record = ToolCallRecord(1, "ask", "denied", reason, call_id="c")
        await listener(ToolDecided(record, offered=True))
    await listener(ToolDecided(ToolCallRecord(1, "ask", "denied", "NotAllowed"), offered=True))
    text = generate_latest(metrics.registry).decode()
    for outcome in ("cycle", "depth"):
        assert f'ordo_delegations_total{{namespace="team",outcome="{outcome}"}} 1.0' in text
    assert text.count("ordo_delegations_total{") == 2


async def test_a_run_parked_for_children_sets_the_jobs_flag() -> None:
    job = Job()
    steps = iter([Parked(approvals=False, children=True)])

    async def attempt() -> Any:
        return next(steps, None) or Done()

    async def give_up(exc: Exception) -> None:
        raise AssertionError(exc)

    await attempts(job, attempt, give_up)
    assert (job.awaiting, job.children) == (False, True)
    job.notify(False, False, {"status": {"conditions": [condition("AwaitingChildren", "False")]}})
    assert not job.children


def test_the_depth_flag_takes_zero_or_more() -> None:
    assert non_negative("0") == 0 and non_negative("4") == 4
    for bad in ("-1", "two"):
        with pytest.raises(argparse.ArgumentTypeError):
            non_negative(bad)


def test_a_job_mode_run_is_parked_once_its_pod_ended_and_the_task_waits() -> None:
    waits = {"status": {"conditions": [condition("AwaitingChildren")]}}
    runs = {"status": {"conditions": []}}
    done, busy = {"status": {"succeeded": 1}}, {"status": {"active": 1}}
    assert supervisor.parked(waits, done)
    assert not supervisor.parked(waits, busy)  # the pod is still writing or exiting
    assert not supervisor.parked(runs, done)  # completed without waiting: a failure
    approvals = {"status": {"conditions": [condition("AwaitingApproval")]}}
    assert supervisor.parked(approvals, done)


def test_a_child_must_run_what_the_call_asks() -> None:
    request = ChildRequest("k", "researcher", {"q": "x"}, None, None)
    body = child_body(PARENT, Lineage("report", ("writer",)), request)
    assert asked_for(body, request)
    assert not asked_for({**body, "spec": {**body["spec"], "agentRef": "other"}}, request)
    assert not asked_for({**body, "spec": {**body["spec"], "input": "else"}}, request)


def test_a_parked_run_names_the_children_it_waits_for() -> None:
    state = RunState()
    state.children = {
        "c1": ChildRecord("c1", "report-a", "researcher", "ask", 1, None, "Running"),
        "c2": ChildRecord("c2", "report-b", "researcher", "ask", 1, None, "Succeeded"),
    }
    assert runner_mod.waiting_children(state) == ["report-a"]
    conditions = runner_mod.children_condition(state, [condition("Ready")])["conditions"]
    assert sorted(c["type"] for c in conditions) == ["AwaitingChildren", "Ready"]
    (waiting,) = [c for c in conditions if c["type"] == "AwaitingChildren"]
    assert waiting["status"] == "True"
    assert "report-a" in waiting["message"] and "report-b" not in waiting["message"]
    state.children["c1"] = ChildRecord("c1", "report-a", "researcher", "ask", 1, None, "Failed")
    assert runner_mod.children_condition(state, None) == {}
