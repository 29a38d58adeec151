"""A model judge's `maxCallsPerTask` holds across a resume (issue 23 item 7): the count of judge
calls is in the run state, so it goes through the checkpoint (operator/tasks/checkpoint.py encode
and decode) and a resumed run, with a new judge as a restarted process builds it, goes on
counting instead of starting again at 0. A checkpoint written before the count existed reads
as 0 calls."""

from __future__ import annotations

import base64
import dataclasses
from typing import Any

from ordo.engine.approvals import ApprovalDecision, ApprovalRule, PendingApproval
from ordo.engine.governance import Governance
from ordo.engine.guardrails import GuardrailBinding, ModelJudge
from ordo.engine.loop import run_agent
from ordo.engine.model import ModelResponse
from ordo.engine.state import RunState
from ordo.engine.transcript import Usage
from ordo.operator.tasks import checkpoint, sealing
from ordo.operator.tasks.sealing import Subject
from support.engine_fakes import ScriptedModel, answer, call, run_config, toolbox, tools_turn

NOW = 1_000_000.0
MAX_CALLS = 2
ALLOW = ModelResponse(text='{"decision": "allow"}', usage=Usage(5, 5), finish_reason="stop")


def judge(model: ScriptedModel) -> GuardrailBinding:
    """The judge as `runtime/guardrails.py` builds it for every (re)started run."""
    points = frozenset({"input", "toolArguments", "toolResult", "output"})
    return GuardrailBinding("judge", points, ModelJudge(model, "rules", MAX_CALLS))  # type: ignore[arg-type]


async def approve(p: PendingApproval, arguments: dict[str, Any]) -> list[ApprovalDecision]:
    return [ApprovalDecision("Approve", "ok")]


def config(**kw: Any) -> Any:
    gov = Governance(
        candidate_tools=frozenset({"deploy"}), approvals={"deploy": ApprovalRule("Tool deploy")}
    )
    return dataclasses.replace(run_config(gov, **kw), clock=lambda: NOW)


def through_the_checkpoint(state: RunState) -> RunState:
    subject = Subject("ns", "t", "uid-1")
    blob = sealing.current().seal(checkpoint.encode(state), subject, 1)
    body = {"binaryData": {checkpoint.KEY: base64.b64encode(blob).decode()}}
    restored = checkpoint.decode(body, subject)
    assert restored is not None
    return restored[1]


async def test_the_judge_call_count_survives_a_resume() -> None:
    box = toolbox("deploy")
    first_judge = ScriptedModel(after=ALLOW)
    model = ScriptedModel([tools_turn(call("deploy", "c1"))])
    # Step 1: the judge checks the input and the call's arguments (2 calls); the call waits.
    first = await run_agent(config(), model, box.bindings, guardrails=[judge(first_judge)])
    assert first.phase == "AwaitingApproval" and first_judge.calls == MAX_CALLS

    # A new process resumes with a new judge: its limit is already used up.
    second_judge = ScriptedModel(after=ALLOW)
    result = await run_agent(
        config(approval_decider=approve),
        ScriptedModel([answer("finished")]),
        box.bindings,
        state=through_the_checkpoint(first.state),
        guardrails=[judge(second_judge)],
    )
    assert second_judge.calls == 0, "the judge was called past maxCallsPerTask after a resume"
    assert any(r.cause == "CallLimit" for r in result.state.guardrail_records)
    assert box.calls("deploy") == 0  # denied by the judge's limit (fail closed), never run


async def test_the_count_is_per_guardrail_and_kept_in_the_checkpoint() -> None:
    state = RunState()
    state.judge_calls = {"judge": 2, "other": 1}
    assert through_the_checkpoint(state).judge_calls == {"judge": 2, "other": 1}


def test_a_checkpoint_from_before_the_count_reads_as_zero_calls() -> None:
    old = RunState().to_dict()
    old.pop("judgeCalls", None)
    assert RunState.from_dict(old).judge_calls == {}
    assert "judgeCalls" not in RunState().to_dict()  # nothing new in a run without a judge
