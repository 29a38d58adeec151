"""The parse cache of referenced objects (ordo.runtime.parsecache): an object that has not
changed (same uid and resourceVersion) is parsed and checked once; a new resourceVersion is
parsed again; an invalid object is rejected every time; the cache stays bounded."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from ordo.api import Agent, Tool
from ordo.errors import PolicyUnavailable
from ordo.runtime import execute
from ordo.runtime.parsecache import CACHE, ParseCache
from ordo.runtime.policies import live_policy, permissions, selecting_policies
from ordo.runtime.resolve import ResolutionError, resolve
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

SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
NEW_SCHEMA = {"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]}
INVALID_SCHEMA = {"type": "objekt"}


def versioned(body: dict[str, Any], version: int = 1, uid: str | None = None) -> dict[str, Any]:
    """`body` as the API server returns it: with a uid and a resourceVersion."""
    meta = body["metadata"]
    meta["uid"] = uid or meta.get("uid") or str(uuid.uuid4())
    meta["resourceVersion"] = str(version)
    return body


def cluster_objects(**tool_spec: Any) -> list[dict[str, Any]]:
    tool_spec.setdefault("inputSchema", SCHEMA)
    return [
        versioned(agent(tools=["search"])),
        versioned(mock_endpoint()),
        versioned(mock_tool("search", **tool_spec)),
    ]


def tool_body(store: DictStore, name: str = "search") -> dict[str, Any]:
    return store.objects[("Tool", "default", name)]


async def test_an_unchanged_object_is_parsed_once() -> None:
    store = DictStore(*cluster_objects())
    first = await resolve(task(), store)
    second = await resolve(task("other"), store)
    assert second.agent is first.agent
    assert second.endpoint is first.endpoint
    assert second.tools["search"].tool is first.tools["search"].tool


async def test_a_changed_tool_is_seen_by_the_next_task() -> None:
    store = DictStore(*cluster_objects())
    first = await resolve(task(), store)
    assert first.tools["search"].tool.spec.input_schema == SCHEMA
    changed = tool_body(store)
    changed["spec"]["inputSchema"] = NEW_SCHEMA
    changed["spec"]["description"] = "the new search"
    store.put(versioned(changed, version=2))
    second = await resolve(task("other"), store)
    tool = second.tools["search"].tool
    assert tool.spec.input_schema == NEW_SCHEMA
    assert tool.spec.description == "the new search"
    assert tool.metadata.resource_version == "2"
    assert second.content_hash != first.content_hash
    assert second.agent is first.agent  # the unchanged Agent stays cached


async def test_a_deleted_tool_is_not_found_by_the_next_task() -> None:
    store = DictStore(*cluster_objects())
    await resolve(task(), store)
    del store.objects[("Tool", "default", "search")]
    with pytest.raises(ResolutionError) as info:
        await resolve(task("other"), store)
    assert info.value.reason == "ToolNotFound"


async def test_an_invalid_schema_is_rejected_every_time_with_the_same_error() -> None:
    store = DictStore(*cluster_objects())
    await resolve(task(), store)  # version 1 is valid and cached
    broken = tool_body(store)
    broken["spec"]["inputSchema"] = INVALID_SCHEMA
    store.put(versioned(broken, version=2))
    messages = []
    for name in ("t1", "t2", "t3"):
        with pytest.raises(ResolutionError) as info:
            await resolve(task(name), store)
        assert info.value.reason == "InvalidSpec"
        messages.append(info.value.message)
    assert messages[0] == messages[1] == messages[2]
    assert messages[0].startswith("Tool 'search' is invalid at spec.inputSchema")
    assert "'objekt' is not valid" in messages[0]
    fixed = tool_body(store)
    fixed["spec"]["inputSchema"] = NEW_SCHEMA
    store.put(versioned(fixed, version=3))
    assert (await resolve(task("t4"), store)).tools["search"].tool.spec.input_schema == NEW_SCHEMA


async def test_objects_without_a_version_are_parsed_every_time() -> None:
    """`ordo run` manifests carry no uid/resourceVersion: nothing is cached for them."""
    store = DictStore(agent(tools=["search"]), mock_endpoint(), mock_tool("search"))
    first = await resolve(task(), store)
    second = await resolve(task("other"), store)
    assert second.tools["search"].tool is not first.tools["search"].tool
    assert second.agent is not first.agent


def test_the_cache_is_bounded_and_keeps_the_most_recently_used() -> None:
    cache = ParseCache(maxsize=3)
    bodies = [versioned(mock_tool(f"t{i}")) for i in range(10)]
    parsed = []
    for body in bodies:
        parsed.append(cache.parse(Tool, body, "Tool"))
        assert len(cache) <= 3
    assert len(cache) == 3
    assert cache.parse(Tool, bodies[-1], "Tool") is parsed[-1]  # kept
    assert cache.parse(Tool, bodies[0], "Tool") is not parsed[0]  # evicted, parsed again
    assert len(cache) == 3


def test_a_new_version_replaces_the_old_entry() -> None:
    cache = ParseCache(maxsize=10)
    uid = str(uuid.uuid4())
    one = cache.parse(Tool, versioned(mock_tool("t"), 1, uid), "Tool")
    two = cache.parse(Tool, versioned(mock_tool("t", description="new"), 2, uid), "Tool")
    assert len(cache) == 1
    assert one.spec.description != two.spec.description == "new"
    assert cache.parse(Tool, versioned(mock_tool("t", description="new"), 2, uid), "Tool") is two


def test_the_kind_is_part_of_the_key() -> None:
    cache = ParseCache(maxsize=10)
    uid = str(uuid.uuid4())
    tool = cache.parse(Tool, versioned(mock_tool("t"), 1, uid), "Tool")
    the_agent = cache.parse(Agent, versioned(agent("t"), 1, uid), "Agent")
    assert isinstance(tool, Tool) and isinstance(the_agent, Agent)


def test_a_failed_check_is_not_cached() -> None:
    cache = ParseCache(maxsize=10)
    body = versioned(mock_tool("t"))
    calls = []

    def refuse(tool: Tool) -> None:
        calls.append(tool)
        raise ResolutionError("InvalidSpec", "refused")

    for _ in range(2):
        with pytest.raises(ResolutionError, match="refused"):
            cache.parse(Tool, body, "Tool", check=refuse)
    assert len(calls) == 2 and len(cache) == 0


async def test_runs_do_not_mutate_the_cached_objects() -> None:
    """Two runs (tool call, output schema) share the cached models: neither changes them."""
    objs = [
        versioned(
            agent(
                tools=["search"],
                outputSchema={"type": "object", "properties": {"ok": {"type": "boolean"}}},
            )
        ),
        versioned(
            mock_endpoint(turns=[turn_calls(("search", {"q": "x"})), {"text": '{"ok": true}'}])
        ),
        versioned(mock_tool("search", result="found", inputSchema=SCHEMA)),
    ]
    store = DictStore(*objs)
    snapshot = await resolve(task(), store)
    before = [
        m.model_dump(mode="json")
        for m in (snapshot.agent, snapshot.endpoint, snapshot.tools["search"].tool)
    ]
    from ordo.providers.mock import MockModelClient

    for name in ("t1", "t2"):
        factory = ModelFactory(lambda s: MockModelClient(s.endpoint))
        outcome = await execute(task(name), store, model_factory=factory)
        assert outcome.phase == "Succeeded", outcome.reason
    again = await resolve(task("t3"), store)
    assert again.agent is snapshot.agent
    after = [
        m.model_dump(mode="json") for m in (again.agent, again.endpoint, again.tools["search"].tool)
    ]
    assert after == before
    assert before == [Agent.model_validate(objs[0]).model_dump(mode="json"), *before[1:]]


def test_a_model_cached_without_a_check_is_checked_for_a_caller_that_asks() -> None:
    cache = ParseCache(maxsize=10)
    body = versioned(mock_tool("t"))
    unchecked = cache.parse(Tool, body, "Tool")

    def refuse(tool: Tool) -> None:
        raise ResolutionError("InvalidSpec", "refused")

    with pytest.raises(ResolutionError, match="refused"):
        cache.parse(Tool, body, "Tool", check=refuse)
    assert cache.parse(Tool, body, "Tool") is unchecked


# -- governance objects (runtime/policies.py): AgentPolicy, AgentRole, ToolPermission ------


def governed_agent(**spec: Any) -> Agent:
    return Agent.model_validate(versioned(agent(**spec)))


def policy_body(store: DictStore, name: str = "strict") -> dict[str, Any]:
    return store.objects[("AgentPolicy", "default", name)]


async def test_an_unchanged_policy_is_parsed_once() -> None:
    store = DictStore(versioned(policy("strict", maxSteps=5)))
    first = await selecting_policies(store, governed_agent())
    second = await selecting_policies(store, governed_agent())
    assert [p.name for p in first] == ["strict"]
    assert second[0] is first[0]


async def test_a_changed_policy_is_seen_by_the_next_parse() -> None:
    """The run's re-read (live_policy, at each step) sees the new resourceVersion."""
    store = DictStore(versioned(policy("strict", maxSteps=5)))
    the_agent = governed_agent(limits={"maxSteps": 10})
    refresh = live_policy(store, task(), the_agent, None, None)
    assert (await refresh()).max_steps == 5
    changed = policy_body(store)
    changed["spec"] = {"maxSteps": 3, "suspend": True}
    store.put(versioned(changed, version=2))
    update = await refresh()
    assert (update.max_steps, update.suspended_by) == (3, "strict")
    assert (await selecting_policies(store, the_agent))[0].metadata.resource_version == "2"


