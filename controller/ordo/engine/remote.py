"""What an `a2a` Tool's calls reach, as the engine sees it (engine/remotecalls.py runs the
calls; tools/a2a.py is the a2a-sdk client behind `RemoteAgent`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "ASKING_STATES",
    "ENDED_STATES",
    "RemoteAgent",
    "RemoteRecord",
    "RemoteTarget",
    "RemoteTask",
]

ENDED_STATES = frozenset({"completed", "failed", "canceled", "rejected"})
"""A2A task states after which nothing changes."""
ASKING_STATES = frozenset({"input-required", "auth-required"})
"""A2A task states that wait for the caller: a tool call cannot answer them, so the call ends
with an error result and the remote task is cancelled."""


@dataclass(frozen=True, slots=True)
class RemoteTask:
    """A remote agent's task as the caller sees it: its id, its A2A state (`working`,
    `completed`, ...) and its answer or error text (capped by the RemoteAgent)."""

    id: str
    state: str
    text: str = ""

    @property
    def ended(self) -> bool:
        return self.state in ENDED_STATES or self.state in ASKING_STATES


class RemoteAgent(Protocol):
    """One remote A2A agent, as an `a2a` Tool's calls reach it (tools/a2a.py)."""

    async def send(self, key: str, message: Any, chain: tuple[str, ...]) -> RemoteTask:
        """Send `message` under a message id derived from the Task and `key` (the call id),
        with `chain` in the metadata; the task it started (its state as sent back)."""
        ...

    async def get(self, task_id: str) -> RemoteTask:
        """The task as it is now (GetTask)."""
        ...

    async def cancel(self, task_id: str) -> None:
        """Ask the remote agent to cancel the task (CancelTask)."""
        ...


@dataclass(frozen=True, slots=True)
class RemoteTarget:
    """What an `a2a` Tool's calls go to."""

    agent: RemoteAgent
    whole_arguments: bool = False
    """The Tool has its own input schema: the arguments, as JSON, are the message (else the
    default schema's `input` string is)."""


@dataclass(frozen=True, slots=True)
class RemoteRecord:
    """An `a2a` call that may have been sent (`RunState.remote_tasks`, by call id), in the
    checkpoint: recorded before the send, its remote task id added right after it."""

    key: str
    task_id: str = ""
    """The remote task (empty: the send may have happened, its answer was not recorded)."""
    until: float = 0.0
    """When the call stops waiting (epoch seconds: the Tool's timeout from the send)."""
    decided: str = ""
    """The call's decision reason when it was sent (`Approved: ...` after a human approval):
    a resumed run is not screened, guarded or approved again, the record keeps it."""
    approved_by: tuple[str, ...] = ()
    """Who approved the call, if an approval was needed."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "taskId": self.task_id,
            "until": self.until,
            **({"decided": self.decided} if self.decided else {}),
            **({"approvedBy": list(self.approved_by)} if self.approved_by else {}),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RemoteRecord:
        return cls(
            str(d["key"]),
            str(d.get("taskId", "")),
            float(d.get("until", 0.0)),
            str(d.get("decided", "")),
            tuple(str(a) for a in d.get("approvedBy") or ()),
        )
