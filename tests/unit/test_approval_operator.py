"""Human approval of tool calls (issue 16 §3), operator side: the pure functions of
operator/tasks/approvals.py that decide which ToolApprovals count for a waiting call (`decisions_for`),
whether a Task may resume (`ready`) and what each ToolApproval's `Accepted` condition says
(`acceptance`). Hostile inputs first: unknown calls, finished Tasks, settled calls, approvals
older than the Task or later than the deadline, duplicates, reject/approve in either order,
missing or odd status, a clock exactly at the deadline, clocks that disagree."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest

from ordo.engine import approvals as engine
from ordo.engine.approvals import PendingApproval
from ordo.engine.state import RunState
from ordo.operator.tasks import taskstatus
from ordo.operator.tasks.approvals import (
    ApprovalGate,
    acceptance,
    awaiting,
    decisions_for,
    epoch,
    pending_of,
    ready,
    rfc3339,
)
from ordo.operator.telemetry.metrics import Metrics

BORN = 1_800_000_000.0
"""The Task's creationTimestamp (whole seconds, as the API server writes it)."""
DEADLINE = BORN + 600
ARGS = {"target": "prod"}
DIGEST = engine.args_digest(ARGS)


def ts(at: float) -> str:
    return rfc3339(at)


def task(
    *,
    pending: list[dict[str, Any]] | None = None,
    records: list[dict[str, Any]] | None = None,
    phase: str = "Running",
    status: Any = "default",
    name: str = "t",
) -> dict[str, Any]:
    """A Task that waits for `pending` (default: call c1 of tool deploy until DEADLINE)."""
    if pending is None:
        pending = [{"callId": "c1", "tool": "deploy", "step": 1, "deadline": ts(DEADLINE)}]
    if status == "default":
        status = {
            "phase": phase,
            "pendingApprovals": pending,
            "toolCalls": records or [],
            "conditions": [{"type": "AwaitingApproval", "status": "True" if pending else "False"}],
        }
    return {
        "metadata": {"name": name, "namespace": "ns", "creationTimestamp": ts(BORN)},
        "status": status,
    }


def approval(
    name: str,
    decision: str = "Approve",
    *,
    at: float | None = BORN + 10,
    call: str = "c1",
    by: str | None = None,
    digest: str = DIGEST,
) -> dict[str, Any]:
    """A ToolApproval of the call's arguments (`ARGS`), approved by `by` (default: a person
    named as the object)."""
    meta: dict[str, Any] = {"name": name, "namespace": "ns"}
    if at is not None:
        meta["creationTimestamp"] = ts(at)
    spec = {"taskRef": "t", "callId": call, "decision": decision, "reason": "r"}
    spec.update(argsDigest=digest, approvedBy=by or f"user-{name}")
    return {
        "apiVersion": "ordo.dev/v1alpha1",
        "kind": "ToolApproval",
        "metadata": meta,
        "spec": spec,
    }


