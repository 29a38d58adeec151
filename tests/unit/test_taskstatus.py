"""operator/tasks/taskstatus.py, the one writer of Task status: each builder sends exactly
what the hand-built dicts it replaced sent (the references below are those dicts as they were
at b775482, conditions included), for representative Tasks: new, resumed, with and without a
generation, with conditions whose status changes and ones whose status stays (its
lastTransitionTime is kept); and the writes go out as the same requests."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from ordo.engine.approvals import PendingApproval, awaiting_message
from ordo.engine.state import RunState, ToolCallRecord
from ordo.engine.transcript import Usage
from ordo.operator.tasks import conditions, taskstatus
from ordo.runtime import TaskOutcome
from ordo.runtime import status as status_mod
from ordo.timestamps import format_seconds

NOW = "2026-01-02T03:04:05Z"
EARLIER = "2025-12-31T23:59:59Z"


@pytest.fixture(autouse=True)
def frozen_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(conditions, "now", lambda: NOW)
    monkeypatch.setattr(taskstatus, "now", lambda: NOW)


# -- the hand-built dicts as they were (references) -------------------------------------------


def old_set_condition(cs: Any, type_: str, status: str, *why: str) -> list[dict[str, Any]]:
    """set_condition as it was, without a generation (no Task condition carries one)."""
    reason, message = why
    kept = {c["type"]: dict(c) for c in cs or []}
    before = kept.pop(type_, None)
    changed = before is None or before.get("status") != status
    stamp = NOW if changed else before.get("lastTransitionTime", NOW)  # type: ignore[union-attr]
    new = {"type": type_, "status": status, "reason": reason, "message": message[:1024]}
    new["lastTransitionTime"] = stamp
    return sorted([*kept.values(), new], key=lambda c: c["type"])


def old_claim_patch(
    body: dict[str, Any], execution_id: str, resuming: bool, mode: str | None
) -> dict[str, Any]:
    meta, status = body["metadata"], body.get("status") or {}
    cs = status.get("conditions")
    for type_, status_, reason, message in [
        ("Scheduled", "True", "Claimed", f"execution {execution_id} claimed the Task"),
        ("Running", "True", "Resumed" if resuming else "Started", f"execution {execution_id}"),
        ("Ready", "False", "Running", "the run has not finished yet"),
    ]:
        cs = old_set_condition(cs, type_, status_, reason, message)
    fields: dict[str, Any] = {
        "phase": "Running",
        "executionId": execution_id,
        "startedAt": status.get("startedAt") or NOW,
        "observedGeneration": meta.get("generation"),
        "conditions": cs,
        "step": status.get("step", 0),
    }
    if mode is not None:
        fields["executionMode"] = mode
    return {"metadata": {"resourceVersion": meta["resourceVersion"]}, "status": fields}


def old_terminal_conditions(
    cs: list[dict[str, Any]] | None, phase: str, reason: str, message: str
) -> list[dict[str, Any]]:
    ok = "True" if phase == "Succeeded" else "False"
    sets = [("Running", "False", "the run ended"), ("Succeeded", ok, message)]
    sets += [("Ready", ok, message), ("Complete" if ok == "True" else "Failed", "True", message)]
    sets += [] if ok == "True" else [("Stalled", "True", message)]
    for type_, status, text in sets:
        cs = old_set_condition(cs, type_, status, reason, text)
    return cs or []


def old_terminal(body: dict[str, Any], outcome: TaskOutcome) -> dict[str, Any]:
    meta = body["metadata"]
    current = body.get("status") or {}
    status = outcome.status()
    fields = status_mod.to_patch(status)
    if outcome.known_state is None:
        for key in ("step", "usage"):
            if key in current:
                fields.pop(key, None)
    fields["completedAt"] = NOW
    fields["conditions"] = old_terminal_conditions(
        current.get("conditions"), outcome.phase, outcome.reason, status.message or ""
    )
    if meta.get("generation") is not None:
        fields["observedGeneration"] = meta["generation"]
    if "startedAt" not in current:
        fields["startedAt"] = fields["completedAt"]
    return status_mod.bounded(fields)


def same(new: Any, old: Any) -> None:
    """Equal values and, sorted, equal bytes (the API server stores an object's keys sorted,
    so what lands is byte-identical; the order a model dumps its fields in may differ)."""
    assert new == old
    assert json.dumps(new, sort_keys=True) == json.dumps(old, sort_keys=True)


# -- representative Tasks ----------------------------------------------------------------


def body(status: dict[str, Any] | None = None, generation: int | None = 1) -> dict[str, Any]:
    meta: dict[str, Any] = {"namespace": "ns", "name": "t", "resourceVersion": "42", "uid": "u"}
    if generation is not None:
        meta["generation"] = generation
    return {"metadata": meta, "spec": {"agentRef": "a"}, **({"status": status} if status else {})}


CLAIMED_BEFORE: dict[str, Any] = {
    "phase": "Running",
    "executionId": "old",
    "startedAt": EARLIER,
    "step": 3,
    "conditions": [
        {"type": "Scheduled", "status": "True", "reason": "Claimed", "message": "m",
         "lastTransitionTime": EARLIER},
        {"type": "Running", "status": "False", "reason": "X", "message": "m",
         "lastTransitionTime": EARLIER},
        {"type": "Ready", "status": "False", "reason": "WaitingForCapacity", "message": "m",
         "lastTransitionTime": EARLIER, "observedGeneration": 1},
    ],
}  # fmt: skip
BODIES = [
    body(),
    body(generation=None),
    body({"phase": "Pending", "conditions": CLAIMED_BEFORE["conditions"][2:]}),
    body(CLAIMED_BEFORE, generation=7),
]


def claim_patch(task: dict[str, Any], *args: Any) -> dict[str, Any]:
    """The claim as `Claimer.claim` sends it: conditional on the Task's resourceVersion."""
    return {
        "metadata": {"resourceVersion": task["metadata"]["resourceVersion"]},
        "status": taskstatus.claimed(task, *args),
    }


