"""Resolve a Task into a run snapshot (DESIGN §3 steps 2-3). Either a complete Snapshot comes
out, or a ResolutionError with a precise reason; no model is called either way."""

from __future__ import annotations

from dataclasses import replace

from ..api import (
    Agent,
    Memory,
    ModelEndpoint,
    Task,
    Tool,
    model_tool_name,
    parse_duration,
    reserved_tool_name,
)
from ..api.agent import Skill
from ..api.tool import RESERVED_NAME_MESSAGE
from ..credentials import destination
from ..engine import output as output_mod
from ..engine.approvals import merged
from ..engine.governance import ApprovalRule, memory_policy_names
from ..engine.tooling import ResolvedTool
from ..errors import ResolutionError
from ..providers import endpoint_destination
from . import fetch
from . import policies as policy_mod
from .guardrails import content as guardrail_content
from .guardrails import resolve_guardrails
from .prompt import system_prompt, user_message
from .snapshot import Snapshot, content_hashes
from .store import ObjectStore

__all__ = ["ResolutionError", "Snapshot", "resolve", "system_prompt", "user_message"]


def _skill(agent: Agent, task: Task) -> Skill | None:
    if not task.spec.skill:
        return None
    skill = next((s for s in agent.spec.skills or [] if s.name == task.spec.skill), None)
    if skill is None:
        known = ", ".join(s.name for s in agent.spec.skills or []) or "none"
        raise ResolutionError(
            "InvalidSpec",
            f"Agent {agent.name!r} has no skill {task.spec.skill!r} (skills: {known})",
        )
    return skill


def _check_schema(schema: dict[str, object], where: str) -> None:
    problem = output_mod.check_schema(schema)
    if problem:
        raise ResolutionError("InvalidSpec", f"{where} is {problem}")


def _check_tool(tool: Tool) -> None:
    if tool.spec.input_schema is not None:
        _check_schema(tool.spec.input_schema, f"Tool {tool.name!r} spec.inputSchema")


def _check_agent(agent: Agent) -> None:
    if agent.spec.output_schema is not None:
        _check_schema(agent.spec.output_schema, f"Agent {agent.name!r} spec.outputSchema")


async def _tool(store: ObjectStore, namespace: str, name: str) -> ResolvedTool:
    if reserved_tool_name(name):  # stored before the CRD refused it: never trusted as a Tool
        raise ResolutionError("ReservedToolName", f"Tool {name!r}: {RESERVED_NAME_MESSAGE}")
    # The schema is checked once per version of the Tool (fetch's parse cache).
    tool = await fetch.get(
        store, Tool, namespace, name, "ToolNotFound", f"Tool {name!r}", check=_check_tool
    )
    try:
        visible = model_tool_name(name)
    except ValueError as exc:
        raise ResolutionError("InvalidSpec", str(exc)) from None
    secret = None
    target = tool.spec.http or tool.spec.mcp or tool.spec.a2a
    if target is not None and target.secret_ref is not None:
        ref = target.secret_ref
        secret = await fetch.credential(
            store, namespace, ref.name, ref.key, f"Tool {name!r}", destination(target.url)
        )
    return ResolvedTool(tool, visible, secret)


def tool_approvals(tools: dict[str, ResolvedTool]) -> dict[str, ApprovalRule]:
    """Tool name → its own approval requirement (`spec.approval`), for the Tools that set one."""
    out: dict[str, ApprovalRule] = {}
    for name, resolved in tools.items():
        approval = resolved.tool.spec.approval
        if approval is not None and approval.required:
            timeout = parse_duration(approval.timeout) if approval.timeout else None
            out[name] = ApprovalRule(
                f"Tool {name}", timeout, approval.required_approvals, approval.exclude_requester
            )
    return out