async def test_an_invalid_policy_fails_every_time_until_fixed() -> None:
    store = DictStore(versioned(policy("strict", maxSteps=5)))
    the_agent = governed_agent()
    await selecting_policies(store, the_agent)  # version 1 is valid and cached
    broken = policy_body(store)
    broken["spec"]["maxSteps"] = 0  # the CRD refuses it today; stored before, it is read
    store.put(versioned(broken, version=2))
    messages = []
    for _ in range(3):
        with pytest.raises(PolicyUnavailable) as info:
            await selecting_policies(store, the_agent)
        assert info.value.reason == "PolicyUnavailable"
        messages.append(info.value.message)
    assert messages[0] == messages[1] == messages[2]
    assert messages[0].startswith("AgentPolicy 'strict' is invalid at spec.maxSteps")
    assert messages[0].endswith("; fix or delete it (the run fails closed)")
    fixed = policy_body(store)
    fixed["spec"]["maxSteps"] = 2
    store.put(versioned(fixed, version=3))
    assert (await selecting_policies(store, the_agent))[0].spec.max_steps == 2


async def test_unchanged_roles_and_permissions_are_parsed_once() -> None:
    store = DictStore(
        versioned(role("reader", "tool:search:invoke")),
        versioned(permission("search-invoke", "search", "tool:search:invoke")),
    )
    the_agent = governed_agent(roles=["reader"])
    CACHE.clear()
    first = await permissions(store, the_agent)
    assert len(CACHE) == 2  # the role and the permission
    second = await permissions(store, the_agent)
    assert len(CACHE) == 2
    assert first == second and first.unreadable is None
    assert first.granted == frozenset({"tool:search:invoke"})


