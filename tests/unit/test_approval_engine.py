"""Human approval of tool calls (issue 16 §3), engine side: the state machine
(engine/approvals.py), the loop's gate (a call waits, resumes approved once, rejected, timed
out), the requirement from a Tool or a policy (only ever added), and resolution."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import pytest

from ordo.engine import approvals
from ordo.engine.approvals import ApprovalDecision, ApprovalRule, PendingApproval
from ordo.engine.governance import Governance
from ordo.engine.livepolicy import PolicyUpdate
from ordo.engine.loop import run_agent
from ordo.engine.state import RunState
from ordo.runtime.resolve import resolve
from support.engine_fakes import (
    DictStore,
    ScriptedModel,
    agent,
    answer,
    call,
    mock_endpoint,
    mock_tool,
    policy,
    result_for,
    run_config,
    task,
    toolbox,
    tools_turn,
)

NOW = 1_000_000.0


def pending(deadline: float = NOW + 60) -> PendingApproval:
    return PendingApproval("c1", "deploy", 1, NOW, deadline, "Tool deploy")


# --------------------------------------------------------------------------------------
# The state machine


def test_no_decision_before_the_deadline_waits() -> None:
    assert approvals.settle(pending(), [], NOW + 59) == ("waiting", "")


def test_an_approval_approves_and_names_who() -> None:
    assert approvals.settle(pending(), [ApprovalDecision("Approve", "ok-1")], NOW) == (
        "approved",
        "ok-1",
    )


def test_a_rejection_wins_over_any_number_of_approvals() -> None:
    decisions = [
        ApprovalDecision("Approve", "a"),
        ApprovalDecision("Reject", "r"),
        ApprovalDecision("Approve", "b"),
    ]
    assert approvals.settle(pending(), decisions, NOW) == ("rejected", "r")


def test_duplicate_approvals_approve_once() -> None:
    decisions = [ApprovalDecision("Approve", "a"), ApprovalDecision("Approve", "b")]
    assert approvals.settle(pending(), decisions, NOW)[0] == "approved"


def test_no_decision_by_the_deadline_times_out() -> None:
    assert approvals.settle(pending(), [], NOW + 60) == ("timedOut", "")


def test_a_decision_made_after_the_deadline_does_not_count() -> None:
    late = ApprovalDecision("Approve", "late", at=NOW + 61)
    assert approvals.settle(pending(), [late], NOW + 120) == ("timedOut", "")
    on_time = ApprovalDecision("Approve", "ok", at=NOW + 10)
    assert approvals.settle(pending(), [on_time], NOW + 120) == ("approved", "ok")


def test_a_pending_approval_round_trips_through_the_checkpoint() -> None:
    state = RunState(step=2)
    state.approvals["c1"] = pending()
    state.approvals["c2"] = PendingApproval("c2", "t", 2, NOW, math.inf)
    state.awaiting_since = NOW
    back = RunState.from_dict(state.to_dict())
    assert back.approvals == state.approvals
    assert back.awaiting_since == NOW


def test_a_pause_is_counted_once() -> None:
    state = RunState(awaiting_since=NOW)
    assert approvals.resume_pause(state, NOW + 30) == 30
    assert approvals.resume_pause(state, NOW + 90) == 30  # already resumed: no second count
    assert state.awaiting_since is None


# --------------------------------------------------------------------------------------
# Which calls need approval: only ever added


def gov(**approvals_by_name: ApprovalRule) -> Governance:
    return Governance(candidate_tools=frozenset({"deploy", "read"}), approvals=approvals_by_name)


def test_requirement_from_the_governance_or_the_one_it_narrows() -> None:
    box = toolbox("deploy", "read")
    deploy, read = box.bindings
    start = gov(deploy=ApprovalRule("Tool deploy", 600.0))
    assert approvals.requirement(start, deploy) == ApprovalRule("Tool deploy", 600.0)
    assert approvals.requirement(start, read) is None
    # A re-read that says nothing about approval cannot remove the Tool's requirement.
    fresh = start.narrowed_by(gov())
    assert approvals.requirement(fresh, deploy) == ApprovalRule("Tool deploy", 600.0)
    # A re-read policy can add one; the shorter timeout applies.
    added = start.narrowed_by(
        gov(read=ApprovalRule("AgentPolicy p"), deploy=ApprovalRule("AgentPolicy p", 60.0))
    )
    assert approvals.requirement(added, read) == ApprovalRule("AgentPolicy p")
    assert approvals.requirement(added, deploy).timeout == 60.0  # type: ignore[union-attr]


def test_memory_tools_are_required_as_spelled_in_blocked_tools() -> None:
    box = toolbox(builtins=["memory_write"])
    g = Governance(candidate_tools=frozenset(), approvals={"memory.write": ApprovalRule("p")})
    assert approvals.requirement(g, box.bindings[0]) is not None


async def test_a_policy_adds_the_requirement_and_a_task_or_agent_cannot_remove_it() -> None:
    store = DictStore(
        agent(tools=["deploy", "read"]),
        mock_endpoint(),
        mock_tool("deploy", approval={"required": False}),
        mock_tool("read", approval={"required": True, "timeout": "10m"}),
        policy("gate", approvalRequired=["deploy"]),
    )
    snapshot = await resolve(task(), store)
    box = toolbox("deploy", "read")
    deploy, read = box.bindings
    assert approvals.requirement(snapshot.governance, deploy) == ApprovalRule("AgentPolicy gate")
    assert approvals.requirement(snapshot.governance, read) == ApprovalRule("Tool read", 600.0)


# --------------------------------------------------------------------------------------
# The loop


class Decider:
    """Answers every waiting call with `verdicts` (none: it keeps waiting)."""

    def __init__(self, *verdicts: str) -> None:
        self.verdicts = verdicts
        self.asked: list[PendingApproval] = []

    async def __call__(
        self, p: PendingApproval, arguments: dict[str, Any]
    ) -> Sequence[ApprovalDecision]:
        self.asked.append(p)
        return [ApprovalDecision(v, f"by-{v.lower()}") for v in self.verdicts]  # type: ignore[arg-type]


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


def gated(**kw: Any) -> Any:
    return run_config(gov(deploy=ApprovalRule("Tool deploy", 60.0)), **kw)


async def test_a_call_needing_approval_does_not_run_and_the_run_waits() -> None:
    box = toolbox("deploy", "read")
    model = ScriptedModel([tools_turn(call("deploy", "c1", env="prod"), call("read", "c2"))])
    clock = Clock()
    result = await run_agent(gated(clock=clock), model, box.bindings)
    assert (result.phase, result.reason) == ("AwaitingApproval", "AwaitingApproval")
    assert box.calls("deploy") == 0 and box.calls("read") == 1  # the other call ran
    assert list(result.state.approvals) == ["c1"]
    assert result.state.approvals["c1"].deadline == NOW + 60
    assert result.state.awaiting_since == NOW
    assert "deploy (c1)" in result.message and "prod" not in result.message
    assert model.calls == 1


async def resumed(state: RunState, decider: Decider, clock: Clock, box: Any, **kw: Any) -> Any:
    restored = RunState.from_dict(state.to_dict())  # as from the checkpoint
    model = ScriptedModel([answer("finished")])
    config = gated(clock=clock, approval_decider=decider, **kw)
    return await run_agent(config, model, box.bindings, state=restored), model


async def test_approved_on_resume_the_call_runs_exactly_once() -> None:
    box, clock = toolbox("deploy", "read"), Clock()
    model = ScriptedModel([tools_turn(call("deploy", "c1"))])
    first = await run_agent(gated(clock=clock), model, box.bindings)
    result, model2 = await resumed(first.state, Decider("Approve"), clock, box)
    assert (result.phase, result.output) == ("Succeeded", "finished")
    assert box.calls("deploy") == 1 and model2.calls == 1
    record = next(r for r in result.tool_calls if r.call_id == "c1")
    assert (record.decision, record.reason, record.outcome) == (
        "allowed",
        "Approved: by-approve",
        "succeeded",
    )
    assert not result.state.approvals


async def test_rejected_returns_an_error_result_with_return_error() -> None:
    box, clock = toolbox("deploy"), Clock()
    first = await run_agent(
        gated(clock=clock), ScriptedModel([tools_turn(call("deploy", "c1"))]), box.bindings
    )
    result, _ = await resumed(
        first.state, Decider("Reject"), clock, box, on_tool_denied="ReturnError"
    )
    assert result.phase == "Succeeded" and box.calls("deploy") == 0
    assert result_for(result.state, "c1").is_error
    assert "rejected" in result_for(result.state, "c1").content
    assert result.tool_calls[0].reason == "ApprovalRejected: by-reject"


async def test_rejected_fails_the_task_with_fail() -> None:
    box, clock = toolbox("deploy"), Clock()
    first = await run_agent(
        gated(clock=clock), ScriptedModel([tools_turn(call("deploy", "c1"))]), box.bindings
    )
    result, model = await resumed(first.state, Decider("Reject"), clock, box)
    assert (result.phase, result.reason) == ("Failed", "ApprovalRejected")
    assert box.calls("deploy") == 0 and model.calls == 0


async def test_timed_out_counts_as_rejected() -> None:
    box, clock = toolbox("deploy"), Clock()
    first = await run_agent(
        gated(clock=clock), ScriptedModel([tools_turn(call("deploy", "c1"))]), box.bindings
    )
    clock.now = NOW + 61
    result, _ = await resumed(first.state, Decider(), clock, box)
    assert (result.phase, result.reason) == ("Failed", "ApprovalTimedOut")
    assert box.calls("deploy") == 0


async def test_still_undecided_on_resume_waits_again_without_a_model_call() -> None:
    box, clock = toolbox("deploy"), Clock()
    first = await run_agent(
        gated(clock=clock), ScriptedModel([tools_turn(call("deploy", "c1"))]), box.bindings
    )
    clock.now = NOW + 30
    decider = Decider()
    result, model = await resumed(first.state, decider, clock, box)
    assert result.phase == "AwaitingApproval" and model.calls == 0 and box.calls("deploy") == 0
    assert result.state.approvals["c1"].requested_at == NOW  # the first request's deadline
    assert [p.call_id for p in decider.asked] == ["c1"]


async def test_a_decision_for_an_unknown_call_id_changes_nothing() -> None:
    box, clock = toolbox("deploy"), Clock()
    first = await run_agent(
        gated(clock=clock), ScriptedModel([tools_turn(call("deploy", "c1"))]), box.bindings
    )

    async def only_for_other(p: PendingApproval, _: dict[str, Any]) -> Sequence[ApprovalDecision]:
        decisions = {"c-unknown": [ApprovalDecision("Approve", "x")]}
        return decisions.get(p.call_id, [])

    restored = RunState.from_dict(first.state.to_dict())
    config = gated(clock=clock, approval_decider=only_for_other)
    result = await run_agent(config, ScriptedModel(), box.bindings, state=restored)
    assert result.phase == "AwaitingApproval" and box.calls("deploy") == 0


async def test_an_interactive_decider_settles_in_the_same_run() -> None:
    box = toolbox("deploy")
    model = ScriptedModel([tools_turn(call("deploy", "c1")), answer("ok")])
    result = await run_agent(gated(approval_decider=Decider("Approve")), model, box.bindings)
    assert (result.phase, box.calls("deploy")) == ("Succeeded", 1)


async def test_a_cancel_while_waiting_ends_cancelled() -> None:
    import asyncio

    box, clock = toolbox("deploy"), Clock()
    first = await run_agent(
        gated(clock=clock), ScriptedModel([tools_turn(call("deploy", "c1"))]), box.bindings
    )
    cancel = asyncio.Event()
    cancel.set()
    restored = RunState.from_dict(first.state.to_dict())
    result = await run_agent(
        gated(clock=clock), ScriptedModel(), box.bindings, state=restored, cancel=cancel
    )
    assert result.phase == "Cancelled" and box.calls("deploy") == 0


async def test_a_policy_re_read_mid_run_adds_a_requirement() -> None:
    box = toolbox("deploy", "read")
    start = gov()  # nothing needs approval at the start

    async def refresh() -> PolicyUpdate:
        return PolicyUpdate(governance=gov(read=ApprovalRule("AgentPolicy late")))

    config = dataclasses.replace(run_config(start), policy_refresh=refresh)
    model = ScriptedModel([tools_turn(call("read", "c1"))])
    result = await run_agent(config, model, box.bindings)
    assert result.phase == "AwaitingApproval" and box.calls("read") == 0


@pytest.mark.parametrize("verdict", ["Approve", "Reject"])
async def test_an_approved_non_idempotent_call_is_checkpointed_as_started_first(
    verdict: str,
) -> None:
    box, clock = toolbox("deploy"), Clock()
    first = await run_agent(
        gated(clock=clock), ScriptedModel([tools_turn(call("deploy", "c1"))]), box.bindings
    )
    seen: list[bool] = []

    async def listener(event: Any) -> None:
        from ordo.engine.events import Checkpoint

        if isinstance(event, Checkpoint):
            seen.append("c1" in event.state.started_calls and box.calls("deploy") == 0)

    restored = RunState.from_dict(first.state.to_dict())
    config = gated(clock=clock, approval_decider=Decider(verdict), on_tool_denied="ReturnError")
    await run_agent(config, ScriptedModel(), box.bindings, state=restored, listeners=[listener])
    assert (True in seen) == (verdict == "Approve")


def test_args_digest_is_canonical_json_sha256() -> None:
    import hashlib

    from ordo.engine.approvals import args_digest

    a = args_digest({"b": 1, "a": {"y": "é", "x": [1, 2]}})
    b = args_digest({"a": {"x": [1, 2], "y": "é"}, "b": 1})
    assert a == b
    expected = hashlib.sha256('{"a":{"x":[1,2],"y":"é"},"b":1}'.encode()).hexdigest()
    assert a == "sha256:" + expected
    assert args_digest({"amount": 100}) != args_digest({"amount": 101})