class OneTask:
    """The two reads the gate makes, of one Task and no ToolApprovals."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body

    async def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.body if kind == "Task" else None

    async def list(self, kind: str, namespace: str) -> list[dict[str, Any]]:
        return []


def settled(body: dict[str, Any], found: list[dict[str, Any]], now: float) -> str:
    """The engine's verdict on the Task's only waiting call, from what the gate sees."""
    (p,) = pending_of(body)
    return engine.settle(p, decisions_for(found, body, p.call_id), now)[0]


# -- decisions_for / ready ------------------------------------------------------------------


def test_an_approval_made_before_the_task_existed_does_not_count() -> None:
    leftover = approval("old", at=BORN - 1)  # a deleted Task of the same name had call c1 too
    assert decisions_for([leftover], task(), "c1") == []
    assert ready(task(), [leftover], BORN + 20) == (False, DEADLINE)
    assert acceptance(leftover, task())[:2] == ("False", "UnknownCall")


def test_an_approval_made_in_the_tasks_own_second_counts() -> None:
    assert settled(task(), [approval("a", at=BORN)], BORN + 1) == "approved"


def test_an_approval_of_another_call_or_task_does_not_count() -> None:
    other_call = approval("x", call="c2")
    other_task = approval("y")
    other_task["spec"]["taskRef"] = "t2"
    assert decisions_for([other_call, other_task], task(), "c1") == []
    assert ready(task(), [other_call, other_task], BORN + 20)[0] is False


def test_an_approval_without_a_creation_time_or_with_a_bad_spec_does_not_count() -> None:
    undated = approval("u", at=None)
    bad = approval("b", decision="Maybe")
    assert decisions_for([undated, bad], task(), "c1") == []
    assert ready(task(), [undated, bad], BORN + 20)[0] is False


def test_duplicate_approvals_settle_once_by_the_oldest() -> None:
    found = [approval("late", at=BORN + 30), approval("early", at=BORN + 20)]
    decisions = decisions_for(found, task(), "c1")
    assert [d.by for d in decisions] == ["early", "late"]
    (p,) = pending_of(task())
    assert engine.settle(p, decisions, BORN + 40) == ("approved", "early")


@pytest.mark.parametrize("order", [("Approve", "Reject"), ("Reject", "Approve")])
def test_a_rejection_wins_in_either_order(order: tuple[str, str]) -> None:
    first, second = order
    found = [approval("one", first, at=BORN + 10), approval("two", second, at=BORN + 20)]
    (p,) = pending_of(task())
    decided = engine.settle(p, decisions_for(found, task(), "c1"), BORN + 30)
    assert decided == ("rejected", "one" if first == "Reject" else "two")
    assert ready(task(), found, BORN + 30) == (True, None)


def test_an_approval_after_the_deadline_does_not_count() -> None:
    late = approval("late", at=DEADLINE + 1)
    assert settled(task(), [late], DEADLINE + 2) == "timedOut"
    assert ready(task(), [late], DEADLINE - 5) == (False, DEADLINE)


def test_exactly_at_the_deadline() -> None:
    # A decision made in the deadline's second counts; with none, the call times out then.
    assert settled(task(), [approval("a", at=DEADLINE)], DEADLINE) == "approved"
    assert settled(task(), [], DEADLINE) == "timedOut"
    assert ready(task(), [], DEADLINE) == (True, None)
    assert ready(task(), [], DEADLINE - 0.001) == (False, DEADLINE)


def test_clock_skew_between_the_operator_and_the_api_server() -> None:
    # Operator clock ahead: an approval the API server dated before the deadline still counts.
    assert settled(task(), [approval("a", at=DEADLINE - 1)], DEADLINE + 3600) == "approved"
    # Operator clock behind: one dated after the deadline never counts, and the gate wakes at
    # the deadline to time the call out instead of waiting for a decision forever.
    late = [approval("late", at=DEADLINE + 30)]
    assert ready(task(), late, DEADLINE - 10) == (False, DEADLINE)
    assert settled(task(), late, DEADLINE) == "timedOut"


def test_ready_waits_for_every_call_and_wakes_at_the_first_deadline() -> None:
    body = task(
        pending=[
            {"callId": "c1", "tool": "deploy", "step": 1, "deadline": ts(DEADLINE)},
            {"callId": "c2", "tool": "deploy", "step": 1, "deadline": ts(DEADLINE - 100)},
            {"callId": "c3", "tool": "deploy", "step": 1},  # no deadline: never times out
        ]
    )
    assert ready(body, [], BORN) == (False, DEADLINE - 100)
    assert ready(body, [approval("a")], DEADLINE - 50) == (False, None)  # c3 only left
    assert ready(body, [approval("a"), approval("b", call="c3")], DEADLINE - 50) == (True, None)


def test_the_status_deadline_never_times_a_call_out_before_the_engine_does() -> None:
    # The checkpoint holds the deadline to the microsecond; status holds whole seconds. If the
    # gate read the status deadline as earlier than the engine's, it would resume the Task in
    # that gap, the run would find the call still waiting and stop again, over and over.
    state = RunState()
    exact = BORN + 600.7
    state.approvals["c1"] = PendingApproval("c1", "deploy", 1, BORN + 0.7, exact, "Tool deploy")
    fields = taskstatus.pending_approvals(state, None)
    body = task(pending=fields["pendingApprovals"])
    for now in (BORN + 600.0, BORN + 600.5, exact - 1e-6):
        assert engine.settle(state.approvals["c1"], [], now)[0] == "waiting"
        assert ready(body, [], now)[0] is False, now
    assert ready(body, [], BORN + 601)[0] is True


def test_awaiting_and_resumed_fields_name_calls_not_arguments() -> None:
    state = RunState()
    state.approvals["c1"] = PendingApproval("c1", "deploy", 0, BORN, math.inf)
    fields = taskstatus.pending_approvals(state, None)
    (entry,) = fields["pendingApprovals"]
    assert entry == {"callId": "c1", "tool": "deploy", "step": 1, "requestedAt": ts(BORN)}
    body = {"status": fields}
    assert awaiting(body) and [p.deadline for p in pending_of(body)] == [math.inf]
    resumed = {"status": taskstatus.resumed(fields["conditions"])}
    assert not awaiting(resumed) and pending_of(resumed) == []


# -- missing or odd status ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "status",
    [
        None,
        {},
        {"conditions": []},
        {"conditions": [{"type": "AwaitingApproval"}]},
        {"conditions": [{"type": "AwaitingApproval", "status": "False"}], "pendingApprovals": []},
    ],
)
def test_a_task_without_an_awaiting_status_waits_for_nothing(status: Any) -> None:
    body = task(status=status)
    assert not awaiting(body) and pending_of(body) == []
    assert ready(body, [approval("a")], BORN) == (True, None)
    assert acceptance(approval("a"), body)[:2] == ("False", "UnknownCall")


def test_odd_pending_entries_are_read_without_failing() -> None:
    body = task(
        pending=[
            {"callId": "c2"},
            {"callId": "c3", "step": None, "requestedAt": "", "deadline": None},
        ]
    )
    got = pending_of(body)
    assert [(p.call_id, p.step, p.deadline) for p in got] == [
        ("c2", 1, math.inf),
        ("c3", 1, math.inf),
    ]
    assert ready(body, [], BORN) == (False, None)


@pytest.mark.parametrize(
    "deadline",
    ["not a time", "2030-01-15T08:00:00", "2030-01-15 08:00:00Z", "", 1_800_000_600, True, {}],
)
def test_a_status_deadline_that_does_not_parse_resumes_the_run(deadline: Any) -> None:
    """Only the checkpoint knows the deadline then: the gate lets the Task resume at once, and
    the run settles the call against the checkpoint's deadline (or stops again and writes a
    readable one). Read as "never", the Task would wait forever."""
    body = task(
        pending=[
            {"callId": "c1", "tool": "deploy", "step": 1, "deadline": deadline},
            {"callId": "c2", "tool": "deploy", "step": 1, "deadline": ts(DEADLINE)},
        ]
    )
    assert ready(body, [], BORN + 20) == (True, None)
    # The call still waits as far as a ToolApproval can tell: one made now counts.
    assert acceptance(approval("a"), body)[:2] == ("True", "Pending")


async def test_the_gate_does_not_wait_forever_on_a_deadline_that_does_not_parse() -> None:
    body = task(pending=[{"callId": "c1", "tool": "deploy", "step": 1, "deadline": "garbage"}])
    gate = ApprovalGate(OneTask(body), None, Metrics())
    wake, cancel = asyncio.Event(), asyncio.Event()
    await asyncio.wait_for(gate.wait("ns", "t", wake, cancel), 5)  # returns at once
    assert gate.waiting == {}


def test_a_task_without_a_creation_time_accepts_any_dated_approval() -> None:
    body = task()
    del body["metadata"]["creationTimestamp"]
    assert settled(body, [approval("a", at=BORN - 100)], BORN) == "approved"


@pytest.mark.parametrize("value", [None, "", 5, "yesterday", "2026-13-40T00:00:00Z"])
def test_epoch_of_garbage_is_none(value: Any) -> None:
    assert epoch(value) is None


def test_epoch_reads_what_rfc3339_writes() -> None:
    assert epoch(ts(BORN)) == BORN
    assert epoch("2027-01-15T08:00:00+00:00") == epoch("2027-01-15T08:00:00Z")


# -- acceptance --------------------------------------------------------------------------------


def test_no_task() -> None:
    assert acceptance(approval("a"), None)[:2] == ("False", "TaskNotFound")


def test_an_unknown_call() -> None:
    status, reason, message = acceptance(approval("a", call="c404"), task())
    assert (status, reason) == ("False", "UnknownCall") and "c404" in message


def test_a_finished_task() -> None:
    body = task(pending=[], phase="Succeeded")
    assert acceptance(approval("a"), body)[:2] == ("False", "TaskFinished")


def test_a_waiting_call() -> None:
    assert acceptance(approval("a"), task())[:2] == ("True", "Pending")


def test_an_approval_made_after_the_deadline_is_not_pending() -> None:
    # The Task still shows the call (the gate resumes it a moment later), but this decision
    # will never count: saying `Pending` would tell the approver the opposite.
    late = approval("late", at=DEADLINE + 1)
    assert settled(task(), [late], DEADLINE + 1) == "timedOut"
    assert acceptance(late, task())[:2] == ("False", "CallSettled")
    assert acceptance(approval("ok", at=DEADLINE), task())[:2] == ("True", "Pending")


@pytest.mark.parametrize("body", [approval("u", at=None), approval("b", decision="Maybe")])
def test_an_approval_that_cannot_count_is_not_pending(body: dict[str, Any]) -> None:
    assert decisions_for([body], task(), "c1") == []
    assert acceptance(body, task())[0] == "False"


def test_applied_and_settled_after_the_resume() -> None:
    records = [{"callId": "c1", "tool": "deploy", "reason": "ApprovalRejected: two"}]
    body = task(pending=[], records=records, phase="Failed")
    assert acceptance(approval("two", "Reject"), body)[:2] == ("True", "Applied")
    assert acceptance(approval("one"), body)[:2] == ("False", "CallSettled")
    # a name that merely ends like the decider's is not it
    assert acceptance(approval("wo", "Reject"), body)[:2] == ("False", "CallSettled")


def test_a_timed_out_call_is_settled() -> None:
    records = [{"callId": "c1", "tool": "deploy", "reason": "ApprovalTimedOut"}]
    body = task(pending=[], records=records)
    assert acceptance(approval("a"), body)[:2] == ("False", "CallSettled")


def test_a_call_run_without_needing_approval_is_unknown() -> None:
    records = [{"callId": "c1", "tool": "deploy", "reason": ""}]
    body = task(pending=[], records=records)
    assert acceptance(approval("a"), body)[:2] == ("False", "UnknownCall")


def test_the_reason_is_never_in_the_condition() -> None:
    canary = "approval-reason-canary-7f3e"
    bodies = [task(), task(pending=[], phase="Failed"), None]
    for body in bodies:
        a = approval("a")
        a["spec"]["reason"] = canary
        assert canary not in repr(acceptance(a, body))
