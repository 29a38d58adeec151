"""The Team orchestrator (runtime/team.py) over an in-memory Delegator: the order of the
members and what each gets as input, the token budget each child is given, a failed member
stopping the chain, depth and cycles refused before any child exists, and a resumed run that
finds every existing child instead of creating a second one."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from tests.support.engine_fakes import DictStore

from ordo.api import Task
from ordo.api.team import Team
from ordo.api.usage import Usage
from ordo.engine.delegation import ChildRecord
from ordo.runtime.delegation import (
    CHAIN_ANNOTATION,
    ROOT_LABEL,
    ChildNotOwned,
    ChildRequest,
    ChildState,
    child_name,
    lineage_of,
)
from ordo.runtime.execute import Prepared, execute
from ordo.runtime.team import TEAM_CHAIN_PREFIX, TeamRun, run_team

NOW = 1_000_000.0


@dataclass
class Children:
    """Children in memory by key: created once; each answers at once unless its member is in
    `hold` (then it runs until `finish`). An answer is `<agent>(<input>)`, or a JSON object
    when the request has an output schema."""

    hold: set[str] = field(default_factory=set)
    fail: dict[str, str] = field(default_factory=dict)
    foreign: set[str] = field(default_factory=set)
    usage: Usage = field(default_factory=lambda: Usage(20, 10))
    children: dict[str, ChildState] = field(default_factory=dict)
    requests: list[ChildRequest] = field(default_factory=list)
    created: list[str] = field(default_factory=list)

    async def start(self, request: ChildRequest) -> ChildState:
        self.requests.append(request)
        name = child_name("team-task", "uid-1", request.key)
        if request.key in self.foreign:
            raise ChildNotOwned(f"Task {name!r} exists and is not owned by Task 'team-task'")
        if request.key in self.children:
            return self.children[request.key]
        if request.known:
            return ChildState(name, request.agent, "Failed", "ChildVanished", "deleted")
        self.created.append(request.key)
        child = ChildState(name, request.agent, "Running")
        if request.member not in self.hold:
            child = self._ended(request, child)
        self.children[request.key] = child
        return child

    def _ended(self, request: ChildRequest, child: ChildState) -> ChildState:
        if request.member in self.fail:
            reason: Any = self.fail[request.member]
            return ChildState(child.name, child.agent, "Failed", reason, usage=self.usage)
        text = json.dumps(request.input, sort_keys=True)
        structured = None
        if request.output_schema is not None:
            structured = {"by": request.agent, "from": request.input}
            text = json.dumps(structured)
        output = text if structured else f"{request.agent}({text})"
        return ChildState(
            child.name,
            child.agent,
            "Succeeded",
            "Succeeded",
            output=output,
            structured=structured,
            usage=self.usage,
        )

    def finish(self, member: str) -> None:
        self.hold.discard(member)
        request = next(r for r in self.requests if r.member == member)
        self.children[request.key] = self._ended(request, self.children[request.key])


def _team(strategy: str, members: list[dict[str, Any]], **spec: Any) -> Team:
    return Team.model_validate(
        {
            "apiVersion": "ordo.dev/v1alpha1",
            "kind": "Team",
            "metadata": {"name": "crew", "namespace": "ns"},
            "spec": {"strategy": strategy, "members": members, **spec},
        }
    )


def _task(meta: dict[str, Any] | None = None, **spec: Any) -> Task:
    return Task.model_validate(
        {
            "apiVersion": "ordo.dev/v1alpha1",
            "kind": "Task",
            "metadata": {"name": "team-task", "namespace": "ns", **(meta or {})},
            "spec": {"teamRef": "crew", "input": "topic", **spec},
        }
    )


def _run(
    team: Team, task: Task | None = None, timeout: float | None = None, budget: int | None = None
) -> TeamRun:
    task = task or _task()
    lineage = lineage_of(task.name, TEAM_CHAIN_PREFIX + team.name, task.metadata.model_dump())
    return TeamRun(task, team, timeout, budget, lineage)


SEQ = [
    {"name": "draft", "agentRef": "writer"},
    {"name": "edit", "agentRef": "editor"},
    {"name": "polish", "agentRef": "polisher"},
]
PAR = [{"name": "pro", "agentRef": "optimist"}, {"name": "con", "agentRef": "skeptic"}]
AGG = {"agentRef": "judge"}


def go(run: TeamRun, children: Children, **kw: Any) -> Any:
    return asyncio.run(run_team(run, children, anchor=NOW, clock=lambda: NOW + 1, **kw))


def test_sequential_passes_each_answer_to_the_next_member() -> None:
    children = Children()
    outcome = go(_run(_team("Sequential", SEQ)), children)
    assert (outcome.phase, outcome.reason) == ("Succeeded", "Succeeded")
    assert [r.key for r in children.requests] == ["member-0", "member-1", "member-2"]
    assert [r.input for r in children.requests] == [
        "topic",
        'writer("topic")',
        'editor("writer(\\"topic\\")")',
    ]
    assert outcome.result.output == children.children["member-2"].output
    assert outcome.result.state.usage == Usage(60, 30)  # the children's, summed
    records = outcome.result.state.children
    assert [(k, r.agent, r.phase, r.tokens) for k, r in records.items()] == [
        ("member-0", "writer", "Succeeded", 30),
        ("member-1", "editor", "Succeeded", 30),
        ("member-2", "polisher", "Succeeded", 30),
    ]
    assert all(r.member is not None and r.tool is None for r in children.requests)


def test_sequential_structured_answer_is_the_next_input_and_the_task_schema_is_the_last() -> None:
    schema = {"type": "object"}
    members = [{**SEQ[0], "outputSchema": schema}, SEQ[1]]
    children = Children()
    task_schema = {"type": "object", "required": ["by"]}
    outcome = go(_run(_team("Sequential", members), _task(outputSchema=task_schema)), children)
    first, second = children.requests
    assert first.output_schema == schema
    assert second.input == {"by": "writer", "from": "topic"}  # a JSON object, not text
    assert second.output_schema == task_schema  # the Task's schema binds the Team's answer
    assert outcome.result.structured_output == {"by": "editor", "from": second.input}


def test_a_failed_member_fails_the_team_and_no_later_member_starts() -> None:
    children = Children(fail={"edit": "MaxStepsExceeded"})
    outcome = go(_run(_team("Sequential", SEQ)), children)
    assert (outcome.phase, outcome.reason) == ("Failed", "ChildFailed")
    assert "member 'edit'" in outcome.message and "MaxStepsExceeded" in outcome.message
    assert children.children["member-1"].name in outcome.message
    assert [r.key for r in children.requests] == ["member-0", "member-1"]
    assert outcome.result.state.usage == Usage(40, 20)  # the failed child's tokens count


def test_sequential_budget_is_what_the_members_before_left() -> None:
    children = Children()
    outcome = go(_run(_team("Sequential", SEQ), budget=100), children)
    assert outcome.phase == "Succeeded"
    assert [r.token_budget for r in children.requests] == [100, 70, 40]


def test_sequential_budget_used_up_fails_before_the_next_member() -> None:
    children = Children()
    outcome = go(_run(_team("Sequential", SEQ), budget=60), children)
    assert (outcome.phase, outcome.reason) == ("Failed", "TokenBudgetExceeded")
    assert "'polish'" in outcome.message
    assert len(children.requests) == 2


def test_a_member_over_its_reservation_fails_the_team_token_budget() -> None:
    children = Children(fail={"draft": "TokenBudgetExceeded"})
    outcome = go(_run(_team("Sequential", SEQ), budget=100), children)
    assert (outcome.phase, outcome.reason) == ("Failed", "TokenBudgetExceeded")
    # Without a Team budget the member's own Agent budget ran out: the member failed.
    children = Children(fail={"draft": "TokenBudgetExceeded"})
    outcome = go(_run(_team("Sequential", SEQ)), children)
    assert outcome.reason == "ChildFailed"


def test_parallel_gives_every_member_the_input_then_the_aggregator_all_answers() -> None:
    children = Children()
    outcome = go(_run(_team("Parallel", PAR, aggregator=AGG), budget=90), children)
    assert (outcome.phase, outcome.reason) == ("Succeeded", "Succeeded")
    *members, aggregator = children.requests
    assert [(r.key, r.input) for r in members] == [("member-0", "topic"), ("member-1", "topic")]
    # Each member holds an equal share; the aggregator gets what they left: the
    # reservations together never exceed the budget.
    assert [r.token_budget for r in members] == [30, 30]
    assert aggregator.key == "aggregator" and aggregator.agent == "judge"
    assert aggregator.token_budget == 90 - 60
    assert aggregator.input == {"pro": 'optimist("topic")', "con": 'skeptic("topic")'}
    assert outcome.result.output == children.children["aggregator"].output
    assert outcome.result.state.usage.total_tokens == 90


def test_parallel_budget_too_small_to_share_starts_nothing() -> None:
    children = Children()
    outcome = go(_run(_team("Parallel", PAR, aggregator=AGG), budget=2), children)
    assert (outcome.phase, outcome.reason) == ("Failed", "TokenBudgetExceeded")
    assert children.requests == []


def test_parallel_waits_for_every_member_and_a_resume_creates_no_second_child() -> None:
    children = Children(hold={"con"})
    run = _run(_team("Parallel", PAR, aggregator=AGG))
    outcome = go(run, children)
    assert (outcome.phase, outcome.reason) == ("AwaitingChildren", "AwaitingChildren")
    assert outcome.awaiting_children
    records = outcome.result.state.children
    assert [(k, r.phase) for k, r in records.items()] == [
        ("member-0", "Succeeded"),
        ("member-1", "Running"),
    ]
    assert children.children["member-1"].name in outcome.message
    children.finish("con")
    outcome = go(run, children)  # resumed: asks again, in order
    assert outcome.phase == "Succeeded"
    assert children.created == ["member-0", "member-1", "aggregator"]


def test_sequential_resume_finds_each_existing_child() -> None:
    children = Children(hold={"edit"})
    run = _run(_team("Sequential", SEQ))
    assert go(run, children).phase == "AwaitingChildren"
    assert go(run, children).phase == "AwaitingChildren"  # woken early: still waiting
    children.finish("edit")
    outcome = go(run, children)
    assert outcome.phase == "Succeeded"
    assert children.created == ["member-0", "member-1", "member-2"]
    assert outcome.result.state.usage == Usage(60, 30)  # every child counted once


def test_a_recorded_member_that_is_gone_is_never_created_again() -> None:
    status = {"children": [{"name": "team-task-x", "agent": "writer", "member": "draft"}]}
    task = Task.model_validate({**_task().model_dump(by_alias=True), "status": status})
    children = Children()
    outcome = go(_run(_team("Sequential", SEQ), task), children)
    assert (outcome.phase, outcome.reason) == ("Failed", "ChildVanished")
    assert children.requests[0].known and children.created == []


def test_a_child_name_taken_by_another_object_fails_child_not_owned() -> None:
    children = Children(foreign={"member-1"})
    outcome = go(_run(_team("Parallel", PAR, aggregator=AGG)), children)
    assert (outcome.phase, outcome.reason) == ("Failed", "ChildNotOwned")
    assert "member 'con'" in outcome.message


@pytest.mark.parametrize("max_depth", [0])
def test_depth_limit_refuses_before_any_child(max_depth: int) -> None:
    children = Children()
    outcome = go(_run(_team("Sequential", SEQ)), children, max_depth=max_depth)
    assert (outcome.phase, outcome.reason) == ("Failed", "DelegationDepthExceeded")
    assert children.requests == []


def test_a_member_on_the_chain_is_a_cycle_refused_before_any_child() -> None:
    meta = {
        "labels": {ROOT_LABEL: "root"},
        "annotations": {CHAIN_ANNOTATION: json.dumps(["editor"])},
    }
    children = Children()
    outcome = go(_run(_team("Sequential", SEQ), _task(meta)), children)
    assert (outcome.phase, outcome.reason) == ("Failed", "DelegationCycle")
    assert "member 'edit'" in outcome.message
    assert children.requests == []


def test_each_child_gets_what_is_left_of_the_team_timeout() -> None:
    children = Children()
    run = _run(_team("Sequential", SEQ), timeout=60)
    outcome = asyncio.run(run_team(run, children, anchor=NOW, clock=lambda: NOW + 15))
    assert outcome.phase == "Succeeded"
    assert {r.timeout for r in children.requests} == {45}
    children = Children()
    outcome = asyncio.run(run_team(run, children, anchor=NOW, clock=lambda: NOW + 61))
    assert (outcome.phase, outcome.reason) == ("Failed", "Timeout")
    assert children.requests == []


def test_cancel_starts_no_further_child() -> None:
    cancel = asyncio.Event()
    cancel.set()
    children = Children()
    outcome = go(_run(_team("Sequential", SEQ)), children, cancel=cancel)
    assert (outcome.phase, outcome.reason) == ("Cancelled", "Cancelled")
    assert children.requests == []


def test_without_a_delegator_the_team_fails_and_says_where_it_can_run() -> None:
    run = _run(_team("Sequential", SEQ))
    outcome = asyncio.run(run_team(run, None, anchor=NOW))
    assert outcome.phase == "Failed" and "ordo run" in outcome.message


# -- execute(): a Team Task end to end over a store and the front end's delegator ---------


def _body(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    meta = {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": "1"}
    return {"apiVersion": "ordo.dev/v1alpha1", "kind": kind, "metadata": meta, "spec": spec}


def _store(*skip: str) -> DictStore:
    agents = ["optimist", "skeptic", "judge"]
    return DictStore(
        _body("Team", "crew", {"strategy": "Parallel", "members": PAR, "aggregator": AGG}),
        *(_body("Agent", a, {"modelRef": "m"}) for a in agents if a not in skip),
    )


def _execute(store: DictStore, children: Children, **kw: Any) -> Any:
    async def prepare_team(_: TeamRun) -> Prepared:
        return Prepared(delegator=children, **kw)

    return asyncio.run(execute(_task(), store, prepare_team=prepare_team))


def test_execute_runs_a_team_task_and_its_status_lists_the_children() -> None:
    children = Children()
    outcome = _execute(_store(), children)
    assert (outcome.phase, outcome.reason) == ("Succeeded", "Succeeded")
    assert outcome.trace_id  # one invoke_workflow span
    status = outcome.status()
    assert status.usage is not None and status.usage.total_tokens == 90
    assert status.output == children.children["aggregator"].output
    assert [(c.name, c.agent, c.member, c.call_id, c.phase) for c in status.children or []] == [
        (children.children[k].name, agent, member, None, "Succeeded")
        for k, agent, member in (
            ("member-0", "optimist", "pro"),
            ("member-1", "skeptic", "con"),
            ("aggregator", "judge", "aggregator"),
        )
    ]


def test_execute_gives_the_team_the_front_ends_depth_limit() -> None:
    children = Children()
    outcome = _execute(_store(), children, max_delegation_depth=0)
    assert outcome.reason == "DelegationDepthExceeded" and children.requests == []


def test_a_missing_team_or_member_agent_fails_before_any_child() -> None:
    children = Children()
    outcome = _execute(DictStore(), children)
    assert (outcome.phase, outcome.reason) == ("Failed", "TeamNotFound")
    outcome = _execute(_store("skeptic"), children)
    assert (outcome.phase, outcome.reason) == ("Failed", "AgentNotFound")
    assert "member 'con'" in outcome.message
    assert children.requests == []


def test_a_member_record_keeps_its_member_through_the_checkpoint_form() -> None:
    outcome = go(_run(_team("Sequential", SEQ[:1])), Children())
    (record,) = outcome.result.state.children.values()
    assert record.member == "draft" and record.tool is None
    assert ChildRecord.from_dict(record.to_dict()) == record
