"""The run of a Team Task (docs/concepts.md#teams): not a model loop, a stateless orchestrator
over the front end's `Delegator`.

Each member (and a Parallel Team's aggregator) runs as a child Task under a key that never
changes (`member-<i>`, `aggregator`), so the children ARE the run's state: a resumed run asks
the delegator again, in the same order and with the same requests, and finds every child that
exists (create-or-get), never a second one. Nothing is checkpointed.

- `Sequential`: member i's input is member i-1's answer (its structured output, as a JSON
  object, when it has one; the first member gets the Task's input). A member still running
  stops the run `AwaitingChildren`; one that did not succeed fails the Team (`ChildFailed`)
  and no later member starts.
- `Parallel`: every member gets the Task's input at once; when all succeeded the aggregator
  gets one JSON object, member name to answer.

Limits narrow: the Team's `limits`, narrowed by the Task's. Each child's timeout is what the
Team has left. Token budget: Sequential, each member gets what is left after the members
before it; Parallel, each member gets an equal share of `budget // (members + 1)` and the
aggregator what the members left — reservations that together never exceed the budget. A
member that ends `TokenBudgetExceeded` on a reservation fails the Team with that reason.
The Team's usage is its children's, summed.

Depth and cycles are those of `agent` Tool calls: the Team Task's chain carries `team/<name>`
(no Agent can have that name), each member's Agent is checked against it before any child
exists (`DelegationCycle`, `DelegationDepthExceeded`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..api import Agent, Task
from ..api.team import Team, TeamMember
from ..engine.delegation import ChildRecord
from ..engine.state import RunResult, RunState
from ..errors import OrdoError, ResolutionError
from . import fetch
from .delegation import (
    DEFAULT_MAX_DEPTH,
    ChildRequest,
    ChildState,
    Delegator,
    Lineage,
    lineage_of,
)
from .outcome import TaskOutcome
from .store import ObjectStore

__all__ = ["TEAM_CHAIN_PREFIX", "TeamRun", "chain_entry", "resolve_team", "run_team"]

TEAM_CHAIN_PREFIX = "team/"
"""A Team Task's own entry on the delegation chain: `team/<name>` (an Agent's name has no
`/`), so its members are at depth 1 and a member's own delegations count from there."""
AGGREGATOR_KEY = "aggregator"


def chain_entry(task: Task) -> str:
    """What a Task puts on its own delegation chain: its Agent, or `team/<name>` for a Team
    Task (what the front ends' delegators derive its children's lineage from)."""
    if task.spec.team_ref is not None:
        return TEAM_CHAIN_PREFIX + task.spec.team_ref
    return task.spec.agent_ref or ""


@dataclass(frozen=True)
class TeamRun:
    """A Team Task resolved: the Team and the limits of this run."""

    task: Task
    team: Team
    timeout: float | None
    """Seconds the whole run may take (None: the Team sets none; each child keeps its own)."""
    token_budget: int | None
    lineage: Lineage

    @property
    def known(self) -> frozenset[str]:
        """The members (and `aggregator`) whose child an earlier execution recorded in the
        Task's `status.children`: a resume never creates those again."""
        children = (self.task.status.children if self.task.status else None) or []
        return frozenset(c.member for c in children if c.member)


def _smallest(*values: Any) -> Any:
    present = [v for v in values if v is not None]
    return min(present) if present else None


async def resolve_team(task: Task, store: ObjectStore) -> TeamRun:
    """The Team and its members' Agents (every one must exist before any child starts:
    `TeamNotFound`, `AgentNotFound` naming the member), and the limits of the run."""
    from ..api import parse_duration

    ns, name = task.namespace, task.spec.team_ref or ""
    team = await fetch.get(store, Team, ns, name, "TeamNotFound", f"Team {name!r}")
    refs = [(m.name, m.agent_ref) for m in team.spec.members]
    if team.spec.aggregator is not None:
        refs.append((AGGREGATOR_KEY, team.spec.aggregator.agent_ref))
    for member, agent in refs:
        what = f"Agent {agent!r} (member {member!r} of Team {name!r})"
        await fetch.get(store, Agent, ns, agent, "AgentNotFound", what)
    own, limits = task.spec.limits, team.spec.limits
    timeout = _smallest(
        parse_duration(limits.timeout) if limits and limits.timeout else None,
        parse_duration(own.timeout) if own and own.timeout else None,
    )
    budget = _smallest(limits.max_tokens if limits else None, own.max_tokens if own else None)
    lineage = lineage_of(task.name, chain_entry(task), task.metadata.model_dump())
    return TeamRun(task, team, timeout, budget, lineage)


