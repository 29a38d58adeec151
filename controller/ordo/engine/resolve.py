"""Resolve a Task into a run snapshot (DESIGN §3 steps 2-3), shared by `ordo run` and the
operator. Either a complete Snapshot comes out, or a ResolutionError with a precise reason;
no model is called either way."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import ValidationError

from ..api import (
    MEMORY_OPERATIONS,
    Agent,
    AgentPolicy,
    AgentRole,
    Memory,
    ModelEndpoint,
    Resource,
    Task,
    Tool,
    ToolPermission,
    model_tool_name,
    parse_duration,
)
from ..api.agent import Skill
from . import output as output_mod
from .governance import Governance, PermissionRule
from .state import OnToolDenied
from .store import ObjectStore, StoreError

R = TypeVar("R", bound=Resource)


class ResolutionError(Exception):
    """The Task cannot run; `reason` is one of the documented Task reasons."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class ResolvedTool:
    tool: Tool
    model_name: str
    secret: str | None = None


@dataclass(frozen=True)
class Snapshot:
    """Everything one run reads, frozen at resolution time."""

    task: Task
    agent: Agent
    endpoint: ModelEndpoint
    api_key: str | None
    tools: dict[str, ResolvedTool]
    """Object name → tool, for every tool the run may offer (after skill and policy)."""
    governance: Governance
    memory: Memory | None
    memory_secret: str | None
    memory_operations: tuple[str, ...]
    skill: Skill | None
    max_steps: int
    timeout: float
    token_budget: int | None
    output_schema: dict[str, Any] | None
    on_tool_denied: OnToolDenied
    policies: tuple[str, ...] = ()
    content_hash: str = ""
    agent_generation: int | None = None
    notes: list[str] = field(default_factory=list)


def _parse(model: type[R], body: dict[str, Any], what: str) -> R:
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise ResolutionError(
            "InvalidSpec", f"{what} is invalid at {loc}: {first['msg']}"
        ) from None


async def _get(
    store: ObjectStore, model: type[R], namespace: str, name: str, reason: str, what: str
) -> R:
    try:
        body = await store.get(model.model_fields["kind"].default, namespace, name)
    except StoreError as exc:
        raise ResolutionError(reason, f"{what} could not be read: {exc}") from None
    if body is None:
        raise ResolutionError(reason, f"{what} does not exist in namespace {namespace!r}")
    return _parse(model, body, what)


async def _secret(store: ObjectStore, namespace: str, name: str, key: str, owner: str) -> str:
    try:
        value = await store.secret_value(namespace, name, key)
    except StoreError as exc:
        raise ResolutionError(
            "SecretNotFound", f"Secret {name!r} for {owner} could not be read: {exc}"
        ) from None
    if value is None:
        raise ResolutionError(
            "SecretNotFound", f"Secret {name!r} key {key!r} for {owner} does not exist"
        )
    return value


def _min(*values: int | None) -> int | None:
    present = [v for v in values if v is not None]
    return min(present) if present else None


