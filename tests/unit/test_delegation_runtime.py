"""Delegation in the run service (issue 27): `agent` Tools resolve and bind (the default
`{input: string}` schema or their own), `Prepared.delegator` reaches the loop, the lineage
comes from the Task's metadata, the depth limit is the smallest of the front end's and the
policies', and every status lists the children."""

from __future__ import annotations

import json
from typing import Any

from ordo.api.tool import AGENT_TOOL_INPUT_SCHEMA
from ordo.engine.delegation import CHAIN_ANNOTATION, DEFAULT_MAX_DEPTH, ROOT_LABEL
from ordo.runtime import Prepared, execute
from ordo.runtime.resolve import resolve
from ordo.runtime.wiring import run_config, tool_bindings
from support.delegation_fakes import FakeDelegator
from support.engine_fakes import (
    DictStore,
    ModelFactory,
    ScriptedModel,
    agent,
    call,
    mock_endpoint,
    obj,
    policy,
    task,
    task_body,
    tools_turn,
)


def agent_tool(name: str, target: str, **spec: Any) -> dict[str, Any]:
    return obj("Tool", name, {"type": "agent", "agent": {"ref": target}, **spec})


def store(*extra: dict[str, Any], schema: dict[str, Any] | None = None) -> DictStore:
    tool = agent_tool("ask-helper", "helper", **({"inputSchema": schema} if schema else {}))
    return DictStore(agent("boss", tools=["ask-helper"]), mock_endpoint(), tool, *extra)


def factory(**arguments: Any) -> ModelFactory:
    turn = tools_turn(call("ask-helper", "c1", **(arguments or {"input": "2+2"})))
    return ModelFactory(lambda snapshot: ScriptedModel([turn]))


def prepared(delegator: FakeDelegator | None, depth: int | None = None) -> Any:
    async def prepare(snapshot: Any) -> Prepared:
        return Prepared(delegator=delegator, max_delegation_depth=depth)

    return prepare


async def test_an_agent_tool_resolves_and_binds_with_the_default_schema() -> None:
    snapshot = await resolve(task(agentRef="boss"), store())
    bindings, _ = await tool_bindings(snapshot)
    (binding,) = bindings
    assert binding.agent is not None and binding.agent.agent == "helper"
    assert binding.parameters == AGENT_TOOL_INPUT_SCHEMA
    assert not binding.agent.whole_arguments
    assert "helper" in binding.description


async def test_a_parent_gets_its_childs_answer_usage_and_status_children() -> None:
    delegator = FakeDelegator(parent="task", finish_at_once=True)
    outcome = await execute(
        task(agentRef="boss"), store(), model_factory=factory(), prepare=prepared(delegator)
    )
    assert (outcome.phase, outcome.reason) == ("Succeeded", "Succeeded")
    assert delegator.requests[0].input == "2+2"
    assert delegator.requests[0].timeout is not None and delegator.requests[0].timeout > 0
    status = outcome.status()
    assert status.usage.total_tokens == 4 + 50
    assert status.children is not None
    (child,) = status.children
    assert (child.agent, child.phase, child.tokens, child.call_id) == (
        "helper",
        "Succeeded",
        50,
        "c1",
    )


async def test_a_parked_parent_is_awaiting_children_with_no_terminal_status() -> None:
    delegator = FakeDelegator(parent="task")
    outcome = await execute(
        task(agentRef="boss"), store(), model_factory=factory(), prepare=prepared(delegator)
    )
    assert outcome.awaiting_children and not outcome.awaiting
    assert outcome.known_state is not None
    assert [c.phase for c in outcome.known_state.children.values()] == ["Running"]


async def test_a_tool_with_its_own_schema_gives_the_child_its_arguments_object() -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    delegator = FakeDelegator(parent="task", finish_at_once=True)
    outcome = await execute(
        task(agentRef="boss"),
        store(schema=schema),
        model_factory=factory(city="Oslo"),
        prepare=prepared(delegator),
    )
    assert outcome.phase == "Succeeded"
    assert delegator.requests[0].input == {"city": "Oslo"}