class _Failed(Exception):
    """Ends the run: a terminal phase, reason and message."""

    def __init__(self, reason: Any, message: str, phase: Any = "Failed") -> None:
        super().__init__(message)
        self.phase, self.reason, self.message = phase, reason, message


class _Waiting(Exception):
    """A child has not ended: the run stops `AwaitingChildren`."""


def answer(state: ChildState) -> Any:
    """A child's answer as the next input: its structured output, else its text."""
    return state.structured if state.structured is not None else state.output


class _Orchestrator:
    def __init__(
        self,
        run: TeamRun,
        delegator: Delegator,
        anchor: float,
        max_depth: int,
        cancel: asyncio.Event | None,
        clock: Callable[[], float],
    ) -> None:
        self.run, self.delegator, self.anchor = run, delegator, anchor
        self.max_depth, self.cancel, self.clock = max_depth, cancel, clock
        self.state = RunState()
        self.known = run.known

    # -- limits --------------------------------------------------------------------------

    def remaining_time(self) -> float | None:
        if self.run.timeout is None:
            return None
        left = self.run.timeout - (self.clock() - self.anchor)
        if left <= 0:
            raise _Failed("Timeout", f"the Team run took longer than {self.run.timeout:g}s")
        return left

    def spent(self) -> int:
        return self.state.usage.total_tokens

    def left_after(self, spent: int, what: str) -> int | None:
        budget = self.run.token_budget
        if budget is None:
            return None
        if budget - spent < 1:
            raise _Failed(
                "TokenBudgetExceeded",
                f"the Team's token budget ({budget}) is used up before {what} could start",
            )
        return budget - spent

    # -- children ------------------------------------------------------------------------

    def request(
        self, key: str, member: str, agent: str, input_: Any, budget: int | None, schema: Any
    ) -> ChildRequest:
        if self.cancel is not None and self.cancel.is_set():
            raise _Failed("Cancelled", "the Task was cancelled", phase="Cancelled")
        return ChildRequest(
            key=key,
            agent=agent,
            input=input_,
            timeout=self.remaining_time(),
            token_budget=budget,
            member=member,
            output_schema=schema,
            known=member in self.known,
        )

    async def start(self, request: ChildRequest) -> ChildState:
        try:
            child = await self.delegator.start(request)
        except OrdoError as exc:  # ChildNotOwned: never adopted
            raise _Failed(exc.reason, f"member {request.member!r}: {exc.message}") from None
        self.record(request, child)
        return child

    def record(self, request: ChildRequest, child: ChildState) -> None:
        self.state.children[request.key] = ChildRecord(
            request.key,
            child.name,
            request.agent,
            None,
            0,
            request.token_budget,
            child.phase,
            child.reason,
            child.usage.total_tokens if child.ended else 0,
            child.awaiting_approval,
            member=request.member,
        )
        if child.ended:
            self.state.usage = self.state.usage + child.usage

    def check(self, request: ChildRequest, child: ChildState) -> None:
        """Raise unless the child succeeded."""
        if not child.ended:
            raise _Waiting()
        if child.phase == "Succeeded":
            return
        said = f"member {request.member!r} (Task {child.name}) ended {child.phase}"
        said += f" ({child.reason})" if child.reason else ""
        if child.reason in ("ChildVanished", "ChildNotOwned"):
            raise _Failed(child.reason, said)
        if child.reason == "TokenBudgetExceeded" and request.token_budget is not None:
            raise _Failed("TokenBudgetExceeded", said + ": the Team's token budget")
        raise _Failed("ChildFailed", said)

    def refuse(self, agents: Sequence[tuple[str, str]]) -> None:
        """Depth and cycles, for every child before the first one exists."""
        for member, agent in agents:
            refusal = self.run.lineage.refusal(agent, self.max_depth)
            if refusal is not None:
                raise _Failed(refusal[0], f"member {member!r}: {refusal[1]}")

    # -- strategies ----------------------------------------------------------------------

    async def sequential(self) -> ChildState:
        members = self.run.team.spec.members
        value: Any = self.run.task.spec.input
        child: ChildState | None = None
        for i, member in enumerate(members):
            schema = member.output_schema
            if i == len(members) - 1 and self.run.task.spec.output_schema is not None:
                schema = self.run.task.spec.output_schema
            budget = self.left_after(self.spent(), f"member {member.name!r}")
            request = self.request(
                f"member-{i}", member.name, member.agent_ref, value, budget, schema
            )
            child = await self.start(request)
            self.check(request, child)
            value = answer(child)
        assert child is not None  # members has at least one entry (the CRD's minItems)
        return child

    async def parallel(self) -> ChildState:
        spec = self.run.team.spec
        assert spec.aggregator is not None  # the CRD requires it for Parallel
        share = None
        if self.run.token_budget is not None:
            share = self.run.token_budget // (len(spec.members) + 1)
            if share < 1:
                raise _Failed(
                    "TokenBudgetExceeded",
                    f"the Team's token budget ({self.run.token_budget}) cannot be shared by "
                    f"{len(spec.members)} members and the aggregator",
                )
        requests = [self._member(i, m, share) for i, m in enumerate(spec.members)]
        started = await asyncio.gather(
            *(self.delegator.start(r) for r in requests), return_exceptions=True
        )
        children: list[ChildState] = []
        for request, got in zip(requests, started, strict=True):
            if isinstance(got, OrdoError):
                raise _Failed(got.reason, f"member {request.member!r}: {got.message}")
            if isinstance(got, BaseException):
                raise got
            self.record(request, got)
            children.append(got)
        for request, child in zip(requests, children, strict=True):
            if child.ended:
                self.check(request, child)
        if any(not c.ended for c in children):
            raise _Waiting()
        answers = {m.name: answer(c) for m, c in zip(spec.members, children, strict=True)}
        budget = self.left_after(self.spent(), "the aggregator")
        request = self.request(
            AGGREGATOR_KEY,
            AGGREGATOR_KEY,
            spec.aggregator.agent_ref,
            answers,
            budget,
            self.run.task.spec.output_schema,
        )
        child = await self.start(request)
        self.check(request, child)
        return child

    def _member(self, i: int, member: TeamMember, share: int | None) -> ChildRequest:
        return self.request(
            f"member-{i}",
            member.name,
            member.agent_ref,
            self.run.task.spec.input,
            share,
            member.output_schema,
        )

    # -- the run -------------------------------------------------------------------------

    async def __call__(self) -> TaskOutcome:
        spec = self.run.team.spec
        agents = [(m.name, m.agent_ref) for m in spec.members]
        if spec.aggregator is not None:
            agents.append((AGGREGATOR_KEY, spec.aggregator.agent_ref))
        try:
            self.refuse(agents)
            final = await (self.sequential() if spec.strategy == "Sequential" else self.parallel())
        except _Failed as end:
            return self.outcome(end.phase, end.reason, end.message)
        except _Waiting:
            waiting = [c.name for c in self.state.waiting_children]
            return self.outcome(
                "AwaitingChildren",
                "AwaitingChildren",
                f"waiting for child Task(s) {', '.join(waiting)}",
            )
        said = f"the team answered ({len(self.state.children)} child Task(s))"
        return self.outcome("Succeeded", "Succeeded", said, final.output, final.structured)

    def outcome(
        self,
        phase: Any,
        reason: Any,
        message: str,
        output: str = "",
        structured: dict[str, Any] | None = None,
    ) -> TaskOutcome:
        result = RunResult(phase, reason, message, output, structured, self.state)
        return TaskOutcome(phase, reason, message, result)


async def run_team(
    run: TeamRun,
    delegator: Delegator | None,
    *,
    anchor: float,
    max_depth: int | None = None,
    cancel: asyncio.Event | None = None,
    clock: Callable[[], float] = time.time,
) -> TaskOutcome:
    """Run (or resume) a resolved Team Task to a terminal outcome, or to `AwaitingChildren`
    while a child runs. `anchor`: when the Task was first claimed (epoch seconds)."""
    if delegator is None:
        error = ResolutionError(
            "InvalidSpec",
            "a Team Task runs its members as child Tasks: delegation is not "
            "available here (run it with the operator or `ordo run`)",
        )
        return TaskOutcome("Failed", error.reason, error.message, error=error)
    depth = DEFAULT_MAX_DEPTH if max_depth is None else max_depth
    return await _Orchestrator(run, delegator, anchor, depth, cancel, clock)()
