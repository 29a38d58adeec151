"""The `Ready` verdict of each configuration kind, and the reachability probes behind them
(reconciler.py evaluates them on watch events and resyncs, and writes the status).

- Agent: every referenced object exists, and its ModelEndpoint's Secret and key exist.
- ModelEndpoint: its Secret and key exist.
- Tool: its Secret and key exist; http: a TCP connection to the URL's host opens (after the
  SSRF guard); mcp: the server lists the tool.
- Memory: its Secret and key exist; redis/postgres: a TCP connection to the host opens.
- AgentRole: valid; `status.agents` counts the Agents that hold it.
- Tool: not named in the built-in namespace (`ReservedName`, for one stored before the CRD
  refused such names).
- ToolPermission: the Tool it guards exists (or it guards a built-in memory tool).
- AgentPolicy: `status.selectedAgents` counts the Agents it selects; not Ready when it selects
  none (`SelectsNothing`) or blocks a Tool that does not exist (`ToolNotFound`: a typo that
  blocks nothing). Enforcement does not depend on this condition.

Probes are bounded (`PROBE_TIMEOUT`) and send nothing: a TCP connect that is closed at once
(the MCP list for mcp). Messages name objects, keys and host:port, never a URL, a Secret
value or a credential.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from pydantic import ValidationError

from ...api import (
    MEMORY_OPERATIONS,
    Agent,
    AgentPolicy,
    AgentRole,
    Memory,
    ModelEndpoint,
    Tool,
    ToolPermission,
)
from ...api.manifests import references
from ...api.policy import LabelSelector
from ...api.tool import RESERVED_NAME_MESSAGE, model_tool_name, reserved_tool_name
from ...engine.governance import memory_policy_names
from ...engine.tooling import ResolvedTool
from ...errors import InvalidSchema, ToolFailure, validation_problem
from ...runtime.store import ObjectStore
from ...tools import netguard

PROBE_TIMEOUT = 3.0
"""Seconds a TCP reachability probe may take."""
MCP_TIMEOUT = 10.0
"""Seconds the MCP list of an mcp Tool may take."""
NAMED = 5
"""How many Agent names a Ready message lists."""
DEFAULT_PORTS = {"http": 80, "https": 443, "redis": 6379, "rediss": 6379}
DEFAULT_PORTS |= {"postgres": 5432, "postgresql": 5432}


@dataclass(frozen=True)
class Verdict:
    """The `Ready` condition of one object, plus the status fields written with it."""

    status: str
    reason: str
    message: str
    fields: dict[str, Any] = field(default_factory=dict)


Evaluator = Callable[[dict[str, Any], ObjectStore], Awaitable[Verdict]]


# -- helpers ----------------------------------------------------------------------------------


async def _secret_problem(store: ObjectStore, ns: str, name: str, key: str) -> str | None:
    """Why the Secret key cannot be read ("Secret 'x' not found", "Secret 'x' has no key
    'k'"), or None. Never the value."""
    secret = await store.get("Secret", ns, name)
    if secret is None:
        return f"Secret {name!r} not found"
    if key not in (secret.get("data") or {}) and key not in (secret.get("stringData") or {}):
        return f"Secret {name!r} has no key {key!r}"
    return None


def _names(names: list[str]) -> str:
    shown = ", ".join(names[:NAMED])
    return shown + (f" and {len(names) - NAMED} more" if len(names) > NAMED else "")


def _agents_phrase(names: list[str]) -> str:
    if not names:
        return "no Agent"
    return f"{len(names)} Agent{'s' if len(names) != 1 else ''}: {_names(names)}"


def _host_port(url: str) -> tuple[str, int] | None:
    """(host, port) of a URL, or None when it names no TCP host (e.g. a Unix socket)."""
    try:
        parts = urlsplit(url)
        port = parts.port or DEFAULT_PORTS.get(parts.scheme)
    except ValueError:
        return None
    if not parts.hostname or port is None:
        return None
    return parts.hostname, port


async def tcp_probe(host: str, port: int, *, connect_to: str | None = None) -> str | None:
    """Open a TCP connection to host:port (or to the checked address `connect_to`) and close it
    at once, sending nothing. None when it opened, else why not (host:port and the error
    type; never more)."""
    try:
        async with asyncio.timeout(PROBE_TIMEOUT):
            _, writer = await asyncio.open_connection(connect_to or host, port)
    except TimeoutError:
        return f"no TCP connection to {host}:{port} within {PROBE_TIMEOUT:g}s"
    except OSError as exc:
        return f"no TCP connection to {host}:{port} ({type(exc).__name__})"
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return None


async def _agent_names(
    store: ObjectStore, ns: str, wanted: Callable[[dict[str, Any]], bool]
) -> list[str]:
    return sorted(str(a["metadata"]["name"]) for a in await store.list("Agent", ns) if wanted(a))


# -- evaluators -------------------------------------------------------------------------------


async def agent_verdict(body: dict[str, Any], store: ObjectStore) -> Verdict:
    agent = Agent.model_validate(body)
    ns = agent.namespace
    missing: list[str] = []
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for _, kind, name in references(agent):  # the one list of what an Agent refers to
        obj = await store.get(kind, ns, name)
        if obj is None:
            missing.append(f"{kind}/{name}")
        else:
            found[kind, name] = obj
    if missing:
        return Verdict("False", "MissingReferences", "not found: " + ", ".join(missing))
    endpoint_body = found["ModelEndpoint", agent.spec.model_ref]
    try:
        endpoint = ModelEndpoint.model_validate(endpoint_body)
    except ValidationError as exc:
        return Verdict(
            "False",
            "InvalidReference",
            f"ModelEndpoint/{agent.spec.model_ref} is invalid at {validation_problem(exc)}",
        )
    creds = endpoint.spec.credentials
    if creds is not None:
        problem = await _secret_problem(store, ns, creds.secret_ref.name, creds.secret_ref.key)
        if problem:
            return Verdict("False", "SecretNotFound", f"ModelEndpoint/{endpoint.name}: {problem}")
    return Verdict("True", "Resolved", "every referenced object exists")


async def endpoint_verdict(body: dict[str, Any], store: ObjectStore) -> Verdict:
    endpoint = ModelEndpoint.model_validate(body)
    creds = endpoint.spec.credentials
    if creds is not None:
        problem = await _secret_problem(
            store, endpoint.namespace, creds.secret_ref.name, creds.secret_ref.key
        )
        if problem:
            return Verdict("False", "SecretNotFound", problem)
    return Verdict(
        "True", "Configured", "credentials present" if creds else "no credentials needed"
    )


async def _http_reachable(tool: Tool) -> Verdict:
    assert tool.spec.http is not None
    target = _host_port(tool.spec.http.url)
    if target is None:
        return Verdict("False", "InvalidSpec", "spec.http.url names no host")
    host, port = target
    try:
        destination = await netguard.check(
            host, port, allow_private_network=tool.spec.http.allow_private_network
        )
    except netguard.BlockedDestination as exc:
        return Verdict("False", "DestinationRefused", str(exc))
    except OSError:
        return Verdict("False", "Unreachable", f"host name {host!r} did not resolve")
    problem = await tcp_probe(host, port, connect_to=str(destination.addresses[0]))
    if problem:
        return Verdict("False", "Unreachable", problem)
    return Verdict("True", "Reachable", f"http tool: {host}:{port} accepts TCP connections")


async def tool_verdict(body: dict[str, Any], store: ObjectStore) -> Verdict:
    if reserved_tool_name(str(body["metadata"]["name"])):  # stored before the CRD refused it
        return Verdict("False", "ReservedName", f"metadata.name: {RESERVED_NAME_MESSAGE}")
    tool = Tool.model_validate(body)
    try:
        visible = model_tool_name(tool.name)
    except ValueError as exc:
        return Verdict("False", "InvalidSpec", str(exc))
    ref = (tool.spec.http and tool.spec.http.secret_ref) or (
        tool.spec.mcp and tool.spec.mcp.secret_ref
    )
    secret = None
    if ref:
        problem = await _secret_problem(store, tool.namespace, ref.name, ref.key)
        if problem:
            return Verdict("False", "SecretNotFound", problem)
        secret = await store.secret_value(tool.namespace, ref.name, ref.key)
    if tool.spec.type == "http":
        return await _http_reachable(tool)
    if tool.spec.type == "mcp":
        from ...tools.mcp import McpToolExecutor

        try:
            executor = McpToolExecutor(ResolvedTool(tool, visible, secret))
            async with asyncio.timeout(MCP_TIMEOUT):
                await executor.describe()
        except InvalidSchema as exc:
            return Verdict("False", "InvalidSpec", str(exc)[:1024])
        except ToolFailure as exc:  # names the Tool, the host and the cause, never content
            return Verdict("False", "ServerUnavailable", exc.message[:1024])
        except Exception as exc:
            remote = (tool.spec.mcp.tool_name if tool.spec.mcp else None) or tool.name
            return Verdict(
                "False",
                "ServerUnavailable",
                f"the MCP server did not list tool {remote!r}: {type(exc).__name__}",
            )
        return Verdict("True", "Listed", "the MCP server lists the tool")
    return Verdict("True", "Configured", f"{tool.spec.type} tool")


async def memory_verdict(body: dict[str, Any], store: ObjectStore) -> Verdict:
    memory = Memory.model_validate(body)
    ref = memory.spec.secret_ref
    if ref:
        problem = await _secret_problem(store, memory.namespace, ref.name, ref.key)
        if problem:
            return Verdict("False", "SecretNotFound", problem)
    provider = memory.spec.provider
    if memory.spec.url is None:
        return Verdict("True", "Configured", f"{provider} memory")
    target = _host_port(memory.spec.url)
    if target is None:
        return Verdict("True", "Configured", f"{provider} memory (no TCP host to probe)")
    problem = await tcp_probe(*target)
    if problem:
        return Verdict("False", "Unreachable", f"{provider} memory: {problem}")
    host, port = target
    return Verdict("True", "Reachable", f"{provider} memory: {host}:{port} accepts TCP connections")


async def role_verdict(body: dict[str, Any], store: ObjectStore) -> Verdict:
    role = AgentRole.model_validate(body)  # the permissions parse, or InvalidSpec

    def holds(agent: dict[str, Any]) -> bool:
        roles = (agent.get("spec") or {}).get("roles") or []
        return isinstance(roles, list) and role.name in roles

    names = await _agent_names(store, role.namespace, holds)
    return Verdict(
        "True",
        "Valid",
        f"{len(role.spec.permissions)} permission(s); held by {_agents_phrase(names)}",
        {"agents": len(names)},
    )


def _builtin(name: str) -> bool:
    """Whether a policy or a ToolPermission name stands for a built-in memory tool."""
    return any(name in memory_policy_names(op) for op in MEMORY_OPERATIONS)


async def permission_verdict(body: dict[str, Any], store: ObjectStore) -> Verdict:
    permission = ToolPermission.model_validate(body)
    tool = permission.spec.tool_ref
    if _builtin(tool):
        return Verdict("True", "Resolved", f"guards the built-in memory tool {tool!r}")
    if await store.get("Tool", permission.namespace, tool) is None:
        return Verdict("False", "ToolNotFound", f"Tool {tool!r} not found")
    return Verdict("True", "Resolved", f"guards Tool {tool!r}")


async def policy_verdict(body: dict[str, Any], store: ObjectStore) -> Verdict:
    policy = AgentPolicy.model_validate(body)
    ns = policy.namespace
    selector = policy.spec.agent_selector or LabelSelector()

    def selected(agent: dict[str, Any]) -> bool:
        labels = (agent.get("metadata") or {}).get("labels") or {}
        return selector.matches({str(k): str(v) for k, v in labels.items()})

    names = await _agent_names(store, ns, selected)
    fields = {"selectedAgents": len(names)}
    selects = f"selects {_agents_phrase(names)}"
    named = [("blockedTools", "blocks", policy.spec.blocked_tools or [])] + [
        (f"toolRules {r.name!r} tools", "matches", r.tools) for r in policy.spec.tool_rules or []
    ]
    if any(names_ for _, _, names_ in named):
        tools = {str(t["metadata"]["name"]) for t in await store.list("Tool", ns)}
        for where, verb, listed in named:
            unknown = [name for name in listed if name not in tools and not _builtin(name)]
            if unknown:
                return Verdict(
                    "False",
                    "ToolNotFound",
                    f"{where} not found: {_names(unknown)} (a misspelt name {verb} nothing); "
                    + selects,
                    fields,
                )
    if not names:
        return Verdict(
            "False", "SelectsNothing", "the agentSelector matches no Agent in the namespace", fields
        )
    return Verdict("True", "Selected", selects, fields)


EVALUATORS: dict[str, Evaluator] = {
    "Agent": agent_verdict,
    "ModelEndpoint": endpoint_verdict,
    "Tool": tool_verdict,
    "Memory": memory_verdict,
    "AgentRole": role_verdict,
    "ToolPermission": permission_verdict,
    "AgentPolicy": policy_verdict,
}
