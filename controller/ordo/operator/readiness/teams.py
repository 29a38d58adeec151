"""The `Ready` verdict of a Team (the readiness reconciler, reconciler.py, evaluates it): every
member's Agent and the aggregator's exist in the namespace (`MissingReferences`, naming them).
A Task of a Team that is not Ready still runs when its Agents appear in time: the operator
waits `--reference-grace` for them (operator/tasks/references.py)."""

from __future__ import annotations

from typing import Any

from ...api.manifests import references
from ...api.team import Team
from ...runtime.store import ObjectStore
from .verdicts import Verdict


async def team_verdict(body: dict[str, Any], store: ObjectStore) -> Verdict:
    team = Team.model_validate(body)
    missing = [
        f"{kind}/{name}"
        for _, kind, name in references(team)  # the one list of what a Team refers to
        if await store.get(kind, team.namespace, name) is None
    ]
    if missing:
        return Verdict("False", "MissingReferences", "not found: " + ", ".join(missing))
    count = len(team.spec.members) + (1 if team.spec.aggregator is not None else 0)
    return Verdict("True", "Resolved", f"the {count} Agent(s) of the Team exist")
