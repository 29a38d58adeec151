"""Trees of Tasks (docs/concepts.md#trees): the one vocabulary every part of delegation
shares — the engine's `agent` tool calls, Teams, the operator (child Tasks as objects) and
`ordo run` (child Tasks in process).

A Task delegates by asking its `Delegator` for a child: `ChildRequest` says which Agent, with
what input and what is left of the parent's limits, under a `key` that survives every resume
of the parent (the checkpointed tool-call id, or `member-<i>` for a Team member). The child's
name derives from the parent's uid and that key (`child_name`), never from an execution id, so
a resumed or retried parent finds its existing child and never creates a second one.
`Delegator.start` is create-or-get: it returns the child's `ChildState` as it is now — ended
(its answer becomes the call's result), or still running (the parent waits without holding a
slot, and looks again when the child ends). A name taken by an object the parent does not own
is never adopted (`ChildNotOwned`).

Where a Task sits in its tree (`Lineage`) travels on the child: labels name its parent and its
root, an annotation the chain of Agents from the root down. A call to an Agent already on the
chain is a cycle (`DelegationCycle`), a call from a Task at the depth limit is too deep
(`DelegationDepthExceeded`): both are refused before any child exists.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from ..api.phases import TERMINAL_PHASES, Phase
from ..api.task import Reason
from ..errors import OrdoError
from .transcript import Usage

__all__ = [
    "CHAIN_ANNOTATION",
    "DEFAULT_MAX_DEPTH",
    "PARENT_LABEL",
    "PARENT_UID_LABEL",
    "ROOT_LABEL",
    "ChildNotOwned",
    "ChildRecord",
    "ChildRequest",
    "ChildState",
    "Delegator",
    "Lineage",
    "child_name",
    "lineage_of",
]

PARENT_LABEL = "ordo.dev/parent"
"""On a child Task: its parent Task's name (`kubectl get tasks -l ordo.dev/parent=NAME`)."""
PARENT_UID_LABEL = "ordo.dev/parent-uid"
"""On a child Task: its parent Task's uid (a parent of the same name recreated is another)."""
ROOT_LABEL = "ordo.dev/root"
"""On a child Task: the name of the Task at the root of its tree."""
CHAIN_ANNOTATION = "ordo.dev/delegation-chain"
"""On a child Task: a JSON list of the Agents from the root Task's down to its own."""

DEFAULT_MAX_DEPTH = 3
"""The operator's `--max-delegation-depth` unless set: a root, its children, grandchildren
and great-grandchildren."""

_NAME_PREFIX_CHARS = 40
_INVALID = re.compile(r"[^a-z0-9-]")


def child_name(parent_name: str, parent_uid: str, key: str) -> str:
    """The child Task's name: the parent's name (shortened) and a digest of the parent's uid
    and `key`. Stable across every resume of the parent; unique per parent and key; a valid
    object name and label value (at most 51 characters)."""
    digest = hashlib.sha256(f"{parent_uid}\x00{key}".encode()).hexdigest()[:10]
    prefix = _INVALID.sub("-", parent_name.lower())[:_NAME_PREFIX_CHARS].strip("-") or "task"
    return f"{prefix}-{digest}"


@dataclass(frozen=True, slots=True)
class Lineage:
    """Where a Task sits in its tree."""

    root: str
    """The root Task's name (its own name for a root)."""
    chain: tuple[str, ...]
    """The Agents from the root's down to this Task's own (inclusive)."""

    @property
    def depth(self) -> int:
        """0 for a root, 1 for its children, ..."""
        return max(0, len(self.chain) - 1)

    def child(self, agent: str) -> Lineage:
        return Lineage(self.root, (*self.chain, agent))

    def refusal(self, agent: str, max_depth: int) -> tuple[Reason, str] | None:
        """Why this Task may not delegate to `agent` (a cycle, or too deep), or None."""
        if agent in self.chain:
            path = " -> ".join((*self.chain, agent))
            return "DelegationCycle", f"delegating to agent {agent!r} would be a cycle ({path})"
        if self.depth >= max_depth:
            return (
                "DelegationDepthExceeded",
                f"this Task is at delegation depth {self.depth}, the limit is {max_depth}",
            )
        return None


