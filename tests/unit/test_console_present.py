"""What the console's pages show of Tasks and Agents (console/present.py): rows, filters and
counts, the step timeline (tool decisions and guardrail verdicts by step), budget, the tree of
children (labels and `status.children`, including a child the user cannot read), the Agents'
readiness and the AgentPolicies that select them; never a Task's input or output."""

from __future__ import annotations

from typing import Any

from ordo.console import present
from ordo.console.access import newest


def task(
    name: str,
    *,
    ns: str = "a",
    agent: str = "bot",
    parent: str | None = None,
    created: str = "2026-01-01T00:00:00Z",
    **status: Any,
) -> dict[str, Any]:
    labels = {"ordo.dev/parent": parent} if parent else {}
    return {
        "metadata": {"name": name, "namespace": ns, "labels": labels, "creationTimestamp": created},
        "spec": {"agentRef": agent, "input": "a prompt", "limits": {"maxTokens": 500}},
        "status": status,
    }


def test_rows_filters_and_counts() -> None:
    tasks = [
        task("one", phase="Succeeded", reason="Succeeded", created="2026-01-01T00:00:01Z"),
        task("two", phase="Failed", reason="ToolDenied", created="2026-01-01T00:00:02Z"),
        task("three", ns="b", agent="other", created="2026-01-01T00:00:03Z"),
        task("four", phase="Running", pendingApprovals=[{"callId": "c", "tool": "t", "step": 1}]),
    ]
    everything = present.task_list(tasks, present.Filters())
    assert [r.name for r in everything.rows] == ["three", "two", "one", "four"]
    assert everything.by_phase == [("Failed", 1), ("Pending", 1), ("Running", 1), ("Succeeded", 1)]
    assert everything.choices["namespace"] == ["a", "b"]
    assert everything.choices["reason"] == ["Succeeded", "ToolDenied"]
    assert [r.awaiting for r in everything.rows] == [False, False, False, True]
    failed = present.task_list(tasks, present.Filters(namespace="a", phase="Failed"))
    assert [r.name for r in failed.rows] == ["two"] and failed.total == 1
    assert failed.choices == everything.choices  # choices come from every Task read
    assert present.task_list(tasks, present.Filters(agent="other")).total == 1


def test_the_timeline_groups_decisions_and_verdicts_by_step() -> None:
    t = task(
        "t",
        step=3,
        toolCalls=[
            {"step": 1, "tool": "pay", "decision": "denied", "reason": "ToolRuleDenied: p/r"},
            {
                "step": 2,
                "tool": "get",
                "decision": "allowed",
                "reason": "Allowed",
                "outcome": "succeeded",
            },
        ],
        guardrails=[{"step": 3, "point": "output", "guardrail": "pii", "action": "redacted"}],
    )
    steps = present.timeline(t)
    assert [s.number for s in steps] == [1, 2, 3]
    assert [r["decision"] for r in steps[0].tools] == ["denied"] and not steps[0].guardrails
    assert steps[1].tools[0]["outcome"] == "succeeded"
    assert steps[2].guardrails[0]["guardrail"] == "pii" and not steps[2].tools
    # A record of a step beyond status.step (written before the step count) still shows.
    assert [s.number for s in present.timeline(task("u", step=1, toolCalls=[{"step": 2}]))] == [
        1,
        2,
    ]
    assert present.timeline(task("new")) == []


def test_budget_is_usage_against_the_tasks_limits() -> None:
    t = task("t", step=2, usage={"inputTokens": 10, "outputTokens": 5, "totalTokens": 15})
    rows = present.budget(t)
    assert rows[0] == ("tokens", "15 (10 in, 5 out)", "500")
    assert rows[1] == ("steps", "2", "")
    assert rows[2] == ("time", "not started", "")


def test_the_children_tree_from_labels_and_status() -> None:
    root = task(
        "root",
        children=[
            {"name": "kid", "agent": "bot", "phase": "Running"},
            {"name": "hidden", "agent": "spy", "phase": "Failed", "reason": "Timeout"},
        ],
    )
    tasks = [
        root,
        task("kid", parent="root", created="2026-01-01T00:00:01Z"),
        task("grandkid", parent="kid"),
        task("unrelated"),
    ]
    tree = present.children_tree(root, tasks)
    assert [(n.row.name, n.row.phase) for n in tree] == [("hidden", "Failed"), ("kid", "Pending")]
    assert tree[0].row.reason == "Timeout" and tree[0].row.agent == "spy"
    assert [n.row.name for n in tree[1].children] == ["grandkid"]
    # A cycle of labels ends at the depth bound.
    loop = [task("x", parent="y"), task("y", parent="x")]
    depth, nodes = 0, present.children_tree(loop[1], loop)
    while nodes:
        depth, nodes = depth + 1, nodes[0].children
    assert depth == present.MAX_TREE_DEPTH - 1


def test_agents_with_readiness_suspension_policies_and_recent_tasks() -> None:
    agent = {
        "metadata": {"name": "bot", "namespace": "a", "labels": {"team": "x"}},
        "status": {
            "conditions": [
                {"type": "Ready", "status": "False", "reason": "ModelNotReady", "message": "m"}
            ],
            "suspendedBy": "freeze",
        },
    }
    policies = [
        {"metadata": {"name": "all", "namespace": "a"}, "spec": {}},
        {
            "metadata": {"name": "team-x", "namespace": "a"},
            "spec": {"agentSelector": {"matchLabels": {"team": "x"}}},
        },
        {
            "metadata": {"name": "team-y", "namespace": "a"},
            "spec": {"agentSelector": {"matchLabels": {"team": "y"}}},
        },
        {"metadata": {"name": "elsewhere", "namespace": "b"}, "spec": {}},
        {
            "metadata": {"name": "broken", "namespace": "a"},
            "spec": {"agentSelector": {"matchExpressions": "no"}},
        },
    ]
    tasks = [task(f"t{i}", created=f"2026-01-01T00:00:0{i}Z") for i in range(7)] + [
        task("z", ns="b")
    ]
    (row,) = present.agent_rows([agent], policies, tasks)
    assert (row.ready, row.reason, row.message, row.suspended_by) == (
        "False",
        "ModelNotReady",
        "m",
        "freeze",
    )
    assert row.policies == ["all", "team-x"]
    assert [r.name for r in row.recent] == ["t6", "t5", "t4", "t3", "t2"]


def test_newest_resource_version() -> None:
    assert newest("", "") == "" and newest("", "7") == "7" and newest("12", "9") == "12"
