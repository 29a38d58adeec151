"""An in-memory Delegator for delegation tests: children created once per key, ended when the
test says so; real engine types, nothing monkeypatched."""

from __future__ import annotations

from dataclasses import dataclass, field

from ordo.engine.delegation import ChildNotOwned, ChildRequest, ChildState, child_name
from ordo.engine.transcript import Usage


@dataclass
class FakeDelegator:
    """Children in memory by key: created on first start, ended when `end` says so."""

    parent: str = "parent"
    finish_at_once: bool = False
    children: dict[str, ChildState] = field(default_factory=dict)
    requests: list[ChildRequest] = field(default_factory=list)
    created: int = 0
    foreign: set[str] = field(default_factory=set)
    usage: Usage = field(default_factory=lambda: Usage(30, 20))

    async def start(self, request: ChildRequest) -> ChildState:
        self.requests.append(request)
        name = child_name(self.parent, "uid-1", request.key)
        if request.key in self.foreign:
            raise ChildNotOwned(f"Task {name!r} exists and is not owned by Task 'parent'")
        known = self.children.get(request.key)
        if known is not None:
            return known
        if request.known:
            return ChildState(name, request.agent, "Failed", "ChildVanished", "it was deleted")
        self.created += 1
        state = ChildState(name, request.agent, "Running")
        if self.finish_at_once:
            state = self.ended(state, f"answer of {request.agent}")
        self.children[request.key] = state
        return state

    def ended(self, child: ChildState, output: str) -> ChildState:
        return ChildState(
            child.name, child.agent, "Succeeded", "Succeeded", output=output, usage=self.usage
        )

    def end(self, key: str, output: str = "child answer") -> None:
        self.children[key] = self.ended(self.children[key], output)

    def fail(self, key: str, reason: str = "MaxStepsExceeded") -> None:
        child = self.children[key]
        self.children[key] = ChildState(
            child.name,
            child.agent,
            "Failed",
            reason,
            "no answer",
            usage=self.usage,  # type: ignore[arg-type]
        )
