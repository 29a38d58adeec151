"""A hostile model, property-tested (hypothesis): whatever the model answers, the run ends.

The model here is an in-process ModelClient (the engine's ModelClient protocol, not an SDK)
whose answers are drawn from a strategy of hostile shapes: huge whitespace, code fences, deep
nesting in text and in tool arguments, invalid JSON, lone surrogates, tool names of 0-500
characters, repeated and empty call ids, missing usage, calls to unknown tools, very many tool
calls, a model slower than the run's timeout. Tool-call arguments reach the loop through the
provider's own argument parser (`ordo.providers.openai_provider.parse_arguments`), as they do
over the wire.

Invariants, for every example:
- the run ends, within its timeout plus a few seconds of grace, and no exception escapes;
- the phase is terminal and the reason is one of `ordo.api.task.REASONS`;
- the status built from the result validates against the generated Task CRD
  (`crds/tasks.ordo.dev.yaml`, `status`) and encodes as UTF-8 JSON;
- the model is called at most `maxSteps` times;
- a tool governance denies never executes; a non-idempotent tool executes at most once per
  run (so at most once per call id), also across a crash and a resume from the checkpoint;
- call ids are unique across the run and every call has exactly one result.

Hostile schemas too (issue 23), drawn by `support.schemas`: branching applicators,
`unevaluated*`, `uniqueItems`, `multipleOf`, `enum`/`const`, huge numbers, recursion through
`$ref`. For every schema `check_schema` accepts and every bounded value, validation stays under
the watchdog bound and raises nothing but `UntrustedInputTooLarge` (the work budget, only when
the budget is the hard cap: below it the static bound must hold), an answer ends the run with
a documented reason, and tool arguments are checked or the call is rejected.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import re
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context

from ordo.api import jsonschema_fuel, jsonschemas
from ordo.api.task import REASONS
from ordo.engine import output
from ordo.engine.events import Checkpoint, Event, ToolDecided
from ordo.engine.governance import Governance
from ordo.engine.jsontext import MAX_JSON_CHARS, MAX_JSON_DEPTH, json_depth
from ordo.engine.loop import run_agent
from ordo.engine.model import ModelRequest, ModelResponse, ModelUnavailable
from ordo.engine.sanitize import (
    MAX_TEXT_CHARS,
    MAX_TOOL_CALLS_PER_RESPONSE,
    normalise_response,
)
from ordo.engine.state import RunConfig, RunResult, RunState
from ordo.engine.stepcalls import argument_problem
from ordo.engine.tooling import ToolBinding, ToolOutput
from ordo.engine.transcript import AssistantMessage, ToolCall, ToolResult, Usage
from ordo.errors import InvalidOutput, UntrustedInputTooLarge
from ordo.providers.openai_provider import parse_arguments
from support.schemas import instances, schemas

try:
    from support.stall import StallWatchdog
except ImportError:  # pragma: no cover - the watchdog is optional
    StallWatchdog = None


def task_status(result: RunResult) -> dict[str, Any]:
    """The terminal status the operator writes for `result`: `TaskOutcome.status()` (moving
    from ordo.execution to ordo.runtime, whichever imports; a dict, or a TaskStatus model
    patched with `runtime.status.to_patch`)."""
    try:
        from ordo.runtime.execute import TaskOutcome
    except ImportError:
        from ordo.runtime import TaskOutcome  # type: ignore[no-redef]
    status: Any = TaskOutcome(result.phase, result.reason, result.message, result).status()
    if isinstance(status, dict):
        return status
    from ordo.runtime.status import to_patch

    patch: dict[str, Any] = to_patch(status)
    return patch


ROOT = Path(__file__).resolve().parents[2]
CRD = yaml.safe_load((ROOT / "crds" / "tasks.ordo.dev.yaml").read_text())
STATUS_SCHEMA = CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
STATUS_VALIDATOR = jsonschema.Draft7Validator(STATUS_SCHEMA)

ALPHA, BETA, GAMMA, DELTA = "alpha", "beta", "gamma", "delta"
"""alpha: non-idempotent; beta: idempotent; gamma: blocked by a policy; delta: not offered."""
OFFERED = (ALPHA, BETA, GAMMA)
SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}}
TIMEOUT = 1.0
GRACE = 20.0  # generous: the bound must hold on a loaded 2-core CI machine too
NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

FAST = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
HEAVY = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# --------------------------------------------------------------------------------------
# Strategies: hostile answers, described as plain data, turned into ModelResponses below


SURROGATES = st.sampled_from(["\ud800", "\udfff", "\udc80", "\udbff"])
any_char = st.one_of(st.characters(), SURROGATES)
with_surrogate = st.builds(
    lambda a, s, b: a + s + b, st.text(max_size=20), SURROGATES, st.text(max_size=20)
)
"""st.text() almost never draws a surrogate: put one in on purpose."""
huge = st.sampled_from([MAX_TEXT_CHARS + 1, 2_000_000])


def deep(depth: int, open_: str = "[", close: str = "]") -> str:
    return open_ * depth + close * depth


BIG_TEXTS = st.one_of(
    st.one_of(st.integers(1, 2_000_000), huge).map(lambda n: " " * n),  # huge whitespace
    st.integers(min_value=1, max_value=300).map(lambda n: "```json\n" * n + "{}" + "\n```" * n),
    st.integers(min_value=10, max_value=200_000).map(deep),  # deep nesting in text
    st.integers(min_value=1, max_value=100).map(lambda n: "\n\t " * n + "{" * n),
)
texts = st.one_of(
    st.just(""),
    st.text(any_char, max_size=200),
    with_surrogate,
    BIG_TEXTS,
    st.sampled_from(['{"answer": 1}', '```json\n{"a": 1}\n```', "null", "\x00\x01"]),
)

names = st.one_of(
    st.sampled_from([ALPHA, BETA, GAMMA, DELTA, "memory_note", ALPHA.upper()]),
    st.text(any_char, max_size=500),  # names of 0-500 characters, any code point
    with_surrogate,
    st.integers(min_value=0, max_value=500).map(lambda n: "a" * n),
    st.integers(min_value=65, max_value=300).map(lambda n: ALPHA + "x" * n),  # near a real name
    st.sampled_from([ALPHA + " ", ALPHA + "\ud800", "alpha\u2026", "../alpha", ""]),
)
call_ids = st.one_of(
    st.sampled_from(["", "call_0", "call_0", "call_1", "dup", "toolu_01"]),  # repeated, empty
    st.text(any_char, max_size=300),
    with_surrogate,
    st.integers(min_value=65, max_value=400).map(lambda n: "c" * n),
    st.uuids().map(lambda u: f"call_{u.hex}"),
)
raw_arguments = st.one_of(
    st.just('{"q": "ok"}'),
    st.just("{}"),
    st.just(""),
    st.text(any_char, max_size=100),  # invalid JSON, mostly
    with_surrogate,
    st.sampled_from(['{"q": ', "[1, 2]", '"just a string"', "null", '{"q": "\\ud800"}']),
    st.integers(min_value=100, max_value=100_000).map(lambda n: '{"q": ' + deep(n) + "}"),
    st.integers(min_value=100, max_value=100_000).map(lambda n: '{"a":' * n + "1" + "}" * n),
    st.one_of(st.integers(10, 2_000_000), huge).map(lambda n: '{"q": "' + "x" * n + '"}'),
)


@dataclass(frozen=True)
class CallSpec:
    name: str
    id: str
    raw: str


@dataclass(frozen=True)
class TurnSpec:
    text: str = ""
    calls: tuple[CallSpec, ...] = ()
    usage: tuple[int, int] | None = None
    """None: the server reported no usage."""
    slow: bool = False
    """Answer only after the run's timeout."""
    unavailable: bool = False


