"""Delegation in the engine (issue 27, docs/concepts.md#trees): an `agent` Tool call starts a
child Task through the run's Delegator, once across resumes; limits are shared down (the
parent's remaining time, its unreserved budget divided among the children still to start);
the child's answer is the call's result and its tokens join the parent's usage; a cycle or a
too-deep chain is refused before any child exists. The Delegator here is in memory: its
children end when the test says so."""

from __future__ import annotations

import json

import pytest

from ordo.engine.approvals import ApprovalRule
from ordo.engine.delegation import ChildRecord, ChildRequest, ChildState, Lineage, child_name
from ordo.engine.governance import Governance
from ordo.engine.loop import run_agent
from ordo.engine.state import RunState
from ordo.engine.tooling import AgentTarget, ToolBinding, ToolOutput
from ordo.engine.transcript import Usage
from ordo.runtime.status import children_status, progress
from support.delegation_fakes import FakeDelegator
from support.engine_fakes import (
    ScriptedModel,
    call,
    open_governance,
    result_for,
    run_config,
    tools_turn,
)


async def _unused(arguments: dict[str, object]) -> ToolOutput:
    raise AssertionError("an agent Tool's executor runs only without a delegator")


def agent_tool(name: str, agent: str) -> ToolBinding:
    return ToolBinding(
        name,
        name,
        f"ask {agent}",
        {"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"]},
        _unused,
        agent=AgentTarget(agent),
    )


def config(delegator: FakeDelegator | None, *tools: str, **kw: object):  # type: ignore[no-untyped-def]
    kw.setdefault("lineage", Lineage("parent", ("boss",)))
    return run_config(open_governance(*tools), delegator=delegator, **kw)


def round_trip(state: RunState) -> RunState:
    return RunState.from_dict(json.loads(json.dumps(state.to_dict())))


async def test_a_child_that_ends_answers_the_call_and_its_tokens_join_the_usage() -> None:
    delegator = FakeDelegator(finish_at_once=True)
    model = ScriptedModel([tools_turn(call("ask_helper", "c1", input="sum 2+2"))])
    result = await run_agent(
        config(delegator, "ask_helper"), model, [agent_tool("ask_helper", "helper")]
    )
    assert (result.phase, result.reason) == ("Succeeded", "Succeeded")
    assert delegator.created == 1
    request = delegator.requests[0]
    assert (request.agent, request.input, request.tool, request.known) == (
        "helper",
        "sum 2+2",
        "ask_helper",
        False,
    )
    assert result_for(result.state, "c1").content == "answer of helper"
    # two model calls of (1, 1) and the child's (30, 20): a budget covers the tree
    assert result.usage.total_tokens == 4 + 50
    record = result.state.children["c1"]
    assert (record.phase, record.tokens, record.agent) == ("Succeeded", 50, "helper")
    assert result.tool_calls[0].outcome == "succeeded"
    # offered once until called: the second model call no longer sees the tool
    assert model.requests[1].tool_names == set()


async def test_a_running_child_stops_the_run_awaiting_children_and_resumes_exactly_once() -> None:
    delegator = FakeDelegator()
    tools = [agent_tool("ask_helper", "helper")]
    model = ScriptedModel([tools_turn(call("ask_helper", "c1", input="hi"))])
    first = await run_agent(config(delegator, "ask_helper"), model, tools)
    assert (first.phase, first.reason) == ("AwaitingChildren", "AwaitingChildren")
    assert delegator.created == 1
    assert "ask_helper" not in first.state.used_tools
    assert not any(r.call_id == "c1" for r in first.state.records)  # no result yet
    assert first.state.children["c1"].phase == "Running"
    assert child_name("parent", "uid-1", "c1") in first.message

    # a restart: the checkpoint is all that survives; the child is still running
    again = await run_agent(
        config(delegator, "ask_helper"), model, tools, state=round_trip(first.state)
    )
    assert again.phase == "AwaitingChildren"
    assert delegator.created == 1 and delegator.requests[-1].known

    delegator.end("c1", "the child's answer")
    done = await run_agent(
        config(delegator, "ask_helper"), model, tools, state=round_trip(again.state)
    )
    assert (done.phase, done.reason) == ("Succeeded", "Succeeded")
    assert delegator.created == 1
    assert result_for(done.state, "c1").content == "the child's answer"
    assert done.usage.total_tokens == 4 + 50  # the child's tokens counted once
    assert model.calls == 2