@pytest.mark.parametrize("task", BODIES)
@pytest.mark.parametrize("resuming", [False, True])
@pytest.mark.parametrize("mode", [None, "InProcess", "Job"])
def test_the_claim_is_the_hand_built_claim(task: dict[str, Any], resuming: bool, mode: Any) -> None:
    same(
        claim_patch(task, "e1", resuming, mode),
        old_claim_patch(task, "e1", resuming, mode),
    )
    lease = taskstatus.lease("holder-1", 30)
    with_lease = old_claim_patch(task, "e1", resuming, mode)
    with_lease["status"]["lease"] = lease
    same(claim_patch(task, "e1", resuming, mode, lease), with_lease)


def test_a_claim_keeps_the_transition_time_of_an_unchanged_condition() -> None:
    fields = taskstatus.claimed(body(CLAIMED_BEFORE), "e1", True)
    by_type = {c["type"]: c for c in fields["conditions"]}
    assert by_type["Scheduled"]["lastTransitionTime"] == EARLIER  # True before and after
    assert by_type["Running"]["lastTransitionTime"] == NOW  # False -> True
    assert by_type["Ready"]["reason"] == "Running" and "observedGeneration" not in by_type["Ready"]


@pytest.mark.parametrize("task", BODIES)
def test_the_waits_before_a_claim_are_the_hand_built_ones(task: dict[str, Any]) -> None:
    cs = (task.get("status") or {}).get("conditions")
    message = f"{4} Task(s) are running, the limit of this operator (--max-concurrent-tasks {4})"
    same(
        taskstatus.waiting_for_capacity(task, 4),
        {"phase": "Pending", "conditions": old_set_condition(cs, "Scheduled", "False", "WaitingForCapacity", message)},
    )  # fmt: skip
    missing = "Agent 'a' not found; waiting up to 30s from creation for it to appear" + "x" * 2000
    same(
        taskstatus.waiting_for_references(task, missing),
        {"phase": "Pending", "conditions": old_set_condition(cs, "Ready", "False", "WaitingForReferences", missing)},
    )  # fmt: skip


def test_the_execution_mode_is_the_hand_built_field() -> None:
    same(taskstatus.execution_mode("Job"), {"executionMode": "Job"})


def state() -> RunState:
    records = [
        ToolCallRecord(step=i // 2 + 1, tool=f"tool{i}", decision="allowed", reason="",
                       outcome="succeeded", call_id=f"call_{i}")
        for i in range(6)
    ]  # fmt: skip
    s = RunState(step=3, usage=Usage(300, 120), records=records)
    s.approvals["c1"] = PendingApproval("c1", "deploy", 0, 1_800_000_000.7, math.inf)
    s.approvals["c2"] = PendingApproval("c2", "ship", 2, 1_800_000_001.0, 1_800_000_600.2)
    return s


@pytest.mark.parametrize("task", BODIES)
def test_awaiting_and_resumed_are_the_hand_built_fields(task: dict[str, Any]) -> None:
    s = state()
    cs = (task.get("status") or {}).get("conditions")
    pending = [
        {"callId": "c1", "tool": "deploy", "step": 1, "requestedAt": format_seconds(1_800_000_000.7)},
        {"callId": "c2", "tool": "ship", "step": 2, "requestedAt": format_seconds(1_800_000_001.0),
         "deadline": format_seconds(1_800_000_601)},
    ]  # fmt: skip
    waiting = old_set_condition(
        cs, "AwaitingApproval", "True", "AwaitingApproval", awaiting_message(s)
    )
    old = {**status_mod.to_patch(status_mod.progress(s)), "pendingApprovals": pending, "conditions": waiting}  # fmt: skip
    same(taskstatus.awaiting_approval(s, cs), old)
    decided = "the waiting tool calls were decided"
    same(
        taskstatus.resumed(waiting),
        {"pendingApprovals": [], "conditions": old_set_condition(waiting, "AwaitingApproval", "False", "Resumed", decided)},
    )  # fmt: skip


def test_progress_is_the_hand_built_patch() -> None:
    s = state()
    old = status_mod.bounded(status_mod.to_patch(status_mod.progress(s)))
    same(taskstatus.progress(s), old)
    same(taskstatus.progress(s, "hash", 4), {**old, "snapshotHash": "hash", "agentGeneration": 4})
    same(taskstatus.progress(s, "hash", None), {**old, "snapshotHash": "hash"})


