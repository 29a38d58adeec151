"""Large answers and arguments are validated off the event loop (issue 23: "where a cap that
users need cannot meet [100 ms], the work runs off the loop with a deadline that fails
closed"), and RE2's slow path (a large counted repetition over non-ASCII text defeats its DFA)
never runs on the loop.

Each test runs the engine's own path (`run_agent` with a scripted model) under the
`StallWatchdog`; the bound is generous (the fixed code stalls for milliseconds).
"""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from ordo.api import jsonschema_fuel, jsonschemas
from ordo.api.jsonschema_re2 import compile_pattern
from ordo.engine import validation
from ordo.engine.loop import run_agent
from ordo.engine.offloop import OffLoop
from ordo.engine.transcript import ToolCall
from ordo.errors import UntrustedInputTooLarge
from support import engine_fakes as fakes
from support.stall import StallWatchdog

STALL = 0.5  # seconds: generous; RE2's slow path held the loop 1.4-14 s, the fix ~20 ms

ROWS = {
    "type": "object",
    "properties": {
        "rows": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"id": {"type": "integer"}, "name": {"type": "string"}},
                "required": ["id", "name"],
            },
        }
    },
    "required": ["rows"],
}

SLOW_PATTERN = {
    "type": "object",
    "properties": {"text": {"type": "string", "pattern": "(?s).{990}z"}},
}


def big_rows(n: int) -> dict[str, Any]:
    return {"rows": [{"id": i, "name": f"row {i}"} for i in range(n)]}


SHAPES = {
    "type": "object",
    "properties": {
        "items": {
            "type": "array",
            "items": {
                "oneOf": [
                    {
                        "type": "object",
                        "properties": {
                            "kind": {"const": kind},
                            "id": {"type": "integer"},
                            "tags": {"type": "array", "items": {"type": "string"}},
                        },
                        "required": ["kind", "id"],
                        "additionalProperties": False,
                    }
                    for kind in "abcd"
                ]
            },
        }
    },
    "required": ["items"],
}


async def answered(schema: dict[str, Any], value: dict[str, Any]) -> Any:
    """The run's result for a model answering `value`, the loop never held past STALL."""
    model = fakes.ScriptedModel([fakes.answer(json.dumps(value))])
    config = fakes.run_config(fakes.open_governance(), output_schema=schema)
    async with StallWatchdog() as dog:
        result = await run_agent(config, model, [])
    assert dog.longest < STALL, dog.report()
    return result


def tagged(n: int) -> dict[str, Any]:
    return {"items": [{"kind": "abcd"[i % 4], "id": i, "tags": ["x", "y"]} for i in range(n)]}


@pytest.mark.parametrize(
    ("schema", "value"),
    [(SHAPES, tagged(2_000)), (ROWS, big_rows(3_000))],
    ids=["tagged-union-93KB", "rows-100KB"],
)
async def test_a_large_answer_that_users_need_is_validated_off_the_loop(
    schema: dict[str, Any], value: dict[str, Any]
) -> None:
    """Within `status.structuredOutput`'s cap, but more than the loop's share of work may
    need (`MAX_FUEL`): validated in a worker thread, the run succeeds. The tagged union (2,000
    members of a four-shape `oneOf`) failed `InvalidOutput` ("too costly to validate") with
    the loop's budget alone."""
    assert not jsonschemas.validator_for(schema).on_loop(value)
    result = await answered(schema, value)
    assert (result.phase, result.reason) == ("Succeeded", "Succeeded"), result.message
    assert result.structured_output == value


async def test_a_large_answer_that_does_not_match_is_refused_off_the_loop() -> None:
    value = big_rows(3_000)
    value["rows"][-1] = {"id": "not a number", "name": "x"}
    result = await answered(ROWS, value)
    assert (result.phase, result.reason) == ("Failed", "InvalidOutput")
    assert "not a number" not in (result.message or "")


