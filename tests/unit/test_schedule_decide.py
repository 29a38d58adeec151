"""The TaskSchedule decision (operator/triggers/decide.py) against an injected clock: due
times, missed times, the starting deadline, concurrency, suspend, edits, history, time zones
and DST, Feb 29, and the bound on a very long downtime."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml

from ordo.api.taskschedule import TaskScheduleSpec
from ordo.api.triggers import scheduled_task_name
from ordo.cli import main as cli
from ordo.operator.triggers.decide import (
    MAX_MISSED,
    OwnedTask,
    ScheduleState,
    decide,
    next_time,
    schedule_key,
)

CREATED = datetime(2026, 6, 1, 9, 59, 30, tzinfo=UTC)


def spec(schedule: str = "* * * * *", **fields: Any) -> TaskScheduleSpec:
    return TaskScheduleSpec.model_validate(
        {"schedule": schedule, "taskTemplate": {"spec": {"agentRef": "a"}}, **fields}
    )


def state(s: TaskScheduleSpec | None = None, **fields: Any) -> ScheduleState:
    """The schedule's state; with `s`, as last observed under that spec."""
    fields.setdefault("created_at", CREATED)
    observed = schedule_key(s) if s is not None else None
    return ScheduleState(name="nightly", observed_schedule=observed, **fields)


def task(
    at: datetime, phase: str | None = "Running", completed: datetime | None = None
) -> OwnedTask:
    return OwnedTask(
        name=scheduled_task_name("nightly", at),
        phase=phase,
        scheduled_at=at,
        created_at=at,
        completed_at=completed,
    )


def at(hour: int, minute: int, second: int = 0, day: int = 1) -> datetime:
    return datetime(2026, 6, day, hour, minute, second, tzinfo=UTC)


def test_first_run_is_the_first_time_after_creation_never_one_before() -> None:
    s = spec()
    d = decide(s, state(), [], at(9, 59, 50))
    assert d.create_for is None and d.missed == 0
    assert d.next_wake == at(10, 0)
    d = decide(s, state(), [], at(10, 0, 2))
    assert d.create_for == at(10, 0) and d.decided_through == at(10, 0)
    assert d.observed_schedule == "* * * * * (UTC)"


def test_a_time_already_decided_is_not_decided_again() -> None:
    s = spec()
    d = decide(s, state(s, last_decision_time=at(10, 0)), [], at(10, 0, 40))
    assert d.create_for is None and d.decided_through is None
    assert d.next_wake == at(10, 1)


def test_the_due_times_task_existing_is_a_duplicate_not_a_second_task() -> None:
    s = spec(concurrency_policy="Forbid")
    d = decide(s, state(s), [task(at(10, 0))], at(10, 0, 5))
    assert d.duplicate_of == at(10, 0)
    assert d.create_for is None and d.skipped is None
    assert d.decided_through == at(10, 0)


def test_only_the_most_recent_due_time_runs_the_earlier_are_missed() -> None:
    s = spec()
    d = decide(s, state(s, last_decision_time=at(10, 0)), [], at(10, 5, 10))
    assert d.create_for == at(10, 5)
    assert d.missed == 4  # 10:01 .. 10:04


def test_starting_deadline_edge() -> None:
    s = spec(starting_deadline_seconds=30)
    st = state(s, last_decision_time=at(9, 59))
    on_the_edge = decide(s, st, [], at(10, 0, 30))
    assert on_the_edge.create_for == at(10, 0) and on_the_edge.missed == 0
    past = decide(s, st, [], at(10, 0, 31))
    assert past.create_for is None
    assert past.late == at(10, 0) and past.missed == 1
    assert past.decided_through == at(10, 0)  # never run later


def test_without_a_deadline_the_latest_missed_time_runs_however_late() -> None:
    s = spec("0 2 * * *")
    d = decide(s, state(s, last_decision_time=at(2, 0)), [], at(1, 0, day=4))
    assert d.create_for == at(2, 0, day=3) and d.missed == 1


def test_forbid_skips_while_a_task_runs_and_runs_after_it_ends() -> None:
    s = spec(concurrency_policy="Forbid")
    running = task(at(10, 0))
    d = decide(s, state(s, last_decision_time=at(10, 0)), [running], at(10, 1, 1))
    assert d.skipped == at(10, 1) and d.create_for is None
    assert d.decided_through == at(10, 1)  # never run later
    assert d.active == (running.name,)
    ended = task(at(10, 0), "Succeeded", at(10, 1, 30))
    d = decide(s, state(s, last_decision_time=at(10, 1)), [ended], at(10, 2, 1))
    assert d.create_for == at(10, 2) and d.active == ()


