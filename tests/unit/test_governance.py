"""Governance (DESIGN §4): the decision for one tool call, in order, failing closed. Tested on
the Governance object directly and on the one resolve() builds from an object store."""

from __future__ import annotations

from typing import Any

import pytest

from ordo.engine.governance import Governance, PermissionRule
from ordo.engine.resolve import resolve
from ordo.execution import execute
from ordo.providers.mock import MockModelClient
from support.engine_fakes import (
    DictStore,
    ModelFactory,
    agent,
    mock_endpoint,
    mock_tool,
    permission,
    policy,
    role,
    task,
    turn_calls,
)


def gov(**kw: Any) -> Governance:
    kw.setdefault("candidate_tools", frozenset({"search", "delete", "deploy"}))
    return Governance(**kw)


def rule(name: str, *required: str, mode: str = "all") -> PermissionRule:
    return PermissionRule(name, tuple(required), mode)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------
# Governance.decide


def test_no_roles_and_no_permissions_allows_offered_tools() -> None:
    d = gov().decide("search")
    assert (d.allowed, d.reason) == (True, "NoPermissionRequired")


def test_tool_not_offered_is_denied() -> None:
    d = gov().decide("rm-rf")
    assert (d.allowed, d.reason) == (False, "NotOffered")


def test_blocked_by_policy_is_denied_and_names_the_policy() -> None:
    g = gov(blocked_by={"delete": "no-deletes"})
    d = g.decide("delete")
    assert (d.allowed, d.reason) == (False, "BlockedByPolicy: no-deletes")
    assert g.decide("search").allowed
    assert g.effective_tools == frozenset({"search", "deploy"})


def test_missing_role_denies_every_tool() -> None:
    g = gov(has_roles=True, missing_roles=("ghost-role",), granted=frozenset({"tool:*:invoke"}))
    for tool in ("search", "delete"):
        d = g.decide(tool)
        assert (d.allowed, d.reason) == (False, "RoleNotFound: ghost-role")


def test_roles_without_a_tool_permission_need_tool_invoke() -> None:
    g = gov(has_roles=True, granted=frozenset({"tool:search:invoke"}))
    assert (g.decide("search").allowed, g.decide("search").reason) == (
        True,
        "Granted: tool:search:invoke",
    )
    d = g.decide("delete")
    assert (d.allowed, d.reason) == (False, "MissingPermission: tool:delete:invoke")


def test_tool_permission_applies_even_without_roles() -> None:
    g = gov(rules={"delete": (rule("delete-invoke", "tool:delete:invoke"),)})
    d = g.decide("delete")
    assert not d.allowed
    assert d.reason == "MissingPermission: all of tool:delete:invoke (delete-invoke)"
    assert g.decide("search").allowed  # only the guarded tool


def test_match_mode_all_needs_every_permission() -> None:
    rules = {"deploy": (rule("deploy-perm", "tool:deploy:invoke", "env:prod:write"),)}
    both = gov(
        rules=rules, has_roles=True, granted=frozenset({"tool:deploy:invoke", "env:prod:write"})
    )
    assert (both.decide("deploy").allowed, both.decide("deploy").reason) == (True, "Granted")
    one = gov(rules=rules, has_roles=True, granted=frozenset({"tool:deploy:invoke"}))
    d = one.decide("deploy")
    assert not d.allowed
    assert d.reason == "MissingPermission: all of env:prod:write (deploy-perm)"


def test_match_mode_any_needs_one_permission() -> None:
    rules = {"deploy": (rule("deploy-perm", "env:prod:write", "env:staging:write", mode="any"),)}
    one = gov(rules=rules, has_roles=True, granted=frozenset({"env:staging:write"}))
    assert one.decide("deploy").allowed
    none = gov(rules=rules, has_roles=True, granted=frozenset({"tool:deploy:invoke"}))
    d = none.decide("deploy")
    assert not d.allowed
    assert d.reason == "MissingPermission: any of env:prod:write, env:staging:write (deploy-perm)"


