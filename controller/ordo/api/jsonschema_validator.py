"""The validator of a checked user JSON Schema (see `ordo.api.jsonschemas`, whose
`validator_for` builds and memoises it): patterns matched with RE2, the linear keywords of
`ordo.api.jsonschema_keywords`, every validation within a work budget
(`ordo.api.jsonschema_fuel`), and `on_loop`, which tells a caller whether a value is cheap
enough to validate on the event loop (`ordo.engine.validation` validates the others off it).
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import re2  # type: ignore[import-untyped]
import referencing
import referencing.jsonschema
from jsonschema.exceptions import ValidationError

from ..errors import InvalidSchema, UntrustedInputTooLarge
from . import jsonschema_fuel as fuel
from .jsonschema_keywords import FALSE_KEYWORD, validator_class, weights
from .jsonschema_re2 import compile_pattern, invalid_schema
from .jsonschema_walk import replace_false

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


__all__ = ["MAX_PATTERN_WORK", "MAX_PATTERN_WORK_ON_LOOP", "SchemaValidator"]
