"""What the pages show of Tasks and Agents, from the objects as the API server returned them
(plain dicts; nothing here reads the cluster). Never a Task's input, instructions or output:
the console shows prompts and tool arguments only where `ordo approvals` shows them (a
waiting call's published arguments, on the Task page)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..api.policy import LabelSelector
from ..engine.delegation import PARENT_LABEL

MAX_TREE_DEPTH = 6
RECENT_TASKS = 5


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def meta(obj: dict[str, Any]) -> dict[str, Any]:
    return _dict(obj.get("metadata"))


def status(obj: dict[str, Any]) -> dict[str, Any]:
    return _dict(obj.get("status"))


def spec(obj: dict[str, Any]) -> dict[str, Any]:
    return _dict(obj.get("spec"))


@dataclass(frozen=True)
class TaskRow:
    namespace: str
    name: str
    agent: str
    phase: str
    reason: str
    step: int
    tokens: int
    created: str
    parent: str
    awaiting: bool


def task_row(task: dict[str, Any]) -> TaskRow:
    s, sp, m = status(task), spec(task), meta(task)
    usage = _dict(s.get("usage"))
    agent = sp.get("agentRef") or (f"team {sp['teamRef']}" if sp.get("teamRef") else "")
    return TaskRow(
        namespace=str(m.get("namespace") or ""),
        name=str(m.get("name") or ""),
        agent=str(agent),
        phase=str(s.get("phase") or "Pending"),
        reason=str(s.get("reason") or ""),
        step=int(s.get("step") or 0),
        tokens=int(usage.get("totalTokens") or 0),
        created=str(m.get("creationTimestamp") or ""),
        parent=str(_dict(m.get("labels")).get(PARENT_LABEL) or ""),
        awaiting=bool(_list(s.get("pendingApprovals"))),
    )


@dataclass(frozen=True)
class Filters:
    namespace: str = ""
    agent: str = ""
    phase: str = ""
    reason: str = ""

    def keep(self, row: TaskRow) -> bool:
        return all(
            not wanted or wanted == got
            for wanted, got in (
                (self.namespace, row.namespace),
                (self.agent, row.agent),
                (self.phase, row.phase),
                (self.reason, row.reason),
            )
        )


@dataclass
class TaskList:
    rows: list[TaskRow]
    total: int
    by_phase: list[tuple[str, int]]
    choices: dict[str, list[str]] = field(default_factory=dict)
    """The values each filter can take (from every Task read, not only those shown)."""


def task_list(tasks: list[dict[str, Any]], filters: Filters) -> TaskList:
    """The rows `filters` keep, newest first, the counts by phase of those rows, and the
    choices of each filter."""
    every = [task_row(t) for t in tasks]
    rows = sorted(
        (r for r in every if filters.keep(r)),
        key=lambda r: (r.created, r.namespace, r.name),
        reverse=True,
    )
    counts = Counter(r.phase for r in rows)
    choices = {
        "namespace": sorted({r.namespace for r in every}),
        "agent": sorted({r.agent for r in every if r.agent}),
        "phase": sorted({r.phase for r in every}),
        "reason": sorted({r.reason for r in every if r.reason}),
    }
    return TaskList(rows, len(rows), sorted(counts.items()), choices)


@dataclass
class Step:
    """One step of a run: its model call, then the tool decisions and guardrail verdicts."""

    number: int
    tools: list[dict[str, Any]] = field(default_factory=list)
    guardrails: list[dict[str, Any]] = field(default_factory=list)


def timeline(task: dict[str, Any]) -> list[Step]:
    """The steps of `status`, from 1 to `status.step`, each with the tool calls
    (`status.toolCalls`: decision, reason, outcome) and guardrail verdicts
    (`status.guardrails`) recorded for it."""
    s = status(task)
    records = [r for r in _list(s.get("toolCalls")) if isinstance(r, dict)]
    verdicts = [g for g in _list(s.get("guardrails")) if isinstance(g, dict)]
    last = max([int(s.get("step") or 0)] + [int(r.get("step") or 0) for r in records + verdicts])
    steps = {n: Step(n) for n in range(1, last + 1)}
    for r in records:
        steps.setdefault(int(r.get("step") or 0), Step(int(r.get("step") or 0))).tools.append(r)
    for g in verdicts:
        steps.setdefault(int(g.get("step") or 0), Step(int(g.get("step") or 0))).guardrails.append(
            g
        )
    return [steps[n] for n in sorted(steps)]


def budget(task: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(what, used, limit) rows: tokens, steps, timeout ("" where the Task sets no limit)."""
    s, limits = status(task), _dict(spec(task).get("limits"))
    usage = _dict(s.get("usage"))
    tokens = f"{usage.get('totalTokens', 0)} ({usage.get('inputTokens', 0)} in, {usage.get('outputTokens', 0)} out)"
    return [
        ("tokens", tokens, str(limits.get("maxTokens") or "")),
        ("steps", str(s.get("step") or 0), str(limits.get("maxSteps") or "")),
        ("time", _duration(s), str(limits.get("timeout") or "")),
    ]