def test_every_tool_permission_naming_the_tool_must_hold() -> None:
    rules = {
        "deploy": (
            rule("a-any", "env:prod:write", "env:staging:write", mode="any"),
            rule("b-all", "tool:deploy:invoke"),
        )
    }
    g = gov(rules=rules, has_roles=True, granted=frozenset({"env:staging:write"}))
    d = g.decide("deploy")
    assert not d.allowed and d.reason.endswith("(b-all)")
    g2 = gov(
        rules=rules, has_roles=True, granted=frozenset({"env:staging:write", "tool:deploy:invoke"})
    )
    assert g2.decide("deploy").allowed


@pytest.mark.parametrize(
    ("grant", "tool", "allowed"),
    [
        ("tool:*:invoke", "delete", True),
        ("*:*:*", "delete", True),
        ("tool:*:*", "deploy", True),
        ("tool:de*:invoke", "delete", True),
        ("tool:de*:invoke", "search", False),
        ("tool:*:read", "search", False),
        ("tool:*", "search", False),  # a different number of segments never matches
        ("memory:*:invoke", "search", False),
    ],
)
def test_wildcard_grants(grant: str, tool: str, allowed: bool) -> None:
    g = gov(has_roles=True, granted=frozenset({grant}))
    assert g.decide(tool).allowed is allowed


def test_wildcard_grants_satisfy_tool_permissions() -> None:
    g = gov(
        rules={"deploy": (rule("p", "tool:deploy:invoke", "env:prod:write"),)},
        has_roles=True,
        granted=frozenset({"tool:*:invoke", "env:*:write"}),
    )
    assert g.decide("deploy").allowed


def test_a_required_wildcard_is_not_granted_by_a_specific_permission() -> None:
    g = gov(
        rules={"deploy": (rule("p", "env:*:write"),)},
        has_roles=True,
        granted=frozenset({"env:prod:write"}),
    )
    assert not g.decide("deploy").allowed


def test_unreadable_input_denies_every_call() -> None:
    g = gov(unreadable="AgentPolicies could not be read (403 forbidden)")
    for tool in ("search", "delete", "not-offered"):
        d = g.decide(tool)
        assert not d.allowed
        assert d.reason == "CannotDecide: AgentPolicies could not be read (403 forbidden)"


def test_order_not_offered_before_blocked() -> None:
    g = Governance(candidate_tools=frozenset({"search"}), blocked_by={"delete": "p"})
    assert g.decide("delete").reason == "NotOffered"


def test_order_blocked_before_missing_role_before_permission() -> None:
    g = gov(
        blocked_by={"delete": "p"},
        has_roles=True,
        missing_roles=("ghost",),
        rules={"delete": (rule("r", "x:y:z"),), "search": (rule("r2", "x:y:z"),)},
    )
    assert g.decide("delete").reason == "BlockedByPolicy: p"
    assert g.decide("search").reason == "RoleNotFound: ghost"


# --------------------------------------------------------------------------------------
# The Governance that resolve() builds


def base_objects(**agent_spec: Any) -> list[dict[str, Any]]:
    agent_spec.setdefault("tools", ["search", "delete"])
    return [
        agent(**agent_spec),
        mock_endpoint(),
        mock_tool("search"),
        mock_tool("delete"),
    ]


async def decide(store: DictStore, tool: str) -> tuple[bool, str]:
    snapshot = await resolve(task(), store)
    d = snapshot.governance.decide(tool)
    return d.allowed, d.reason


async def test_resolved_policy_blocks_only_selected_agents() -> None:
    objs = base_objects(labels={"tier": "intern"})
    blocked = policy(
        "interns", agentSelector={"matchLabels": {"tier": "intern"}}, blockedTools=["delete"]
    )
    assert await decide(DictStore(*objs, blocked), "delete") == (False, "BlockedByPolicy: interns")
    other = policy(
        "seniors", agentSelector={"matchLabels": {"tier": "senior"}}, blockedTools=["delete"]
    )
    assert await decide(DictStore(*objs, other), "delete") == (True, "NoPermissionRequired")
    everyone = policy("everyone", blockedTools=["delete"])  # no selector: every Agent
    assert (await decide(DictStore(*objs, everyone), "delete"))[0] is False