async def test_parallel_children_share_the_unreserved_budget() -> None:
    delegator = FakeDelegator()
    tools = [agent_tool("ask_a", "a"), agent_tool("ask_b", "b"), agent_tool("ask_c", "c")]
    turn = tools_turn(
        call("ask_a", "c1", input="x"),
        call("ask_b", "c2", input="y"),
        call("ask_c", "c3", input="z"),
        usage=Usage(60, 40),
    )
    cfg = config(delegator, "ask_a", "ask_b", "ask_c", token_budget=1000)
    result = await run_agent(cfg, ScriptedModel([turn]), tools)
    assert result.phase == "AwaitingChildren"
    budgets = [r.token_budget for r in delegator.requests]
    assert budgets == [300, 300, 300]  # (1000 - 100) shared by three children to start
    assert sum(b or 0 for b in budgets) <= 1000 - 100
    assert [c.reserved_tokens for c in result.state.children.values()] == budgets
    assert len(result.state.waiting_children) == 3


async def test_a_child_that_ends_at_once_leaves_its_unused_share_to_the_next() -> None:
    delegator = FakeDelegator(finish_at_once=True)
    tools = [agent_tool("ask_a", "a"), agent_tool("ask_b", "b")]
    turn = tools_turn(call("ask_a", "c1", input="x"), call("ask_b", "c2", input="y"))
    cfg = config(delegator, "ask_a", "ask_b", token_budget=402)
    result = await run_agent(cfg, ScriptedModel([turn]), tools)
    assert result.phase == "Succeeded"
    assert [r.token_budget for r in delegator.requests] == [200, 400 - 50]


async def test_a_child_that_takes_the_parent_over_its_budget_ends_it() -> None:
    delegator = FakeDelegator(finish_at_once=True, usage=Usage(600, 500))
    cfg = config(delegator, "ask_helper", token_budget=1000)
    model = ScriptedModel([tools_turn(call("ask_helper", "c1", input="x"))])
    result = await run_agent(cfg, model, [agent_tool("ask_helper", "helper")])
    assert (result.phase, result.reason) == ("Failed", "TokenBudgetExceeded")
    assert result.usage.total_tokens == 2 + 1100
    assert model.calls == 1


async def test_a_cycle_is_denied_before_any_child_exists() -> None:
    delegator = FakeDelegator()
    cfg = config(delegator, "ask_root", lineage=Lineage("root", ("boss", "helper")))
    model = ScriptedModel([tools_turn(call("ask_root", "c1", input="x"))])
    result = await run_agent(cfg, model, [agent_tool("ask_root", "boss")])
    assert (result.phase, result.reason) == ("Failed", "DelegationCycle")
    assert "boss -> helper -> boss" in result.message
    assert delegator.requests == [] and delegator.created == 0
    record = result.tool_calls[0]
    assert record.decision == "denied" and record.reason.startswith("DelegationCycle:")


async def test_too_deep_is_denied_and_under_continue_the_model_is_told() -> None:
    delegator = FakeDelegator()
    cfg = config(
        delegator,
        "ask_x",
        lineage=Lineage("root", ("a", "b", "c")),
        max_delegation_depth=2,
        on_tool_denied="Continue",
    )
    model = ScriptedModel([tools_turn(call("ask_x", "c1", input="x"))])
    result = await run_agent(cfg, model, [agent_tool("ask_x", "x")])
    assert result.phase == "Succeeded"
    assert delegator.created == 0
    assert result.tool_calls[0].reason.startswith("DelegationDepthExceeded:")
    assert "depth 2, the limit is 2" in result_for(result.state, "c1").content


async def test_a_child_the_state_records_that_is_gone_is_child_vanished_never_recreated() -> None:
    delegator = FakeDelegator()
    tools = [agent_tool("ask_helper", "helper")]
    model = ScriptedModel([tools_turn(call("ask_helper", "c1", input="x"))])
    first = await run_agent(config(delegator, "ask_helper"), model, tools)
    assert first.phase == "AwaitingChildren"
    delegator.children.clear()  # someone deleted the child
    again = await run_agent(
        config(delegator, "ask_helper"), model, tools, state=round_trip(first.state)
    )
    assert again.phase == "Succeeded"
    assert delegator.created == 1
    assert result_for(again.state, "c1").is_error
    assert again.tool_calls[-1].error == "ChildVanished"
    assert again.state.children["c1"].reason == "ChildVanished"


