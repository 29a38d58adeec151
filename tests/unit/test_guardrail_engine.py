"""Guardrails (issue 16 §2) in the engine: the pattern check (RE2: deny, redact, linear on
ReDoS-shaped patterns), the four points of the step loop (input, tool arguments, tool
results, final answer), fail-closed checks, the LLM judge (malformed verdict, budget, call
limit) and resolution (GuardrailMissing with zero model calls). No network here; the http
check service is tests/wire/test_guardrail_http.py."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from pydantic import ValidationError

from ordo.api.guardrail import Guardrail, PatternGuardrail
from ordo.engine.guardrails import (
    GuardrailBinding,
    ModelJudge,
    PatternCheck,
    Verdict,
    screen,
)
from ordo.engine.loop import run_agent
from ordo.engine.model import ModelResponse
from ordo.engine.transcript import ToolResult, Usage, UserMessage
from ordo.runtime import execute
from support.engine_fakes import (
    DictStore,
    ModelFactory,
    ScriptedModel,
    Toolbox,
    agent,
    answer,
    call,
    mock_endpoint,
    obj,
    open_governance,
    policy,
    run_config,
    task,
    tools_turn,
)
from support.stall import StallWatchdog

SECRET = "CANARY-7f3e-guarded"
STALL = 1.0


def pattern_guard(
    name: str, *patterns: str, action: str = "deny", points: tuple[str, ...] = ("input",)
) -> GuardrailBinding:
    spec = PatternGuardrail.model_validate({"patterns": list(patterns), "action": action})
    return GuardrailBinding(name, frozenset(points), PatternCheck(spec))  # type: ignore[arg-type]


ALL_POINTS = ("input", "toolArguments", "toolResult", "output")


def guardrail_body(name: str, **spec: Any) -> dict[str, Any]:
    return obj("Guardrail", name, spec)


def asking(text: str) -> Any:
    """A run configuration whose user message is `text`."""
    return dataclasses.replace(run_config(open_governance()), user_message=text)


def no_secret_in(value: Any) -> None:
    assert SECRET not in json.dumps(value, default=str)


# --- the API ------------------------------------------------------------------------------------


@pytest.mark.parametrize("pattern", [r"(a)\1", r"foo(?=bar)", r"(?<!x)y", "(" * 2000])
def test_patterns_re2_cannot_run_are_refused_by_the_api(pattern: str) -> None:
    body = guardrail_body("g", type="pattern", points=["input"], pattern={"patterns": [pattern]})
    with pytest.raises(ValidationError, match="patterns"):
        Guardrail.model_validate(body)


def test_pattern_count_is_bounded_and_settings_must_match_the_type() -> None:
    with pytest.raises(ValidationError):
        Guardrail.model_validate(
            guardrail_body("g", type="pattern", points=["input"], pattern={"patterns": ["a"] * 33})
        )
    with pytest.raises(ValidationError, match=r"needs spec\.http"):
        Guardrail.model_validate(
            guardrail_body("g", type="http", points=["input"], pattern={"patterns": ["a"]})
        )


# --- the pattern check ----------------------------------------------------------------------


async def test_pattern_deny_and_allow() -> None:
    guard = pattern_guard("no-keys", r"sk-[A-Za-z0-9]{8,}")
    assert (await screen([guard], "input", "key sk-abcdefgh123", step=0)).denied is not None
    clean = await screen([guard], "input", "nothing here", step=0)
    assert clean.denied is None and clean.records == [] and clean.text == "nothing here"


async def test_pattern_redaction_replaces_every_match_literally() -> None:
    spec = PatternGuardrail.model_validate(
        {"patterns": [r"\d{3}-\d{4}"], "action": "redact", "replacement": r"[\1]"}
    )
    verdict = await PatternCheck(spec)("output", "call 555-1234 or 555-9999")
    assert verdict == Verdict("redact", r"call [\1] or [\1]")


@pytest.mark.parametrize("pattern", [r"(a+)+$", r"(a|a)*$", r"(a|aa)+b", r"(\w+\s?)*$"])
async def test_redos_shaped_patterns_stay_linear(pattern: str) -> None:
    text = "a" * 200_000 + "!"
    for action in ("deny", "redact"):
        guard = pattern_guard("redos", pattern, action=action)
        async with StallWatchdog() as watchdog:
            await screen([guard], "input", text, step=0)
        assert watchdog.longest < STALL, watchdog.report()


async def test_a_check_that_raises_denies_and_names_only_the_exception_type() -> None:
    async def broken(point: str, text: str) -> Verdict:
        raise RuntimeError(f"boom {text}")

    guard = GuardrailBinding("broken", frozenset({"input"}), broken)  # type: ignore[arg-type]
    checked = await screen([guard], "input", SECRET, step=0)
    assert checked.denied is not None and checked.denied.cause == "RuntimeError"
    no_secret_in([r.to_dict() for r in checked.records])


async def test_redactions_chain_and_the_first_deny_wins() -> None:
    first = pattern_guard("mask", "CANARY", action="redact")
    second = pattern_guard("deny-mask", r"\[REDACTED\]")
    third = pattern_guard("never-reached", "x")
    checked = await screen([first, second, third], "input", SECRET, step=0)
    assert [(r.guardrail, r.action) for r in checked.records] == [
        ("mask", "redacted"),
        ("deny-mask", "denied"),
    ]


# --- the four points in the loop -----------------------------------------------------------------


async def test_input_violation_fails_before_any_model_call() -> None:
    model = ScriptedModel()
    config = asking(f"my key is {SECRET}")
    result = await run_agent(
        config, model, [], guardrails=[pattern_guard("no-canary", "CANARY-[0-9a-f]+")]
    )
    assert (result.phase, result.reason) == ("Failed", "GuardrailViolation")
    assert model.calls == 0
    assert "no-canary" in result.message and "Task input" in result.message
    no_secret_in(result.message)
    assert [r.to_dict() for r in result.state.guardrail_records] == [
        {"step": 0, "point": "input", "guardrail": "no-canary", "action": "denied"}
    ]


async def test_input_redaction_is_what_the_model_sees() -> None:
    model = ScriptedModel([answer("ok")])
    config = asking(f"my key is {SECRET}")
    guard = pattern_guard("mask", "CANARY-[0-9a-z-]+", action="redact")
    result = await run_agent(config, model, [], guardrails=[guard])
    assert result.phase == "Succeeded"
    users = [i for i in model.requests[0].items if isinstance(i, UserMessage)]
    assert users[0].text == "my key is [REDACTED]"
    no_secret_in([str(i) for i in model.requests[0].items])


@pytest.mark.parametrize("on_denied", ["Fail", "ReturnError"])
async def test_tool_arguments_violation_never_executes_the_tool(on_denied: str) -> None:
    box = Toolbox().add("send")
    model = ScriptedModel([tools_turn(call("send", "c1", body=SECRET)), answer("gave up")])
    config = run_config(open_governance("send"), on_tool_denied=on_denied)
    guard = pattern_guard("no-canary", "CANARY", points=("toolArguments",))
    result = await run_agent(config, model, box.bindings, guardrails=[guard])
    assert box.calls("send") == 0
    record = result.tool_calls[0]
    assert (record.decision, record.reason) == (
        "denied",
        "GuardrailViolation: no-canary (toolArguments)",
    )
    if on_denied == "Fail":
        assert (result.phase, result.reason) == ("Failed", "GuardrailViolation")
        assert model.calls == 1
    else:
        assert result.phase == "Succeeded" and model.calls == 2
        sent = [i for i in model.requests[1].items if isinstance(i, ToolResult)]
        assert sent[0].is_error and "no-canary" in sent[0].content
    no_secret_in([r.to_dict() for r in result.tool_calls])
    no_secret_in(result.message)


async def test_tool_arguments_redaction_reaches_the_tool_redacted() -> None:
    box = Toolbox().add("send")
    model = ScriptedModel([tools_turn(call("send", "c1", body=f"x {SECRET} y")), answer("done")])
    guard = pattern_guard("mask", "CANARY-[0-9a-z-]+", action="redact", points=("toolArguments",))
    result = await run_agent(
        run_config(open_governance("send")), model, box.bindings, guardrails=[guard]
    )
    assert result.phase == "Succeeded"
    assert box.executors["send"].seen == [{"body": "x [REDACTED] y"}]
    assert result.state.guardrail_records[0].to_dict() == {
        "step": 1,
        "point": "toolArguments",
        "guardrail": "mask",
        "action": "redacted",
        "tool": "send",
    }


async def test_redaction_that_breaks_the_arguments_denies() -> None:
    box = Toolbox().add("send")
    model = ScriptedModel([tools_turn(call("send", "c1", body="a")), answer("done")])
    guard = pattern_guard("eat-quotes", '"', action="redact", points=("toolArguments",))
    result = await run_agent(
        run_config(open_governance("send")), model, box.bindings, guardrails=[guard]
    )
    assert box.calls("send") == 0
    assert result.reason == "GuardrailViolation"
    assert result.state.guardrail_records[-1].cause == "RedactionBrokeArguments"


async def test_tool_result_redaction_and_denial() -> None:
    box = Toolbox().add("fetch")
    box.executors["fetch"].result = f"the secret is {SECRET}"
    model = ScriptedModel([tools_turn(call("fetch", "c1")), answer("done")])
    mask = pattern_guard("mask", "CANARY-[0-9a-z-]+", action="redact", points=("toolResult",))
    result = await run_agent(
        run_config(open_governance("fetch")), model, box.bindings, guardrails=[mask]
    )
    assert result.phase == "Succeeded"
    no_secret_in([str(i) for i in model.requests[1].items])

    model = ScriptedModel([tools_turn(call("fetch", "c1")), answer("done")])
    deny = pattern_guard("deny", "CANARY", points=("toolResult",))
    config = run_config(open_governance("fetch"), on_tool_denied="ReturnError")
    result = await run_agent(config, model, box.bindings, guardrails=[deny])
    assert result.phase == "Succeeded"
    no_secret_in([str(i) for i in model.requests[1].items])
    assert result.tool_calls[0].reason == "GuardrailViolation: deny (toolResult)"

    model = ScriptedModel([tools_turn(call("fetch", "c1")), answer("done")])
    result = await run_agent(
        run_config(open_governance("fetch")), model, box.bindings, guardrails=[deny]
    )
    assert (result.phase, result.reason, model.calls) == ("Failed", "GuardrailViolation", 1)


async def test_output_violation_writes_no_output() -> None:
    model = ScriptedModel([answer(f"here: {SECRET}")])
    guard = pattern_guard("deny", "CANARY", points=("output",))
    result = await run_agent(run_config(open_governance()), model, [], guardrails=[guard])
    assert (result.phase, result.reason) == ("Failed", "GuardrailViolation")
    assert result.output == ""
    no_secret_in(result.message)


async def test_output_redaction_is_the_status_output() -> None:
    model = ScriptedModel([answer(f"here: {SECRET}")])
    guard = pattern_guard("mask", "CANARY-[0-9a-z-]+", action="redact", points=("output",))
    result = await run_agent(run_config(open_governance()), model, [], guardrails=[guard])
    assert (result.phase, result.output) == ("Succeeded", "here: [REDACTED]")


async def test_a_failed_run_keeps_no_unchecked_partial_answer() -> None:
    box = Toolbox().add("a").add("b")
    model = ScriptedModel(
        [tools_turn(call("a", "c1"), text=SECRET), tools_turn(call("b", "c2"), text=SECRET)]
    )
    guard = pattern_guard("deny", "CANARY", points=("output",))
    result = await run_agent(
        run_config(open_governance("a", "b"), max_steps=2), model, box.bindings, guardrails=[guard]
    )
    assert result.reason == "MaxStepsExceeded" and result.output == ""


# --- the model judge -------------------------------------------------------------------------------


def judge_reply(text: str, tokens: int = 10) -> ModelResponse:
    return ModelResponse(text=text, usage=Usage(tokens, tokens), finish_reason="stop")


@pytest.mark.parametrize(
    "reply",
    [
        "allow",
        "{}",
        '{"decision": "maybe"}',
        '{"decision": "redact"}',
        '{"decision": "allow", "extra": 1}',
        '[{"decision": "allow"}]',
        "{" * 100_000,
    ],
)
async def test_a_malformed_verdict_denies(reply: str) -> None:
    judge = ModelJudge(ScriptedModel([judge_reply(reply)]), "no secrets", 5)
    guard = GuardrailBinding("judge", frozenset({"input"}), judge)
    checked = await screen([guard], "input", "hello", step=0)
    assert checked.denied is not None and checked.denied.cause == "InvalidVerdict"
    assert checked.usage.total_tokens == 20  # the judge's tokens count even when it fails


async def test_judge_sees_the_text_as_data_and_its_verdict_applies() -> None:
    judge_model = ScriptedModel([judge_reply('{"decision": "redact", "text": "[gone]"}')])
    judge = ModelJudge(judge_model, "no secrets", 5)
    guard = GuardrailBinding("judge", frozenset({"input"}), judge)
    model = ScriptedModel([answer("ok")])
    config = asking(SECRET)
    result = await run_agent(config, model, [], guardrails=[guard])
    assert result.phase == "Succeeded"
    assert [i.text for i in model.requests[0].items if isinstance(i, UserMessage)] == ["[gone]"]
    seen = judge_model.requests[0]
    assert seen.tools == () and seen.output_schema is not None
    assert json.loads(seen.items[1].text) == {"point": "input", "text": SECRET}  # type: ignore[union-attr]
    assert result.usage.total_tokens == 20 + 2  # the judge's tokens and the agent's


async def test_judge_tokens_count_against_the_task_budget() -> None:
    judge = ModelJudge(
        ScriptedModel(after=judge_reply('{"decision": "allow"}', tokens=50)), "rules", 50
    )
    guard = GuardrailBinding("judge", frozenset({"input", "output"}), judge)
    model = ScriptedModel([answer("ok")])
    result = await run_agent(
        run_config(open_governance(), token_budget=120), model, [], guardrails=[guard]
    )
    assert (result.phase, result.reason) == ("Failed", "TokenBudgetExceeded")


async def test_judge_calls_are_bounded() -> None:
    judge_model = ScriptedModel(after=judge_reply('{"decision": "allow"}'))
    judge = ModelJudge(judge_model, "rules", 2)
    guard = GuardrailBinding("judge", frozenset({"input"}), judge)
    for _ in range(2):
        assert (await screen([guard], "input", "x", step=0)).denied is None
    checked = await screen([guard], "input", "x", step=0)
    assert checked.denied is not None and checked.denied.cause == "CallLimit"
    assert judge_model.calls == 2


# --- resolution ---------------------------------------------------------------------------------


def counting() -> ModelFactory:
    return ModelFactory(lambda snapshot: ScriptedModel([answer("ok")]))


async def test_a_required_guardrail_the_agent_does_not_list_fails_with_zero_model_calls() -> None:
    store = DictStore(
        agent(),
        mock_endpoint(),
        policy("baseline", requiredGuardrails=["pii"]),
        guardrail_body("pii", type="pattern", points=["input"], pattern={"patterns": ["x"]}),
    )
    factory = counting()
    outcome = await execute(task(), store, model_factory=factory)
    assert (outcome.phase, outcome.reason) == ("Failed", "GuardrailMissing")
    assert factory.calls == 0 and factory.models == []
    assert "'pii'" in outcome.message and "'baseline'" in outcome.message


async def test_a_listed_guardrail_that_does_not_exist_is_guardrail_missing() -> None:
    store = DictStore(agent(guardrails=["ghost"]), mock_endpoint())
    factory = counting()
    outcome = await execute(task(), store, model_factory=factory)
    assert (outcome.reason, factory.calls) == ("GuardrailMissing", 0)
    assert "Guardrail 'ghost' does not exist" in outcome.message


async def test_a_judge_endpoint_that_does_not_exist_and_a_disallowed_judge_model() -> None:
    judge = guardrail_body(
        "judge", type="model", points=["input"], model={"modelRef": "nope", "instructions": "x"}
    )
    store = DictStore(agent(guardrails=["judge"]), mock_endpoint(), judge)
    outcome = await execute(task(), store, model_factory=counting())
    assert outcome.reason == "ModelEndpointNotFound"
    store.put(mock_endpoint("nope", model="big-judge"))
    store.put(policy("models", allowedModels=["mock"]))
    outcome = await execute(task(), store, model_factory=counting())
    assert outcome.reason == "ModelNotAllowed"


async def test_a_declared_pattern_guardrail_runs_end_to_end_and_is_in_status() -> None:
    store = DictStore(
        agent(guardrails=["pii"]),
        mock_endpoint(),
        policy("baseline", requiredGuardrails=["pii"]),
        guardrail_body(
            "pii",
            type="pattern",
            points=["input", "output"],
            pattern={"patterns": ["CANARY-[0-9a-z-]+"], "action": "redact"},
        ),
    )
    factory = ModelFactory(lambda snapshot: ScriptedModel([answer(f"echo {SECRET}")]))
    outcome = await execute(task(input=SECRET), store, model_factory=factory)
    status = outcome.status().to_dict()
    assert (status["phase"], status["output"]) == ("Succeeded", "echo [REDACTED]")
    assert [(g["point"], g["action"]) for g in status["guardrails"]] == [
        ("input", "redacted"),
        ("output", "redacted"),
    ]
    no_secret_in(status)
