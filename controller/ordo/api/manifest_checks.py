"""Checks across a set of manifests, after each document parsed: duplicate definitions,
references to objects not in the set, a Task's limits wider than its Agent's, a Task's skill
its Agent does not have, Agents that delegate in a cycle. `references` lists what one object
refers to (also used by the operator's Ready verdicts).
"""

from __future__ import annotations

from typing import Any

from ..credentials import (
    ALLOWED_HOSTS_ANNOTATION,
    CREDENTIAL_LABEL,
    allowed_hosts,
    opted_in,
    parse_allowed_hosts,
)
from . import Resource
from .base import parse_duration
from .manifest_reader import Document, ManifestSet, Problem


def check_duplicates(mset: ManifestSet) -> list[Problem]:
    """Two documents that define the same kind/namespace/name differently: an error naming
    both (which one would win depends on file order). The same object twice, identical, is
    harmless (example folders share objects) and not reported."""
    first: dict[tuple[str, str, str], tuple[Document, Any]] = {}
    entries: list[tuple[tuple[str, str, str], Document, Any]] = [
        ((obj.kind, obj.namespace, obj.name), doc, obj.to_dict()) for doc, obj in mset.objects
    ]
    for doc in mset.secrets:
        meta = doc.body.get("metadata") or {}
        ns = (meta.get("namespace") if isinstance(meta, dict) else None) or "default"
        entries.append((("Secret", str(ns), doc.name), doc, doc.body))
    problems = []
    for key, doc, body in entries:
        seen = first.setdefault(key, (doc, body))
        other, other_body = seen
        if other is doc or body == other_body:
            continue
        kind, ns, name = key
        problems.append(
            Problem(
                doc,
                "metadata.name",
                f"{kind} {ns}/{name} is defined twice, differently: here and in "
                f"{other.source}[{other.index}]; keep one",
            )
        )
    return problems


def check_credentials(mset: ManifestSet) -> list[Problem]:
    """Warnings on Secret manifests (docs/security.md#secrets): one without the label
    `ordo.dev/credential: "true"` reads as missing to the operator and `ordo run`; an
    opted-in one without `ordo.dev/allowed-hosts` goes to whatever host an object names;
    allowed-hosts entries that do not parse allow nothing."""
    problems = []
    for doc in mset.secrets:
        if not isinstance(doc.body, dict):
            continue
        hosts = allowed_hosts(doc.body)
        if not opted_in(doc.body):
            problems.append(
                Problem(
                    doc,
                    "metadata.labels",
                    f'no label {CREDENTIAL_LABEL}: "true"; ordo treats this Secret as '
                    "missing (add the label if ordo may use it)",
                    severity="warning",
                )
            )
        elif hosts is None:
            problems.append(
                Problem(
                    doc,
                    "metadata.annotations",
                    f"opted in ({CREDENTIAL_LABEL}) without {ALLOWED_HOSTS_ANNOTATION}: ordo "
                    "sends it to any host an object that names it points at; list the hosts",
                    severity="warning",
                )
            )
        if hosts is not None:
            _, bad = parse_allowed_hosts(hosts)
            if bad:
                listed = ", ".join(repr(b) for b in bad[:10])
                problems.append(
                    Problem(
                        doc,
                        f"metadata.annotations[{ALLOWED_HOSTS_ANNOTATION}]",
                        f"entries that do not parse allow nothing: {listed}",
                        severity="warning",
                    )
                )
    return problems


def check_skills(mset: ManifestSet) -> list[Problem]:
    """A Task's `skill` must be one of its Agent's `skills` when that Agent is in the set
    (the run would fail with InvalidSpec before any model call)."""
    from .agent import Agent
    from .task import Task

    agents = {(obj.namespace, obj.name): obj for _, obj in mset.objects if isinstance(obj, Agent)}
    problems = []
    for doc, obj in mset.objects:
        if not isinstance(obj, Task) or obj.spec.skill is None:
            continue
        agent = agents.get((obj.namespace, obj.spec.agent_ref or ""))
        if agent is None:
            continue
        names = [s.name for s in agent.spec.skills or []]
        if obj.spec.skill not in names:
            has = ", ".join(names) if names else "none"
            problems.append(
                Problem(
                    doc,
                    "spec.skill",
                    f"Agent {agent.name!r} has no skill {obj.spec.skill!r} (its skills: {has})",
                )
            )
    return problems


