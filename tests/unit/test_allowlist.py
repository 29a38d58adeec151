"""AgentPolicy `allowedTools` (issue 16 §1): only narrows, several policies intersect, a tool
outside it is never offered, and an Agent that lists one fails `ToolDenied` with zero model
calls. Also: nothing a Task or an Agent says widens what the policies grant."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ordo.api import MEMORY_OPERATIONS, Task
from ordo.engine.governance import Governance
from ordo.runtime import execute
from ordo.runtime.resolve import ResolutionError, resolve
from support.engine_fakes import (
    DictStore,
    ModelFactory,
    ScriptedModel,
    agent,
    answer,
    call,
    memory,
    mock_endpoint,
    mock_tool,
    policy,
    role,
    task,
    tools_turn,
)

TOOLS = ("alpha", "beta", "gamma", "delta")


def counting(turns: list[Any] | None = None) -> ModelFactory:
    return ModelFactory(lambda snapshot: ScriptedModel(turns or [answer("ok")]))


async def denied_before_any_call(store: DictStore, the_task: Task | None = None) -> str:
    """resolve() and execute() fail `ToolDenied` with zero model calls; the message."""
    the_task = the_task or task()
    with pytest.raises(ResolutionError) as info:
        await resolve(the_task, store)
    assert info.value.reason == "ToolDenied"
    factory = counting()
    outcome = await execute(the_task, store, model_factory=factory)
    assert (outcome.phase, outcome.reason, outcome.message) == (
        "Failed",
        "ToolDenied",
        info.value.message,
    )
    assert factory.calls == 0 and outcome.status().to_dict()["step"] == 0
    return info.value.message


def objects(*tools: str, **agent_spec: Any) -> list[dict[str, Any]]:
    return [agent(tools=list(tools), **agent_spec), mock_endpoint(), *map(mock_tool, TOOLS)]


# --------------------------------------------------------------------------------------
# The decision: intersection of every allowlist (property)

allowlist = st.frozensets(st.sampled_from(TOOLS))


@settings(max_examples=300, deadline=None)
@given(
    candidates=st.frozensets(st.sampled_from(TOOLS)),
    lists=st.lists(allowlist, max_size=4),
    blocked=st.frozensets(st.sampled_from(TOOLS)),
    tool=st.sampled_from(TOOLS),
)
def test_a_call_is_allowed_only_inside_every_allowlist(
    candidates: frozenset[str], lists: list[frozenset[str]], blocked: frozenset[str], tool: str
) -> None:
    g = Governance(
        candidate_tools=candidates,
        blocked_by={t: "blocker" for t in blocked},
        allowlists=tuple((f"p{i}", a) for i, a in enumerate(lists)),
    )
    inside_all = all(tool in a for a in lists)
    expected = tool in candidates and tool not in blocked and inside_all
    assert g.decide(tool).allowed is expected
    assert g.offers(tool) is (tool not in blocked and inside_all)
    intersection = candidates - blocked
    for a in lists:
        intersection &= a
    assert g.effective_tools == intersection
    if tool in candidates and tool not in blocked and not inside_all:
        first = next(f"p{i}" for i, a in enumerate(lists) if tool not in a)
        assert g.decide(tool).reason == f"NotAllowedByPolicy: {first}"


@settings(max_examples=200, deadline=None)
@given(
    start=st.lists(allowlist, max_size=3),
    fresh=st.lists(allowlist, max_size=3),
    tool=st.sampled_from(TOOLS),
)
def test_a_re_read_governance_never_allows_what_the_start_time_one_denies(
    start: list[frozenset[str]], fresh: list[frozenset[str]], tool: str
) -> None:
    def gov(lists: list[frozenset[str]]) -> Governance:
        return Governance(
            candidate_tools=frozenset(TOOLS),
            allowlists=tuple((f"p{i}", a) for i, a in enumerate(lists)),
        )

    base, later = gov(start), gov(fresh)
    narrowed = base.narrowed_by(later)
    assert narrowed.decide(tool).allowed is (
        base.decide(tool).allowed and later.decide(tool).allowed
    )
    assert narrowed.offers(tool) is (base.offers(tool) and later.offers(tool))
    # A third re-read is checked against the start, not against the previous re-read.
    again = narrowed.narrowed_by(gov([]))
    assert again.decide(tool).allowed is base.decide(tool).allowed


def test_memory_tools_are_spelled_as_blocked_tools_spells_them() -> None:
    g = Governance(
        candidate_tools=frozenset(),
        memory="notes",
        memory_operations=frozenset(MEMORY_OPERATIONS),
        allowlists=(("p", frozenset({"memory.read", "memory.search"})),),
    )
    assert g.effective_memory_operations == ("read", "search")
    assert g.decide("memory_read", builtin=True).allowed
    assert g.decide("memory_write", builtin=True).reason == "NotAllowedByPolicy: p"
    # The model asks for an unbound memory tool by its visible name: same reason.
    assert g.decide("memory_write").reason == "NotAllowedByPolicy: p"
    assert not g.offers("memory_write", builtin=True)


def test_roles_that_grant_everything_do_not_reach_past_the_allowlist() -> None:
    g = Governance(
        candidate_tools=frozenset({"alpha", "beta"}),
        granted=frozenset({"tool:*:invoke"}),
        has_roles=True,
        allowlists=(("p", frozenset({"alpha"})),),
    )
    assert g.decide("alpha").allowed
    assert g.decide("beta").reason == "NotAllowedByPolicy: p"


# --------------------------------------------------------------------------------------
# Bind time: ToolDenied before any model call


async def test_an_agent_listing_a_tool_outside_the_allowlist_fails_before_any_model_call() -> None:
    store = DictStore(*objects("alpha", "beta"), policy("only-alpha", allowedTools=["alpha"]))
    message = await denied_before_any_call(store)
    assert "'only-alpha'" in message and "beta" in message and "alpha," not in message


async def test_several_allowlists_intersect() -> None:
    lists = [
        policy("a", allowedTools=["alpha", "beta"]),
        policy("b", allowedTools=["beta", "gamma"]),
    ]
    store = DictStore(*objects("beta"), *lists)
    factory = counting()
    outcome = await execute(task(), store, model_factory=factory)
    assert outcome.phase == "Succeeded"
    assert factory.models[0].requests[0].tool_names == {"beta"}
    message = await denied_before_any_call(DictStore(*objects("alpha", "beta"), *lists))
    assert "'b'" in message and "alpha" in message


async def test_an_empty_allowlist_allows_no_tool() -> None:
    await denied_before_any_call(DictStore(*objects("alpha"), policy("none", allowedTools=[])))
    outcome = await execute(task(), DictStore(*objects(), policy("none", allowedTools=[])))
    assert outcome.phase == "Succeeded"


async def test_an_allowlist_of_a_policy_that_does_not_select_the_agent_does_not_apply() -> None:
    other = policy("other", agentSelector={"matchLabels": {"team": "b"}}, allowedTools=[])
    outcome = await execute(task(), DictStore(*objects("alpha"), other))
    assert outcome.phase == "Succeeded"


async def test_the_tools_of_the_tasks_skill_are_what_must_be_inside() -> None:
    skills = [{"name": "lookup", "instructions": "Look up.", "tools": ["alpha"]}]
    store = DictStore(*objects("alpha", "beta", skills=skills), policy("p", allowedTools=["alpha"]))
    outcome = await execute(task(skill="lookup"), store, model_factory=counting())
    assert outcome.phase == "Succeeded"
    await denied_before_any_call(store)  # without the skill the run would offer beta


# --------------------------------------------------------------------------------------
# Nothing in a Task or an Agent widens what a policy grants


async def test_a_skill_cannot_add_a_tool() -> None:
    skills = [{"name": "wide", "instructions": "x", "tools": ["alpha", "gamma"]}]
    store = DictStore(
        *objects("alpha", skills=skills), policy("p", allowedTools=["alpha", "gamma"])
    )
    with pytest.raises(ResolutionError) as info:  # the Agent schema refuses it outright
        await resolve(task(skill="wide"), store)
    assert info.value.reason == "InvalidSpec" and "skill" in info.value.message


async def test_memory_allow_naming_an_operation_outside_the_allowlist_fails() -> None:
    spec = {"memory": {"ref": "mem", "allow": ["read", "write"]}}
    store = DictStore(*objects(**spec), memory(), policy("p", allowedTools=["memory.read"]))
    message = await denied_before_any_call(store)
    assert "memory.write" in message and "memory.read" not in message


async def test_memory_operations_left_implicit_are_narrowed_to_the_allowlist() -> None:
    store = DictStore(
        *objects("alpha", memory={"ref": "mem"}),
        memory(),
        policy("p", allowedTools=["alpha", "memory.read", "memory.list"]),
    )
    factory = counting()
    outcome = await execute(task(), store, model_factory=factory)
    assert outcome.phase == "Succeeded"
    assert factory.models[0].requests[0].tool_names == {"alpha", "memory_read", "memory_list"}


async def test_a_role_granting_every_tool_does_not_widen_the_allowlist() -> None:
    store = DictStore(
        *objects("alpha", "beta", roles=["admin"]),
        role("admin", "tool:*:invoke"),
        policy("p", allowedTools=["alpha"]),
    )
    await denied_before_any_call(store)


async def test_task_limits_cannot_raise_a_policy_cap() -> None:
    store = DictStore(*objects("alpha"), policy("p", allowedTools=["alpha"], maxSteps=2))
    snap = await resolve(task(limits={"maxSteps": 50, "maxTokens": 10**9}), store)
    assert snap.max_steps == 2
    assert snap.governance.effective_tools == frozenset({"alpha"})


async def test_a_model_asking_for_a_tool_outside_the_allowlist_is_denied_not_run() -> None:
    # The Agent lists only alpha; the model invents gamma, which the allowlist also excludes.
    store = DictStore(*objects("alpha"), policy("p", allowedTools=["alpha"]))
    factory = counting([tools_turn(call("gamma", "c1"))])
    outcome = await execute(task(), store, model_factory=factory)
    assert (outcome.phase, outcome.reason) == ("Failed", "ToolDenied")
    (record,) = outcome.status().to_dict()["toolCalls"]
    assert (record["decision"], record["reason"]) == ("denied", "NotOffered")
