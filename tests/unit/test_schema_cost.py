"""A cost bound for every JSON Schema ordo evaluates (issue 23, Build item 1).

The reviewer's rows, each a regression test written first: a 2 KB schema of 5 levels of
`anyOf` x10 with `unevaluatedProperties: false` (18 s of blocked loop for a 13-byte answer),
`uniqueItems` over 3,000 objects (12.6 s, jsonschema's pairwise `equal`), a 320-digit
integer against `multipleOf: 0.5` (an uncaught `OverflowError`, so `InternalError`). Each
checks the outcome AND that the longest event-loop stall measured by `StallWatchdog` stays
under a generous bound (the figures measured on the fixed code are in docs/security.md).
"""

from __future__ import annotations

import json
import math
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from pydantic import ValidationError

from ordo.api import Tool, jsonschema_cost, jsonschema_fuel, jsonschemas
from ordo.api.jsonschemas import check_schema, schema_cost, validator_for
from ordo.engine import output
from ordo.engine.jsontext import MAX_JSON_DEPTH
from ordo.engine.loop import run_agent
from ordo.engine.stepcalls import argument_problem
from ordo.engine.transcript import ToolCall
from ordo.errors import InvalidOutput, UntrustedInputTooLarge
from ordo.runtime import execute
from ordo.runtime.resolve import ResolutionError, resolve
from support.engine_fakes import (
    DictStore,
    ModelFactory,
    ScriptedModel,
    Toolbox,
    agent,
    answer,
    mock_endpoint,
    mock_tool,
    open_governance,
    run_config,
    task,
    tools_turn,
)
from support.schemas import instances, schemas
from support.stall import StallWatchdog

STALL = 1.0  # seconds: generous; the fixed code stalls for milliseconds
ROOT = Path(__file__).resolve().parents[2]


def nested_any_of(depth: int, width: int = 10, *, every_level: bool = True) -> dict[str, Any]:
    """The reviewer's schema: `depth` levels of `anyOf` x`width` (shared through $defs, so
    the document stays ~2 KB) with `unevaluatedProperties: false`."""
    defs: dict[str, Any] = {f"l{depth}": {"type": "object"}}
    for level in range(depth - 1, -1, -1):
        node: dict[str, Any] = {"anyOf": [{"$ref": f"#/$defs/l{level + 1}"}] * width}
        if every_level:
            node["unevaluatedProperties"] = False
        defs[f"l{level}"] = node
    return {"$defs": defs, "$ref": "#/$defs/l0", "unevaluatedProperties": False}


def inline_any_of(depth: int, width: int) -> dict[str, Any]:
    """The same written out (no $ref): `width`**`depth` leaves."""
    schema: dict[str, Any] = {"type": "object"}
    for _ in range(depth):
        schema = {"anyOf": [schema] * width, "unevaluatedProperties": False}
    return schema


REVIEWER = nested_any_of(5)
ANSWER = '{"x": "hello"}'  # 13 characters of JSON
UNIQUE = {
    "type": "object",
    "properties": {"items": {"type": "array", "uniqueItems": True}},
    "required": ["items"],
}


def unchecked(schema: dict[str, Any]) -> jsonschemas.SchemaValidator:
    """A validator for `schema` that skips `check_schema` (defence in depth: what the fuel
    alone does with a schema the static bound would refuse)."""
    return jsonschemas.SchemaValidator(
        schema, jsonschemas.DEFAULT_DIALECT, jsonschema.Draft202012Validator
    )


# --- the reviewer's rows --------------------------------------------------------------------


def test_the_reviewer_schema_is_refused_naming_the_path() -> None:
    assert len(json.dumps(REVIEWER)) < 2_100
    started = time.perf_counter()
    problems = check_schema(REVIEWER)
    assert time.perf_counter() - started < STALL
    assert len(problems) == 1, problems
    (problem,) = problems
    assert problem.startswith("$.$defs.l"), problem
    assert f"more than the bound of {jsonschemas.MAX_SCHEMA_COST:,}" in problem
    assert "anyOf" in problem and "unevaluated" in problem


async def test_the_reviewer_schema_as_an_output_schema_ends_invalid_spec_without_a_stall() -> None:
    with pytest.raises(ValidationError, match=r"outputSchema[\s\S]*\$\.\$defs\.l"):
        task(outputSchema=REVIEWER)
    model = ScriptedModel([answer(ANSWER)])
    async with StallWatchdog() as dog:
        result = await run_agent(run_config(open_governance(), output_schema=REVIEWER), model, [])
    assert dog.longest < STALL, dog.report()
    assert (result.phase, result.reason) == ("Failed", "InvalidSpec")
    assert "$.$defs.l" in (result.message or "")


