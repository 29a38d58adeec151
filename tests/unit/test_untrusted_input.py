"""Untrusted text (model answers, tool-call arguments) and user-written JSON Schemas are
processed in linear time, within size and nesting caps, and never block the event loop.

Each reproduction from the issue is a regression test that checks the result AND that the
longest event-loop stall measured by `StallWatchdog` stays under 1 s (on the former code the
fence took 31 s, the `^(a+)+$` pattern minutes, the deep answer raised RecursionError).
"""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ordo.api import jsonschemas
from ordo.api.jsonschemas import check_schema, validator_for
from ordo.cli.main import main as cli_main
from ordo.engine import output
from ordo.engine.jsontext import MAX_JSON_DEPTH, bounded_json_loads, json_depth, value_depth
from ordo.engine.loop import run_agent
from ordo.engine.transcript import ToolCall
from ordo.errors import InvalidOutput, InvalidSchema, UntrustedInputTooLarge
from support.engine_fakes import (
    ScriptedModel,
    Toolbox,
    answer,
    open_governance,
    run_config,
    tools_turn,
)
from support.stall import StallWatchdog

STALL = 1.0  # seconds: any longer gap between 10 ms heartbeats fails the test
EVIL = "^(a+)+$"  # exponential for a backtracking engine on "aaaa…a!"
EVIL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"a": {"type": "string", "pattern": EVIL}},
    "required": ["a"],
}


def deep_text(depth: int) -> str:
    return '{"a":' + "[" * depth + "]" * depth + "}"


def deep_value(depth: int) -> dict[str, Any]:
    root: dict[str, Any] = {}
    node = root
    for _ in range(depth):
        child: dict[str, Any] = {}
        node["a"] = child
        node = child
    return root


async def run_answer(text: str, schema: dict[str, Any]) -> Any:
    model = ScriptedModel([answer(text)])
    return await run_agent(run_config(open_governance(), output_schema=schema), model, [])


async def run_tool_call(schema: dict[str, Any], arguments: dict[str, Any]) -> tuple[Any, Toolbox]:
    box = Toolbox().add("lookup", schema=schema)
    first = tools_turn(ToolCall("c1", "lookup", arguments, "{...}"))
    model = ScriptedModel([first, answer("done")])
    config = run_config(open_governance("lookup"), on_tool_denied="ReturnError")
    result = await run_agent(config, model, box.bindings)
    return result, box


# --- code fences ------------------------------------------------------------------------------


@pytest.mark.parametrize("spaces", [4_000, 100_000])
async def test_fence_followed_by_spaces_is_linear(spaces: int) -> None:
    text = "```" + " " * spaces
    async with StallWatchdog() as watchdog:
        assert output.strip_fence(text) == "```"
        with pytest.raises(InvalidOutput, match="not valid JSON"):
            output.parse(text, {"type": "object"})
        result = await run_answer(text, {"type": "object"})
    assert (result.phase, result.reason) == ("Failed", "InvalidOutput")
    assert watchdog.longest < STALL, watchdog.report()


@pytest.mark.parametrize("spaces", [4_000, 100_000])
async def test_fenced_answer_padded_with_spaces_still_parses(spaces: int) -> None:
    text = "```json" + " " * spaces + '{"a": 1}' + " " * spaces + "```"
    async with StallWatchdog() as watchdog:
        assert output.parse(text, {"type": "object"}) == {"a": 1}
    assert watchdog.longest < STALL, watchdog.report()


# --- patterns evaluated by RE2 ----------------------------------------------------------------


@pytest.mark.parametrize("length", [27, 30, 10_000])
async def test_evil_pattern_in_output_schema_is_linear(length: int) -> None:
    text = json.dumps({"a": "a" * length + "!"})
    async with StallWatchdog() as watchdog:
        result = await run_answer(text, EVIL_SCHEMA)
        assert output.parse(json.dumps({"a": "a" * length}), EVIL_SCHEMA) == {"a": "a" * length}
    assert (result.phase, result.reason) == ("Failed", "InvalidOutput")
    assert "at $.a: failed pattern" in (result.message or "")
    assert watchdog.longest < STALL, watchdog.report()