calls_spec = st.builds(CallSpec, names, call_ids, raw_arguments)


@st.composite
def many_calls(draw: st.DrawFn) -> tuple[CallSpec, ...]:
    """Very many tool calls in one answer, with repeated names and ids."""
    count = draw(st.integers(min_value=60, max_value=600))
    name = draw(st.sampled_from([ALPHA, BETA, GAMMA, DELTA, "x" * 200]))
    same_id = draw(st.booleans())
    return tuple(CallSpec(name, "call_0" if same_id else f"c{n}", "{}") for n in range(count))


usages = st.one_of(
    st.none(),
    st.none(),
    st.tuples(st.integers(0, 50), st.integers(0, 50)),
    st.tuples(st.integers(0, 10**6), st.integers(0, 10**6)),
)
turns = st.one_of(
    st.builds(TurnSpec, texts, st.just(()), usages),
    st.builds(
        TurnSpec,
        texts,
        st.lists(calls_spec, min_size=1, max_size=6).map(tuple),
        usages,
    ),
    st.builds(
        TurnSpec,
        texts,
        st.lists(calls_spec, min_size=1, max_size=6).map(tuple),
        usages,
    ),
    st.builds(TurnSpec, st.just(""), many_calls(), usages),
    st.builds(TurnSpec, st.just(""), st.just(()), st.none(), unavailable=st.just(True)),
)
rare_slow = st.builds(TurnSpec, st.just("late"), st.just(()), st.none(), slow=st.just(True))


