"""The Teams the Team tests run on the OpenAI wire (tests/wire/test_team_run.py through
`ordo run`, tests/cluster/test_team_cluster.py through the operator): five Agents on one
ModelEndpoint named `model`, a Sequential Team `article` (its last member answers in JSON) and
a Parallel Team `review` (two members and an aggregator)."""

from __future__ import annotations

from typing import Any

AGENTS = ("writer", "editor", "optimist", "skeptic", "judge")
TITLE_SCHEMA = {
    "type": "object",
    "properties": {"title": {"type": "string"}},
    "required": ["title"],
}
MEMBERS = {"write": ["draft", "edit"], "review": ["for", "against", "aggregator"]}
"""The Team Task of each Team (below) and the `member` of each of its children, in order."""


def doc(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "ordo.dev/v1alpha1",
        "kind": kind,
        "metadata": {"name": name},
        "spec": spec,
    }


def team_objects(limits: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The Agents and both Teams (`limits` on each Team, when given)."""
    extra = {"limits": limits} if limits else {}
    return [
        *(doc("Agent", a, {"modelRef": "model", "prompt": f"You are the {a}."}) for a in AGENTS),
        doc(
            "Team",
            "article",
            {
                "strategy": "Sequential",
                "members": [
                    {"name": "draft", "agentRef": "writer"},
                    {"name": "edit", "agentRef": "editor", "outputSchema": TITLE_SCHEMA},
                ],
                **extra,
            },
        ),
        doc(
            "Team",
            "review",
            {
                "strategy": "Parallel",
                "members": [
                    {"name": "for", "agentRef": "optimist"},
                    {"name": "against", "agentRef": "skeptic"},
                ],
                "aggregator": {"agentRef": "judge"},
                **extra,
            },
        ),
    ]


def team_task(name: str, team: str, text: str) -> dict[str, Any]:
    return doc("Task", name, {"teamRef": team, "input": text})