async def test_the_reviewer_schema_as_a_tool_input_schema_rejects_the_call_without_a_stall() -> (
    None
):
    with pytest.raises(ValidationError, match=r"inputSchema[\s\S]*\$\.\$defs\.l"):
        Tool.model_validate(mock_tool("search", inputSchema=REVIEWER))
    box = Toolbox().add("lookup", schema=REVIEWER)
    calls = [ToolCall(f"c{n}", "lookup", {"x": "hello"}, ANSWER) for n in range(1)]
    model = ScriptedModel([tools_turn(*calls), answer("done")])
    config = run_config(open_governance("lookup"), on_tool_denied="ReturnError")
    async with StallWatchdog() as dog:
        result = await run_agent(config, model, box.bindings)
    assert dog.longest < STALL, dog.report()
    assert box.executors["lookup"].calls == 0  # never run unchecked
    assert result.tool_calls[0].reason == "InvalidArguments"


async def test_unique_items_over_3000_objects_is_linear() -> None:
    items = [{"id": n} for n in range(3_000)]
    text = json.dumps({"items": items})
    async with StallWatchdog() as dog:
        assert output.parse(text, UNIQUE) == {"items": items}
        with pytest.raises(InvalidOutput, match="uniqueItems"):
            output.parse(json.dumps({"items": [*items, {"id": 2_999}]}), UNIQUE)
    assert dog.longest < STALL, dog.report()


@pytest.mark.parametrize(
    ("items", "unique"),
    [
        ([1, 1.0], False),
        ([True, 1], True),
        ([False, 0, None, ""], True),
        ([{"a": 1, "b": 2}, {"b": 2, "a": 1}], False),
        ([{"a": 1}, {"a": 1.0}], False),
        ([[1], [True]], True),
        ([[1, 2], [2, 1]], True),
        ([{"a": [True]}, {"a": [1]}], True),
        ([10**320, 10**320], False),
        ([10**320, float("1e308")], True),
        ([0.5, 0.5], False),
        ([-0.0, 0], False),
        (["a", "\ud800"], True),
    ],
)
def test_unique_items_keeps_json_schema_equality(items: list[Any], unique: bool) -> None:
    validator = validator_for({"type": "array", "uniqueItems": True})
    assert validator.is_valid(items) is unique
    assert jsonschema.Draft202012Validator({"uniqueItems": True}).is_valid(items) is unique


@pytest.mark.parametrize(
    ("enum", "value", "member"),
    [
        ([1, "a", None], 1.0, True),
        ([1, "a", None], True, False),
        ([False], 0, False),
        ([{"a": [1, {"b": None}]}], {"a": [1.0, {"b": None}]}, True),
        ([{"a": [1]}], {"a": [True]}, False),
        ([[1, 2]], [1, 2, 3], False),
        (list(range(5_000)), 4_999, True),
    ],
)
def test_enum_and_const_keep_json_schema_equality(
    enum: list[Any], value: Any, member: bool
) -> None:
    assert validator_for({"enum": enum}).is_valid(value) is member
    assert jsonschema.Draft202012Validator({"enum": enum}).is_valid(value) is member
    if len(enum) == 1:
        assert validator_for({"const": enum[0]}).is_valid(value) is member


@pytest.mark.parametrize("digits", [300, 320, 4_000])
async def test_a_huge_integer_against_multiple_of_never_raises(digits: int) -> None:
    schema = {"type": "object", "properties": {"n": {"multipleOf": 0.5}}, "required": ["n"]}
    big = int("7" * digits)
    assert output.parse(json.dumps({"n": big}), schema) == {"n": big}
    model = ScriptedModel([answer(json.dumps({"n": big}))])
    result = await run_agent(run_config(open_governance(), output_schema=schema), model, [])
    assert (result.phase, result.reason) == ("Succeeded", "Succeeded")
    with pytest.raises(InvalidOutput, match="multipleOf"):
        output.parse(json.dumps({"n": big}), {"properties": {"n": {"multipleOf": 2}}})
    assert argument_problem(schema, {"n": big}) is None