def outcomes() -> list[TaskOutcome]:
    from ordo.engine.state import RunResult

    s = state()
    ok = RunResult("Succeeded", "Succeeded", "answered", "the answer", {"a": 1}, s)
    return [
        TaskOutcome("Succeeded", "Succeeded", "answered", ok),
        TaskOutcome("Failed", "MaxStepsExceeded", "too many", RunResult("Failed", "MaxStepsExceeded", "too many", "partial", None, s)),
        TaskOutcome("Failed", "AgentNotFound", "Agent 'a' not found"),  # no run state
        TaskOutcome("Cancelled", "Cancelled", "cancelled"),
    ]  # fmt: skip


@pytest.mark.parametrize("task", BODIES)
@pytest.mark.parametrize("outcome", outcomes(), ids=lambda o: o.reason)
def test_the_terminal_status_is_the_hand_built_one(
    task: dict[str, Any], outcome: TaskOutcome
) -> None:
    same(taskstatus.terminal(task, outcome), old_terminal(task, outcome))
    full = taskstatus.terminal(task, outcome)
    reduced = status_mod.reduced(full)
    cs = (task.get("status") or {}).get("conditions")
    reduced["conditions"] = old_terminal_conditions(
        cs, outcome.phase, outcome.reason, reduced["message"]
    )
    same(taskstatus.reduced_terminal(task, outcome, full), reduced)


def test_an_outcome_without_run_state_keeps_the_progress_the_task_shows() -> None:
    fields = taskstatus.terminal(body(CLAIMED_BEFORE), TaskOutcome("Failed", "InternalError", "x"))
    assert "step" not in fields  # the Task shows step 3; it has no usage, so zeros are sent
    assert fields["usage"] == {"inputTokens": 0, "outputTokens": 0, "totalTokens": 0}
    assert "startedAt" not in fields and fields["completedAt"] == NOW
    fresh = taskstatus.terminal(body(), TaskOutcome("Failed", "InternalError", "x"))
    assert fresh["step"] == 0 and fresh["startedAt"] == NOW and fresh["observedGeneration"] == 1


def test_the_lease_ops_are_the_hand_built_ones() -> None:
    lease = taskstatus.lease("pod-1", 30)
    assert set(lease) == {"holder", "renewTime", "durationSeconds", "holderLease"}
    assert lease["holder"] == "pod-1" and lease["holderLease"] is None  # a merge drops it
    assert (
        len(lease["renewTime"]) == len("2026-01-02T03:04:05.123456Z")
        and lease["durationSeconds"] == 30
    )
    tests = [
        {"op": "test", "path": "/status/executionId", "value": "e1"},
        {"op": "test", "path": "/status/lease/holder", "value": "pod-1"},
    ]
    assert taskstatus.lease_renewal("e1", "pod-1", lease) == [
        *tests,
        {"op": "add", "path": "/status/lease/renewTime", "value": lease["renewTime"]},
        {"op": "add", "path": "/status/lease/durationSeconds", "value": 30},
    ]
    assert taskstatus.lease_release("e1", "pod-1") == [
        *tests,
        {"op": "add", "path": "/status/lease/durationSeconds", "value": 0},
    ]


class Recording:
    """A KubeClient that records the requests the writes send."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    async def patch(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("patch", args, kwargs))
        return {}

    async def patch_json(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("patch_json", args, kwargs))
        return {}

    async def patch_status_fenced(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("fenced", args, kwargs))
        return {}


async def test_the_writes_send_the_requests_the_call_sites_sent() -> None:
    client: Any = Recording()
    fields = {"phase": "Pending"}
    await taskstatus.merge(client, "ns", "t", fields)
    await taskstatus.merge(client, "ns", "t", fields, resource_version="42")
    await taskstatus.fenced(client, "ns", "t", "e1", fields)
    await taskstatus.apply(client, "ns", "t", taskstatus.lease_release("e1", "h"))
    assert client.calls == [
        ("patch", ("Task", "ns", "t", {"status": fields}), {"status": True}),
        ("patch", ("Task", "ns", "t", {"metadata": {"resourceVersion": "42"}, "status": fields}), {"status": True}),
        ("fenced", ("Task", "ns", "t", "e1", fields), {}),
        ("patch_json", ("Task", "ns", "t", taskstatus.lease_release("e1", "h")), {"status": True, "idempotent": True}),
    ]  # fmt: skip


def test_a_condition_message_json_cannot_carry_is_written_as_the_api_server_stores_it() -> None:
    # A lone surrogate (from a name or an error text) is not valid UTF-8: the dict written
    # before went out escaped and the API server's decoder stored U+FFFD; so does the model.
    (cond,) = conditions.set_condition(None, "Ready", "False", "R", "Agent 'a\udc80' not found")
    assert cond["message"] == "Agent 'a\ufffd' not found" and cond["reason"] == "R"
    with pytest.raises(ValueError):
        conditions.set_condition(None, "Ready", "Maybe", "R", "a status metav1 does not have")
