"""The step loop's decisions (DESIGN §3 step 5, §4), pinned with scripted models and counting
tool executors. No network, no wall-clock assertions."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from typing import Any

import pytest

from ordo.engine.events import (
    Checkpoint,
    Event,
    ModelResponded,
    RunFinished,
    RunStarted,
    StepStarted,
    ToolDecided,
    ToolFinished,
)
from ordo.engine.governance import Governance, PermissionRule
from ordo.engine.loop import run_agent
from ordo.engine.model import ModelError, ModelRequest, ModelResponse, ModelUnavailable
from ordo.engine.state import RunState, ToolCallRecord
from ordo.engine.transcript import (
    AssistantMessage,
    SystemMessage,
    ToolCall,
    ToolResult,
    Usage,
    UserMessage,
)
from support.engine_fakes import (
    QUERY_SCHEMA,
    CountingExecutor,
    ScriptedModel,
    Toolbox,
    answer,
    assert_one_result_per_call,
    bad_call,
    call,
    open_governance,
    result_for,
    run_config,
    toolbox,
    tools_turn,
)


def record_map(result: Any) -> dict[str, tuple[str, str]]:
    return {r.call_id: (r.decision, r.reason) for r in result.tool_calls}


# --------------------------------------------------------------------------------------
# Ending: text answer, maxSteps


async def test_text_answer_succeeds_after_one_model_call() -> None:
    model = ScriptedModel([answer("the answer", Usage(7, 3))])
    result = await run_agent(run_config(open_governance()), model, [])
    assert (result.phase, result.reason) == ("Succeeded", "Succeeded")
    assert result.output == "the answer"
    assert result.structured_output is None
    assert model.calls == 1
    assert result.step == 1
    assert result.usage == Usage(7, 3)
    assert result.tool_calls == []


async def test_first_request_holds_system_and_user_message() -> None:
    model = ScriptedModel([answer("ok")])
    await run_agent(run_config(open_governance()), model, [])
    items = model.requests[0].items
    assert items == (SystemMessage("You are a test agent."), UserMessage("do it"))


def always_a_new_tool(request: ModelRequest, index: int) -> ModelResponse:
    """Calls tool t<N+1> at call N, with some text: never gives a final answer."""
    return tools_turn(call(f"t{index + 1}", f"c{index + 1}"), text=f"thinking {index + 1}")


@pytest.mark.parametrize("max_steps", [1, 2, 3, 5])
async def test_max_steps_makes_exactly_max_steps_model_calls(max_steps: int) -> None:
    names = [f"t{i}" for i in range(1, 7)]
    box = toolbox(*names)
    model = ScriptedModel(after=always_a_new_tool)
    result = await run_agent(
        run_config(open_governance(*names), max_steps=max_steps), model, box.bindings
    )
    assert (result.phase, result.reason) == ("Failed", "MaxStepsExceeded")
    assert model.calls == max_steps
    assert result.step == max_steps
    assert str(max_steps) in result.message
    assert result.output == f"thinking {max_steps}"  # last text kept as partial output
    # the tool calls of the last step still ran (one step = model call + its tool calls)
    assert box.total_calls == max_steps
    assert_one_result_per_call(result.state)


async def test_max_steps_keeps_last_non_empty_text_as_partial_output() -> None:
    box = toolbox("a", "b", "c")
    model = ScriptedModel(
        [
            tools_turn(call("a", "c1"), text="first look"),
            tools_turn(call("b", "c2"), text="partial findings"),
            tools_turn(call("c", "c3")),  # no text in the last step
        ]
    )
    result = await run_agent(
        run_config(open_governance("a", "b", "c"), max_steps=3), model, box.bindings
    )
    assert result.reason == "MaxStepsExceeded"
    assert result.output == "partial findings"


async def test_answer_at_the_last_allowed_step_succeeds() -> None:
    box = toolbox("a", "b")
    model = ScriptedModel([tools_turn(call("a", "c1")), tools_turn(call("b", "c2")), answer("fin")])
    result = await run_agent(
        run_config(open_governance("a", "b"), max_steps=3), model, box.bindings
    )
    assert (result.phase, result.output, model.calls) == ("Succeeded", "fin", 3)


async def test_empty_text_without_tool_calls_ends_the_run_succeeded() -> None:
    result = await run_agent(run_config(open_governance()), ScriptedModel([answer("")]), [])
    assert (result.phase, result.output) == ("Succeeded", "")


# --------------------------------------------------------------------------------------
# Tool offering: removal after use, built-ins stay


async def test_called_tool_is_not_offered_in_later_steps_but_memory_builtins_are() -> None:
    box = toolbox("search", "fetch", builtins=["memory_read", "memory_write"])
    model = ScriptedModel(
        [
            tools_turn(call("search", "c1", q="x"), call("memory_write", "c2", key="k")),
            tools_turn(call("fetch", "c3"), call("memory_write", "c4", key="k")),
            answer("done"),
        ]
    )
    gov = Governance(
        candidate_tools=frozenset({"search", "fetch"}),
        memory="mem",
        memory_operations=frozenset({"read", "write"}),
    )
    result = await run_agent(run_config(gov), model, box.bindings)
    assert result.phase == "Succeeded"
    offered = [r.tool_names for r in model.requests]
    assert offered[0] == {"search", "fetch", "memory_read", "memory_write"}
    assert offered[1] == {"fetch", "memory_read", "memory_write"}
    assert offered[2] == {"memory_read", "memory_write"}
    assert box.calls("memory_write") == 2  # a built-in may be called again in a later step
    assert result.state.used_tools == {"search", "fetch"}


async def test_tool_that_failed_is_removed_too() -> None:
    box = Toolbox().add("flaky", executor=CountingExecutor(fail="upstream 502")).add("other")
    model = ScriptedModel([tools_turn(call("flaky", "c1")), answer("done")])
    result = await run_agent(run_config(open_governance("flaky", "other")), model, box.bindings)
    assert result.phase == "Succeeded"
    assert model.requests[1].tool_names == {"other"}
    r = result_for(result.state, "c1")
    assert r.is_error and "upstream 502" in r.content
    assert result.tool_calls[0].outcome == "error"
    assert result.tool_calls[0].decision == "allowed"


async def test_rejected_arguments_leave_the_tool_on_offer() -> None:
    box = Toolbox().add("search", schema=QUERY_SCHEMA)
    model = ScriptedModel(
        [
            tools_turn(bad_call("search", "c1")),
            tools_turn(call("search", "c2", q=5)),
            tools_turn(call("search", "c3", q="ok")),
            answer("done"),
        ]
    )
    result = await run_agent(run_config(open_governance("search")), model, box.bindings)
    assert result.phase == "Succeeded"
    assert [r.tool_names for r in model.requests] == [{"search"}, {"search"}, {"search"}, set()]
    assert record_map(result) == {
        "c1": ("rejected", "InvalidArguments"),
        "c2": ("rejected", "InvalidArguments"),
        "c3": ("allowed", "NoPermissionRequired"),
    }
    assert box.executors["search"].seen == [{"q": "ok"}]
    assert "q" in result_for(result.state, "c2").content  # the model is told what is wrong


# --------------------------------------------------------------------------------------
# Duplicates and repeats


async def test_duplicate_call_in_one_response_gets_an_error_result_and_runs_once() -> None:
    box = toolbox("search")
    model = ScriptedModel(
        [
            tools_turn(call("search", "c1", q="first"), call("search", "c2", q="second")),
            answer("ok"),
        ]
    )
    result = await run_agent(run_config(open_governance("search")), model, box.bindings)
    assert result.phase == "Succeeded"  # a rejection never fails the run
    assert box.executors["search"].seen == [{"q": "first"}]
    assert record_map(result) == {
        "c1": ("allowed", "NoPermissionRequired"),
        "c2": ("rejected", "DuplicateInResponse"),
    }
    dup = result_for(result.state, "c2")
    assert dup.is_error and "already called in this response" in dup.content
    assert not result_for(result.state, "c1").is_error
    assert_one_result_per_call(result.state)


async def test_duplicate_builtin_call_in_one_response_is_rejected_too() -> None:
    box = toolbox(builtins=["memory_write"])
    model = ScriptedModel(
        [tools_turn(call("memory_write", "c1"), call("memory_write", "c2")), answer("ok")]
    )
    gov = Governance(
        candidate_tools=frozenset(), memory="mem", memory_operations=frozenset({"write"})
    )
    result = await run_agent(run_config(gov), model, box.bindings)
    assert box.calls("memory_write") == 1
    assert record_map(result)["c2"] == ("rejected", "DuplicateInResponse")


async def test_calling_an_already_used_tool_in_a_later_step_is_rejected_not_executed() -> None:
    box = toolbox("search")
    model = ScriptedModel(
        [tools_turn(call("search", "c1")), tools_turn(call("search", "c2")), answer("ok")]
    )
    result = await run_agent(run_config(open_governance("search")), model, box.bindings)
    assert result.phase == "Succeeded"
    assert box.calls("search") == 1
    assert record_map(result)["c2"] == ("rejected", "AlreadyCalled")
    assert result.tool_calls[1].step == 2
    assert result.tool_calls[1].outcome == "skipped"
    assert result_for(result.state, "c2").is_error


# --------------------------------------------------------------------------------------
# Governance in the loop, onToolDenied


async def test_tool_not_offered_is_denied_and_fails_the_run() -> None:
    box = toolbox("search")
    model = ScriptedModel([tools_turn(call("delete-everything", "c1")), answer("ok")])
    result = await run_agent(run_config(open_governance("search")), model, box.bindings)
    assert (result.phase, result.reason) == ("Failed", "ToolDenied")
    assert model.calls == 1
    assert record_map(result) == {"c1": ("denied", "NotOffered")}
    # the message (status, the terminal Event) never names what the model invented
    assert "<not-offered>" in result.message and "NotOffered" in result.message
    assert "delete-everything" not in result.message
    assert result.state.records[0].tool == "delete-everything"  # status.toolCalls keeps it
    assert box.total_calls == 0
    assert_one_result_per_call(result.state)


async def test_blocked_tool_is_denied_even_when_a_binding_exists() -> None:
    box = toolbox("rm")
    gov = Governance(candidate_tools=frozenset({"rm"}), blocked_by={"rm": "no-deletes"})
    model = ScriptedModel([tools_turn(call("rm", "c1"))])
    result = await run_agent(run_config(gov), model, box.bindings)
    assert result.reason == "ToolDenied"
    assert record_map(result) == {"c1": ("denied", "BlockedByPolicy: no-deletes")}
    assert box.calls("rm") == 0


async def test_bound_tool_without_permission_never_executes() -> None:
    box = toolbox("rm")
    gov = Governance(
        candidate_tools=frozenset({"rm"}),
        rules={"rm": (PermissionRule("rm-invoke", ("tool:rm:invoke",)),)},
        granted=frozenset({"tool:ls:invoke"}),
        has_roles=True,
    )
    model = ScriptedModel([tools_turn(call("rm", "c1"))])
    result = await run_agent(run_config(gov), model, box.bindings)
    assert result.reason == "ToolDenied"
    decision, reason = record_map(result)["c1"]
    assert decision == "denied" and reason.startswith("MissingPermission:")
    assert box.calls("rm") == 0


async def test_fail_mode_runs_calls_before_the_denied_one_and_none_after() -> None:
    box = toolbox("a", "c")
    model = ScriptedModel(
        [tools_turn(call("a", "c1"), call("ghost", "c2"), call("c", "c3")), answer("ok")]
    )
    result = await run_agent(run_config(open_governance("a", "c")), model, box.bindings)
    assert (result.phase, result.reason) == ("Failed", "ToolDenied")
    assert (box.calls("a"), box.calls("c")) == (1, 0)
    assert record_map(result) == {
        "c1": ("allowed", "NoPermissionRequired"),
        "c2": ("denied", "NotOffered"),
    }  # c3 was never screened
    assert result_for(result.state, "c3").is_error  # but it still has a result
    assert_one_result_per_call(result.state)
    assert model.calls == 1


async def test_return_error_mode_tells_the_model_and_continues() -> None:
    box = toolbox("a")
    gov = Governance(candidate_tools=frozenset({"a", "rm"}), blocked_by={"rm": "strict"})
    model = ScriptedModel(
        [tools_turn(call("rm", "c1"), call("a", "c2")), answer("did what I could")]
    )
    result = await run_agent(run_config(gov, on_tool_denied="ReturnError"), model, box.bindings)
    assert (result.phase, result.reason, result.output) == (
        "Succeeded",
        "Succeeded",
        "did what I could",
    )
    assert model.calls == 2
    assert box.calls("a") == 1
    assert record_map(result) == {
        "c1": ("denied", "BlockedByPolicy: strict"),
        "c2": ("allowed", "NoPermissionRequired"),
    }
    denied = result_for(result.state, "c1")
    assert (
        denied.is_error
        and "not permitted" in denied.content
        and "BlockedByPolicy" in denied.content
    )
    assert "strict" not in denied.content  # the model is not told which policy
    # the second request carries the error result back to the model
    assert denied in model.requests[1].items


async def test_unreadable_governance_denies_every_tool_call() -> None:
    box = toolbox("a")
    gov = Governance(candidate_tools=frozenset({"a"}), unreadable="AgentPolicies could not be read")
    result = await run_agent(
        run_config(gov), ScriptedModel([tools_turn(call("a", "c1"))]), box.bindings
    )
    assert result.reason == "ToolDenied"
    assert record_map(result)["c1"][1].startswith("CannotDecide: AgentPolicies")
    assert box.calls("a") == 0


async def test_memory_builtins_are_governed_too() -> None:
    """Built-in memory tools go through governance like any tool: the cannot-decide state
    denies them and they never run (DESIGN §4, fail closed)."""
    box = toolbox(builtins=["memory_read"])
    gov = Governance(
        candidate_tools=frozenset(),
        memory="mem",
        memory_operations=frozenset({"read"}),
        unreadable="ToolPermissions could not be read",
    )
    model = ScriptedModel([tools_turn(call("memory_read", "c1", key="k")), answer("ok")])
    result = await run_agent(run_config(gov), model, box.bindings)
    assert result.reason == "ToolDenied"
    assert record_map(result) == {
        "c1": ("denied", "CannotDecide: ToolPermissions could not be read")
    }
    assert box.calls("memory_read") == 0


async def test_governance_and_status_use_the_object_name_not_the_model_name() -> None:
    box = Toolbox().add("web_search", object_name="web.search")
    gov = Governance(
        candidate_tools=frozenset({"web.search"}),
        has_roles=True,
        granted=frozenset({"tool:web.search:invoke"}),
    )
    model = ScriptedModel([tools_turn(call("web_search", "c1")), answer("ok")])
    result = await run_agent(run_config(gov), model, box.bindings)
    assert result.phase == "Succeeded"
    assert record_map(result)["c1"] == ("allowed", "Granted: tool:web.search:invoke")


async def test_calling_the_object_name_instead_of_the_model_name_is_denied() -> None:
    box = Toolbox().add("web_search", object_name="web.search")
    gov = Governance(candidate_tools=frozenset({"web.search"}))
    model = ScriptedModel([tools_turn(call("web.search", "c1"))])
    result = await run_agent(run_config(gov), model, box.bindings)
    assert result.reason == "ToolDenied"
    assert record_map(result)["c1"] == ("denied", "NotOffered")
    assert box.total_calls == 0


# --------------------------------------------------------------------------------------
# Tool execution outcomes


async def test_tool_timeout_is_an_error_result_and_the_run_continues() -> None:
    box = Toolbox().add("slow", timeout=0.01, executor=CountingExecutor(hang=True))
    model = ScriptedModel([tools_turn(call("slow", "c1")), answer("ok")])
    result = await run_agent(run_config(open_governance("slow")), model, box.bindings)
    assert result.phase == "Succeeded"
    r = result_for(result.state, "c1")
    assert r.is_error and "did not answer" in r.content
    assert result.tool_calls[0].outcome == "error"


async def test_successful_tool_result_reaches_the_model() -> None:
    box = Toolbox().add("search", executor=CountingExecutor("three results"))
    model = ScriptedModel([tools_turn(call("search", "c1")), answer("ok")])
    result = await run_agent(run_config(open_governance("search")), model, box.bindings)
    r = result_for(result.state, "c1")
    assert (r.content, r.is_error, r.name) == ("three results", False, "search")
    assert r in model.requests[1].items
    assert result.tool_calls[0].outcome == "succeeded"


# --------------------------------------------------------------------------------------
# Timeout, token budget, cancel, model errors


async def test_timeout_with_a_slow_model() -> None:
    async def slow(request: ModelRequest, index: int) -> ModelResponse:
        await asyncio.sleep(30)
        return answer("too late")

    model = ScriptedModel(after=slow)
    result = await run_agent(run_config(open_governance(), timeout=0.2), model, [])
    assert (result.phase, result.reason) == ("Failed", "Timeout")
    assert model.calls == 1
    assert "0.2s" in result.message


async def test_timeout_cancels_a_hanging_tool_and_answers_its_call() -> None:
    box = Toolbox().add("hang", executor=CountingExecutor(hang=True)).add("later")
    model = ScriptedModel([tools_turn(call("hang", "c1"), call("later", "c2"))])
    result = await run_agent(
        run_config(open_governance("hang", "later"), timeout=0.2), model, box.bindings
    )
    assert (result.phase, result.reason) == ("Failed", "Timeout")
    assert box.calls("hang") == 1 and box.calls("later") == 0
    assert_one_result_per_call(result.state)
    assert result_for(result.state, "c2").is_error


async def test_timeout_after_some_steps_keeps_partial_output() -> None:
    async def slow(request: ModelRequest, index: int) -> ModelResponse:
        await asyncio.sleep(30)
        return answer("too late")

    box = toolbox("a")
    model = ScriptedModel([tools_turn(call("a", "c1"), text="halfway")], after=slow)
    result = await run_agent(run_config(open_governance("a"), timeout=0.2), model, box.bindings)
    assert result.reason == "Timeout"
    assert result.output == "halfway"
    assert result.step == 2


async def test_token_budget_exceeded_fails_at_the_step_that_crosses_it() -> None:
    box = toolbox("a", "b")
    model = ScriptedModel(
        [
            tools_turn(call("a", "c1"), usage=Usage(50, 10)),
            tools_turn(call("b", "c2"), usage=Usage(50, 10)),
            answer("never reached"),
        ]
    )
    result = await run_agent(
        run_config(open_governance("a", "b"), token_budget=100), model, box.bindings
    )
    assert (result.phase, result.reason) == ("Failed", "TokenBudgetExceeded")
    assert model.calls == 2
    assert result.usage.total_tokens == 120
    assert "120" in result.message and "100" in result.message
    # the over-budget response's tool calls do not run, but each still gets a result
    assert (box.calls("a"), box.calls("b")) == (1, 0)
    assert_one_result_per_call(result.state)


async def test_token_budget_is_inclusive() -> None:
    model = ScriptedModel([answer("fits exactly", Usage(90, 10))])
    result = await run_agent(run_config(open_governance(), token_budget=100), model, [])
    assert result.phase == "Succeeded"


async def test_token_budget_applies_to_the_final_answer_too() -> None:
    model = ScriptedModel([answer("expensive answer", Usage(90, 11))])
    result = await run_agent(run_config(open_governance(), token_budget=100), model, [])
    assert result.reason == "TokenBudgetExceeded"
    assert result.output == "expensive answer"  # kept as partial output


async def test_cancel_before_start_makes_no_model_call() -> None:
    cancel = asyncio.Event()
    cancel.set()
    model = ScriptedModel([answer("x")])
    result = await run_agent(run_config(open_governance()), model, [], cancel=cancel)
    assert (result.phase, result.reason) == ("Cancelled", "Cancelled")
    assert model.calls == 0


async def test_cancel_takes_effect_at_the_next_step_boundary() -> None:
    cancel = asyncio.Event()

    def cancel_during_call(request: ModelRequest, index: int) -> ModelResponse:
        cancel.set()
        return tools_turn(call("a", "c1"))

    box = toolbox("a")
    model = ScriptedModel([cancel_during_call, answer("never")])
    result = await run_agent(run_config(open_governance("a")), model, box.bindings, cancel=cancel)
    assert (result.phase, result.reason) == ("Cancelled", "Cancelled")
    assert model.calls == 1
    assert box.calls("a") == 1  # the step in flight completes
    assert result.step == 1
    assert_one_result_per_call(result.state)


@pytest.mark.parametrize(
    ("error", "reason"),
    [(ModelError("400 bad request"), "ModelError"), (ModelUnavailable("503"), "ModelUnavailable")],
)
async def test_model_errors_end_the_run_with_their_reason(error: Exception, reason: str) -> None:
    def boom(request: ModelRequest, index: int) -> ModelResponse:
        raise error

    box = toolbox("a")
    model = ScriptedModel([tools_turn(call("a", "c1"), text="partial")], after=boom)
    result = await run_agent(run_config(open_governance("a")), model, box.bindings)
    assert (result.phase, result.reason) == ("Failed", reason)
    assert result.output == "partial"
    assert model.calls == 2


# --------------------------------------------------------------------------------------
# Output schema

SCHEMA = {
    "type": "object",
    "properties": {"category": {"type": "string", "enum": ["billing", "other"]}},
    "required": ["category"],
    "additionalProperties": False,
}


async def test_structured_output_valid() -> None:
    model = ScriptedModel([answer('{"category": "billing"}')])
    result = await run_agent(run_config(open_governance(), output_schema=SCHEMA), model, [])
    assert (result.phase, result.reason) == ("Succeeded", "Succeeded")
    assert result.structured_output == {"category": "billing"}
    assert result.output == '{"category": "billing"}'
    assert model.requests[0].output_schema == SCHEMA


async def test_structured_output_in_a_code_fence_is_accepted() -> None:
    model = ScriptedModel([answer('```json\n{"category": "other"}\n```')])
    result = await run_agent(run_config(open_governance(), output_schema=SCHEMA), model, [])
    assert result.structured_output == {"category": "other"}


@pytest.mark.parametrize(
    "text",
    [
        '{"category": "CANARY-7f3a"}',
        '{"category": "billing", "CANARY-7f3a": 1}',
        "CANARY-7f3a is my answer",
        '["CANARY-7f3a"]',
        '{"category": 5, "note": "CANARY-7f3a"}',
    ],
)
async def test_structured_output_invalid_fails_without_model_text_in_message(text: str) -> None:
    model = ScriptedModel([answer(text)])
    result = await run_agent(run_config(open_governance(), output_schema=SCHEMA), model, [])
    assert (result.phase, result.reason) == ("Failed", "InvalidOutput")
    assert result.structured_output is None
    assert "CANARY" not in result.message
    assert result.output == text  # the raw answer stays in output, for debugging


# --------------------------------------------------------------------------------------
# Events


async def test_event_stream_of_one_run() -> None:
    events: list[Event] = []

    async def listen(event: Event) -> None:
        events.append(event)

    box = Toolbox().add("a", idempotent=True).add("b")
    model = ScriptedModel([tools_turn(call("a", "c1"), call("b", "c2")), answer("ok")])
    result = await run_agent(
        run_config(open_governance("a", "b")), model, box.bindings, listeners=[listen]
    )
    kinds = [type(e).__name__ for e in events]
    assert kinds == [
        "RunStarted",
        "StepStarted",
        "ModelResponded",
        "ToolDecided",
        "ToolFinished",
        "ToolDecided",
        "Checkpoint",  # before the non-idempotent b starts
        "ToolFinished",
        "Checkpoint",  # end of step 1
        "StepFinished",
        "StepStarted",
        "ModelResponded",
        "RunFinished",
    ]
    assert isinstance(events[0], RunStarted) and events[0].resumed_from_step == 0
    assert [e.step for e in events if isinstance(e, StepStarted)] == [1, 2]
    responded = [e for e in events if isinstance(e, ModelResponded)]
    assert [e.tool_calls for e in responded] == [2, 0]
    assert [e.record.tool for e in events if isinstance(e, ToolDecided)] == ["a", "b"]
    assert [e.outcome for e in events if isinstance(e, ToolFinished)] == ["succeeded", "succeeded"]
    assert isinstance(events[-1], RunFinished) and events[-1].result is result


async def test_checkpoint_before_a_non_idempotent_tool_marks_the_call_started() -> None:
    seen: list[dict[str, Any]] = []

    async def listen(event: Event) -> None:
        if isinstance(event, Checkpoint):
            seen.append(event.state.to_dict())

    box = Toolbox().add("pay")
    model = ScriptedModel([tools_turn(call("pay", "c1")), answer("ok")])
    await run_agent(run_config(open_governance("pay")), model, box.bindings, listeners=[listen])
    first = seen[0]
    assert first["startedCalls"] == ["c1"]
    assert not any(i["role"] == "tool" for i in first["items"])  # persisted before it ran


async def test_events_carry_no_arguments_or_results() -> None:
    events: list[Event] = []

    async def listen(event: Event) -> None:
        events.append(event)

    box = Toolbox().add("a", idempotent=True, executor=CountingExecutor("RESULT-CANARY"))
    model = ScriptedModel([tools_turn(call("a", "c1", q="ARG-CANARY")), answer("ok")])
    await run_agent(run_config(open_governance("a")), model, box.bindings, listeners=[listen])
    for e in events:
        if isinstance(e, ToolDecided | ToolFinished | ModelResponded | StepStarted):
            assert "CANARY" not in repr(e)


# --------------------------------------------------------------------------------------
# Resume from a checkpoint


def pending_state(*calls: ToolCall, started: Iterable[str] = ()) -> RunState:
    """A checkpoint taken after step 1's model call, before its tool calls have results."""
    state = RunState(
        items=[
            SystemMessage("You are a test agent."),
            UserMessage("do it"),
            AssistantMessage("", tuple(calls)),
        ],
        step=1,
        usage=Usage(10, 2),
        started_calls=set(started),
    )
    return RunState.from_dict(json.loads(json.dumps(state.to_dict())))