@pytest.mark.parametrize("length", [27, 10_000])
async def test_evil_pattern_in_tool_schema_is_linear(length: int) -> None:
    async with StallWatchdog() as watchdog:
        result, box = await run_tool_call(EVIL_SCHEMA, {"a": "a" * length + "!"})
    assert box.calls("lookup") == 0
    assert [r.reason for r in result.tool_calls] == ["InvalidArguments"]
    assert watchdog.longest < STALL, watchdog.report()


async def test_evil_pattern_properties_and_additional_properties_are_linear() -> None:
    schema = {
        "type": "object",
        "patternProperties": {EVIL: {"type": "integer"}},
        "additionalProperties": False,
    }
    key = "a" * 40 + "!"
    async with StallWatchdog() as watchdog:
        with pytest.raises(InvalidOutput, match="additionalProperties false"):
            output.parse(json.dumps({key: 1}), schema)
        assert output.parse(json.dumps({"aaa": 1}), schema) == {"aaa": 1}
        with pytest.raises(InvalidOutput, match=r"at \$\.\*: failed type"):
            output.parse(json.dumps({"a" * 40: "x"}), schema)
    assert watchdog.longest < STALL, watchdog.report()


def test_a_pattern_re2_cannot_compile_is_refused_with_a_clear_message() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string", "pattern": r"(a)\1"}}}
    problems = check_schema(schema)
    assert len(problems) == 1
    assert problems[0].startswith("$.properties.a.pattern: RE2 cannot compile the pattern")
    assert "backreferences" in problems[0]
    with pytest.raises(InvalidSchema, match="RE2") as info:
        validator_for(schema)
    assert info.value.reason == "InvalidSpec"
    lookahead = {"type": "object", "patternProperties": {"(?=x)x": {}}}
    assert check_schema(lookahead)[0].startswith('$.patternProperties["(?=x)x"]: RE2 cannot')


def test_unevaluated_properties_with_pattern_properties_is_refused() -> None:
    # jsonschema evaluates that combination with Python's re: refused rather than run.
    schema = {"patternProperties": {EVIL: {}}, "unevaluatedProperties": False}
    assert "unevaluatedProperties" in check_schema(schema)[0]


# --- nesting ---------------------------------------------------------------------------------


async def test_answer_nested_100000_deep_is_refused_without_recursion() -> None:
    text = deep_text(100_000)
    async with StallWatchdog() as watchdog:
        with pytest.raises(UntrustedInputTooLarge, match=f"deeper than {MAX_JSON_DEPTH}"):
            bounded_json_loads(text)
        result = await run_answer(text, {"type": "object"})
    assert (result.phase, result.reason) == ("Failed", "InvalidOutput")
    assert f"nests deeper than {MAX_JSON_DEPTH} levels" in (result.message or "")
    assert watchdog.longest < STALL, watchdog.report()


async def test_tool_arguments_nested_100000_deep_are_refused() -> None:
    async with StallWatchdog() as watchdog:
        # As text (what a provider parses with bounded_json_loads) ...
        with pytest.raises(UntrustedInputTooLarge):
            bounded_json_loads(deep_text(100_000))
        # ... and as a parsed value that reached the engine anyway: rejected, never run.
        result, box = await run_tool_call({"type": "object"}, deep_value(100_000))
    assert box.calls("lookup") == 0
    assert [r.reason for r in result.tool_calls] == ["InvalidArguments"]
    assert watchdog.longest < STALL, watchdog.report()