def lineage_of(task_name: str, agent: str, metadata: dict[str, Any] | None) -> Lineage:
    """The lineage a Task's metadata records (a root when it records none, or none that
    parses: a Task without a valid chain is the root of its own tree, and its own Agent is on
    its chain whatever the annotation says)."""
    meta = metadata or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    chain: tuple[str, ...] = ()
    raw = annotations.get(CHAIN_ANNOTATION)
    if isinstance(raw, str) and len(raw) <= 8192:
        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = None
        if isinstance(parsed, list) and all(isinstance(a, str) for a in parsed):
            chain = tuple(parsed)
    root = labels.get(ROOT_LABEL) if chain else None
    if not chain or chain[-1] != agent:
        chain = (*chain, agent)
    return Lineage(root if isinstance(root, str) and root else task_name, chain)


@dataclass(frozen=True, slots=True)
class ChildRequest:
    """What a parent asks of one child."""

    key: str
    """What survives every resume of the parent: the tool call's id, or `member-<i>`."""
    agent: str
    """The child's Agent (the parent's namespace)."""
    input: Any
    """The child Task's `spec.input` (a string or a JSON object)."""
    timeout: float | None
    """Seconds the child may run: at most what the parent has left (None: no parent limit)."""
    token_budget: int | None
    """Tokens reserved for the child from what the parent has left (None: no parent budget)."""
    tool: str | None = None
    """The `agent` Tool whose call this is (None for a Team member)."""
    member: str | None = None
    """The Team member this child runs (None for a tool call)."""
    output_schema: dict[str, Any] | None = None
    """The child's `spec.outputSchema`, if the parent wants structured output."""
    traceparent: str | None = None
    """The W3C traceparent of the call's execute_tool span (runtime/tracing.py): the child's
    run span nests under it (annotation `ordo.dev/traceparent`)."""
    known: bool = False
    """The parent's state already records this child (`RunState.children`): if it is gone,
    the delegator answers `ChildState(phase="Failed", reason="ChildVanished")` and never
    creates it again."""


@dataclass(frozen=True, slots=True)
class ChildState:
    """A child Task as its parent sees it."""

    name: str
    agent: str
    phase: Phase
    reason: Reason | None = None
    message: str = ""
    output: str = ""
    structured: dict[str, Any] | None = None
    usage: Usage = field(default_factory=Usage)
    awaiting_approval: bool = False

    @property
    def ended(self) -> bool:
        return self.phase in TERMINAL_PHASES


@dataclass(frozen=True, slots=True)
class ChildRecord:
    """A child the run started (`RunState.children`, by call id), in the checkpoint: pending
    until it ends, then how it ended (its tokens are then in the run's usage, once)."""

    key: str
    name: str
    agent: str
    tool: str | None
    """The model-visible name of the `agent` Tool that started it."""
    step: int
    reserved_tokens: int | None
    """What it was given of the parent's budget (None: the parent has none)."""
    phase: Phase = "Pending"
    reason: Reason | None = None
    tokens: int = 0
    awaiting_approval: bool = False
    decided: str = ""
    """The call's decision reason when its child started (`Approved: ...` after a human
    approval): the record keeps it when the call is answered after a resume."""
    approved_by: tuple[str, ...] = ()
    """Who approved the call, if an approval was needed."""
    member: str | None = None
    """The Team member it runs (runtime/team.py; None for a tool call's child)."""

    @property
    def ended(self) -> bool:
        return self.phase in TERMINAL_PHASES

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "name": self.name,
            "agent": self.agent,
            "tool": self.tool,
            "step": self.step,
            "reservedTokens": self.reserved_tokens,
            "phase": self.phase,
            "reason": self.reason,
            "tokens": self.tokens,
            **({"awaitingApproval": True} if self.awaiting_approval else {}),
            **({"decided": self.decided} if self.decided else {}),
            **({"approvedBy": list(self.approved_by)} if self.approved_by else {}),
            **({"member": self.member} if self.member is not None else {}),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ChildRecord:
        reserved = d.get("reservedTokens")
        return cls(
            str(d["key"]),
            str(d["name"]),
            str(d["agent"]),
            d.get("tool"),
            int(d.get("step", 0)),
            int(reserved) if reserved is not None else None,
            d.get("phase") or "Pending",
            d.get("reason"),
            int(d.get("tokens", 0)),
            bool(d.get("awaitingApproval", False)),
            str(d.get("decided", "")),
            tuple(str(a) for a in d.get("approvedBy") or ()),
            d.get("member"),
        )


class ChildNotOwned(OrdoError):
    """A child's name is taken by an object the parent does not own: never adopted."""

    default_reason: ClassVar[Reason] = "ChildNotOwned"


class Delegator(Protocol):
    """Creates (or finds) a parent Task's children."""

    async def start(self, request: ChildRequest) -> ChildState:
        """Create the child for `request.key`, or find the one that exists, and say how it is
        now. Idempotent per key: never a second child. Raises `ChildNotOwned`."""
        ...