async def test_state_round_trips_through_to_dict() -> None:
    box = Toolbox().add("a").add("search", schema=QUERY_SCHEMA)
    model = ScriptedModel(
        [tools_turn(call("a", "c1", n=1), bad_call("search", "c2")), answer("ok")]
    )
    result = await run_agent(run_config(open_governance("a", "search")), model, box.bindings)
    state = result.state
    again = RunState.from_dict(json.loads(json.dumps(state.to_dict())))
    assert again.items == state.items
    assert again.step == state.step == 2
    assert again.usage == state.usage
    assert again.records == state.records
    assert again.used_tools == state.used_tools == {"a"}
    assert again.started_calls == state.started_calls == {"c1"}
    assert again.to_dict() == state.to_dict()


async def test_resume_after_crash_with_non_idempotent_call_started_is_interrupted() -> None:
    """The process persisted the checkpoint before `pay` started, then died."""

    class Crash(Exception):
        pass

    saved: list[dict[str, Any]] = []

    async def persist_then_die(event: Event) -> None:
        if isinstance(event, Checkpoint) and event.state.started_calls:
            saved.append(json.loads(json.dumps(event.state.to_dict())))
            raise Crash

    box = Toolbox().add("pay")
    model = ScriptedModel([tools_turn(call("pay", "c1", amount=10)), answer("paid")])
    with pytest.raises(Crash):
        await run_agent(
            run_config(open_governance("pay")), model, box.bindings, listeners=[persist_then_die]
        )
    assert box.calls("pay") == 0

    box2 = Toolbox().add("pay")
    model2 = ScriptedModel([answer("paid")])
    result = await run_agent(
        run_config(open_governance("pay")),
        model2,
        box2.bindings,
        state=RunState.from_dict(saved[0]),
    )
    assert (result.phase, result.reason) == ("Failed", "Interrupted")
    assert "pay" in result.message
    assert box2.calls("pay") == 0
    assert model2.calls == 0


