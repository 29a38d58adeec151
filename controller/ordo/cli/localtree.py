"""`ordo run`'s trees of Tasks (docs/concepts.md#trees): a child Task runs in this process, to
its end, with the same store, model factory and approver as its parent (children may
delegate in turn), so locally a delegating call never waits. Every Task run is a row of the
live view, indented under its parent (`Tree`); cancelling the run (Ctrl-C) cancels every
child too, since a child runs inside its parent's call.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from ..api import Task
from ..engine.events import (
    Event,
    ModelResponded,
    RunFinished,
    StepStarted,
    ToolDecided,
    ToolFinished,
)
from ..engine.transcript import Usage
from ..runtime import TaskOutcome
from ..runtime.childtask import child_task_body
from ..runtime.delegation import ChildRequest, ChildState, lineage_of
from ..runtime.team import chain_entry

__all__ = ["LocalDelegator", "Progress", "Tree", "child_state"]


@dataclass
class Progress:
    """Live view of one Task (names and counts only, never content)."""

    name: str
    agent: str
    depth: int = 0
    """0 for a Task of the manifests, 1 for its children, ..."""
    phase: str = "Pending"
    step: int = 0
    tokens: int = 0
    last: str = ""
    started: float = field(default_factory=time.monotonic)

    async def __call__(self, event: Event) -> None:
        if isinstance(event, StepStarted):
            self.phase, self.step, self.last = "Running", event.step, "calling model"
        elif isinstance(event, ModelResponded):
            self.tokens += event.usage.total_tokens
            self.last = (
                f"model answered ({event.tool_calls} tool call(s))"
                if event.tool_calls
                else "model answered"
            )
        elif isinstance(event, ToolDecided):
            r = event.record
            self.last = f"{r.tool}: {r.decision} ({r.reason})"
        elif isinstance(event, ToolFinished):
            self.last = f"{event.tool}: {event.outcome}"
        elif isinstance(event, RunFinished):
            self.phase, self.last = event.result.phase, event.result.reason

    def ended(self, outcome: TaskOutcome) -> None:
        """The final row: phase, reason and the tokens of the Task's tree."""
        self.phase, self.last = outcome.phase, outcome.reason
        state = outcome.known_state
        if state is not None:
            self.tokens = state.usage.total_tokens


@dataclass
class Tree:
    """Every Task of the run, in tree order (a child right under its parent's subtree)."""

    rows: list[Progress] = field(default_factory=list)
    tasks: dict[str, Task] = field(default_factory=dict)
    outcomes: dict[str, TaskOutcome] = field(default_factory=dict)

    def add(self, task: Task, view: Progress, parent: Progress | None = None) -> None:
        self.tasks[view.name] = task
        if parent is None:
            self.rows.append(view)
            return
        at = self.rows.index(parent) + 1
        while at < len(self.rows) and self.rows[at].depth > parent.depth:
            at += 1
        self.rows.insert(at, view)

    def ran(self) -> list[tuple[Task, TaskOutcome]]:
        """The Tasks that ended, in tree order."""
        return [
            (self.tasks[r.name], self.outcomes[r.name])
            for r in self.rows
            if r.name in self.outcomes
        ]


def child_state(name: str, agent: str, outcome: TaskOutcome) -> ChildState:
    """A child's outcome as its parent sees it (a run that did not end counts as Failed:
    locally nothing can resume it)."""
    state, result, phase = outcome.known_state, outcome.result, outcome.phase
    return ChildState(
        name,
        agent,
        "Failed" if phase == "AwaitingApproval" or phase == "AwaitingChildren" else phase,
        outcome.reason,
        outcome.message,
        result.output if result is not None else "",
        result.structured_output if result is not None else None,
        state.usage if state is not None else Usage(),
    )


RunChild = Callable[[Task], Awaitable[TaskOutcome]]
"""Runs one child Task to its end (as `ordo run` runs its Tasks, with their own delegator)."""


class LocalDelegator:
    """One parent Task's children, run in process: created once per key, to their end."""

    def __init__(self, parent: Task, run: RunChild) -> None:
        self.parent = parent
        self.lineage = lineage_of(
            parent.name,
            chain_entry(parent),
            {"labels": parent.metadata.labels, "annotations": parent.metadata.annotations},
        )
        self.run = run
        self.children: dict[str, ChildState] = {}

    async def start(self, request: ChildRequest) -> ChildState:
        body = child_task_body(self.parent, self.lineage, request)
        name = body["metadata"]["name"]
        known = self.children.get(name)
        if known is not None:
            return known
        if request.known:  # recorded by a state this process never ran: it is gone
            return ChildState(name, request.agent, "Failed", "ChildVanished", "not found")
        outcome = await self.run(Task.model_validate(body))
        state = child_state(name, request.agent, outcome)
        self.children[name] = state
        return state
