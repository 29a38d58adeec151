"""Property tests over random scripted models and random governance (hypothesis).

For any script: the model is called at most maxSteps times (once per step); no denied or
rejected call ever executes; a used tool never runs twice; every tool call in the transcript
gets exactly one result; the run ends in a terminal phase with a documented reason, and the
status it produces satisfies the Task status schema.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ordo.api import REASONS, TERMINAL_PHASES
from ordo.api.task import TaskStatus
from ordo.engine.governance import Governance, PermissionRule
from ordo.engine.loop import run_agent
from ordo.engine.model import ModelError, ModelRequest, ModelResponse, ModelUnavailable
from ordo.engine.state import RunConfig, RunState
from ordo.engine.tooling import ToolBinding, ToolFailure, ToolOutput
from ordo.engine.transcript import ToolCall, Usage
from ordo.providers.mock import MockModelClient
from ordo.runtime import TaskOutcome, execute
from support.engine_fakes import (
    DictStore,
    ModelFactory,
    ScriptedModel,
    agent,
    assert_one_result_per_call,
    mock_endpoint,
    mock_tool,
    permission,
    policy,
    role,
    task,
    tool_calls_of,
)

TOOLS = ("alpha", "beta", "gamma")
BUILTIN = "memory_note"
GHOST = "ghost"
PERMS = ("tool:alpha:invoke", "tool:beta:invoke", "tool:gamma:invoke", "tool:*:invoke", "x:y:z")
SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
OUTPUT_SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string"}},
    "required": ["answer"],
}
TEXTS = ("", "plain answer", '{"answer": "yes"}', '{"answer": 5}', '```json\n{"answer": "x"}\n```')
SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --------------------------------------------------------------------------------------
# Strategies


@st.composite
def governance(draw: st.DrawFn) -> Governance:
    candidates = draw(st.frozensets(st.sampled_from(TOOLS)))
    blocked = (
        draw(st.frozensets(st.sampled_from(sorted(candidates)))) if candidates else frozenset()
    )
    rules: dict[str, tuple[PermissionRule, ...]] = {}
    for tool in TOOLS:
        if draw(st.booleans()):
            required = draw(st.lists(st.sampled_from(PERMS), min_size=1, max_size=3, unique=True))
            mode = draw(st.sampled_from(["all", "any"]))
            rules[tool] = (PermissionRule(f"{tool}-perm", tuple(required), mode),)
    return Governance(
        candidate_tools=candidates,
        blocked_by={t: "policy" for t in blocked},
        rules=rules,
        granted=draw(st.frozensets(st.sampled_from(PERMS))),
        has_roles=draw(st.booleans()),
        missing_roles=draw(st.sampled_from([(), (), (), ("ghost-role",)])),
        unreadable=draw(st.sampled_from([None, None, None, None, "policies unreadable"])),
    )


# a call: (tool name, arguments kind); a turn: ("text", text) | ("calls", [...], text)
# | ("error", reason) | ("hang",)
call_spec = st.tuples(
    st.sampled_from((*TOOLS, BUILTIN, GHOST)),
    st.sampled_from(["valid", "valid", "invalid", "none"]),
)
turn_spec = st.one_of(
    st.tuples(st.just("text"), st.sampled_from(TEXTS)),
    st.tuples(
        st.just("calls"), st.lists(call_spec, min_size=1, max_size=4), st.sampled_from(TEXTS)
    ),
    st.tuples(
        st.just("calls"), st.lists(call_spec, min_size=1, max_size=4), st.sampled_from(TEXTS)
    ),
    st.tuples(st.just("error"), st.sampled_from(["ModelError", "ModelUnavailable"])),
    st.tuples(st.just("hang")),
)


@dataclass
class World:
    """What one example runs: config, bindings, the script, and what the executors saw."""

    config: RunConfig
    bindings: list[ToolBinding]
    turns: list[Any]
    after: Any
    cancel_at: int | None
    executed: list[tuple[str, str]]


class Executor:
    def __init__(self, name: str, behaviour: str, executed: list[tuple[str, str]]) -> None:
        self.name = name
        self.behaviour = behaviour
        self.executed = executed

    async def __call__(self, arguments: dict[str, Any]) -> ToolOutput:
        self.executed.append((self.name, arguments["zz_call"]))
        if self.behaviour == "fail":
            raise ToolFailure("upstream said no")
        if self.behaviour == "hang":
            await asyncio.Event().wait()
        if self.behaviour == "error-output":
            return ToolOutput("bad input", is_error=True)
        return ToolOutput(f"result of {self.name}")


@st.composite
def worlds(draw: st.DrawFn) -> World:
    gov = draw(governance())
    executed: list[tuple[str, str]] = []
    bind_blocked = draw(st.booleans())  # a binding for a denied tool must not matter
    bind_extra = draw(st.booleans())
    bound = [
        t for t in TOOLS if t in gov.candidate_tools and (bind_blocked or t not in gov.blocked_by)
    ]
    if bind_extra:
        bound += [t for t in TOOLS if t not in gov.candidate_tools]
    behaviours = ["ok", "ok", "ok", "fail", "error-output", "hang"]
    bindings = [
        ToolBinding(
            name=t,
            object_name=t,
            description=t,
            parameters=SCHEMA,
            executor=Executor(t, draw(st.sampled_from(behaviours)), executed),
            idempotent=draw(st.booleans()),
        )
        for t in bound
    ]
    if draw(st.booleans()):
        bindings.append(
            ToolBinding(
                BUILTIN, BUILTIN, "note", SCHEMA, Executor(BUILTIN, "ok", executed), builtin=True
            )
        )
    turns = draw(st.lists(turn_spec, max_size=8))
    after = draw(
        st.one_of(
            st.tuples(st.just("text"), st.sampled_from(TEXTS)),
            st.tuples(st.just("calls"), st.lists(call_spec, min_size=1, max_size=2), st.just("")),
        )
    )
    hangs = any(t[0] == "hang" for t in turns) or any(
        isinstance(b.executor, Executor) and b.executor.behaviour == "hang" for b in bindings
    )
    config = RunConfig(
        system_prompt="sys",
        user_message="go",
        governance=gov,
        max_steps=draw(st.integers(min_value=1, max_value=6)),
        timeout=0.02 if hangs else None,
        token_budget=draw(st.one_of(st.none(), st.integers(min_value=1, max_value=300))),
        output_schema=draw(st.sampled_from([None, OUTPUT_SCHEMA])),
        on_tool_denied=draw(st.sampled_from(["Fail", "ReturnError"])),
    )
    cancel_at = draw(st.one_of(st.none(), st.integers(min_value=0, max_value=6)))
    return World(config, bindings, turns, after, cancel_at, executed)


def build_model(world: World, cancel: asyncio.Event, usage: Usage) -> ScriptedModel:
    def respond(spec: Any) -> Any:
        async def turn(request: ModelRequest, index: int) -> ModelResponse:
            if world.cancel_at == index:
                cancel.set()
            kind = spec[0]
            if kind == "text":
                return ModelResponse(text=spec[1], usage=usage)
            if kind == "error":
                raise ModelError("400") if spec[1] == "ModelError" else ModelUnavailable("503")
            if kind == "hang":
                await asyncio.Event().wait()
            calls = []
            for n, (name, args_kind) in enumerate(spec[1]):
                cid = f"s{index}c{n}"
                if args_kind == "none":
                    calls.append(ToolCall(cid, name, None, "{oops"))
                else:
                    args = {"zz_call": cid, "q": "ARGVALUE" if args_kind == "valid" else 5}
                    calls.append(ToolCall(cid, name, args, json.dumps(args)))
            return ModelResponse(text=spec[2], tool_calls=tuple(calls), usage=usage)

        return turn

    return ScriptedModel([respond(t) for t in world.turns], after=respond(world.after))


# --------------------------------------------------------------------------------------
# Invariants


def check_status_contract(result: Any) -> None:
    status = TaskOutcome(result.phase, result.reason, result.message, result).status().to_dict()
    TaskStatus.model_validate(status)  # phase, reason, decisions, outcomes are all documented
    assert "zz_call" not in json.dumps(status) and "ARGVALUE" not in json.dumps(status)


def check_run(world: World, model: ScriptedModel, result: Any) -> None:
    config, gov = world.config, world.config.governance
    bound = {b.name: b for b in world.bindings}

    # terminal phase, documented reason
    assert result.phase in TERMINAL_PHASES
    assert result.reason in REASONS
    assert (result.phase == "Succeeded") == (result.reason == "Succeeded")
    assert (result.phase == "Cancelled") == (result.reason == "Cancelled")

    # model calls bounded by maxSteps, one per step; a call a cancel abandoned (it never
    # answered) is not a step
    assert model.calls <= config.max_steps
    if result.phase == "Cancelled":
        assert model.calls - result.step in (0, 1)
    else:
        assert model.calls == result.step
    if result.reason == "MaxStepsExceeded":
        assert model.calls == config.max_steps

    # no denied or rejected call executes; each allowed call exactly once
    executed_ids = [cid for _, cid in world.executed]
    assert all(n == 1 for n in Counter(executed_ids).values())
    allowed = {r.call_id for r in result.tool_calls if r.decision == "allowed"}
    refused = {r.call_id for r in result.tool_calls if r.decision != "allowed"}
    assert not refused & set(executed_ids)
    assert allowed <= set(executed_ids)
    unrecorded = set(executed_ids) - allowed  # started, then the run timed out
    assert len(unrecorded) <= 1 and (not unrecorded or result.reason == "Timeout")
    calls = {c.id: c for c in tool_calls_of(result.state)}
    for name, cid in world.executed:
        assert calls[cid].name == name
        binding = bound[name]
        assert binding.builtin or gov.decide(binding.object_name).allowed
    assert all(r.outcome == "skipped" for r in result.tool_calls if r.decision != "allowed")

    # a used tool runs once per run and is not offered again; built-ins excepted
    non_builtin = [name for name, _ in world.executed if name != BUILTIN]
    assert len(non_builtin) == len(set(non_builtin))
    used: set[str] = set()
    for step, request in enumerate(model.requests, start=1):
        assert request.tool_names <= set(bound)
        assert not request.tool_names & used
        used |= {r.tool for r in result.tool_calls if r.step == step and r.decision == "allowed"}
        used.discard(BUILTIN)

    # one execution per tool name per response; later calls of the name are duplicates
    by_call = {r.call_id: r for r in result.tool_calls}
    executed_set = set(executed_ids)
    for item in result.state.items:
        names_seen: set[str] = set()
        for c in getattr(item, "tool_calls", ()):
            record = by_call.get(c.id)
            if c.name in names_seen:
                assert c.id not in executed_set
                assert record is None or record.reason == "DuplicateInResponse"
            names_seen.add(c.name)

    # every tool call gets exactly one result
    assert_one_result_per_call(result.state)

    # denial handling
    if result.reason == "ToolDenied":
        assert config.on_tool_denied == "Fail"
        assert result.tool_calls[-1].decision == "denied"
    if config.on_tool_denied == "Fail" and result.reason not in ("ToolDenied", "Timeout"):
        assert all(r.decision != "denied" for r in result.tool_calls)

    # token budget
    if config.token_budget is None:
        assert result.reason != "TokenBudgetExceeded"
    else:
        assert (result.usage.total_tokens > config.token_budget) == (
            result.reason == "TokenBudgetExceeded"
        )

    # structured output
    if result.structured_output is not None:
        assert result.phase == "Succeeded" and config.output_schema is not None
        assert isinstance(result.structured_output["answer"], str)
    if result.phase == "Succeeded" and config.output_schema is not None:
        assert result.structured_output is not None
    if result.reason == "InvalidOutput":
        assert config.output_schema is not None

    # the state survives a checkpoint round trip
    again = RunState.from_dict(json.loads(json.dumps(result.state.to_dict())))
    assert again.to_dict() == result.state.to_dict()
    check_status_contract(result)


@SETTINGS
@given(world=worlds(), usage=st.builds(Usage, st.integers(0, 60), st.integers(0, 30)))
def test_random_scripted_runs_keep_every_invariant(world: World, usage: Usage) -> None:
    async def main() -> tuple[ScriptedModel, Any]:
        cancel = asyncio.Event()
        model = build_model(world, cancel, usage)
        result = await run_agent(world.config, model, world.bindings, cancel=cancel)
        return model, result

    model, result = asyncio.run(main())
    check_run(world, model, result)


# --------------------------------------------------------------------------------------
# The same through resolve() + the real mock provider, from random manifests

mock_call = st.fixed_dictionaries(
    {
        "tool": st.sampled_from((*TOOLS, GHOST, "memory_read")),
        "arguments": st.sampled_from([{"q": "x"}, {"q": 1}, {}]),
    }
)
mock_turn = st.one_of(
    st.fixed_dictionaries({"text": st.sampled_from(["done", '{"answer": "a"}'])}),
    st.fixed_dictionaries({"toolCalls": st.lists(mock_call, min_size=1, max_size=3)}),
)


@st.composite
def manifests(draw: st.DrawFn) -> tuple[list[dict[str, Any]], Any]:
    agent_tools = draw(st.lists(st.sampled_from(TOOLS), unique=True))
    roles = draw(st.lists(st.sampled_from(["reader", "writer", "nobody"]), unique=True, max_size=2))
    limits = {"maxSteps": draw(st.integers(1, 5))}
    if draw(st.booleans()):
        limits["maxTokens"] = draw(st.integers(50, 2000))
    objs: list[dict[str, Any]] = [
        agent(tools=agent_tools, roles=roles or None, limits=limits),
        mock_endpoint(turns=draw(st.lists(mock_turn, max_size=6)) or None),
        role("reader", "tool:alpha:invoke"),
        role("writer", "tool:*:invoke"),
    ]
    objs += [
        mock_tool(t, result=f"RESULT-{t}", inputSchema=SCHEMA, idempotent=draw(st.booleans()))
        for t in TOOLS
    ]
    if draw(st.booleans()):
        objs.append(
            permission(
                "beta-perm",
                "beta",
                "tool:beta:invoke",
                "x:y:z",
                mode=draw(st.sampled_from(["all", "any"])),
            )
        )
    if draw(st.booleans()):
        objs.append(
            policy(
                "guard",
                blockedTools=draw(st.lists(st.sampled_from(TOOLS), unique=True)) or None,
                onToolDenied=draw(st.sampled_from(["Fail", "ReturnError"])),
                maxSteps=draw(st.integers(1, 5)),
            )
        )
    fail_list = draw(st.sampled_from([(), (), (), ("ToolPermission",)]))
    the_task = task(outputSchema=OUTPUT_SCHEMA) if draw(st.booleans()) else task()
    return objs, (the_task, fail_list)


@SETTINGS
@given(case=manifests())
def test_random_manifest_runs_through_execute(case: tuple[list[dict[str, Any]], Any]) -> None:
    objs, (the_task, fail_list) = case
    factory = ModelFactory(lambda s: MockModelClient(s.endpoint))

    outcome = asyncio.run(
        execute(the_task, DictStore(*objs, fail_list=fail_list), model_factory=factory)
    )

    assert outcome.phase in TERMINAL_PHASES and outcome.reason in REASONS
    TaskStatus.model_validate(outcome.status().to_dict())
    assert outcome.snapshot is not None and outcome.result is not None
    assert factory.calls <= outcome.snapshot.max_steps
    assert factory.calls == outcome.result.step
    state = outcome.result.state
    assert_one_result_per_call(state)
    refused = {r.call_id for r in state.records if r.decision != "allowed"}
    gov = outcome.snapshot.governance
    for call in tool_calls_of(state):
        content = next(i.content for i in state.items if getattr(i, "call_id", None) == call.id)
        ran = content.startswith("RESULT-")
        if call.id in refused:
            assert not ran
        if ran:
            assert gov.decide(call.name).allowed
