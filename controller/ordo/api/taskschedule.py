"""TaskSchedule: a Task per scheduled time, shaped like a batch/v1 CronJob
(docs/triggers.md#schedules).

The operator (operator/triggers/) creates one Task per time of `schedule` in `timeZone`,
named by `triggers.scheduled_task_name`, so a second Task for the same time cannot exist.
What to do at a given moment is decided by operator/triggers/decide.py, without I/O.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, ClassVar, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError
from pydantic import Field, ValidationInfo, field_validator

from .base import CelRule, Condition, OrdoModel, Resource
from .triggers import TaskTemplate

ConcurrencyPolicy = Literal["Allow", "Forbid", "Replace"]

MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
"""The macros a CronJob's schedule accepts, as the 5-field expressions they stand for."""

_FIELD = r"[0-9A-Za-z*,/#-]+"
SCHEDULE_PATTERN = (
    rf"^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|{_FIELD}( +{_FIELD}){{4}})$"
)
"""What the CRD checks: a macro, or five space-separated fields of cron characters (the full
check, ranges and names, is `cron_expression`'s, in `ordo validate` and the operator)."""
TIME_ZONE_PATTERN = r"^[A-Za-z0-9_+-]+(/[A-Za-z0-9_+-]+)*$"


def cron_expression(schedule: str) -> str:
    """The 5-field expression of `schedule` (a macro expanded); ValueError naming what is
    wrong when the schedule is not a valid 5-field cron expression."""
    schedule = schedule.strip()
    expr = MACROS.get(schedule.lower(), schedule)
    if len(expr.split()) != 5:
        raise ValueError(
            f"schedule {schedule!r} must have 5 fields (minute hour day-of-month month "
            "day-of-week) or be one of " + ", ".join(sorted(MACROS))
        )
    try:
        CronSim(expr, datetime(2000, 1, 1, tzinfo=UTC))
    except CronSimError as exc:
        raise ValueError(f"schedule {schedule!r} is not a valid cron expression: {exc}") from None
    return expr


def time_zone(name: str) -> ZoneInfo:
    """The IANA time zone `name`; ValueError when the tz database does not know it."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"time zone {name!r} is not in the IANA tz database (e.g. UTC, Europe/Berlin)"
        ) from None


class TaskScheduleSpec(OrdoModel):
    """Desired state of a TaskSchedule (the fields of a batch/v1 CronJob's spec)."""

    schedule: Annotated[str, Field(min_length=1, max_length=256, pattern=SCHEDULE_PATTERN)]
    """5-field cron expression (`minute hour day-of-month month day-of-week`, e.g.
    `0 2 * * *`), or `@yearly`, `@monthly`, `@weekly`, `@daily`, `@midnight`, `@hourly`."""
    time_zone: Annotated[str, Field(min_length=1, max_length=64, pattern=TIME_ZONE_PATTERN)] = "UTC"
    """IANA time zone the schedule is read in (e.g. `Europe/Berlin`). Default `UTC` (a
    CronJob's default is the kube-controller-manager's local zone; an operator's pod has no
    meaningful one)."""
    concurrency_policy: ConcurrencyPolicy = "Allow"
    """`Allow`: Tasks of several times may run at once; `Forbid`: a time that comes while a
    Task of this schedule has not ended is skipped (never run later); `Replace`: the running
    Tasks are cancelled (`spec.cancel`) and the new one created."""
    starting_deadline_seconds: Annotated[int, Field(ge=0, le=31536000)] | None = None
    """A scheduled time not acted on within this many seconds (the operator was down, the
    schedule suspended) is missed: counted in `status.missedRuns`, never run. Unset: the
    latest missed time runs however late, once (as a CronJob)."""
    suspend: bool = False
    """True: no Task is created (Tasks already running go on)."""
    successful_tasks_history_limit: Annotated[int, Field(ge=0, le=1000)] = 3
    """Succeeded Tasks of this schedule to keep (the oldest beyond it are deleted)."""
    failed_tasks_history_limit: Annotated[int, Field(ge=0, le=1000)] = 1
    """Failed or Cancelled Tasks of this schedule to keep (the oldest beyond it are deleted)."""
    task_template: TaskTemplate
    """The Task created for each scheduled time."""

    # Before the pattern: the error then says what is wrong, not which regex failed.
    @field_validator("schedule", "time_zone", mode="before")
    @classmethod
    def _check(cls, value: object, info: ValidationInfo) -> object:
        if isinstance(value, str):
            (cron_expression if info.field_name == "schedule" else time_zone)(value)
        return value


class TaskScheduleStatus(OrdoModel):
    """Observed state of a TaskSchedule (a CronJob's status, and what ordo counts)."""

    observed_generation: Annotated[int, Field(ge=0)] | None = None
    """The .metadata.generation this status describes."""
    conditions: list[Condition] | None = None
    """`Ready`: False with reason `InvalidSchedule` when the schedule, time zone or template
    cannot be used (the message says which field)."""
    active: list[str] | None = None
    """Names of this schedule's Tasks that have not ended."""
    last_schedule_time: str | None = None
    """The latest scheduled time a Task was created for (RFC 3339)."""
    last_successful_time: str | None = None
    """When the latest of this schedule's Tasks that succeeded completed (RFC 3339)."""
    missed_runs: Annotated[int, Field(ge=0)] | None = None
    """Scheduled times never run: older than `startingDeadlineSeconds`, or passed over
    because a later time was due (only the latest due time runs). At most 101 due times are
    looked at per decision: after a longer downtime this grows by 100 (event
    TooManyMissedTimes), which may be less than the true number."""
    last_decision_time: str | None = None
    """The latest scheduled time the operator decided on (created, skipped or missed):
    times up to it are never looked at again."""
    observed_schedule: str | None = None
    """`schedule` and `timeZone` that `lastDecisionTime` was reached under: after an edit of
    either, no time before the edit is run."""


class TaskSchedule(Resource):
    """Creates a Task per scheduled time."""

    kind: Literal["TaskSchedule"] = "TaskSchedule"
    spec: TaskScheduleSpec
    status: TaskScheduleStatus | None = None

    cel_rules: ClassVar[tuple[CelRule, ...]] = (
        CelRule(
            rule="size(self.metadata.name) <= 63",
            message="TaskSchedule names are at most 63 characters (its Tasks carry the name "
            "in the label ordo.dev/trigger)",
            check=lambda t: len(t.metadata.name or "") <= 63,
            field_path="metadata.name",
        ),
    )
