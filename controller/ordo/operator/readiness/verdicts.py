"""The `Ready` verdict of each configuration kind, and the reachability probes behind them
(reconciler.py evaluates them on watch events and resyncs, and writes the status).

- Agent: every referenced object exists, and its ModelEndpoint's credential is usable.
- ModelEndpoint: its credential is usable.
- Tool: its credential is usable; http: a TCP connection to the URL's host opens (after the
  SSRF guard); mcp: the server lists the tool.
- Memory: its credential is usable; redis/postgres: a TCP connection to the host opens.
- AgentRole: valid; `status.agents` counts the Agents that hold it.
- Tool: not named in the built-in namespace (`ReservedName`, for one stored before the CRD
  refused such names).
- ToolPermission: the Tool it guards exists (or it guards a built-in memory tool).
- AgentPolicy: `status.selectedAgents` counts the Agents it selects; not Ready when it selects
  none (`SelectsNothing`) or blocks a Tool that does not exist (`ToolNotFound`: a typo that
  blocks nothing). Enforcement does not depend on this condition.

"Usable": the Secret key is released for the object's destination (`credentials.release`,
the operator's only way to a Secret value): `SecretNotFound` when the Secret or key is missing
or the Secret is not opted in (one message: no "exists" answer), `CredentialNotAllowed` when
its allowed hosts do not list the destination. A probe gets a credential only that way, so
the mcp list never sends one the Secret does not allow. Under `--credential-policy Warn` the
message carries the warning instead.

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
from ...api.base import SecretKeyRef
from ...api.manifests import references
from ...api.policy import LabelSelector
from ...api.tool import RESERVED_NAME_MESSAGE, model_tool_name, reserved_tool_name
from ...credentials import CredentialRefused, Destination, destination
from ...engine.governance import memory_policy_names
from ...engine.tooling import ResolvedTool
from ...errors import InvalidSchema, ToolFailure, validation_problem
from ...providers import endpoint_destination
from ...runtime.fetch import NOT_OPTED_IN, memory_destination
from ...runtime.store import DescribesSecrets, ObjectStore
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


@dataclass(frozen=True)
class Credential:
    """A Secret key released for one destination (`value`, a Warn-mode `warning`), or the
    `problem` verdict when it was not."""

    value: str | None = None
    warning: str | None = None
    problem: Verdict | None = None

    def noted(self, verdict: Verdict) -> Verdict:
        """`verdict` with the Warn-mode warning, if any, added to its message."""
        if self.warning is None:
            return verdict
        message = f"{verdict.message}; WARNING (enforced by default): {self.warning}"
        return Verdict(verdict.status, verdict.reason, message, verdict.fields)


async def credential(
    store: ObjectStore, ns: str, ref: SecretKeyRef, dest: Destination | None, prefix: str = ""
) -> Credential:
    """The Secret key of `ref` released for `dest`, or why not (names the Secret and key, or
    the host:port; never a value, never whether an unlabelled Secret exists)."""
    try:
        released = await store.credential(ns, ref.name, ref.key, dest)
    except CredentialRefused as refusal:
        return Credential(
            problem=Verdict("False", "CredentialNotAllowed", prefix + refusal.message)
        )
    if released.value is None:
        keys = (
            await store.secret_keys(ns, ref.name) if isinstance(store, DescribesSecrets) else None
        )
        text = (
            f"Secret {ref.name!r} not found {NOT_OPTED_IN}"
            if keys is None
            else f"Secret {ref.name!r} has no key {ref.key!r}"
        )
        return Credential(problem=Verdict("False", "SecretNotFound", prefix + text))
    return Credential(released.value, released.warning)


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
    checked = Credential()
    if creds is not None:
        where = endpoint_destination(endpoint)
        checked = await credential(
            store, ns, creds.secret_ref, where, f"ModelEndpoint/{endpoint.name}: "
        )
        if checked.problem:
            return checked.problem
    return checked.noted(Verdict("True", "Resolved", "every referenced object exists"))


async def endpoint_verdict(body: dict[str, Any], store: ObjectStore) -> Verdict:
    endpoint = ModelEndpoint.model_validate(body)
    creds = endpoint.spec.credentials
    checked = Credential()
    if creds is not None:
        where = endpoint_destination(endpoint)
        checked = await credential(store, endpoint.namespace, creds.secret_ref, where)
        if checked.problem:
            return checked.problem
    return checked.noted(
        Verdict("True", "Configured", "credentials present" if creds else "no credentials needed")
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
    target = tool.spec.http or tool.spec.mcp or tool.spec.a2a
    checked = Credential()
    if target is not None and target.secret_ref is not None:
        where = destination(target.url)
        checked = await credential(store, tool.namespace, target.secret_ref, where)
        if checked.problem:
            return checked.problem
    return checked.noted(await _tool_probe(tool, visible, checked.value))


async def _tool_probe(tool: Tool, visible: str, secret: str | None) -> Verdict:
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
    checked = Credential()
    if memory.spec.secret_ref:
        where = memory_destination(memory)
        checked = await credential(store, memory.namespace, memory.spec.secret_ref, where)
        if checked.problem:
            return checked.problem
    return checked.noted(await _memory_probe(memory))


async def _memory_probe(memory: Memory) -> Verdict:
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
