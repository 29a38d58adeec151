"""`Ready` conditions of the objects Tasks refer to: Agent (its references exist),
ModelEndpoint (its Secret and key exist), Tool (for mcp: the server lists the tool), Memory
(its Secret exists). Evaluated on every watch event of the object and periodically; the
status is patched only when the condition changes."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from pydantic import ValidationError

from ..api import Agent, Memory, ModelEndpoint, Tool
from ..api.manifests import references
from ..api.tool import model_tool_name
from ..engine.tooling import ResolvedTool
from ..errors import InvalidSchema, StoreError, validation_problem
from .conditions import same_conditions, set_condition
from .kube import ApiError, KubeClient
from .store import KubeStore

log = logging.getLogger("ordo.readiness")
Verdict = tuple[str, str, str]  # status, reason, message


async def _exists(store: KubeStore, kind: str, ns: str, name: str) -> bool:
    return await store.get(kind, ns, name) is not None


async def agent_verdict(body: dict[str, Any], store: KubeStore) -> Verdict:
    agent = Agent.model_validate(body)
    ns = agent.namespace
    missing: list[str] = []
    for _, kind, name in references(agent):  # the one list of what an Agent refers to
        if not await _exists(store, kind, ns, name):
            missing.append(f"{kind}/{name}")
    if missing:
        return "False", "MissingReferences", "not found: " + ", ".join(missing)
    return "True", "Resolved", "every referenced object exists"


async def _secret_verdict(store: KubeStore, ns: str, name: str, key: str) -> Verdict | None:
    value = await store.secret_value(ns, name, key)
    if value is None:
        return "False", "SecretNotFound", f"Secret {name!r} with key {key!r} not found"
    return None


async def endpoint_verdict(body: dict[str, Any], store: KubeStore) -> Verdict:
    endpoint = ModelEndpoint.model_validate(body)
    creds = endpoint.spec.credentials
    if creds is not None:
        bad = await _secret_verdict(
            store, endpoint.namespace, creds.secret_ref.name, creds.secret_ref.key
        )
        if bad:
            return bad
    return "True", "Configured", "credentials present" if creds else "no credentials needed"


async def tool_verdict(body: dict[str, Any], store: KubeStore) -> Verdict:
    tool = Tool.model_validate(body)
    try:
        visible = model_tool_name(tool.name)
    except ValueError as exc:
        return "False", "InvalidSpec", str(exc)
    ref = (tool.spec.http and tool.spec.http.secret_ref) or (
        tool.spec.mcp and tool.spec.mcp.secret_ref
    )
    secret = None
    if ref:
        bad = await _secret_verdict(store, tool.namespace, ref.name, ref.key)
        if bad:
            return bad
        secret = await store.secret_value(tool.namespace, ref.name, ref.key)
    if tool.spec.type == "mcp":
        from ..tools.mcp import McpToolExecutor

        try:
            executor = McpToolExecutor(ResolvedTool(tool, visible, secret))
            async with asyncio.timeout(10):
                await executor.describe()
        except InvalidSchema as exc:
            return ("False", "InvalidSpec", str(exc)[:1024])
        except Exception as exc:
            remote = (tool.spec.mcp.tool_name if tool.spec.mcp else None) or tool.name
            return (
                "False",
                "ServerUnavailable",
                f"the MCP server did not list tool {remote!r}: {type(exc).__name__}",
            )
        return "True", "Listed", "the MCP server lists the tool"
    return "True", "Configured", f"{tool.spec.type} tool"


async def memory_verdict(body: dict[str, Any], store: KubeStore) -> Verdict:
    memory = Memory.model_validate(body)
    ref = memory.spec.secret_ref
    if ref:
        bad = await _secret_verdict(store, memory.namespace, ref.name, ref.key)
        if bad:
            return bad
    return "True", "Configured", f"{memory.spec.provider} memory"


EVALUATORS = {
    "Agent": agent_verdict,
    "ModelEndpoint": endpoint_verdict,
    "Tool": tool_verdict,
    "Memory": memory_verdict,
}


class ReadinessReconciler:
    """Keeps `Ready` current for Agents, ModelEndpoints, Tools and Memories it has seen."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client
        self.store = KubeStore(client)
        self.seen: dict[tuple[str, str, str], dict[str, Any]] = {}
        self._locks: dict[tuple[str, str, str], asyncio.Lock] = {}

    async def observe(self, kind: str, body: dict[str, Any], event_type: str | None) -> None:
        meta = body.get("metadata") or {}
        key = (kind, meta.get("namespace", "default"), meta.get("name", ""))
        if event_type == "DELETED":
            self.seen.pop(key, None)
        elif kind in EVALUATORS:
            self.seen[key] = body
            await self.evaluate(kind, body)
        if kind != "Agent":
            # An Agent's readiness depends on this object: re-evaluate the namespace's Agents.
            for (k, ns, _), agent in list(self.seen.items()):
                if k == "Agent" and ns == key[1]:
                    await self.evaluate("Agent", agent)

    async def resync(self) -> None:
        for (kind, _, _), body in list(self.seen.items()):
            await self.evaluate(kind, body)

    async def evaluate(self, kind: str, body: dict[str, Any]) -> None:
        meta = body["metadata"]
        key = (kind, meta["namespace"], meta["name"])
        async with self._locks.setdefault(key, asyncio.Lock()):
            try:
                verdict = await EVALUATORS[kind](body, self.store)
            except ValidationError as exc:
                verdict = ("False", "InvalidSpec", f"invalid at {validation_problem(exc)}")
            except StoreError as exc:
                verdict = ("Unknown", "CannotRead", str(exc))
            fresh = await self.client.get(kind, meta["namespace"], meta["name"])
            if fresh is None:
                return
            status = fresh.get("status") or {}
            generation = fresh["metadata"].get("generation")
            conditions = set_condition(
                status.get("conditions"), "Ready", *verdict, generation=generation
            )
            if (
                same_conditions(conditions, status.get("conditions"))
                and status.get("observedGeneration") == generation
            ):
                return
            try:
                await self.client.patch(
                    kind,
                    meta["namespace"],
                    meta["name"],
                    {"status": {"conditions": conditions, "observedGeneration": generation}},
                    status=True,
                )
            except ApiError as exc:
                if not exc.not_found:
                    log.warning(
                        "could not write Ready",
                        extra={"ordo": {"kind": kind, "status": exc.status}},
                    )