# --------------------------------------------------------------------------------------
# The hostile model and the counting tools


def features(spec: TurnSpec) -> list[str]:
    def odd(text: str) -> bool:
        return any("\ud800" <= ch <= "\udfff" for ch in text)

    found = []
    if len(spec.text) > MAX_TEXT_CHARS:
        found.append("text over the cap")
    if odd(spec.text) or any(odd(c.name) or odd(c.id) or odd(c.raw) for c in spec.calls):
        found.append("lone surrogate")
    if spec.usage is None:
        found.append("no usage")
    if len(spec.calls) > MAX_TOOL_CALLS_PER_RESPONSE:
        found.append("too many tool calls")
    if any(len(c.name) > 128 for c in spec.calls):
        found.append("name longer than the CRD allows")
    if any(json_depth(c.raw) > MAX_JSON_DEPTH for c in spec.calls):
        found.append("arguments nested too deep")
    if any(len(c.raw) > MAX_JSON_CHARS for c in spec.calls):
        found.append("arguments too long")
    ids = [c.id for c in spec.calls]
    if "" in ids or len(set(ids)) < len(ids):
        found.append("empty or repeated call id")
    if any(c.name not in OFFERED for c in spec.calls):
        found.append("unknown tool")
    return found


class HostileModel:
    """A ModelClient that answers the N-th call of a run (counted from the history, so a
    resumed run continues the script) with `script[N]`, and past the script with `after`."""

    provider = "hostile"
    model = "hostile-1"

    def __init__(self, script: list[TurnSpec], after: TurnSpec) -> None:
        self.script = script
        self.after = after
        self.calls = 0

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        index = sum(1 for i in request.items if isinstance(i, AssistantMessage))
        spec = self.script[index] if index < len(self.script) else self.after
        if spec.slow:
            await asyncio.sleep(TIMEOUT * 3)
        if spec.unavailable:
            raise ModelUnavailable("hostile model call: HTTP 503; gave up after 1 attempt(s)")
        for feature in features(spec) if currently_in_test_context() else ():
            event(feature)  # `--hypothesis-show-statistics` shows what the examples covered
        calls = tuple(ToolCall(c.id, c.name, parse_arguments(c.raw), c.raw) for c in spec.calls)
        usage = Usage(*spec.usage) if spec.usage is not None else Usage()
        return ModelResponse(spec.text, calls, usage, "tool_calls" if calls else "stop")


@dataclass
class Ledger:
    """Which call id each tool execution belonged to (the last allowed decision before it)."""

    current: str | None = None
    executed: list[tuple[str, str | None]] = field(default_factory=list)

    async def listen(self, event: Event) -> None:
        if isinstance(event, ToolDecided) and event.record.decision == "allowed":
            self.current = event.record.call_id


class CountingTool:
    def __init__(self, name: str, ledger: Ledger) -> None:
        self.name = name
        self.ledger = ledger

    async def __call__(self, arguments: dict[str, Any]) -> ToolOutput:
        self.ledger.executed.append((self.name, self.ledger.current))
        return ToolOutput(f"result of {self.name}")


