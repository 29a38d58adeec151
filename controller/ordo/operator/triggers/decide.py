"""What a TaskSchedule should do now: a pure function of its spec, its status, the Tasks it
owns and the clock (`now` is passed in), as the CronJob controller's `getMostRecentScheduleTime`
and `syncCronJob` decide (docs/triggers.md#schedules).

- Times are looked at after the latest of: the schedule's creation, `lastDecisionTime`,
  `lastScheduleTime`; and not before an edit of `schedule` or `timeZone`.
- Of the times due, only the most recent can run, once; the earlier ones are missed. The
  most recent is missed too when it is older than `startingDeadlineSeconds`.
- At most MAX_MISSED due times are enumerated per decision (a schedule down for a year is
  bounded work); beyond it the count stops there and `too_many_missed` says so.
- `Forbid` skips a due time while a Task of the schedule has not ended (never run later);
  `Replace` cancels the running Tasks and creates the new one.
- A suspended schedule decides no time: on resume the most recent due time runs if it is
  within the starting deadline (always without one), as a CronJob.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from cronsim import CronSim

from ...api.phases import TERMINAL_PHASES
from ...api.taskschedule import TaskScheduleSpec, cron_expression, time_zone
from ...api.triggers import scheduled_task_name

MAX_MISSED = 100
"""Due times enumerated per decision at most (the CronJob controller's bound)."""


@dataclass(frozen=True)
class OwnedTask:
    """What the decision reads of one Task the schedule owns."""

    name: str
    phase: str | None
    scheduled_at: datetime | None
    created_at: datetime
    completed_at: datetime | None = None
    cancel_requested: bool = False

    @property
    def finished(self) -> bool:
        return self.phase in TERMINAL_PHASES


@dataclass(frozen=True)
class ScheduleState:
    """What the decision reads of the TaskSchedule besides its spec."""

    name: str
    created_at: datetime
    last_decision_time: datetime | None = None
    last_schedule_time: datetime | None = None
    observed_schedule: str | None = None


@dataclass(frozen=True)
class Decision:
    """What to do now. `decided_through` is the new `status.lastDecisionTime` (None: unchanged)."""

    create_for: datetime | None = None
    """The scheduled time to create a Task for."""
    duplicate_of: datetime | None = None
    """The due time's Task already exists (another replica, or before a restart)."""
    skipped: datetime | None = None
    """The due time skipped by `Forbid`."""
    late: datetime | None = None
    """The most recent due time, missed: older than `startingDeadlineSeconds`."""
    missed: int = 0
    """Due times never run, decided now (the earlier ones, and `late`)."""
    too_many_missed: bool = False
    """More than MAX_MISSED due times: counting stopped at MAX_MISSED."""
    cancel: tuple[str, ...] = ()
    """Running Tasks to cancel (`Replace`)."""
    delete: tuple[str, ...] = ()
    """Finished Tasks beyond the history limits, oldest first."""
    active: tuple[str, ...] = ()
    """Tasks that have not ended (the new one not included)."""
    last_successful_time: datetime | None = None
    """When the latest succeeded Task completed (None: none known)."""
    decided_through: datetime | None = None
    observed_schedule: str = ""
    next_wake: datetime | None = None
    """When to decide again at the latest (None: on a change only)."""


def schedule_key(spec: TaskScheduleSpec) -> str:
    """What `status.observedSchedule` holds: the schedule and the zone it is read in."""
    return f"{spec.schedule} ({spec.time_zone})"


def next_time(spec: TaskScheduleSpec, after: datetime) -> datetime | None:
    """The first scheduled time strictly after `after` (None: none in the next 50 years)."""
    it = CronSim(cron_expression(spec.schedule), after.astimezone(time_zone(spec.time_zone)))
    found = next(it, None)
    return _utc(found) if found is not None else None


def _utc(t: datetime) -> datetime:
    # In UTC: an aware time in a fall-back overlap compares unequal to every time in another
    # zone (PEP 495), so the times are compared and stored in UTC only.
    return t.astimezone(UTC)


def _order(task: OwnedTask) -> datetime:
    return task.scheduled_at or task.created_at


def _history(
    tasks: Sequence[OwnedTask], spec: TaskScheduleSpec
) -> tuple[tuple[str, ...], datetime | None]:
    succeeded = sorted((t for t in tasks if t.phase == "Succeeded"), key=_order)
    failed = sorted((t for t in tasks if t.finished and t.phase != "Succeeded"), key=_order)
    delete = succeeded[: max(0, len(succeeded) - spec.successful_tasks_history_limit)]
    delete += failed[: max(0, len(failed) - spec.failed_tasks_history_limit)]
    delete.sort(key=_order)
    done = [t.completed_at for t in succeeded if t.completed_at is not None]
    return tuple(t.name for t in delete), max(done, default=None)


def _due(
    spec: TaskScheduleSpec, earliest: datetime, now: datetime
) -> tuple[int, datetime | None, datetime | None, bool]:
    """(how many, the most recent, the first after now, counting stopped) of the times in
    (earliest, now]."""
    expr, zone = cron_expression(spec.schedule), time_zone(spec.time_zone)
    count, latest = 0, None
    for local in CronSim(expr, earliest.astimezone(zone)):
        t = _utc(local)
        if t <= earliest:
            # Read as wall-clock time, a start inside a fall-back overlap (its second pass)
            # can give back the first pass's time, which is before it.
            continue
        if t > now:
            return count, latest, t, False
        count, latest = count + 1, t
        if count > MAX_MISSED:
            # Bounded work: the most recent due time, read backwards from now.
            back = CronSim(expr, (now + timedelta(seconds=1)).astimezone(zone), reverse=True)
            recent = next(back, None)
            return MAX_MISSED + 1, _utc(recent) if recent else latest, next_time(spec, now), True
    return count, latest, None, False


def decide(
    spec: TaskScheduleSpec,
    state: ScheduleState,
    tasks: Sequence[OwnedTask],
    now: datetime,
) -> Decision:
    """The decision at `now` (aware). Raises ValueError on an invalid schedule or time zone
    (the operator reports it: Ready False, InvalidSchedule)."""
    key = schedule_key(spec)
    delete, last_successful = _history(tasks, spec)
    active = sorted((t for t in tasks if not t.finished), key=_order)
    base = Decision(
        delete=delete,
        active=tuple(t.name for t in active),
        last_successful_time=last_successful,
        observed_schedule=key,
    )
    if spec.suspend:
        return base
    earliest = max(
        t
        for t in (state.created_at, state.last_decision_time, state.last_schedule_time)
        if t is not None
    )
    if state.observed_schedule is not None and state.observed_schedule != key:
        # An edited schedule or zone: no time before the edit runs (nor counts as missed).
        earliest = max(earliest, now)
        base = replace(base, decided_through=now)
    count, latest, after, too_many = _due(spec, earliest, now)
    base = replace(base, next_wake=after or next_time(spec, now), too_many_missed=too_many)
    if latest is None:
        return base
    base = replace(base, decided_through=latest, missed=count - 1)
    name = scheduled_task_name(state.name, latest)
    if any(t.name == name for t in tasks):
        return replace(base, duplicate_of=latest)
    deadline = spec.starting_deadline_seconds
    if deadline is not None and (now - latest).total_seconds() > deadline:
        return replace(base, late=latest, missed=count)
    if active and spec.concurrency_policy == "Forbid":
        return replace(base, skipped=latest)
    cancel: tuple[str, ...] = ()
    if active and spec.concurrency_policy == "Replace":
        cancel = tuple(t.name for t in active if not t.cancel_requested)
    return replace(base, create_for=latest, cancel=cancel)