async def test_without_a_delegator_the_call_is_told_delegation_is_not_available() -> None:
    outcome = await execute(
        task(agentRef="boss"), store(), model_factory=factory(), prepare=prepared(None)
    )
    assert outcome.phase == "Succeeded"
    assert outcome.result is not None
    assert outcome.result.tool_calls[0].outcome == "error"
    results = [i for i in outcome.result.state.items if getattr(i, "call_id", None) == "c1"]
    assert "delegation is not available here" in results[0].content  # type: ignore[attr-defined]


async def test_a_policys_max_delegation_depth_narrows_the_front_ends() -> None:
    delegator = FakeDelegator(parent="task", finish_at_once=True)
    objects = store(policy("shallow", maxDelegationDepth=0))
    outcome = await execute(
        task(agentRef="boss"), objects, model_factory=factory(), prepare=prepared(delegator, 5)
    )
    assert (outcome.phase, outcome.reason) == ("Failed", "DelegationDepthExceeded")
    assert delegator.requests == []


async def test_a_front_end_depth_of_zero_forbids_delegating() -> None:
    snapshot = await resolve(task(agentRef="boss"), store())
    assert run_config(snapshot, max_delegation_depth=0).max_delegation_depth == 0
    assert run_config(snapshot).max_delegation_depth == DEFAULT_MAX_DEPTH


async def test_the_front_ends_depth_applies_to_a_child_from_its_metadata() -> None:
    body = task_body("child", agentRef="boss")
    body["metadata"]["labels"] = {ROOT_LABEL: "root"}
    body["metadata"]["annotations"] = {CHAIN_ANNOTATION: json.dumps(["top", "boss"])}
    from ordo.api import Task

    the_task = Task.model_validate(body)
    snapshot = await resolve(the_task, store())
    config = run_config(snapshot, max_delegation_depth=1)
    assert (config.lineage.root, config.lineage.chain, config.lineage.depth) == (
        "root",
        ("top", "boss"),
        1,
    )
    assert config.max_delegation_depth == 1
    delegator = FakeDelegator(parent="child", finish_at_once=True)
    outcome = await execute(
        the_task, store(), model_factory=factory(), prepare=prepared(delegator, 1)
    )
    assert outcome.reason == "DelegationDepthExceeded"
    assert delegator.requests == []


async def test_a_cycle_through_the_tasks_chain_is_denied() -> None:
    body = task_body("child", agentRef="boss")
    body["metadata"]["annotations"] = {CHAIN_ANNOTATION: json.dumps(["helper", "boss"])}
    from ordo.api import Task

    delegator = FakeDelegator(parent="child", finish_at_once=True)
    outcome = await execute(
        Task.model_validate(body), store(), model_factory=factory(), prepare=prepared(delegator)
    )
    assert (outcome.phase, outcome.reason) == ("Failed", "DelegationCycle")
    assert delegator.created == 0


async def test_parallel_waiting_calls_each_keep_their_span_and_traceparent() -> None:
    from opentelemetry.trace import StatusCode
    from tests.support.traced import recorded_spans

    objects = DictStore(
        agent("boss", tools=["ask-a", "ask-b"]),
        mock_endpoint(),
        agent_tool("ask-a", "a"),
        agent_tool("ask-b", "b"),
    )
    turn = tools_turn(call("ask-a", "c1", input="x"), call("ask-b", "c2", input="y"))
    delegator = FakeDelegator(parent="task")
    with recorded_spans() as exporter:
        outcome = await execute(
            task(agentRef="boss"),
            objects,
            model_factory=ModelFactory(lambda snapshot: ScriptedModel([turn])),
            prepare=prepared(delegator),
        )
    assert outcome.awaiting_children
    tools = {s.name: s for s in exporter.get_finished_spans() if s.name.startswith("execute")}
    assert set(tools) == {"execute_tool ask-a", "execute_tool ask-b"}
    for span in tools.values():
        assert span.attributes is not None and span.attributes["ordo.tool.outcome"] == "waiting"
        assert span.status.status_code != StatusCode.ERROR
    sent = {r.key: r.traceparent for r in delegator.requests}
    assert sent["c1"] is not None and sent["c2"] is not None
    assert sent["c1"].split("-")[2] == format(tools["execute_tool ask-a"].context.span_id, "016x")
    assert sent["c2"].split("-")[2] == format(tools["execute_tool ask-b"].context.span_id, "016x")