async def test_a_name_taken_by_an_object_the_parent_does_not_own_is_an_error_result() -> None:
    delegator = FakeDelegator(foreign={"c1"})
    model = ScriptedModel([tools_turn(call("ask_helper", "c1", input="x"))])
    result = await run_agent(
        config(delegator, "ask_helper"), model, [agent_tool("ask_helper", "helper")]
    )
    assert result.phase == "Succeeded"
    assert result.tool_calls[0].error == "ChildNotOwned"
    assert "not owned" in result_for(result.state, "c1").content
    assert result.state.children == {}


async def test_a_failed_child_is_an_error_result_naming_it() -> None:
    delegator = FakeDelegator()
    tools = [agent_tool("ask_helper", "helper")]
    model = ScriptedModel([tools_turn(call("ask_helper", "c1", input="x"))])
    first = await run_agent(config(delegator, "ask_helper"), model, tools)
    delegator.fail("c1", "MaxStepsExceeded")
    done = await run_agent(config(delegator, "ask_helper"), model, tools, state=first.state)
    result = result_for(done.state, "c1")
    assert result.is_error and "ended Failed (MaxStepsExceeded)" in result.content
    assert delegator.children["c1"].name in result.content
    assert done.tool_calls[-1].error == "ChildFailed: MaxStepsExceeded"
    assert done.usage.total_tokens == 4 + 50  # a failed child's tokens count too


async def test_approvals_win_the_phase_while_children_are_still_listed() -> None:
    delegator = FakeDelegator()
    from support.engine_fakes import toolbox

    box = toolbox("deploy")
    tools = [agent_tool("ask_helper", "helper"), *box.bindings]
    gov = Governance(
        candidate_tools=frozenset({"ask_helper", "deploy"}),
        approvals={"deploy": ApprovalRule("Tool deploy")},
    )
    cfg = run_config(gov, delegator=delegator, lineage=Lineage("parent", ("boss",)))
    turn = tools_turn(call("ask_helper", "c1", input="x"), call("deploy", "c2"))
    result = await run_agent(cfg, ScriptedModel([turn]), tools)
    assert result.phase == "AwaitingApproval"
    assert list(result.state.approvals) == ["c2"]
    assert [c.key for c in result.state.waiting_children] == ["c1"]
    listed = progress(result.state).children
    assert listed is not None and listed[0].phase == "Running"


async def test_without_a_delegator_the_call_gets_the_bindings_own_error() -> None:
    async def unavailable(arguments: dict[str, object]) -> ToolOutput:
        return ToolOutput("error: delegation is not available here", True, "Unavailable")

    binding = agent_tool("ask_helper", "helper")
    tool = ToolBinding(
        binding.name,
        binding.object_name,
        binding.description,
        binding.parameters,
        unavailable,
        agent=binding.agent,
    )
    model = ScriptedModel([tools_turn(call("ask_helper", "c1", input="x"))])
    result = await run_agent(config(None, "ask_helper"), model, [tool])
    assert result.phase == "Succeeded"
    assert "not available" in result_for(result.state, "c1").content


def test_child_records_round_trip_and_show_in_status() -> None:
    state = RunState()
    state.children["c1"] = ChildRecord(
        "c1", "parent-0123456789", "helper", "ask_helper", 2, 300, "Running", None, 12, True
    )
    state.children["c2"] = ChildRecord(
        "c2", "parent-abcdefabcd", "other", "ask_other", 2, None, "Failed", "Timeout", 40
    )
    back = round_trip(state)
    assert back.children == state.children
    assert [c.key for c in back.waiting_children] == ["c1"]
    listed = children_status(back)
    assert [(c.name, c.phase, c.reason, c.tokens, c.awaiting_approval) for c in listed] == [
        ("parent-0123456789", "Running", None, 12, True),
        ("parent-abcdefabcd", "Failed", "Timeout", 40, None),
    ]
    assert RunState.from_dict({"items": []}).children == {}  # an older checkpoint


