"""`TaskOutcome`: how a Task run ended, and the `InternalError` outcome of an unexpected
exception. Its own module so that what reads an outcome (runtime/tracing.py's span, the
operator's writer) does not import `execute`, which produces it."""

from __future__ import annotations

import logging
import traceback
from dataclasses import dataclass, field

from ..api.phases import RunPhase, TerminalPhase
from ..api.task import Reason, TaskStatus
from ..engine.state import RunResult, RunState
from ..errors import LeaseLost, OrdoError
from . import status as status_mod
from .snapshot import Snapshot

__all__ = ["OutcomePhase", "TaskOutcome", "TerminalPhase", "internal_error"]

log = logging.getLogger("ordo.run")
OutcomePhase = RunPhase
"""`AwaitingApproval` and `AwaitingChildren` are not terminal: the run stopped to wait for a
human decision, or for its child Tasks."""


@dataclass(frozen=True)
class TaskOutcome:
    """How a Task ended."""

    phase: OutcomePhase
    reason: Reason
    message: str
    result: RunResult | None = None
    snapshot: Snapshot | None = None
    error: OrdoError | None = field(default=None, compare=False)
    """The ordo error that ended the run, if one did."""
    trace_id: str | None = None
    """The trace of the run's invoke_agent span (runtime/tracing.py): status.traceId."""
    state: RunState | None = None
    """How far a run got that ended without a result (an error exit): its step, usage and
    tool calls go into the status. None: no state was known (the operator then keeps what
    the Task's status already shows, operator/tasks/writer.py)."""

    @property
    def known_state(self) -> RunState | None:
        """The run state this outcome reports, from its result or its error exit."""
        return self.result.state if self.result is not None else self.state

    @property
    def awaiting(self) -> bool:
        """The run stopped to wait for approvals (not terminal; result.state has them)."""
        return self.phase == "AwaitingApproval"

    @property
    def awaiting_children(self) -> bool:
        """The run stopped to wait for child Tasks, none for a human (not terminal;
        result.state.children has them)."""
        return self.phase == "AwaitingChildren"

    @property
    def abandoned(self) -> bool:
        """The run stopped because another execution owns the Task: write nothing."""
        return isinstance(self.error, LeaseLost)

    def status(self) -> TaskStatus:
        status = self._status()
        return status.model_copy(update={"trace_id": self.trace_id}) if self.trace_id else status

    def _status(self) -> TaskStatus:
        result, snapshot, phase = self.result, self.snapshot, self.phase
        if phase == "AwaitingApproval" or phase == "AwaitingChildren":
            raise ValueError(f"a run stopped {phase} has no terminal status")
        return status_mod.terminal(
            phase,
            self.reason,
            self.message,
            state=self.known_state,
            output=result.output if result else "",
            structured_output=result.structured_output if result else None,
            snapshot_hash=snapshot.content_hash if snapshot else None,
            agent_generation=snapshot.agent_generation if snapshot else None,
        )


def internal_error(
    exc: BaseException, snapshot: Snapshot | None = None, state: RunState | None = None
) -> TaskOutcome:
    """An unexpected exception as a terminal outcome that keeps `state` (how far the run
    got). The message and the log name only the exception type and the code locations — an
    exception's text may carry content."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = [f"{f.filename.rsplit('/', 1)[-1]}:{f.lineno}:{f.name}" for f in frames[-6:]]
    log.error(
        "run ended by an unexpected error",
        extra={"ordo": {"errorType": type(exc).__name__, "where": where}},
    )
    return TaskOutcome(
        "Failed",
        "InternalError",
        f"the run ended by an unexpected {type(exc).__name__}; this is a bug in ordo, the "
        "operator log has where it happened",
        snapshot=snapshot,
        error=OrdoError(type(exc).__name__),
        state=state,
    )
