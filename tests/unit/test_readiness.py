"""Ready verdicts of the configuration kinds (operator/readiness/verdicts.py) over an
in-memory store; reachability probes against real local TCP servers. The reconciler itself
(watch events, status patches, RBAC) is covered by tests/cluster/test_object_status.py."""

from __future__ import annotations

import asyncio
import base64
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
from tests.support.engine_fakes import (
    NS,
    DictStore,
    agent,
    memory,
    mock_endpoint,
    mock_tool,
    obj,
    permission,
    policy,
    role,
)

from ordo.operator.readiness import reconciler as readiness
from ordo.operator.readiness.reconciler import Verdict

CANARY = "sk-canary-7f3a9c"


def secret(name: str, **data: str) -> dict[str, Any]:
    """An opted-in Secret (the label; no allowed-hosts annotation: any host)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": NS, "labels": {"ordo.dev/credential": "true"}},
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
    }


def keyed_endpoint() -> dict[str, Any]:
    return mock_endpoint(credentials={"secretRef": {"name": "model-key", "key": "apiKey"}})


class Listener:
    """A real TCP server on loopback that counts connections and the bytes it receives."""

    def __init__(self) -> None:
        self.connections = 0
        self.received = b""
        self.port = 0
        self._server: asyncio.Server | None = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.received += await reader.read()
        writer.close()

    async def __aenter__(self) -> Listener:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()


@pytest.fixture
async def listener() -> AsyncIterator[Listener]:
    async with Listener() as server:
        yield server


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def settle(server: Listener) -> None:
    for _ in range(50):
        if server.connections:
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)


# -- ToolPermission ---------------------------------------------------------------------------


async def test_tool_permission_names_the_missing_tool() -> None:
    guard = permission("guard", "web-search", "tool:web-search:invoke")
    verdict = await readiness.permission_verdict(guard, DictStore(guard))
    assert (verdict.status, verdict.reason) == ("False", "ToolNotFound")
    assert "'web-search'" in verdict.message

    verdict = await readiness.permission_verdict(guard, DictStore(guard, mock_tool("web-search")))
    assert (verdict.status, verdict.reason) == ("True", "Resolved")


async def test_tool_permission_for_a_builtin_memory_tool_is_resolved() -> None:
    guard = permission("guard", "memory.write", "memory:notes:write")
    verdict = await readiness.permission_verdict(guard, DictStore(guard))
    assert (verdict.status, verdict.reason) == ("True", "Resolved")
    assert "built-in memory tool 'memory.write'" in verdict.message
    guard = permission("guard", "memory.delete", "memory:notes:delete")  # no such operation
    verdict = await readiness.permission_verdict(guard, DictStore(guard))
    assert (verdict.status, verdict.reason) == ("False", "ToolNotFound")


# -- Tool -------------------------------------------------------------------------------------


async def test_tool_stored_with_a_builtin_name_is_not_ready() -> None:
    """A Tool created before the CRD refused names in the built-in namespace is never
    trusted: Ready=False whatever its spec, before any Secret is read or probe sent."""
    for name in ("memory.write", "memory.anything"):
        impostor = mock_tool(name)
        verdict = await readiness.tool_verdict(impostor, DictStore(impostor))
        assert (verdict.status, verdict.reason) == ("False", "ReservedName"), name
        assert verdict.message.startswith("metadata.name: ") and "memory." in verdict.message
    fine = mock_tool("memory-write")
    verdict = await readiness.tool_verdict(fine, DictStore(fine))
    assert verdict.status == "True"


# -- AgentRole --------------------------------------------------------------------------------


async def test_agent_role_counts_the_agents_that_hold_it() -> None:
    reader = role("reader", "tool:web-search:invoke")
    store = DictStore(
        reader,
        agent("a1", roles=["reader"]),
        agent("a2", roles=["writer", "reader"]),
        agent("a3", roles=["writer"]),
        agent("a4"),
    )
    verdict = await readiness.role_verdict(reader, store)
    assert (verdict.status, verdict.reason) == ("True", "Valid")
    assert verdict.fields == {"agents": 2}
    assert "a1, a2" in verdict.message and "a3" not in verdict.message

    unused = await readiness.role_verdict(reader, DictStore(reader, agent("a4")))
    assert unused.status == "True" and unused.fields == {"agents": 0}
    assert "no Agent" in unused.message


async def test_agent_role_with_a_malformed_permission_is_invalid() -> None:
    bad = role("bad", "not a permission")
    with pytest.raises(ValueError):  # the reconciler turns this into InvalidSpec
        await readiness.role_verdict(bad, DictStore(bad))


# -- AgentPolicy ------------------------------------------------------------------------------


async def test_agent_policy_reports_what_it_selects() -> None:
    prod = policy("prod", agentSelector={"matchLabels": {"env": "prod"}})
    agents = [agent(f"p{i}", labels={"env": "prod"}) for i in range(7)]
    store = DictStore(prod, *agents, agent("dev", labels={"env": "dev"}))
    verdict = await readiness.policy_verdict(prod, store)
    assert (verdict.status, verdict.reason) == ("True", "Selected")
    assert verdict.fields == {"selectedAgents": 7}
    assert "p0, p1, p2, p3, p4 and 2 more" in verdict.message
    assert "dev" not in verdict.message

    everyone = policy("all")
    verdict = await readiness.policy_verdict(everyone, store)
    assert verdict.fields == {"selectedAgents": 8}


async def test_agent_policy_selecting_nothing_is_not_ready() -> None:
    prod = policy(
        "prod", agentSelector={"matchExpressions": [{"key": "env", "operator": "Exists"}]}
    )
    verdict = await readiness.policy_verdict(prod, DictStore(prod, agent("bare")))
    assert (verdict.status, verdict.reason) == ("False", "SelectsNothing")
    assert verdict.fields == {"selectedAgents": 0}


async def test_agent_policy_blocking_an_unknown_tool_is_not_ready() -> None:
    block = policy("block", blockedTools=["web-search", "shel"])
    store = DictStore(block, agent("a1"), mock_tool("web-search"), mock_tool("shell"))
    verdict = await readiness.policy_verdict(block, store)
    assert (verdict.status, verdict.reason) == ("False", "ToolNotFound")
    assert "shel" in verdict.message and "web-search" not in verdict.message
    assert "selects 1 Agent: a1" in verdict.message
    assert verdict.fields == {"selectedAgents": 1}

    store.put(mock_tool("shel"))
    verdict = await readiness.policy_verdict(block, store)
    assert (verdict.status, verdict.reason) == ("True", "Selected")


async def test_agent_policy_with_a_tool_rule_on_an_unknown_tool_is_not_ready() -> None:
    rule = {"name": "big", "tools": ["pay", "memory.write"], "when": "true", "action": "Deny"}
    rules = policy("rules", toolRules=[rule])
    store = DictStore(rules, agent("a1"))
    verdict = await readiness.policy_verdict(rules, store)
    assert (verdict.status, verdict.reason) == ("False", "ToolNotFound")
    assert verdict.message.startswith("toolRules 'big' tools not found: pay (a misspelt name")
    store.put(mock_tool("pay"))
    verdict = await readiness.policy_verdict(rules, store)
    assert (verdict.status, verdict.reason) == ("True", "Selected")


async def test_agent_policy_blocking_builtin_memory_tools_is_ready() -> None:
    block = policy("read-only", blockedTools=["memory.write", "memory.ingest"])
    verdict = await readiness.policy_verdict(block, DictStore(block, agent("a1")))
    assert (verdict.status, verdict.reason) == ("True", "Selected")


# -- Agent: the ModelEndpoint's Secret --------------------------------------------------------


@pytest.mark.parametrize(
    ("objects", "expected"),
    [
        ((), "Secret 'model-key' not found or is not labelled ordo.dev/credential=true"),
        ((secret("model-key", other=CANARY),), "Secret 'model-key' has no key 'apiKey'"),
    ],
)
async def test_agent_is_not_ready_without_its_endpoint_secret(
    objects: tuple[dict[str, Any], ...], expected: str
) -> None:
    body = agent()
    verdict = await readiness.agent_verdict(body, DictStore(body, keyed_endpoint(), *objects))
    assert (verdict.status, verdict.reason) == ("False", "SecretNotFound")
    assert verdict.message == f"ModelEndpoint/model: {expected}"
    assert CANARY not in verdict.message


async def test_agent_is_ready_with_its_endpoint_secret() -> None:
    body = agent()
    store = DictStore(body, keyed_endpoint(), secret("model-key", apiKey=CANARY))
    verdict = await readiness.agent_verdict(body, store)
    assert (verdict.status, verdict.reason) == ("True", "Resolved")
    endpoint = await readiness.endpoint_verdict(keyed_endpoint(), store)
    assert endpoint.status == "True"


async def test_agent_missing_references_come_first() -> None:
    body = agent(tools=["lookup"], roles=["reader"])
    verdict = await readiness.agent_verdict(body, DictStore(body, keyed_endpoint()))
    assert (verdict.status, verdict.reason) == ("False", "MissingReferences")
    assert "Tool/lookup" in verdict.message and "AgentRole/reader" in verdict.message


# -- Memory and http Tool: bounded TCP probes, nothing sent ---------------------------------


async def test_memory_probe_connects_and_sends_nothing(listener: Listener) -> None:
    mem = memory(provider="redis", url=f"redis://ordo:{CANARY}@127.0.0.1:{listener.port}/0")
    verdict = await readiness.memory_verdict(mem, DictStore(mem))
    assert (verdict.status, verdict.reason) == ("True", "Reachable"), verdict
    await settle(listener)
    assert listener.connections == 1 and listener.received == b""
    assert CANARY not in verdict.message and f"127.0.0.1:{listener.port}" in verdict.message


async def test_memory_probe_reports_an_unreachable_server() -> None:
    port = closed_port()
    mem = memory(provider="postgres", url=f"postgresql://ordo:{CANARY}@127.0.0.1:{port}/ordo")
    verdict = await readiness.memory_verdict(mem, DictStore(mem))
    assert (verdict.status, verdict.reason) == ("False", "Unreachable")
    assert f"127.0.0.1:{port}" in verdict.message and CANARY not in verdict.message


async def test_memory_secret_missing_key_is_named() -> None:
    mem = memory(
        provider="redis",
        url="redis://127.0.0.1:1/0",
        secretRef={"name": "redis", "key": "password"},
    )
    verdict = await readiness.memory_verdict(mem, DictStore(mem, secret("redis", pw=CANARY)))
    assert verdict == Verdict("False", "SecretNotFound", "Secret 'redis' has no key 'password'")


def http_tool(url: str, **http: Any) -> dict[str, Any]:
    return obj("Tool", "fetch", {"type": "http", "http": {"url": url, **http}})


async def test_http_tool_probe_connects_and_sends_nothing(listener: Listener) -> None:
    tool = http_tool(f"http://127.0.0.1:{listener.port}/run?token={CANARY}")
    verdict = await readiness.tool_verdict(tool, DictStore(tool))
    assert (verdict.status, verdict.reason) == ("True", "Reachable"), verdict
    await settle(listener)
    assert listener.connections == 1 and listener.received == b""
    assert CANARY not in verdict.message


async def test_http_tool_probe_reports_an_unreachable_server() -> None:
    tool = http_tool(f"http://127.0.0.1:{closed_port()}/run?token={CANARY}")
    verdict = await readiness.tool_verdict(tool, DictStore(tool))
    assert (verdict.status, verdict.reason) == ("False", "Unreachable")
    assert CANARY not in verdict.message


async def test_http_tool_probe_refuses_metadata_addresses() -> None:
    tool = http_tool("http://169.254.169.254/latest/meta-data/")
    verdict = await readiness.tool_verdict(tool, DictStore(tool))
    assert (verdict.status, verdict.reason) == ("False", "DestinationRefused")


async def test_http_tool_secret_is_checked_before_the_probe(listener: Listener) -> None:
    tool = http_tool(
        f"http://127.0.0.1:{listener.port}/", secretRef={"name": "tool-key", "key": "token"}
    )
    verdict = await readiness.tool_verdict(tool, DictStore(tool))
    assert verdict == Verdict(
        "False",
        "SecretNotFound",
        "Secret 'tool-key' not found or is not labelled ordo.dev/credential=true",
    )
    assert listener.connections == 0


async def test_team_is_ready_when_its_agents_exist() -> None:
    members = [{"name": "for", "agentRef": "a"}, {"name": "against", "agentRef": "b"}]
    spec = {"strategy": "Parallel", "members": members, "aggregator": {"agentRef": "j"}}
    team = obj("Team", "crew", spec)
    evaluate = readiness.EVALUATORS["Team"]
    verdict = await evaluate(team, DictStore(team, agent("a")))
    assert (verdict.status, verdict.reason) == ("False", "MissingReferences")
    assert verdict.message == "not found: Agent/b, Agent/j"
    verdict = await evaluate(team, DictStore(team, agent("a"), agent("b"), agent("j")))
    assert (verdict.status, verdict.reason) == ("True", "Resolved")
    assert "Team" in readiness.DEPENDENTS["Agent"]  # an Agent appearing re-evaluates Teams
