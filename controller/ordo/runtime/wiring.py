"""Wiring a snapshot to live parts: the model client, tool executors and the memory backend."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from ..api import parse_duration
from ..api.tool import AGENT_TOOL_INPUT_SCHEMA
from ..engine.delegation import DEFAULT_MAX_DEPTH, Delegator, lineage_of
from ..engine.model import ModelClient
from ..engine.remote import RemoteTarget
from ..engine.state import RunConfig
from ..engine.tooling import AgentTarget, ResolvedTool, ToolBinding, ToolOutput
from ..engine.toolrules import RuleSubject
from .prompt import system_prompt, user_message
from .remotespans import TracedRemote
from .snapshot import Snapshot

ModelFactory = Callable[[Snapshot], ModelClient]


def default_model_factory(snapshot: Snapshot) -> ModelClient:
    from ..providers import build_model_client

    return build_model_client(snapshot.endpoint, snapshot.api_key)


def run_config(
    snapshot: Snapshot,
    *,
    elapsed: float = 0.0,
    delegator: Delegator | None = None,
    max_delegation_depth: int | None = None,
) -> RunConfig:
    """The loop's configuration; `elapsed` seconds of the deadline are already spent.
    `max_delegation_depth`: the front end's (the operator's `--max-delegation-depth`; None:
    `DEFAULT_MAX_DEPTH`), narrowed by the policies' `maxDelegationDepth`."""
    task = snapshot.task
    front = DEFAULT_MAX_DEPTH if max_delegation_depth is None else max_delegation_depth
    depths = [front, snapshot.max_delegation_depth]
    return RunConfig(
        system_prompt=system_prompt(snapshot),
        user_message=user_message(snapshot.task),
        governance=snapshot.governance,
        max_steps=snapshot.max_steps,
        timeout=snapshot.timeout,
        token_budget=snapshot.token_budget,
        output_schema=snapshot.output_schema,
        on_tool_denied=snapshot.on_tool_denied,
        elapsed=elapsed,
        policy_refresh=snapshot.policy_refresh,
        rule_subject=RuleSubject(
            snapshot.agent.name,
            dict(snapshot.agent.metadata.labels or {}),
            snapshot.task.name,
            dict(snapshot.task.metadata.labels or {}),
        ),
        delegator=delegator,
        lineage=lineage_of(
            task.name,
            snapshot.agent.name,
            {"labels": task.metadata.labels, "annotations": task.metadata.annotations},
        ),
        max_delegation_depth=min(d for d in depths if d is not None),
    )


async def tool_bindings(snapshot: Snapshot) -> tuple[list[ToolBinding], list[Any]]:
    """Bindings for the snapshot's tools and memory; also the resources to close afterwards."""
    from ..memory import open_backend
    from ..tools import binding
    from ..tools.memory_tools import memory_bindings

    closers: list[Any] = []
    bindings: list[ToolBinding] = []
    for t in snapshot.tools.values():
        if t.tool.spec.type == "agent":
            bindings.append(agent_binding(t))
        elif t.tool.spec.type == "a2a":
            bindings.append(a2a_binding(t, snapshot, closers))
        else:
            bindings.append(await binding(t))
    if snapshot.memory is not None:
        backend = await open_backend(snapshot.memory, snapshot.memory_secret)
        closers.append(backend)
        bindings.extend(
            memory_bindings(backend, snapshot.memory_operations, snapshot.memory.spec.ingest)
        )
    return bindings, closers


async def _no_delegation(arguments: dict[str, Any]) -> ToolOutput:
    return ToolOutput("error: delegation is not available here", True, "DelegationUnavailable")


def agent_binding(resolved: ResolvedTool) -> ToolBinding:
    """An `agent` Tool's binding: its calls start child Tasks through the run's delegator
    (engine/delegating.py); its input schema is its own or `{input: string}`. The target
    Agent is read when a call is made (a missing one fails that child `AgentNotFound`)."""
    spec = resolved.tool.spec
    assert spec.agent is not None  # the Tool's rules require spec.agent for type agent
    target = spec.agent.ref
    return ToolBinding(
        name=resolved.model_name,
        object_name=resolved.tool.name,
        description=spec.description
        or f"Ask the agent {target}: it runs your input as its own task and returns its answer.",
        parameters=spec.input_schema or AGENT_TOOL_INPUT_SCHEMA,
        executor=_no_delegation,
        idempotent=spec.idempotent,
        agent=AgentTarget(target, whole_arguments=spec.input_schema is not None),
    )


async def _not_sent(arguments: dict[str, Any]) -> ToolOutput:
    return ToolOutput("error: remote agents are not available here", True, "RemoteUnavailable")


def a2a_binding(resolved: ResolvedTool, snapshot: Snapshot, closers: list[Any]) -> ToolBinding:
    """An `a2a` Tool's binding: its calls are tasks of the remote agent (engine/remotecalls.py),
    through a client kept for the run (added to `closers`); its input schema is its own or
    `{input: string}`. Message ids derive from the Task's uid (its name where it has none)."""
    from ..tools.a2a import A2aRemoteAgent

    spec = resolved.tool.spec
    assert spec.a2a is not None  # the Tool's rules require spec.a2a for type a2a
    task = snapshot.task
    client = A2aRemoteAgent(resolved, task.metadata.uid or f"{task.namespace}/{task.name}")
    remote = TracedRemote(client, resolved.tool.name, spec.a2a.url)
    closers.append(remote)
    return ToolBinding(
        name=resolved.model_name,
        object_name=resolved.tool.name,
        description=spec.description
        or "Ask a remote agent: it runs your input as its own task and returns its answer.",
        parameters=spec.input_schema or AGENT_TOOL_INPUT_SCHEMA,
        executor=_not_sent,
        idempotent=spec.idempotent,
        timeout=parse_duration(spec.timeout),
        remote=RemoteTarget(remote, whole_arguments=spec.input_schema is not None),
    )


async def close_quietly(resource: object) -> None:
    """Close a client or backend; a failure to close never changes how a run ended."""
    close = getattr(resource, "close", None)
    if close is None:
        return
    try:
        outcome = close()
        if asyncio.iscoroutine(outcome):
            await outcome
    except Exception:
        return