def test_depth_counts_brackets_outside_strings_only() -> None:
    assert json_depth('{"a": "[[[[{{{{", "b": [1, {"c": "\\"]]"}]}') == 3
    assert json_depth('"\\\\"') == 0
    assert bounded_json_loads('{"a": "' + "[" * 10_000 + '"}') == {"a": "[" * 10_000}
    assert value_depth(deep_value(100_000), limit=64) == 65
    assert value_depth({"a": [1, {"b": []}]}) == 4


@pytest.mark.parametrize(
    "text",
    ['"\\ud800"', '{"\\udfff": 1}', "\ud800", "NaN", "[Infinity]", "1" * 5000, b"\xff\xfe"],
)
def test_invalid_text_is_a_json_decode_error(text: str | bytes) -> None:
    with pytest.raises(json.JSONDecodeError):
        bounded_json_loads(text)


def test_size_cap() -> None:
    with pytest.raises(UntrustedInputTooLarge, match="longer than 10 characters"):
        bounded_json_loads('{"a": "xxxxxx"}', max_chars=10)
    with pytest.raises(InvalidOutput, match="the answer is longer than"):
        output.parse('{"a": "' + "x" * 100 + '"}', {"type": "object"}, max_chars=50)


# --- $ref --------------------------------------------------------------------------------------

REF_TYPO: dict[str, Any] = {
    "type": "object",
    "properties": {"q": {"$ref": "#/$defs/Query"}},
    "$defs": {"query": {"type": "string"}},
}


async def test_ref_typo_is_refused_everywhere() -> None:
    problems = check_schema(REF_TYPO)
    assert problems == [
        "$.properties.q.$ref: '#/$defs/Query' does not resolve inside the schema; check the "
        "spelling, or define it under $defs"
    ]
    with pytest.raises(InvalidSchema, match=r"\$\.properties\.q\.\$ref"):
        validator_for(REF_TYPO)
    async with StallWatchdog() as watchdog:
        result = await run_answer('{"q": "x"}', REF_TYPO)
        tool_result, box = await run_tool_call(REF_TYPO, {"q": "x"})
    # Output: the run fails instead of raising a referencing error out of the loop; the
    # schema, not the answer, is at fault.
    assert (result.phase, result.reason) == ("Failed", "InvalidSpec")
    assert "output schema cannot be used" in (result.message or "")
    # Tool arguments: fail closed, the call is rejected and never runs.
    assert box.calls("lookup") == 0
    assert [r.reason for r in tool_result.tool_calls] == ["InvalidArguments"]
    assert watchdog.longest < STALL, watchdog.report()


def test_remote_ref_is_refused_and_nothing_is_fetched() -> None:
    schema = {"type": "object", "properties": {"q": {"$ref": "http://127.0.0.1:9/s.json"}}}
    (problem,) = check_schema(schema)
    assert problem.startswith("$.properties.q.$ref: 'http://127.0.0.1:9/s.json' refers to another")
    assert "remote references are refused" in problem
    with pytest.raises(InvalidSchema):
        validator_for(schema)


def test_local_refs_anchors_and_embedded_ids_resolve() -> None:
    schema = {
        "$id": "https://example.test/root.json",
        "type": "object",
        "properties": {
            "a": {"$ref": "#/$defs/a"},
            "b": {"$ref": "#bee"},
            "c": {"$ref": "c.json"},
            "tree": {"type": "array", "items": {"$ref": "#"}},
        },
        "$defs": {
            "a": {"type": "string"},
            "b": {"$anchor": "bee", "type": "integer"},
            "c": {"$id": "c.json", "type": "boolean"},
        },
    }
    assert check_schema(schema) == []
    validator = validator_for(schema)
    assert validator is validator_for(json.loads(json.dumps(schema)))  # memoised
    assert validator.is_valid({"a": "x", "b": 1, "c": True, "tree": [{"a": "y"}]})
    assert not validator.is_valid({"tree": [{"b": "not an int"}]})


