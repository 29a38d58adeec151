"""JSON Schemas that users write (Tool `spec.inputSchema`, Task and Agent `spec.outputSchema`)
and that MCP servers list at run time: checked before use, and validated with a linear-time
regex engine.

A schema is accepted when it is
- a JSON object of at most `MAX_SCHEMA_CHARS` characters (canonical JSON),
  `MAX_SCHEMA_OBJECTS` objects and booleans and `MAX_SCHEMA_DEPTH` levels of nesting;
- valid against the metaschema of its declared draft (`$schema`; default 2020-12; drafts 4, 6,
  7, 2019-09 and 2020-12 are supported);
- self-contained: every `$ref` / `$dynamicRef` resolves inside the schema itself to a subschema
  (remote references are refused, nothing is ever fetched), and no chain of references and
  in-place applicators (`allOf`, `anyOf`, `oneOf`, `not`, `if`/`then`/`else`,
  `dependentSchemas`) loops back on itself without consuming input or is longer than
  `MAX_REF_CHAIN`;
- made of patterns (`pattern`, `patternProperties` keys) of at most `MAX_PATTERN_CHARS`
  characters that RE2 compiles. RE2 matches in time linear in the input; it has no
  backreferences or lookaround, so a pattern that needs them is refused.
- not combining `unevaluatedProperties` with `patternProperties` (jsonschema evaluates that
  combination with Python's backtracking `re`, so it is refused), and declaring `$schema` only
  at the root;
- within a cost bound: the work of validating one value, computed statically by
  `ordo.api.jsonschema_cost` (branches that apply to the same value add up and multiply,
  `unevaluated*` re-evaluate them, branches recursing into the same member multiply per level of
  nesting), is at most `MAX_SCHEMA_COST` units; otherwise the problem names the subschema.

`format` is an annotation: it is not asserted, so `format: regex` never compiles input with a
backtracking engine.

`check_schema` lists the problems; `validator_for` returns a memoised validator that matches
patterns with RE2, evaluates `uniqueItems`, `enum`, `const`, `multipleOf` and `unevaluated*`
in linear time without raising (`ordo.api.jsonschema_keywords`), and runs every validation
with a work budget (`ordo.api.jsonschema_fuel`): its `errors` raises only
`ordo.errors.InvalidSchema` or, past the budget, `ordo.errors.UntrustedInputTooLarge`.
`user_schema` is the pydantic field check of the api models (`ordo validate` reports its
problems under the field).

This module is the facade: the size caps, the draft and metaschema checks and the validators.
The RE2 pattern keywords live in `ordo.api.jsonschema_re2`, the reference/pattern/cycle walk in
`ordo.api.jsonschema_walk`, the cost bound in `ordo.api.jsonschema_cost`, the validator class
in `ordo.api.jsonschema_validator`; their public names (`MAX_PATTERN_CHARS`, `MAX_REF_CHAIN`,
`MAX_SCHEMA_COST`, `MAX_PATTERN_WORK*`, `SchemaValidator`, `json_path`) are re-exported here.
"""

from __future__ import annotations

import functools
import json
import math
from typing import Any

import jsonschema

from .jsonschema_cost import MAX_SCHEMA_COST, cost
from .jsonschema_re2 import MAX_PATTERN_CHARS, invalid_schema
from .jsonschema_validator import MAX_PATTERN_WORK, MAX_PATTERN_WORK_ON_LOOP, SchemaValidator
from .jsonschema_walk import MAX_REF_CHAIN, Path, Walk, json_path

MAX_SCHEMA_CHARS = 100_000
"""Largest schema, in characters of its canonical (sorted, compact) JSON."""

MAX_SCHEMA_OBJECTS = 1_000
"""Most JSON objects and booleans (`true`/`false` may be subschemas) in one schema document.
The metaschema check costs about 0.2 ms per subschema, so this bounds the first (memoised)
check of a schema to a fraction of a second (without booleans counted, 6,000 `true`
subschemas in 90 KB took 1.2 s)."""

MAX_SCHEMA_DEPTH = 64
"""Deepest nesting of objects/arrays in a schema document."""

MAX_PROBLEMS = 10
"""At most this many problems are listed for one schema."""

DEFAULT_DIALECT = "https://json-schema.org/draft/2020-12/schema"

