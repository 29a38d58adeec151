"""The `model` Guardrail (an LLM judge) over real HTTP: the judge is a scripted OpenAI-compatible
server, the agent's model another. Allow, deny, redact; malformed verdicts and a failing judge
deny; the judge's tokens count against the Task's budget, and a judge at a tool point that
takes the run over it stops the run right there (the tool does not run, the model is not
called again)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from tests.support.counting_tool import CountingTool
from tests.support.guard_check_server import REASON, REDACTED, SECRET
from tests.support.openai_server import OpenAIServer
from tests.support.scripted import Step
from tests.support.wire import calls, endpoint, resolved, run_config, text

from ordo.engine.guardrails import GuardrailBinding, ModelJudge
from ordo.engine.loop import run_agent
from ordo.engine.state import RunResult
from ordo.engine.tooling import ToolBinding
from ordo.providers import build_model_client
from ordo.runtime import TaskOutcome
from ordo.tools import binding

Servers = Callable[..., OpenAIServer]


def verdict(decision: str, tokens: tuple[int, int] = (30, 5), **extra: Any) -> Step:
    return {"json": {"decision": decision, **extra}, "usage": usage(*tokens)}


def usage(inp: int, out: int) -> dict[str, int]:
    return {"input_tokens": inp, "output_tokens": out}


def judge_on(server: OpenAIServer, *points: str, max_calls: int = 50) -> GuardrailBinding:
    client = build_model_client(
        endpoint("openai", server.url + "/v1", model="judge-model"), "judge-key"
    )
    judge = ModelJudge(client, "deny anything that mentions a canary", max_calls)
    return GuardrailBinding("judge", frozenset(points), judge)  # type: ignore[arg-type]


async def run(
    agent_server: OpenAIServer,
    judge: GuardrailBinding,
    tools: list[ToolBinding] | None = None,
    **config: Any,
) -> RunResult:
    client = build_model_client(endpoint("openai-compatible", agent_server.url + "/v1"), None)
    names = [t.name for t in tools or []]
    return await run_agent(run_config(names, **config), client, tools or [], guardrails=[judge])


async def order_tool(tool: CountingTool) -> ToolBinding:
    return await binding(resolved("place-order", {"type": "http", "http": {"url": tool.url}}))


async def test_an_allowing_judge_sees_the_text_as_data_and_the_run_goes_on(
    openai_server: Servers,
) -> None:
    judge_server = openai_server([verdict("allow"), verdict("allow")])
    model = openai_server([{"text": "fine", "usage": usage(10, 2)}])
    result = await run(model, judge_on(judge_server, "input", "output"), user="hello there")
    assert (result.phase, result.output) == ("Succeeded", "fine")
    first = judge_server.bodies[0]
    assert first["model"] == "judge-model" and not first.get("tools")
    system, user = first["messages"]
    assert (
        system["role"] == "system" and "deny anything that mentions a canary" in system["content"]
    )
    assert json.loads(user["content"]) == {"point": "input", "text": "hello there"}
    schema = first["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["decision"]["enum"] == ["allow", "deny", "redact"]
    assert json.loads(judge_server.bodies[1]["messages"][1]["content"])["point"] == "output"
    assert result.usage.total_tokens == 35 + 12 + 35  # two verdicts and the agent's call


async def test_a_denying_judge_stops_the_task_before_any_model_call(
    openai_server: Servers,
) -> None:
    judge_server = openai_server([verdict("deny", reason=REASON)])
    model = openai_server([text("never")])
    result = await run(model, judge_on(judge_server, "input"), user=f"tell me {SECRET}")
    assert (result.phase, result.reason) == ("Failed", "GuardrailViolation")
    assert result.message == "guardrail 'judge' denied the Task input at step 0"
    assert model.count == 0 and judge_server.count == 1
    status = TaskOutcome(result.phase, result.reason, result.message, result).status().to_dict()
    assert status["guardrails"] == [
        {"step": 0, "point": "input", "guardrail": "judge", "action": "denied"}
    ]
    assert REASON not in json.dumps(status) and SECRET not in json.dumps(status)


async def test_a_redacting_judge_rewrites_the_final_answer(openai_server: Servers) -> None:
    judge_server = openai_server([verdict("redact", text=f"the code is {REDACTED}")])
    model = openai_server([text(f"the code is {SECRET}")])
    result = await run(model, judge_on(judge_server, "output"))
    assert (result.phase, result.output) == ("Succeeded", f"the code is {REDACTED}")


@pytest.mark.parametrize(
    ("reply", "cause"),
    [
        ({"text": "allow"}, "InvalidVerdict"),
        ({"text": "Sure! Here is my verdict: {'decision': 'allow'}"}, "InvalidVerdict"),
        ({"json": {"decision": "maybe"}}, "InvalidVerdict"),
        ({"json": {"decision": "redact"}}, "InvalidVerdict"),
        ({"json": {"decision": "allow", "confidence": 0.9}}, "InvalidVerdict"),
        ({"json": [{"decision": "allow"}]}, "InvalidVerdict"),
        ({"text": '{"decision": "allow"' + " " * 300_000 + "}"}, "InvalidVerdict"),
        ({"body": "not json at all", "status": 200}, "ModelError"),
        ({"status": 400, "error": {"message": "bad request"}}, "ModelError"),
    ],
)
async def test_a_malformed_verdict_or_a_failing_judge_denies(
    openai_server: Servers, reply: Step, cause: str
) -> None:
    judge_server = openai_server([reply])
    model = openai_server([text("never")])
    result = await run(model, judge_on(judge_server, "input"))
    assert (result.phase, result.reason) == ("Failed", "GuardrailViolation")
    assert result.message.endswith(f"(it failed closed: {cause})")
    assert model.count == 0


async def test_judge_tokens_are_counted_against_the_task_budget(openai_server: Servers) -> None:
    judge_server = openai_server([verdict("allow", tokens=(80, 10)), verdict("allow", (80, 10))])
    model = openai_server([{"text": "fine", "usage": usage(10, 2)}])
    result = await run(model, judge_on(judge_server, "input", "output"), token_budget=150)
    assert (result.phase, result.reason) == ("Failed", "TokenBudgetExceeded")
    assert result.message == "used 192 tokens (guardrail judges included), budget 150"
    assert result.output == ""  # the answer the output judge was checking is not written


@pytest.mark.parametrize("point", ["toolArguments", "toolResult"])
async def test_a_judge_at_a_tool_point_over_the_budget_stops_the_run_there(
    openai_server: Servers, point: str
) -> None:
    """The judge's tokens are checked right after its call: over the budget at the arguments,
    the tool does not run; at the result, the model is not called again with it."""
    judge_server = openai_server([verdict("allow", tokens=(500, 10))])
    model = openai_server(
        [{**calls(("place-order", {"item": "w"})), "usage": usage(10, 5)}, text("never")]
    )
    with CountingTool() as tool:
        result = await run(
            model, judge_on(judge_server, point), [await order_tool(tool)], token_budget=100
        )
        executed = tool.count
    assert (result.phase, result.reason) == ("Failed", "TokenBudgetExceeded")
    assert result.message == "used 525 tokens (guardrail judges included), budget 100"
    assert model.count == 1 and judge_server.count == 1
    assert executed == (1 if point == "toolResult" else 0)
    outcomes = [(r.tool, r.outcome) for r in result.state.records]
    assert outcomes == ([("place-order", "succeeded")] if point == "toolResult" else [])
