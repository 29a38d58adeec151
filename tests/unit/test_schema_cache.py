"""The memoised schema checks and validators (ordo.api.jsonschemas): the shape caps still run
on every call, before anything is looked up or cached; an invalid schema is rejected every time
with the same error; the caches stay bounded."""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ordo.api import jsonschemas
from ordo.api.jsonschemas import check_schema, validator_for
from ordo.errors import InvalidSchema

VALID = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}


def nested(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


@pytest.mark.parametrize(
    ("schema", "problem"),
    [
        (
            {"type": "object", "properties": {1: {"type": "string"}}},
            "$.properties: keys must be strings (got 1)",
        ),
        ({"type": "number", "maximum": float("nan")}, "$.maximum: nan is not a JSON number"),
        ({"type": "number", "minimum": float("-inf")}, "$.minimum: -inf is not a JSON number"),
        ({"type": "string", "enum": [b"x"]}, "$.enum[0]: a bytes is not a JSON value (quote it)"),
        ({"type": "string", "const": {1, 2}}, "$.const: a set is not a JSON value (quote it)"),
        ([VALID], "$: expected a JSON Schema object, got a list"),
    ],
)
def test_shape_problems_are_named_every_time(schema: Any, problem: str) -> None:
    for _ in range(2):
        assert check_schema(schema) == [problem]
        with pytest.raises(InvalidSchema) as info:
            validator_for(schema)
        assert problem in info.value.message


def test_the_depth_and_size_caps_run_before_any_lookup() -> None:
    deep = nested(jsonschemas.MAX_SCHEMA_DEPTH)
    for _ in range(2):
        (problem,) = check_schema(deep)
        assert f"nests deeper than {jsonschemas.MAX_SCHEMA_DEPTH} levels" in problem
    fits = nested(jsonschemas.MAX_SCHEMA_DEPTH // 2 - 2)
    assert check_schema(fits) == []
    many = {"$defs": {f"d{i}": {} for i in range(jsonschemas.MAX_SCHEMA_OBJECTS)}}
    assert f"more than {jsonschemas.MAX_SCHEMA_OBJECTS} objects" in check_schema(many)[0]
    wide = {"enum": list(range(jsonschemas.MAX_SCHEMA_CHARS + 1))}
    assert "more than" in check_schema(wide)[0]


def test_json_subclasses_and_booleans_are_json() -> None:
    schema = OrderedDict(
        [("type", "object"), ("properties", {"a": {"type": "boolean", "default": True}})]
    )
    assert check_schema(schema) == []
    assert validator_for(schema).is_valid({"a": False})


def test_an_invalid_schema_is_rejected_every_time_with_the_same_error() -> None:
    invalid = {"type": "objekt", "properties": {"q": {"type": "string"}}}
    messages = []
    for _ in range(3):
        with pytest.raises(InvalidSchema) as info:
            validator_for(json.loads(json.dumps(invalid)))
        messages.append(info.value.message)
    assert messages[0] == messages[1] == messages[2]
    assert "$.type: 'objekt' is not valid" in messages[0]


def test_equal_schemas_share_one_validator_and_a_changed_one_gets_its_own() -> None:
    first = validator_for(VALID)
    reordered = dict(reversed(list(json.loads(json.dumps(VALID)).items())))
    assert validator_for(reordered) is first
    changed = {**VALID, "required": []}
    assert validator_for(changed) is not first
    assert validator_for(changed).is_valid({}) and not first.is_valid({})


def test_the_caches_are_bounded() -> None:
    bound = jsonschemas._validator.cache_info().maxsize
    assert bound is not None
    for i in range(bound + 10):
        validator_for({"type": "object", "properties": {f"p{i}": {"type": "string"}}})
    assert jsonschemas._validator.cache_info().currsize == bound
    checks = jsonschemas._check_text.cache_info()
    assert checks.maxsize is not None and checks.currsize <= checks.maxsize


_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=3),
    st.binary(max_size=2),  # not JSON
)
_KEYS = st.one_of(st.text(max_size=3), st.integers(0, 3))  # an int key is not JSON


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        _KEYS,
        st.recursive(
            _LEAVES,
            lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS, inner, max_size=3),
            max_leaves=20,
        ),
        max_size=4,
    )
)
def test_the_fast_shape_check_agrees_with_the_walk(document: dict[Any, Any]) -> None:
    """The per-call check (`_plain_json`) passes exactly the documents the path-naming walk
    finds nothing wrong with."""
    assert jsonschemas._plain_json(document) == (jsonschemas._shape_walk(document) == [])


def test_the_fast_shape_check_agrees_at_the_caps() -> None:
    depth = jsonschemas.MAX_SCHEMA_DEPTH
    chars = jsonschemas.MAX_SCHEMA_CHARS
    objects = jsonschemas.MAX_SCHEMA_OBJECTS
    accepted = []
    for document in (
        nested(depth // 2 - 1),  # two levels per nesting, the string one more: the deepest
        nested(depth // 2),
        {"enum": list(range(chars - 2))},  # the root, the array and its items: the most
        {"enum": list(range(chars - 1))},
        {"$defs": {f"d{i}": {} for i in range(objects - 2)}},  # the root and $defs: the most
        {"$defs": {f"d{i}": {} for i in range(objects - 1)}},
        {"$defs": {f"d{i}": True for i in range(objects - 2)}},  # booleans count as objects
        {"$defs": {f"d{i}": False for i in range(objects - 1)}},
    ):
        accepted.append(jsonschemas._plain_json(document))
        assert accepted[-1] == (jsonschemas._shape_walk(document) == [])
    assert accepted == [True, False] * 4


def test_boolean_subschemas_count_towards_the_object_cap() -> None:
    """Each `true` is a subschema the metaschema check evaluates (~0.2 ms): 6,000 of them in
    90 KB took 1.2 s of check before they counted."""
    schema = {"properties": {f"p{i}": True for i in range(6_000)}}
    started = time.perf_counter()
    (problem,) = check_schema(schema)
    assert time.perf_counter() - started < 1.0  # generous: measured ~20 ms
    assert (
        f"more than {jsonschemas.MAX_SCHEMA_OBJECTS} objects (counting true and false)" in problem
    )
