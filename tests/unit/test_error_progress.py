"""Every error exit keeps how far the run got (issue 23): the terminal status of a run ended by
an unexpected exception (a provider, a listener, a validator) or by a set-up failure after a
resume carries the step reached, the tokens spent and the tool calls recorded, never zeros.

Real engine parts: `execute` with scripted models and the mock Tool; the exceptions are raised
where a broken provider or listener would raise them."""

from __future__ import annotations

from typing import Any

from ordo.engine.events import Event, ModelResponded
from ordo.engine.model import ModelRequest, ModelResponse
from ordo.engine.state import RunState, ToolCallRecord
from ordo.engine.transcript import Usage
from ordo.runtime import Prepared, execute
from ordo.runtime.snapshot import Snapshot
from support.engine_fakes import (
    DictStore,
    ModelFactory,
    ScriptedModel,
    agent,
    call,
    mock_endpoint,
    mock_tool,
    obj,
    task,
    tools_turn,
)

CANARY = "CANARY-3b1e-prompt-text"


def objects(**agent_spec: Any) -> list[dict[str, Any]]:
    agent_spec.setdefault("tools", ["search"])
    return [agent(**agent_spec), mock_endpoint(), mock_tool("search")]


def step_one() -> ModelResponse:
    """Step 1: one tool call, 10 + 5 tokens."""
    return tools_turn(call("search", "c1", q="x"), usage=Usage(10, 5))


async def test_a_provider_exception_at_step_2_keeps_step_usage_and_tool_calls() -> None:
    def broken(request: ModelRequest, index: int) -> ModelResponse:
        raise RuntimeError(CANARY)  # not a ModelCallError: a bug in a provider adapter

    factory = ModelFactory(lambda s: ScriptedModel([step_one(), broken]))
    outcome = await execute(task(), DictStore(*objects()), model_factory=factory)
    assert (outcome.phase, outcome.reason) == ("Failed", "InternalError")
    status = outcome.status().to_dict()
    assert status["step"] == 2
    assert status["usage"] == {"inputTokens": 10, "outputTokens": 5, "totalTokens": 15}
    assert [(r["step"], r["tool"], r["outcome"]) for r in status["toolCalls"]] == [
        (1, "search", "succeeded")
    ]
    assert "RuntimeError" in status["message"] and CANARY not in str(status)


async def test_a_listener_exception_after_step_2_answered_keeps_its_tokens() -> None:
    async def exploding(event: Event) -> None:
        if isinstance(event, ModelResponded) and event.step == 2:
            raise ValueError(CANARY)

    factory = ModelFactory(
        lambda s: ScriptedModel(
            [step_one(), tools_turn(call("search", "c2", q="y"), usage=Usage(7, 3))]
        )
    )
    outcome = await execute(
        task(), DictStore(*objects()), model_factory=factory, listeners=[exploding]
    )
    assert (outcome.phase, outcome.reason) == ("Failed", "InternalError")
    status = outcome.status().to_dict()
    assert status["step"] == 2
    assert status["usage"]["totalTokens"] == 25
    assert CANARY not in str(status)


async def test_a_validator_exception_on_the_final_answer_keeps_step_and_usage() -> None:
    """The review's case: an integer beyond float range against `multipleOf: 0.5` made the
    output check raise OverflowError. Whatever the validator does with it (another change makes
    `multipleOf` exact), the terminal status keeps step 2 and all 23 tokens."""
    big = "1" + "0" * 400  # 401 digits: int / 0.5 overflows a float
    answer = ModelResponse(text='{"n": ' + big + "}", usage=Usage(4, 4), finish_reason="stop")
    factory = ModelFactory(lambda s: ScriptedModel([step_one(), answer]))
    schema = {"type": "object", "properties": {"n": {"type": "number", "multipleOf": 0.5}}}
    outcome = await execute(task(outputSchema=schema), DictStore(*objects()), model_factory=factory)
    status = outcome.status().to_dict()
    assert (status["step"], status["usage"]["totalTokens"]) == (2, 23), status


async def test_a_set_up_failure_on_resume_keeps_the_checkpointed_progress() -> None:
    """A resumed run (state from its checkpoint) whose MCP server is gone ends `ToolError`
    with the step and usage the checkpoint has, not 0."""
    mcp = obj(
        "Tool",
        "remote",
        {"type": "mcp", "description": "remote", "mcp": {"url": "http://127.0.0.1:9/mcp"}},
    )
    store = DictStore(agent(tools=["remote"]), mock_endpoint(), mcp)
    resumed = RunState(
        step=3,
        usage=Usage(100, 20),
        records=[ToolCallRecord(2, "remote", "allowed", "Allowed", "succeeded", "c9")],
    )

    async def prepare(snapshot: Snapshot) -> Prepared:
        return Prepared(state=resumed)

    factory = ModelFactory(lambda s: ScriptedModel([]))
    outcome = await execute(task(), store, model_factory=factory, prepare=prepare)
    assert (outcome.phase, outcome.reason) == ("Failed", "ToolError"), outcome.message
    assert factory.calls == 0
    status = outcome.status().to_dict()
    assert status["step"] == 3
    assert status["usage"] == {"inputTokens": 100, "outputTokens": 20, "totalTokens": 120}
    assert [r["callId"] for r in status["toolCalls"]] == ["c9"]
