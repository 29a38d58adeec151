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
`ordo.api.jsonschema_walk`, the cost bound in `ordo.api.jsonschema_cost`; their public names
(`MAX_PATTERN_CHARS`, `MAX_REF_CHAIN`, `MAX_SCHEMA_COST`, `json_path`) are re-exported here.
"""

from __future__ import annotations

import functools
import json
import math
from typing import Any

import jsonschema
import re2  # type: ignore[import-untyped]
import referencing
import referencing.jsonschema
from jsonschema.exceptions import ValidationError

from . import jsonschema_fuel as fuel
from .jsonschema_cost import MAX_SCHEMA_COST, cost
from .jsonschema_keywords import FALSE_KEYWORD, validator_class, weights
from .jsonschema_re2 import MAX_PATTERN_CHARS, compile_pattern, invalid_schema
from .jsonschema_walk import MAX_REF_CHAIN, Path, Walk, json_path, replace_false

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


_KEEP_FALSE = frozenset(
    {
        "additionalProperties",
        "additionalItems",
        "items",
        "unevaluatedProperties",
        "unevaluatedItems",
    }
)
"""Keywords whose `false` their own function handles (no subschema evaluation, no fuel lost)."""


class SchemaValidator:
    """A checked schema's validator. `errors(instance)` lists the validation errors and raises
    only `InvalidSchema` (a schema fault surfacing at validation time) or
    `UntrustedInputTooLarge` (the validation needed more than its work budget)."""

    def __init__(
        self, schema: dict[str, Any], dialect: str, cls: type[Any], cost: int | None = None
    ) -> None:
        self.schema = schema
        self.cost = cost if cost is not None else fuel.MAX_FUEL  # unchecked: the cap
        evaluated = json.loads(json.dumps(schema))  # a copy: `false` becomes a keyword
        replace_false(evaluated, {FALSE_KEYWORD: True}, _KEEP_FALSE)
        self.weights = weights(evaluated)
        self.tables: dict[Any, Any] = {}
        self.validator: Any = validator_class(dialect, cls)(
            evaluated, registry=referencing.Registry()
        )
        self.pattern_size = _largest_program(schema)
        """The largest RE2 program of the schema's patterns (0 without patterns)."""

    def budget(self, instance: Any, cap: int = fuel.MAX_FUEL) -> int:
        """The units `errors(instance)` may spend: `FUEL_FACTOR` x the cost bound per value x
        the size of `instance` as JSON, plus `FUEL_FLOOR`, at most `cap`."""
        per_char = fuel.FUEL_FACTOR * max(self.cost, 1)
        enough = (cap - fuel.FUEL_FLOOR) // per_char + 1
        size = fuel.json_size(instance, limit=enough)
        return min(cap, fuel.FUEL_FLOOR + per_char * size)

    def on_loop(self, instance: Any) -> bool:
        """Whether validating `instance` is cheap enough for the event loop: its budget fits
        `MAX_FUEL`, and RE2's worst case (DFA given up: program size x characters) fits
        `MAX_PATTERN_WORK_ON_LOOP`. Otherwise validate it off the loop with
        `cap=MAX_OFF_LOOP_FUEL` (`ordo.engine.validation`)."""
        if self.budget(instance, cap=fuel.MAX_FUEL + 1) > fuel.MAX_FUEL:
            return False
        return self._pattern_work(instance, MAX_PATTERN_WORK_ON_LOOP) <= MAX_PATTERN_WORK_ON_LOOP

    def _pattern_work(self, instance: Any, allowed: int) -> int:
        """RE2's worst case for `instance`: the largest program x its size (stops past
        `allowed`); 0 without patterns."""
        if not self.pattern_size:
            return 0
        return self.pattern_size * fuel.json_size(instance, limit=allowed // self.pattern_size + 1)

    def errors(self, instance: Any, *, cap: int = fuel.MAX_FUEL) -> list[ValidationError]:
        """The validation errors within a budget of at most `cap` units (`MAX_FUEL`, the
        event loop's share, unless the caller runs this off the loop)."""
        from ..errors import InvalidSchema, UntrustedInputTooLarge

        limit = self.budget(instance, cap)
        allowed = MAX_PATTERN_WORK_ON_LOOP if cap <= fuel.MAX_FUEL else MAX_PATTERN_WORK
        if self._pattern_work(instance, allowed) > allowed:
            raise UntrustedInputTooLarge(
                "matching the schema's patterns against the value could cost more than "
                f"{allowed:,} RE2 steps (the largest pattern's program x the value's size): make "
                "the value or the pattern smaller"
            )
        try:
            with fuel.metered(limit, self.weights, self.tables):
                return list(self.validator.iter_errors(instance))
        except fuel.OutOfFuel:
            raise UntrustedInputTooLarge(
                f"validating the value against the schema needs more than its work budget of "
                f"{limit:,} units (at most {cap:,}): make the value smaller or the "
                "schema simpler"
            ) from None
        except InvalidSchema:
            raise
        except (
            jsonschema.exceptions.SchemaError,
            jsonschema.exceptions.UnknownType,
            referencing.exceptions.Unresolvable,
            RecursionError,
            re2.error,
        ) as exc:
            raise invalid_schema(f"the schema cannot be evaluated ({type(exc).__name__})") from None
        except Exception as exc:  # fail closed, never an InternalError from a validation
            raise invalid_schema(
                f"the schema cannot be evaluated against this value ({type(exc).__name__})"
            ) from None

    def is_valid(self, instance: Any) -> bool:
        return not self.errors(instance)

    def work(self, instance: Any) -> int:
        """The units validating `instance` spends, without a budget (for tests and benches:
        never on untrusted input)."""
        with fuel.metered(None, self.weights, self.tables) as budget:
            list(self.validator.iter_errors(instance))
        return budget.spent


MAX_PATTERN_WORK_ON_LOOP = 25_000_000
"""Largest RE2 program size x characters validated on the event loop. RE2 is linear, but a
large counted repetition over non-ASCII text defeats its DFA (`DFA out of memory`), and from
then on that program costs about 2 ns per instruction and character (measured: 14 s for
`(?s).{990}z`, 6,935 instructions, over 990,000 characters `é`): this keeps that worst case
near 50 ms; larger values are validated off the loop."""

MAX_PATTERN_WORK = 1_000_000_000
"""The same off the event loop (~2 s, within `ordo.engine.validation`'s deadline): a value
over it is refused (`UntrustedInputTooLarge`) before any pattern runs. A 1,000-character
counted repetition still matches 140,000 characters; a plain pattern (tens of instructions)
every value the JSON caps let through."""


def _largest_program(schema: Any) -> int:
    """The largest RE2 program among the `pattern` values and `patternProperties` keys of a
    (checked) schema, without recursion. Anything that looks like one counts (an `enum`
    member shaped like a schema too): an overestimate only moves work off the loop."""
    largest = 0
    stack = [schema]
    while stack:
        node = stack.pop()
        if type(node) is dict:
            patterns = (
                list(node["patternProperties"])
                if type(node.get("patternProperties")) is dict
                else []
            )
            if type(node.get("pattern")) is str:
                patterns.append(node["pattern"])
            for pattern in patterns:
                program, _ = compile_pattern(pattern)
                if program is not None:
                    largest = max(largest, program.programsize)
            stack.extend(node.values())
        elif type(node) is list:
            stack.extend(node)
    return largest


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
