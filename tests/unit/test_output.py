"""Structured output: the instruction, parsing, validation, and content-free error messages."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ordo.engine import output

CANARY = "CANARY-91d2"

TRIAGE = {
    "type": "object",
    "properties": {
        "category": {"type": "string", "enum": ["billing", "technical"]},
        "priority": {"type": "integer", "minimum": 1, "maximum": 5},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
        "owner": {
            "type": "object",
            "properties": {"team": {"type": "string"}},
            "required": ["team"],
            "additionalProperties": False,
        },
    },
    "required": ["category", "priority"],
    "additionalProperties": False,
}


def test_instruction_carries_the_schema() -> None:
    text = output.instruction(TRIAGE)
    assert "JSON" in text
    assert json.dumps(TRIAGE, sort_keys=True, separators=(",", ":")) in text


@pytest.mark.parametrize(
    "text",
    [
        '{"category": "billing", "priority": 2}',
        '  {"category": "billing", "priority": 2}\n',
        '```json\n{"category": "billing", "priority": 2}\n```',
        '```\n{"category": "billing", "priority": 2}\n```',
    ],
)
def test_valid_answers_parse(text: str) -> None:
    assert output.parse(text, TRIAGE) == {"category": "billing", "priority": 2}


@pytest.mark.parametrize(
    ("value", "where", "rule"),
    [
        ({"priority": 2}, "$", "required"),
        ({"category": "billing", "priority": "2"}, "$.priority", 'type "integer"'),
        ({"category": "x", "priority": 2}, "$.category", "enum"),
        ({"category": "billing", "priority": 9}, "$.priority", "maximum 5"),
        ({"category": "billing", "priority": 2, "tags": [1]}, "$.tags[0]", 'type "string"'),
        ({"category": "billing", "priority": 2, "owner": {}}, "$.owner", "required"),
    ],
)
def test_invalid_answers_name_the_path_and_the_rule(
    value: dict[str, Any], where: str, rule: str
) -> None:
    with pytest.raises(output.InvalidOutput) as info:
        output.parse(json.dumps(value), TRIAGE)
    message = str(info.value)
    assert f"at {where}:" in message
    assert rule in message


def test_more_errors_are_counted() -> None:
    with pytest.raises(output.InvalidOutput, match=r"and 1 more"):
        output.parse('{"category": "x", "priority": "y"}', TRIAGE)


@pytest.mark.parametrize(
    ("schema", "text"),
    [
        # the model's text as a value
        (TRIAGE, json.dumps({"category": CANARY, "priority": 2})),
        (TRIAGE, json.dumps({"category": "billing", "priority": CANARY})),
        (TRIAGE, f"Sure! {CANARY}"),
        (TRIAGE, f'{{"category": "{CANARY}"'),
        (TRIAGE, json.dumps([CANARY])),
        (TRIAGE, json.dumps(CANARY)),
        # the model's text as a key: additionalProperties false, with a schema, patterns
        (TRIAGE, json.dumps({"category": "billing", "priority": 2, CANARY: 1})),
        (
            {"type": "object", "additionalProperties": {"type": "integer"}},
            json.dumps({CANARY: "x"}),
        ),
        (
            {"type": "object", "patternProperties": {"^C": {"type": "integer"}}},
            json.dumps({CANARY: "x"}),
        ),
        (
            {
                "type": "object",
                "properties": {"m": {"type": "object", "additionalProperties": {"type": "object"}}},
            },
            json.dumps({"m": {CANARY: {"a": 1}, "b": 2}}),
        ),
        ({"type": "object", "propertyNames": {"maxLength": 3}}, json.dumps({CANARY: 1})),
    ],
)
def test_error_messages_never_contain_the_models_text(schema: dict[str, Any], text: str) -> None:
    with pytest.raises(output.InvalidOutput) as info:
        output.parse(text, schema)
    assert CANARY not in str(info.value)


def test_keys_the_schema_names_stay_in_the_path() -> None:
    schema = {
        "type": "object",
        "properties": {"m": {"type": "object", "additionalProperties": {"type": "integer"}}},
    }
    with pytest.raises(output.InvalidOutput) as info:
        output.parse(json.dumps({"m": {CANARY: "x"}}), schema)
    assert "at $.m.*: failed type" in str(info.value)


def test_non_object_answers_are_invalid() -> None:
    with pytest.raises(output.InvalidOutput, match="expected an object"):
        output.parse("[1, 2]", {"type": "object"})


def test_check_schema() -> None:
    assert output.check_schema(TRIAGE) is None
    problem = output.check_schema({"type": "objekt"})
    assert problem is not None and problem.startswith("not a valid JSON Schema")


def test_invalid_output_is_the_error_tree_class() -> None:
    from ordo import errors

    assert output.InvalidOutput is errors.InvalidOutput
    with pytest.raises(errors.OrdoError) as info:
        output.parse("nope", TRIAGE)
    assert info.value.reason == "InvalidOutput"


@pytest.mark.parametrize(
    ("text", "inner"),
    [
        ('```json\n{"a": 1}\n```', '{"a": 1}'),
        ('  ```\n{"a": 1}```  \n', '{"a": 1}'),
        ("```json```", ""),
        ("`````", "`````"),
        ('{"a": "```"}', '{"a": "```"}'),
        ('```{"a": "```"}```', '{"a": "```"}'),
    ],
)
def test_strip_fence(text: str, inner: str) -> None:
    assert output.strip_fence(text) == inner


def test_check_schema_lists_every_problem_with_its_path() -> None:
    problem = output.check_schema(
        {"properties": {"a": {"pattern": "(a)\\1"}, "b": {"$ref": "#/$defs/nope"}}}
    )
    assert problem is not None
    assert "$.properties.a.pattern" in problem and "$.properties.b.$ref" in problem