def test_replace_cancels_the_running_tasks_then_creates() -> None:
    s = spec(concurrency_policy="Replace")
    running = task(at(10, 0))
    d = decide(s, state(s, last_decision_time=at(10, 0)), [running], at(10, 1, 1))
    assert d.create_for == at(10, 1) and d.cancel == (running.name,)
    already = OwnedTask(running.name, "Running", at(10, 0), at(10, 0), cancel_requested=True)
    d = decide(s, state(s, last_decision_time=at(10, 0)), [already], at(10, 1, 1))
    assert d.cancel == ()


def test_allow_creates_beside_a_running_task() -> None:
    s = spec()
    d = decide(s, state(s, last_decision_time=at(10, 0)), [task(at(10, 0))], at(10, 1, 1))
    assert d.create_for == at(10, 1) and d.cancel == ()


def test_suspended_decides_nothing_and_resume_is_bounded_by_the_deadline() -> None:
    suspended = spec(suspend=True, starting_deadline_seconds=60)
    d = decide(suspended, state(suspended, last_decision_time=at(10, 0)), [], at(11, 0, 30))
    assert d.create_for is None and d.decided_through is None and d.next_wake is None
    resumed = spec(starting_deadline_seconds=60)
    d = decide(resumed, state(resumed, last_decision_time=at(10, 0)), [], at(11, 0, 30))
    assert d.create_for == at(11, 0) and d.missed == 59
    hourly = spec("0 * * * *", starting_deadline_seconds=60)
    d = decide(hourly, state(hourly, last_decision_time=at(9, 0)), [], at(11, 5))
    assert d.create_for is None and d.late == at(11, 0) and d.missed == 2


def test_an_edited_schedule_runs_nothing_from_before_the_edit() -> None:
    old = spec("0 * * * *")
    new = spec("* * * * *")
    st = state(old, last_decision_time=at(10, 0))
    d = decide(new, st, [], at(10, 30, 10))
    assert d.create_for is None and d.missed == 0
    assert d.decided_through == at(10, 30, 10)
    assert d.observed_schedule == "* * * * * (UTC)"
    assert d.next_wake == at(10, 31)


def test_a_very_long_downtime_is_bounded_work() -> None:
    s = spec()
    d = decide(
        s, state(s, last_decision_time=at(0, 0)), [], datetime(2027, 6, 1, 0, 0, 5, tzinfo=UTC)
    )
    assert d.too_many_missed
    assert d.create_for == datetime(2027, 6, 1, 0, 0, tzinfo=UTC)
    assert d.missed == MAX_MISSED
    assert d.next_wake == datetime(2027, 6, 1, 0, 1, tzinfo=UTC)


def test_feb_29_fires_only_in_leap_years() -> None:
    s = spec("0 0 29 2 *")
    assert next_time(s, datetime(2026, 1, 1, tzinfo=UTC)) == datetime(2028, 2, 29, tzinfo=UTC)
    assert next_time(s, datetime(2028, 2, 29, 0, 1, tzinfo=UTC)) == datetime(
        2032, 2, 29, tzinfo=UTC
    )


BERLIN = "Europe/Berlin"


def test_time_zone_reads_the_schedule_in_that_zone() -> None:
    s = spec("30 2 * * *", time_zone=BERLIN)
    # Summer: 02:30 CEST is 00:30 UTC.
    assert next_time(s, at(0, 0)) == at(0, 30)


def test_dst_spring_forward_a_time_in_the_gap_runs_once_at_the_first_minute_after() -> None:
    """Berlin skips 02:00-03:00 on 2026-03-29: the 02:30 job runs at 03:00 CEST (01:00 UTC),
    once; the next day at 02:30 again."""
    s = spec("30 2 * * *", time_zone=BERLIN)
    day = datetime(2026, 3, 28, 12, tzinfo=UTC)
    first = next_time(s, day)
    assert first == datetime(2026, 3, 29, 1, 0, tzinfo=UTC)
    assert first is not None
    assert next_time(s, first) == datetime(2026, 3, 30, 0, 30, tzinfo=UTC)
    st = state(s, created_at=day, last_decision_time=day)
    d = decide(s, st, [], datetime(2026, 3, 29, 1, 0, 5, tzinfo=UTC))
    assert d.create_for == datetime(2026, 3, 29, 1, 0, tzinfo=UTC) and d.missed == 0


