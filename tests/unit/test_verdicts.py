"""The step verdicts (engine/verdicts.py) and the refusal reasons chosen where a call is
screened (engine/screening.py): every exit of the loop is a value, and the Task reason a
refused call ends the run with is carried, never read back from a record's text."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from ordo.engine import verdicts
from ordo.engine.approvals import ApprovalDecision, ApprovalRule
from ordo.engine.governance import Governance
from ordo.engine.screening import Screened, approval_gate, screen_call
from ordo.engine.state import RunState, ToolCallRecord
from ordo.engine.transcript import ToolCall, Usage
from ordo.engine.verdicts import Denial, Finished
from ordo.errors import ModelUnavailable, PolicyUnavailable
from support.engine_fakes import open_governance, run_config, toolbox

NOW = 1_000_000.0
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


def state_at(step: int, tokens: int = 0) -> RunState:
    return RunState(step=step, usage=Usage(tokens, 0))


# --------------------------------------------------------------------------------------
# Each exit as a value


def test_a_verdict_is_frozen() -> None:
    done = verdicts.cancelled(2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        done.reason = "Succeeded"  # type: ignore[misc]


def test_cancelled_names_the_steps_taken() -> None:
    assert verdicts.cancelled(3) == Finished("Cancelled", "Cancelled", "cancelled after 3 step(s)")


def test_max_steps_ends_the_run_only_once_reached() -> None:
    config = run_config(open_governance(), max_steps=2)
    assert verdicts.out_of_steps(config, state_at(1)) is None
    assert verdicts.out_of_steps(config, state_at(2)) == Finished(
        "Failed", "MaxStepsExceeded", "no final answer after 2 model call(s) (maxSteps)"
    )


def test_token_budget_ends_the_run_only_when_exceeded() -> None:
    assert verdicts.over_budget(run_config(open_governance()), state_at(1, 10**9)) is None
    config = run_config(open_governance(), token_budget=100)
    assert verdicts.over_budget(config, state_at(1, 100)) is None
    assert verdicts.over_budget(config, state_at(1, 101)) == Finished(
        "Failed", "TokenBudgetExceeded", "used 101 tokens, budget 100"
    )


def test_a_suspension_names_the_policy_and_the_step() -> None:
    done = verdicts.suspended("freeze", 4)
    assert (done.phase, done.reason) == ("Failed", "AgentSuspended")
    assert "'freeze'" in done.message and "after 4 step(s)" in done.message


def test_a_guardrail_violation_keeps_its_message() -> None:
    assert verdicts.guardrail_violation("guardrail 'pii' denied") == Finished(
        "Failed", "GuardrailViolation", "guardrail 'pii' denied"
    )


@pytest.mark.parametrize(
    "ends_as", ["ToolDenied", "GuardrailViolation", "ApprovalRejected", "ApprovalTimedOut"]
)
def test_a_denial_ends_the_run_with_the_reason_it_carries(ends_as: Any) -> None:
    # The record's text says something else: the reason is the value, not the text.
    record = ToolCallRecord(3, "deploy", "denied", "ApprovalRejected: alice", "skipped", "c1")
    done = verdicts.denied(Denial(record, ends_as), "deploy", 3)
    assert done == Finished(
        "Failed", ends_as, "tool 'deploy' denied at step 3: ApprovalRejected: alice"
    )


def test_a_denial_completing_a_restart_names_no_step() -> None:
    record = ToolCallRecord(2, "deploy", "denied", "BlockedByPolicy: p", "skipped", "c1")
    done = verdicts.denied(Denial(record, "ToolDenied"), "deploy")
    assert done.message == "tool 'deploy' denied: BlockedByPolicy: p"


def test_the_deadline_names_the_timeout() -> None:
    assert verdicts.timed_out(2.5) == Finished(
        "Failed", "Timeout", "the run did not finish within 2.5s (timeout)"
    )
    assert verdicts.timed_out(None).message == "the run did not finish within 0s (timeout)"


@pytest.mark.parametrize(
    "error", [ModelUnavailable("the endpoint is down"), PolicyUnavailable("cannot list")]
)
def test_an_ordo_error_ends_the_run_with_its_own_reason(error: Any) -> None:
    done = verdicts.failed(error)
    assert (done.phase, done.reason, done.message) == ("Failed", error.reason, str(error))
    assert done.error is error


async def test_an_answer_without_a_schema_succeeds() -> None:
    done = await verdicts.answered(run_config(open_governance()), "hello")
    assert done == Finished("Succeeded", "Succeeded", "the agent answered")


async def test_an_answer_that_satisfies_the_schema_carries_it() -> None:
    config = run_config(open_governance(), output_schema=SCHEMA)
    done = await verdicts.answered(config, '{"n": 3}')
    assert (done.phase, done.reason, done.structured) == ("Succeeded", "Succeeded", {"n": 3})


async def test_an_answer_that_does_not_satisfy_the_schema_is_invalid_output() -> None:
    config = run_config(open_governance(), output_schema=SCHEMA)
    done = await verdicts.answered(config, '{"n": "three"}')
    assert (done.phase, done.reason, done.structured) == ("Failed", "InvalidOutput", None)
    assert done.error is not None and done.error.reason == "InvalidOutput"


async def test_an_answer_too_large_for_status_is_invalid_output() -> None:
    schema = {"type": "object", "properties": {"s": {"type": "string"}}}
    config = run_config(open_governance(), output_schema=schema)
    done = await verdicts.answered(config, '{"s": "' + "x" * 300_000 + '"}')
    assert (done.phase, done.reason) == ("Failed", "InvalidOutput")
    assert "status.structuredOutput" in done.message


# --------------------------------------------------------------------------------------
# Refusal reasons, chosen where the call is screened


async def test_a_governance_denial_ends_as_tool_denied() -> None:
    box = toolbox("search")
    config = run_config(
        Governance(candidate_tools=frozenset({"search"}), blocked_by={"search": "p"})
    )
    by_name = {b.name: b for b in box.bindings}
    screened = await screen_call(ToolCall("c1", "search", {}), 1, config, by_name, set(), set())
    assert screened.record.decision == "denied"
    assert screened.ends_as == "ToolDenied"
    assert screened.result is not None and screened.result.is_error


def approval_config(decisions: list[ApprovalDecision], timeout: float = 60.0) -> Any:
    governance = Governance(
        candidate_tools=frozenset({"deploy"}), approvals={"deploy": ApprovalRule("Tool deploy")}
    )

    async def decider(pending: Any, arguments: Any) -> list[ApprovalDecision]:
        return decisions

    return run_config(
        governance, approval_decider=decider, approval_timeout=timeout, clock=lambda: NOW
    )


async def gate(decisions: list[ApprovalDecision], timeout: float = 60.0) -> Screened | None:
    box = toolbox("deploy")
    binding = box.bindings[0]
    allowed = Screened(
        ToolCallRecord(1, "deploy", "allowed", "NoPermissionRequired"), None, binding
    )
    state = state_at(1)
    return await approval_gate(
        ToolCall("c1", "deploy", {}), allowed, approval_config(decisions, timeout), state
    )


async def test_a_rejected_approval_ends_as_approval_rejected() -> None:
    screened = await gate([ApprovalDecision("Reject", "bob")])
    assert screened is not None and screened.binding is None
    assert (screened.record.decision, screened.ends_as) == ("denied", "ApprovalRejected")


async def test_an_approval_that_did_not_come_ends_as_approval_timed_out() -> None:
    screened = await gate([], timeout=0.0)
    assert screened is not None and screened.binding is None
    assert (screened.record.decision, screened.ends_as) == ("denied", "ApprovalTimedOut")


async def test_a_call_without_a_decision_waits() -> None:
    assert await gate([]) is None


async def test_an_approved_call_runs() -> None:
    screened = await gate([ApprovalDecision("Approve", "carol")])
    assert screened is not None and screened.binding is not None
    assert screened.record.reason == "Approved: carol"
