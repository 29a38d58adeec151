"""Team: a fixed group of Agents that runs one Task together (docs/concepts.md#teams).

A Task names a Team (`spec.teamRef`) instead of an Agent. `Sequential` runs the members one
after the other, each member's answer the next one's input; `Parallel` gives every member the
Task's input at once, then the aggregator Agent all their answers. Every member runs as a
child Task (runtime/team.py), so each keeps its own Agent's governance and limits.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, field_validator

from .base import (
    DNS1123_LABEL,
    CelRule,
    JsonObject,
    Name,
    OrdoModel,
    PositiveDuration,
    Resource,
    StatusBase,
)
from .jsonschemas import user_schema

TeamStrategy = Literal["Sequential", "Parallel"]
MAX_MEMBERS = 16


class TeamMember(OrdoModel):
    """One member: an Agent of the namespace, run as a child Task."""

    name: Annotated[str, Field(min_length=1, max_length=63, pattern=DNS1123_LABEL)]
    """The member's name in the Team (unique): the aggregator's input names answers by it."""
    agent_ref: Name
    """The Agent that runs this member."""
    output_schema: JsonObject | None = None
    """JSON Schema of the member's answer (the child Task's `spec.outputSchema`); in a
    Sequential Team the next member then gets the structured answer as JSON."""

    _check_output_schema = field_validator("output_schema")(user_schema)


class TeamAggregator(OrdoModel):
    """The Agent that turns the members' answers into the Team's answer (Parallel)."""

    agent_ref: Name
    """The aggregating Agent: its input is one JSON object, member name to answer."""


class TeamLimits(OrdoModel):
    """Bounds of one run of the Team, over all its children (a Task's `limits` narrow them)."""

    timeout: PositiveDuration | None = None
    """Deadline of the whole Team run; every child's deadline is inside it."""
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    """Token budget of the whole Team run: the children's tokens together never exceed it."""


class TeamSpec(OrdoModel):
    """Desired state of a Team."""

    strategy: TeamStrategy
    """`Sequential`: each member's answer is the next member's input; `Parallel`: every member
    gets the Task's input at once, then the aggregator gets all answers."""
    members: Annotated[list[TeamMember], Field(min_length=1, max_length=MAX_MEMBERS)]
    """The members, in order (1 to 16, names unique)."""
    aggregator: TeamAggregator | None = None
    """Required for Parallel, not allowed for Sequential (whose last member answers)."""
    limits: TeamLimits | None = None
    """Limits of a run of the Team."""
    description: Annotated[str, Field(max_length=1024)] | None = None
    """What the Team is for (documentation only)."""

    cel_rules: ClassVar[tuple[CelRule, ...]] = (
        CelRule(
            rule="self.strategy != 'Parallel' || has(self.aggregator)",
            message="spec.aggregator is required when spec.strategy is Parallel",
            check=lambda s: s.strategy != "Parallel" or s.aggregator is not None,
        ),
        CelRule(
            rule="self.strategy != 'Sequential' || !has(self.aggregator)",
            message="spec.aggregator is not allowed when spec.strategy is Sequential",
            check=lambda s: s.strategy != "Sequential" or s.aggregator is None,
        ),
        CelRule(
            rule="self.members.all(m, self.members.exists_one(n, n.name == m.name))",
            message="spec.members[].name must be unique within the Team",
            check=lambda s: len({m.name for m in s.members}) == len(s.members),
        ),
    )


class Team(Resource):
    """A group of Agents that runs a Task together."""

    kind: Literal["Team"] = "Team"
    spec: TeamSpec
    status: StatusBase | None = None
