"""A work budget ("fuel") for every evaluation of a user's JSON Schema (see
`ordo.api.jsonschemas`): defence in depth behind the static bound of
`ordo.api.jsonschema_cost`, so that no schema and no value can hold the event loop even if that
bound were wrong.

`fueled` wraps each keyword function of the validator class, and `fueled_evolve` its `evolve`
(how jsonschema starts evaluating any subschema object): each spends units from the budget of
the running `SchemaValidator.errors` call, held in a contextvar (`metered`). One unit is about
a microsecond of work on the reference machine:

- `DESCEND` units per subschema object evaluated (`evolve`: jsonschema's costliest step);
- 1 per keyword application, plus the length of the keyword's value when the keyword loops
  over it (`allOf`, `anyOf`, `oneOf`, `properties`, `required`, `prefixItems`,
  `dependentSchemas`, a list of `type`s);
- plus the length of the instance when the keyword loops over its members (`items`,
  `contains`, `uniqueItems`, `propertyNames`, `additionalProperties`, `unevaluated*`, ...);
- the `weights` table of the running validator for `enum`, `const`, `dependentRequired` and
  `dependencies` (the size of what the keyword compares);
- one per 1,024 characters of a string a `pattern` is matched against, per pattern and key for
  `patternProperties`, and for `multipleOf` `MULTIPLE_OF` plus one per 2,048 bits of an integer;
- `REF` units per reference followed (the registry look-up);
- `ERROR` units for every error a keyword creates, plus one per 64 characters of its message
  (messages quote the instance: the one cost per error that grows with the value), and one
  per keyword an error passes on its way up from a nested subschema.

Spending past the budget raises `OutOfFuel`, which `SchemaValidator.errors` turns into
`ordo.errors.UntrustedInputTooLarge`: the answer is refused (`InvalidOutput`), the tool call is
rejected and never runs unchecked. A full `MAX_FUEL` budget costs < 100 ms on the reference
machine (docs/security.md).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from jsonschema.exceptions import ValidationError

MAX_FUEL = 80_000
"""Most units one validation may spend (measured: a full budget is < 100 ms of work)."""

MAX_OFF_LOOP_FUEL = 2_000_000
"""Most units one validation run off the event loop may spend (`ordo.engine.validation`):
about 1.5 s of work, within that module's deadline even while sharing the GIL with the loop."""

FUEL_FLOOR = 2_000
"""Units every validation may spend, whatever the size of the instance."""

FUEL_FACTOR = 6
"""Budget per character of the instance (`json_size`) = this times the schema's static cost
bound per value. A value takes at least one character and an error message at a value quotes
it (one unit per 64 characters, at most 64 levels of values quoting the same characters), so
the work plus the messages stay under it when the static bound holds."""

DESCEND = 3
"""Units per subschema object evaluated (`evolve`, ~2.5 µs)."""

ERROR = 8
"""Units per error a keyword creates (the error object, its paths, the generators it passes)."""

REF = 9
"""Units of one `$ref` / `$dynamicRef` / `$recursiveRef` (the registry look-up, ~8 µs)."""

MULTIPLE_OF = 4
"""Units of one `multipleOf` (exact fractions), plus one per `INT_BITS_PER_UNIT` of an int."""

STRING_CHARS_PER_UNIT = 1_024
MESSAGE_CHARS_PER_UNIT = 64
INT_BITS_PER_UNIT = 2_048

Keyword = Callable[[Any, Any, Any, Any], Any]


class OutOfFuel(Exception):
    """The running validation spent its budget."""


@dataclass
class Budget:
    limit: int
    left: int
    weights: dict[int, int] = field(default_factory=dict)
    """id(keyword value) -> units, for the keywords whose cost is the size of their value."""
    tables: dict[Any, Any] = field(default_factory=dict)
    """The running validator's memo (its `enum` tables): lives as long as the validator."""

    @property
    def spent(self) -> int:
        return self.limit - self.left

    def spend(self, units: int) -> None:
        self.left -= units
        if self.left < 0:
            raise OutOfFuel