@pytest.mark.parametrize(
    ("value", "divisor", "multiple"),
    [
        (10**400, 0.5, True),
        (10**400 + 1, 2, False),
        (1e308, 0.5, True),
        (1e308, 1e-308, True),
        (0.75, 0.5, False),
        (1.5, 0.5, True),
        (0.3, 0.1, True),  # exact on the decimal value as written
        (19.99, 0.01, True),
        (7, 7.0, True),
        (5e-324, 1e-300, False),
    ],
)
def test_multiple_of_is_exact(value: float, divisor: float, multiple: bool) -> None:
    assert validator_for({"multipleOf": divisor}).is_valid(value) is multiple


@pytest.mark.parametrize(
    ("schema", "instance"),
    [
        ({"properties": {"q": {"pattern": "a"}}}, {"q": "\ud800"}),
        ({"patternProperties": {"a": {}}, "additionalProperties": False}, {"\udc80a": 1}),
        ({"propertyNames": {"pattern": "^x"}}, {"\ud800": 1}),
        ({"additionalProperties": {"type": "string"}}, {"\ud800": 1}),
    ],
)
def test_lone_surrogates_never_escape_the_validator(
    schema: dict[str, Any], instance: dict[str, Any]
) -> None:
    validator_for(schema).errors(instance)  # a result, not an exception


def test_a_nested_schema_keyword_is_refused() -> None:
    # jsonschema would switch to its stock validator class for that subschema, so the
    # pattern below would run on Python's backtracking `re` (minutes for 30 characters).
    schema = {
        "properties": {
            "q": {"$schema": jsonschemas.DEFAULT_DIALECT, "pattern": "^(a+)+$"},
        }
    }
    (problem,) = check_schema(schema)
    assert problem.startswith("$.properties.q.$schema: "), problem


# --- defence in depth: the fuel -------------------------------------------------------------


async def test_an_unchecked_exponential_schema_runs_out_of_fuel_without_a_stall() -> None:
    validator = unchecked(REVIEWER)
    async with StallWatchdog() as dog:
        with pytest.raises(UntrustedInputTooLarge, match="work budget"):
            validator.errors({"x": "hello"})
    assert dog.longest < STALL, dog.report()


async def test_a_large_answer_past_the_fuel_fails_closed_without_a_stall() -> None:
    schema = {
        "type": "object",
        "properties": {"v": {"type": "array", "items": {"type": "integer"}}},
    }
    values = list(range(jsonschema_fuel.MAX_FUEL))
    async with StallWatchdog() as dog:
        with pytest.raises(InvalidOutput, match="too costly to validate"):
            output.parse(json.dumps({"v": values}), schema)
        problem = argument_problem(schema, {"v": values})
    assert dog.longest < STALL, dog.report()
    assert problem is not None and "too costly to check" in problem


def test_the_fuel_is_proportional_to_the_instance() -> None:
    validator = validator_for({"type": "object", "properties": {"a": {"type": "integer"}}})
    small = validator.budget({"a": 1})
    assert small < jsonschema_fuel.MAX_FUEL
    assert validator.budget({"a": list(range(10**6))}) == jsonschema_fuel.MAX_FUEL


# --- ordinary schemas stay accepted ---------------------------------------------------------


TREE = {"type": "array", "items": {"$ref": "#"}}
BINARY_TREE = {
    "type": "object",
    "properties": {"value": {"type": "integer"}, "left": {"$ref": "#"}, "right": {"$ref": "#"}},
    "additionalProperties": False,
}


def _branch(properties: dict[str, Any]) -> dict[str, Any]:
    return {"properties": properties, "required": list(properties), "additionalProperties": False}