async def resolve(task: Task, store: ObjectStore) -> Snapshot:
    """Build the snapshot of one Task, or raise ResolutionError (PolicyUnavailable included)."""
    ns = task.namespace
    if task.spec.agent_ref is None:  # a Team Task: runtime/team.py resolves it
        raise ResolutionError("InvalidSpec", f"Task {task.name!r} runs a Team, not an Agent")
    agent = await fetch.get(
        store,
        Agent,
        ns,
        task.spec.agent_ref,
        "AgentNotFound",
        f"Agent {task.spec.agent_ref!r}",
        check=_check_agent,  # its output schema, once per version of the Agent
    )
    spec = agent.spec
    policies = await policy_mod.selecting_policies(store, agent)
    policy_mod.check_not_suspended(policies, agent)  # the kill switch comes first
    endpoint = await fetch.get(
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
        api_key = await fetch.credential(
            store,
            ns,
            ref.name,
            ref.key,
            f"ModelEndpoint {endpoint.name!r}",
            endpoint_destination(endpoint),
        )
    skill = _skill(agent, task)

    policy_mod.check_model_allowed(policies, endpoint)
    limits = policy_mod.effective_limits(agent, task, policies)
    guardrails = await resolve_guardrails(store, agent, policies)  # GuardrailMissing, ...

    candidates = policy_mod.candidate_tools(agent, skill)
    policy_mod.check_tools_allowed(policies, agent, candidates)
    blocked_by = policy_mod.blocked_tools(policies)
    tools = {name: await _tool(store, ns, name) for name in candidates if name not in blocked_by}
    perms = await policy_mod.permissions(store, agent)

    memory = None
    memory_secret = None
    if spec.memory is not None and spec.memory.ref:
        memory = await fetch.get(
            store, Memory, ns, spec.memory.ref, "MemoryNotFound", f"Memory {spec.memory.ref!r}"
        )
        if memory.spec.secret_ref is not None:
            ref = memory.spec.secret_ref
            memory_secret = await fetch.credential(
                store,
                ns,
                ref.name,
                ref.key,
                f"Memory {memory.name!r}",
                fetch.memory_destination(memory),
            )
    memory_name = memory.name if memory is not None else None
    governance = policy_mod.governance(agent, skill, memory_name, policies, perms)
    governance = replace(  # a Tool's own approval requirement joins the policies'
        governance, approvals=merged(tool_approvals(tools), governance.approvals)
    )
    operations = governance.effective_memory_operations

    output_schema = (
        task.spec.output_schema if task.spec.output_schema is not None else spec.output_schema
    )
    if task.spec.output_schema is not None:  # the Agent's was checked when it was read
        _check_schema(task.spec.output_schema, "Task spec.outputSchema")
    on_denied = policy_mod.on_tool_denied(policies)

    content = {
        "agent": agent.spec.to_dict(),
        "endpoint": endpoint.spec.to_dict(),
        "tools": {n: t.tool.spec.to_dict() for n, t in sorted(tools.items())},
        "policies": [p.spec.to_dict() for p in policies],
        "granted": sorted(perms.granted),
        "memory": memory.spec.to_dict() if memory else None,
        **({"guardrails": guardrail_content(guardrails)} if guardrails else {}),
    }
    # The ToolPermissions a decision of this run can consult: its tools' and memory tools'.
    names = set(tools) | {n for op in operations for n in memory_policy_names(op)}
    rules = {
        ref: [[r.name, list(r.required), r.match_mode] for r in perms.rules[ref]]
        for ref in sorted(names & set(perms.rules))
    }
    digest, legacy = content_hashes(content, rules)
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
        max_steps=limits.max_steps,
        timeout=limits.timeout,
        token_budget=limits.token_budget,
        max_delegation_depth=limits.max_delegation_depth,
        output_schema=output_schema,
        on_tool_denied=on_denied,
        policies=tuple(p.name for p in policies),
        content_hash=digest,
        legacy_hash=legacy,
        agent_generation=agent.metadata.generation,
        guardrails=guardrails,
        policy_refresh=policy_mod.live_policy(store, task, agent, skill, memory_name),
    )
