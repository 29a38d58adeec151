"""One home for phases and records (issue 24 §4): `ordo.Usage` is the type of
`TaskStatus.usage` and serializes as the status always did; the phases have one definition;
runtime/status.py turns the engine's pending approvals into the api's."""

from __future__ import annotations

import math
from typing import get_args

import pytest
from pydantic import ValidationError

import ordo
from ordo.api import phases
from ordo.api.task import TERMINAL_PHASES, Phase, TaskStatus
from ordo.engine.approvals import PendingApproval
from ordo.engine.state import RunState
from ordo.engine.transcript import Usage as EngineUsage
from ordo.errors import validation_problem
from ordo.runtime import status as status_mod
from ordo.timestamps import format_seconds


def test_the_public_usage_is_the_status_usage_and_the_engine_usage() -> None:
    status = TaskStatus(usage=ordo.Usage(3, 4))
    assert type(status.usage) is ordo.Usage is EngineUsage
    assert status.usage == ordo.Usage(3, 4)


def test_status_usage_serializes_as_before() -> None:
    status = TaskStatus(step=1, usage=ordo.Usage(3, 4, estimated=True))
    assert status_mod.to_patch(status) == {
        "step": 1,
        "usage": {"inputTokens": 3, "outputTokens": 4, "totalTokens": 7},
    }
    assert status.to_dict()["usage"] == {"inputTokens": 3, "outputTokens": 4, "totalTokens": 7}
    assert status.model_dump(exclude_none=True)["usage"] == {
        "input_tokens": 3,
        "output_tokens": 4,
        "total_tokens": 7,
    }
    assert status.model_dump_json(by_alias=True, exclude_none=True) == (
        '{"step":1,"usage":{"inputTokens":3,"outputTokens":4,"totalTokens":7}}'
    )


def test_status_usage_is_read_from_either_spelling() -> None:
    camel = TaskStatus.model_validate(
        {"usage": {"inputTokens": 1, "outputTokens": 2, "totalTokens": 3}}
    )
    snake = TaskStatus.model_validate({"usage": {"input_tokens": 1, "output_tokens": 2}})
    assert camel.usage == snake.usage == ordo.Usage(1, 2)
    assert TaskStatus.model_validate({"usage": {}}).usage == ordo.Usage()


@pytest.mark.parametrize(
    ("usage", "problem"),
    [
        ({"inputTokens": -1}, "usage.inputTokens: Input should be greater than or equal to 0"),
        ({"inputTokens": 1, "cost": 2}, "usage.cost: Extra inputs are not permitted"),
        ({"outputTokens": "many"}, "usage.outputTokens: Input should be a valid integer"),
        (ordo.Usage(-5, 0), "usage.inputTokens: Input should be greater than or equal to 0"),
    ],
)
def test_invalid_status_usage_is_refused_naming_the_field(usage: object, problem: str) -> None:
    with pytest.raises(ValidationError) as caught:
        TaskStatus.model_validate({"usage": usage})
    assert validation_problem(caught.value).startswith(problem)


def test_adding_usage_stays_a_plain_sum() -> None:
    total = ordo.Usage(1, 2) + ordo.Usage(3, 4, estimated=True)
    assert (total, total.total_tokens, total.estimated) == (ordo.Usage(4, 6, True), 10, True)


def test_phases_have_one_definition() -> None:
    assert get_args(Phase) == ("Pending", "Running", "Succeeded", "Failed", "Cancelled")
    assert set(get_args(phases.TerminalPhase)) == TERMINAL_PHASES
    assert get_args(phases.RunPhase) == ("Succeeded", "Failed", "Cancelled", "AwaitingApproval")
    assert TERMINAL_PHASES is phases.TERMINAL_PHASES


def _hand_built(state: RunState) -> list[dict[str, object]]:
    """status.pendingApprovals as operator/tasks/approvals.py `awaiting_fields` wrote it."""
    return [
        {
            "callId": p.call_id,
            "tool": p.tool,
            "step": max(p.step, 1),
            "requestedAt": format_seconds(p.requested_at),
            **(
                {}
                if math.isinf(p.deadline)
                else {"deadline": format_seconds(math.ceil(p.deadline))}
            ),
        }
        for p in list(state.approvals.values())[:64]
    ]


def test_pending_approvals_are_the_api_records_of_the_engine_state() -> None:
    waiting = [
        PendingApproval("c1", "deploy", 2, 1_700_000_000.25, 1_700_003_600.5, "Tool"),
        PendingApproval("c2", "search", 0, 1_700_000_001.0, math.inf),
        *(PendingApproval(f"x{i}", "t", 3, 1_700_000_002.0, 1_700_000_010.0) for i in range(70)),
    ]
    state = RunState(approvals={p.call_id: p for p in waiting})
    built = [
        p.model_dump(by_alias=True, exclude_none=True, mode="json")
        for p in status_mod.pending_approvals(state)
    ]
    assert built == _hand_built(state)
    assert len(built) == 64
    assert built[0]["deadline"] == "2023-11-14T23:13:21Z"  # rounded up, never early
    assert "deadline" not in built[1]
