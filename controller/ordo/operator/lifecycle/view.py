"""A Task as one watch event shows it, read once (the first step of the story: watch event ->
view -> decide -> action -> job).

`TaskView.of` is in the hot path of every replica (one call per watch event of every Task,
29 Tasks/s and several events each in the operator bench), so it is plain dict reads; the
lease's remaining time (an RFC 3339 parse) is read only for a `Running` Task that does not
run in a Job, the only case a decision needs it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ..jobmode.spec import runs_in_job
from ..tasks.approvals import awaiting
from ..tasks.lease import remaining
from ..tasks.writer import FINALIZER


@dataclass(frozen=True, slots=True)
class TaskView:
    """What the scheduler decides on, and `body`, the Task it came from (for the writes)."""

    uid: str
    phase: str | None
    """`status.phase`; None for a Task no process has written yet."""
    finalized: bool
    """ordo's finalizer is on the Task: a process reserved, claimed or ran it."""
    stopping: bool
    """Being deleted, or `spec.cancel` is set: its job must stop it."""
    awaiting: bool
    """Condition `AwaitingApproval` is True: the run waits for tool-call decisions."""
    in_job: bool
    """Running in execution mode Job: its pod holds the lease, the operator supervises."""
    holder: str | None
    """`status.lease.holder` of a Running Task outside a Job ("" when not a string), else
    None (no lease, or not Running outside a Job)."""
    deleted: bool
    """The event is DELETED (the Task is gone)."""
    body: dict[str, Any]

    # Few fields: building a frozen dataclass costs per field, on every event.

    def lease_left(self, left: Callable[[dict[str, Any]], float] | None = None) -> float:
        """Seconds until the Task's lease lapses, as of now (0: none, expired, released), by
        the liveness rule `left` (processlease.py; default: the Task's own renewTime +
        durationSeconds). Asked only of a Running Task whose lease another process holds."""
        return left(self.body) if left is not None else remaining(self.body, datetime.now(UTC))

    @property
    def namespace(self) -> str:
        return str(self.body["metadata"].get("namespace", ""))

    @property
    def name(self) -> str:
        return str(self.body["metadata"].get("name", ""))

    @property
    def new(self) -> bool:
        """Pending (or never written) and reserved by nobody."""
        return self.phase in (None, "Pending") and not self.finalized

    @staticmethod
    def of(body: dict[str, Any], event_type: str | None = None) -> TaskView | None:
        """The view of a Task body as watch event `event_type` (None: a LIST or a read)
        shows it; None without a uid (nothing to key a job by)."""
        meta = body.get("metadata") or {}
        uid = meta.get("uid")
        if not uid:
            return None
        status = body.get("status") or {}
        phase = status.get("phase")
        in_job = runs_in_job(body)
        holder: str | None = None
        if phase == "Running" and not in_job:
            lease = status.get("lease")
            if isinstance(lease, dict):
                found = lease.get("holder")
                holder = found if isinstance(found, str) else ""
        return TaskView(
            str(uid),
            phase,
            FINALIZER in (meta.get("finalizers") or ()),
            bool(meta.get("deletionTimestamp")) or bool((body.get("spec") or {}).get("cancel")),
            awaiting(body),
            in_job,
            holder,
            event_type == "DELETED",
            body,
        )