async def test_children_that_end_one_by_one_answer_their_calls_as_they_end() -> None:
    delegator = FakeDelegator()
    tools = [agent_tool("ask_a", "a"), agent_tool("ask_b", "b")]
    model = ScriptedModel(
        [tools_turn(call("ask_a", "c1", input="x"), call("ask_b", "c2", input="y"))]
    )
    first = await run_agent(config(delegator, "ask_a", "ask_b"), model, tools)
    assert len(first.state.waiting_children) == 2
    delegator.end("c1", "a's answer")
    second = await run_agent(
        config(delegator, "ask_a", "ask_b"), model, tools, state=round_trip(first.state)
    )
    assert second.phase == "AwaitingChildren"
    assert result_for(second.state, "c1").content == "a's answer"
    assert [c.key for c in second.state.waiting_children] == ["c2"]
    assert second.usage.total_tokens == 2 + 50
    delegator.end("c2", "b's answer")
    done = await run_agent(
        config(delegator, "ask_a", "ask_b"), model, tools, state=round_trip(second.state)
    )
    assert done.phase == "Succeeded"
    assert result_for(done.state, "c2").content == "b's answer"
    assert done.usage.total_tokens == 4 + 50 + 50  # each child counted once
    assert delegator.created == 2 and model.calls == 2
    assert [r.call_id for r in done.tool_calls] == ["c1", "c2"]


async def test_an_approved_delegation_is_not_asked_for_again_while_its_child_runs() -> None:
    from ordo.engine.approvals import ApprovalDecision, PendingApproval

    asked: list[str] = []
    approve = False

    async def decider(
        pending: PendingApproval, arguments: dict[str, object]
    ) -> list[ApprovalDecision]:
        asked.append(pending.call_id)
        return [ApprovalDecision("Approve", "alice", approver="alice")] if approve else []

    delegator = FakeDelegator()
    gov = Governance(
        candidate_tools=frozenset({"ask_helper"}),
        approvals={"ask_helper": ApprovalRule("Tool ask_helper")},
    )

    def cfg():  # type: ignore[no-untyped-def]
        return run_config(
            gov, delegator=delegator, lineage=Lineage("p", ("boss",)), approval_decider=decider
        )

    tools = [agent_tool("ask_helper", "helper")]
    model = ScriptedModel([tools_turn(call("ask_helper", "c1", input="x"))])
    waiting = await run_agent(cfg(), model, tools)
    assert waiting.phase == "AwaitingApproval" and delegator.requests == []
    approve = True
    started = await run_agent(cfg(), model, tools, state=round_trip(waiting.state))
    assert started.phase == "AwaitingChildren" and not started.state.approvals
    assert asked == ["c1", "c1"]
    delegator.end("c1")
    done = await run_agent(cfg(), model, tools, state=round_trip(started.state))
    assert done.phase == "Succeeded"
    assert asked == ["c1", "c1"]  # not asked again once the child existed
    assert delegator.created == 1
    record = done.tool_calls[0]
    assert (record.decision, record.reason, record.outcome) == (
        "allowed",
        "Approved: alice",  # the audit trail keeps the approval that let the child start
        "succeeded",
    )
    assert record.approved_by == ("alice",)


class _Killed(BaseException):
    """The operator's SIGKILL, as the run sees it: nothing after it runs."""


class _DiesAfterCreate(FakeDelegator):
    """Creates the child, then the process dies before the create's answer is used."""

    async def start(self, request: ChildRequest) -> ChildState:
        child = await super().start(request)
        if self.created == 1 and not self.requests[1:]:
            raise _Killed
        return child


async def test_a_parent_killed_right_after_creating_its_child_finds_it_on_resume() -> None:
    """The call id is checkpointed before the child exists: the resumed run does not ask
    the model again (whose next call id would name a second child) but the delegator, under
    the same key, and finds the one child."""
    from ordo.engine.events import Checkpoint, Event

    delegator = _DiesAfterCreate()
    tools = [agent_tool("ask_helper", "helper")]
    saved: list[RunState] = []

    async def durable(event: Event) -> None:
        if isinstance(event, Checkpoint):
            saved.append(round_trip(event.state))

    first_model = ScriptedModel([tools_turn(call("ask_helper", "c1", input="hi"))])
    with pytest.raises(_Killed):
        await run_agent(config(delegator, "ask_helper"), first_model, tools, listeners=[durable])
    assert delegator.created == 1
    assert saved, "no checkpoint was written before the child was created"
    assert "c1" in saved[-1].started_calls

    # a real model would name its next call differently: c2 must never be asked for
    second_model = ScriptedModel([tools_turn(call("ask_helper", "c2", input="hi"))])
    delegator.end("c1", "the child's answer")
    done = await run_agent(
        config(delegator, "ask_helper"), second_model, tools, state=saved[-1], fresh=False
    )
    assert (done.phase, done.reason) == ("Succeeded", "Succeeded")
    assert delegator.created == 1
    assert [r.key for r in delegator.requests] == ["c1", "c1"]
    assert result_for(done.state, "c1").content == "the child's answer"