_BUDGET: contextvars.ContextVar[Budget | None] = contextvars.ContextVar(
    "ordo_schema_fuel", default=None
)


def spend(units: int) -> None:
    """Spend from the running validation's budget (nothing outside `metered`)."""
    budget = _BUDGET.get()
    if budget is not None:
        budget.spend(units)


def current() -> Budget | None:
    """The running validation's budget (None outside `metered`)."""
    return _BUDGET.get()


@contextlib.contextmanager
def metered(
    limit: int | None = None,
    weights: dict[int, int] | None = None,
    tables: dict[Any, Any] | None = None,
) -> Iterator[Budget]:
    """Run the block with a budget of `limit` units (unbounded when None: for measuring)."""
    cap = limit if limit is not None else 2**62
    budget = Budget(cap, cap, weights if weights is not None else {})
    if tables is not None:
        budget.tables = tables
    token = _BUDGET.set(budget)
    try:
        yield budget
    finally:
        _BUDGET.reset(token)


# --- what each keyword spends ----------------------------------------------------------------

_CONTAINERS = (list, dict)


def _plain(value: Any, instance: Any, schema: Any, budget: Budget) -> int:
    return 1


def _value(value: Any, instance: Any, schema: Any, budget: Budget) -> int:
    return 1 + len(value) if type(value) in _CONTAINERS else 1


def _items(value: Any, instance: Any, schema: Any, budget: Budget) -> int:
    return 1 + len(instance) if type(instance) is list else 1


def _members(value: Any, instance: Any, schema: Any, budget: Budget) -> int:
    return 1 + len(instance) if type(instance) is dict else 1


def _keys(instance: dict[Any, Any]) -> int:
    """Units to match a regex against every key: one per key and per 1,024 characters."""
    return len(instance) + sum(map(len, instance)) // STRING_CHARS_PER_UNIT


def _pattern_properties(value: Any, instance: Any, schema: Any, budget: Budget) -> int:
    if type(instance) is not dict or type(value) is not dict:
        return 1
    return 1 + len(value) * _keys(instance)


def _additional_properties(value: Any, instance: Any, schema: Any, budget: Budget) -> int:
    if type(instance) is not dict:
        return 1
    patterns = schema.get("patternProperties") if type(schema) is dict else None
    if type(patterns) is dict and patterns:
        return 1 + len(instance) + len(patterns) * _keys(instance)
    return 1 + len(instance)


def _string(value: Any, instance: Any, schema: Any, budget: Budget) -> int:
    return 1 + len(instance) // STRING_CHARS_PER_UNIT if type(instance) is str else 1


def _ref(value: Any, instance: Any, schema: Any, budget: Budget) -> int:
    return REF


def _multiple_of(value: Any, instance: Any, schema: Any, budget: Budget) -> int:
    if type(instance) is int:
        return MULTIPLE_OF + instance.bit_length() // INT_BITS_PER_UNIT
    return MULTIPLE_OF


def _table(value: Any, instance: Any, schema: Any, budget: Budget) -> int:
    weight = budget.weights.get(id(value))
    return weight if weight is not None else 1 + value_weight(value)


VALUE_KEYWORDS = frozenset(
    {"allOf", "anyOf", "oneOf", "properties", "required", "prefixItems", "dependentSchemas", "type"}
)
ARRAY_KEYWORDS = frozenset(
    {"items", "additionalItems", "contains", "unevaluatedItems", "uniqueItems"}
)
OBJECT_KEYWORDS = frozenset({"propertyNames", "unevaluatedProperties"})
TABLE_KEYWORDS = frozenset({"enum", "const", "dependentRequired", "dependencies"})
REF_KEYWORDS = frozenset({"$ref", "$dynamicRef", "$recursiveRef"})