@pytest.mark.parametrize(
    ("schema", "where"),
    [
        ({"$ref": "#"}, "$"),
        ({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"allOf": [{"$ref": "#/$defs/a"}]}}}, "$"),
        ({"properties": {"x": {"$ref": "#/required"}}, "required": ["x"]}, "$.properties.x.$ref"),
        ({"type": "objekt"}, "$.type"),
        ({"$schema": "http://example.test/mine", "type": "object"}, "$.$schema"),
        ({"properties": {"a": {"$recursiveRef": "#/x"}}}, "$.properties.a.$recursiveRef"),
    ],
)
def test_schema_problems_name_the_json_path(schema: dict[str, Any], where: str) -> None:
    problems = check_schema(schema)
    assert problems, schema
    assert any(p.startswith(where) for p in problems), problems
    with pytest.raises(InvalidSchema):
        validator_for(schema)


def test_schema_caps() -> None:
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(100_000):
        node["not"] = {}
        node = node["not"]
    (problem,) = check_schema(deep)
    assert f"deeper than {jsonschemas.MAX_SCHEMA_DEPTH} levels" in problem
    big = {"type": "object", "enum": ["x" * 100] * 3_000}
    assert "make it smaller" in check_schema(big)[0]
    many = {"properties": {f"p{i}": {"type": "string"} for i in range(1_200)}}
    assert f"more than {jsonschemas.MAX_SCHEMA_OBJECTS} objects" in check_schema(many)[0]
    long_pattern = {"pattern": "a" * (jsonschemas.MAX_PATTERN_CHARS + 1)}
    assert "longer than" in check_schema(long_pattern)[0]
    assert check_schema([]) == ["$: expected a JSON Schema object, got a list"]  # type: ignore[arg-type]


def ref_chain(length: int) -> dict[str, Any]:
    defs: dict[str, Any] = {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(length)}
    defs[f"d{length}"] = {"type": "string"}
    return {"$defs": defs, "$ref": "#/$defs/d0"}


async def test_long_ref_chains_are_refused_before_they_recurse() -> None:
    assert check_schema(ref_chain(20)) == []
    assert validator_for(ref_chain(20)).is_valid("x")
    (problem,) = check_schema(ref_chain(4_000 // 8))
    assert f"more than {jsonschemas.MAX_REF_CHAIN}" in problem
    # Exponentially many paths through a diamond of allOf: the check stays linear.
    diamond: dict[str, Any] = {
        f"n{i}": {"allOf": [{"$ref": f"#/$defs/n{i + 1}"}, {"$ref": f"#/$defs/n{i + 1}"}]}
        for i in range(40)
    }
    diamond["n40"] = {"type": "integer"}
    async with StallWatchdog() as watchdog:
        assert (
            "would recurse too deeply" in check_schema({"$defs": diamond, "$ref": "#/$defs/n0"})[0]
        )
    assert watchdog.longest < STALL, watchdog.report()


async def test_the_largest_accepted_schema_is_checked_without_a_long_stall() -> None:
    props = {f"p{i}": {"type": "string", "pattern": f"^x{i}[a-z]+$"} for i in range(990)}
    schema = {"type": "object", "properties": props}
    async with StallWatchdog() as watchdog:
        assert check_schema(schema) == []
        assert validator_for(schema).is_valid({"p1": "x1abc"})
    assert watchdog.longest < STALL, watchdog.report()


def test_older_drafts_are_supported() -> None:
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "definitions": {"s": {"type": "string", "pattern": EVIL}},
        "properties": {"a": {"$ref": "#/definitions/s"}},
    }
    assert check_schema(schema) == []
    assert not validator_for(schema).is_valid({"a": "a" * 5_000 + "!"})


# --- ordo validate ---------------------------------------------------------------------------


def test_ordo_validate_names_the_field_and_the_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = tmp_path / "bad.yaml"
    docs = [
        {
            "apiVersion": "ordo.dev/v1alpha1",
            "kind": "Tool",
            "metadata": {"name": "lookup"},
            "spec": {"type": "mock", "inputSchema": REF_TYPO},
        },
        {
            "apiVersion": "ordo.dev/v1alpha1",
            "kind": "Agent",
            "metadata": {"name": "triage"},
            "spec": {
                "modelRef": "model",
                "outputSchema": {"properties": {"a": {"pattern": r"(a)\1"}}},
            },
        },
        {
            "apiVersion": "ordo.dev/v1alpha1",
            "kind": "Task",
            "metadata": {"name": "t"},
            "spec": {
                "agentRef": "triage",
                "outputSchema": {"properties": {"a": {"$ref": "https://example.test/s"}}},
            },
        },
    ]
    manifest.write_text("---\n".join(json.dumps(d) + "\n" for d in docs))
    assert cli_main(["validate", "-f", str(manifest)]) != 0
    out = capsys.readouterr()
    text = out.out + out.err
    assert (
        f"{manifest}[0] Tool/lookup: spec.inputSchema: not a usable JSON Schema: "
        "$.properties.q.$ref: '#/$defs/Query' does not resolve"
    ) in text
    assert f"{manifest}[1] Agent/triage: spec.outputSchema: not a usable JSON Schema: " in text
    assert "$.properties.a.pattern: RE2 cannot compile" in text
    assert f"{manifest}[2] Task/t: spec.outputSchema: not a usable JSON Schema: " in text
    assert "remote references are refused" in text


# --- properties --------------------------------------------------------------------------------

_OLD_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)