@pytest.mark.parametrize(
    ("kind", "name", "invalid", "valid", "reason"),
    [
        (
            "AgentRole",
            "reader",
            {"permissions": ["NOT-VALID"]},
            {"permissions": ["tool:*:invoke"]},
            "AgentRole 'reader' is invalid",
        ),
        (
            "ToolPermission",
            "search-invoke",
            {"toolRef": "search", "requiredPermissions": ["not a permission"]},
            {"toolRef": "search", "requiredPermissions": ["tool:search:invoke"]},
            "ToolPermission 'search-invoke' is invalid",
        ),
    ],
)
async def test_an_invalid_role_or_permission_cannot_decide_every_time_until_fixed(
    kind: str, name: str, invalid: dict[str, Any], valid: dict[str, Any], reason: str
) -> None:
    store = DictStore(
        versioned(role("reader", "tool:search:invoke")),
        versioned(permission("search-invoke", "search", "tool:search:invoke")),
    )
    the_agent = governed_agent(roles=["reader"])
    assert (await permissions(store, the_agent)).unreadable is None  # version 1 cached
    body = store.objects[(kind, "default", name)]
    body["spec"] = invalid
    store.put(versioned(body, version=2))
    for _ in range(3):
        assert (await permissions(store, the_agent)).unreadable == reason
    body = store.objects[(kind, "default", name)]
    body["spec"] = valid
    store.put(versioned(body, version=3))
    assert (await permissions(store, the_agent)).unreadable is None