def bindings(ledger: Ledger) -> list[ToolBinding]:
    return [
        ToolBinding(ALPHA, ALPHA, "alpha", SCHEMA, CountingTool(ALPHA, ledger)),
        ToolBinding(BETA, BETA, "beta", SCHEMA, CountingTool(BETA, ledger), idempotent=True),
        ToolBinding(GAMMA, GAMMA, "gamma", SCHEMA, CountingTool(GAMMA, ledger)),
        ToolBinding(
            "memory_note", "memory_note", "n", SCHEMA, CountingTool("memory_note", ledger), True
        ),
    ]


def config(max_steps: int, on_denied: str, budget: int | None) -> RunConfig:
    governance = Governance(candidate_tools=frozenset(OFFERED), blocked_by={GAMMA: "strict"})
    return RunConfig(
        system_prompt="You are under test.",
        user_message="go",
        governance=governance,
        max_steps=max_steps,
        timeout=TIMEOUT,
        token_budget=budget,
        on_tool_denied=on_denied,  # type: ignore[arg-type]
    )


@dataclass(frozen=True)
class World:
    script: list[TurnSpec]
    after: TurnSpec
    config: RunConfig


@st.composite
def worlds(draw: st.DrawFn, *, slow: bool = False) -> World:
    script = draw(st.lists(turns, min_size=1, max_size=5))
    if slow and draw(st.booleans()):
        script.insert(draw(st.integers(0, len(script))), draw(rare_slow))
    after = draw(st.one_of(st.builds(TurnSpec, texts, st.just(()), usages), turns))
    return World(
        script,
        after,
        config(
            draw(st.integers(min_value=1, max_value=4)),
            draw(st.sampled_from(["Fail", "ReturnError"])),
            draw(st.one_of(st.none(), st.none(), st.integers(min_value=1, max_value=10**5))),
        ),
    )


# --------------------------------------------------------------------------------------
# Running and checking


@contextlib.asynccontextmanager
async def watchdog() -> AsyncIterator[Any]:
    if StallWatchdog is None:
        yield None
        return
    async with StallWatchdog() as dog:
        yield dog


async def run(
    world: World,
    ledger: Ledger,
    *,
    state: RunState | None = None,
    crash_at: int | None = None,
) -> tuple[RunResult | None, HostileModel, dict[str, Any] | None]:
    """One run; with `crash_at`, the process 'dies' at that checkpoint (its state saved as the
    operator would save it, through JSON)."""
    model = HostileModel(world.script, world.after)
    saved: dict[str, Any] | None = None
    checkpoints = 0

    class Crash(Exception):
        pass

    async def crash(event: Event) -> None:
        nonlocal saved, checkpoints
        if isinstance(event, Checkpoint) and crash_at is not None:
            checkpoints += 1
            if checkpoints == crash_at:
                saved = json.loads(json.dumps(event.state.to_dict()))
                raise Crash

    started = time.monotonic()
    try:
        result = await asyncio.wait_for(
            run_agent(
                world.config,
                model,
                bindings(ledger),
                listeners=[ledger.listen, crash],
                state=state,
            ),
            TIMEOUT + GRACE,
        )
    except Crash:
        return None, model, saved
    assert time.monotonic() - started < TIMEOUT + GRACE
    return result, model, None


def check_status(result: RunResult) -> None:
    status = task_status(result)
    errors = sorted(STATUS_VALIDATOR.iter_errors(status), key=lambda e: list(e.absolute_path))
    assert not errors, [f"{list(e.absolute_path)}: {e.message[:200]}" for e in errors]
    json.dumps(status, ensure_ascii=False).encode("utf-8")  # no lone surrogates


def check_result(world: World, model: HostileModel, result: RunResult) -> None:
    assert result.phase in ("Succeeded", "Failed", "Cancelled")
    assert result.reason in REASONS
    assert model.calls <= world.config.max_steps
    assert result.step <= world.config.max_steps
    check_status(result)
    calls = [c for i in result.state.items if isinstance(i, AssistantMessage) for c in i.tool_calls]
    ids = [c.id for c in calls]
    assert len(ids) == len(set(ids)), "call ids repeat across the run"
    answered = Counter(i.call_id for i in result.state.items if isinstance(i, ToolResult))
    assert all(n == 1 for n in answered.values()) and set(answered) <= set(ids)
    if result.reason != "Interrupted":  # a refused resume stops at the call it will not repeat
        assert set(answered) == set(ids), "a tool call has no result"