def _old_strip(text: str) -> str:
    match = _OLD_FENCE.match(text)
    return match.group(1) if match else text.strip()


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet="` \n\tjson{}x\"'", max_size=24))
def test_strip_fence_agrees_with_the_former_regex_on_small_inputs(text: str) -> None:
    assert output.strip_fence(text) == _old_strip(text)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_parse_raises_only_invalid_output(text: str) -> None:
    with contextlib.suppress(InvalidOutput):  # anything else fails the test
        output.parse(text, EVIL_SCHEMA)


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


def test_the_depth_cap_is_exact_whether_or_not_brackets_hide_in_strings() -> None:
    """The bracket count short-cuts the depth scan only when it cannot reach the cap."""
    assert bounded_json_loads("[[[[1]]]]", max_depth=4) == [[[[1]]]]
    with pytest.raises(UntrustedInputTooLarge):
        bounded_json_loads("[[[[[1]]]]]", max_depth=4)
    assert bounded_json_loads('[[{"a": "[[[[{{{{"}]]', max_depth=3) == [[{"a": "[[[[{{{{"}]]
    with pytest.raises(UntrustedInputTooLarge):
        bounded_json_loads('[[{"a": [{"[": 1}]}]]', max_depth=4)


@settings(max_examples=300, deadline=None)
@given(_JSON)
def test_bounded_loads_agrees_with_json_loads_on_valid_json(value: Any) -> None:
    text = json.dumps(value)
    assert bounded_json_loads(text) == json.loads(text)


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet='[]{}",:\\ 01-.eEtrufalsn\ud800', max_size=40))
def test_bounded_loads_raises_only_the_documented_errors(text: str) -> None:
    try:
        value = bounded_json_loads(text, max_depth=4)
    except (UntrustedInputTooLarge, json.JSONDecodeError):
        return
    assert value == json.loads(text)
    assert json_depth(text) <= 4


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=1, max_value=80), st.booleans())
def test_depth_cap_is_exact(depth: int, as_object: bool) -> None:
    text = ('{"a":' * depth + "1" + "}" * depth) if as_object else "[" * depth + "]" * depth
    if depth > MAX_JSON_DEPTH:
        with pytest.raises(UntrustedInputTooLarge):
            bounded_json_loads(text)
    else:
        assert bounded_json_loads(text) == json.loads(text)
        assert json_depth(text) == depth