async def test_resume_re_executes_an_idempotent_call_once() -> None:
    box = Toolbox().add("lookup", idempotent=True)
    model = ScriptedModel([answer("found it")])
    state = pending_state(call("lookup", "c1", q="x"), started={"c1"})
    result = await run_agent(
        run_config(open_governance("lookup")), model, box.bindings, state=state
    )
    assert result.phase == "Succeeded"
    assert box.executors["lookup"].seen == [{"q": "x"}]
    assert model.calls == 1
    assert result.step == 2
    assert result.usage == Usage(11, 3)  # usage continues from the checkpoint
    assert_one_result_per_call(result.state)


async def test_resume_executes_a_pending_call_that_had_not_started() -> None:
    box = Toolbox().add("pay")
    model = ScriptedModel([answer("paid")])
    result = await run_agent(
        run_config(open_governance("pay")),
        model,
        box.bindings,
        state=pending_state(call("pay", "c1")),
    )
    assert result.phase == "Succeeded"
    assert box.calls("pay") == 1
    assert_one_result_per_call(result.state)


async def test_resume_only_completes_unanswered_calls() -> None:
    box = Toolbox().add("a", idempotent=True).add("b", idempotent=True)
    state = pending_state(call("a", "c1"), call("b", "c2"))
    # c1 was executed and recorded before the checkpoint
    state.items.append(ToolResult("c1", "a", "done before"))
    state.records.append(
        ToolCallRecord(1, "a", "allowed", "NoPermissionRequired", "succeeded", "c1")
    )
    state.used_tools.add("a")
    model = ScriptedModel([answer("ok")])
    result = await run_agent(
        run_config(open_governance("a", "b")), model, box.bindings, state=state
    )
    assert result.phase == "Succeeded"
    assert (box.calls("a"), box.calls("b")) == (0, 1)
    assert_one_result_per_call(result.state)