_DIALECTS: dict[str, type[Any]] = {
    "https://json-schema.org/draft/2020-12/schema": jsonschema.Draft202012Validator,
    "https://json-schema.org/draft/2019-09/schema": jsonschema.Draft201909Validator,
    "http://json-schema.org/draft-07/schema": jsonschema.Draft7Validator,
    "http://json-schema.org/draft-06/schema": jsonschema.Draft6Validator,
    "http://json-schema.org/draft-04/schema": jsonschema.Draft4Validator,
}


# --- checking --------------------------------------------------------------------------------


_JSON_SCALARS = (str, int, bool, type(None))


def _plain_json(schema: Any) -> bool:
    """True when `_shape_problems` has nothing to say: a dict of plain JSON within the depth,
    node and object caps. Level by level, no paths: the cheap check that runs on every call
    (every tool call validates its arguments); bounded by the same caps, so a hostile document
    costs at most MAX_SCHEMA_CHARS nodes. False also for subclasses of dict, list, str...:
    `_shape_problems` then decides."""
    if type(schema) is not dict:
        return False
    level: list[Any] = [schema]
    count = 1
    objects = 0
    for _ in range(MAX_SCHEMA_DEPTH):
        below: list[Any] = []
        budget = MAX_SCHEMA_CHARS - count  # nodes the next level may hold
        for node in level:
            kind = type(node)
            if kind is dict:
                objects += 1
                for key in node:
                    if type(key) is not str:
                        return False
                below.extend(node.values())
                if len(below) > budget:
                    return False
            elif kind is list:
                below.extend(node)
                if len(below) > budget:
                    return False
            elif kind is float:
                if not math.isfinite(node):
                    return False
            elif kind is bool:
                objects += 1  # may be a subschema: the metaschema check evaluates it too
            elif kind not in _JSON_SCALARS:
                return False
        if objects > MAX_SCHEMA_OBJECTS:
            return False
        if not below:
            return True
        count += len(below)
        level = below
    return False  # something sits MAX_SCHEMA_DEPTH levels down


def _shape_problems(schema: Any) -> list[str]:
    """Type, depth and size, without recursion (a hostile document may nest 100,000 deep)."""
    return [] if _plain_json(schema) else _shape_walk(schema)


def _shape_walk(schema: Any) -> list[str]:
    """`_shape_problems` with the JSON path of each problem (the slower walk)."""
    if not isinstance(schema, dict):
        return [f"$: expected a JSON Schema object, got a {type(schema).__name__}"]
    problems: list[str] = []
    stack: list[tuple[Any, Path]] = [(schema, ())]
    count = 0
    objects = 0
    while stack:
        node, path = stack.pop()
        count += 1
        if len(path) >= MAX_SCHEMA_DEPTH:
            return [
                f"{json_path(path[:8])}...: the schema nests deeper than {MAX_SCHEMA_DEPTH} "
                "levels; flatten it (use $defs and $ref)"
            ]
        if count > MAX_SCHEMA_CHARS:  # every JSON value takes at least one character
            return [
                f"$: the schema is more than {MAX_SCHEMA_CHARS} characters of JSON; make it smaller"
            ]
        if isinstance(node, (dict, bool)):
            objects += 1
            if objects > MAX_SCHEMA_OBJECTS:
                return [
                    f"$: the schema has more than {MAX_SCHEMA_OBJECTS} objects (counting true "
                    "and false); make it smaller (share repeated parts with $defs and $ref)"
                ]
        if isinstance(node, dict):
            for key, value in node.items():
                if not isinstance(key, str):
                    problems.append(f"{json_path(path)}: keys must be strings (got {key!r})")
                    continue
                stack.append((value, (*path, key)))
        elif isinstance(node, list):
            stack.extend((v, (*path, i)) for i, v in enumerate(node))
        elif isinstance(node, float) and not math.isfinite(node):
            problems.append(f"{json_path(path)}: {node} is not a JSON number")
        elif node is not None and not isinstance(node, (str, int, float)):
            problems.append(
                f"{json_path(path)}: a {type(node).__name__} is not a JSON value (quote it)"
            )
        if len(problems) >= MAX_PROBLEMS:
            break
    return problems