FILTER_BRANCHES = [
    _branch({"and": {"type": "array", "items": {"$ref": "#/$defs/filter"}}}),
    _branch({"or": {"type": "array", "items": {"$ref": "#/$defs/filter"}}}),
    _branch({"not": {"$ref": "#/$defs/filter"}}),
    _branch({"field": {"type": "string"}, "equals": {}}),
]
FILTER = {"$defs": {"filter": {"oneOf": FILTER_BRANCHES}}, "$ref": "#/$defs/filter"}
"""A tagged union that recurses: each branch recurses through its own property name."""
FILTER_UNEVALUATED = {
    "$defs": {
        "filter": {
            "oneOf": [
                {"properties": b["properties"], "required": b["required"]} for b in FILTER_BRANCHES
            ],
            "unevaluatedProperties": False,
        }
    },
    "$ref": "#/$defs/filter",
}
"""The same with unevaluatedProperties: jsonschema validates each branch twice per level, so
a filter nested 12 deep takes 1.6 s (measured), exponential in the depth: refused."""
SHAPES = {
    "oneOf": [
        {
            "type": "object",
            "properties": {"kind": {"const": kind}, "value": {"type": kind}},
            "required": ["kind", "value"],
            "additionalProperties": False,
        }
        for kind in ("string", "integer", "boolean", "array", "object", "null")
    ]
}
COMMENTS = {
    "$defs": {
        "comment": {
            "type": "object",
            "properties": {
                "text": {"type": "string", "maxLength": 2000},
                "replies": {"type": "array", "items": {"$ref": "#/$defs/comment"}, "maxItems": 50},
                "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
            },
            "required": ["text"],
            "unevaluatedProperties": False,
        }
    },
    "type": "object",
    "properties": {"thread": {"type": "array", "items": {"$ref": "#/$defs/comment"}}},
}