async def test_resume_counts_steps_from_the_checkpoint() -> None:
    names = ("t0", "t1", "t2", "t3")
    box = toolbox(*names)
    model = ScriptedModel(after=always_a_new_tool)
    state = pending_state(call("t0", "c0"))
    result = await run_agent(
        run_config(open_governance(*names), max_steps=2), model, box.bindings, state=state
    )
    assert result.reason == "MaxStepsExceeded"
    assert model.calls == 1  # step 1 was before the restart
    assert (box.calls("t0"), box.calls("t1"), box.calls("t2")) == (1, 1, 0)


async def test_resume_screens_pending_calls_again() -> None:
    """Governance applies to a pending call on resume, as it would have the first time."""
    box = toolbox("rm")
    gov = Governance(candidate_tools=frozenset({"rm"}), blocked_by={"rm": "p"})
    result = await run_agent(
        run_config(gov), ScriptedModel(), box.bindings, state=pending_state(call("rm", "c1"))
    )
    assert result.reason == "ToolDenied"
    assert box.calls("rm") == 0


async def test_resumed_run_reports_the_step_it_resumed_from() -> None:
    events: list[Event] = []

    async def listen(event: Event) -> None:
        events.append(event)

    box = Toolbox().add("a", idempotent=True)
    await run_agent(
        run_config(open_governance("a")),
        ScriptedModel([answer("ok")]),
        box.bindings,
        state=pending_state(call("a", "c1")),
        listeners=[listen],
    )
    assert isinstance(events[0], RunStarted) and events[0].resumed_from_step == 1


async def test_cancel_does_not_wait_for_the_model_call_in_flight() -> None:
    """Deleting a running Task (or spec.cancel) used to wait for the current model call,
    up to the endpoint's timeout times its retries; the call is abandoned instead."""
    never = asyncio.Event()

    async def hangs(request: ModelRequest, index: int) -> ModelResponse:
        await never.wait()  # a model that never answers
        return answer("too late")

    model = ScriptedModel([hangs])
    cancel = asyncio.Event()
    asyncio.get_running_loop().call_later(0.05, cancel.set)
    # The bound only turns a hang into a failure; it is not a timing assertion.
    result = await asyncio.wait_for(
        run_agent(run_config(open_governance()), model, [], cancel=cancel), 30
    )
    assert (result.phase, result.reason) == ("Cancelled", "Cancelled")
    assert model.calls == 1 and result.step == 0  # the call never answered: not a step