async def test_resolved_roles_and_permissions() -> None:
    objs = [
        *base_objects(roles=["reader"]),
        role("reader", "tool:search:invoke"),
        permission(
            "delete-invoke", "delete", "tool:delete:invoke", "data:customers:delete", mode="any"
        ),
    ]
    store = DictStore(*objs)
    assert await decide(store, "search") == (True, "Granted: tool:search:invoke")
    allowed, reason = await decide(store, "delete")
    assert (
        not allowed
        and reason.startswith("MissingPermission: any of")
        and "(delete-invoke)" in reason
    )
    store.put(role("reader", "tool:search:invoke", "data:customers:delete"))
    assert await decide(store, "delete") == (True, "Granted")


async def test_resolved_missing_role_denies() -> None:
    store = DictStore(*base_objects(roles=["reader", "ghost"]), role("reader", "tool:*:invoke"))
    assert await decide(store, "search") == (False, "RoleNotFound: ghost")


async def test_resolved_permissions_of_other_namespaces_do_not_count() -> None:
    from support.engine_fakes import obj

    foreign = obj("AgentRole", "reader", {"permissions": ["tool:*:invoke"]}, namespace="other")
    store = DictStore(*base_objects(roles=["reader"]), foreign)
    assert await decide(store, "search") == (False, "RoleNotFound: reader")


@pytest.mark.parametrize(
    ("store_kw", "what"),
    [
        ({"fail_list": ["AgentPolicy"]}, "AgentPolicies could not be read"),
        ({"fail_list": ["ToolPermission"]}, "ToolPermissions could not be read"),
        ({"fail_get": ["AgentRole"]}, "AgentRole 'reader' could not be read"),
    ],
)
async def test_store_errors_fail_closed(store_kw: dict[str, Any], what: str) -> None:
    store = DictStore(*base_objects(roles=["reader"]), role("reader", "tool:*:invoke"), **store_kw)
    for tool in ("search", "delete"):
        allowed, reason = await decide(store, tool)
        assert not allowed
        assert reason.startswith(f"CannotDecide: {what}")


@pytest.mark.parametrize(
    "bad",
    [
        policy("broken", blockedTools="delete"),  # not a list
        permission("broken", "delete", "not a permission"),
    ],
)
async def test_invalid_policy_or_permission_fails_closed(bad: dict[str, Any]) -> None:
    store = DictStore(*base_objects(), bad)
    allowed, reason = await decide(store, "search")
    assert not allowed and reason.startswith("CannotDecide:") and "'broken' is invalid" in reason


async def test_invalid_role_fails_closed() -> None:
    store = DictStore(*base_objects(roles=["reader"]), role("reader", "NOT-VALID"))
    allowed, reason = await decide(store, "search")
    assert not allowed and reason == "CannotDecide: AgentRole 'reader' is invalid"


async def test_unreadable_policies_end_a_run_tool_denied_without_executing() -> None:
    """End to end: the mock model calls `search`; the policy list cannot be read, so the call
    is denied and the Task fails with ToolDenied; the tool's canned result never appears."""
    objs = [
        agent(tools=["search"]),
        mock_endpoint(turns=[turn_calls(("search", {"q": "x"})), {"text": "done"}]),
        mock_tool("search", result="RESULT-CANARY"),
    ]
    factory = ModelFactory(lambda s: MockModelClient(s.endpoint))
    outcome = await execute(
        task(), DictStore(*objs, fail_list=["AgentPolicy"]), model_factory=factory
    )
    assert (outcome.phase, outcome.reason) == ("Failed", "ToolDenied")
    assert factory.calls == 1
    status = outcome.status()
    (record,) = status["toolCalls"]
    assert record["decision"] == "denied" and record["reason"].startswith("CannotDecide:")
    assert record["outcome"] == "skipped"
    assert outcome.result is not None
    assert "RESULT-CANARY" not in repr(outcome.result.state.items)
