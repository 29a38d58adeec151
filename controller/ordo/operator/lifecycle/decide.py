"""What this process does with one watch event of a Task: a pure function of the event's
view (view.py) and of this process's own state (`Local`), returning one `Action` from a
closed union. The scheduler's dispatcher (scheduler.py) is the only code that applies
actions: it owns the timers, the jobs and the spawned writes.

The story of one event: DELETED stops the Task's job; a Task with a job here only tells it
what changed; a Task nobody needs to act on now (finished with a finalizer its runner is
about to remove, Running under another holder's live lease, reserved by another process,
new but another replica's share) gets a look later, which the Task's next event replaces;
everything else starts a job (job.py, process.py).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, assert_never

from ...api import TERMINAL_PHASES
from .view import TaskView

RELEASE_GRACE_SECONDS = 5.0
"""How long a finished Task may keep ordo's finalizer before a process that did not run it
removes it (the one that ran it does so right after its terminal write)."""
DEFER_TO_PREFERRED_SECONDS = 0.1
"""How long a process leaves a new Task to the replica that the Task's hash prefers
(`preferred`) before reserving it itself."""
LEASE_EXPIRY_SLACK_SECONDS = 0.5
"""Added to another holder's remaining lease before looking at its Task again."""


@dataclass(frozen=True, slots=True)
class Graces:
    """The waits `decide` chooses between (module defaults; tests shorten them)."""

    lease_seconds: float
    release: float = RELEASE_GRACE_SECONDS
    defer: float = DEFER_TO_PREFERRED_SECONDS
    slack: float = LEASE_EXPIRY_SLACK_SECONDS


@dataclass(frozen=True, slots=True)
class Local:
    """This process's state that one decision depends on."""

    identity: str
    """This process, as a lease holder."""
    has_job: bool
    """This process has a job for the Task's uid."""
    peers: tuple[str, ...]
    """The other live replicas of this scope (their process Leases)."""
    graces: Graces
    lease_left: Callable[[dict[str, Any]], float] | None = None
    """The liveness rule for a Task another process holds (processlease.py `left`); None:
    the Task's own renewTime + durationSeconds."""


# -- the actions -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Ignore:
    """Nothing to do for this event."""


IGNORE = Ignore()


@dataclass(frozen=True, slots=True)
class StopJob:
    """The Task is gone: cancel its job (a Running Task's checkpoint stays with it)."""

    uid: str


@dataclass(frozen=True, slots=True)
class NotifyJob:
    """Tell the Task's job what its latest event shows, and wake it."""

    uid: str
    cancel: bool
    """Deleting or `spec.cancel`: set the job's cancel (never cleared)."""
    awaiting: bool
    body: dict[str, Any]


@dataclass(frozen=True, slots=True)
class StartJob:
    """Start the job of a Task that has none here (a no-op if one started meanwhile)."""

    view: TaskView


@dataclass(frozen=True, slots=True)
class Release:
    """Remove ordo's finalizer from a finished Task that its runner left with it."""

    view: TaskView


@dataclass(frozen=True, slots=True)
class Reobserve:
    """Decide again on the same body (its lease has expired by then unless renewed)."""

    view: TaskView


@dataclass(frozen=True, slots=True)
class LookLater:
    """After `delay` seconds, unless another event of the Task comes first, apply `then`."""

    delay: float
    then: StartJob | Release | Reobserve

    @property
    def uid(self) -> str:
        return self.then.view.uid


Action = Ignore | StopJob | NotifyJob | StartJob | Release | Reobserve | LookLater


def uid_of(action: Action) -> str | None:
    """The uid an action is about (None for Ignore); exhaustive, so a new action is seen."""
    match action:
        case Ignore():
            return None
        case StopJob(uid=uid) | NotifyJob(uid=uid):
            return uid
        case StartJob(view=view) | Release(view=view) | Reobserve(view=view):
            return view.uid
        case LookLater():
            return action.uid
        case _:
            assert_never(action)


# -- the decision ------------------------------------------------------------------------


def preferred(uid: str, identity: str, peers: Iterable[str]) -> str:
    """The process that should take the new Task `uid`: of `identity` and the live `peers`,
    the one whose stable hash with the uid is highest (rendezvous hashing: every replica
    computes the same answer, and each gets an equal share; a replica that goes away only
    moves its own share)."""
    return max((identity, *peers), key=lambda p: (zlib.crc32(f"{uid}/{p}".encode()), p))


def decide(view: TaskView, local: Local) -> Action:
    """The action for one watch event (`view`) in this process (`local`). Pure."""
    if view.deleted:
        return StopJob(view.uid) if local.has_job else IGNORE
    if local.has_job:
        return NotifyJob(view.uid, view.stopping, view.awaiting, view.body)
    graces = local.graces
    if view.phase in TERMINAL_PHASES:
        # Whoever ran it removes the finalizer next; only a Task left with it (its runner
        # stopped in between) needs this process, so look again after a grace.
        return LookLater(graces.release, Release(view)) if view.finalized else IGNORE
    if view.phase == "Running":
        # Executing elsewhere under a live lease (its holder's process Lease, or its own
        # renewals): no job, no reads, until it lapses; any event of the Task looks again. Not for
        # a Task running in a Job (`view.holder` is None): its pod holds the lease, and an
        # operator that restarted must supervise the Job (failures, cancel, deadline) now.
        # (No lease at all, also None: nothing to wait for.)
        held = (
            0.0
            if view.holder is None or view.holder == local.identity
            else view.lease_left(local.lease_left)
        )
        if held > 0:
            return LookLater(held + graces.slack, Reobserve(view))
    elif view.finalized and not view.stopping:
        # Pending and reserved by another process (Claimer.reserve), which has it queued or
        # is claiming it: look at it only if its events stop for a lease period.
        return LookLater(graces.lease_seconds, StartJob(view))
    elif (
        view.phase in (None, "Pending")
        and not view.stopping
        and preferred(view.uid, local.identity, local.peers) != local.identity
    ):
        # Another replica's share of new Tasks: it reserves at once if it has a free slot,
        # and its write is this Task's next event. No job here unless it has not.
        return LookLater(graces.defer, StartJob(view))
    return StartJob(view)