async def resolve(task: Task, store: ObjectStore) -> Snapshot:
    """Build the snapshot of one Task, or raise ResolutionError."""
    ns = task.namespace
    agent = await _get(
        store, Agent, ns, task.spec.agent_ref, "AgentNotFound", f"Agent {task.spec.agent_ref!r}"
    )
    spec = agent.spec
    endpoint = await _get(
        store,
        ModelEndpoint,
        ns,
        spec.model_ref,
        "ModelEndpointNotFound",
        f"ModelEndpoint {spec.model_ref!r}",
    )
    api_key = None
    if endpoint.spec.credentials is not None:
        ref = endpoint.spec.credentials.secret_ref
        api_key = await _secret(store, ns, ref.name, ref.key, f"ModelEndpoint {endpoint.name!r}")

    skill = None
    if task.spec.skill:
        skill = next((s for s in spec.skills or [] if s.name == task.spec.skill), None)
        if skill is None:
            known = ", ".join(s.name for s in spec.skills or []) or "none"
            raise ResolutionError(
                "InvalidSpec",
                f"Agent {agent.name!r} has no skill {task.spec.skill!r} (skills: {known})",
            )

    # Policies that select the agent. Unreadable policies make every tool call fail closed.
    unreadable: str | None = None
    policies: list[AgentPolicy] = []
    try:
        for body in await store.list("AgentPolicy", ns):
            try:
                policy = AgentPolicy.model_validate(body)
            except ValidationError:
                name = (body.get("metadata") or {}).get("name", "?")
                unreadable = f"AgentPolicy {name!r} is invalid"
                continue
            selector = policy.spec.agent_selector
            if selector is None or selector.matches(agent.metadata.labels or {}):
                policies.append(policy)
    except StoreError as exc:
        unreadable = f"AgentPolicies could not be read ({exc})"
    policies.sort(key=lambda p: p.name)

    allowed_models = [set(p.spec.allowed_models) for p in policies if p.spec.allowed_models]
    model_name = endpoint.spec.effective_model()
    for p, allowed in zip(
        [p for p in policies if p.spec.allowed_models], allowed_models, strict=True
    ):
        if model_name not in allowed and endpoint.name not in allowed:
            raise ResolutionError(
                "ModelNotAllowed",
                f"model {model_name!r} of ModelEndpoint {endpoint.name!r} is not in allowedModels of AgentPolicy {p.name!r}",
            )

    candidates = list(spec.tools or [])
    if skill is not None and skill.tools is not None:
        candidates = [t for t in candidates if t in skill.tools]
    blocked_by: dict[str, str] = {}
    for p in policies:
        for t in p.spec.blocked_tools or []:
            blocked_by.setdefault(t, p.name)

    tools: dict[str, ResolvedTool] = {}
    for name in candidates:
        if name in blocked_by:
            continue
        tool = await _get(store, Tool, ns, name, "ToolNotFound", f"Tool {name!r}")
        try:
            visible = model_tool_name(name)
        except ValueError as exc:
            raise ResolutionError("InvalidSpec", str(exc)) from None
        if tool.spec.input_schema is not None:
            problem = output_mod.check_schema(tool.spec.input_schema)
            if problem:
                raise ResolutionError("InvalidSpec", f"Tool {name!r} spec.inputSchema is {problem}")
        secret_ref = (tool.spec.http and tool.spec.http.secret_ref) or (
            tool.spec.mcp and tool.spec.mcp.secret_ref
        )
        secret = (
            await _secret(store, ns, secret_ref.name, secret_ref.key, f"Tool {name!r}")
            if secret_ref
            else None
        )
        tools[name] = ResolvedTool(tool, visible, secret)

    # Roles and permissions.
    granted: set[str] = set()
    missing_roles: list[str] = []
    for role_name in spec.roles or []:
        try:
            role_body = await store.get("AgentRole", ns, role_name)
        except StoreError as exc:
            unreadable = unreadable or f"AgentRole {role_name!r} could not be read ({exc})"
            continue
        if role_body is None:
            missing_roles.append(role_name)
            continue
        try:
            granted.update(AgentRole.model_validate(role_body).spec.permissions)
        except ValidationError:
            unreadable = unreadable or f"AgentRole {role_name!r} is invalid"
    rules: dict[str, list[PermissionRule]] = {}
    try:
        for body in await store.list("ToolPermission", ns):
            try:
                perm = ToolPermission.model_validate(body)
            except ValidationError:
                name = (body.get("metadata") or {}).get("name", "?")
                unreadable = unreadable or f"ToolPermission {name!r} is invalid"
                continue
            rules.setdefault(perm.spec.tool_ref, []).append(
                PermissionRule(
                    perm.name, tuple(perm.spec.required_permissions), perm.spec.match_mode
                )
            )
    except StoreError as exc:
        unreadable = unreadable or f"ToolPermissions could not be read ({exc})"

    governance = Governance(
        candidate_tools=frozenset(candidates),
        blocked_by=blocked_by,
        rules={k: tuple(sorted(v, key=lambda r: r.name)) for k, v in rules.items()},
        granted=frozenset(granted),
        has_roles=bool(spec.roles),
        missing_roles=tuple(missing_roles),
        unreadable=unreadable,
    )

    memory = None
    memory_secret = None
    operations: tuple[str, ...] = ()
    if spec.memory is not None and spec.memory.ref:
        memory = await _get(
            store, Memory, ns, spec.memory.ref, "MemoryNotFound", f"Memory {spec.memory.ref!r}"
        )
        if memory.spec.secret_ref is not None:
            ref = memory.spec.secret_ref
            memory_secret = await _secret(store, ns, ref.name, ref.key, f"Memory {memory.name!r}")
        operations = (
            tuple(spec.memory.allow) if spec.memory.allow is not None else MEMORY_OPERATIONS
        )

    limits = task.spec.limits
    max_steps = _min(
        spec.limits.max_steps,
        limits.max_steps if limits else None,
        *(p.spec.max_steps for p in policies),
    )
    timeout = parse_duration(spec.limits.timeout)
    if limits and limits.timeout:
        timeout = min(timeout, parse_duration(limits.timeout))
    budget = _min(
        spec.limits.max_tokens,
        limits.max_tokens if limits else None,
        *(p.spec.max_tokens_per_task for p in policies),
    )
    output_schema = (
        task.spec.output_schema if task.spec.output_schema is not None else spec.output_schema
    )
    if output_schema is not None:
        problem = output_mod.check_schema(output_schema)
        if problem:
            source = "Task" if task.spec.output_schema is not None else f"Agent {agent.name!r}"
            raise ResolutionError("InvalidSpec", f"{source} spec.outputSchema is {problem}")
    on_denied: OnToolDenied = (
        "ReturnError"
        if policies and all(p.spec.on_tool_denied == "ReturnError" for p in policies)
        else "Fail"
    )

    content = {
        "agent": agent.spec.to_dict(),
        "endpoint": endpoint.spec.to_dict(),
        "tools": {n: t.tool.spec.to_dict() for n, t in sorted(tools.items())},
        "policies": [p.spec.to_dict() for p in policies],
        "granted": sorted(granted),
        "memory": memory.spec.to_dict() if memory else None,
    }
    digest = hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:16]
    assert max_steps is not None
    return Snapshot(
        task=task,
        agent=agent,
        endpoint=endpoint,
        api_key=api_key,
        tools=tools,
        governance=governance,
        memory=memory,
        memory_secret=memory_secret,
        memory_operations=operations,
        skill=skill,
        max_steps=max_steps,
        timeout=timeout,
        token_budget=budget,
        output_schema=output_schema,
        on_tool_denied=on_denied,
        policies=tuple(p.name for p in policies),
        content_hash=digest,
        agent_generation=agent.metadata.generation,
    )


def system_prompt(snapshot: Snapshot) -> str:
    parts = [snapshot.agent.spec.prompt or "You are a helpful agent."]
    if snapshot.skill is not None and snapshot.skill.instructions:
        parts.append(snapshot.skill.instructions)
    if snapshot.output_schema is not None:
        parts.append(output_mod.instruction(snapshot.output_schema))
    return "\n\n".join(parts)


def user_message(task: Task) -> str:
    text = task.input_text()
    if task.spec.instructions:
        text = f"{text}\n\n{task.spec.instructions}" if text else task.spec.instructions
    return text
