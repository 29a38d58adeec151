"""Structured output: instruct the model, then parse and validate its answer.

The answer is untrusted text, so every step is linear in its length and bounded: the code
fence is stripped by index arithmetic (no regex), the JSON is parsed by `bounded_json_loads`
(size and nesting caps, `MAX_JSON_CHARS` and `MAX_JSON_DEPTH`), and the schema is evaluated
by the memoised validator of `ordo.api.jsonschemas`, which matches patterns with RE2 and
runs within a work budget: an answer too costly to validate on the event loop is validated
off it (`parse_answer`, `ordo.engine.validation`) and one too costly for that is
`InvalidOutput`, like one that does not match.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

from ..api import jsonschemas
from ..errors import InvalidOutput, InvalidSchema, UntrustedInputTooLarge
from . import validation
from .jsontext import MAX_JSON_CHARS, MAX_JSON_DEPTH, bounded_json_loads

__all__ = [
    "InvalidOutput",
    "check_schema",
    "decode",
    "instruction",
    "parse",
    "parse_answer",
    "strip_fence",
]

_FENCE = "```"


def strip_fence(text: str) -> str:
    """The answer without surrounding whitespace and one enclosing code fence (three
    backticks, optionally followed by `json`). Same result as the former regex
    `^\\s*```(?:json)?\\s*(.*?)\\s*```\\s*$` (DOTALL), but by index arithmetic, linear in
    the length of the text: once stripped, a fenced answer starts and ends with the fence."""
    stripped = text.strip()
    if len(stripped) < 2 * len(_FENCE) or not (
        stripped.startswith(_FENCE) and stripped.endswith(_FENCE)
    ):
        return stripped
    inner = stripped[len(_FENCE) : -len(_FENCE)]
    if inner.startswith("json"):
        inner = inner[len("json") :]
    return inner.strip()


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


def decode(
    text: str, *, max_chars: int = MAX_JSON_CHARS, max_depth: int = MAX_JSON_DEPTH
) -> dict[str, Any]:
    """The answer's JSON object (fence stripped, bounded parse), or InvalidOutput."""
    if len(text) > 2 * max_chars:  # before even stripping: whitespace padding counts
        raise InvalidOutput(f"the answer is longer than {max_chars} characters")
    candidate = strip_fence(text)
    try:
        value = bounded_json_loads(candidate, max_chars=max_chars, max_depth=max_depth)
    except UntrustedInputTooLarge as exc:
        raise InvalidOutput(exc.message.replace("the JSON text", "the answer")) from None
    except json.JSONDecodeError as exc:
        raise InvalidOutput(
            f"the answer is not valid JSON (line {exc.lineno}, column {exc.colno})"
        ) from None
    if not isinstance(value, dict):
        raise InvalidOutput(f"the answer is a JSON {type(value).__name__}, expected an object")
    return value


def parse(
    text: str,
    schema: dict[str, Any],
    *,
    max_chars: int = MAX_JSON_CHARS,
    max_depth: int = MAX_JSON_DEPTH,
) -> dict[str, Any]:
    """Parse and validate on the event loop (within its share of work: a value too costly
    for it is InvalidOutput; `parse_answer` validates those off the loop). Raises
    InvalidOutput (and nothing else) with a content-free message; an answer over the caps is
    InvalidOutput too, an output schema that cannot be evaluated is InvalidOutput with reason
    InvalidSpec."""
    value = decode(text, max_chars=max_chars, max_depth=max_depth)
    with _refused():
        errors = jsonschemas.validator_for(schema).errors(value)
    _explain(errors, schema)
    return value


async def parse_answer(text: str, schema: dict[str, Any]) -> dict[str, Any]:
    """`parse` for a model's final answer: a value too costly to validate on the event loop
    is validated off it (`ordo.engine.validation`), within a deadline that fails closed."""
    value = decode(text)
    with _refused():
        errors = await validation.schema_errors(schema, value)
    _explain(errors, schema)
    return value


@contextlib.contextmanager
def _refused() -> Iterator[None]:
    """A validation's own failures as InvalidOutput."""
    try:
        yield
    except InvalidSchema as exc:
        raise InvalidOutput(
            f"the output schema cannot be used: {exc.message}"[:1024], reason="InvalidSpec"
        ) from None
    except UntrustedInputTooLarge as exc:  # the validation's work budget ran out: fail closed
        raise InvalidOutput(
            f"the answer is too costly to validate against the output schema: {exc.message}"
        ) from None


def _explain(found: list[Any], schema: dict[str, Any]) -> None:
    """Raise InvalidOutput naming the first validation error (content-free), if any."""
    errors = sorted(found, key=lambda e: list(e.absolute_path))
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
        if rule == "required" and isinstance(expected, list) and isinstance(err.instance, dict):
            # Name the field that is missing, not the whole `required` list; the names come
            # from the schema, never from the answer.
            missing = [k for k in expected if isinstance(k, str) and k not in err.instance]
            if missing:  # one error per missing field: `more` counts the others
                raise InvalidOutput(
                    "the answer does not match the output schema at "
                    f"{_path(err.absolute_path, _declared_names(schema))}: missing required "
                    f"field {missing[0]!r}{more}"
                )
        raise InvalidOutput(
            f"the answer does not match the output schema at {_path(err.absolute_path, _declared_names(schema))}: failed {detail}{more}"
        )


def check_schema(schema: dict[str, Any]) -> str | None:
    """None if `schema` is a usable JSON Schema, else why not (see `jsonschemas.check_schema`,
    which lists every problem with its JSON path; memoised by canonical JSON)."""
    problems = jsonschemas.check_schema(schema)
    return f"not a valid JSON Schema: {'; '.join(problems)}" if problems else None