def check_executions(ledger: Ledger) -> None:
    tools = [name for name, _ in ledger.executed]
    assert GAMMA not in tools, "a denied tool executed"
    assert tools.count(ALPHA) <= 1, "a non-idempotent tool executed twice"
    per_call = Counter(ledger.executed)
    assert all(n == 1 for (name, _), n in per_call.items() if name != BETA)


@FAST
@given(worlds())
async def test_any_hostile_answer_ends_the_run_within_the_contract(world: World) -> None:
    ledger = Ledger()
    async with watchdog() as dog:
        result, model, _ = await run(world, ledger)
    assert result is not None
    check_result(world, model, result)
    check_executions(ledger)
    if dog is not None:
        assert dog.longest < 1.0


@pytest.mark.slow
@HEAVY
@given(worlds(slow=True), st.integers(min_value=1, max_value=4))
async def test_a_crash_and_resume_never_repeats_a_non_idempotent_call(
    world: World, crash_at: int
) -> None:
    """The run 'dies' at a checkpoint; a second run resumes from the saved state. Across
    both, alpha (non-idempotent) runs at most once, gamma (denied) never, and the resumed
    run ends within the contract."""
    ledger = Ledger()
    result, model, saved = await run(world, ledger, crash_at=crash_at)
    if result is None:
        assert saved is not None
        state = RunState.from_dict(saved)
        result, model, _ = await run(world, ledger, state=state)
        assert result is not None
    check_result(world, model, result)
    check_executions(ledger)


@given(names)
def test_a_model_visible_name_fits_the_crd_and_a_provider(name: str) -> None:
    from ordo.engine.sanitize import safe_tool_name

    out = safe_tool_name(name)
    assert len(out) <= 128 and NAME_RE.match(out)
    if NAME_RE.match(name):
        assert out == name
    else:
        assert out not in OFFERED and out != name


def test_the_190_character_name_of_the_issue_is_denied_and_the_status_fits() -> None:
    name = "x" * 190
    world = World(
        [TurnSpec("", (CallSpec(name, "call_0", "{}"),), None)],
        TurnSpec("done"),
        config(3, "Fail", None),
    )
    ledger = Ledger()
    result, model, _ = asyncio.run(run(world, ledger))
    assert result is not None
    assert (result.phase, result.reason) == ("Failed", "ToolDenied")
    assert result.tool_calls[0].reason == "NotOffered"
    check_result(world, model, result)


def test_fallback_ids_repeated_across_steps_become_unique() -> None:
    world = World(
        [
            TurnSpec("", (CallSpec(ALPHA, "call_0", "{}"),), (1, 1)),
            TurnSpec("", (CallSpec(BETA, "call_0", "{}"),), (1, 1)),
        ],
        TurnSpec("done", (), (1, 1)),
        config(5, "Fail", None),
    )
    ledger = Ledger()
    result, model, _ = asyncio.run(run(world, ledger))
    assert result is not None and result.reason == "Succeeded"
    check_result(world, model, result)
    assert [name for name, _ in ledger.executed] == [ALPHA, BETA]


def test_the_caps_drop_calls_and_cut_text_with_a_note_the_run_sees() -> None:
    many = tuple(ToolCall(f"c{n}", ALPHA, {}, "{}") for n in range(100))
    out = normalise_response(
        ModelResponse("x" * (MAX_TEXT_CHARS + 10), many, Usage(-5, True)),
        step=1,
        seen_ids=set(),
    )
    assert len(out.tool_calls) == MAX_TOOL_CALLS_PER_RESPONSE
    assert "[ordo: 36 more tool call(s) dropped: at most 64 per response]" in out.text
    assert f"[ordo: the answer was cut to {MAX_TEXT_CHARS} characters]" in out.text
    assert len(out.text) < MAX_TEXT_CHARS + 200
    assert (out.usage.input_tokens, out.usage.output_tokens) == (0, 0)


