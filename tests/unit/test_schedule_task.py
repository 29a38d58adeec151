"""The Task of a scheduled time (operator/triggers/scheduletask.py): its name, owner, labels
and annotations; which listed Tasks the schedule owns."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, get_args

from prometheus_client import generate_latest

from ordo.api.triggers import (
    SCHEDULED_AT_ANNOTATION,
    TRIGGER_KIND_LABEL,
    TRIGGER_NAME_LABEL,
    TriggerOutcome,
)
from ordo.operator.telemetry.metrics import SCHEDULE_OUTCOMES, Metrics
from ordo.operator.triggers.scheduletask import owned_tasks, selector, task_body

AT = datetime(2026, 6, 1, 2, 30, tzinfo=UTC)


def schedule(**meta: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "nightly", "namespace": "ns", "uid": "u-1", **meta},
        "spec": {
            "schedule": "30 2 * * *",
            "taskTemplate": {
                "metadata": {
                    "labels": {
                        "team": "a",
                        TRIGGER_NAME_LABEL: "spoofed",
                        "ordo.dev/parent-uid": "someone-elses",
                        "policy.ordo.dev/tier": "lax",
                        "example.com/ordo.dev": "kept",
                    },
                    "annotations": {
                        "note": "x",
                        "ordo.dev/requested-by": "mallory",
                        "ordo.dev/delegation-chain": '["a", "b"]',
                    },
                },
                "spec": {"agentRef": "a", "input": "go"},
            },
        },
    }


def test_the_task_carries_the_trigger_the_time_and_the_schedules_requester_only() -> None:
    body = task_body(schedule(annotations={"ordo.dev/requested-by": "alice"}), AT)
    meta = body["metadata"]
    assert meta["name"] == f"nightly-{int(AT.timestamp()) // 60}"
    # Nothing in ordo's domain comes from the template (no forged lineage, requester or
    # policy label), the same rule as a webhook's (api/triggers.template_metadata).
    assert meta["labels"] == {
        "team": "a",
        "example.com/ordo.dev": "kept",
        TRIGGER_KIND_LABEL: "TaskSchedule",
        TRIGGER_NAME_LABEL: "nightly",
    }
    assert meta["annotations"] == {
        "note": "x",
        SCHEDULED_AT_ANNOTATION: "2026-06-01T02:30:00Z",
        "ordo.dev/requested-by": "alice",
    }
    (ref,) = meta["ownerReferences"]
    assert ref == {
        "apiVersion": "ordo.dev/v1alpha1",
        "kind": "TaskSchedule",
        "name": "nightly",
        "uid": "u-1",
        "controller": True,
    }
    assert body["spec"] == {"agentRef": "a", "input": "go"}
    # Without the schedule's own annotation, the template's is not used either.
    assert "ordo.dev/requested-by" not in task_body(schedule(), AT)["metadata"]["annotations"]
    assert selector("nightly") == "ordo.dev/trigger-kind=TaskSchedule,ordo.dev/trigger=nightly"


def test_only_tasks_the_schedule_controls_are_its_own() -> None:
    ours = task_body(schedule(), AT)
    ours["metadata"]["creationTimestamp"] = "2026-06-01T02:30:01Z"
    ours["status"] = {"phase": "Succeeded", "completedAt": "2026-06-01T02:31:00Z"}
    theirs = {**ours, "metadata": {**ours["metadata"], "ownerReferences": []}}
    (task,) = owned_tasks([ours, theirs], "u-1")
    assert task.scheduled_at == AT and task.finished
    assert task.completed_at == datetime(2026, 6, 1, 2, 31, tzinfo=UTC)
    assert owned_tasks([ours], "another-uid") == []


def test_every_schedule_outcome_is_exposed_from_the_start() -> None:
    """Each outcome a schedule counts is a TriggerOutcome, and is 0 before the first count
    (a rate or an alert on it sees the series)."""
    text = generate_latest(Metrics().registry).decode()
    for outcome in SCHEDULE_OUTCOMES:
        assert outcome in get_args(TriggerOutcome)
        line = f'ordo_trigger_tasks_total{{kind="TaskSchedule",outcome="{outcome}"}} 0.0'
        assert line in text