def _canonical(schema: dict[str, Any]) -> str:
    return json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def check_schema(schema: Any) -> list[str]:
    """The problems of a user's JSON Schema, each naming the JSON path inside the schema and
    what to do; empty when it is fine. Pure, no network; memoised by canonical JSON."""
    return list(_checked(schema)[1])


def schema_cost(schema: Any) -> int:
    """The static bound of a checked schema: most units of work validating one value costs
    (`ordo.api.jsonschema_cost`). Raises InvalidSchema when `check_schema` finds problems."""
    return validator_for(schema).cost


def _checked(schema: Any) -> tuple[str, tuple[str, ...]]:
    """(canonical JSON, problems). The shape caps run first, on every call: nothing is
    serialised, looked up or cached for a document past them (the text is then "")."""
    problems = _shape_problems(schema)
    if problems:
        return "", tuple(problems)
    text = _canonical(schema)
    if len(text) > MAX_SCHEMA_CHARS:
        return "", (
            f"$: the schema is {len(text)} characters of JSON, more than {MAX_SCHEMA_CHARS}; "
            "make it smaller",
        )
    return text, _check_text(text)[0]


def _dialect(schema: dict[str, Any]) -> tuple[str | None, type[Any] | None]:
    declared = schema.get("$schema", DEFAULT_DIALECT)
    if not isinstance(declared, str):
        return None, None
    key = declared.rstrip("#")
    return key, _DIALECTS.get(key)


@functools.lru_cache(maxsize=512)
def _check_text(text: str) -> tuple[tuple[str, ...], int]:
    """(problems, the schema's cost bound) of a canonical schema text."""
    schema = json.loads(text)
    dialect, cls = _dialect(schema)
    if cls is None or dialect is None:
        known = ", ".join(sorted(_DIALECTS))
        return (
            f"$.$schema: unknown or unsupported draft {schema.get('$schema')!r}; "
            f"use one of {known} (or omit it for 2020-12)",
        ), 0
    meta = cls(cls.META_SCHEMA)  # no format checker: formats are annotations
    errors = sorted(meta.iter_errors(schema), key=lambda e: [str(p) for p in e.absolute_path])
    if errors:
        out = []
        for err in errors[:MAX_PROBLEMS]:
            best = jsonschema.exceptions.best_match([err]) or err
            out.append(
                f"{json_path(tuple(best.absolute_path))}: {best.message[:300]} "
                f"(not valid under {dialect}; see https://json-schema.org)"
            )
        return tuple(out), 0
    walk = Walk(schema, dialect)
    problems = walk.problems()
    if problems:
        return tuple(problems[:MAX_PROBLEMS]), 0
    bound = cost(walk, frozenset(cls.VALIDATORS), dialect)
    return ((bound.problem,) if bound.problem else ()), bound.units


# --- validators ------------------------------------------------------------------------------


def validator_for(schema: Any) -> SchemaValidator:
    """A memoised validator for `schema` (keyed by its canonical JSON) that matches patterns
    with RE2. Raises InvalidSchema, naming the first problems, when `check_schema` finds any."""
    text, problems = _checked(schema)  # serialised once, validator looked up by that text
    if problems:
        raise invalid_schema("; ".join(problems))
    return _validator(text)


def user_schema(value: Any) -> Any:
    """Pydantic field check for a schema a user writes: ValueError naming the problems."""
    if value is not None:
        problems = check_schema(value)
        if problems:
            raise ValueError("not a usable JSON Schema: " + "; ".join(problems))
    return value


@functools.lru_cache(maxsize=256)
def _validator(text: str) -> SchemaValidator:
    schema = json.loads(text)
    dialect, cls = _dialect(schema)
    assert dialect is not None and cls is not None  # checked
    return SchemaValidator(schema, dialect, cls, _check_text(text)[1])


__all__ = [
    "DEFAULT_DIALECT",
    "MAX_PATTERN_CHARS",
    "MAX_PATTERN_WORK",
    "MAX_PATTERN_WORK_ON_LOOP",
    "MAX_REF_CHAIN",
    "MAX_SCHEMA_CHARS",
    "MAX_SCHEMA_COST",
    "MAX_SCHEMA_DEPTH",
    "MAX_SCHEMA_OBJECTS",
    "SchemaValidator",
    "check_schema",
    "json_path",
    "schema_cost",
    "user_schema",
    "validator_for",
]