def check_references(mset: ManifestSet) -> list[Problem]:
    """Warn about references to objects that are not in the set (they may exist in the cluster)."""
    present: set[tuple[str, str, str]] = set()
    for _, obj in mset.objects:
        present.add((obj.kind, obj.namespace, obj.name))

    problems = []
    for doc, obj in mset.objects:
        for field_path, kind, name in references(obj):
            if (kind, obj.namespace, name) not in present:
                problems.append(
                    Problem(
                        doc,
                        field_path,
                        f"{kind} {name!r} is not in the given manifests "
                        f"(fine if it already exists in namespace {obj.namespace!r})",
                        severity="warning",
                    )
                )
    return problems


def check_limits(mset: ManifestSet) -> list[Problem]:
    """Warn where a Task's limits are wider than its Agent's in the same set: limits only
    narrow, so the run takes the smaller value and the Task's wider one has no effect."""
    from .agent import Agent
    from .task import Task

    agents = {(obj.namespace, obj.name): obj for _, obj in mset.objects if isinstance(obj, Agent)}
    problems = []
    for doc, obj in mset.objects:
        if not isinstance(obj, Task) or obj.spec.limits is None:
            continue
        agent = agents.get((obj.namespace, obj.spec.agent_ref or ""))
        if agent is None:
            continue
        wanted, bound = obj.spec.limits, agent.spec.limits
        wider: list[tuple[str, str]] = []
        if wanted.max_steps is not None and wanted.max_steps > bound.max_steps:
            wider.append(("maxSteps", str(bound.max_steps)))
        if wanted.timeout is not None and parse_duration(wanted.timeout) > parse_duration(
            bound.timeout
        ):
            wider.append(("timeout", bound.timeout))
        if (
            wanted.max_tokens is not None
            and bound.max_tokens is not None
            and wanted.max_tokens > bound.max_tokens
        ):
            wider.append(("maxTokens", str(bound.max_tokens)))
        for name, value in wider:
            problems.append(
                Problem(
                    doc,
                    f"spec.limits.{name}",
                    f"limits only narrow: the Agent's {name} {value} applies "
                    f"(Agent {agent.name!r})",
                    severity="warning",
                )
            )
    return problems


def check_delegation_cycles(mset: ManifestSet) -> list[Problem]:
    """Warn where Agents of the set delegate in a cycle (Agent a lists an `agent` Tool that
    runs b, b one that runs a; or a one that runs a itself): a Task would be denied
    `DelegationCycle` at the call that closes it (docs/concepts.md#trees). One warning per
    cycle, on the first Agent of it (by name), naming the Agents and the Tools."""
    from .agent import Agent
    from .tool import Tool

    targets = {
        (obj.namespace, obj.name): obj.spec.agent.ref
        for _, obj in mset.objects
        if isinstance(obj, Tool) and obj.spec.agent is not None
    }
    agents = {
        (obj.namespace, obj.name): (doc, obj) for doc, obj in mset.objects if isinstance(obj, Agent)
    }
    # edges[agent] = [(tool, target agent, index in spec.tools)], Agents of the set only
    edges: dict[tuple[str, str], list[tuple[str, tuple[str, str], int]]] = {}
    for key, (_, agent) in agents.items():
        for i, tool in enumerate(agent.spec.tools or []):
            target = targets.get((key[0], tool))
            if target is not None and (key[0], target) in agents:
                edges.setdefault(key, []).append((tool, (key[0], target), i))
    problems = []
    reported: set[frozenset[tuple[str, str]]] = set()
    for start in sorted(edges):
        cycle = _cycle_from(start, edges)
        if cycle is None or frozenset(a for a, _, _ in cycle) in reported:
            continue
        reported.add(frozenset(a for a, _, _ in cycle))
        doc, _ = agents[start]
        path = " -> ".join([*(a[1] for a, _, _ in cycle), start[1]])
        tools = ", ".join(tool for _, tool, _ in cycle)
        problems.append(
            Problem(
                doc,
                f"spec.tools[{cycle[0][2]}]",
                f"Agents delegate in a cycle: {path} (through the agent Tools {tools}); "
                "a Task is denied DelegationCycle at the call that closes it",
                severity="warning",
            )
        )
    return problems