def _duration(s: dict[str, Any]) -> str:
    started, completed = s.get("startedAt"), s.get("completedAt")
    if not started:
        return "not started"
    return f"{started} to {completed}" if completed else f"since {started}"


@dataclass
class Node:
    """A Task in a tree of delegations: its row and its children."""

    row: TaskRow
    children: list[Node] = field(default_factory=list)


def children_tree(task: dict[str, Any], namespace_tasks: list[dict[str, Any]]) -> list[Node]:
    """The Task's children (the Tasks labelled `ordo.dev/parent` with its name, and those its
    `status.children` names), each with its own, at most `MAX_TREE_DEPTH` deep."""
    by_parent: dict[str, list[dict[str, Any]]] = {}
    by_name = {str(meta(t).get("name")): t for t in namespace_tasks}
    for t in namespace_tasks:
        parent = _dict(meta(t).get("labels")).get(PARENT_LABEL)
        if isinstance(parent, str):
            by_parent.setdefault(parent, []).append(t)

    def nodes(of: dict[str, Any], depth: int) -> list[Node]:
        name = str(meta(of).get("name"))
        kids = {str(meta(t).get("name")): t for t in by_parent.get(name, [])}
        for child in _list(status(of).get("children")):
            child_name = _dict(child).get("name")
            if isinstance(child_name, str) and child_name not in kids:
                kids[child_name] = by_name.get(child_name) or _from_status(of, _dict(child))
        if depth >= MAX_TREE_DEPTH:
            return []
        ordered = sorted(kids.values(), key=lambda t: str(meta(t).get("creationTimestamp") or ""))
        return [Node(task_row(t), nodes(t, depth + 1)) for t in ordered]

    return nodes(task, 1)


def _from_status(parent: dict[str, Any], child: dict[str, Any]) -> dict[str, Any]:
    """A child the user cannot read (or not yet), as its parent's `status.children` lists it."""
    return {
        "metadata": {"name": child.get("name"), "namespace": meta(parent).get("namespace")},
        "spec": {"agentRef": child.get("agent")},
        "status": {"phase": child.get("phase"), "reason": child.get("reason")},
    }


def conditions(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in _list(status(obj).get("conditions")) if isinstance(c, dict)]


@dataclass
class AgentRow:
    namespace: str
    name: str
    ready: str
    reason: str
    message: str
    suspended_by: str
    policies: list[str]
    recent: list[TaskRow]


def agent_rows(
    agents: list[dict[str, Any]], policies: list[dict[str, Any]], tasks: list[dict[str, Any]]
) -> list[AgentRow]:
    """Each Agent: its Ready condition, the AgentPolicy that suspends it (if any), the
    AgentPolicies of its namespace that select it, and its `RECENT_TASKS` newest Tasks."""
    rows = []
    for agent in sorted(agents, key=lambda a: (meta(a).get("namespace"), meta(a).get("name"))):
        m = meta(agent)
        ready = next((c for c in conditions(agent) if c.get("type") == "Ready"), {})
        mine = [
            task_row(t)
            for t in tasks
            if meta(t).get("namespace") == m.get("namespace")
            and spec(t).get("agentRef") == m.get("name")
        ]
        mine.sort(key=lambda r: r.created, reverse=True)
        rows.append(
            AgentRow(
                namespace=str(m.get("namespace") or ""),
                name=str(m.get("name") or ""),
                ready=str(ready.get("status") or "Unknown"),
                reason=str(ready.get("reason") or ""),
                message=str(ready.get("message") or ""),
                suspended_by=str(status(agent).get("suspendedBy") or ""),
                policies=_selecting(agent, policies),
                recent=mine[:RECENT_TASKS],
            )
        )
    return rows


def _selecting(agent: dict[str, Any], policies: list[dict[str, Any]]) -> list[str]:
    labels = _dict(meta(agent).get("labels"))
    names = []
    for policy in policies:
        if meta(policy).get("namespace") != meta(agent).get("namespace"):
            continue
        raw = spec(policy).get("agentSelector")
        try:
            selects = raw is None or LabelSelector.model_validate(raw).matches(labels)
        except ValueError:
            continue  # an invalid selector selects nothing here (the operator reports it)
        if selects:
            names.append(str(meta(policy).get("name")))
    return sorted(names)