def test_dst_fall_back_a_time_in_the_overlap_runs_once_on_its_first_pass() -> None:
    """Berlin passes 02:00-03:00 twice on 2026-10-25: the 02:30 job runs at the first 02:30
    (CEST, 00:30 UTC) only, not again at 02:30 CET (01:30 UTC)."""
    s = spec("30 2 * * *", time_zone=BERLIN)
    first = datetime(2026, 10, 25, 0, 30, tzinfo=UTC)
    assert next_time(s, datetime(2026, 10, 24, 12, tzinfo=UTC)) == first
    assert next_time(s, first) == datetime(2026, 10, 26, 1, 30, tzinfo=UTC)
    # Decided at the first pass; at the second 02:30 nothing is due.
    st = state(s, created_at=first - timedelta(days=1), last_decision_time=first)
    d = decide(s, st, [], datetime(2026, 10, 25, 1, 30, 5, tzinfo=UTC))
    assert d.create_for is None
    # Created during the second pass: the first pass's 02:30 is before it, never run.
    st = state(s, created_at=datetime(2026, 10, 25, 1, 10, tzinfo=UTC))
    d = decide(s, st, [], datetime(2026, 10, 25, 1, 40, tzinfo=UTC))
    assert d.create_for is None and d.missed == 0


def test_dst_fall_back_an_every_30_minutes_job_runs_on_both_passes() -> None:
    """A job that is not at a fixed hour follows real time: the repeated hour has its times
    twice (as many runs as elapsed half hours)."""
    s = spec("*/30 * * * *", time_zone=BERLIN)
    t = datetime(2026, 10, 24, 23, 50, tzinfo=UTC)  # 01:50 CEST
    times = []
    for _ in range(4):
        nxt = next_time(s, t)
        assert nxt is not None
        times.append(nxt)
        t = nxt
    assert [x.astimezone(UTC).strftime("%H:%M") for x in times] == [
        "00:00",
        "00:30",
        "01:00",
        "01:30",
    ]


def test_history_keeps_the_newest_finished_within_the_limits() -> None:
    s = spec(successful_tasks_history_limit=1, failed_tasks_history_limit=0)
    tasks = [
        task(at(10, 0), "Succeeded", at(10, 0, 20)),
        task(at(10, 1), "Failed", at(10, 1, 20)),
        task(at(10, 2), "Succeeded", at(10, 2, 20)),
        task(at(10, 3), "Cancelled", at(10, 3, 20)),
        task(at(10, 4), "Running"),
    ]
    d = decide(s, state(s, last_decision_time=at(10, 4)), tasks, at(10, 4, 30))
    assert d.delete == tuple(tasks[i].name for i in (0, 1, 3))
    assert d.active == (tasks[4].name,)
    assert d.last_successful_time == at(10, 2, 20)


@pytest.mark.parametrize("bad", ["* * * *", "61 * * * *", "@every 5m", "* * * * * *", "0 0 30 2 *"])
def test_an_invalid_schedule_is_refused_naming_the_field(bad: str) -> None:
    with pytest.raises(ValueError, match="schedule"):
        spec(bad)


def test_an_unknown_time_zone_is_refused() -> None:
    with pytest.raises(ValueError, match="time zone"):
        spec(time_zone="Mars/Olympus")


def test_macros_are_the_cron_expressions_they_stand_for() -> None:
    assert next_time(spec("@hourly"), at(10, 5)) == at(11, 0)
    assert next_time(spec("@daily"), at(10, 5)) == at(0, 0, day=2)


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("schedule", "61 2 * * *", "spec.schedule"),
        ("timeZone", "Europe/Atlantis", "spec.timeZone"),
    ],
)
def test_ordo_validate_names_what_only_the_cron_library_and_tz_database_know(
    field: str, value: str, says: str, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CRD's patterns accept these (a pattern cannot check ranges or the tz database);
    `ordo validate` refuses them naming the field, and the operator sets Ready False."""
    body = {
        "apiVersion": "ordo.dev/v1alpha1",
        "kind": "TaskSchedule",
        "metadata": {"name": "nightly"},
        "spec": {"schedule": "30 2 * * *", "taskTemplate": {"spec": {"agentRef": "a"}}},
    }
    body["spec"][field] = value
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(body))
    assert cli.main(["validate", "-f", str(path)]) == 1
    assert says in capsys.readouterr().err