async def test_rows_beyond_the_off_loop_budget_still_fail_closed() -> None:
    values = {"v": list(range(jsonschema_fuel.MAX_OFF_LOOP_FUEL))}
    schema = {
        "type": "object",
        "properties": {"v": {"type": "array", "items": {"type": "integer"}}},
    }
    async with StallWatchdog() as dog:
        with pytest.raises(UntrustedInputTooLarge, match="work budget"):
            await validation.schema_errors(schema, values)
    assert dog.longest < STALL, dog.report()


def slow_mode(pattern: str) -> None:
    """Put RE2's cached program of `pattern` in the mode it stays in once its DFA ran out of
    memory (the first search of a fresh program is fast; every later one is slow)."""
    program, _ = compile_pattern(pattern)
    program.search("é" * 20_000)


@pytest.mark.parametrize("chars", [100_000, 990_000])
async def test_a_pattern_on_its_slow_path_never_runs_on_the_loop(chars: int) -> None:
    """`(?s).{990}z` over non-ASCII text: once RE2 gave up its DFA the program costs ~2 ns per
    instruction and character (1.4 s for 100,000 characters, 14 s for 990,000 on the loop
    before). The fuel counts one unit per 1,024 characters, so only the RE2 work estimate
    keeps it off the loop: 100,000 characters are matched in a worker thread, 990,000 are
    refused before any pattern runs. Either way the tool never runs."""
    slow_mode(SLOW_PATTERN["properties"]["text"]["pattern"])
    validator = jsonschemas.validator_for(SLOW_PATTERN)
    assert validator.pattern_size > 1_000
    arguments = {"text": "é" * chars}
    assert not validator.on_loop(arguments)
    box = fakes.Toolbox().add("lookup", schema=SLOW_PATTERN)
    calls = [ToolCall("c1", "lookup", arguments, json.dumps(arguments, ensure_ascii=False))]
    model = fakes.ScriptedModel([fakes.tools_turn(*calls), fakes.answer("done")])
    config = fakes.run_config(fakes.open_governance("lookup"), on_tool_denied="ReturnError")
    async with StallWatchdog() as dog:
        result = await run_agent(config, model, box.bindings)
    assert dog.longest < STALL, dog.report()
    assert box.executors["lookup"].calls == 0  # the pattern does not match: never run
    assert result.tool_calls[0].reason == "InvalidArguments"


def test_pattern_work_past_the_off_loop_cap_is_refused_before_matching() -> None:
    validator = jsonschemas.validator_for(SLOW_PATTERN)
    with pytest.raises(UntrustedInputTooLarge, match="RE2 steps"):
        validator.errors({"text": "é" * 990_000}, cap=jsonschema_fuel.MAX_OFF_LOOP_FUEL)
    with pytest.raises(UntrustedInputTooLarge, match="RE2 steps"):  # on the loop: less
        validator.errors({"text": "é" * 20_000})
    assert validator.errors({"text": "é" * 20_000}, cap=jsonschema_fuel.MAX_OFF_LOOP_FUEL)


def test_small_values_stay_on_the_loop() -> None:
    validator = jsonschemas.validator_for(ROWS)
    assert validator.on_loop(big_rows(10))
    assert jsonschemas.validator_for(SLOW_PATTERN).on_loop({"text": "é" * 1_000})


async def test_off_loop_work_past_its_deadline_fails_closed_and_is_told_to_stop() -> None:
    runner = OffLoop("test-offloop", threads=1, seconds=0.2)
    stopped = threading.Event()

    def work(stop: threading.Event) -> str:
        stop.wait(5)
        stopped.set()
        return "late"

    async with StallWatchdog() as dog:
        with pytest.raises(TimeoutError):
            await runner.run(work)
    assert dog.longest < STALL, dog.report()
    assert stopped.wait(2)  # the thread was told to give up


async def test_off_loop_errors_reach_the_caller() -> None:
    runner = OffLoop("test-offloop", threads=1, seconds=2)

    def work(stop: threading.Event) -> str:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        await runner.run(work)
    assert await runner.run(lambda stop: "ok") == "ok"  # the slot was given back