def example_schemas() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted((ROOT / "examples").rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            spec = (doc or {}).get("spec") or {}
            for field in ("outputSchema", "inputSchema"):
                if isinstance(spec.get(field), dict):
                    found.append((f"{path.relative_to(ROOT)}:{field}", spec[field]))
    return found


@pytest.mark.parametrize(
    "schema",
    [TREE, BINARY_TREE, FILTER, SHAPES, COMMENTS, {"items": {"$ref": "#"}, "uniqueItems": True}],
    ids=["tree", "binary-tree", "filter", "shapes", "comments", "unique-tree"],
)
def test_ordinary_schemas_are_accepted(schema: dict[str, Any]) -> None:
    assert check_schema(schema) == []
    assert schema_cost(schema) <= jsonschemas.MAX_SCHEMA_COST // 10


def test_every_example_schema_is_accepted() -> None:
    schemas = example_schemas()
    assert len(schemas) >= 5
    for where, schema in schemas:
        assert check_schema(schema) == [], where


def test_a_deep_filter_validates_within_its_bound() -> None:
    node: dict[str, Any] = {"field": "a", "equals": 1}
    for n in range(MAX_JSON_DEPTH // 3):
        node = {"and": [node, {"not": {"field": f"f{n}", "equals": None}}]}
    validator = validator_for(FILTER)
    assert validator.errors(node) == []
    assert 0 < validator.work(node) <= schema_cost(FILTER) * jsonschema_fuel.value_count(node)


@pytest.mark.parametrize(
    ("schema", "where", "says"),
    [
        (nested_any_of(5, every_level=False), "$.$defs.l", "units of work"),
        (nested_any_of(4), "$.$defs.l", "units of work"),
        ({"anyOf": [{"type": "string"}, inline_any_of(4, 3)]}, "$.anyOf[1]: ", "units of work"),
        ({"anyOf": [{"items": {"$ref": "#"}}, {"items": {"$ref": "#"}}]}, "$: ", "levels deep"),
        (FILTER_UNEVALUATED, "$.$defs.filter: ", "levels deep"),
        (
            {"properties": {"a": {"$ref": "#"}}, "patternProperties": {"^a$": {"$ref": "#"}}},
            "$: ",
            "levels deep",
        ),
        ({"required": [f"p{n}" for n in range(12_000)]}, "$: ", "its required alone costs"),
    ],
)
def test_multiplying_schemas_are_refused_naming_the_path(
    schema: dict[str, Any], where: str, says: str
) -> None:
    """Branches that add up and multiply in place, recursion that evaluates the same member
    through several branches (exponential in the depth of the value), one huge keyword."""
    (problem,) = check_schema(schema)
    assert problem.startswith(where), problem
    assert says in problem


def test_the_instance_depth_of_the_bound_is_the_parser_s() -> None:
    assert jsonschema_cost.MAX_INSTANCE_DEPTH == MAX_JSON_DEPTH


# --- the upgrade path: objects stored before the bound -------------------------------------


def counting_factory() -> ModelFactory:
    return ModelFactory(lambda snapshot: ScriptedModel([answer("ok")]))


@pytest.mark.parametrize("kind", ["Agent", "Tool"])
async def test_a_stored_object_over_the_bound_ends_its_task_invalid_spec(kind: str) -> None:
    if kind == "Agent":
        objects = [agent(outputSchema=REVIEWER), mock_endpoint()]
        field = "Agent 'agent' is invalid at spec.outputSchema"
    else:
        objects = [
            agent(tools=["search"]),
            mock_endpoint(),
            mock_tool("search", inputSchema=REVIEWER),
        ]
        field = "Tool 'search' is invalid at spec.inputSchema"
    store = DictStore(*objects)
    with pytest.raises(ResolutionError) as info:
        await resolve(task(), store)
    assert info.value.reason == "InvalidSpec"
    assert field in info.value.message and "$.$defs.l" in info.value.message
    factory = counting_factory()
    outcome = await execute(task(), store, model_factory=factory)
    assert (outcome.phase, outcome.reason) == ("Failed", "InvalidSpec")
    assert factory.models == [] and factory.calls == 0


async def test_readiness_of_a_stored_tool_over_the_bound_names_the_path() -> None:
    from ordo.errors import validation_problem
    from ordo.operator.readiness import reconciler as readiness

    body = mock_tool("search", inputSchema=REVIEWER)
    with pytest.raises(ValidationError) as info:
        await readiness.EVALUATORS["Tool"](body, DictStore(body))
    problem = validation_problem(info.value)
    assert problem.startswith("spec.inputSchema") and "$.$defs.l" in problem


# --- the check's own cost -------------------------------------------------------------------


def worst_case_schema() -> dict[str, Any]:
    """The most work found for the cost check itself within the caps (918 subschemas): a
    cost that grows quadratically with the depth (no fixed point, no linear growth to stop
    at), so all 64 depths are computed, over 35 definitions of 25 named members that recurse."""
    defs: dict[str, Any] = {"a": {"uniqueItems": True, "items": {"$ref": "#/$defs/a"}}}
    for n in range(35):
        nxt = {"$ref": f"#/$defs/d{(n + 1) % 35}"}
        defs[f"d{n}"] = {"properties": {f"p{n}_{j}": nxt for j in range(25)}, "uniqueItems": True}
    return {
        "$defs": defs,
        "anyOf": [
            {"items": {"$ref": "#"}},
            {"items": {"$ref": "#/$defs/a"}},
            {"$ref": "#/$defs/d0"},
        ],
    }


async def test_the_cost_check_of_a_worst_case_schema_is_bounded() -> None:
    schema = worst_case_schema()
    async with StallWatchdog() as dog:
        assert check_schema(schema) == []  # measured: 40 ms of cost check, 220 ms in all
    assert dog.longest < 2 * STALL, dog.report()
    assert 1_000 < schema_cost(schema) <= jsonschemas.MAX_SCHEMA_COST


# --- the replaced keywords agree with jsonschema's ------------------------------------------


def _float_divisor(schema: Any) -> bool:
    """multipleOf with a float: ordo divides exactly on the decimal value, jsonschema in binary
    floating point (0.3 is a multiple of 0.1 for ordo only): compared elsewhere."""
    text = json.dumps(schema)
    return '"multipleOf": ' in text and any(
        isinstance(v, float) for v in _values_of(schema, "multipleOf")
    )


def _decimal_differs(schema: Any, value: Any) -> bool:
    """multipleOf on a float whose decimal value (what the JSON says, and what ordo divides)
    is not its binary one (what jsonschema divides): 7.498847945832123e+16 is a multiple of 3
    as written, and its binary value 74988479458321232 is not."""
    if '"multipleOf": ' not in json.dumps(schema):
        return False
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, float) and math.isfinite(node):
            if Fraction(repr(node)) != Fraction(node):
                return True
        elif isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False


def _values_of(schema: Any, keyword: str) -> list[Any]:
    found, stack = [], [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if keyword in node:
                found.append(node[keyword])
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schemas(), instances())
def test_validation_agrees_with_jsonschema_and_the_budget_holds(schema: Any, value: Any) -> None:
    if check_schema(schema):
        return
    validator = validator_for(schema)
    try:
        errors = validator.errors(value)
    except UntrustedInputTooLarge:
        # Only the hard cap may run out: below it the budget is the static bound per value.
        assert validator.budget(value) == jsonschema_fuel.MAX_FUEL
        return
    if _float_divisor(schema) or _decimal_differs(schema, value) or validator.work(value) > 20_000:
        return  # different by design / too slow for the stock validator to check
    try:
        stock = jsonschema.Draft202012Validator(schema).is_valid(value)
    except OverflowError:
        return  # jsonschema's own multipleOf on a float and a huge int (ordo's does not raise)
    assert stock is (not errors)