def test_ids_stay_unique_across_a_checkpoint_and_old_checkpoints_use_the_transcript() -> None:
    seen: set[str] = set()
    first = normalise_response(
        ModelResponse("", (ToolCall("ordo_2_0", ALPHA, {}, "{}"),)), step=1, seen_ids=seen
    )
    assert first.tool_calls[0].id == "ordo_1_0"  # ordo's own namespace is never taken as is
    state = RunState(items=[AssistantMessage("", first.tool_calls)], seen_ids=seen)
    restored = RunState.from_dict(json.loads(json.dumps(state.to_dict())))
    assert restored.seen_ids == {"ordo_1_0"}
    legacy = state.to_dict()
    del legacy["seenIds"]
    assert RunState.from_dict(legacy).seen_ids == {"ordo_1_0"}
    again = normalise_response(
        ModelResponse("", (ToolCall("ordo_1_0", BETA, {}, "{}"), ToolCall("", BETA, {}, "{}"))),
        step=1,  # a step replayed after a resume: ids still unique
        seen_ids=restored.seen_ids,
    )
    assert [c.id for c in again.tool_calls] == ["ordo_1_0_1", "ordo_1_1"]


# --------------------------------------------------------------------------------------
# Hostile schemas: what a Task submitter, a Tool author or an MCP server writes


SCHEMA_FAST = settings(FAST, max_examples=200)
SCHEMA_SLOW = settings(FAST, max_examples=1_000)
STALL = 1.0  # seconds: generous; a full work budget is < 100 ms (docs/security.md)


async def check_schema_and_value(schema: dict[str, Any], value: Any) -> None:
    """check_schema, then (if accepted) every way ordo validates a value against the schema,
    under the watchdog."""
    async with watchdog() as dog:
        problems = jsonschemas.check_schema(schema)
        event("schema refused" if problems else "schema accepted")
        if any("units of work" in p for p in problems):
            event("schema over the cost bound")
        if not problems:
            validator = jsonschemas.validator_for(schema)
            budget = validator.budget(value)
            try:
                validator.errors(value)
            except UntrustedInputTooLarge:
                event("out of fuel")
                # Below the hard cap the budget is the static bound times the value's size:
                # running out there would mean the bound is wrong.
                assert budget == jsonschema_fuel.MAX_FUEL, (budget, validator.cost)
            if isinstance(value, dict):
                with contextlib.suppress(InvalidOutput):
                    output.parse(json.dumps(value), schema)
                problem = argument_problem(schema, value)
                assert problem is None or isinstance(problem, str)
    if dog is not None:
        assert dog.longest < STALL, dog.report()


@SCHEMA_FAST
@given(schemas(), instances())
async def test_any_accepted_schema_validates_any_value_within_the_bound(
    schema: dict[str, Any], value: Any
) -> None:
    await check_schema_and_value(schema, value)


@pytest.mark.slow
@SCHEMA_SLOW
@given(schemas(depth=4), instances())
async def test_any_accepted_schema_validates_any_value_within_the_bound_1000(
    schema: dict[str, Any], value: Any
) -> None:
    await check_schema_and_value(schema, value)


@SCHEMA_FAST
@given(schemas(), instances(), instances())
async def test_a_hostile_schema_and_answer_end_the_run_within_the_contract(
    schema: dict[str, Any], answer: Any, arguments: Any
) -> None:
    """The Task's output schema and a Tool's input schema are drawn; the model calls the tool
    with drawn arguments and answers drawn JSON."""
    ledger = Ledger()
    raw = json.dumps(arguments if isinstance(arguments, dict) else {"q": arguments})
    script = [
        TurnSpec("", (CallSpec(ALPHA, "call_0", raw),), (1, 1)),
        TurnSpec(json.dumps(answer), (), (1, 1)),
    ]
    world = World(
        script,
        TurnSpec("done"),
        dataclasses.replace(config(3, "ReturnError", None), output_schema=schema),
    )
    tools = [
        ToolBinding(ALPHA, ALPHA, "alpha", schema, CountingTool(ALPHA, ledger)),
        *bindings(ledger)[1:],
    ]
    model = HostileModel(world.script, world.after)
    async with watchdog() as dog:
        result = await asyncio.wait_for(
            run_agent(world.config, model, tools, listeners=[ledger.listen]), TIMEOUT + GRACE
        )
    if dog is not None:
        assert dog.longest < STALL, dog.report()
    check_result(world, model, result)
    event(f"{result.phase}/{result.reason}")
    if result.reason == "InternalError":
        raise AssertionError(result.message)