def _cycle_from(
    start: tuple[str, str], edges: dict[tuple[str, str], list[tuple[str, tuple[str, str], int]]]
) -> list[tuple[tuple[str, str], str, int]] | None:
    """The first cycle back to `start` (a depth-first search, edges in order): the steps
    (agent, tool, index of that tool in the agent's spec.tools), or None."""
    stack: list[tuple[tuple[str, str], int]] = [(start, 0)]
    path: list[tuple[tuple[str, str], str, int]] = []
    visited = {start}
    while stack:
        node, nxt = stack.pop()
        del path[len(stack) :]
        out = edges.get(node, [])
        if nxt >= len(out):
            continue
        stack.append((node, nxt + 1))
        tool, target, index = out[nxt]
        if target == start:
            return [*path, (node, tool, index)]
        if target not in visited:
            visited.add(target)
            path.append((node, tool, index))
            stack.append((target, 0))
    return None


def references(obj: Resource) -> list[tuple[str, str, str]]:
    """(field path, kind, name) of every reference an object makes to another ordo object."""
    from .agent import Agent
    from .guardrail import Guardrail
    from .rbac import ToolPermission
    from .task import Task
    from .taskschedule import TaskSchedule
    from .taskwebhook import TaskWebhook
    from .team import Team
    from .tool import Tool

    refs: list[tuple[str, str, str]] = []
    if isinstance(obj, Agent):
        refs.append(("spec.modelRef", "ModelEndpoint", obj.spec.model_ref))
        for i, tool in enumerate(obj.spec.tools or []):
            refs.append((f"spec.tools[{i}]", "Tool", tool))
        for i, role in enumerate(obj.spec.roles or []):
            refs.append((f"spec.roles[{i}]", "AgentRole", role))
        if obj.spec.memory and obj.spec.memory.ref:
            refs.append(("spec.memory.ref", "Memory", obj.spec.memory.ref))
        for i, guardrail in enumerate(obj.spec.guardrails or []):
            refs.append((f"spec.guardrails[{i}]", "Guardrail", guardrail))
    elif isinstance(obj, Task):
        if obj.spec.agent_ref is not None:
            refs.append(("spec.agentRef", "Agent", obj.spec.agent_ref))
        if obj.spec.team_ref is not None:
            refs.append(("spec.teamRef", "Team", obj.spec.team_ref))
    elif isinstance(obj, (TaskSchedule, TaskWebhook)):
        template = obj.spec.task_template.spec
        if template.agent_ref is not None:
            refs.append(("spec.taskTemplate.spec.agentRef", "Agent", template.agent_ref))
        if template.team_ref is not None:
            refs.append(("spec.taskTemplate.spec.teamRef", "Team", template.team_ref))
    elif isinstance(obj, Team):
        for i, member in enumerate(obj.spec.members):
            refs.append((f"spec.members[{i}].agentRef", "Agent", member.agent_ref))
        if obj.spec.aggregator is not None:
            refs.append(("spec.aggregator.agentRef", "Agent", obj.spec.aggregator.agent_ref))
    elif isinstance(obj, Tool) and obj.spec.agent is not None:
        refs.append(("spec.agent.ref", "Agent", obj.spec.agent.ref))
    elif isinstance(obj, ToolPermission):
        refs.append(("spec.toolRef", "Tool", obj.spec.tool_ref))
    elif isinstance(obj, Guardrail) and obj.spec.model is not None:
        refs.append(("spec.model.modelRef", "ModelEndpoint", obj.spec.model.model_ref))
    return refs
