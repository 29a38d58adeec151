"""Approvals bound to the call and the person (issue 26 §5): an Approve counts only for the
argument digest it names; `requiredApprovals` distinct approvers, one person counting once;
any Reject wins; the Task's requester excluded where the Tool says so (and every Approve
refused when the Task does not record its requester); the approvers in the decision record;
the ToolApprovals' `Accepted` reasons for each; the ToolApproval schema rule."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from ordo.api import ToolApproval
from ordo.engine import approvals as engine
from ordo.engine.approvals import ApprovalDecision, ApprovalRule, PendingApproval
from ordo.engine.governance import Governance
from ordo.engine.loop import run_agent
from ordo.engine.state import RunState
from ordo.operator.tasks.approvals import (
    acceptance,
    decider,
    decisions_for,
    pending_of,
    ready,
    rfc3339,
)
from ordo.operator.tasks.taskstatus import awaiting_approval
from ordo.runtime.status import progress
from support.engine_fakes import ScriptedModel, answer, call, run_config, toolbox, tools_turn

BORN = 1_800_000_000.0
ARGS = {"target": "prod", "replicas": 3}
DIGEST = engine.args_digest(ARGS)
OTHER = engine.args_digest({"target": "prod", "replicas": 30})
ALICE, BOB = "alice@example.com", "system:serviceaccount:team:bob"


def pending(n: int = 1, excluded: bool = False) -> PendingApproval:
    return PendingApproval("c1", "deploy", 1, BORN, BORN + 600, "Tool deploy", n, excluded)


def approve(by: str, approver: str = "", at: float = BORN + 1) -> ApprovalDecision:
    return ApprovalDecision("Approve", by, at, approver)


# -- the engine: distinct approvers, reject wins ---------------------------------------------


def test_n_distinct_approvers_are_needed() -> None:
    p = pending(2)
    assert engine.settle(p, [approve("a1", ALICE)], BORN + 2) == ("waiting", "")
    both = [approve("a1", ALICE), approve("b1", BOB)]
    assert engine.settle(p, both, BORN + 2) == ("approved", "a1, b1")
    assert engine.approvers(p, both) == (ALICE, BOB)


def test_one_person_counts_once() -> None:
    twice = [approve("a1", ALICE), approve("a2", ALICE)]
    assert engine.settle(pending(2), twice, BORN + 2) == ("waiting", "")
    # Where one approval is enough, the first counts and names the person once.
    assert engine.settle(pending(1), twice, BORN + 2) == ("approved", "a1")
    assert engine.approvers(pending(1), twice) == (ALICE,)


def test_an_approver_nobody_names_does_not_count_towards_several() -> None:
    anonymous = [approve("x1"), approve("x2"), approve("a1", ALICE)]
    assert engine.settle(pending(2), anonymous, BORN + 2)[0] == "waiting"
    assert engine.settle(pending(1), anonymous[:1], BORN + 2) == ("approved", "x1")
    assert engine.approvers(pending(1), anonymous[:1]) == ()


def test_a_reject_wins_over_enough_approvers() -> None:
    decisions = [approve("a1", ALICE), approve("b1", BOB), ApprovalDecision("Reject", "r", BORN)]
    assert engine.settle(pending(2), decisions, BORN + 2) == ("rejected", "r")


def test_a_sole_decision_settles_whatever_is_required() -> None:
    local = ApprovalDecision("Approve", "ordo run (terminal)", sole=True)
    assert engine.settle(pending(3, True), [local], BORN + 2)[0] == "approved"


def test_the_strictest_requirement_wins_when_merged() -> None:
    tool = {"deploy": ApprovalRule("Tool deploy", 600.0, 2, False)}
    policy = {"deploy": ApprovalRule("AgentPolicy p", 60.0, 1, True)}
    merged = engine.merged(tool, policy)["deploy"]
    assert merged == ApprovalRule("Tool deploy", 60.0, 2, True)


def test_the_rule_travels_through_the_checkpoint_and_the_status() -> None:
    state = RunState(step=1)
    state.approvals["c1"] = pending(2, True)
    assert RunState.from_dict(state.to_dict()).approvals == state.approvals
    body = {"status": awaiting_approval(state, None)}
    (entry,) = body["status"]["pendingApprovals"]
    assert (entry["requiredApprovals"], entry["requesterExcluded"]) == (2, True)
    (back,) = pending_of(body)
    assert (back.approvals, back.requester_excluded) == (2, True)


# -- the operator: which ToolApprovals count ---------------------------------------------------


def task(*, n: int = 1, excluded: bool = False, requester: str | None = ALICE) -> dict[str, Any]:
    state = RunState(step=1)
    state.approvals["c1"] = PendingApproval("c1", "deploy", 1, BORN, BORN + 600, "", n, excluded)
    meta: dict[str, Any] = {"name": "t", "namespace": "ns", "uid": "u1"}
    meta["creationTimestamp"] = rfc3339(BORN)
    if requester is not None:
        meta["annotations"] = {"ordo.dev/requested-by": requester}
    return {"metadata": meta, "status": {"phase": "Running", **awaiting_approval(state, None)}}


def tool_approval(
    name: str, by: str, decision: str = "Approve", digest: str = DIGEST, at: float = BORN + 5
) -> dict[str, Any]:
    return {
        "apiVersion": "ordo.dev/v1alpha1",
        "kind": "ToolApproval",
        "metadata": {"name": name, "namespace": "ns", "creationTimestamp": rfc3339(at)},
        "spec": {
            "taskRef": "t",
            "callId": "c1",
            "decision": decision,
            "argsDigest": digest,
            "approvedBy": by,
        },
    }


def test_an_approval_of_other_arguments_does_not_count_and_says_why() -> None:
    body, stale = task(), tool_approval("a1", BOB, digest=OTHER)
    assert decisions_for([stale], body, "c1", digest=DIGEST) == []
    assert ready(body, [stale], BORN + 10, {"c1": DIGEST}) == (False, BORN + 600)
    status, reason, _ = acceptance(stale, body, {"c1": DIGEST}, [stale])
    assert (status, reason) == ("False", "DigestMismatch")
    # The digest of the right arguments settles the call.
    good = tool_approval("a2", BOB)
    assert ready(body, [stale, good], BORN + 10, {"c1": DIGEST}) == (True, None)
    assert acceptance(good, body, {"c1": DIGEST}, [stale, good])[:2] == ("True", "Pending")


def test_unknown_digests_leave_it_to_the_run() -> None:
    # The published calls unreadable: the gate resumes, the run checks its own arguments.
    body, stale = task(), tool_approval("a1", BOB, digest=OTHER)
    assert ready(body, [stale], BORN + 10, None) == (True, None)


def test_a_reject_of_any_digest_rejects() -> None:
    body, reject = task(), tool_approval("r1", BOB, "Reject", digest=OTHER)
    assert decisions_for([reject], body, "c1", digest=DIGEST)[0].verdict == "Reject"
    assert ready(body, [reject], BORN + 10, {"c1": DIGEST}) == (True, None)


def test_four_eyes_a_duplicate_approver_is_refused_and_counted_once() -> None:
    body = task(n=2)
    first, again = tool_approval("a1", BOB, at=BORN + 5), tool_approval("a2", BOB, at=BORN + 6)
    found = [first, again]
    assert ready(body, found, BORN + 10, {"c1": DIGEST})[0] is False
    status, reason, message = acceptance(first, body, {"c1": DIGEST}, found)
    assert (status, reason) == ("True", "Pending") and "1 of 2" in message
    assert acceptance(again, body, {"c1": DIGEST}, found)[:2] == ("False", "DuplicateApprover")
    other = tool_approval("c1", "carol", at=BORN + 7)
    assert ready(body, [*found, other], BORN + 10, {"c1": DIGEST}) == (True, None)


def test_the_requester_is_excluded_where_the_tool_says_so() -> None:
    mine = tool_approval("a1", ALICE)
    assert ready(task(excluded=True), [mine], BORN + 10, {"c1": DIGEST})[0] is False
    refused = acceptance(mine, task(excluded=True), {"c1": DIGEST}, [mine])
    assert refused[:2] == ("False", "RequesterExcluded")
    assert ready(task(excluded=False), [mine], BORN + 10, {"c1": DIGEST})[0] is True
    theirs = tool_approval("b1", BOB)
    assert ready(task(excluded=True), [mine, theirs], BORN + 10, {"c1": DIGEST})[0] is True


def test_a_task_without_a_recorded_requester_has_no_approver_where_one_is_excluded() -> None:
    body, theirs = task(excluded=True, requester=None), tool_approval("b1", BOB)
    assert ready(body, [theirs], BORN + 10, {"c1": DIGEST})[0] is False
    status, reason, message = acceptance(theirs, body, {"c1": DIGEST}, [theirs])
    assert (status, reason) == ("False", "RequesterExcluded") and "lacks" in message


def test_applied_names_every_approval_that_counted() -> None:
    body = task(n=2)
    body["status"]["toolCalls"] = [
        {"callId": "c1", "tool": "deploy", "decision": "allowed", "reason": "Approved: a1, b1"}
    ]
    for name in ("a1", "b1"):
        assert acceptance(tool_approval(name, name), body)[:2] == ("True", "Applied")
    assert acceptance(tool_approval("a", "a"), body)[:2] == ("False", "CallSettled")


# -- the run: bound to the arguments in its own state, approvers recorded --------------------


class Store:
    def __init__(self, *objects: dict[str, Any]) -> None:
        self.objects = list(objects)

    async def list(self, kind: str, namespace: str) -> list[dict[str, Any]]:
        return self.objects if kind == "ToolApproval" else []


async def run_gated(found: list[dict[str, Any]], *, n: int = 1) -> Any:
    gov = Governance(
        candidate_tools=frozenset({"deploy"}),
        approvals={"deploy": ApprovalRule("Tool deploy", 600.0, n)},
    )
    box = toolbox("deploy")
    first = await run_agent(
        run_config(gov, clock=lambda: BORN + 1),
        ScriptedModel([tools_turn(call("deploy", "c1", **ARGS))]),
        box.bindings,
    )
    body = task(n=n)
    config = run_config(gov, clock=lambda: BORN + 10, approval_decider=decider(Store(*found), body))
    restored = RunState.from_dict(first.state.to_dict())
    result = await run_agent(config, ScriptedModel([answer("ok")]), box.bindings, state=restored)
    return result, box


async def test_the_run_refuses_an_approval_of_other_arguments_and_keeps_waiting() -> None:
    result, box = await run_gated([tool_approval("a1", BOB, digest=OTHER)])
    assert result.phase == "AwaitingApproval" and box.calls("deploy") == 0


async def test_the_run_records_who_approved() -> None:
    found = [tool_approval("a1", BOB), tool_approval("c1", "carol")]
    result, box = await run_gated(found, n=2)
    assert (result.phase, box.calls("deploy")) == ("Succeeded", 1)
    record = next(r for r in result.tool_calls if r.call_id == "c1")
    assert (record.reason, record.approved_by) == ("Approved: a1, c1", (BOB, "carol"))
    (shown,) = [r for r in progress(result.state).tool_calls or [] if r.call_id == "c1"]
    assert shown.approved_by == (BOB, "carol")


# -- the ToolApproval schema -----------------------------------------------------------------


def body(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "ordo.dev/v1alpha1",
        "kind": "ToolApproval",
        "metadata": {"name": "x", "namespace": "ns"},
        "spec": {"taskRef": "t", "callId": "c1", **spec},
    }


@pytest.mark.parametrize(
    "spec",
    [
        {"decision": "Approve"},
        {"decision": "Approve", "argsDigest": DIGEST},
        {"decision": "Approve", "approvedBy": ALICE},
        {"decision": "Approve", "argsDigest": "sha256:XYZ", "approvedBy": ALICE},
    ],
)
def test_an_approve_needs_a_digest_and_an_approver(spec: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        ToolApproval.model_validate(body(**spec))


def test_a_reject_needs_neither() -> None:
    assert ToolApproval.model_validate(body(decision="Reject")).spec.args_digest is None
    ok = ToolApproval.model_validate(body(decision="Approve", argsDigest=DIGEST, approvedBy=BOB))
    assert ok.spec.approved_by == BOB
