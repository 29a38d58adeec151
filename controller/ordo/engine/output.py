"""Structured output: instruct the model, then parse and validate its answer."""

from __future__ import annotations

import functools
import json
import re
from typing import Any

import jsonschema

_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)


class InvalidOutput(Exception):
    """The answer is not JSON that satisfies the schema. The message names the JSON path and
    the rule that failed, never the model's text."""


def instruction(schema: dict[str, Any]) -> str:
    """The system-prompt paragraph that asks for JSON matching `schema`."""
    return (
        "Answer with a single JSON object and nothing else (no prose, no code fences). "
        "It must validate against this JSON Schema:\n"
        + json.dumps(schema, sort_keys=True, separators=(",", ":"))
    )


def _declared_names(schema: Any) -> set[str]:
    """Every property name the schema itself declares (keys of any `properties`)."""
    names: set[str] = set()
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            props = node.get("properties")
            if isinstance(props, dict):
                names.update(k for k in props if isinstance(k, str))
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return names


def _path(parts: Any, declared: set[str]) -> str:
    """The JSON path of an error. A key the schema does not declare came from the model
    (additionalProperties, patternProperties), so it is shown as `*`, never as written."""
    out = "$"
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            out += f".{p}" if p in declared else ".*"
    return out


def parse(text: str, schema: dict[str, Any]) -> dict[str, Any]:
    """Parse and validate. Raises InvalidOutput with a content-free message."""
    match = _FENCE.match(text)
    candidate = match.group(1) if match else text.strip()
    try:
        value = json.loads(candidate)
    except json.JSONDecodeError as exc:
        raise InvalidOutput(
            f"the answer is not valid JSON (line {exc.lineno}, column {exc.colno})"
        ) from None
    if not isinstance(value, dict):
        raise InvalidOutput(f"the answer is a JSON {type(value).__name__}, expected an object")
    validator_cls = jsonschema.validators.validator_for(schema)
    errors = sorted(validator_cls(schema).iter_errors(value), key=lambda e: list(e.absolute_path))
    if errors:
        err = errors[0]
        rule = err.validator
        expected = err.validator_value
        if rule in (
            "required",
            "type",
            "enum",
            "minimum",
            "maximum",
            "minLength",
            "maxLength",
            "minItems",
            "maxItems",
            "additionalProperties",
            "const",
            "format",
            "pattern",
        ):
            detail = (
                f"{rule} {json.dumps(expected, sort_keys=True)}"
                if rule != "additionalProperties"
                else "additionalProperties false"
            )
        else:
            detail = str(rule)
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise InvalidOutput(
            f"the answer does not match the output schema at {_path(err.absolute_path, _declared_names(schema))}: failed {detail}{more}"
        )
    return value


def check_schema(schema: dict[str, Any]) -> str | None:
    """None if `schema` is a usable JSON Schema, else why not. Memoised: the same Tool and
    output schemas are checked for every Task (a metaschema check costs milliseconds)."""
    return _check_schema_text(json.dumps(schema, sort_keys=True))


@functools.lru_cache(maxsize=1024)
def _check_schema_text(text: str) -> str | None:
    schema = json.loads(text)
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        return f"not a valid JSON Schema: {exc.message}"
    return None
