"""One home for phases and records (issue 24 §4): `ordo.Usage`, `ToolCallRecord` and
`GuardrailRecord` are the types of the TaskStatus fields that show them and serialize as the
status always did (api/records.py); the phases have one definition; runtime/status.py turns
the engine's pending approvals into the api's."""

from __future__ import annotations

import math
from typing import get_args

import pytest
from pydantic import ValidationError

import ordo
from ordo.api import phases
from ordo.api.guardrail import GuardrailRecord
from ordo.api.task import TERMINAL_PHASES, Phase, TaskStatus, ToolCallRecord
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
    assert get_args(phases.RunPhase) == (
        "Succeeded",
        "Failed",
        "Cancelled",
        "AwaitingApproval",
        "AwaitingChildren",
    )
    assert TERMINAL_PHASES is phases.TERMINAL_PHASES


def _hand_built(state: RunState) -> list[dict[str, object]]:
    """status.pendingApprovals as operator/tasks/taskstatus.py `pending_approvals` writes it."""
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


def test_a_tool_call_record_is_shown_as_the_status_always_showed_it() -> None:
    records = [
        ToolCallRecord(2, "search", "allowed", "", "succeeded", "c1"),
        ToolCallRecord(3, "deploy", "denied", "BlockedByPolicy: strict"),
        ToolCallRecord(4, "fetch", "allowed", "", "error", "c3", "HTTPStatus 503"),
    ]
    status = TaskStatus(tool_calls=records)
    assert status.tool_calls == records
    assert status_mod.to_patch(status)["toolCalls"] == [
        {
            "step": 2,
            "tool": "search",
            "decision": "allowed",
            "outcome": "succeeded",
            "callId": "c1",
        },
        {"step": 3, "tool": "deploy", "decision": "denied", "reason": "BlockedByPolicy: strict"},
        {
            "step": 4,
            "tool": "fetch",
            "decision": "allowed",
            "outcome": "error",
            "callId": "c3",
            "error": "HTTPStatus 503",
        },
    ]
    # Every field of an engine-built record counts as set, as it did for the pydantic record.
    assert status.to_dict()["toolCalls"][1] == {
        "step": 3,
        "tool": "deploy",
        "toolObject": None,
        "builtin": None,
        "decision": "denied",
        "reason": "BlockedByPolicy: strict",
        "outcome": None,
        "callId": None,
        "error": None,
        "approvedBy": None,
    }
    again = TaskStatus.model_validate(status_mod.to_patch(status))
    assert again.tool_calls == records
    # Read from a mapping, a record shows the keys it was read with (a Task as written).
    assert again.to_dict()["toolCalls"] == status_mod.to_patch(status)["toolCalls"]


def test_a_guardrail_record_is_shown_as_the_status_always_showed_it() -> None:
    records = [
        GuardrailRecord(0, "input", "pii", "redacted"),
        GuardrailRecord(2, "toolResult", "judge", "denied", "fetch", "Timeout"),
    ]
    status = TaskStatus(guardrails=records)
    assert status_mod.to_patch(status)["guardrails"] == [
        {"step": 0, "point": "input", "guardrail": "pii", "action": "redacted"},
        {
            "step": 2,
            "point": "toolResult",
            "guardrail": "judge",
            "action": "denied",
            "tool": "fetch",
            "cause": "Timeout",
        },
    ]
    assert TaskStatus.model_validate(status_mod.to_patch(status)).guardrails == records


@pytest.mark.parametrize(
    ("status", "problem"),
    [
        (
            {"toolCalls": [ToolCallRecord(0, "t", "allowed", "")]},
            "toolCalls[0].step: Input should be greater than or equal to 1",
        ),
        (
            {"toolCalls": [ToolCallRecord(1, "t" * 129, "allowed", "")]},
            "toolCalls[0].tool: String should have at most 128 characters",
        ),
        (
            {"toolCalls": [{"step": 1, "tool": "t", "decision": "maybe"}]},
            "toolCalls[0].decision: Input should be 'allowed', 'denied' or 'rejected'",
        ),
        (
            {"guardrails": [GuardrailRecord(1, "output", "g" * 254, "denied")]},
            "guardrails[0].guardrail: String should have at most 253 characters",
        ),
        (
            {"guardrails": [{"step": 1, "point": "output", "guardrail": "g", "action": "x"}]},
            "guardrails[0].action: Input should be 'redacted' or 'denied'",
        ),
    ],
)
def test_records_over_the_api_constraints_are_refused(
    status: dict[str, object], problem: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        TaskStatus.model_validate(status)
    assert validation_problem(caught.value) == problem


def test_the_checkpoint_forms_of_the_records_round_trip() -> None:
    call = ToolCallRecord(2, "search", "allowed", "", "succeeded", "c1")
    assert call.to_dict() == {
        "step": 2,
        "tool": "search",
        "decision": "allowed",
        "reason": "",
        "outcome": "succeeded",
        "callId": "c1",
    }
    fired = GuardrailRecord(1, "toolArguments", "pii", "redacted", "search")
    assert ToolCallRecord.from_dict(call.to_dict()) == call
    assert GuardrailRecord.from_dict(fired.to_dict()) == fired
