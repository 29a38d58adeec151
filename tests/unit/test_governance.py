"""Governance (DESIGN §4): the decision for one tool call, in order, failing closed. Tested on
the Governance object directly and on the one resolve() builds from an object store."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from ordo.api import MEMORY_OPERATIONS
from ordo.api.task import TaskStatus
from ordo.api.task import ToolCallRecord as ApiToolCallRecord
from ordo.engine.governance import (
    REASON_MAX_CHARS,
    TRUNCATED_MARKER,
    Decision,
    Governance,
    PermissionRule,
)
from ordo.engine.loop import run_agent
from ordo.engine.model import ModelResponse
from ordo.errors import PolicyUnavailable
from ordo.memory import InMemoryBackend
from ordo.memory.base import Entry
from ordo.memory.inmemory import shared_backend
from ordo.providers.mock import MockModelClient
from ordo.runtime.execute import execute
from ordo.runtime.resolve import resolve
from ordo.tools.memory_tools import memory_bindings
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
    permission,
    policy,
    result_for,
    role,
    run_config,
    task,
    tools_turn,
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
# Built-in memory tools: governed like any tool


def mgov(**kw: Any) -> Governance:
    """A Governance whose Agent wires in the Memory `notes` with every operation."""
    kw.setdefault("memory", "notes")
    kw.setdefault("memory_operations", frozenset(MEMORY_OPERATIONS))
    return gov(**kw)


def mdecide(g: Governance, tool: str) -> tuple[bool, str]:
    d = g.decide(tool, builtin=True)
    return d.allowed, d.reason


def test_memory_tools_without_roles_or_permissions_are_allowed() -> None:
    g = mgov()
    for op in MEMORY_OPERATIONS:
        assert mdecide(g, f"memory_{op}") == (True, "NoPermissionRequired")
    assert g.effective_memory_operations == MEMORY_OPERATIONS


def test_cannot_decide_denies_memory_tools() -> None:
    g = mgov(unreadable="AgentPolicies could not be read (403 forbidden)")
    for op in MEMORY_OPERATIONS:
        assert mdecide(g, f"memory_{op}") == (
            False,
            "CannotDecide: AgentPolicies could not be read (403 forbidden)",
        )


@pytest.mark.parametrize(
    ("kw", "tool"),
    [
        ({"memory_operations": frozenset({"read"})}, "memory_write"),  # outside memory.allow
        ({"memory": None}, "memory_read"),  # no Memory wired in
        ({"memory_operations": frozenset()}, "memory_read"),  # memory.allow: []
        ({}, "memory_delete"),  # no such operation
        ({}, "memory_"),
        ({}, "search"),  # a Tool name is not a memory tool
    ],
)
def test_memory_tool_not_offered_is_denied(kw: dict[str, Any], tool: str) -> None:
    assert mdecide(mgov(**kw), tool) == (False, "NotOffered")


def test_default_governance_offers_no_memory_tool() -> None:
    """Built without memory fields (fail closed): no memory tool is offered."""
    g = gov()
    assert mdecide(g, "memory_read") == (False, "NotOffered")
    assert g.effective_memory_operations == ()


def test_a_tool_call_named_like_a_memory_tool_is_not_a_memory_call() -> None:
    """Only a built-in binding is decided as memory; the name alone never allows."""
    assert (mgov().decide("memory_read").allowed, mgov().decide("memory_read").reason) == (
        False,
        "NotOffered",
    )


def test_an_unbound_blocked_memory_tool_is_denied_naming_the_policy() -> None:
    """A blocked memory operation is not bound, so the loop decides its name as a plain call:
    the denial still names the policy (only ever a denial)."""
    g = mgov(blocked_by={"memory.write": "no-writes"})
    d = g.decide("memory_write")
    assert (d.allowed, d.reason) == (False, "BlockedByPolicy: no-writes")
    assert g.decide("memory_read").reason == "NotOffered"
    no_memory = gov(blocked_by={"memory.write": "no-writes"})
    assert no_memory.decide("memory_write").reason == "NotOffered"


@pytest.mark.parametrize("spelling", ["memory.write", "memory_write"])
def test_policy_blocking_a_memory_tool_denies_it(spelling: str) -> None:
    g = mgov(blocked_by={spelling: "no-memory-writes"})
    assert mdecide(g, "memory_write") == (False, "BlockedByPolicy: no-memory-writes")
    assert mdecide(g, "memory_read") == (True, "NoPermissionRequired")
    assert g.effective_memory_operations == ("read", "search", "list", "ingest")
    assert g.effective_tools == frozenset({"search", "delete", "deploy"})


def test_blocking_a_tool_does_not_block_memory_and_vice_versa() -> None:
    g = mgov(candidate_tools=frozenset({"write"}), blocked_by={"write": "p"})
    assert mdecide(g, "memory_write")[0]
    g2 = mgov(candidate_tools=frozenset({"write"}), blocked_by={"memory.write": "p"})
    assert g2.decide("write").allowed


def test_memory_with_roles_needs_the_memory_permission() -> None:
    g = mgov(has_roles=True, granted=frozenset({"memory:notes:read", "tool:*:invoke"}))
    assert mdecide(g, "memory_read") == (True, "Granted: memory:notes:read")
    assert mdecide(g, "memory_write") == (False, "MissingPermission: memory:notes:write")


@pytest.mark.parametrize(
    ("grant", "tool", "allowed"),
    [
        ("memory:notes:*", "memory_ingest", True),
        ("memory:*:search", "memory_search", True),
        ("*:*:*", "memory_list", True),
        ("memory:*:search", "memory_read", False),
        ("memory:other:*", "memory_read", False),
        ("tool:memory_read:invoke", "memory_read", False),
        ("tool:memory.read:invoke", "memory_read", False),
    ],
)
def test_memory_wildcard_grants(grant: str, tool: str, allowed: bool) -> None:
    g = mgov(has_roles=True, granted=frozenset({grant}))
    assert g.decide(tool, builtin=True).allowed is allowed


def test_missing_role_denies_memory_tools() -> None:
    g = mgov(has_roles=True, missing_roles=("ghost",), granted=frozenset({"memory:*:*"}))
    assert mdecide(g, "memory_read") == (False, "RoleNotFound: ghost")


def test_tool_permission_naming_a_memory_tool_applies() -> None:
    g = mgov(rules={"memory.write": (rule("guard-writes", "data:notes:write"),)})
    assert mdecide(g, "memory_write") == (
        False,
        "MissingPermission: all of data:notes:write (guard-writes)",
    )
    assert mdecide(g, "memory_read")[0]
    held = mgov(
        rules={"memory_write": (rule("guard-writes", "data:notes:write"),)},
        has_roles=True,
        granted=frozenset({"data:notes:write"}),
    )
    assert mdecide(held, "memory_write") == (True, "Granted")


def test_memory_decision_order() -> None:
    """CannotDecide, then NotOffered, then BlockedByPolicy, then RoleNotFound."""
    full = dict(
        blocked_by={"memory.write": "p"},
        has_roles=True,
        missing_roles=("ghost",),
        memory_operations=frozenset({"write", "read"}),
    )
    assert mdecide(mgov(**full, unreadable="x"), "memory_list")[1] == "CannotDecide: x"
    assert mdecide(mgov(**full), "memory_list")[1] == "NotOffered"
    assert mdecide(mgov(**full), "memory_write")[1] == "BlockedByPolicy: p"
    assert mdecide(mgov(**full), "memory_read")[1] == "RoleNotFound: ghost"


# --------------------------------------------------------------------------------------
# Reasons are bounded (status.toolCalls[].reason has maxLength 1024)


def test_a_5000_character_denial_reason_is_capped_with_a_marker() -> None:
    required = tuple(f"perm:p{i:05d}:invoke" for i in range(250))
    g = gov(rules={"deploy": (rule("huge", *required),)}, has_roles=True)
    full = f"MissingPermission: all of {', '.join(required)} (huge)"
    assert len(full) > 5000
    d = g.decide("deploy")
    assert not d.allowed
    assert len(d.reason) == REASON_MAX_CHARS
    assert d.reason.endswith(TRUNCATED_MARKER)
    assert d.reason.startswith("MissingPermission: all of perm:p00000:invoke")
    TaskStatus(tool_calls=[ApiToolCallRecord(1, "deploy", "denied", d.reason)])  # fits the CRD


def test_cannot_decide_reason_is_capped_and_on_one_line() -> None:
    d = mgov(unreadable="list AgentPolicy: 500\n" + "x" * 5000).decide("memory_read", builtin=True)
    assert not d.allowed
    assert len(d.reason) <= REASON_MAX_CHARS and d.reason.endswith(TRUNCATED_MARKER)
    assert d.reason.isprintable()


def test_short_reasons_are_unchanged() -> None:
    assert Decision(False, "x" * REASON_MAX_CHARS).reason == "x" * REASON_MAX_CHARS
    assert Decision(False, "x" * (REASON_MAX_CHARS + 1)).reason.endswith(TRUNCATED_MARKER)
    assert len(Decision(False, "x" * (REASON_MAX_CHARS + 1)).reason) == REASON_MAX_CHARS
    assert Decision(False, "short\nbut two lines\x1b[0m").reason == "short but two lines [0m"


# --------------------------------------------------------------------------------------
# Through run_agent: a denied memory call never executes


class CountingBackend(InMemoryBackend):
    """An in-memory backend that counts every operation it runs."""

    def __init__(self) -> None:
        super().__init__()
        self.operations: list[str] = []

    async def read(self, key: str) -> str | None:
        self.operations.append("read")
        return await super().read(key)

    async def write(self, key: str, value: str) -> None:
        self.operations.append("write")
        await super().write(key, value)

    async def search(self, query: str, limit: int = 5) -> list[Entry]:
        self.operations.append("search")
        return await super().search(query, limit)

    async def list(self, prefix: str = "", limit: int = 50) -> list[str]:
        self.operations.append("list")
        return await super().list(prefix, limit)


def memory_run(
    governance: Governance, *turns: ModelResponse, on_tool_denied: str = "Fail"
) -> tuple[CountingBackend, ScriptedModel, Any]:
    backend = CountingBackend()
    bindings = memory_bindings(backend, MEMORY_OPERATIONS)
    model = ScriptedModel(list(turns))
    config = run_config(governance, on_tool_denied=on_tool_denied)
    return backend, model, run_agent(config, model, bindings)


async def test_run_cannot_decide_denies_memory_and_never_executes() -> None:
    g = mgov(candidate_tools=frozenset(), unreadable="AgentPolicies could not be read")
    backend, model, run = memory_run(
        g, tools_turn(call("memory_read", "c1", key="k")), answer("ok")
    )
    result = await run
    assert (result.phase, result.reason) == ("Failed", "ToolDenied")
    (record,) = result.tool_calls
    assert (record.decision, record.outcome) == ("denied", "skipped")
    assert record.reason.startswith("CannotDecide: AgentPolicies")
    assert backend.operations == []
    assert model.calls == 1


async def test_run_policy_block_denies_memory_write_and_return_error_continues() -> None:
    g = mgov(blocked_by={"memory.write": "read-only-memory"})
    backend, _, run = memory_run(
        g,
        tools_turn(call("memory_write", "c1", key="k", value="v")),
        tools_turn(call("memory_read", "c2", key="k")),
        answer("ok"),
        on_tool_denied="ReturnError",
    )
    result = await run
    assert result.phase == "Succeeded"
    assert [(r.tool, r.decision, r.reason, r.outcome) for r in result.tool_calls] == [
        ("memory_write", "denied", "BlockedByPolicy: read-only-memory", "skipped"),
        ("memory_read", "allowed", "NoPermissionRequired", "error"),  # nothing was written
    ]
    assert backend.operations == ["read"]
    denied = result_for(result.state, "c1")
    assert denied.is_error and "not permitted" in denied.content


async def test_run_denied_memory_record_has_a_bounded_reason() -> None:
    required = tuple(f"perm:p{i:05d}:invoke" for i in range(250))
    g = mgov(rules={"memory.write": (rule("huge", *required),)})
    backend, _, run = memory_run(g, tools_turn(call("memory_write", "c1", key="k", value="v")))
    result = await run
    (record,) = result.tool_calls
    assert record.decision == "denied" and len(record.reason) <= REASON_MAX_CHARS
    TaskStatus.model_validate({"toolCalls": [record.to_dict()]})  # fits the CRD
    assert backend.operations == []


async def test_run_agent_without_roles_uses_memory_as_before() -> None:
    backend, _, run = memory_run(
        mgov(),
        tools_turn(call("memory_write", "c1", key="k", value="v")),
        tools_turn(call("memory_write", "c2", key="k", value="w")),  # built-ins: no AlreadyCalled
        tools_turn(call("memory_read", "c3", key="k")),
        answer("ok"),
    )
    result = await run
    assert result.phase == "Succeeded"
    assert [(r.decision, r.reason, r.outcome) for r in result.tool_calls] == [
        ("allowed", "NoPermissionRequired", "succeeded")
    ] * 3
    assert backend.operations == ["write", "write", "read"]
    assert result_for(result.state, "c3").content == "w"


async def test_run_agent_with_roles_needs_the_memory_permission() -> None:
    g = mgov(has_roles=True, granted=frozenset({"memory:notes:read"}))
    backend, _, run = memory_run(
        g,
        tools_turn(call("memory_write", "c1", key="k", value="v")),
    )
    result = await run
    assert result.reason == "ToolDenied"
    assert [(r.decision, r.reason) for r in result.tool_calls] == [
        ("denied", "MissingPermission: memory:notes:write")
    ]
    assert backend.operations == []


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


async def test_invalid_permission_fails_closed() -> None:
    store = DictStore(*base_objects(), permission("broken", "delete", "not a permission"))
    allowed, reason = await decide(store, "search")
    assert not allowed and reason.startswith("CannotDecide:") and "'broken' is invalid" in reason


@pytest.mark.parametrize(
    ("store_kw", "extra"),
    [
        ({"fail_list": ["AgentPolicy"]}, []),
        ({}, [policy("broken", blockedTools="delete")]),  # not a list
    ],
)
async def test_unavailable_policies_fail_the_resolution(
    store_kw: dict[str, Any], extra: list[dict[str, Any]]
) -> None:
    """Policies carry caps as well as blocks: without them there is no run at all."""
    store = DictStore(*base_objects(), *extra, **store_kw)
    with pytest.raises(PolicyUnavailable):
        await resolve(task(), store)


async def test_invalid_role_fails_closed() -> None:
    store = DictStore(*base_objects(roles=["reader"]), role("reader", "NOT-VALID"))
    allowed, reason = await decide(store, "search")
    assert not allowed and reason == "CannotDecide: AgentRole 'reader' is invalid"


async def test_unreadable_permissions_end_a_run_tool_denied_without_executing() -> None:
    """End to end: the mock model calls `search`; the ToolPermissions cannot be read, so the
    call is denied and the Task fails with ToolDenied; the tool's canned result never appears."""
    objs = [
        agent(tools=["search"]),
        mock_endpoint(turns=[turn_calls(("search", {"q": "x"})), {"text": "done"}]),
        mock_tool("search", result="RESULT-CANARY"),
    ]
    factory = ModelFactory(lambda s: MockModelClient(s.endpoint))
    outcome = await execute(
        task(), DictStore(*objs, fail_list=["ToolPermission"]), model_factory=factory
    )
    assert (outcome.phase, outcome.reason) == ("Failed", "ToolDenied")
    assert factory.calls == 1
    status = outcome.status().to_dict()
    (record,) = status["toolCalls"]
    assert record["decision"] == "denied" and record["reason"].startswith("CannotDecide:")
    assert record["outcome"] == "skipped"
    assert outcome.result is not None
    assert "RESULT-CANARY" not in repr(outcome.result.state.items)


async def test_unreadable_permissions_deny_memory_tools_end_to_end() -> None:
    """The cannot-decide state denies the built-in memory tools too: nothing is written."""
    backend_prefix = f"test/{uuid.uuid4()}"
    objs = [
        agent(tools=[], memory={"ref": "notes"}),
        mock_endpoint(
            turns=[turn_calls(("memory_write", {"key": "k", "value": "CANARY"})), {"text": "x"}]
        ),
        memory("notes", prefix=backend_prefix),
    ]
    factory = ModelFactory(lambda s: MockModelClient(s.endpoint))
    outcome = await execute(
        task(), DictStore(*objs, fail_list=["ToolPermission"]), model_factory=factory
    )
    assert (outcome.phase, outcome.reason) == ("Failed", "ToolDenied")
    (record,) = outcome.status().to_dict()["toolCalls"]
    assert (record["tool"], record["decision"], record["outcome"]) == (
        "memory_write",
        "denied",
        "skipped",
    )
    assert record["reason"].startswith("CannotDecide: ToolPermissions could not be read")
    assert await shared_backend(backend_prefix).list() == []