_WEIGHERS: dict[str, Callable[[Any, Any, Any, Budget], int]] = {
    **dict.fromkeys(VALUE_KEYWORDS, _value),
    **dict.fromkeys(ARRAY_KEYWORDS, _items),
    **dict.fromkeys(OBJECT_KEYWORDS, _members),
    **dict.fromkeys(TABLE_KEYWORDS, _table),
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
    "pattern": _string,
    "multipleOf": _multiple_of,
    **dict.fromkeys(REF_KEYWORDS, _ref),
}


def value_weight(value: Any) -> int:
    """What `enum`, `const`, `dependentRequired` and `dependencies` spend for `value`: the
    number of JSON values in it, without recursion."""
    count = 0
    stack = [value]
    while stack:
        node = stack.pop()
        count += 1
        if type(node) is dict:
            stack.extend(node.values())
        elif type(node) is list:
            stack.extend(node)
    return count


def fueled(keyword: str, fn: Keyword) -> Keyword:
    """`fn` spending from the running budget: its weight up front, then its errors."""
    weigh = _WEIGHERS.get(keyword, _plain)

    def spending(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        budget = _BUDGET.get()
        if budget is None:
            return fn(validator, value, instance, schema)
        budget.spend(weigh(value, instance, schema, budget))
        errors = fn(validator, value, instance, schema)
        return None if errors is None else _charged(errors, budget)

    spending.__name__ = getattr(fn, "__name__", keyword)
    return spending


def _charged(errors: Any, budget: Budget) -> Iterator[ValidationError]:
    for error in errors:
        if isinstance(error.validator, str):  # passed up from a subschema: one more level
            budget.spend(1)
        else:  # made by this keyword
            budget.spend(ERROR + len(error.message) // MESSAGE_CHARS_PER_UNIT)
        yield error


def fueled_evolve(evolve: Callable[..., Any]) -> Callable[..., Any]:
    """A validator class's `evolve` spending `DESCEND` units from the running budget."""

    def spending(self: Any, **changes: Any) -> Any:
        budget = _BUDGET.get()
        if budget is not None:
            budget.spend(DESCEND)
        return evolve(self, **changes)

    return spending


def json_size(instance: Any, limit: int | None = None) -> int:
    """About the length of `instance` as JSON text (at least it, for what JSON can hold),
    without serialising or recursing; stops past `limit`."""
    size = 0
    stack = [instance]
    while stack:
        node = stack.pop()
        kind = type(node)
        if kind is str:
            size += len(node) + 2
        elif kind is dict:
            size += 2 + 4 * len(node)  # braces; quotes, colon and comma per member
            stack.extend(node.keys())
            stack.extend(node.values())
        elif kind is list:
            size += 2 + len(node)
            stack.extend(node)
        elif kind is int:
            size += 2 + node.bit_length() // 3  # digits >= bits / 3.33
        else:
            size += 5  # floats' repr may be longer: `value_count` still bounds the work
        if limit is not None and size > limit:
            break
    return size


def value_count(instance: Any, limit: int | None = None) -> int:
    """The number of JSON values in `instance` (keys count as values; a string counts once
    more per `STRING_CHARS_PER_UNIT` characters, an integer per `INT_BITS_PER_UNIT` bits),
    without recursion; stops past `limit`."""
    count = 0
    stack = [instance]
    while stack:
        node = stack.pop()
        kind = type(node)
        count += 1
        if kind is dict:
            stack.extend(node.keys())
            stack.extend(node.values())
        elif kind is list:
            stack.extend(node)
        elif kind is str:
            count += len(node) // STRING_CHARS_PER_UNIT
        elif kind is int:
            count += node.bit_length() // INT_BITS_PER_UNIT
        if limit is not None and count > limit:
            break
    return count


__all__ = [
    "DESCEND",
    "ERROR",
    "FUEL_FACTOR",
    "FUEL_FLOOR",
    "MAX_FUEL",
    "MAX_OFF_LOOP_FUEL",
    "REF",
    "Budget",
    "OutOfFuel",
    "current",
    "fueled",
    "fueled_evolve",
    "json_size",
    "metered",
    "spend",
    "value_count",
    "value_weight",
]
